/**
 * Model paging (`npm run bench -- paging`): a repository larger than the
 * memory budget under a skewed request stream, against a real `nereid serve`.
 *
 *   paging     BENCH_PAGING_MODELS (default 30) ONNX MLPs of about 40 MB
 *              resident each, a budget that holds BENCH_PAGING_HOLD (default
 *              8) of them as they serve (calibrated first: one model's figure,
 *              what a serial churn keeps, what 8 models hold beyond their
 *              figures while they serve), a Zipf(1.1) stream at concurrency 8 for
 *              BENCH_SECONDS (default 60): failed requests, the server's RSS
 *              sampled every 100 ms against the budget plus the server's own
 *              base, evictions of the 5 hottest models, p50/p99 of requests
 *              to a loaded model vs one that had to load.
 *   paging, restarted
 *              the paging server again, reading the scores the first one
 *              wrote when it stopped (--model-memory-history), under a
 *              stream of the same popularity with another seed: the evictions
 *              of the 5 hottest from the first request.
 *   all loaded the same models and stream with no budget (every model loaded
 *              at start): memory and latency.
 *   dance      no budget, explicit mode, each request doing what clients do
 *              against Triton: load, infer, unload: latency and failures
 *              (clients unload each other's models).
 *
 * BENCH_PAGING_ONLY=paging runs the first variant alone (while tuning it).
 * BENCH_PAGING_TRACE=1 also samples the paging server's RSS every 5 ms and
 * prints, around each sample above base + budget, the server's paging log
 * lines (unloads, measured loads) with their times.
 * Models are written under bench/models (git-ignored) by the fixture builder: bench/paging-models.ts.
 */
import { existsSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { mkdir, rm, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { buildAddSubModel, buildMlp, seededRandom } from '../test/helpers/onnx-builder.js';
import { LAYERS, pagingModelsDir } from './paging-models.js';
import { type Proc, startNereid } from './processes.js';

const SECONDS = Number(process.env.BENCH_SECONDS ?? 60);
const MODELS = Number(process.env.BENCH_PAGING_MODELS ?? 30);
const HOLD = Number(process.env.BENCH_PAGING_HOLD ?? 8);
const CONCURRENCY = 8;
const ZIPF_S = 1.1;
const HOTTEST = 5;
const PAGING_ONLY = process.env.BENCH_PAGING_ONLY === 'paging';
const TRACE = process.env.BENCH_PAGING_TRACE === '1';
/**
 * Requests before the hottest models' evictions count (reported apart): until then a frequency cannot tell the
 * 5th hottest model from the 6th to 8th (docs/paging.md#which-model-goes).
 */
const WARM_UP_REQUESTS = Number(process.env.BENCH_PAGING_WARMUP ?? 1000);

const names = Array.from({ length: MODELS }, (_, i) => `m${String(i).padStart(2, '0')}`);

function config(name: string): string {
  return `name: "${name}"
platform: "onnxruntime_onnx"
max_batch_size: 8
input [ { name: "input" data_type: TYPE_FP32 dims: [ ${LAYERS[0]} ] } ]
output [ { name: "output" data_type: TYPE_FP32 dims: [ ${LAYERS.at(-1)} ] } ]
instance_group [ { kind: KIND_CPU count: 1 } ]
`;
}

async function buildRepository(): Promise<string> {
  const root = pagingModelsDir();
  for (const [i, name] of names.entries()) {
    const file = path.join(root, name, '1', 'model.onnx');
    if (!existsSync(file)) {
      await mkdir(path.dirname(file), { recursive: true });
      await writeFile(file, buildMlp(LAYERS, 1000 + i).builder.toBytes());
    }
    await writeFile(path.join(root, name, 'config.pbtxt'), config(name));
  }
  const warm = path.join(root, 'warm', '1', 'model.onnx');
  if (!existsSync(warm)) {
    await mkdir(path.dirname(warm), { recursive: true });
    await writeFile(warm, buildAddSubModel('INT32', 16).toBytes());
  }
  await writeFile(
    path.join(root, 'warm', 'config.pbtxt'),
    `name: "warm"
platform: "onnxruntime_onnx"
max_batch_size: 8
input [
  { name: "INPUT0" data_type: TYPE_INT32 dims: [ 16 ] },
  { name: "INPUT1" data_type: TYPE_INT32 dims: [ 16 ] }
]
output [
  { name: "OUTPUT0" data_type: TYPE_INT32 dims: [ 16 ] },
  { name: "OUTPUT1" data_type: TYPE_INT32 dims: [ 16 ] }
]
instance_group [ { kind: KIND_CPU count: 1 } ]
`,
  );
  return root;
}

/** Zipf(s) over ranks 1..n: model i has rank i + 1. */
function zipfSampler(n: number, s: number, seed: number): () => number {
  const weights = Array.from({ length: n }, (_, i) => 1 / (i + 1) ** s);
  const total = weights.reduce((a, b) => a + b, 0);
  const cdf: number[] = [];
  let acc = 0;
  for (const w of weights) cdf.push((acc += w / total));
  const rand = seededRandom(seed);
  return () => {
    const u = rand();
    let lo = 0;
    let hi = n - 1;
    while (lo < hi) {
      const mid = (lo + hi) >> 1;
      if (cdf[mid]! < u) lo = mid + 1;
      else hi = mid;
    }
    return lo;
  };
}

const BODY = JSON.stringify({
  inputs: [
    {
      name: 'input',
      datatype: 'FP32',
      shape: [1, LAYERS[0]],
      data: Array.from({ length: LAYERS[0]! }, (_, i) => (i % 17) / 17),
    },
  ],
});

function rssOf(pid: number): number {
  const m = /^VmRSS:\s+(\d+)\s+kB/m.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
  return Number(m![1]) * 1024;
}

async function post(port: number, url: string, body = ''): Promise<number> {
  const headers = { 'content-type': 'application/json' };
  const res = await fetch(`http://127.0.0.1:${port}${url}`, { method: 'POST', body, headers });
  await res.arrayBuffer();
  return res.status;
}

async function index(port: number): Promise<Array<{ name: string; state?: string; memory_bytes?: number }>> {
  const res = await fetch(`http://127.0.0.1:${port}/v2/repository/index`, { method: 'POST', body: '{}' });
  return (await res.json()) as Array<{ name: string; state?: string; memory_bytes?: number }>;
}

async function metricsText(port: number): Promise<string> {
  return (await fetch(`http://127.0.0.1:${port}/metrics`)).text();
}

function metricValue(text: string, name: string, labels = ''): number {
  const line = text.split('\n').find((l) => l.startsWith(`${name}${labels === '' ? ' ' : `{${labels}} `}`));
  return line === undefined ? 0 : Number(line.slice(line.lastIndexOf(' ') + 1));
}

function percentile(sorted: readonly number[], p: number): number {
  if (sorted.length === 0) return NaN;
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))]!;
}

const MB = (n: number) => (n / 2 ** 20).toFixed(1);
const ms = (n: number) => n.toFixed(1);

/** RSS every 5 ms and the server's log lines, both stamped with Date.now(). */
class Trace {
  readonly samples: Array<[number, number]> = [];
  readonly events: Array<[number, string]> = [];
  private timer: NodeJS.Timeout | undefined;
  private partial = '';
  /** The base the server's pager took (its log), to compare with the bench's. */
  serverBase: number | undefined;
  /** Loads the pager held for resident memory: how many, for how long in all, and the models it unloaded for it. */
  readonly checks = { n: 0, ms: 0, unloaded: 0 };
  /** Each unload for room as the pager logged it: which path chose it and what it saw. */
  readonly evictions: Array<Record<string, unknown>> = [];
  start(pid: number): void {
    this.timer = setInterval(() => {
      try {
        this.samples.push([Date.now(), rssOf(pid)]);
      } catch {
        // the server is gone
      }
    }, 5);
  }
  stop(): void {
    clearInterval(this.timer);
  }
  onLog = (text: string): void => {
    const lines = (this.partial + text).split('\n');
    this.partial = lines.pop()!;
    for (const line of lines) {
      try {
        const o = JSON.parse(line) as Record<string, unknown>;
        const { time, msg, model, bytes, used, needed, level: _l, pid: _p, hostname: _h, ...rest } = o;
        const figures = [bytes, used, needed].map((n) => (typeof n === 'number' ? MB(n) : '-')).join('/');
        if (msg === 'memory budget base' && typeof o.base === 'number') this.serverBase = o.base;
        if (typeof o.path === 'string' && typeof o.request === 'number') this.evictions.push(o);
        if (msg === 'resident memory checked before a load') {
          this.checks.n++;
          this.checks.ms += Number(o.ms);
          this.checks.unloaded += Number(o.unloaded);
        }
        const text = `${String(msg)} ${String(model ?? '')} ${figures} ${JSON.stringify(rest)}`;
        this.events.push([Date.parse(String(time)), text]);
      } catch {
        // not a log line
      }
    }
  };
  /**
   * The unloads of the first WARM_UP_REQUESTS requests (a cold start, before the stream's churn has left memory
   * kept): how many unpinned models were loaded at each (the loading one aside) and the places the budget held
   * (its figures; by path, the resident check's counting what the process held beyond them).
   */
  private cold(): string[] {
    const early = this.evictions.filter((e) => Number(e.request) <= WARM_UP_REQUESTS);
    const count = (values: number[]) => {
      const counts = new Map<number, number>();
      for (const v of values) counts.set(v, (counts.get(v) ?? 0) + 1);
      return [...counts].sort((a, b) => a[0] - b[0]).map(([k, n]) => `${k}: ${n}`).join(', ');
    };
    const out = [`trace: ${early.length} unloads in the first ${WARM_UP_REQUESTS} requests`];
    for (const path of [...new Set(early.map((e) => String(e.path)))].sort()) {
      const of = early.filter((e) => e.path === path);
      const loaded = of.map((e) => String(e.loaded).split(' ').filter(Boolean).length);
      const places = of.map((e) => Number(e.places)).sort((a, b) => a - b);
      const extra = of.map((e) => Number(e.extra)).sort((a, b) => a - b);
      out.push(
        `  ${path}: ${of.length}; models loaded at each {${count(loaded)}}; places ` +
          `${places[0]} / ${percentile(places, 50)} / ${places.at(-1)} (min / median / max); ` +
          `extra ${MB(percentile(extra, 50))} MiB median`,
      );
    }
    return out;
  }

  /**
   * The highest samples (within 8 MiB of `limit` or above it), each with the events and RSS in the 1.5 s before it
   * (at most `peaks` of them, 2 s apart).
   */
  report(limit: number, peaks = 6): string {
    const over = this.samples.filter(([, r]) => r > limit);
    const near = this.samples.filter(([, r]) => r > limit - 8 * 2 ** 20);
    const out = [
      `trace: ${this.samples.length} samples, ${over.length} above ${MB(limit)} MiB, ${near.length} within 8 MiB; ` +
        `the server's base ${this.serverBase === undefined ? '?' : MB(this.serverBase)} MiB`,
      `trace: ${this.checks.n} loads held for resident memory, ${this.checks.ms} ms in all, ` +
        `${this.checks.unloaded} models unloaded for it`,
    ];
    const byPath = (list: Array<Record<string, unknown>>) => {
      const counts = new Map<string, number>();
      for (const e of list) {
        const key = `${String(e.stage)}/${String(e.path)}${Number(e.nth) > 0 ? ' (not the first for its load)' : ''}`;
        counts.set(key, (counts.get(key) ?? 0) + 1);
      }
      return [...counts].map(([k, n]) => `${k}: ${n}`).join(', ');
    };
    const hot = this.evictions.filter((e) => names.slice(0, HOTTEST).includes(String(e.model)));
    out.push(`trace: unloads by path, all ${this.evictions.length}: ${byPath(this.evictions)}`);
    out.push(`trace: unloads by path, the ${HOTTEST} hottest ${hot.length}: ${byPath(hot)}`);
    out.push(...this.cold());
    for (const e of hot) {
      out.push(
        `  hot unload ${String(e.model)} at request ${String(e.request)}: ${String(e.stage)}/${String(e.path)} ` +
          `#${String(e.nth)}, places ${String(e.places)}, needed ${MB(Number(e.needed))} ` +
          `extra ${MB(Number(e.extra))} ` +
          `used ${MB(Number(e.used))} MiB; loaded (coldest first, * busy): ${String(e.loaded)}`,
      );
    }
    let lastShown = -Infinity;
    let shown = 0;
    for (const [t, r] of near.sort((a, b) => b[1] - a[1])) {
      if (shown >= peaks || Math.abs(t - lastShown) < 2000) continue;
      shown++;
      lastShown = t;
      out.push(`-- peak ${MB(r)} MiB (+${MB(r - limit)}) at ${t}`);
      const from = t - 1500;
      const rows: Array<[number, string]> = [
        ...this.events.filter(([e]) => e >= from && e <= t + 300),
        ...this.samples
          .filter(([s], i) => s >= from && s <= t + 300 && (i % 10 === 0 || Math.abs(s - t) < 150))
          .map(([s, v]) => [s, `rss ${MB(v)}`] as [number, string]),
      ];
      rows.sort((a, b) => a[0] - b[0]);
      for (const [e, text] of rows) out.push(`  ${e - t} ms: ${text}`);
    }
    return out.join('\n');
  }
}

interface RunResult {
  requests: number;
  /** Set once WARM_UP_REQUESTS requests were answered. */
  warmedUp?: Promise<void>;
  failures: number;
  /** Latencies (ms) of requests whose model was READY at the last index sample, and of the others. */
  hit: number[];
  miss: number[];
  maxRss: number;
  failureSamples: string[];
}

/**
 * A closed loop of CONCURRENCY clients, each picking a model from the Zipf
 * stream; `each` does one request and resolves with its HTTP status. An
 * index and RSS sample every 100 ms classify requests as hits or misses.
 */
async function run(
  port: number,
  pid: number,
  seed: number,
  each: (model: string) => Promise<number>,
  onWarmedUp?: () => Promise<void>,
): Promise<RunResult> {
  const next = zipfSampler(MODELS, ZIPF_S, seed);
  const ready = new Set<string>();
  let maxRss = 0;
  let running = true;
  const sampler = (async () => {
    while (running) {
      maxRss = Math.max(maxRss, rssOf(pid));
      try {
        const idx = await index(port);
        ready.clear();
        for (const e of idx) if (e.state === 'READY') ready.add(e.name);
      } catch {
        // the server is busy; keep the last sample
      }
      await new Promise((r) => setTimeout(r, 100));
    }
  })();
  const result: RunResult = { requests: 0, failures: 0, hit: [], miss: [], maxRss: 0, failureSamples: [] };
  const end = Date.now() + SECONDS * 1000;
  await Promise.all(
    Array.from({ length: CONCURRENCY }, async () => {
      while (Date.now() < end) {
        const model = names[next()]!;
        const wasReady = ready.has(model);
        const t0 = performance.now();
        let status: number;
        try {
          status = await each(model);
        } catch (err) {
          status = 0;
          if (result.failureSamples.length < 3) result.failureSamples.push(String(err));
        }
        const took = performance.now() - t0;
        result.requests++;
        if (result.requests === WARM_UP_REQUESTS && onWarmedUp) result.warmedUp = onWarmedUp();
        if (status !== 200) {
          result.failures++;
          if (result.failureSamples.length < 3 && status !== 0) result.failureSamples.push(`${model}: HTTP ${status}`);
          continue;
        }
        (wasReady ? result.hit : result.miss).push(took);
      }
    }),
  );
  running = false;
  await sampler;
  await result.warmedUp;
  result.maxRss = Math.max(maxRss, rssOf(pid));
  result.hit.sort((a, b) => a - b);
  result.miss.sort((a, b) => a - b);
  return result;
}

function row(label: string, r: RunResult, extra: string[]): string[] {
  const all = [...r.hit, ...r.miss].sort((a, b) => a - b);
  return [
    label,
    String(r.requests),
    String(r.failures),
    ms(percentile(all, 50)),
    ms(percentile(all, 99)),
    `${r.hit.length}: ${ms(percentile(r.hit, 50))} / ${ms(percentile(r.hit, 99))}`,
    `${r.miss.length}: ${ms(percentile(r.miss, 50))} / ${ms(percentile(r.miss, 99))}`,
    MB(r.maxRss),
    ...extra,
  ];
}

function printTable(title: string, header: string[], rows: string[][]): void {
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => r[i]!.length)));
  const line = (cells: string[]) => cells.map((c, i) => c.padStart(widths[i]!)).join('  ');
  process.stdout.write(`\n${title}\n${line(header)}\n${widths.map((w) => '-'.repeat(w)).join('  ')}\n`);
  for (const r of rows) process.stdout.write(`${line(r)}\n`);
}

async function stop(proc: Proc): Promise<void> {
  await proc.stop();
}

const repo = await buildRepository();
process.stdout.write(
  `\npaging: ${MODELS} models ${LAYERS.join('→')}, budget for ${HOLD}, Zipf(${ZIPF_S}), ` +
    `concurrency ${CONCURRENCY}, ${SECONDS} s per variant\n`,
);

// Calibration: what one model costs in a fresh server (the warm-up model takes the one-time costs).
let cost: number;
let warmCost: number;
{
  const s = await startNereid(repo, ['--model-control-mode=explicit', '--model-memory-budget=64GiB']);
  try {
    for (const m of ['warm', names[0]!, names[1]!, names[2]!]) await post(s.http, `/v2/repository/models/${m}/load`);
    const idx = await index(s.http);
    const bytes = (m: string) => idx.find((e) => e.name === m)!.memory_bytes!;
    warmCost = bytes('warm');
    cost = Math.max(bytes(names[1]!), bytes(names[2]!));
    process.stdout.write(
      `calibration: warm-up model ${MB(warmCost)} MiB (with one-time costs), ` +
        `one model ${MB(cost)} MiB (${MB(bytes(names[0]!))} for the first)\n`,
    );
  } finally {
    await stop(s.proc);
  }
}
// What the allocators keep of unloaded models counts against the budget (docs/paging.md#what-the-process-keeps):
// measured on a server that churns CHURN_LOADS loads through room for 3, it is added so that the budget holds HOLD.
const CHURN_LOADS = 16;
let retainedCost: number;
{
  const s = await startNereid(repo, [
    '--model-control-mode=explicit',
    `--model-memory-budget=${Math.round(warmCost + 3.5 * cost)}`,
    '--model-pin=warm',
  ]);
  try {
    await post(s.http, '/v2/repository/models/warm/load');
    for (let i = 0; i < CHURN_LOADS; i++) await post(s.http, `/v2/models/${names[i % MODELS]!}/infer`, BODY);
    retainedCost = metricValue(await metricsText(s.metrics), 'nereid_model_memory_retained_bytes');
    process.stdout.write(`calibration: ${MB(retainedCost)} MiB kept by the allocators after ${CHURN_LOADS} loads\n`);
  } finally {
    await stop(s.proc);
  }
}
// What the process holds beyond the models' figures while HOLD models serve at CONCURRENCY, nothing unloaded: each
// session's threads and the allocators grow as they serve, past what its load measured (about 9 MiB a model here,
// docs/paging.md#what-the-process-keeps). The pager counts it as kept memory like the churn's; the budget that holds
// HOLD models makes room for the larger of the two.
const SERVE_REQUESTS = 4000;
let servingCost: number;
{
  const s = await startNereid(repo, ['--model-control-mode=explicit', '--model-memory-budget=64GiB']);
  const pid = s.proc.child.pid!;
  try {
    const base = rssOf(pid);
    await post(s.http, '/v2/repository/models/warm/load');
    for (const m of names.slice(0, HOLD)) await post(s.http, `/v2/models/${m}/infer`, BODY);
    let sent = 0;
    await Promise.all(
      Array.from({ length: CONCURRENCY }, async () => {
        while (sent < SERVE_REQUESTS) await post(s.http, `/v2/models/${names[sent++ % HOLD]!}/infer`, BODY);
      }),
    );
    const used = metricValue(await metricsText(s.metrics), 'nereid_model_memory_used_bytes');
    servingCost = Math.max(0, rssOf(pid) - base - used);
    process.stdout.write(
      `calibration: ${MB(servingCost)} MiB held beyond the figures after ${SERVE_REQUESTS} requests ` +
        `to ${HOLD} loaded models at concurrency ${CONCURRENCY}\n`,
    );
  } finally {
    await stop(s.proc);
  }
}
const keptCost = Math.max(retainedCost, servingCost);
const budget = Math.round(warmCost + (HOLD + 0.5) * cost + keptCost);
const rows: string[][] = [];
const notes: string[] = [];

/**
 * A paging server under the budget, the stream seeded with `seed`. With `history`, the server keeps its scores in
 * that file (--model-memory-history): written when it stops, read when the next one starts.
 */
async function paging(label: string, seed: number, history?: string): Promise<void> {
  const trace = TRACE ? new Trace() : undefined;
  const s = await startNereid(
    repo,
    [
      '--model-control-mode=explicit',
      `--model-memory-budget=${budget}`,
      '--model-pin=warm',
      ...(history === undefined ? [] : [`--model-memory-history=${history}`]),
      // The pager's debug lines (the resident check, collections) pass the log sink only with the verbose switch.
      ...(trace === undefined ? [] : ['--log-verbose=1']),
    ],
    trace === undefined ? {} : { env: { NEREID_LOG_LEVEL: 'debug' }, onStderr: trace.onLog },
  );
  const pid = s.proc.child.pid!;
  try {
    const base = rssOf(pid);
    trace?.start(pid);
    await post(s.http, '/v2/repository/models/warm/load');
    const hotEvictions = async () => {
      const text = await metricsText(s.metrics);
      const of = (m: string) => metricValue(text, 'nereid_model_evictions_total', `model="${m}"`);
      return names.slice(0, HOTTEST).reduce((n, m) => n + of(m), 0);
    };
    let hotInWarmUp: number | undefined;
    const r = await run(
      s.http,
      pid,
      seed,
      (m) => post(s.http, `/v2/models/${m}/infer`, BODY),
      async () => {
        hotInWarmUp = await hotEvictions();
      },
    );
    const text = await metricsText(s.metrics);
    const evictions = names.map((m) => metricValue(text, 'nereid_model_evictions_total', `model="${m}"`));
    const hotEvicted = evictions.slice(0, HOTTEST).reduce((a, b) => a + b, 0);
    const retained = metricValue(text, 'nereid_model_memory_retained_bytes');
    const resident = (await index(s.http)).filter((e) => e.state === 'READY').length - 1;
    const hotAfter =
      hotInWarmUp === undefined
        ? `none (the run had fewer than ${WARM_UP_REQUESTS} requests)`
        : String(hotEvicted - hotInWarmUp);
    const waits = metricValue(text, 'nereid_model_load_wait_seconds_count');
    const waitSum = metricValue(text, 'nereid_model_load_wait_seconds_sum');
    const total = evictions.reduce((a, b) => a + b, 0);
    const limit = `${MB(base)} + ${MB(budget)} = ${MB(base + budget)}`;
    rows.push(row(label, r, [limit, String(total), String(hotEvicted)]));
    notes.push(
      `${label}: RSS peak ${MB(r.maxRss)} MiB ${r.maxRss <= base + budget ? '<=' : '>'} ` +
        `base + budget ${MB(base + budget)} MiB; ${waits} requests waited for a load, ` +
        `mean ${ms((waitSum / Math.max(1, waits)) * 1000)} ms`,
      `${label}: evictions of the ${HOTTEST} hottest: ${hotEvicted} in all, ` +
        `${hotInWarmUp ?? hotEvicted} in the first ${WARM_UP_REQUESTS} requests, ${hotAfter} after`,
      `${label}: at the end ${resident} of ${MODELS} models loaded (and the warm-up model), ` +
        `${MB(retained)} MiB held beyond their figures (nereid_model_memory_retained_bytes)`,
    );
    if (r.failureSamples.length > 0) notes.push(`${label} failures, e.g.: ${r.failureSamples.join('; ')}`);
    if (trace !== undefined) {
      trace.stop();
      notes.push(trace.report(base + budget));
    }
  } finally {
    await stop(s.proc);
  }
}

// Paging from a cold start, then (unless BENCH_PAGING_ONLY=paging) a restart of it that reads the scores the first
// server wrote at its stop, under a stream of the same popularity seeded apart (docs/paging.md#after-a-restart).
const historyFile = path.join(tmpdir(), `nereid-paging-history-${process.pid}.json`);
try {
  await paging('paging', 7, historyFile);
  if (!PAGING_ONLY) await paging('paging, restarted', 8, historyFile);
} finally {
  await rm(historyFile, { force: true });
}

// All loaded, no budget.
if (!PAGING_ONLY) {
  const s = await startNereid(repo, []);
  const pid = s.proc.child.pid!;
  try {
    const r = await run(s.http, pid, 7, (m) => post(s.http, `/v2/models/${m}/infer`, BODY));
    rows.push(row('all loaded', r, ['-', '-', '-']));
  } finally {
    await stop(s.proc);
  }
}

// Triton's client-side dance: load, infer, unload, with clients racing each other.
if (!PAGING_ONLY) {
  const s = await startNereid(repo, ['--model-control-mode=explicit']);
  const pid = s.proc.child.pid!;
  try {
    const r = await run(s.http, pid, 7, async (m) => {
      const load = await post(s.http, `/v2/repository/models/${m}/load`);
      if (load !== 200) return load;
      const status = await post(s.http, `/v2/models/${m}/infer`, BODY);
      const unload = await post(s.http, `/v2/repository/models/${m}/unload`);
      return status !== 200 ? status : unload;
    });
    rows.push(row('load→infer→unload', r, ['-', '-', '-']));
    if (r.failureSamples.length > 0) notes.push(`dance failures, e.g.: ${r.failureSamples.join('; ')}`);
  } finally {
    await stop(s.proc);
  }
}

printTable(
  `model paging: budget ${MB(budget)} MiB (${HOLD} models of ${MB(cost)} MiB, the warm-up model, ` +
    `${MB(keptCost)} MiB the process keeps beyond the figures); ` +
    'latencies in ms; hit = model READY at the last 100 ms sample',
  [
    'variant',
    'requests',
    'failed',
    'p50',
    'p99',
    'hit n: p50 / p99',
    'miss n: p50 / p99',
    'RSS peak MiB',
    'base + budget MiB',
    'evictions',
    `top-${HOTTEST} evicted`,
  ],
  rows,
);
for (const n of notes) process.stdout.write(`${n}\n`);
