/**
 * The two benchmark models and their repositories, generated under
 * bench/models/ (gitignored):
 *
 *   tiny    FP32 10 -> 64 -> 64 -> 1        (latency-bound: the server's overhead dominates)
 *   medium  FP32 512 -> 1024 -> 1024 -> 768 (compute-bound: batching pays)
 *
 * Each size gets a repository with the same model served twice:
 * `<name>` with the default scheduler (Triton's default of two CPU instances)
 * and `<name>_batched` with dynamic batching and one instance: on a 2-core
 * machine one instance running large batches leaves a core to the event
 * loop, and served the medium MLP about a third faster than two did at
 * concurrency 32. Inputs are "input" [batch, in], outputs "output" [batch, out].
 */
import { existsSync } from 'node:fs';
import { mkdir, readFile, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { buildMlp } from '../test/helpers/onnx-builder.js';

export interface BenchModel {
  /** For table titles, e.g. "tiny MLP 10→64→64→1". */
  readonly label: string;
  readonly layers: readonly number[];
  /** Repository folder holding both variants. */
  readonly repository: string;
  /** Served with the default scheduler. */
  readonly plainName: string;
  /** Served with dynamic batching. */
  readonly batchedName: string;
  /** The .onnx file (the same bytes for both variants), for in-process and naive baselines. */
  readonly onnxFile: string;
  readonly inputName: string;
  readonly outputName: string;
  readonly inputSize: number;
  readonly outputSize: number;
  readonly maxBatchSize: number;
}

interface BenchModelSpec {
  readonly size: 'tiny' | 'medium';
  readonly layers: readonly number[];
  readonly seed: number;
}

export const BENCH_MODEL_SPECS: readonly BenchModelSpec[] = [
  { size: 'tiny', layers: [10, 64, 64, 1], seed: 1 },
  { size: 'medium', layers: [512, 1024, 1024, 768], seed: 2 },
];

const MAX_BATCH_SIZE = 64;

function packageRoot(): string {
  let dir = path.dirname(fileURLToPath(import.meta.url));
  while (!existsSync(path.join(dir, 'package.json'))) {
    const parent = path.dirname(dir);
    if (parent === dir) throw new Error('package.json not found above bench/models');
    dir = parent;
  }
  return dir;
}

export function benchModelsDir(): string {
  return path.join(packageRoot(), 'bench', 'models');
}

function configText(name: string, layers: readonly number[], batched: boolean): string {
  return [
    `name: "${name}"`,
    'platform: "onnxruntime_onnx"',
    `max_batch_size: ${MAX_BATCH_SIZE}`,
    `input [ { name: "input" data_type: TYPE_FP32 dims: [ ${layers[0]} ] } ]`,
    `output [ { name: "output" data_type: TYPE_FP32 dims: [ ${layers.at(-1)} ] } ]`,
    ...(batched ? ['dynamic_batching { }', 'instance_group [ { kind: KIND_CPU count: 1 } ]'] : []),
    '',
  ].join('\n');
}

/** Writes `path` unless it already holds exactly these bytes (keeps mtimes stable for polling servers). */
async function writeIfChanged(file: string, bytes: Uint8Array | string): Promise<void> {
  const data = typeof bytes === 'string' ? Buffer.from(bytes) : bytes;
  const current = await readFile(file).catch(() => undefined);
  if (current && Buffer.compare(current, data) === 0) return;
  await mkdir(path.dirname(file), { recursive: true });
  await writeFile(file, data);
}

/** Builds (or refreshes) the bench repositories under `root` (default bench/models) and describes them. */
export async function buildBenchModels(root = benchModelsDir()): Promise<BenchModel[]> {
  const out: BenchModel[] = [];
  for (const spec of BENCH_MODEL_SPECS) {
    const repository = path.join(root, spec.size);
    const plainName = `mlp_${spec.size}`;
    const batchedName = `${plainName}_batched`;
    const onnx = buildMlp(spec.layers, spec.seed, { inputName: 'input', outputName: 'output' }).builder.toBytes();
    for (const [name, batched] of [
      [plainName, false],
      [batchedName, true],
    ] as const) {
      await writeIfChanged(path.join(repository, name, 'config.pbtxt'), configText(name, spec.layers, batched));
      await writeIfChanged(path.join(repository, name, '1', 'model.onnx'), onnx);
    }
    out.push({
      label: `${spec.size} MLP ${spec.layers.join('→')}`,
      layers: spec.layers,
      repository,
      plainName,
      batchedName,
      onnxFile: path.join(repository, plainName, '1', 'model.onnx'),
      inputName: 'input',
      outputName: 'output',
      inputSize: spec.layers[0]!,
      outputSize: spec.layers.at(-1)!,
      maxBatchSize: MAX_BATCH_SIZE,
    });
  }
  return out;
}
