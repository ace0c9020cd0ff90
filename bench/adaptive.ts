/**
 * `node dist/bench/adaptive.js` (section `adaptive` of bench/run.ts): the
 * dynamic batcher's policies side by side, with the guide's settings
 * (max_queue_delay_microseconds: 100, max_batch_size: 64, one instance), on
 * the tiny and the medium MLP, binary bodies, against the same model without
 * dynamic_batching (Triton's default of two instances). All variants are
 * served by one server and measured in the same run, their order flipped
 * every round; figures are medians over the rounds.
 *
 * (a) concurrency 1 (wrk -c1): p50 of adaptive, fixed and unbatched; bar:
 *     adaptive ≤ unbatched + 20 µs. Each round's point runs in slices of about
 *     a second, the variants alternated. Beside it the quartiles, each slice's
 *     p50 and the batches that waited out their delay (at c1 under adaptive,
 *     only a request held up by a pause of the whole process). Every variant
 *     is warmed first.
 * (b) concurrency 8 and 32: throughput; bar: adaptive ≥ 0.97× fixed. Like
 *     (a), each round's point runs in slices of about a second, the variants
 *     alternated (the six orders in turn), after a second of load per variant at
 *     concurrency 8: how many requests a batch gathers follows the CPU the
 *     machine leaves the server and holds for a whole load run (docs/batching.md,
 *     "Bench method for (b)"), so one long point per variant could catch one state alone.
 *     Each slice's adaptive/fixed is taken against the fixed slice beside it and
 *     the verdict is their median, with a 90 % interval (slices resampled; a
 *     bar inside it is printed as undecided); beside it the A/A control, a
 *     second model under fixed (`fixed_aa`, measured the same way).
 * (c) open-loop Poisson arrivals (bench/open-loop.ts, seeded) at 30, 60 and
 *     90 % of the capacity (the better of the two policies' throughput at
 *     concurrency 32): p50 and p99 of each variant.
 * (d) overload against the same variants with max_queue_size 64, both
 *     policies: each one's capacity as a closed loop over 64 connections (the
 *     queue's bound) from the open-loop generator, then an open loop at twice
 *     it on an even clock, from the same generator: goodput (answered within
 *     the clock, per second) against that capacity. Capacity and overload are
 *     measured by one client at the same cost per request; the Poisson
 *     generator of (c) polls a core away where wrk never polls, so either
 *     against the other on two cores charged the client's difference to the
 *     server. Beside it, its controls (bench/overload-control.ts): the same
 *     generator at the same rate, with only 1× sent to the server and the
 *     excess to a separate process that refuses everything (what the machine
 *     leaves the server when its refusals cost it nothing), and 1× alone.
 *     "sent/due": the share of the 2× point's due requests that found a free
 *     connection among the generator's 1,024 (below 1, the server read them
 *     so slowly that less than 2× was offered).
 * (e) the batcher's own cost: how long after its delay a batch reaches the
 *     instance. In process, the real batchers (dynamic, and the sequence
 *     batcher's oldest strategy) with an instance that notes when execute()
 *     is called: first enqueue → execute start − delay, p50 and p99. In the
 *     server, the tiny model under fixed at concurrency 1 with request
 *     tracing: QUEUE_START → COMPUTE_START (executeBatch) and → COMPUTE_INPUT_END
 *     (the session thread has the inputs), less the delay.
 *
 * Environment: BENCH_SECONDS (per point, default 3), BENCH_ROUNDS (rounds of
 * (a) and (b), default 2), BENCH_WARM_SECONDS (c1 load per variant before
 * them, default 2), BENCH_MODELS (e.g. "tiny"), BENCH_PARTS (the
 * parts to run, e.g. "ab"; default all), ADAPTIVE_OVERLOAD_ONLY=1 ((d) alone).
 */
import { spawn } from 'node:child_process';
import { mkdir, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { create } from '@bufbuild/protobuf';
import type { BackendInstance, BackendRequest, BackendResponse } from '../src/backends/backend.js';
import { ModelDynamicBatchingSchema, ModelSequenceBatchingSchema } from '../src/gen/model_config_pb.js';
import { DynamicBatcher } from '../src/scheduler/dynamic-batcher.js';
import { ScheduledRequest } from '../src/scheduler/scheduled-request.js';
import { ModelInstance, type Scheduler } from '../src/scheduler/scheduler.js';
import { SequenceBatcher } from '../src/scheduler/sequence-batcher/index.js';
import { ModelVersionStatistics } from '../src/types/statistics.js';
import { binaryBody } from './bodies.js';
import { type BenchModel, benchModelsDir, buildBenchModels } from './models.js';
import { overloadControl } from './overload-control.js';
import { DIST, startNaive, startNereid } from './processes.js';
import { type HttpBody, runWrk } from './wrk.js';

const SECONDS = Number(process.env.BENCH_SECONDS ?? 3);
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 2);
const DELAY_US = 100;
const MAX_BATCH = 64;
const LOADS = [0.3, 0.6, 0.9];
const OVERLOAD = 2;
/** ADAPTIVE_OVERLOAD_ONLY=1: (d) alone. */
const OVERLOAD_ONLY = process.env['ADAPTIVE_OVERLOAD_ONLY'] === '1';
const PARTS = process.env['BENCH_PARTS'] ?? 'abcde';
/** (a) and (b) run each round's point in alternated slices of about this many seconds. */
const C1_SLICE_SECONDS = 1;
/** Seconds of load per variant at concurrency 8 before (b)'s rounds, not measured. */
const B_WARM_SECONDS = 1;
/** Seconds of c1 load per variant before the closed-loop rounds, not measured. */
const WARM_SECONDS = Number(process.env['BENCH_WARM_SECONDS'] ?? 2);

/** fixed_aa: a second model under fixed, (b)'s A/A control. */
type Variant = 'adaptive' | 'fixed' | 'fixed_aa' | 'unbatched';
const B_VARIANTS: readonly [Variant, Variant, Variant] = ['adaptive', 'fixed', 'fixed_aa'];

function fmt(n: number, digits = 0): string {
  if (!Number.isFinite(n)) return '-';
  return n.toLocaleString('en-US', { maximumFractionDigits: digits, minimumFractionDigits: digits });
}

function median(xs: readonly number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  if (s.length === 0) return NaN;
  const m = s.length >> 1;
  return s.length % 2 === 1 ? s[m]! : (s[m - 1]! + s[m]!) / 2;
}

function sum(xs: readonly number[] | undefined): number {
  return (xs ?? []).reduce((a, x) => a + x, 0);
}

/** The q-quantile, interpolated between the nearest ranks. */
function quantile(xs: readonly number[], q: number): number {
  const s = [...xs].sort((a, b) => a - b);
  if (s.length === 0) return NaN;
  const at = (s.length - 1) * q;
  const lo = Math.floor(at);
  return lo + 1 < s.length ? s[lo]! + (s[lo + 1]! - s[lo]!) * (at - lo) : s[lo]!;
}

/** A 90 % interval for the median of xs, resampling its values (seeded: one run prints the same interval). */
function medianInterval(xs: readonly number[]): [number, number] {
  let seed = 12345;
  const next = (): number => (seed = (Math.imul(seed, 1103515245) + 12345) >>> 0) / 2 ** 32;
  const medians: number[] = [];
  for (let n = 0; n < 2000; n++) medians.push(median(xs.map(() => xs[Math.floor(next() * xs.length)]!)));
  return [quantile(medians, 0.05), quantile(medians, 0.95)];
}

/**
 * The step's order of three: the six permutations in turn, so that each takes each place and follows each other
 * as often (a rotation alone keeps the cycle, and each one would always follow the same other).
 */
function permute<T>(xs: readonly [T, T, T], step: number): T[] {
  const [a, b, c] = xs;
  const all = [[a, b, c], [b, c, a], [c, a, b], [c, b, a], [b, a, c], [a, c, b]];
  return all[step % all.length]!;
}

function percentile(sorted: readonly number[], p: number): number {
  return sorted[Math.min(sorted.length - 1, Math.floor(p * sorted.length))]!;
}

function printTable(title: string, header: string[], rows: string[][]): void {
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => r[i]!.length)));
  const line = (cells: string[]) => cells.map((c, i) => c.padStart(widths[i]!)).join('  ');
  process.stdout.write(`\n${title}\n${line(header)}\n${widths.map((w) => '-'.repeat(w)).join('  ')}\n`);
  for (const r of rows) process.stdout.write(`${line(r)}\n`);
}

function size(m: BenchModel): string {
  return m.plainName.replace(/^mlp_/, '');
}

function modelName(m: BenchModel, v: Variant, bounded = false): string {
  return `${size(m)}_${v}${bounded ? '_bounded' : ''}`;
}

function configText(m: BenchModel, v: Variant, bounded: boolean): string {
  const lines = [
    `name: "${modelName(m, v, bounded)}"`,
    'platform: "onnxruntime_onnx"',
    `max_batch_size: ${MAX_BATCH}`,
    `input [ { name: "input" data_type: TYPE_FP32 dims: [ ${m.inputSize} ] } ]`,
    `output [ { name: "output" data_type: TYPE_FP32 dims: [ ${m.outputSize} ] } ]`,
  ];
  if (v !== 'unbatched') {
    const queue = bounded ? ' default_queue_policy { max_queue_size: 64 }' : '';
    lines.push(
      `dynamic_batching { max_queue_delay_microseconds: ${DELAY_US}${queue} }`,
      'instance_group [ { kind: KIND_CPU count: 1 } ]',
      `parameters { key: "batching_policy" value: { string_value: "${v === 'fixed_aa' ? 'fixed' : v}" } }`,
    );
  }
  return `${lines.join('\n')}\n`;
}

async function writeRepository(models: readonly BenchModel[]): Promise<string> {
  const dir = path.join(benchModelsDir(), 'adaptive');
  await rm(dir, { recursive: true, force: true });
  for (const m of models) {
    const onnx = await readFile(m.onnxFile);
    const variants: Array<[Variant, boolean]> = [
      ['adaptive', false],
      ['fixed', false],
      ['fixed_aa', false],
      ['unbatched', false],
      ['adaptive', true],
      ['fixed', true],
    ];
    for (const [v, bounded] of variants) {
      const name = modelName(m, v, bounded);
      await mkdir(path.join(dir, name, '1'), { recursive: true });
      await writeFile(path.join(dir, name, 'config.pbtxt'), configText(m, v, bounded));
      await writeFile(path.join(dir, name, '1', 'model.onnx'), onnx);
    }
  }
  return dir;
}

interface OpenLoopResult {
  /** Requests written, and due on the clock (a due request waits for a free connection, up to 1,024). */
  sent: number;
  scheduled: number;
  okInWindow: number;
  refused: number;
  otherErrors: number;
  okP50us: number;
  okP99us: number;
  seconds: number;
  late: number;
}

/**
 * bench/open-loop.ts in its own process: by default an open loop of Poisson arrivals at `rate`; `even`: on an even
 * clock (no polling); `closed`: a closed loop over that many connections (`rate` unused).
 */
function openLoop(
  port: number,
  model: string,
  body: HttpBody,
  rate: number,
  shape: { even?: boolean; closed?: number } = {},
): Promise<OpenLoopResult> {
  const connections = shape.closed ?? (shape.even === true ? 1024 : 256);
  const config = {
    port,
    path: `/v2/models/${model}/infer`,
    headers: body.headers,
    bodyBase64: body.body.toString('base64'),
    rate,
    seconds: SECONDS,
    connections,
    maxConnections: shape.closed ?? 1024,
    warmPath: '/v2/health/live',
    poisson: shape.closed === undefined && shape.even !== true,
    closed: shape.closed !== undefined,
  };
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [path.join(DIST, 'bench', 'open-loop.js'), JSON.stringify(config)], {
      stdio: ['ignore', 'pipe', 'inherit'],
    });
    let out = '';
    child.stdout.on('data', (c: Buffer) => (out += c.toString()));
    child.on('error', reject);
    child.on('exit', (code) => {
      try {
        resolve(JSON.parse(out) as OpenLoopResult);
      } catch {
        reject(new Error(`open-loop generator exited with ${code}: ${out}`));
      }
    });
  });
}

interface Counts {
  requests: number;
  batches: number;
  /** Batches sent early by the adaptive rule (nereid_batches_total{reason="adaptive"}). */
  early: number;
  /** Batches that waited out the queue delay (reason="delay"). */
  delay: number;
}

/** A model's inference and execution counts so far (its statistics), and its early batches (metrics). */
async function counts(server: { http: number; metrics: number }, model: string): Promise<Counts> {
  const res = await fetch(`http://127.0.0.1:${server.http}/v2/models/${model}/stats`);
  const body = (await res.json()) as { model_stats: Array<{ inference_count: number; execution_count: number }> };
  const s = body.model_stats[0]!;
  const text = await (await fetch(`http://127.0.0.1:${server.metrics}/metrics`)).text();
  const reason = (r: string): number => {
    const line = text.split('\n').find((l) => l.startsWith('nereid_batches_total{') &&
      l.includes(`model="${model}"`) && l.includes(`reason="${r}"`));
    return line === undefined ? 0 : Number(line.slice(line.lastIndexOf(' ') + 1));
  };
  return {
    requests: Number(s.inference_count),
    batches: Number(s.execution_count),
    early: reason('adaptive'),
    delay: reason('delay'),
  };
}

/** Flips the order every round. */
function order<T>(xs: readonly T[], round: number): T[] {
  return round % 2 === 0 ? [...xs] : [...xs].reverse();
}

/** (d): goodput at twice each policy's capacity against its bounded queue, both from the same generator. */
async function overloadPoint(port: number, m: BenchModel, body: HttpBody, refuserPort: number): Promise<void> {
  const over: string[][] = [];
  for (const v of ['adaptive', 'fixed'] as const) {
    const name = modelName(m, v, true);
    // Run alone, the server is fresh: a first loop warms its code paths up.
    if (OVERLOAD_ONLY) await openLoop(port, name, body, 0, { closed: 64 });
    const cap = await openLoop(port, name, body, 0, { closed: 64 });
    const capOk = cap.okInWindow / cap.seconds;
    const r = await openLoop(port, name, body, Math.round(capOk * OVERLOAD), { even: true });
    const goodput = r.okInWindow / r.seconds;
    const url = { port, urlPath: `/v2/models/${name}/infer` };
    const control = await overloadControl(url, refuserPort, body, capOk, OVERLOAD, SECONDS);
    over.push([
      v,
      fmt(capOk),
      fmt(goodput),
      fmt(goodput / capOk, 2),
      fmt(control.elsewhereOkPerSec / capOk, 2),
      fmt(control.aloneOkPerSec / capOk, 2),
      fmt(r.sent / Math.max(1, r.scheduled), 2),
      fmt(r.refused),
      fmt(r.okP99us),
      fmt(cap.okP99us),
      fmt(r.otherErrors),
    ]);
  }
  printTable(
    `${m.label}: ${OVERLOAD}× capacity open loop (even clock), max_queue_size 64; capacity: closed loop over 64`,
    [
      'policy',
      'capacity/s',
      'goodput/s',
      'x capacity',
      'control: excess refused elsewhere',
      '1x alone',
      'sent/due at 2x',
      'refused',
      'ok p99us',
      'cap p99us',
      'errors',
    ],
    over,
  );
}

async function policies(models: readonly BenchModel[], repo: string): Promise<void> {
  const server = await startNereid(repo);
  // The excess of (d)'s control, refused by a process of its own.
  const refuser = OVERLOAD_ONLY || PARTS.includes('d') ? await startNaive(models[0]!.onnxFile, 'refuse') : undefined;
  try {
    for (const m of models) {
      const body = binaryBody(m.inputName, m.outputName, m.inputSize);
      if (OVERLOAD_ONLY) {
        await overloadPoint(server.http, m, body, refuser!.port);
        continue;
      }
      const url = (v: Variant, bounded = false) =>
        `http://127.0.0.1:${server.http}/v2/models/${modelName(m, v, bounded)}/infer`;
      // (a) and (b): closed loops, rounds alternated.
      const closed = new Map<string, number[]>();
      const note = (key: string, value: number) => closed.set(key, [...(closed.get(key) ?? []), value]);
      // A fresh server answers slower for its first seconds (at c1 on the busy 2-core machine, 20-40 µs
      // at p50 for 2-3 s, whichever variant it serves), and so does a variant's first use after another's
      // (about 10 µs for 1-2 s): unwarmed, round 1's first point, always tiny `adaptive`, carried it alone.
      if (WARM_SECONDS > 0 && (PARTS.includes('a') || PARTS.includes('b'))) {
        for (const v of ['adaptive', 'fixed', 'unbatched'] as const) await runWrk(url(v), body, 1, WARM_SECONDS);
      }
      for (let round = 0; round < ROUNDS; round++) {
        // In slices of about a second, alternated: the machine's state at c1 (latency in two modes some 35 µs
        // apart, the same for every variant) holds for seconds, and a whole point could catch one mode alone.
        const slices = Math.max(1, Math.round(SECONDS / C1_SLICE_SECONDS));
        for (let slice = 0; slice < slices && PARTS.includes('a'); slice++) {
          for (const v of order<Variant>(['adaptive', 'fixed', 'unbatched'], round * slices + slice)) {
            const before = v === 'unbatched' ? undefined : await counts(server, modelName(m, v));
            const r = await runWrk(url(v), body, 1, SECONDS / slices);
            note(`c1 ${v} p50`, r.p50us);
            note(`c1 ${v} p25`, r.p25us);
            note(`c1 ${v} p75`, r.p75us);
            note(`c1 ${v} p99`, r.p99us);
            note(`c1 ${v} rps`, r.requestsPerSec);
            if (before !== undefined) {
              const after = await counts(server, modelName(m, v));
              note(`c1 ${v} batches`, after.batches - before.batches);
              note(`c1 ${v} delay`, after.delay - before.delay);
            }
          }
        }
        for (const c of [8, 32]) {
          if (!PARTS.includes('b')) break;
          // Once, at the first concurrency: each model has run batches of every size up to 8 before a slice.
          if (round === 0 && c === 8 && B_WARM_SECONDS > 0) {
            for (const v of B_VARIANTS) await runWrk(url(v), body, c, B_WARM_SECONDS);
          }
          for (let slice = 0; slice < slices; slice++) {
            const rps = new Map<Variant, number>();
            for (const v of permute(B_VARIANTS, round * slices + slice)) {
              const before = await counts(server, modelName(m, v));
              const r = await runWrk(url(v), body, c, SECONDS / slices);
              const after = await counts(server, modelName(m, v));
              rps.set(v, r.requestsPerSec);
              note(`c${c} ${v} rps`, r.requestsPerSec);
              note(`c${c} ${v} p50`, r.p50us);
              note(`c${c} ${v} p99`, r.p99us);
              note(`c${c} ${v} batch`, (after.requests - before.requests) / (after.batches - before.batches));
              note(`c${c} ${v} early`, (100 * (after.early - before.early)) / (after.batches - before.batches));
            }
            note(`c${c} ratio`, rps.get('adaptive')! / rps.get('fixed')!);
            note(`c${c} aa`, rps.get('fixed_aa')! / rps.get('fixed')!);
          }
        }
      }
      const med = (key: string) => median(closed.get(key) ?? []);
      const quartiles = (key: string) =>
        `${fmt(quantile(closed.get(key) ?? [], 0.25), 3)}-${fmt(quantile(closed.get(key) ?? [], 0.75), 3)}`;
      const range = (key: string) => (closed.get(key) ?? []).map((x) => fmt(x, 2)).join(' ');
      if (PARTS.includes('a')) {
      printTable(
        `${m.label}: concurrency 1 (wrk -c1, binary, ${SECONDS}s × ${ROUNDS} rounds in alternated slices, after ` +
        `${WARM_SECONDS}s of warm-up each; medians of the slices)`,
        ['variant', 'req/s', 'p25us', 'p50us', 'p75us', 'p99us', 'Δp50 vs unbatched', 'p50 by slice', 'delay batches'],
        (['adaptive', 'fixed', 'unbatched'] as const).map((v) => [
          v,
          fmt(med(`c1 ${v} rps`)),
          fmt(med(`c1 ${v} p25`)),
          fmt(med(`c1 ${v} p50`)),
          fmt(med(`c1 ${v} p75`)),
          fmt(med(`c1 ${v} p99`)),
          fmt(med(`c1 ${v} p50`) - med('c1 unbatched p50'), 1),
          (closed.get(`c1 ${v} p50`) ?? []).map((x) => fmt(x)).join(' '),
          v === 'unbatched'
            ? '-'
            : `${fmt(sum(closed.get(`c1 ${v} delay`)))} of ${fmt(sum(closed.get(`c1 ${v} batches`)))}`,
        ]),
      );
      const gap = med('c1 adaptive p50') - med('c1 unbatched p50');
      const verdict = gap <= 20 ? 'met' : 'NOT met';
      process.stdout.write(`(a) adaptive p50 − unbatched p50 = ${fmt(gap, 1)} µs (bar ≤ 20): ${verdict}\n`);
      }
      if (PARTS.includes('b')) {
        printTable(
          `${m.label}: closed loops (wrk, binary), adaptive against fixed; requests per batch (statistics)`,
          [
            'conc', 'adaptive/s', 'p50us', 'p99us', 'batch', 'fixed/s', 'p50us', 'p99us', 'batch',
            'adaptive/fixed', 'quartiles', 'A/A fixed_aa/fixed', 'quartiles',
          ],
          [8, 32].map((c) => [
            String(c),
            fmt(med(`c${c} adaptive rps`)),
            fmt(med(`c${c} adaptive p50`)),
            fmt(med(`c${c} adaptive p99`)),
            fmt(med(`c${c} adaptive batch`), 1),
            fmt(med(`c${c} fixed rps`)),
            fmt(med(`c${c} fixed p50`)),
            fmt(med(`c${c} fixed p99`)),
            fmt(med(`c${c} fixed batch`), 1),
            fmt(med(`c${c} ratio`), 3),
            quartiles(`c${c} ratio`),
            fmt(med(`c${c} aa`), 3),
            quartiles(`c${c} aa`),
          ]),
        );
        for (const c of [8, 32]) {
          process.stdout.write(
            `c${c} by slice: adaptive/fixed ${range(`c${c} ratio`)}; A/A ${range(`c${c} aa`)}; requests per ` +
            `batch, adaptive ${range(`c${c} adaptive batch`)}, fixed ${range(`c${c} fixed batch`)}; ` +
            `% of adaptive's batches sent early ${range(`c${c} adaptive early`)}\n`,
          );
        }
        for (const c of [8, 32]) {
          const ratio = med(`c${c} ratio`);
          const [lo, hi] = medianInterval(closed.get(`c${c} ratio`) ?? []);
          const [aaLo, aaHi] = medianInterval(closed.get(`c${c} aa`) ?? []);
          // Decided only where the whole interval lies on one side of the bar.
          const undecided = lo < 0.97 && 0.97 <= hi ? ' (undecided: inside the interval)' : '';
          process.stdout.write(
            `(b) c${c}: adaptive/fixed ${fmt(ratio, 3)} [${fmt(lo, 3)}, ${fmt(hi, 3)}] (bar ≥ 0.97): ` +
            `${ratio >= 0.97 ? 'met' : 'NOT met'}${undecided}; ` +
            `A/A ${fmt(med(`c${c} aa`), 3)} [${fmt(aaLo, 3)}, ${fmt(aaHi, 3)}]\n`,
          );
        }
      }
      if (!PARTS.includes('c') && !PARTS.includes('d')) continue;

      // (c) open-loop Poisson at shares of capacity.
      let capacity = Math.max(med('c32 adaptive rps'), med('c32 fixed rps'));
      if (!Number.isFinite(capacity) && PARTS.includes('c')) {
        const r = await runWrk(url('fixed'), body, 32, SECONDS);
        capacity = r.requestsPerSec;
      }
      const rows: string[][] = [];
      for (const [i, load] of LOADS.entries()) {
        if (!PARTS.includes('c')) break;
        const rate = Math.round(capacity * load);
        const point = new Map<Variant, OpenLoopResult>();
        for (const v of order<Variant>(['adaptive', 'fixed', 'unbatched'], i))
          point.set(v, await openLoop(server.http, modelName(m, v), body, rate));
        const row = [`${Math.round(load * 100)}%`, fmt(rate)];
        for (const v of ['adaptive', 'fixed', 'unbatched'] as const) {
          const r = point.get(v)!;
          row.push(fmt(r.okP50us), fmt(r.okP99us));
        }
        row.push(fmt(point.get('adaptive')!.okP50us / point.get('fixed')!.okP50us, 2));
        rows.push(row);
      }
      if (PARTS.includes('c'))
      printTable(
        `${m.label}: open-loop Poisson arrivals, capacity ${fmt(capacity)} req/s (c32, better policy)`,
        ['load', 'req/s', 'adapt p50', 'p99', 'fixed p50', 'p99', 'unbat p50', 'p99', 'p50 a/f'],
        rows,
      );

      if (PARTS.includes('d')) await overloadPoint(server.http, m, body, refuser!.port);
    }
  } finally {
    await server.proc.stop();
    await refuser?.proc.stop();
  }
}

/** An instance that notes when each execute() starts and answers at once. */
class StampingInstance implements BackendInstance {
  startedNs = 0n;
  execute(requests: readonly BackendRequest[]): Promise<BackendResponse[]> {
    this.startedNs = process.hrtime.bigint();
    return Promise.resolve(requests.map(() => ({ outputs: [] })));
  }
  async close(): Promise<void> {}
}

/** Requests sent one at a time (each a turn after the last was answered): execute start − enqueue − delay. */
async function inProcessCost(make: (i: ModelInstance, s: ModelVersionStatistics) => Scheduler, sequence: boolean) {
  const stamping = new StampingInstance();
  const stats = new ModelVersionStatistics('m', '1');
  const scheduler = make(new ModelInstance('m_0', stamping), stats);
  const costs: number[] = [];
  for (let n = 0; n < 3000; n++) {
    await new Promise<void>((resolve) => {
      const request: BackendRequest = {
        id: '',
        inputs: [],
        requestedOutputs: [],
        parameters: {},
        batchSize: 1,
        correlationId: sequence ? BigInt(n + 1) : 0n,
        flags: sequence ? 3 : 0, // a sequence of one request: START and END
      };
      const item = new ScheduledRequest(request, 0, 0, stats, () => {
        costs.push(Number(stamping.startedNs - item.enqueueNs) / 1000 - DELAY_US);
        setImmediate(resolve);
      }, undefined);
      scheduler.enqueue(item);
    });
  }
  costs.sort((a, b) => a - b);
  return { p50: percentile(costs, 0.5), p99: percentile(costs, 0.99) };
}

async function serverCost(tiny: BenchModel, repo: string): Promise<{ toStart: number[]; toInput: number[] }> {
  const dir = path.join(tmpdir(), `nereid-bench-adaptive-${process.pid}`);
  await mkdir(dir, { recursive: true });
  const file = path.join(dir, 'trace.json');
  const server = await startNereid(repo, [
    `--trace-config=triton,file=${file}`,
    '--trace-config=level=TIMESTAMPS',
    '--trace-config=rate=1',
  ]);
  try {
    await runWrk(
      `http://127.0.0.1:${server.http}/v2/models/${modelName(tiny, 'fixed')}/infer`,
      binaryBody(tiny.inputName, tiny.outputName, tiny.inputSize),
      1,
      SECONDS,
    );
  } finally {
    await server.proc.stop();
  }
  const entries = JSON.parse(await readFile(file, 'utf8')) as Array<{
    id: number;
    timestamps?: Array<{ name: string; ns: number }>;
  }>;
  await rm(dir, { recursive: true, force: true });
  const byId = new Map<number, Map<string, number>>();
  for (const e of entries) {
    let ts = byId.get(e.id);
    if (ts === undefined) byId.set(e.id, (ts = new Map()));
    for (const t of e.timestamps ?? []) ts.set(t.name, t.ns);
  }
  const toStart: number[] = [];
  const toInput: number[] = [];
  for (const ts of byId.values()) {
    const queued = ts.get('QUEUE_START');
    const start = ts.get('COMPUTE_START');
    const input = ts.get('COMPUTE_INPUT_END');
    if (queued === undefined || start === undefined || input === undefined) continue;
    toStart.push((start - queued) / 1000 - DELAY_US);
    toInput.push((input - queued) / 1000 - DELAY_US);
  }
  return { toStart: toStart.sort((a, b) => a - b), toInput: toInput.sort((a, b) => a - b) };
}

function quantiles(sorted: readonly number[]): [string, string] {
  return [fmt(percentile(sorted, 0.5), 1), fmt(percentile(sorted, 0.99), 1)];
}

async function batcherCost(models: readonly BenchModel[], repo: string): Promise<void> {
  const dynamic = await inProcessCost(
    (i, s) =>
      new DynamicBatcher('m', [i], s, {
        maxBatchSize: MAX_BATCH,
        batching: create(ModelDynamicBatchingSchema, {
          maxQueueDelayMicroseconds: BigInt(DELAY_US),
          preferredBatchSize: [MAX_BATCH],
        }),
        raggedInputs: new Set(),
        coalesceArrivals: true,
        policy: 'fixed',
      }),
    false,
  );
  const oldest = await inProcessCost(
    (i, s) =>
      new SequenceBatcher('m', [i], s, {
        maxBatchSize: MAX_BATCH,
        batching: create(ModelSequenceBatchingSchema, {
          strategyChoice: {
            case: 'oldest',
            value: { maxCandidateSequences: 4, maxQueueDelayMicroseconds: BigInt(DELAY_US) },
          },
        }),
        states: [],
        policy: 'fixed',
      }),
    true,
  );
  const rows = [
    ['in process: dynamic batcher', 'enqueue → execute()', fmt(dynamic.p50, 1), fmt(dynamic.p99, 1)],
    ['in process: sequence batcher, oldest', 'enqueue → execute()', fmt(oldest.p50, 1), fmt(oldest.p99, 1)],
  ];
  const tiny = models.find((m) => size(m) === 'tiny');
  if (tiny !== undefined) {
    const { toStart, toInput } = await serverCost(tiny, repo);
    rows.push(
      ['server: tiny MLP, fixed, c1', 'QUEUE_START → COMPUTE_START', ...quantiles(toStart)],
      ['server: tiny MLP, fixed, c1', '→ COMPUTE_INPUT_END', ...quantiles(toInput)],
    );
  }
  printTable(
    `(e) the batcher's own cost: time past the ${DELAY_US} µs delay until the batch reaches the instance ` +
    '(bar: p50 ≤ 15 µs)',
    ['where', 'from → to', 'p50 µs', 'p99 µs'],
    rows,
  );
}

const only = process.env.BENCH_MODELS?.split(',');
const models = (await buildBenchModels()).filter((m) => !only || only.some((o) => m.plainName.includes(o)));
const repo = await writeRepository(models);
if (!OVERLOAD_ONLY && PARTS.includes('e')) await batcherCost(models, repo);
if (OVERLOAD_ONLY || /[abcd]/.test(PARTS)) await policies(models, repo);
