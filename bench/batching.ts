/**
 * Dynamic batching, in process: the medium MLP (512→1024→1024→768, FP32)
 * served with the default scheduler and with the dynamic batcher, driven by
 * a closed loop of concurrent Server.infer calls. Prints throughput and the
 * mean executed batch size, then the queue delay actually obtained for
 * sub-millisecond max_queue_delay_microseconds settings.
 *
 * Usage: node dist/bench/batching.js
 * Environment: BENCH_SECONDS (per point, default 3), BENCH_CONCURRENCY (default 32),
 * BENCH_INSTANCES (instances per model, default 1).
 */
import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { Server } from '../src/core/server.js';
import { buildMlp } from '../test/helpers/onnx-builder.js';
import type { Tensor } from '../src/tensor/tensor.js';

const SECONDS = Number(process.env.BENCH_SECONDS ?? 3);
const CONCURRENCY = Number(process.env.BENCH_CONCURRENCY ?? 32);
const INSTANCES = Number(process.env.BENCH_INSTANCES ?? 1);
const LAYERS = [512, 1024, 1024, 768] as const;
const MAX_BATCH = 32;

interface Variant {
  name: string;
  batching: string | undefined;
}

const VARIANTS: Variant[] = [
  { name: 'mlp_default', batching: undefined },
  { name: 'mlp_dynamic', batching: 'dynamic_batching { }' },
  { name: 'mlp_delay100', batching: 'dynamic_batching { max_queue_delay_microseconds: 100 }' },
  { name: 'mlp_delay500', batching: 'dynamic_batching { max_queue_delay_microseconds: 500 }' },
];

function configText(v: Variant): string {
  return [
    `name: "${v.name}"`,
    'backend: "onnxruntime"',
    `max_batch_size: ${MAX_BATCH}`,
    `input [ { name: "input" data_type: TYPE_FP32 dims: [ ${LAYERS[0]} ] } ]`,
    `output [ { name: "output" data_type: TYPE_FP32 dims: [ ${LAYERS.at(-1)} ] } ]`,
    `instance_group [ { kind: KIND_CPU count: ${INSTANCES} } ]`,
    v.batching ?? '',
    '',
  ].join('\n');
}

async function writeRepository(): Promise<string> {
  const dir = await mkdtemp(path.join(tmpdir(), 'nereid-bench-batching-'));
  const onnx = buildMlp(LAYERS, 42).builder.toBytes();
  for (const v of VARIANTS) {
    await mkdir(path.join(dir, v.name, '1'), { recursive: true });
    await writeFile(path.join(dir, v.name, 'config.pbtxt'), configText(v));
    await writeFile(path.join(dir, v.name, '1', 'model.onnx'), onnx);
  }
  return dir;
}

function inputTensor(): Tensor {
  const data = new Float32Array(LAYERS[0]).map((_, i) => Math.sin(i));
  return { name: 'input', datatype: 'FP32', shape: [1, LAYERS[0]], data: new Uint8Array(data.buffer) };
}

interface Point {
  inferPerSec: number;
  meanBatch: number;
  meanQueueUs: number;
}

/** Runs `concurrency` closed loops for SECONDS and reads the model's statistics around it. */
async function drive(server: Server, model: string, concurrency: number, seconds: number): Promise<Point> {
  const inputs = [inputTensor()];
  const before = server.modelStatistics(model)[0]!;
  const end = process.hrtime.bigint() + BigInt(Math.round(seconds * 1e9));
  let completed = 0;
  const start = process.hrtime.bigint();
  const loop = async (): Promise<void> => {
    while (process.hrtime.bigint() < end) {
      await server.infer({ model, inputs });
      completed++;
    }
  };
  await Promise.all(Array.from({ length: concurrency }, loop));
  const elapsed = Number(process.hrtime.bigint() - start) / 1e9;
  const after = server.modelStatistics(model)[0]!;
  const executions = after.execution_count - before.execution_count;
  const inferences = after.inference_count - before.inference_count;
  const queue = after.inference_stats.queue;
  const queueBefore = before.inference_stats.queue;
  return {
    inferPerSec: completed / elapsed,
    meanBatch: executions === 0 ? 0 : inferences / executions,
    meanQueueUs: (queue.ns - queueBefore.ns) / Math.max(1, queue.count - queueBefore.count) / 1000,
  };
}

function row(cells: string[], widths: number[]): string {
  return cells.map((c, i) => c.padStart(widths[i]!)).join('  ');
}

const dir = await writeRepository();
const server = new Server({ modelRepositories: [dir] });
try {
  await server.start();
  // Warm up every model (first runs allocate).
  for (const v of VARIANTS) await drive(server, v.name, 4, 0.3);

  const widths = [28, 12, 10, 8];
  process.stdout.write(
    `\nMLP ${LAYERS.join('→')}, in-process Server.infer, concurrency ` +
    `${CONCURRENCY}, ${INSTANCES} instance(s), ${SECONDS}s per point\n`,
  );
  process.stdout.write(`${row(['scheduler', 'infer/s', 'mean batch', 'ratio'], widths)}\n`);
  const base = await drive(server, 'mlp_default', CONCURRENCY, SECONDS);
  process.stdout.write(
    `${row(['default (no batching)', base.inferPerSec.toFixed(0), base.meanBatch.toFixed(2), '1.00'], widths)}\n`,
  );
  const dyn = await drive(server, 'mlp_dynamic', CONCURRENCY, SECONDS);
  process.stdout.write(
    `${row(
      [
        'dynamic_batching { }',
        dyn.inferPerSec.toFixed(0),
        dyn.meanBatch.toFixed(2),
        (dyn.inferPerSec / base.inferPerSec).toFixed(2),
      ],
      widths,
    )}\n`,
  );

  // One request at a time: each waits the whole delay alone, so its queue time is the delay obtained.
  process.stdout.write('\nQueue delay obtained at concurrency 1 (mean queue time per request)\n');
  process.stdout.write(`${row(['max_queue_delay_microseconds', 'obtained µs', 'excess µs', ''], widths)}\n`);
  for (const [model, setting] of [
    ['mlp_dynamic', 0],
    ['mlp_delay100', 100],
    ['mlp_delay500', 500],
  ] as const) {
    const p = await drive(server, model, 1, Math.min(SECONDS, 2));
    process.stdout.write(
      `${row([String(setting), p.meanQueueUs.toFixed(1), (p.meanQueueUs - setting).toFixed(1), ''], widths)}\n`,
    );
  }
} finally {
  await server.stop();
  await rm(dir, { recursive: true, force: true });
}
