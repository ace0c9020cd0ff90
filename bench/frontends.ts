/**
 * `node dist/bench/frontends.js` (section `frontends` of bench/run.ts): the HTTP frontend on the main thread
 * (`--frontend-threads=1`) against frontend threads (the default, `auto`, or 2 where auto gives 1; or
 * FRONTENDS_THREADS), and the naive node:http wrapper, in the same run. Tiny and medium MLP under the dynamic
 * batcher, binary and JSON, concurrency 8 and 32 (wrk, one thread); the servers are started once and their
 * points alternated for BENCH_ROUNDS rounds, medians printed. Beside each point: the server's CPU (all its
 * threads) per request, and for the threaded server its main thread's share (the rest is the frontend threads
 * and the session thread). Then the crossing itself: a postMessage round trip with a transferred buffer, as a
 * frontend thread's request and answer make it (bench/crossing.ts sets it against a SharedArrayBuffer ring).
 * Then, unless FRONTENDS_OVERLOAD=0, the overload section (bench/overload.ts: 2× capacity on a bounded queue)
 * once per setting.
 * Bars: tiny MLP c32 ≥ 1.4× one thread and ≥ 2× naive; no point below 0.95× one thread; overload goodput ≥ 0.9×.
 * Environment: BENCH_SECONDS (per point, default 3), BENCH_ROUNDS (default 3), BENCH_MODELS, BENCH_CONCURRENCY
 * (default "8,32"), BENCH_FORMATS (default "binary,json"), FRONTENDS_THREADS (default auto, or 2 where auto is 1).
 */
import { spawnSync } from 'node:child_process';
import path from 'node:path';
import { MessageChannel, Worker } from 'node:worker_threads';
import { binaryBody, jsonBody } from './bodies.js';
import { type BenchModel, buildBenchModels } from './models.js';
import { DIST, type Proc, cpuSeconds, startNaive, startNereid } from './processes.js';
import { type HttpBody, runWrk } from './wrk.js';
import { budgetFrontendThreads } from '../src/cli/serve.js';

const SECONDS = Number(process.env.BENCH_SECONDS ?? 3);
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 3);
const CONCURRENCY = (process.env.BENCH_CONCURRENCY ?? '8,32').split(',').map(Number);
const FORMATS = (process.env.BENCH_FORMATS ?? 'binary,json').split(',');
/** The default (`auto`), or 2 where the default is one thread (up to 3 cores): there is nothing to compare then. */
const THREADS = process.env.FRONTENDS_THREADS ?? (budgetFrontendThreads() > 1 ? 'auto' : '2');

interface Target {
  readonly name: string;
  readonly proc: Proc;
  readonly port: number;
  readonly path: string;
}

interface Point {
  rps: number;
  p50us: number;
  cpuUsPerRequest: number;
  /** The main thread's share (scheduler, Server.infer, the crossing's main side; everything with one thread). */
  mainUsPerRequest: number;
}

function median(xs: number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.floor(s.length / 2)]!;
}

async function measure(t: Target, body: HttpBody, connections: number): Promise<Point> {
  const pid = t.proc.child.pid!;
  const before = cpuSeconds(pid);
  const mainBefore = cpuSeconds(pid, pid);
  const r = await runWrk(`http://127.0.0.1:${t.port}${t.path}`, body, connections, SECONDS);
  const cpu = cpuSeconds(pid) - before;
  const main = cpuSeconds(pid, pid) - mainBefore;
  if (r.errors > 0 || r.non2xx > 0) process.stderr.write(`${t.name}: ${r.errors} errors, ${r.non2xx} non-2xx\n`);
  const n = Math.max(1, r.requests);
  const cpuUsPerRequest = (cpu * 1e6) / n;
  return { rps: r.requestsPerSec, p50us: r.p50us, cpuUsPerRequest, mainUsPerRequest: (main * 1e6) / n };
}

function fmt(n: number, digits = 0): string {
  return n.toLocaleString('en-US', { maximumFractionDigits: digits, minimumFractionDigits: digits });
}

async function modelSection(model: BenchModel): Promise<void> {
  const threadsArg = [`--frontend-threads=${THREADS}`];
  const launch = { env: { NEREID_FRONTEND_THREADS: undefined } };
  const one = await startNereid(model.repository, ['--frontend-threads=1'], launch);
  const many = await startNereid(model.repository, threadsArg, launch);
  const naive = await startNaive(model.onnxFile);
  const infer = `/v2/models/${model.batchedName}/infer`;
  const targets: Target[] = [
    { name: 'threads=1', proc: one.proc, port: one.http, path: infer },
    { name: `threads=${THREADS}`, proc: many.proc, port: many.http, path: infer },
    { name: 'naive', proc: naive.proc, port: naive.port, path: '/' },
  ];
  try {
    const rows: string[][] = [];
    for (const format of FORMATS) {
      const body =
        format === 'json'
          ? jsonBody(model.inputName, model.outputName, model.inputSize)
          : binaryBody(model.inputName, model.outputName, model.inputSize);
      for (const c of CONCURRENCY) {
        // Warm every server, then alternate the order round by round.
        for (const t of targets) await runWrk(`http://127.0.0.1:${t.port}${t.path}`, body, c, 1);
        const points = new Map<string, Point[]>(targets.map((t) => [t.name, []]));
        for (let round = 0; round < ROUNDS; round++) {
          const order = round % 2 === 0 ? targets : [...targets].reverse();
          for (const t of order) points.get(t.name)!.push(await measure(t, body, c));
        }
        const med = (name: string, key: keyof Point): number => median(points.get(name)!.map((p) => p[key]));
        const [base, threaded, wrapper] = targets.map((t) => t.name) as [string, string, string];
        rows.push([
          format,
          String(c),
          fmt(med(base, 'rps')),
          fmt(med(base, 'cpuUsPerRequest'), 1),
          fmt(med(threaded, 'rps')),
          fmt(med(threaded, 'cpuUsPerRequest'), 1),
          fmt(med(threaded, 'mainUsPerRequest'), 1),
          fmt(med(wrapper, 'rps')),
          fmt(med(wrapper, 'cpuUsPerRequest'), 1),
          fmt(med(threaded, 'rps') / med(base, 'rps'), 2),
          fmt(med(threaded, 'rps') / med(wrapper, 'rps'), 2),
        ]);
      }
    }
    printTable(`${model.label}, dynamic batching, wrk -t1, ${SECONDS} s × ${ROUNDS} rounds (medians)`, [
      'format',
      'c',
      '1 thread rps',
      'CPU µs/req',
      `${targets[1]!.name} rps`,
      'CPU µs/req',
      'main µs/req',
      'naive rps',
      'CPU µs/req',
      '× 1 thread',
      '× naive',
    ], rows);
  } finally {
    await Promise.all(targets.map((t) => t.proc.stop()));
  }
}

function printTable(title: string, header: string[], rows: string[][]): void {
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => r[i]!.length)));
  const line = (cells: string[]): string => cells.map((c, i) => c.padStart(widths[i]!)).join('  ');
  process.stdout.write(`\n${title}\n${line(header)}\n${widths.map((w) => '-'.repeat(w)).join('  ')}\n`);
  for (const r of rows) process.stdout.write(`${line(r)}\n`);
}

/** The crossing: round trips of a message carrying a transferred buffer, there and back, as a request makes. */
async function crossing(bytes: number, trips = 20_000): Promise<number> {
  const echo = new Worker(
    `const { parentPort } = require('node:worker_threads');
     parentPort.once('message', (port) => port.on('message', (m) => port.postMessage(m, [m.data.buffer])));`,
    { eval: true },
  );
  const { port1, port2 } = new MessageChannel();
  echo.postMessage(port2, [port2]);
  let data: Uint8Array = new Uint8Array(bytes);
  const trip = (): Promise<void> =>
    new Promise((resolve) => {
      port1.once('message', (m: { data: Uint8Array }) => {
        data = m.data;
        resolve();
      });
      port1.postMessage({ t: 'infer', id: 1, model: 'm', data }, [data.buffer as ArrayBuffer]);
    });
  for (let i = 0; i < 1000; i++) await trip();
  const start = process.hrtime.bigint();
  for (let i = 0; i < trips; i++) await trip();
  const us = Number(process.hrtime.bigint() - start) / 1000 / trips;
  port1.close();
  await echo.terminate();
  return us;
}

const onlyModels = process.env.BENCH_MODELS?.split(',');
const models = (await buildBenchModels()).filter((m) => !onlyModels || onlyModels.some((o) => m.plainName.includes(o)));
for (const m of models) await modelSection(m);
printTable('the crossing: postMessage round trip with a transferred buffer (µs, sequential)', ['bytes', 'µs/trip'], [
  [String(64), fmt(await crossing(64), 1)],
  [String(4096), fmt(await crossing(4096), 1)],
  [String(65536), fmt(await crossing(65536), 1)],
]);
if (process.env.FRONTENDS_OVERLOAD !== '0') {
  const many = THREADS === 'auto' ? String(budgetFrontendThreads()) : THREADS;
  for (const threads of ['1', many]) {
    process.stdout.write(`\noverload with --frontend-threads=${threads}\n`);
    const env = { ...process.env, NEREID_FRONTEND_THREADS: threads };
    spawnSync(process.execPath, [path.join(DIST, 'bench', 'overload.js')], { stdio: 'inherit', env });
  }
}
