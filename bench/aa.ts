/**
 * `node dist/bench/aa.js` (section `aa` of bench/run.ts): why two servers of
 * one build, started alike, can serve at different rates for a whole run.
 * AA_SERVERS (default 4) identical servers of the tiny MLP (dynamic batching,
 * the trace bench's model and flags, tracing off) take wrk -c32 binary in
 * turn, the order rotating each round, BENCH_ROUNDS rounds (default 6) of
 * BENCH_SECONDS (default 2). Per server and round it records requests/s,
 * CPU per request by thread group (/proc: the main thread, the session
 * threads, V8's helpers, libuv's pool, the rest), the requests per batch
 * (model statistics), batches by reason (nereid_batches_total) and the delay
 * in effect (nereid_batch_delay_seconds), then prints each server's medians
 * against the median server's in the same round, and each load's CPU split
 * (the main thread, the server, wrk, the rest of the machine). AA_FLAGS adds
 * server flags (comma-separated); AA_POLICY=adaptive or fixed serves the model
 * with the batching guide's 100 µs delay under that policy (bench/adaptive.ts's
 * setting) instead of the trace bench's none. Findings: docs/tracing.md,
 * "How the bench reads a cost".
 */
import { mkdirSync, readFileSync, readdirSync, rmSync, writeFileSync, copyFileSync } from 'node:fs';
import path from 'node:path';
import { binaryBody } from './bodies.js';
import { benchModelsDir, buildBenchModels } from './models.js';
import { cpuSeconds, startNereid } from './processes.js';
import { runWrk } from './wrk.js';

const SECONDS = Number(process.env.BENCH_SECONDS ?? 2);
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 6);
const SERVERS = Number(process.env.AA_SERVERS ?? 4);
const FLAGS = (process.env.AA_FLAGS ?? '').split(',').filter((x) => x !== '');
const POLICY = process.env.AA_POLICY;

const median = (xs: readonly number[]): number => {
  const s = [...xs].sort((a, b) => a - b);
  return s.length % 2 === 1 ? s[(s.length - 1) >> 1]! : (s[s.length / 2 - 1]! + s[s.length / 2]!) / 2;
};

const [tiny] = await buildBenchModels();
const model = tiny!;
let repo = model.repository;
if (POLICY !== undefined) {
  // The batched model alone, with the guide's delay and the policy named.
  repo = path.join(benchModelsDir(), `aa-${POLICY}`);
  rmSync(repo, { recursive: true, force: true });
  const src = path.join(model.repository, model.batchedName);
  mkdirSync(path.join(repo, model.batchedName, '1'), { recursive: true });
  const config = readFileSync(path.join(src, 'config.pbtxt'), 'utf8').replace(
    'dynamic_batching { }',
    'dynamic_batching { max_queue_delay_microseconds: 100 }',
  );
  writeFileSync(
    path.join(repo, model.batchedName, 'config.pbtxt'),
    `${config}\nparameters { key: "batching_policy" value: { string_value: "${POLICY}" } }\n`,
  );
  copyFileSync(path.join(src, '1', 'model.onnx'), path.join(repo, model.batchedName, '1', 'model.onnx'));
}

/** Thread groups by name: CPU seconds of each. */
function threadCpu(pid: number): Map<string, number> {
  const sums = new Map<string, number>();
  for (const tid of readdirSync(`/proc/${pid}/task`)) {
    try {
      const comm = readFileSync(`/proc/${pid}/task/${tid}/comm`, 'utf8').trim();
      const group =
        Number(tid) === pid ? 'main' : comm.startsWith('V8Worker') ? 'v8' : comm.startsWith('libuv') ? 'uv' : comm;
      sums.set(group, (sums.get(group) ?? 0) + cpuSeconds(pid, Number(tid)));
    } catch {
      // a thread gone since the listing
    }
  }
  return sums;
}

/** The machine's CPU ticks (/proc/stat): all, idle (with iowait), steal. */
function machine(): { total: number; idle: number; steal: number } {
  const f = readFileSync('/proc/stat', 'utf8').split('\n')[0]!.trim().split(/\s+/).slice(1).map(Number);
  return { total: f.slice(0, 8).reduce((x, y) => x + y, 0), idle: f[3]! + f[4]!, steal: f[7]! };
}

/** CPU seconds of this process's reaped children (wrk). */
function childCpu(): number {
  const text = readFileSync('/proc/self/stat', 'utf8');
  const fields = text.slice(text.lastIndexOf(')') + 2).split(' ');
  return (Number(fields[13]) + Number(fields[14])) / 100;
}

interface Snapshot {
  requests: number;
  batches: number;
  bySize: Map<number, number>;
  reasons: Map<string, number>;
  delayUs: number;
  cpu: Map<string, number>;
}

async function snapshot(s: { http: number; metrics: number; pid: number }): Promise<Snapshot> {
  const stats = (await (await fetch(`http://127.0.0.1:${s.http}/v2/models/${model.batchedName}/stats`)).json()) as {
    model_stats: Array<{
      inference_count: number;
      execution_count: number;
      batch_stats?: Array<{ batch_size: number; compute_infer: { count: number } }>;
    }>;
  };
  const m = stats.model_stats[0]!;
  const bySize = new Map<number, number>();
  for (const b of m.batch_stats ?? []) bySize.set(Number(b.batch_size), Number(b.compute_infer.count));
  const text = await (await fetch(`http://127.0.0.1:${s.metrics}/metrics`)).text();
  const reasons = new Map<string, number>();
  for (const x of text.matchAll(/^nereid_batches_total\{[^}]*reason="(\w+)"[^}]*\} (\S+)$/gm))
    reasons.set(x[1]!, Number(x[2]));
  const delay = /^nereid_batch_delay_seconds\{[^}]*\} (\S+)$/m.exec(text);
  return {
    requests: Number(m.inference_count),
    batches: Number(m.execution_count),
    bySize,
    reasons,
    delayUs: delay === null ? NaN : Number(delay[1]) * 1e6,
    cpu: threadCpu(s.pid),
  };
}

interface Row {
  rps: number;
  /** Requests/s over the median server's in the same round. */
  vsRound: number;
  /** The main thread's CPU per request over the median server's in the same round. */
  mainVsRound: number;
  /** The main thread's CPU seconds per second of load. */
  busy: number;
  /** The machine's idle and steal shares during the load (/proc/stat). */
  idle: number;
  steal: number;
  /** CPU seconds per second of load: wrk, the whole server, and everything else on the machine. */
  wrk: number;
  server: number;
  rest: number;
  /** Requests per batch in each quarter of the load (statistics polled while it runs). */
  quarters: number[];
  p50: number;
  batch: number;
  /** Share of batches by size bucket: 1, 2-3, 4-7, 8-15, 16+. */
  sizes: number[];
  reasons: Map<string, number>;
  delayUs: number;
  cpu: Map<string, number>;
}

const BUCKETS = [1, 2, 4, 8, 16];
const bucket = (n: number): number => BUCKETS.findLastIndex((b) => n >= b);

const body = binaryBody(model.inputName, model.outputName, model.inputSize);
const servers = await Promise.all(
  Array.from({ length: SERVERS }, () => startNereid(repo, ['--allow-metrics=true', ...FLAGS])),
);
const rows: Row[][] = servers.map(() => []);
try {
  const targets = servers.map((s) => ({ ...s, pid: s.proc.child.pid! }));
  const url = (port: number): string => `http://127.0.0.1:${port}/v2/models/${model.batchedName}/infer`;
  for (const s of targets) await runWrk(url(s.http), body, 32, 1); // warm-up, as the trace bench does
  for (let round = 0; round < ROUNDS; round++) {
    for (let k = 0; k < SERVERS; k++) {
      const i = (k + round) % SERVERS;
      const s = targets[i]!;
      const a = await snapshot(s);
      const m0 = machine();
      const w0 = childCpu();
      const s0 = cpuSeconds(s.pid);
      const load = runWrk(url(s.http), body, 32, SECONDS);
      const quarters: number[] = [];
      let prev = a;
      for (let q = 0; q < 4; q++) {
        await new Promise((resolve) => setTimeout(resolve, (SECONDS * 1000) / 4 - 20));
        const now = await snapshot(s);
        quarters.push((now.requests - prev.requests) / Math.max(1, now.batches - prev.batches));
        prev = now;
      }
      const r = await load;
      const m1 = machine();
      const w1 = childCpu();
      const s1 = cpuSeconds(s.pid);
      const cores = (m1.total - m0.total) / 100 / r.seconds;
      const b = await snapshot(s);
      const ticks = m1.total - m0.total;
      const wall = r.seconds;
      const n = Math.max(1, b.requests - a.requests);
      const sizes = BUCKETS.map(() => 0);
      for (const [size, count] of b.bySize) sizes[bucket(size)]! += count - (a.bySize.get(size) ?? 0);
      const batches = Math.max(1, b.batches - a.batches);
      const reasons = new Map<string, number>();
      for (const [k2, v] of b.reasons) reasons.set(k2, (100 * (v - (a.reasons.get(k2) ?? 0))) / batches);
      const cpu = new Map<string, number>();
      for (const [k2, v] of b.cpu) cpu.set(k2, ((v - (a.cpu.get(k2) ?? 0)) * 1e6) / n);
      rows[i]!.push({
        rps: r.requestsPerSec,
        vsRound: NaN,
        mainVsRound: NaN,
        idle: (m1.idle - m0.idle) / ticks,
        steal: (m1.steal - m0.steal) / ticks,
        quarters,
        wrk: (w1 - w0) / wall,
        server: (s1 - s0) / wall,
        rest: cores * (1 - (m1.idle - m0.idle) / (m1.total - m0.total)) - (w1 - w0 + s1 - s0) / wall,
        busy: ((b.cpu.get('main') ?? 0) - (a.cpu.get('main') ?? 0)) / wall,
        p50: r.p50us,
        batch: n / batches,
        sizes: sizes.map((x) => (100 * x) / batches),
        reasons,
        delayUs: b.delayUs,
        cpu,
      });
    }
    const mid = median(rows.map((rs) => rs[round]!.rps));
    const midMain = median(rows.map((rs) => rs[round]!.cpu.get('main') ?? 0));
    for (const rs of rows) {
      rs[round]!.vsRound = rs[round]!.rps / mid;
      rs[round]!.mainVsRound = (rs[round]!.cpu.get('main') ?? 0) / midMain;
    }
  }
} finally {
  await Promise.all(servers.map((s) => s.proc.stop()));
}

const groups = [...new Set(rows.flatMap((rs) => rs.flatMap((r) => [...r.cpu.keys()])))].sort();
const reasonNames = [...new Set(rows.flatMap((rs) => rs.flatMap((r) => [...r.reasons.keys()])))].sort();
const list = (rs: readonly Row[], f: (r: Row) => number, d: number): string => rs.map((r) => f(r).toFixed(d)).join(' ');
process.stdout.write(
  `\nA/A: ${SERVERS} identical servers, ${model.label}${POLICY === undefined ? '' : `, ${POLICY}`}, ` +
    `wrk -c32 binary, ${ROUNDS} rounds × ${SECONDS}s, order rotating; medians over rounds` +
    `${FLAGS.length > 0 ? `; ${FLAGS.join(' ')}` : ''}\n`,
);
const head = [
  'server', 'req/s', '×round', 'main×round', 'main busy', 'p50us', 'req/batch',
  ...BUCKETS.map((b, k) => `%b${b}${k + 1 < BUCKETS.length ? `-${BUCKETS[k + 1]! - 1}` : '+'}`),
  ...reasonNames.map((r) => `%${r}`), 'delay us', ...groups.map((g) => `µs ${g}`),
];
process.stdout.write(`${head.map((h) => h.padStart(11)).join('')}\n`);
for (const [i, rs] of rows.entries()) {
  const m = (f: (r: Row) => number, d = 1): string => median(rs.map(f)).toFixed(d).padStart(11);
  process.stdout.write(
    [
      String(i).padStart(11),
      m((r) => r.rps, 0),
      m((r) => r.vsRound, 3),
      m((r) => r.mainVsRound, 3),
      m((r) => r.busy, 2),
      m((r) => r.p50, 0),
      m((r) => r.batch, 2),
      ...BUCKETS.map((_, k) => m((r) => r.sizes[k]!)),
      ...reasonNames.map((name) => m((r) => r.reasons.get(name) ?? 0)),
      m((r) => r.delayUs, 0),
      ...groups.map((g) => m((r) => r.cpu.get(g) ?? 0)),
    ].join('') + '\n',
  );
}
process.stdout.write('\nby round, per server: req/s × the round\'s median server, main thread µs per request × its\n');
for (const [i, rs] of rows.entries()) {
  process.stdout.write(
    `${i}: req/s ${list(rs, (r) => r.vsRound, 2)}; main ${list(rs, (r) => r.mainVsRound, 2)}; ` +
      `req/batch ${list(rs, (r) => r.batch, 1)}\n`,
  );
}
process.stdout.write(
  '\neach load (CPU seconds per second: the main thread, the whole server, wrk, the rest of the machine; ' +
    'requests per batch by quarter):\n',
);
for (const [i, rs] of rows.entries()) {
  for (const r of rs) {
    process.stdout.write(
      `${i}: ${r.rps.toFixed(0).padStart(6)}/s main ${(r.cpu.get('main') ?? 0).toFixed(1)} µs; CPU main ` +
        `${r.busy.toFixed(2)} server ${r.server.toFixed(2)} wrk ${r.wrk.toFixed(2)} rest ${r.rest.toFixed(2)} ` +
        `idle ${r.idle.toFixed(2)} steal ${r.steal.toFixed(2)}; ` +
        `req/batch ${r.quarters.map((x) => x.toFixed(1)).join(' ')}\n`,
    );
  }
}
