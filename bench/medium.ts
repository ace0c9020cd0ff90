/**
 * `node dist/bench/medium.js` (section `medium` of bench/run.ts): the medium
 * MLP under dynamic batching at concurrency 32, binary and binary in / JSON
 * out, against the in-process ceiling and the naive wrapper in the same run.
 *
 * The ceiling is onnxruntime alone (bench/ceiling.ts) at batch 64, the best of
 * one and two intra-op threads, measured before and after the points (the
 * figure used is the best of all). Targets (another build, this build, naive)
 * alternate point by point for BENCH_ROUNDS rounds; the table gives medians:
 * requests/s, its ratio to the ceiling and to naive, the cores the server kept
 * busy, its CPU per request on the main thread and on the session thread
 * (the thread holding the model's session) and the rest, the mean executed
 * batch, the session thread's busy share (its runs' wall time, from the
 * statistics' compute time), and how much of the machine was idle.
 *
 * Environment: BENCH_SECONDS (per point, default 3), BENCH_ROUNDS (default 3),
 * BENCH_CONCURRENCY (default 32), BENCH_FORMATS (default "binary,bin→json"),
 * MEDIUM_BASE_DIST (the dist folder of the build to compare with), MEDIUM_ARGS
 * (extra nereid serve flags for this build, space separated), MEDIUM_BASE_ARGS
 * (the same for the other build), MEDIUM_ENV and MEDIUM_BASE_ENV (environment
 * variables for either, "NAME=value ..."; MEDIUM_BASE_ENV alone starts a
 * second server of this build).
 */
import { readFileSync, readdirSync } from 'node:fs';
import path from 'node:path';
import { binaryBody, binaryInJsonOutBody } from './bodies.js';
import { buildBenchModels } from './models.js';
import { spawnSync } from 'node:child_process';
import { DIST, cpuSeconds, startNaive, startNereid } from './processes.js';
import { type HttpBody, runWrk } from './wrk.js';

const SECONDS = Number(process.env.BENCH_SECONDS ?? 3);
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 3);
const CONCURRENCY = Number(process.env.BENCH_CONCURRENCY ?? 32);
const FORMATS = (process.env.BENCH_FORMATS ?? 'binary,bin→json').split(',');
const BASE_DIST = process.env.MEDIUM_BASE_DIST;
const ARGS = (process.env.MEDIUM_ARGS ?? '').split(' ').filter((s) => s !== '');
const BASE_ARGS = (process.env.MEDIUM_BASE_ARGS ?? '').split(' ').filter((s) => s !== '');
/** "NAME=value ..." */
function envOf(text: string | undefined): Record<string, string> {
  const out: Record<string, string> = {};
  for (const kv of (text ?? '').split(' ')) {
    const i = kv.indexOf('=');
    if (i > 0) out[kv.slice(0, i)] = kv.slice(i + 1);
  }
  return out;
}

interface Point {
  readonly rps: number;
  readonly p50us: number;
  /** Server CPU over wall time. */
  readonly cores: number;
  readonly mainUs: number;
  readonly sessionUs: number;
  readonly otherUs: number;
  readonly meanBatch: number;
  /** Share of the point's wall time the session ran (statistics' compute infer per execution). */
  readonly sessionBusy: number;
  /** Idle share of the whole machine during the point (0..1 of all its cores). */
  readonly machineIdle: number;
  readonly errors: number;
}

function median(values: readonly number[]): number {
  const s = [...values].sort((a, b) => a - b);
  return s[Math.floor(s.length / 2)]!;
}

function fmt(n: number, digits = 0): string {
  return n.toLocaleString('en-US', { maximumFractionDigits: digits, minimumFractionDigits: digits });
}

function loadAverage(): string {
  return readFileSync('/proc/loadavg', 'utf8').split(' ')[0]!;
}

/** The machine's idle and total jiffies (all cores). */
function machineTimes(): { idle: number; total: number } {
  const cpu = readFileSync('/proc/stat', 'utf8').split('\n')[0]!.split(/\s+/).slice(1).map(Number);
  const total = cpu.reduce((a, b) => a + b, 0);
  return { idle: (cpu[3] ?? 0) + (cpu[4] ?? 0), total };
}

/** CPU seconds per thread of `pid`, by thread id, with the thread's name. */
function threadTimes(pid: number): Map<number, { name: string; cpu: number }> {
  const out = new Map<number, { name: string; cpu: number }>();
  for (const tid of readdirSync(`/proc/${pid}/task`)) {
    try {
      const name = readFileSync(`/proc/${pid}/task/${tid}/comm`, 'utf8').trim();
      out.set(Number(tid), { name, cpu: cpuSeconds(pid, Number(tid)) });
    } catch {
      // The thread ended meanwhile.
    }
  }
  return out;
}

interface ModelStats {
  inferences: number;
  executions: number;
  /** Sum of compute infer over executions, ns (from the batch statistics). */
  computeNs: number;
}

async function modelStats(port: number, model: string): Promise<ModelStats | undefined> {
  try {
    const j = (await (await fetch(`http://127.0.0.1:${port}/v2/models/${model}/stats`)).json()) as {
      model_stats: Array<{
        inference_count: number;
        execution_count: number;
        batch_stats?: Array<{ compute_infer: { ns: number } }>;
      }>;
    };
    const s = j.model_stats[0]!;
    let computeNs = 0;
    for (const b of s.batch_stats ?? []) computeNs += Number(b.compute_infer.ns);
    return { inferences: Number(s.inference_count), executions: Number(s.execution_count), computeNs };
  } catch {
    return undefined;
  }
}

const medium = (await buildBenchModels()).find((m) => m.plainName === 'mlp_medium')!;

function body(format: string): HttpBody {
  if (format === 'binary') return binaryBody(medium.inputName, medium.outputName, medium.inputSize);
  return binaryInJsonOutBody(medium.inputName, medium.outputName, medium.inputSize);
}

interface Target {
  readonly label: string;
  readonly url: string;
  readonly pid: number;
  /** Nereid's HTTP port (statistics); undefined for naive. */
  readonly statsPort: number | undefined;
}

async function measure(t: Target, format: string): Promise<Point> {
  const model = medium.batchedName;
  const threads0 = threadTimes(t.pid);
  const all0 = cpuSeconds(t.pid);
  const m0 = machineTimes();
  const s0 = t.statsPort === undefined ? undefined : await modelStats(t.statsPort, model);
  const w = await runWrk(t.url, body(format), CONCURRENCY, SECONDS);
  const s1 = t.statsPort === undefined ? undefined : await modelStats(t.statsPort, model);
  const m1 = machineTimes();
  const all1 = cpuSeconds(t.pid);
  const threads1 = threadTimes(t.pid);
  const n = Math.max(1, w.requests);
  let main = 0;
  let session = 0;
  for (const [tid, after] of threads1) {
    const d = after.cpu - (threads0.get(tid)?.cpu ?? 0);
    if (tid === t.pid) main = d;
    // The busiest other thread is the one running the session.
    else if (d > session) session = d;
  }
  const all = all1 - all0;
  const executions = s0 && s1 ? s1.executions - s0.executions : 0;
  return {
    rps: w.requestsPerSec,
    p50us: w.p50us,
    cores: all / w.seconds,
    mainUs: (main * 1e6) / n,
    sessionUs: (session * 1e6) / n,
    otherUs: ((all - main - session) * 1e6) / n,
    meanBatch: executions > 0 ? (s1!.inferences - s0!.inferences) / executions : 0,
    sessionBusy: s0 && s1 ? (s1.computeNs - s0.computeNs) / 1e9 / w.seconds : 0,
    machineIdle: (m1.idle - m0.idle) / Math.max(1, m1.total - m0.total),
    errors: w.errors + w.non2xx,
  };
}

/** onnxruntime alone at batch 64 (bench/ceiling.ts), the best of one and two intra-op threads, infer/s. */
function bestCeiling(): number {
  let best = 0;
  for (const threads of [1, 2]) {
    const r = spawnSync(
      process.execPath,
      [path.join(DIST, 'bench', 'ceiling.js'), medium.onnxFile, String(medium.inputSize), '64', '2'],
      {
        encoding: 'utf8',
        env: { ...process.env, CEILING_THREADS: String(threads) },
      },
    );
    for (const l of r.stdout.split('\n'))
      if (l.trim() !== '') best = Math.max(best, (JSON.parse(l) as { inferPerSec: number }).inferPerSec);
  }
  return best;
}

const ceilings = [bestCeiling()];
const current = await startNereid(medium.repository, ARGS, { env: envOf(process.env.MEDIUM_ENV) });
const base =
  BASE_DIST === undefined && process.env.MEDIUM_BASE_ENV === undefined
    ? undefined
    : await startNereid(medium.repository, BASE_ARGS, {
        env: envOf(process.env.MEDIUM_BASE_ENV),
        ...(BASE_DIST === undefined ? {} : { dist: path.resolve(BASE_DIST) }),
      });
const naive = await startNaive(medium.onnxFile);
const targets: Target[] = [
  ...(base === undefined
    ? []
    : [
        {
          label: 'base',
          url: `http://127.0.0.1:${base.http}/v2/models/${medium.batchedName}/infer`,
          pid: base.proc.child.pid!,
          statsPort: base.http,
        },
      ]),
  {
    label: 'this build',
    url: `http://127.0.0.1:${current.http}/v2/models/${medium.batchedName}/infer`,
    pid: current.proc.child.pid!,
    statsPort: current.http,
  },
  { label: 'naive', url: `http://127.0.0.1:${naive.port}/`, pid: naive.proc.child.pid!, statsPort: undefined },
];
const points = new Map<string, Point[]>();
const loads: string[] = [];
try {
  // Warm up (first runs allocate, the policies settle).
  for (const t of targets) for (const format of FORMATS) await runWrk(t.url, body(format), CONCURRENCY, 1);
  for (let round = 0; round < ROUNDS; round++) {
    loads.push(loadAverage());
    for (const format of FORMATS) {
      // Flip the order every round so that neither target always follows the other.
      const order = round % 2 === 0 ? targets : [...targets].reverse();
      for (const t of order) {
        const key = `${format}\u0000${t.label}`;
        const list = points.get(key) ?? [];
        list.push(await measure(t, format));
        points.set(key, list);
      }
    }
  }
} finally {
  await current.proc.stop();
  await base?.proc.stop();
  await naive.proc.stop();
}
ceilings.push(bestCeiling());
const ceil = Math.max(...ceilings);

const rows: string[][] = [];
for (const format of FORMATS) {
  const of = (label: string) => points.get(`${format}\u0000${label}`)!;
  const naiveRps = median(of('naive').map((p) => p.rps));
  for (const t of targets) {
    const ps = of(t.label);
    const rps = median(ps.map((p) => p.rps));
    const nereid = t.statsPort !== undefined;
    rows.push([
      format,
      t.label,
      fmt(rps),
      fmt(median(ps.map((p) => p.p50us))),
      fmt(rps / ceil, 3),
      nereid ? fmt(rps / naiveRps, 2) : '',
      fmt(median(ps.map((p) => p.cores)), 2),
      fmt(median(ps.map((p) => p.mainUs))),
      nereid ? fmt(median(ps.map((p) => p.sessionUs))) : '',
      fmt(median(ps.map((p) => p.otherUs))),
      nereid ? fmt(median(ps.map((p) => p.meanBatch)), 1) : '',
      nereid ? fmt(median(ps.map((p) => p.sessionBusy)), 2) : '',
      fmt(median(ps.map((p) => p.machineIdle)), 2),
      String(ps.reduce((a, p) => a + p.errors, 0)),
    ]);
  }
}
const header = [
  'body',
  'server',
  'req/s',
  'p50us',
  'x ceiling',
  'x naive',
  'cores',
  'main us',
  'session us',
  'other us',
  'batch',
  'run busy',
  'idle',
  'errors',
];
const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => r[i]!.length)));
const line = (cells: string[]) => cells.map((cell, i) => cell.padStart(widths[i]!)).join('  ');
process.stdout.write(
  `\n${medium.label}, dynamic batching, wrk -t1 -c${CONCURRENCY}, ` +
  `${SECONDS}s per point, medians of ${ROUNDS} alternating rounds; ` +
    `ceiling ${fmt(ceil)} infer/s (onnxruntime alone, batch 64, best of 1 and 2 ` +
    `intra-op threads; before/after: ${ceilings.map((c) => fmt(c)).join(' / ')}); ` +
    `load averages at round starts ${loads.join(' ')}${BASE_DIST === undefined ? '' : `; base = ${BASE_DIST}`}\n` +
    'CPU per request (us): main thread, session thread (the busiest ' +
    'other thread), the rest; cores: server CPU over wall time; ' +
    'run busy: share of the wall time the session ran; idle: idle share of the machine\n' +
    `${line(header)}\n${widths.map((w) => '-'.repeat(w)).join('  ')}\n`,
);
for (const r of rows) process.stdout.write(`${line(r)}\n`);
