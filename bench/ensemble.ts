/**
 * `node dist/bench/ensemble.js` (section `ensemble` of `npm run bench`): what
 * an ensemble costs over calling its model directly, on one server, same run.
 *
 *   mlp            the medium MLP 512→1024→1024→768 alone (dynamic batching, one instance)
 *   pipeline       an ensemble of two ONNX steps: the medium MLP, then a small head 768→16
 *   single         an ensemble of one step, the medium MLP (pure ensemble overhead)
 *
 * Then the same in-process (Server.infer, one call at a time, interleaved),
 * next to calling the two models one after the other by hand: the ensemble's
 * own cost without HTTP and wrk's noise.
 *
 * Concurrency 32 (throughput: the pipeline against its slowest step alone)
 * and concurrency 1 (added p50), HTTP binary, wrk with one thread. The
 * variants alternate point by point for BENCH_ROUNDS rounds and the table
 * shows medians, because the machine is shared and its speed drifts.
 *
 * Environment: BENCH_SECONDS (per point, default 3), BENCH_ROUNDS (default 3).
 */
import { mkdir, readFile, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { Server } from '../src/core/server.js';
import { silentLogger } from '../src/logger.js';
import { buildMlp } from '../test/helpers/onnx-builder.js';
import type { Tensor } from '../src/tensor/tensor.js';
import { binaryBody } from './bodies.js';
import { benchModelsDir } from './models.js';
import { startNereid } from './processes.js';
import { type WrkResult, runWrk } from './wrk.js';

const SECONDS = Number(process.env.BENCH_SECONDS ?? 3);
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 3);
const LAYERS = [512, 1024, 1024, 768];
const HEAD = [768, 16];

async function writeIfChanged(file: string, data: Uint8Array | string): Promise<void> {
  const bytes = typeof data === 'string' ? Buffer.from(data) : data;
  const current = await readFile(file).catch(() => undefined);
  if (current && Buffer.compare(current, bytes) === 0) return;
  await mkdir(path.dirname(file), { recursive: true });
  await writeFile(file, bytes);
}

function stepConfig(name: string, inputs: number, outputs: number): string {
  return `name: "${name}"
platform: "onnxruntime_onnx"
max_batch_size: 64
input [ { name: "input" data_type: TYPE_FP32 dims: [ ${inputs} ] } ]
output [ { name: "output" data_type: TYPE_FP32 dims: [ ${outputs} ] } ]
dynamic_batching { }
instance_group [ { kind: KIND_CPU count: 1 } ]
`;
}

function ensembleConfig(
  name: string,
  steps: Array<{ model: string; from: string; to: string }>,
  outputs: number,
): string {
  return `name: "${name}"
platform: "ensemble"
max_batch_size: 64
input [ { name: "input" data_type: TYPE_FP32 dims: [ ${LAYERS[0]} ] } ]
output [ { name: "output" data_type: TYPE_FP32 dims: [ ${outputs} ] } ]
ensemble_scheduling {
  step [
${steps.map((s) => `    { model_name: "${s.model}" model_version: -1 input_map { key: "input" value: "${s.from}" }
  output_map { key: "output" value: "${s.to}" } }`).join(',\n')}
  ]
}
`;
}

async function buildRepository(): Promise<string> {
  const repo = path.join(benchModelsDir(), 'ensemble');
  await writeIfChanged(path.join(repo, 'mlp', 'config.pbtxt'), stepConfig('mlp', LAYERS[0]!, LAYERS.at(-1)!));
  await writeIfChanged(path.join(repo, 'mlp', '1', 'model.onnx'), buildMlp(LAYERS, 2).builder.toBytes());
  await writeIfChanged(path.join(repo, 'head', 'config.pbtxt'), stepConfig('head', HEAD[0]!, HEAD[1]!));
  await writeIfChanged(path.join(repo, 'head', '1', 'model.onnx'), buildMlp(HEAD, 3).builder.toBytes());
  await writeIfChanged(
    path.join(repo, 'pipeline', 'config.pbtxt'),
    ensembleConfig(
      'pipeline',
      [
        { model: 'mlp', from: 'input', to: 'hidden' },
        { model: 'head', from: 'hidden', to: 'output' },
      ],
      HEAD[1]!,
    ),
  );
  await writeIfChanged(
    path.join(repo, 'single', 'config.pbtxt'),
    ensembleConfig('single', [{ model: 'mlp', from: 'input', to: 'output' }], LAYERS.at(-1)!),
  );
  await mkdir(path.join(repo, 'pipeline', '1'), { recursive: true });
  await mkdir(path.join(repo, 'single', '1'), { recursive: true });
  return repo;
}

function median(xs: number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  const m = s.length >> 1;
  return s.length % 2 ? s[m]! : (s[m - 1]! + s[m]!) / 2;
}

function fmt(n: number, digits = 0): string {
  return n.toLocaleString('en-US', { maximumFractionDigits: digits, minimumFractionDigits: digits });
}

function printTable(title: string, header: string[], rows: string[][]): void {
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => r[i]!.length)));
  const line = (cells: string[]) => cells.map((c, i) => c.padStart(widths[i]!)).join('  ');
  process.stdout.write(`\n${title}\n${line(header)}\n${widths.map((w) => '-'.repeat(w)).join('  ')}\n`);
  for (const r of rows) process.stdout.write(`${line(r)}\n`);
}

const repo = await buildRepository();
const nereid = await startNereid(repo, []);
try {
  const body = binaryBody('input', 'output', LAYERS[0]!);
  const url = (model: string) => `http://127.0.0.1:${nereid.http}/v2/models/${model}/infer`;
  const run = async (models: string[], c: number): Promise<Map<string, WrkResult[]>> => {
    const out = new Map<string, WrkResult[]>(models.map((m) => [m, []]));
    for (const m of models) await runWrk(url(m), body, c, 1); // warm-up
    for (let r = 0; r < ROUNDS; r++) {
      for (const m of r % 2 === 0 ? models : [...models].reverse())
        out.get(m)!.push(await runWrk(url(m), body, c, SECONDS));
    }
    return out;
  };
  const summary = (rs: WrkResult[]) => ({
    rps: median(rs.map((r) => r.requestsPerSec)),
    p50: median(rs.map((r) => r.p50us)),
    p99: median(rs.map((r) => r.p99us)),
    errors: rs.reduce((n, r) => n + r.errors + r.non2xx, 0),
  });

  const c32 = await run(['mlp', 'single', 'pipeline'], 32);
  const alone = summary(c32.get('mlp')!);
  const single = summary(c32.get('single')!);
  const pipe = summary(c32.get('pipeline')!);
  printTable(
    `ensemble vs its slowest step alone, concurrency 32, HTTP binary, ` +
    `wrk -t1, median of ${ROUNDS} × ${SECONDS}s (alternating)`,
    ['variant', 'infer/s', 'p50 µs', 'p99 µs', 'errors', 'vs mlp alone'],
    [
      ['mlp alone', fmt(alone.rps), fmt(alone.p50), fmt(alone.p99), String(alone.errors), '1.00'],
      [
        'single-step ensemble (mlp)',
        fmt(single.rps),
        fmt(single.p50),
        fmt(single.p99),
        String(single.errors),
        fmt(single.rps / alone.rps, 2),
      ],
      [
        'pipeline (mlp → head)',
        fmt(pipe.rps),
        fmt(pipe.p50),
        fmt(pipe.p99),
        String(pipe.errors),
        fmt(pipe.rps / alone.rps, 2),
      ],
    ],
  );

  const c1 = await run(['mlp', 'single', 'pipeline'], 1);
  const a1 = summary(c1.get('mlp')!);
  const s1 = summary(c1.get('single')!);
  const p1 = summary(c1.get('pipeline')!);
  printTable(
    `added latency at concurrency 1, HTTP binary, wrk -t1, median of ${ROUNDS} × ${SECONDS}s (alternating)`,
    ['variant', 'infer/s', 'p50 µs', 'p99 µs', 'errors', 'p50 added µs'],
    [
      ['mlp alone', fmt(a1.rps), fmt(a1.p50), fmt(a1.p99), String(a1.errors), '0'],
      ['single-step ensemble (mlp)', fmt(s1.rps), fmt(s1.p50), fmt(s1.p99), String(s1.errors), fmt(s1.p50 - a1.p50)],
      ['pipeline (mlp → head)', fmt(p1.rps), fmt(p1.p50), fmt(p1.p99), String(p1.errors), fmt(p1.p50 - a1.p50)],
    ],
  );
  process.stdout.write(
    '\nThe single-step ensemble adds only the ensemble machinery; ' +
    'the pipeline also runs the head (768→16) and its queue.\n',
  );
} finally {
  await nereid.proc.stop();
}

// In-process, one request at a time: the ensemble machinery alone, without HTTP and wrk's noise.
{
  const server = new Server({ modelRepositories: [repo], logger: silentLogger });
  await server.start();
  try {
    const x = new Float32Array(LAYERS[0]!).map((_, i) => Math.sin(i));
    const input: Tensor = { name: 'input', datatype: 'FP32', shape: [1, LAYERS[0]!], data: new Uint8Array(x.buffer) };
    const variants: Record<string, () => Promise<unknown>> = {
      'mlp alone': () => server.infer({ model: 'mlp', inputs: [input] }),
      'single-step ensemble (mlp)': () => server.infer({ model: 'single', inputs: [input] }),
      'mlp, then head, by hand': async () => {
        const hidden = (await server.infer({ model: 'mlp', inputs: [input] })).outputs[0]!;
        return server.infer({ model: 'head', inputs: [{ ...hidden, name: 'input' }] });
      },
      'pipeline (mlp → head)': () => server.infer({ model: 'pipeline', inputs: [input] }),
    };
    const samples = new Map<string, number[]>(Object.keys(variants).map((k) => [k, []]));
    const perRound = 50;
    const rounds = Math.max(4, Math.round((SECONDS * 1e6) / (perRound * 4 * 400)));
    for (let r = 0; r < rounds + 2; r++) {
      for (const [name, call] of Object.entries(variants)) {
        for (let i = 0; i < perRound; i++) {
          const t = process.hrtime.bigint();
          await call();
          if (r >= 2) samples.get(name)!.push(Number(process.hrtime.bigint() - t) / 1000);
        }
      }
    }
    const base = median(samples.get('mlp alone')!);
    const byHand = median(samples.get('mlp, then head, by hand')!);
    printTable(
      `in-process Server.infer(), one at a time, median of ` +
      `${fmt(samples.get('mlp alone')!.length)} calls each (interleaved)`,
      ['variant', 'p50 µs', 'vs mlp alone µs', 'vs by hand µs'],
      [...samples].map(([name, xs]) => {
        const p50 = median(xs);
        const twoSteps = name.includes('head');
        return [name, fmt(p50, 1), fmt(p50 - base, 1), twoSteps ? fmt(p50 - byHand, 1) : ''];
      }),
    );
  } finally {
    await server.stop();
  }
}
