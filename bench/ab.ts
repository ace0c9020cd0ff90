/**
 * `node dist/bench/ab.js` (section `ab` of bench/run.ts): this build against
 * another build of Nereid, same models, same load, alternated point by point,
 * so that a slowdown between two commits shows as a ratio measured in one run
 * (docs/benchmarks.md, "A/B against another build").
 *
 * Each point is one wrk run (one thread) on one server; per round every point
 * runs on both builds, the order flipped every round. Printed per point:
 * medians of requests/s, p50 and the server's CPU per request (all its
 * threads), and the median and range of the per-round ratios this / base.
 *
 * Environment: AB_BASE_DIST (the dist folder of the build to compare with;
 * without it only this build is measured), AB_DIST (the dist folder to use as
 * "this build", default this one: two older builds can be compared),
 * AB_ARGS / AB_BASE_ARGS (extra nereid serve flags, space separated),
 * AB_ENV / AB_BASE_ENV (environment variables for either, "NAME=value ...";
 * AB_BASE_ENV or AB_BASE_ARGS without AB_BASE_DIST starts this build twice),
 * BENCH_SECONDS (per point, default 3), BENCH_ROUNDS (default 3),
 * BENCH_MODELS (default "tiny,medium"), BENCH_FORMATS (default
 * "json,binary"; also "bin→json", and "grpc": ModelInfer with raw input
 * contents through h2load, one stream per connection, p50 there being
 * h2load's mean), BENCH_CONCURRENCY (default "32"),
 * AB_SCHEDULERS (default "plain"; "plain,batched" adds the dynamic batcher),
 * AB_TOGETHER=1 (load both builds at the same time instead of in turns: on a
 * machine shared with other work both then see the same contention, and the
 * ratio says which needs less CPU per request; absolute rates are halved),
 * AB_GC=1 (servers run with V8's --trace-gc: scavenges and the sum of all
 * collections' pauses per 1,000 requests beside each point; a count of
 * collections does not depend on how busy the machine is), AB_PROFILE=n (servers run under V8's CPU profiler,
 * sampling every 100 µs; per point, the n functions whose self time per request on the main thread differs most
 * between the builds, counted only while that point's load ran).
 */
import path from 'node:path';
import { mkdtempSync, readFileSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { type Window, diffRows, monotonicUs, selfTimes } from './profile-diff.js';
import { binaryBody, binaryInJsonOutBody, jsonBody } from './bodies.js';
import { type BenchModel, buildBenchModels } from './models.js';
import { DIST, startNereid } from './processes.js';
import { type HttpBody, type WrkResult, runWrk } from './wrk.js';
import { modelInferBody, runH2load } from './grpc.js';

const SECONDS = Number(process.env.BENCH_SECONDS ?? 3);
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 3);
const MODELS = (process.env.BENCH_MODELS ?? 'tiny,medium').split(',');
const FORMATS = (process.env.BENCH_FORMATS ?? 'json,binary').split(',');
const CONCURRENCY = (process.env.BENCH_CONCURRENCY ?? '32').split(',').map(Number);
const SCHEDULERS = (process.env.AB_SCHEDULERS ?? 'plain').split(',');
const BASE_DIST = process.env.AB_BASE_DIST;
const THIS_DIST = process.env.AB_DIST;
const TOGETHER = process.env.AB_TOGETHER === '1';
const GC = process.env.AB_GC === '1';
const PROFILE_TOP = Number(process.env.AB_PROFILE ?? 0);
const args = (text: string | undefined) => (text ?? '').split(' ').filter((s) => s !== '');
/** "NAME=value ..." */
function envOf(text: string | undefined): Record<string, string> {
  const out: Record<string, string> = {};
  for (const kv of args(text)) {
    const i = kv.indexOf('=');
    if (i <= 0) throw new Error(`AB_ENV / AB_BASE_ENV: "${kv}" is not NAME=value`);
    out[kv.slice(0, i)] = kv.slice(i + 1);
  }
  return out;
}

for (const f of FORMATS)
  if (!['json', 'binary', 'bin→json', 'grpc'].includes(f)) throw new Error(`BENCH_FORMATS: unknown format "${f}"`);
for (const s of SCHEDULERS)
  if (s !== 'plain' && s !== 'batched') throw new Error(`AB_SCHEDULERS: unknown scheduler "${s}"`);

function body(model: BenchModel, format: string): HttpBody {
  if (format === 'json') return jsonBody(model.inputName, model.outputName, model.inputSize);
  if (format === 'binary') return binaryBody(model.inputName, model.outputName, model.inputSize);
  return binaryInJsonOutBody(model.inputName, model.outputName, model.inputSize);
}

/**
 * CPU seconds a thread ran (the first field of its schedstat: the scheduler's own account, in ns), or all of a
 * process's threads: far finer than /proc/PID/stat's 10 ms ticks, which at 2 s per point leave 10 % of noise.
 */
function runSeconds(pid: number, tid?: number): number {
  const tids = tid === undefined ? readdirSync(`/proc/${pid}/task`) : [String(tid)];
  let ns = 0;
  for (const t of tids) {
    try {
      ns += Number(readFileSync(`/proc/${pid}/task/${t}/schedstat`, 'utf8').split(' ')[0]);
    } catch {
      // The thread ended meanwhile.
    }
  }
  return ns / 1e9;
}

function median(values: readonly number[]): number {
  const s = [...values].sort((a, b) => a - b);
  return s[Math.floor(s.length / 2)]!;
}

function fmt(n: number, digits = 0): string {
  return n.toLocaleString('en-US', { maximumFractionDigits: digits, minimumFractionDigits: digits });
}

interface Sample {
  readonly rps: number;
  readonly p50us: number;
  /** Server CPU (all threads) per request, µs. */
  readonly cpuUs: number;
  /** The server's main thread's CPU per request, µs. */
  readonly mainUs: number;
  /** Scavenges per 1,000 requests and all collections' pauses (ms) per 1,000 requests (AB_GC=1). */
  readonly scavenges: number;
  readonly gcMs: number;
  readonly errors: number;
}

interface Build {
  readonly label: string;
  readonly dist: string | undefined;
  readonly extra: string[];
  readonly env: Record<string, string>;
}

const thisDist = THIS_DIST === undefined ? undefined : path.resolve(THIS_DIST);
const hasBase =
  BASE_DIST !== undefined || process.env.AB_BASE_ENV !== undefined || process.env.AB_BASE_ARGS !== undefined;
const builds: Build[] = [
  ...(hasBase
    ? [
      {
        label: 'base',
        dist: BASE_DIST === undefined ? thisDist : path.resolve(BASE_DIST),
        extra: args(process.env.AB_BASE_ARGS),
        env: envOf(process.env.AB_BASE_ENV),
      },
    ]
    : []),
  { label: 'this', dist: thisDist, extra: args(process.env.AB_ARGS), env: envOf(process.env.AB_ENV) },
];

function describe(b: Build): string {
  const env = Object.entries(b.env).map(([k, v]) => `${k}=${v}`);
  return [b.dist ?? DIST, ...b.extra, ...env].join(' ');
}

const models = (await buildBenchModels()).filter((m) => MODELS.some((o) => m.plainName === `mlp_${o}`));
if (models.length === 0) throw new Error(`BENCH_MODELS: none of ${MODELS.join(',')} (tiny, medium)`);

interface Server {
  readonly build: Build;
  readonly model: BenchModel;
  readonly http: number;
  readonly grpc: number;
  readonly pid: number;
  readonly stop: () => Promise<void>;
  /** Collections seen in the server's --trace-gc output so far. */
  readonly gc: { scavenges: number; ms: number; partial: string };
  /** Where its CPU profiles go (AB_PROFILE). */
  readonly profDir: string | undefined;
}

/** Counts collections in --trace-gc lines ("...: Scavenge 34.9 (55.0) -> 21.7 (55.0) MB, pooled: 0 MB, 0.18 / ..."). */
function countGc(gc: Server['gc'], text: string): void {
  const lines = (gc.partial + text).split('\n');
  gc.partial = lines.pop()!;
  for (const l of lines) {
    const m = /: (Scavenge|Mark-Compact|Mark-Sweep|Minor Mark-Sweep)\b.*? MB, (?:pooled: \S+ MB, )?([\d.]+) \//.exec(l);
    if (m === null) continue;
    if (m[1] === 'Scavenge') gc.scavenges++;
    gc.ms += Number(m[2]);
  }
}

const servers: Server[] = [];
const samples = new Map<string, Sample[]>();
/** AB_PROFILE: per point and build, the windows its load ran in and the requests served in them. */
const profiled = new Map<string, { windows: Window[]; requests: number }>();
const loads: string[] = [];
try {
  for (const model of models) {
    for (const build of builds) {
      const gc = { scavenges: 0, ms: 0, partial: '' };
      const profDir = PROFILE_TOP > 0 ? mkdtempSync(path.join(tmpdir(), 'nereid-ab-prof-')) : undefined;
      const nodeArgs = [
        ...(GC ? ['--trace-gc'] : []),
        ...(profDir === undefined ? [] : ['--cpu-prof', `--cpu-prof-dir=${profDir}`, '--cpu-prof-interval=100']),
      ];
      const s = await startNereid(model.repository, build.extra, {
        env: build.env,
        nodeArgs,
        ...(build.dist === undefined ? {} : { dist: build.dist }),
        ...(GC ? { onStdout: (text: string) => countGc(gc, text) } : {}),
      });
      servers.push({
        build,
        model,
        http: s.http,
        grpc: s.grpc,
        pid: s.proc.child.pid!,
        stop: () => s.proc.stop(),
        gc,
        profDir,
      });
    }
  }
  const points: { model: BenchModel; scheduler: string; format: string; c: number }[] = [];
  for (const model of models)
    for (const scheduler of SCHEDULERS)
      for (const format of FORMATS) for (const c of CONCURRENCY) points.push({ model, scheduler, format, c });
  const url = (s: Server, scheduler: string) =>
    `http://127.0.0.1:${s.http}/v2/models/${scheduler === 'plain' ? s.model.plainName : s.model.batchedName}/infer`;
  const load = async (s: Server, scheduler: string, format: string, c: number, seconds: number) => {
    if (format !== 'grpc') return runWrk(url(s, scheduler), body(s.model, format), c, seconds);
    const name = scheduler === 'plain' ? s.model.plainName : s.model.batchedName;
    const h = await runH2load(s.grpc, modelInferBody(name, s.model.inputName, s.model.outputName, s.model.inputSize),
      c, 1, seconds);
    const r: WrkResult = {
      requestsPerSec: h.requestsPerSec,
      p50us: h.meanUs,
      p99us: h.maxUs,
      p25us: NaN,
      p75us: NaN,
      errors: h.failed,
      non2xx: 0,
      requests: h.succeeded,
      seconds,
    };
    return r;
  };
  // Warm up every server on every point once (allocations, JIT, the batcher's first batches).
  for (const p of points)
    for (const s of servers.filter((x) => x.model === p.model))
      await load(s, p.scheduler, p.format, p.c, 1);
  for (let round = 0; round < ROUNDS; round++) {
    loads.push(readFileSync('/proc/loadavg', 'utf8').split(' ')[0]!);
    for (const p of points) {
      const pair = servers.filter((x) => x.model === p.model);
      const measure = async (s: Server): Promise<void> => {
        const cpu0 = runSeconds(s.pid);
        const main0 = runSeconds(s.pid, s.pid);
        const gc0 = { ...s.gc };
        const fromUs = monotonicUs();
        const w = await load(s, p.scheduler, p.format, p.c, SECONDS);
        const toUs = monotonicUs();
        const cpu = runSeconds(s.pid) - cpu0;
        const main = runSeconds(s.pid, s.pid) - main0;
        const key = `${p.model.plainName}|${p.scheduler}|${p.format}|${p.c}|${s.build.label}`;
        const prof = profiled.get(key) ?? { windows: [], requests: 0 };
        prof.windows.push({ fromUs, toUs });
        prof.requests += w.requests;
        profiled.set(key, prof);
        const list = samples.get(key) ?? [];
        list.push({
          rps: w.requestsPerSec,
          p50us: w.p50us,
          cpuUs: (cpu * 1e6) / Math.max(1, w.requests),
          mainUs: (main * 1e6) / Math.max(1, w.requests),
          scavenges: ((s.gc.scavenges - gc0.scavenges) * 1000) / Math.max(1, w.requests),
          gcMs: ((s.gc.ms - gc0.ms) * 1000) / Math.max(1, w.requests),
          errors: w.errors + w.non2xx,
        });
        samples.set(key, list);
      };
      // Together: both builds loaded over the same seconds, so they share whatever else the machine runs.
      if (TOGETHER) await Promise.all(pair.map(measure));
      else for (const s of round % 2 === 0 ? pair : [...pair].reverse()) await measure(s);
    }
  }
  const header = ['model', 'sched', 'body', 'conc', 'build', 'req/s', 'p50us', 'cpu us/req', 'main us', 'errors'];
  if (GC) header.push('scav/1k', 'gc ms/1k');
  header.push('this/base', 'range');
  const rows: string[][] = [];
  for (const p of points) {
    const of = (label: string) => samples.get(`${p.model.plainName}|${p.scheduler}|${p.format}|${p.c}|${label}`) ?? [];
    const base = of('base');
    const cur = of('this');
    const ratios = base.length === 0 ? [] : cur.map((x, i) => x.rps / base[i]!.rps);
    for (const b of builds) {
      const ss = of(b.label);
      const last = b.label === 'this' && ratios.length > 0;
      rows.push([
        p.model.plainName.replace('mlp_', ''),
        p.scheduler,
        p.format,
        String(p.c),
        b.label,
        fmt(median(ss.map((x) => x.rps))),
        fmt(median(ss.map((x) => x.p50us))),
        fmt(median(ss.map((x) => x.cpuUs)), 1),
        fmt(median(ss.map((x) => x.mainUs)), 1),
        String(ss.reduce((a, x) => a + x.errors, 0)),
        ...(GC ? [fmt(median(ss.map((x) => x.scavenges)), 2), fmt(median(ss.map((x) => x.gcMs)), 1)] : []),
        last ? fmt(median(ratios), 3) : '',
        last ? `${fmt(Math.min(...ratios), 2)}-${fmt(Math.max(...ratios), 2)}` : '',
      ]);
    }
  }
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => r[i]!.length)));
  const line = (cells: string[]) => cells.map((cell, i) => cell.padStart(widths[i]!)).join('  ');
  process.stdout.write(
    `\nA/B: this (${describe(builds.at(-1)!)}) against base (${hasBase ? describe(builds[0]!) : 'none'}); ` +
      `wrk -t1, ${SECONDS}s per point, medians of ${ROUNDS} ` +
      `${TOGETHER ? 'rounds, both loaded together' : 'alternated rounds'}; ` +
      'this/base: median of the ' +
      'per-round throughput ratios and their range; ' +
      "cpu: the server's CPU (all threads) per request, main: its main thread's; " +
      `load averages at round starts ${loads.join(' ')}\n` +
      `${line(header)}\n${widths.map((w) => '-'.repeat(w)).join('  ')}\n`,
  );
  for (const r of rows) process.stdout.write(`${line(r)}\n`);
  if (PROFILE_TOP > 0) {
    for (const s of servers) await s.stop();
    printProfiles(points);
  }
} finally {
  for (const s of servers) {
    await s.stop();
    if (s.profDir !== undefined) rmSync(s.profDir, { recursive: true, force: true });
  }
}

/** The main thread's profile of a server: the file with the lowest thread number (CPU.date.time.pid.tid.seq). */
function mainProfile(s: Server): string | undefined {
  const files = readdirSync(s.profDir!)
    .filter((f) => f.endsWith('.cpuprofile'))
    .sort((a, b) => Number(a.split('.')[4]) - Number(b.split('.')[4]));
  return files.length === 0 ? undefined : path.join(s.profDir!, files[0]!);
}

function printProfiles(points: readonly { model: BenchModel; scheduler: string; format: string; c: number }[]): void {
  for (const p of points) {
    const pointKey = `${p.model.plainName}|${p.scheduler}|${p.format}|${p.c}`;
    const account = (label: string) => {
      const s = servers.find((x) => x.model === p.model && x.build.label === label);
      const prof = profiled.get(`${pointKey}|${label}`);
      const file = s === undefined ? undefined : mainProfile(s);
      if (prof === undefined || file === undefined) return { times: new Map<string, number>(), requests: 1 };
      return { times: selfTimes(file, prof.windows), requests: prof.requests };
    };
    const base = account('base');
    const cur = account('this');
    const rows = diffRows(base.times, base.requests, cur.times, cur.requests, PROFILE_TOP);
    const widths = [0, 1, 2, 3].map((i) => Math.max(...rows.map((r) => r[i]!.length), 8));
    process.stdout.write(
      `\nmain-thread self time, µs per request (profiler on): ${pointKey.replace(/\|/g, ' ')}\n` +
        `${'function'.padEnd(widths[0]!)}  ${'base'.padStart(widths[1]!)}  ${'this'.padStart(widths[2]!)}  ` +
        `${'this-base'.padStart(widths[3]!)}\n`,
    );
    for (const r of rows)
      process.stdout.write(
        `${r[0]!.padEnd(widths[0]!)}  ${r[1]!.padStart(widths[1]!)}  ${r[2]!.padStart(widths[2]!)}  ` +
          `${r[3]!.padStart(widths[3]!)}\n`,
      );
  }
}
