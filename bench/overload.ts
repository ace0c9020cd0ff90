/**
 * `node dist/bench/overload.js` (section `overload` of bench/run.ts): a
 * bounded queue at twice its capacity. The medium MLP under the dynamic
 * batcher with `max_queue_size: 64`. Every load comes from one generator, run
 * in its own process (bench/open-loop.ts, raw keep-alive sockets opened and
 * warmed before its clock starts), so capacity and overload are measured by
 * the same client at the same cost per request on the same cores. A round is:
 * the capacity as closed loops over 32 connections (as wrk -c32) and over 64
 * (the queue's bound: as many requests as the server holds without refusing
 * one, so it is saturated and never sheds), then an open loop at 2× the
 * larger of the two rates (requests leave on a clock whether or not earlier
 * ones were answered, as real overload comes; the generator's own lag is
 * reported apart). Several rounds; the figures are each round's ratios (the
 * overload against that round's own capacity), printed with their median and
 * range.
 *
 * Beside each point: goodput (200s per second within the clock), p50/p99,
 * refusals (503 with Retry-After), the server's main-thread CPU per request,
 * the busiest other thread of the server (the session thread), the
 * generator's CPU, the machine's busy share and what other processes took of
 * it (a round in which they took much is not a measurement of this server),
 * and the server's own statistics (mean request = queue + compute, mean
 * batch). After the last round, a closed loop again shows whether the server
 * serves at capacity once the overload has passed.
 * Bars: goodput ≥ 0.9× capacity, accepted p99 ≤ 3× the p99 at capacity.
 *
 * Beside each overload point, its controls (bench/overload-control.ts): the
 * same generator at the same rate with only 1× going to the server and the
 * excess to a separate process that refuses everything (bench/naive-server.ts
 * --refuse; its CPU shows under "others"), and 1× alone. The first is the
 * goodput the machine leaves the server when its refusals cost it nothing.
 *
 * Environment: BENCH_SECONDS (per point, default 3), BENCH_ROUNDS (default 3),
 * OVERLOAD_FACTOR (default 2), OVERLOAD_NODE_ARGS (extra node flags for the
 * server, e.g. "--cpu-prof --cpu-prof-dir=DIR"), OVERLOAD_GENERATOR_PREFIX (a
 * command the generator is started under, e.g. "nice -n 5" or "taskset -c 1"),
 * OVERLOAD_BASELINE (the dist folder of another build: its server runs the same
 * rounds in turns with this one, the order flipped every round, and each
 * round's goodput is also set against the other's), OVERLOAD_VARIANT_ARGS (server
 * flags, e.g. "--backend-config=onnxruntime,intra_op_thread_count=2": a second
 * server of this build started with them takes the baseline's place).
 */
import { mkdirSync, readFileSync, readdirSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { binaryBody } from './bodies.js';
import { benchModelsDir, buildBenchModels } from './models.js';
import { pathToFileURL } from 'node:url';
import { evenLoad, runGenerator } from './overload-control.js';
import { cpuSeconds, startNaive, startNereid } from './processes.js';
import type { HttpBody } from './wrk.js';

const SECONDS = Number(process.env.BENCH_SECONDS ?? 3);
const FACTOR = Number(process.env.OVERLOAD_FACTOR ?? 2);
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 3);
const GENERATOR_PREFIX = process.env['OVERLOAD_GENERATOR_PREFIX']?.split(' ').filter((w) => w !== '') ?? [];
const MODEL = 'mlp_medium_bounded';
/** Keep-alive connections the generator opens before the clock starts. */
const CONNECTIONS = 1024;

interface OpenLoopResult {
  sent: number;
  scheduled: number;
  unsent: number;
  ok: number;
  okInWindow: number;
  refused: number;
  retryAfter: number;
  otherErrors: number;
  okP50us: number;
  okP99us: number;
  okMeanUs: number;
  okP99FromDueUs: number;
  refusedP99us: number;
  late: number;
  maxLagUs: number;
  connections: number;
  openedDuringRun: number;
  seconds: number;
  cpuSeconds: number;
  /** Sent to the refuser instead (a control: bench/overload-control.ts), refused there, or due with no connection. */
  excessSent: number;
  excessRefused: number;
  excessDropped: number;
}

/**
 * Runs the generator (bench/open-loop.ts) in its own process: an open loop at
 * `rate`, or with `closed` a closed loop over that many connections.
 */
function generate(
  port: number,
  urlPath: string,
  req: HttpBody,
  load: { rate: number } | { closed: number },
  seconds: number,
): Promise<OpenLoopResult> {
  const closed = 'closed' in load;
  const config = {
    port,
    path: urlPath,
    headers: req.headers,
    bodyBase64: req.body.toString('base64'),
    rate: closed ? 0 : load.rate,
    seconds,
    connections: closed ? load.closed : CONNECTIONS,
    maxConnections: closed ? load.closed : CONNECTIONS,
    warmPath: '/v2/health/live',
    closed,
  };
  return runGenerator<OpenLoopResult>(config, GENERATOR_PREFIX);
}

interface ServedStats {
  success: number;
  requestNs: number;
  queueNs: number;
  computeNs: number;
  inferNs: number;
  executions: number;
  inferences: number;
}

/** The bounded model's statistics (statistics extension), summed as the bench reads them. */
async function modelStats(port: number): Promise<ServedStats> {
  const r = await fetch(`http://127.0.0.1:${port}/v2/models/${MODEL}/stats`);
  const doc = (await r.json()) as {
    model_stats: Array<{
      execution_count: number;
      inference_count: number;
      inference_stats: Record<
        'success' | 'queue' | 'compute_input' | 'compute_infer' | 'compute_output',
        { count: number; ns: number }
      >;
    }>;
  };
  const m = doc.model_stats[0]!;
  const i = m.inference_stats;
  return {
    success: Number(i.success.count),
    requestNs: Number(i.success.ns),
    queueNs: Number(i.queue.ns),
    computeNs: Number(i.compute_input.ns) + Number(i.compute_infer.ns) + Number(i.compute_output.ns),
    inferNs: Number(i.compute_infer.ns),
    executions: Number(m.execution_count),
    inferences: Number(m.inference_count),
  };
}

function fmt(n: number, digits = 0): string {
  return n.toLocaleString('en-US', { maximumFractionDigits: digits, minimumFractionDigits: digits });
}

const medium = (await buildBenchModels()).find((m) => m.plainName === 'mlp_medium')!;
const repo = path.join(benchModelsDir(), 'overload');
mkdirSync(path.join(repo, MODEL, '1'), { recursive: true });
writeFileSync(
  path.join(repo, MODEL, 'config.pbtxt'),
  [
    `name: "${MODEL}"`,
    'platform: "onnxruntime_onnx"',
    `max_batch_size: ${medium.maxBatchSize}`,
    `input [ { name: "${medium.inputName}" data_type: TYPE_FP32 dims: [ ${medium.inputSize} ] } ]`,
    `output [ { name: "${medium.outputName}" data_type: TYPE_FP32 dims: [ ${medium.outputSize} ] } ]`,
    'dynamic_batching { default_queue_policy { max_queue_size: 64 } }',
    'instance_group [ { kind: KIND_CPU count: 1 } ]',
    '',
  ].join('\n'),
);
writeFileSync(path.join(repo, MODEL, '1', 'model.onnx'), readFileSync(medium.onnxFile));


/** CPU seconds of every thread of `pid`, by thread id. */
function threadSeconds(pid: number): Map<number, number> {
  const out = new Map<number, number>();
  for (const tid of readdirSync(`/proc/${pid}/task`)) {
    try {
      out.set(Number(tid), cpuSeconds(pid, Number(tid)));
    } catch {
      // the thread ended meanwhile
    }
  }
  return out;
}

/**
 * A thread's time on a CPU and waiting for one (ns, /proc/PID/task/TID/schedstat), and its voluntary context switches.
 */
function schedstat(pid: number, tid: number): { runNs: number; waitNs: number; sleeps: number } {
  try {
    const [run, wait] = readFileSync(`/proc/${pid}/task/${tid}/schedstat`, 'utf8').trim().split(' ').map(Number);
    const m = /voluntary_ctxt_switches:\s*(\d+)/.exec(readFileSync(`/proc/${pid}/task/${tid}/status`, 'utf8'));
    return { runNs: run ?? 0, waitNs: wait ?? 0, sleeps: Number(m?.[1] ?? 0) };
  } catch {
    return { runNs: 0, waitNs: 0, sleeps: 0 };
  }
}

/** The machine's busy and total CPU time (all cores, clock ticks) from /proc/stat. */
function machineTicks(): { busy: number; total: number } {
  const f = readFileSync('/proc/stat', 'utf8').split('\n')[0]!.trim().split(/\s+/).slice(1, 9).map(Number);
  const total = f.reduce((a, b) => a + b, 0);
  return { busy: total - f[3]! - f[4]!, total };
}

interface Point {
  label: string;
  load: OpenLoopResult;
  okPerSec: number;
  /** % of one core. */
  mainPct: number;
  sessionPct: number;
  /** The session thread's share of the time it spent waiting for a CPU while runnable, and its sleeps per second. */
  sessionWaitPct: number;
  mainWaitPct: number;
  sessionSleepsPerSec: number;
  processPct: number;
  generatorPct: number;
  machinePct: number;
  othersPct: number;
  mainUsPerRequest: number;
  server: string;
}

const body = binaryBody(medium.inputName, medium.outputName, medium.inputSize);
const nodeArgs = process.env['OVERLOAD_NODE_ARGS']?.split(' ') ?? [];
const BASELINE = process.env['OVERLOAD_BASELINE'];
const VARIANT_ARGS = process.env['OVERLOAD_VARIANT_ARGS']?.split(' ').filter((w) => w !== '');
type Started = Awaited<ReturnType<typeof startNereid>>;
const servers: Array<{ name: string; nereid: Started }> = [
  { name: 'this', nereid: await startNereid(repo, [], { nodeArgs }) },
];
if (BASELINE !== undefined) {
  const mod = (await import(pathToFileURL(path.join(path.resolve(BASELINE), 'bench', 'processes.js')).href)) as {
    startNereid: typeof startNereid;
  };
  servers.push({ name: 'baseline', nereid: await mod.startNereid(repo, [], { nodeArgs }) });
} else if (VARIANT_ARGS !== undefined) {
  servers.push({ name: 'baseline', nereid: await startNereid(repo, VARIANT_ARGS, { nodeArgs }) });
}
/** The excess of each overload point's control, refused by a process of its own. */
const refuser = await startNaive(medium.onnxFile, 'refuse');
const cores = os.availableParallelism();
try {
  const urlPath = `/v2/models/${MODEL}/infer`;

  /** One load of the generator, with the server's threads, the machine and the server's statistics read around it. */
  const point = async (
    nereid: Started,
    label: string,
    load: { rate: number } | { closed: number },
    run: () => Promise<OpenLoopResult> = () => generate(nereid.http, urlPath, body, load, SECONDS),
  ): Promise<Point> => {
    const pid = nereid.proc.child.pid!;
    const before = await modelStats(nereid.http);
    const t0 = process.hrtime.bigint();
    const threads0 = threadSeconds(pid);
    const busiest =
      [...threads0.keys()].filter((t) => t !== pid).sort((a, b) => threads0.get(b)! - threads0.get(a)!)[0] ?? pid;
    const [st0, sm0] = [schedstat(pid, busiest), schedstat(pid, pid)];
    const p0 = cpuSeconds(pid);
    const m0 = machineTicks();
    const out = await run();
    const s = Number(process.hrtime.bigint() - t0) / 1e9;
    const threads1 = threadSeconds(pid);
    const [st1, sm1] = [schedstat(pid, busiest), schedstat(pid, pid)];
    const p1 = cpuSeconds(pid);
    const m1 = machineTicks();
    const after = await modelStats(nereid.http);
    const used = (tid: number): number => (threads1.get(tid) ?? 0) - (threads0.get(tid) ?? 0);
    const main = used(pid);
    let session = 0;
    for (const tid of threads1.keys()) if (tid !== pid) session = Math.max(session, used(tid));
    const machinePct = (100 * cores * (m1.busy - m0.busy)) / Math.max(1, m1.total - m0.total);
    const processPct = (100 * (p1 - p0)) / s;
    const generatorPct = (100 * out.cpuSeconds) / out.seconds;
    const n = Math.max(1, after.success - before.success);
    const batches = Math.max(1, after.executions - before.executions);
    const us = (a: number, b: number): string => fmt((a - b) / n / 1000);
    return {
      label,
      load: out,
      okPerSec: out.okInWindow / out.seconds,
      mainPct: (100 * main) / s,
      sessionPct: (100 * session) / s,
      sessionWaitPct: (100 * (st1.waitNs - st0.waitNs)) / 1e9 / s,
      mainWaitPct: (100 * (sm1.waitNs - sm0.waitNs)) / 1e9 / s,
      sessionSleepsPerSec: (st1.sleeps - st0.sleeps) / s,
      processPct,
      generatorPct,
      machinePct,
      othersPct: Math.max(0, machinePct - processPct - generatorPct),
      mainUsPerRequest: (1e6 * main) / Math.max(1, out.sent),
      server:
        `mean request ${us(after.requestNs, before.requestNs)} µs = queue ${us(after.queueNs, before.queueNs)} + ` +
        `compute ${us(after.computeNs, before.computeNs)} (of which the run ${us(after.inferNs, before.inferNs)}), ` +
        `mean batch ${fmt((after.inferences - before.inferences) / batches, 1)}`,
    };
  };

  const rows: string[][] = [];
  const row = (round: string, server: string, p: Point): void => {
    const o = p.load;
    rows.push([
      round,
      server,
      p.label,
      fmt(p.okPerSec),
      fmt(o.okP50us),
      fmt(o.okP99us),
      o.refused === 0 ? '0' : `${o.refused} (${o.retryAfter} R-A)`,
      `${fmt(p.mainPct)} / ${fmt(p.sessionPct)} / ${fmt(p.processPct)}`,
      `${fmt(p.mainWaitPct)} / ${fmt(p.sessionWaitPct)} (${fmt(p.sessionSleepsPerSec)}/s)`,
      fmt(p.mainUsPerRequest),
      `${fmt(p.generatorPct)}${o.late > 0 ? ` (${o.late} late, max ${fmt(o.maxLagUs / 1000, 1)} ms)` : ''}`,
      `${fmt(p.machinePct)} / ${fmt(p.othersPct)}`,
      p.server +
        (o.otherErrors > 0 ? `; ${o.otherErrors} other errors` : '') +
        (o.unsent > 0 ? `; ${o.unsent} never sent` : '') +
        (o.excessSent > 0 ? `; ${o.excessRefused} refused elsewhere, ${o.excessDropped} not sent there` : ''),
    ]);
  };

  for (const { nereid } of servers) await generate(nereid.http, urlPath, body, { closed: 32 }, 1); // warm-up
  type Ratios = {
    goodput32: number;
    goodput64: number;
    p99vs32: number;
    p99vs64: number;
    goodput: number;
    split: number;
    alone: number;
  };
  /** The overload's generator, with all but 1× of its requests sent to the refuser. */
  const split = (nereid: Started, capacity: number) => (): Promise<OpenLoopResult> =>
    runGenerator(
      evenLoad(nereid.http, urlPath, body, capacity * FACTOR, SECONDS, {
        port: refuser.port,
        share: (FACTOR - 1) / FACTOR,
      }),
      GENERATOR_PREFIX,
    );
  const ratios = new Map<string, Ratios[]>(servers.map((x) => [x.name, []]));
  const againstBaseline: number[] = [];
  for (let r = 1; r <= ROUNDS; r++) {
    const order = r % 2 === 1 ? servers : [...servers].reverse();
    const goodputs = new Map<string, number>();
    for (const { name, nereid } of order) {
      const c32 = await point(nereid, 'closed c32', { closed: 32 });
      const c64 = await point(nereid, 'closed c64', { closed: 64 });
      const capacity = Math.max(c32.okPerSec, c64.okPerSec);
      const over = await point(nereid, `${FACTOR}x open (${fmt(capacity * FACTOR)}/s)`, { rate: capacity * FACTOR });
      const excess = `${fmt(FACTOR - 1)}x`;
      const elsewhere = await point(nereid, `1x + ${excess} to a refuser`, { rate: capacity }, split(nereid, capacity));
      const alone = await point(nereid, '1x open alone', { rate: capacity });
      for (const p of [c32, c64, over, elsewhere, alone]) row(String(r), name, p);
      ratios.get(name)!.push({
        goodput32: over.okPerSec / c32.okPerSec,
        goodput64: over.okPerSec / c64.okPerSec,
        p99vs32: over.load.okP99us / c32.load.okP99us,
        p99vs64: over.load.okP99us / c64.load.okP99us,
        goodput: over.okPerSec / capacity,
        split: elsewhere.okPerSec / capacity,
        alone: alone.okPerSec / capacity,
      });
      goodputs.set(name, over.okPerSec / capacity);
    }
    if (servers.length > 1) againstBaseline.push(goodputs.get('this')! / goodputs.get('baseline')!);
  }
  for (const { name, nereid } of servers) row('after', name, await point(nereid, 'closed c64', { closed: 64 }));

  const header = [
    'round',
    'server',
    'point',
    'ok/s',
    'p50 µs',
    'p99 µs',
    'refused',
    'CPU % main / session / process',
    'runnable % main / session (sleeps)',
    'main µs/req',
    'generator CPU %',
    'machine / others %',
    'server',
  ];
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((x) => x[i]!.length)));
  const line = (cells: string[]): string =>
    cells.map((c, i) => (i === cells.length - 1 ? c : c.padStart(widths[i]!))).join('  ');
  process.stdout.write(
    `\n${medium.label}, dynamic batching, max_queue_size 64: overload ` +
    `at ${FACTOR}x capacity, ${SECONDS}s per point, ${ROUNDS} rounds, ` +
      `${cores} cores, load average ${os.loadavg().map((l) => l.toFixed(2)).join(' ')}\n`,
  );
  process.stdout.write(`${line(header)}\n`);
  for (const x of rows) process.stdout.write(`${line(x)}\n`);
  const summary = (name: string, xs: number[], bar: string): string => {
    const s = [...xs].sort((a, b) => a - b);
    const median = s.length % 2 === 1 ? s[(s.length - 1) / 2]! : (s[s.length / 2 - 1]! + s[s.length / 2]!) / 2;
    return `${name}: median ${fmt(median, 2)} (${s.map((x) => fmt(x, 2)).join(', ')}; bar ${bar})`;
  };
  for (const { name } of servers) {
    const xs = ratios.get(name)!;
    const tag = servers.length > 1 ? `${name}: ` : '';
    process.stdout.write(`${tag}${summary('goodput / capacity at c64', xs.map((x) => x.goodput64), '≥ 0.9')}\n`);
    process.stdout.write(`${tag}${summary('goodput / capacity at c32', xs.map((x) => x.goodput32), '≥ 0.9')}\n`);
    process.stdout.write(`${tag}${summary('goodput / capacity', xs.map((x) => x.goodput), '≥ 0.9')}\n`);
    process.stdout.write(
      `${tag}${summary('control: goodput / capacity, excess refused elsewhere', xs.map((x) => x.split), 'none')}\n`,
    );
    process.stdout.write(`${tag}${summary('control: goodput / capacity, 1x alone', xs.map((x) => x.alone), 'none')}\n`);
    process.stdout.write(`${tag}${summary('accepted p99 / p99 at c64', xs.map((x) => x.p99vs64), '≤ 3')}\n`);
    process.stdout.write(`${tag}${summary('accepted p99 / p99 at c32', xs.map((x) => x.p99vs32), '≤ 3')}\n`);
  }
  if (againstBaseline.length > 0)
    process.stdout.write(`${summary('goodput/capacity, this / baseline, per round', againstBaseline, 'none')}\n`);
} finally {
  for (const { nereid } of servers) await nereid.proc.stop();
  await refuser.proc.stop();
}
