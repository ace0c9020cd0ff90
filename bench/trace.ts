/**
 * `node dist/bench/trace.js` (section `trace` of bench/run.ts): what request
 * tracing costs. Five Nereid processes serve the tiny MLP (dynamic
 * batching): tracing off twice (A and B: an A/A control that shows the noise
 * floor of two servers that differ in nothing); Triton mode at rate=1000 to a
 * file; rate=1 to a file (log-frequency=1000, so files rotate as they would in
 * production); rate=1 over OTLP/HTTP to a receiver in this process that takes
 * and drops the bodies. wrk at concurrency 32 with binary tensors visits them
 * in turn.
 *
 * Two servers of one build, started alike, serve at different rates from
 * one load run to the next and, less, from one process to the next (bench/aa.ts
 * and docs/tracing.md, "How the bench reads a cost"): the machine's CPU left to the server
 * sets how many requests each event-loop turn gathers, and that holds for a
 * run. So every server is warmed first (BENCH_WARM_SECONDS at c32), the run
 * is BENCH_BLOCKS blocks, each with a fresh set of servers, of BENCH_ROUNDS
 * rounds of short loads (BENCH_SECONDS each), the order shuffled in every
 * round (seeded: roundOrder), each load followed by a wait until its server
 * is idle (settle: what a variant leaves running is its own CPU, not the next
 * load's); each round's requests/s and CPU per request
 * (all threads, from /proc) are divided by the geometric mean of both off
 * servers' in the same round (one off process's luck counts half), and the
 * medians of those ratios over every round are printed with each block's
 * median beside them. Off B against off A, the A/A control, is printed the
 * same way and beside each verdict. Each median comes with a 90 % interval
 * from resampling whole blocks; a goal inside it is printed as undecided.
 * Goals: rate=1000 ≥ 0.97×, rate=1 to a file ≥ 0.85×, OTLP rate=1 ≥ 0.8×
 * of off.
 *
 * Environment (whole seconds, as wrk takes them): BENCH_SECONDS (per load,
 * default 1), BENCH_ROUNDS (per block, default 4), BENCH_BLOCKS (default 6),
 * BENCH_WARM_SECONDS (per server, default 1). TRACE_BENCH_NICE=0,10,19 compares
 * tracing threads' nice values instead: off A and B, then rate=1 to a file and
 * over OTLP per value, every server with metrics on, and prints the spans each
 * OTLP server dropped (nereid_trace_spans_dropped_total) out of those it made.
 * TRACE_BENCH_BASE=<another build's dist folder> compares OTLP rate=1 of that
 * build and of this one instead (off A and B, the base build off, then the two, metrics on). Each
 * row also splits the server's CPU per request: the trace threads
 * (`WorkerThread`) and V8's helper threads (`V8Worker`: parallel and concurrent
 * garbage collection, compilation). TRACE_BENCH_THREADS=N starts every server with --frontend-threads=N (the
 * default from 4 cores up is 2 or more; see docs/tracing.md, "Frontend threads").
 * TRACE_BENCH_PROBE=1 runs, instead of the two rate=1 variants, servers with tracing on at rate=100000 and
 * rate=1000000 (a trace file, almost nothing sampled): what tracing costs apart from the traces themselves.
 * TRACE_BENCH_SAME=1 takes a process's own luck out: one server per block, started with a trace file and tracing
 * off, serves every variant (off twice, rate=1000, rate=1 to the file), its setting POSTed to /v2/trace/setting
 * before each load.
 */
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { mkdtempSync, readFileSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { binaryBody } from './bodies.js';
import { buildBenchModels } from './models.js';
import { cpuSeconds, startNereid } from './processes.js';
import { runWrk } from './wrk.js';

const SECONDS = Number(process.env.BENCH_SECONDS ?? 1);
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 4);
const BLOCKS = Number(process.env.BENCH_BLOCKS ?? 6);
const WARM_SECONDS = Number(process.env.BENCH_WARM_SECONDS ?? 1);
const CONNECTIONS = 32;
const THREADS = process.env.TRACE_BENCH_THREADS;
const threadFlags = THREADS === undefined || THREADS === '' ? [] : [`--frontend-threads=${THREADS}`];

/** The q-quantile, interpolated between the nearest ranks (q = 0.5: the median). */
const quantile = (xs: readonly number[], q: number): number => {
  const s = [...xs].sort((a, b) => a - b);
  const at = (s.length - 1) * q;
  const lo = Math.floor(at);
  return lo + 1 < s.length ? s[lo]! + (s[lo + 1]! - s[lo]!) * (at - lo) : s[lo]!;
};
const median = (xs: readonly number[]): number => quantile(xs, 0.5);

/**
 * A 90 % interval for the median over every round, resampling whole blocks (a block's servers are its own, so
 * its rounds are not independent of one another); seeded, so one run's figures print the same interval.
 */
function blockInterval(ratios: readonly number[]): [number, number] {
  let seed = 12345;
  const next = (): number => ((seed = (Math.imul(seed, 1103515245) + 12345) >>> 0) / 2 ** 32);
  const medians: number[] = [];
  for (let n = 0; n < 2000; n++) {
    const pool: number[] = [];
    for (let k = 0; k < BLOCKS; k++) {
      const b = Math.floor(next() * BLOCKS);
      pool.push(...ratios.slice(b * ROUNDS, (b + 1) * ROUNDS));
    }
    medians.push(median(pool));
  }
  return [quantile(medians, 0.05), quantile(medians, 0.95)];
}

/** Takes OTLP bodies and answers 200 with an empty ExportTraceServiceResponse. */
async function startReceiver(): Promise<{ url: string; bodies: () => number; stop(): Promise<void> }> {
  let bodies = 0;
  const server = http.createServer((req, res) => {
    req.resume();
    req.on('end', () => {
      bodies += 1;
      res.writeHead(200, { 'Content-Type': 'application/x-protobuf' }).end();
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const port = (server.address() as AddressInfo).port;
  return {
    url: `http://127.0.0.1:${port}/v1/traces`,
    bodies: () => bodies,
    stop: () => new Promise<void>((resolve) => server.close(() => resolve())),
  };
}

const [tiny] = await buildBenchModels();
const model = tiny!;
const dir = mkdtempSync(path.join(tmpdir(), 'nereid-bench-trace-'));
const receiver = await startReceiver();
const LEVEL = '--trace-config=level=TIMESTAMPS';
interface Variant {
  label: string;
  goal: number | undefined;
  flags: (block: number) => string[];
  nice?: string;
  otlp?: boolean;
  /** Another build's dist folder to start. */
  dist?: string;
  /** TRACE_BENCH_SAME: the one server's trace setting for this variant, POSTed before each of its loads. */
  setting?: Record<string, unknown>;
}
const file1 = (b: number, tag = ''): string[] => [
  `--trace-config=triton,file=${dir}/r1${tag}-${b}.json`,
  '--trace-config=triton,log-frequency=1000',
  LEVEL,
  '--trace-config=rate=1',
];
const otlp = (): string[] => [
  '--trace-config=mode=opentelemetry',
  `--trace-config=opentelemetry,url=${receiver.url}`,
  LEVEL,
  '--trace-config=rate=1',
];
const NICES = process.env.TRACE_BENCH_NICE?.split(',').filter((x) => x !== '');
const offs: Variant[] = [
  { label: 'tracing off (A)', goal: undefined, flags: (): string[] => [] },
  { label: 'tracing off (B), A/A', goal: undefined, flags: (): string[] => [] },
];
const BASE = process.env.TRACE_BENCH_BASE;
const SAME = process.env.TRACE_BENCH_SAME === '1';
/** TRACE_BENCH_SAME: one server per block with a trace file and tracing off, its setting changed between loads. */
const sameFlags = (b: number): string[] => [
  `--trace-config=triton,file=${dir}/same-${b}.json`,
  '--trace-config=level=OFF',
];
const OFF = { trace_level: ['OFF'] };
const PROBE = process.env.TRACE_BENCH_PROBE === '1';
const variants: Variant[] = SAME ? [
  { label: 'tracing off (A)', goal: undefined, flags: sameFlags, setting: OFF },
  { label: 'tracing off (B), A/A', goal: undefined, flags: sameFlags, setting: OFF },
  {
    label: 'triton, rate=1000, file',
    goal: 0.97,
    flags: sameFlags,
    setting: { trace_level: ['TIMESTAMPS'], trace_rate: '1000', log_frequency: '0' },
  },
  {
    label: 'triton, rate=1, file',
    goal: 0.85,
    flags: sameFlags,
    setting: { trace_level: ['TIMESTAMPS'], trace_rate: '1', log_frequency: '1000' },
  },
] : BASE !== undefined ? [
  ...offs,
  { label: 'tracing off, base build', goal: undefined, flags: (): string[] => [], dist: path.resolve(BASE) },
  { label: 'OTLP, base build', goal: 0.8, flags: otlp, otlp: true, dist: path.resolve(BASE) },
  { label: 'OTLP, this build', goal: 0.8, flags: otlp, otlp: true },
] : NICES !== undefined ? [
  ...offs,
  ...NICES.flatMap((n): Variant[] => [
    { label: `triton, rate=1, file, nice ${n}`, goal: 0.85, flags: (b) => file1(b, `n${n}`), nice: n },
    { label: `opentelemetry, OTLP, nice ${n}`, goal: 0.8, flags: otlp, nice: n, otlp: true },
  ]),
] : [
  ...offs,
  {
    label: 'triton, rate=1000, file',
    goal: 0.97,
    flags: (b: number) => [`--trace-config=triton,file=${dir}/r1000-${b}.json`, LEVEL, '--trace-config=rate=1000'],
  },
  {
    label: 'triton, rate=1, file',
    goal: 0.85,
    flags: (b: number) => [
      `--trace-config=triton,file=${dir}/r1-${b}.json`,
      '--trace-config=triton,log-frequency=1000',
      LEVEL,
      '--trace-config=rate=1',
    ],
  },
  {
    label: 'opentelemetry, rate=1, OTLP',
    goal: 0.8,
    flags: () => [
      '--trace-config=mode=opentelemetry',
      `--trace-config=opentelemetry,url=${receiver.url}`,
      LEVEL,
      '--trace-config=rate=1',
    ],
  },
];
if (PROBE) {
  // Tracing on but (almost) never sampled: what having it on costs apart from the traces themselves.
  variants.splice(3);
  for (const rate of [100_000, 1_000_000]) {
    variants.push({
      label: `triton, rate=${rate}, file`,
      goal: undefined,
      flags: (b: number) => [
        `--trace-config=triton,file=${dir}/p${rate}-${b}.json`, LEVEL, `--trace-config=rate=${rate}`,
      ],
    });
  }
}
const withMetrics = NICES !== undefined || BASE !== undefined;
/** Per variant: spans the OTLP servers dropped, and requests they served (3 spans each), over all blocks. */
const drops = variants.map(() => ({ dropped: 0, requests: 0 }));

async function droppedSpans(metricsPort: number): Promise<number> {
  const text = await (await fetch(`http://127.0.0.1:${metricsPort}/metrics`)).text();
  let n = 0;
  for (const m of text.matchAll(/^nereid_trace_spans_dropped_total\{[^}]*\} (\S+)$/gm)) n += Number(m[1]);
  return n;
}

/**
 * The variants' order in a round: a seeded shuffle. A rotation would keep each variant behind the same one in most
 * rounds, and a variant that leaves work behind (the OTLP export or the trace file draining after its load) would
 * slow the one after it every time.
 */
function roundOrder(n: number): number[] {
  let seed = (n + 1) * 2654435761;
  const next = (): number => ((seed = (Math.imul(seed, 1103515245) + 12345) >>> 0) / 2 ** 32);
  const order = variants.map((_, i) => i);
  for (let k = order.length - 1; k > 0; k--) {
    const j = Math.floor(next() * (k + 1));
    [order[k], order[j]] = [order[j]!, order[k]!];
  }
  return order;
}

/** TRACE_BENCH_SAME: the variant's trace setting on its server (the next request on takes it). */
async function applySetting(port: number, v: Variant): Promise<void> {
  if (v.setting === undefined) return;
  const res = await fetch(`http://127.0.0.1:${port}/v2/trace/setting`, {
    method: 'POST',
    headers: { 'Content-Type': 'application/json' },
    body: JSON.stringify(v.setting),
  });
  if (!res.ok) throw new Error(`trace setting ${JSON.stringify(v.setting)}: ${res.status} ${await res.text()}`);
}

/**
 * Waits until the server is idle after its load (under 5 ms of CPU in 100 ms, at most 3 s): what a variant leaves
 * running (the trace file's thread writing, the export thread sending) is its own cost, counted in its CPU per
 * request, and does not slow the load that follows it.
 */
async function settle(pid: number): Promise<void> {
  for (let n = 0; n < 30; n++) {
    const before = cpuSeconds(pid);
    await new Promise((resolve) => setTimeout(resolve, 100));
    if (cpuSeconds(pid) - before < 0.005) return;
  }
}

interface Point {
  rps: number;
  p50: number;
  p99: number;
  failed: number;
  /** Server CPU µs per request: all threads, the main thread, the trace threads, V8's helper threads. */
  cpu: number;
  main: number;
  trace: number;
  v8: number;
}

/** CPU seconds of a server's trace threads and of V8's helper threads, by thread name. */
function threadGroups(pid: number): { trace: number; v8: number } {
  const sums = { trace: 0, v8: 0 };
  for (const tid of readdirSync(`/proc/${pid}/task`)) {
    try {
      const comm = readFileSync(`/proc/${pid}/task/${tid}/comm`, 'utf8').trim();
      if (comm === 'WorkerThread') sums.trace += cpuSeconds(pid, Number(tid));
      else if (comm.startsWith('V8Worker')) sums.v8 += cpuSeconds(pid, Number(tid));
    } catch {
      // a thread gone since the listing
    }
  }
  return sums;
}

const body = binaryBody(model.inputName, model.outputName, model.inputSize);
const url = (port: number): string => `http://127.0.0.1:${port}/v2/models/${model.batchedName}/infer`;
/**
 * points[variant][round], rounds of every block in order; ratios likewise, to the geometric mean of both off
 * servers in the same round (off B's own: to off A).
 */
const points: Point[][] = variants.map(() => []);
const rpsRatios: number[][] = variants.map(() => []);
const cpuRatios: number[][] = variants.map(() => []);
const started = Date.now();
try {
  for (let block = 0; block < BLOCKS; block++) {
    const servers = SAME ? Array(variants.length).fill(await startNereid(model.repository, [
      `--allow-metrics=${withMetrics}`, ...threadFlags, ...sameFlags(block),
    ])) as Awaited<ReturnType<typeof startNereid>>[] : await Promise.all(
      variants.map((v) =>
        startNereid(model.repository, [`--allow-metrics=${withMetrics}`, ...threadFlags, ...v.flags(block)], {
          env: v.nice === undefined ? {} : { NEREID_TRACE_THREAD_NICE: v.nice },
          dist: v.dist,
        }),
      ),
    );
    try {
      for (const [i, s] of servers.entries()) {
        await applySetting(s.http, variants[i]!);
        drops[i]!.requests += (await runWrk(url(s.http), body, CONNECTIONS, WARM_SECONDS)).requests; // warm-up
      }
      for (let round = 0; round < ROUNDS; round++) {
        const got: Point[] = [];
        for (const i of roundOrder(block * ROUNDS + round)) {
          await applySetting(servers[i]!.http, variants[i]!);
          const pid = servers[i]!.proc.child.pid!;
          const [all0, main0, groups0] = [cpuSeconds(pid), cpuSeconds(pid, pid), threadGroups(pid)];
          const r = await runWrk(url(servers[i]!.http), body, CONNECTIONS, SECONDS);
          await settle(pid);
          const [all1, main1, groups1] = [cpuSeconds(pid), cpuSeconds(pid, pid), threadGroups(pid)];
          const n = Math.max(1, r.requests);
          drops[i]!.requests += r.requests;
          got[i] = {
            rps: r.requestsPerSec,
            p50: r.p50us,
            p99: r.p99us,
            failed: r.errors + r.non2xx,
            cpu: ((all1 - all0) * 1e6) / n,
            main: ((main1 - main0) * 1e6) / n,
            trace: ((groups1.trace - groups0.trace) * 1e6) / n,
            v8: ((groups1.v8 - groups0.v8) * 1e6) / n,
          };
        }
        const off = { rps: Math.sqrt(got[0]!.rps * got[1]!.rps), cpu: Math.sqrt(got[0]!.cpu * got[1]!.cpu) };
        for (const [i, p] of got.entries()) {
          const ref = i === 1 ? got[0]! : off;
          points[i]!.push(p);
          rpsRatios[i]!.push(p.rps / ref.rps);
          cpuRatios[i]!.push(p.cpu / ref.cpu);
        }
      }
      // After the processor's 5 s schedule, every span made has been exported or dropped.
      if (withMetrics) await new Promise((resolve) => setTimeout(resolve, 6000));
      for (const [i, v] of variants.entries()) {
        if (v.otlp !== true) continue;
        drops[i]!.dropped += await droppedSpans(servers[i]!.metrics);
      }
    } finally {
      await Promise.all([...new Set(servers)].map((s) => s.proc.stop()));
    }
  }
} finally {
  await receiver.stop();
}
const files = readdirSync(dir).length;
rmSync(dir, { recursive: true, force: true });

const f = (x: number, d: number): string => x.toFixed(d);
process.stdout.write(
  `\nTracing cost: ${model.label}, dynamic batching, binary tensors, wrk -c${CONNECTIONS}; ${BLOCKS} blocks ` +
    `(fresh servers${SAME ? ', one per block, its trace setting changed between loads' : ''}) ` +
    `× ${ROUNDS} rounds × ${SECONDS}s, order shuffled; medians over all rounds ` +
    `(${((Date.now() - started) / 1000).toFixed(0)} s)${threadFlags.length > 0 ? `; ${threadFlags[0]}` : ''}\n`,
);
const header = ['req/s', '× off', 'CPU× off', 'p50 µs', 'p99 µs', 'failed', 'CPU µs/req', 'main', 'trace', 'V8'];
const widths = [9, 9, 12, 8, 8, 8, 12, 7, 7, 7];
process.stdout.write(`${'variant'.padEnd(30)}${header.map((h, i) => h.padStart(widths[i]!)).join('')}\n`);
for (let i = 0; i < variants.length; i++) {
  const ps = points[i]!;
  const cells = [
    f(median(ps.map((p) => p.rps)), 0),
    f(median(rpsRatios[i]!), 3),
    f(median(cpuRatios[i]!), 3),
    f(median(ps.map((p) => p.p50)), 0),
    f(median(ps.map((p) => p.p99)), 0),
    String(ps.reduce((n, p) => n + p.failed, 0)),
    f(median(ps.map((p) => p.cpu)), 1),
    f(median(ps.map((p) => p.main)), 1),
    f(median(ps.map((p) => p.trace)), 1),
    f(median(ps.map((p) => p.v8)), 1),
  ];
  process.stdout.write(`${variants[i]!.label.padEnd(30)}${cells.map((c, k) => c.padStart(widths[k]!)).join('')}\n`);
}
process.stdout.write(
  '\nreq/s × off (off B: × off A): the median of every round, its 90 % interval (blocks resampled), each block\'s ' +
    'median, the goal; beside it the A/A row\'s median and interval:\n',
);
const aa = rpsRatios[1]!;
const [aaLo, aaHi] = blockInterval(aa);
for (let i = 1; i < variants.length; i++) {
  const rs = rpsRatios[i]!;
  const blocks = Array.from({ length: BLOCKS }, (_, b) => median(rs.slice(b * ROUNDS, (b + 1) * ROUNDS)));
  const all = median(rs);
  const [lo, hi] = blockInterval(rs);
  const goal = variants[i]!.goal;
  // Decided only where the whole interval lies on one side of the goal.
  const verdict =
    i === 1
      ? '(the noise floor)'
      : goal === undefined
        ? `A/A ${f(median(aa), 3)} [${f(aaLo, 3)}, ${f(aaHi, 3)}]`
        : `goal ≥ ${goal}: ${all >= goal ? 'met' : 'NOT met'}` +
        `${lo < goal && goal <= hi ? ' (undecided: inside the interval)' : ''}; ` +
        `A/A ${f(median(aa), 3)} [${f(aaLo, 3)}, ${f(aaHi, 3)}]`;
  process.stdout.write(
    `${variants[i]!.label.padEnd(30)}${f(all, 3)} [${f(lo, 3)}, ${f(hi, 3)}]  ` +
      `blocks ${blocks.map((x) => f(x, 3)).join(' ')}  ${verdict}\n`,
  );
}
for (const [i, v] of variants.entries()) {
  if (v.otlp !== true) continue;
  const { dropped, requests } = drops[i]!;
  process.stdout.write(
    `${v.label}: spans dropped ${dropped} of ${3 * requests} made ` +
      `(${((100 * dropped) / (3 * requests)).toFixed(2)}%)\n`,
  );
}
process.stdout.write(`trace files written: ${files}; OTLP bodies received: ${receiver.bodies()}\n`);
