/**
 * Model lifecycle benchmarks, each against a real `nereid serve` process:
 *
 *   cold start  100 small ONNX models in a local repository: time from
 *               spawning the server to /v2/health/ready answering 200 (all
 *               READY), and the server's CPU time by then. The default (small
 *               models' sessions share a pool of threads) and a thread per
 *               session (`session_threads=0`) alternate, BENCH_COLD_ROUNDS
 *               rounds (default 3), as the machine's load swings.
 *               `coldStart()` takes any repository path or URL, so other
 *               repositories (object stores) are measured the same way.
 *   swap        the tiny MLP under a closed loop of 32 connections (wrk):
 *               steady p99, then p99 while the model is reloaded back to back
 *               (explicit mode; each reload builds the new version beside the
 *               old one and swaps), and the failed requests of both.
 *
 * Usage: node dist/bench/lifecycle.js [cold] [swap]
 * Environment: BENCH_SECONDS (per wrk point, default 3), BENCH_COLD_MODELS (default 100),
 * BENCH_CONCURRENCY (swap, default 32).
 */
import { readFileSync } from 'node:fs';
import { mkdir, mkdtemp, rm, utimes, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { buildAddSubModel } from '../test/helpers/onnx-builder.js';
import { jsonBody } from './bodies.js';
import { buildBenchModels } from './models.js';
import { DIST, freePort, startNode } from './processes.js';
import { runWrk } from './wrk.js';

const SECONDS = Number(process.env.BENCH_SECONDS ?? 3);

/** Writes `count` small add/sub INT32[16] ONNX models (one instance each) into a new folder. */
export async function writeSmallModelRepository(count: number): Promise<string> {
  const dir = await mkdtemp(path.join(tmpdir(), 'nereid-bench-cold-'));
  const onnx = buildAddSubModel('INT32', 16).toBytes();
  for (let i = 0; i < count; i++) {
    const name = `small_${String(i).padStart(3, '0')}`;
    await mkdir(path.join(dir, name, '1'), { recursive: true });
    await writeFile(
      path.join(dir, name, 'config.pbtxt'),
      `name: "${name}"
platform: "onnxruntime_onnx"
max_batch_size: 8
input [ { name: "INPUT0" data_type: TYPE_INT32 dims: [ 16 ] }, { name: "INPUT1" data_type: TYPE_INT32 dims: [ 16 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_INT32 dims: [ 16 ] }, { name: "OUTPUT1" data_type: TYPE_INT32 dims: [ 16 ]
  } ]
instance_group [ { kind: KIND_CPU count: 1 } ]
`,
    );
    await writeFile(path.join(dir, name, '1', 'model.onnx'), onnx);
  }
  return dir;
}

export interface ColdStartResult {
  /** Spawn to the first 200 from /v2/health/ready, ms. */
  readyMs: number;
  /** CPU time (user + system, every thread) the server had used when it was ready, ms; NaN where /proc is missing. */
  cpuMs: number;
  /** Models READY according to the repository index. */
  readyModels: number;
}

/** User + system CPU time of a process from /proc (Linux), ms; NaN elsewhere. */
function processCpuMs(pid: number | undefined): number {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    // utime and stime are fields 14 and 15 (1-based, counting pid and comm), in clock ticks of 10 ms.
    return (Number(fields[11]) + Number(fields[12])) * 10;
  } catch {
    return Number.NaN;
  }
}

/**
 * Starts `nereid serve` on `repository` (a path or URL) and measures the time
 * until the readiness probe answers 200, polling every 10 ms. `extraArgs`
 * and `env` go to the server (credentials, cache folders).
 */
export async function coldStart(
  repository: string,
  extraArgs: string[] = [],
  env: Record<string, string> = {},
): Promise<ColdStartResult> {
  const [http, grpc, metrics] = [await freePort(), await freePort(), await freePort()];
  const started = performance.now();
  const proc = startNode(
    path.join(DIST, 'src', 'cli', 'main.js'),
    [
      'serve',
      `--model-repository=${repository}`,
      `--http-port=${http}`,
      `--grpc-port=${grpc}`,
      `--metrics-port=${metrics}`,
      '--http-address=127.0.0.1',
      '--grpc-address=127.0.0.1',
      ...extraArgs,
    ],
    env,
  );
  try {
    const deadline = started + 120_000;
    for (;;) {
      if (performance.now() > deadline) throw new Error('the server did not become ready in 120 s');
      if (proc.child.exitCode !== null) throw new Error(`the server exited with code ${proc.child.exitCode}`);
      try {
        if ((await fetch(`http://127.0.0.1:${http}/v2/health/ready`)).status === 200) break;
      } catch {
        // not listening yet
      }
      await new Promise((r) => setTimeout(r, 10));
    }
    const readyMs = performance.now() - started;
    const cpuMs = processCpuMs(proc.child.pid);
    const index = (await (
      await fetch(`http://127.0.0.1:${http}/v2/repository/index`, { method: 'POST', body: '{"ready":true}' })
    ).json()) as unknown[];
    return { readyMs, cpuMs, readyModels: index.length };
  } finally {
    await proc.stop();
  }
}

async function coldSection(): Promise<void> {
  const count = Number(process.env.BENCH_COLD_MODELS ?? 100);
  const rounds = Number(process.env.BENCH_COLD_ROUNDS ?? 3);
  const repo = await writeSmallModelRepository(count);
  try {
    const variants = [
      { name: 'shared session threads', args: [] as string[], runs: [] as ColdStartResult[] },
      {
        name: 'a thread per session',
        args: ['--backend-config=onnxruntime,session_threads=0'],
        runs: [] as ColdStartResult[],
      },
    ];
    // The first start warms the OS file cache and is not counted.
    await coldStart(repo);
    for (let round = 0; round < rounds; round++) {
      for (const v of round % 2 === 0 ? variants : [...variants].reverse()) v.runs.push(await coldStart(repo, v.args));
    }
    process.stdout.write(
      `\ncold start: ${count} small ONNX models, local repository, ${rounds} ` +
      `alternating rounds (spawn -> readiness 200; server CPU time by then)\n`,
    );
    for (const v of variants) {
      const ms = v.runs.map((r) => r.readyMs).sort((a, b) => a - b);
      const cpu = v.runs.map((r) => r.cpuMs).sort((a, b) => a - b);
      const median = (a: number[]) => a[Math.floor(a.length / 2)]!;
      process.stdout.write(
        `  ${v.name.padEnd(24)} ready median ${median(ms).toFixed(0).padStart(6)} ms (min ${ms[0]!.toFixed(0)}, max ` +
        `${ms[ms.length - 1]!.toFixed(0)})  CPU median ${median(cpu).toFixed(0).padStart(6)} ` +
        `ms  READY ${v.runs.map((r) => r.readyModels).join('/')}\n`,
      );
    }
    process.stdout.write(`  bar: shared session threads (the default) <= 3000 ms\n`);
  } finally {
    await rm(repo, { recursive: true, force: true });
  }
}

async function swapSection(): Promise<void> {
  const concurrency = Number(process.env.BENCH_CONCURRENCY ?? 32);
  const tiny = (await buildBenchModels()).find((m) => m.label.startsWith('tiny'));
  if (!tiny) throw new Error('the tiny bench model is missing');
  const model = tiny;
  const [http, grpc, metrics] = [await freePort(), await freePort(), await freePort()];
  const proc = startNode(path.join(DIST, 'src', 'cli', 'main.js'), [
    'serve',
    `--model-repository=${model.repository}`,
    '--model-control-mode=explicit',
    `--load-model=${model.plainName}`,
    `--http-port=${http}`,
    `--grpc-port=${grpc}`,
    `--metrics-port=${metrics}`,
    '--http-address=127.0.0.1',
    '--grpc-address=127.0.0.1',
  ]);
  try {
    const base = `http://127.0.0.1:${http}`;
    for (let i = 0; i < 300; i++) {
      try {
        if ((await fetch(`${base}/v2/health/ready`)).status === 200) break;
      } catch {
        // starting
      }
      await new Promise((r) => setTimeout(r, 100));
    }
    const url = `${base}/v2/models/${model.plainName}/infer`;
    const body = jsonBody(model.inputName, model.outputName, model.inputSize);
    await runWrk(url, body, concurrency, 1); // warm the connections and the JIT
    const steady = await runWrk(url, body, concurrency, SECONDS);

    // Reload back to back while wrk runs: touch the model file so each load is a real swap.
    let swapping = true;
    let swaps = 0;
    let failedLoads = 0;
    const modelFile = path.join(model.repository, model.plainName, '1', 'model.onnx');
    const reloads = (async () => {
      while (swapping) {
        const now = new Date();
        await utimes(modelFile, now, now);
        const r = await fetch(`${base}/v2/repository/models/${model.plainName}/load`, { method: 'POST', body: '{}' });
        if (r.status === 200) swaps += 1;
        else failedLoads += 1;
        await r.arrayBuffer();
      }
    })();
    const during = await runWrk(url, body, concurrency, SECONDS);
    swapping = false;
    await reloads;

    const row = (name: string, r: typeof steady) =>
      `  ${name.padEnd(22)} ${r.requestsPerSec.toFixed(0).padStart(8)} req/s  p50 ` +
      `${(r.p50us / 1000).toFixed(2).padStart(6)} ms  p99 ` +
      `${(r.p99us / 1000).toFixed(2).padStart(6)} ms  failed ${r.errors + r.non2xx}`;
    process.stdout.write(`\nswap under load: ${model.label}, ${concurrency} connections, ${SECONDS} s per point\n`);
    process.stdout.write(`${row('steady', steady)}\n`);
    process.stdout.write(`${row(`during ${swaps} swaps`, during)}\n`);
    process.stdout.write(
      `  p99 during swaps / steady p99: ${(during.p99us / steady.p99us).toFixed(2)} (bar: <= 2.00); ` +
      `failed loads ${failedLoads}; failed requests ${during.errors + during.non2xx} (bar: 0)\n`,
    );
  } finally {
    await proc.stop();
  }
}

const sections = process.argv.slice(2);
const want = (s: string) => sections.length === 0 || sections.includes(s);
if (process.argv[1] && path.resolve(process.argv[1]) === path.join(DIST, 'bench', 'lifecycle.js')) {
  if (want('cold')) await coldSection();
  if (want('swap')) await swapSection();
}
