/**
 * `node dist/bench/request-cost.js` (section `cost` of bench/run.ts): what one
 * request costs the event loop, wrk -t1 -c1.
 *
 * 1. Main-thread CPU per request (utime + stime of the main thread from
 *    /proc, divided by the requests served), alternated in rounds in the same
 *    run: the tiny MLP with binary tensors on Nereid and on the naive
 *    node:http + onnxruntime wrapper; Nereid's health endpoint and a
 *    response-cache hit (Triton's "simple" add/sub model, binary); a refusal
 *    for a full queue on Nereid and the same 503 from a bare node:http server
 *    (the floor of a refusal's cost). The whole process's CPU per request
 *    beside it (session threads included).
 * 2. Nereid's main-thread CPU split by stage for the infer and the cache hit,
 *    from a V8 CPU profile taken during the same load (sampled every 250 µs;
 *    each sample goes to the innermost stage on its stack; the shares are
 *    applied to the thread's CPU measured without the profiler): HTTP parse
 *    (node's parser and the request stream), routing, decode, validate,
 *    schedule, backend hand-off, statistics and metrics, response shaping,
 *    encode, write (headers, the socket write), GC, and the event loop's own
 *    work (promises, timers). The profiler's own overhead lands in "other".
 *
 * Environment: BENCH_SECONDS (per point, default 2), BENCH_ROUNDS (default 3),
 * COST_PROFILE (0: no profiled passes),
 * COST_CONCURRENCY (default 1), COST_BASE_DIST (the dist folder of another
 * build: its server's infer, health endpoint and cache hit join the
 * alternated rounds as "base ...", to compare two builds in one run),
 * COST_MODEL (the tiny MLP's model for the infer points: mlp_tiny, the
 * default scheduler, or mlp_tiny_batched, dynamic batching).
 */
import { spawn } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { binaryBody } from './bodies.js';
import { buildBenchModels } from './models.js';
import { DIST, Proc, cpuSeconds, freePort, startNaive, waitForHttp } from './processes.js';
import { type HttpBody, type WrkResult, runWrk } from './wrk.js';
import { buildAddSubModel } from '../test/helpers/onnx-builder.js';

const SECONDS = Number(process.env.BENCH_SECONDS ?? 2);
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 3);
const CONCURRENCY = Number(process.env.COST_CONCURRENCY ?? 1);
interface CostPoint {
  wrk: WrkResult;
  mainUs: number;
  processUs: number;
}

async function measure(pid: number, url: string, body: HttpBody): Promise<CostPoint> {
  const main0 = cpuSeconds(pid, pid);
  const all0 = cpuSeconds(pid);
  const wrk = await runWrk(url, body, CONCURRENCY, SECONDS);
  const main1 = cpuSeconds(pid, pid);
  const all1 = cpuSeconds(pid);
  const n = Math.max(1, wrk.requests);
  return { wrk, mainUs: ((main1 - main0) * 1e6) / n, processUs: ((all1 - all0) * 1e6) / n };
}

async function startServe(args: string[], nodeFlags: string[], dist = DIST): Promise<{ proc: Proc; http: number }> {
  const [http, grpc, metrics] = [await freePort(), await freePort(), await freePort()];
  const child = spawn(
    process.execPath,
    [
      ...nodeFlags,
      path.join(dist, 'src', 'cli', 'main.js'),
      'serve',
      ...args,
      `--http-port=${http}`,
      `--grpc-port=${grpc}`,
      `--metrics-port=${metrics}`,
      '--http-address=127.0.0.1',
      '--grpc-address=127.0.0.1',
    ],
    { stdio: ['ignore', 'ignore', 'inherit'], env: { ...process.env, NEREID_LOG_LEVEL: 'warn' } },
  );
  const proc = new Proc(child);
  await waitForHttp(`http://127.0.0.1:${http}/v2/health/ready`);
  return { proc, http };
}

// --- the cached model: Triton's "simple" add/sub with response_cache on ---

const CACHED = 'simple_cached';
const HEALTH: HttpBody = { body: Buffer.alloc(0), headers: {}, method: 'GET' };

function writeCachedModel(repo: string): void {
  mkdirSync(path.join(repo, CACHED, '1'), { recursive: true });
  writeFileSync(path.join(repo, CACHED, '1', 'model.onnx'), buildAddSubModel('INT32', 16).toBytes());
  writeFileSync(
    path.join(repo, CACHED, 'config.pbtxt'),
    `name: "${CACHED}"
platform: "onnxruntime_onnx"
max_batch_size: 8
input [ { name: "INPUT0" data_type: TYPE_INT32 dims: [ 16 ] }, { name: "INPUT1" data_type: TYPE_INT32 dims: [ 16 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_INT32 dims: [ 16 ] }, { name: "OUTPUT1" data_type: TYPE_INT32 dims: [ 16 ]
  } ]
instance_group [ { kind: KIND_CPU count: 1 } ]
response_cache { enable: true }
`,
  );
}

/** Two INT32 [1,16] inputs as binary, both outputs asked back binary: every request after the first is a hit. */
function cachedBody(): HttpBody {
  const raw = Buffer.from(new Int32Array(Array.from({ length: 16 }, (_, i) => i)).buffer);
  const header = Buffer.from(
    JSON.stringify({
      inputs: ['INPUT0', 'INPUT1'].map((name) => ({
        name,
        datatype: 'INT32',
        shape: [1, 16],
        parameters: { binary_data_size: 64 },
      })),
      outputs: ['OUTPUT0', 'OUTPUT1'].map((name) => ({ name, parameters: { binary_data: true } })),
    }),
  );
  return {
    body: Buffer.concat([header, raw, raw]),
    headers: { 'Content-Type': 'application/octet-stream', 'Inference-Header-Content-Length': String(header.length) },
  };
}

// --- a model whose bounded queue is always full: every request is refused (503) ---

const FULL = 'full_queue';

function writeFullModel(repo: string): void {
  mkdirSync(path.join(repo, FULL, '1'), { recursive: true });
  // The first execution never ends (until the server stops), the one after it waits in the queue of one.
  writeFileSync(
    path.join(repo, FULL, '1', 'model.mjs'),
    'export default class { execute() { return new Promise(() => {}); } }\n',
  );
  writeFileSync(
    path.join(repo, FULL, 'config.pbtxt'),
    `name: "${FULL}"
backend: "javascript"
max_batch_size: 1
input [ { name: "input" data_type: TYPE_FP32 dims: [ 10 ] } ]
output [ { name: "output" data_type: TYPE_FP32 dims: [ 1 ] } ]
dynamic_batching { default_queue_policy { max_queue_size: 1 } }
instance_group [ { kind: KIND_CPU count: 1 } ]
`,
  );
}

/** Occupies the full_queue model's instance and queue, then waits for its first refusal. */
async function fillQueue(port: number, b: HttpBody): Promise<void> {
  const url = `http://127.0.0.1:${port}/v2/models/${FULL}/infer`;
  const send = () => fetch(url, { method: 'POST', body: b.body, headers: b.headers });
  void send().catch(() => {});
  for (let i = 0; i < 100; i++) {
    void send().catch(() => {});
    await new Promise((r) => setTimeout(r, 50));
    if ((await send()).status === 503) return;
  }
  throw new Error('the full_queue model never refused');
}

// --- stage attribution of a CPU profile ---

interface ProfileNode {
  id: number;
  callFrame: { functionName: string; url: string };
  children?: number[];
}
interface Profile {
  nodes: ProfileNode[];
  startTime: number;
  samples: number[];
  timeDeltas: number[];
}

const STAGES = [
  'HTTP parse',
  'routing',
  'decode',
  'validate',
  'schedule',
  'backend hand-off',
  'statistics, metrics',
  'response shaping',
  'encode',
  'write',
  'GC',
  'event loop, promises',
  'other',
] as const;
type Stage = (typeof STAGES)[number];

const BY_NAME = new Map<string, Stage>(Object.entries({
  decodeInferBody: 'decode',
  decodeRawInfer: 'decode',
  parseJsonBytes: 'decode',
  parseJsonText: 'decode',
  decodeJsonTensorData: 'decode',
  readBody: 'decode',
  inflateBody: 'decode',
  requestEncoding: 'decode',
  inferHeaderLength: 'decode',
  prepareRequest: 'validate',
  modelConfig: 'validate',
  resolveVersion: 'validate',
  admissionError: 'validate',
  recordSuccess: 'statistics, metrics',
  recordExecution: 'statistics, metrics',
  recordCacheHit: 'statistics, metrics',
  recordCacheMiss: 'statistics, metrics',
  recordFailure: 'statistics, metrics',
  requestSucceeded: 'statistics, metrics',
  executed: 'statistics, metrics',
  cacheHit: 'statistics, metrics',
  buildResponse: 'response shaping',
  inferCached: 'response shaping',
  encodeInferResponse: 'encode',
  encodeJsonTensorData: 'encode',
  parametersJson: 'encode',
  sendInferResponse: 'write',
  writev: 'write',
  writeBuffer: 'write',
  writeUtf8String: 'write',
  writeLatin1String: 'write',
  '(garbage collector)': 'GC',
  processTicksAndRejections: 'event loop, promises',
  runMicrotasks: 'event loop, promises',
  processImmediate: 'event loop, promises',
  listOnTimeout: 'event loop, promises',
  processTimers: 'event loop, promises',
} satisfies Record<string, Stage>));

const BY_URL: ReadonlyArray<[string, Stage]> = [
  ['/frontends/http/reply', 'write'],
  ['_http_outgoing', 'write'],
  ['stream_base_commons', 'write'],
  ['streams/writable', 'write'],
  ['/frontends/http/infer-encode', 'encode'],
  ['/frontends/http/infer-decode', 'decode'],
  ['/frontends/http/json-parse', 'decode'],
  ['/frontends/http/body', 'decode'],
  ['/frontends/http/', 'routing'],
  ['/core/statistics', 'statistics, metrics'],
  ['/metrics/', 'statistics, metrics'],
  ['/core/request', 'validate'],
  ['/scheduler/', 'schedule'],
  ['/core/server', 'schedule'],
  ['/types/cancellation', 'routing'],
  ['/backends/', 'backend hand-off'],
  ['/cache/', 'response shaping'],
  ['_http_server', 'HTTP parse'],
  ['_http_incoming', 'HTTP parse'],
  ['_http_common', 'HTTP parse'],
  ['streams/readable', 'HTTP parse'],
  ['node:net', 'HTTP parse'],
];

function stageOf(node: ProfileNode): Stage | undefined {
  const byName = BY_NAME.get(node.callFrame.functionName);
  if (byName !== undefined) return byName;
  const url = node.callFrame.url;
  if (url === '') return undefined;
  for (const [part, stage] of BY_URL) if (url.includes(part)) return stage;
  return undefined;
}

/** Main-thread µs per stage over samples taken between `fromUs` and `toUs` (monotonic clock, µs). */
function attribute(
  profile: Profile,
  fromUs: number,
  toUs: number,
  selfTimes?: Map<string, number>,
): Map<Stage, number> {
  const byId = new Map(profile.nodes.map((n) => [n.id, n]));
  const parent = new Map<number, number>();
  for (const n of profile.nodes) for (const c of n.children ?? []) parent.set(c, n.id);
  const cached = new Map<number, Stage | 'idle'>();
  const classify = (id: number): Stage | 'idle' => {
    const known = cached.get(id);
    if (known !== undefined) return known;
    const leaf = byId.get(id)!;
    let stage: Stage | 'idle' = 'other';
    if (leaf.callFrame.functionName === '(idle)') stage = 'idle';
    else {
      for (let cur: number | undefined = id; cur !== undefined; cur = parent.get(cur)) {
        const s = stageOf(byId.get(cur)!);
        if (s !== undefined) {
          stage = s;
          break;
        }
      }
    }
    cached.set(id, stage);
    return stage;
  };
  const out = new Map<Stage, number>(STAGES.map((s) => [s, 0]));
  let t = profile.startTime;
  for (let i = 0; i < profile.samples.length; i++) {
    t += profile.timeDeltas[i]!;
    if (t < fromUs || t > toUs) continue;
    // A sample stands for the time until the next one.
    const span = profile.timeDeltas[i + 1] ?? 0;
    const stage = classify(profile.samples[i]!);
    if (stage !== 'idle') out.set(stage, out.get(stage)! + span);
    if (selfTimes !== undefined && stage !== 'idle') {
      const f = byId.get(profile.samples[i]!)!.callFrame;
      const key = `${stage}: ${f.functionName || '(anonymous)'} ${f.url.split('/').slice(-2).join('/')}`;
      selfTimes.set(key, (selfTimes.get(key) ?? 0) + span);
    }
  }
  return out;
}

function median(xs: number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.floor(s.length / 2)]!;
}

const tiny = (await buildBenchModels()).find((m) => m.plainName === 'mlp_tiny')!;
const inferModel = process.env.COST_MODEL ?? tiny.plainName;
if (inferModel !== tiny.plainName && inferModel !== tiny.batchedName)
  throw new Error(`COST_MODEL: ${inferModel} is neither ${tiny.plainName} nor ${tiny.batchedName}`);
const body = binaryBody(tiny.inputName, tiny.outputName, tiny.inputSize);
const cacheRepo = mkdtempSync(path.join(tmpdir(), 'nereid-cost-cache-'));
writeCachedModel(cacheRepo);
writeFullModel(cacheRepo);
const serveArgs = [
  `--model-repository=${tiny.repository}`,
  `--model-repository=${cacheRepo}`,
  `--cache-config=local,size=${16 * 1024 * 1024}`,
];

interface Target {
  label: string;
  pid: () => number;
  url: () => string;
  body: HttpBody;
}

const BASE_DIST = process.env.COST_BASE_DIST;
const nereid = await startServe(serveArgs, []);
const base = BASE_DIST === undefined ? undefined : await startServe(serveArgs, [], path.resolve(BASE_DIST));
const naive = await startNaive(tiny.onnxFile);
const floor = await startNaive(tiny.onnxFile, 'refuse');
const targets: Target[] = [
  {
    label: 'nereid infer',
    pid: () => nereid.proc.child.pid!,
    url: () => `http://127.0.0.1:${nereid.http}/v2/models/${inferModel}/infer`,
    body,
  },
  { label: 'naive infer', pid: () => naive.proc.child.pid!, url: () => `http://127.0.0.1:${naive.port}/`, body },
  {
    label: 'nereid health',
    pid: () => nereid.proc.child.pid!,
    url: () => `http://127.0.0.1:${nereid.http}/v2/health/ready`,
    body: HEALTH,
  },
  {
    label: 'nereid cache hit',
    pid: () => nereid.proc.child.pid!,
    url: () => `http://127.0.0.1:${nereid.http}/v2/models/${CACHED}/infer`,
    body: cachedBody(),
  },
  {
    label: 'nereid refusal',
    pid: () => nereid.proc.child.pid!,
    url: () => `http://127.0.0.1:${nereid.http}/v2/models/${FULL}/infer`,
    body,
  },
  // node:http answering the same 503 at once, nothing else: what a refusal cannot cost less than.
  { label: 'naive refusal', pid: () => floor.proc.child.pid!, url: () => `http://127.0.0.1:${floor.port}/`, body },
];
if (base !== undefined) {
  targets.push(
    {
      label: 'base infer',
      pid: () => base.proc.child.pid!,
      url: () => `http://127.0.0.1:${base.http}/v2/models/${inferModel}/infer`,
      body,
    },
    {
      label: 'base health',
      pid: () => base.proc.child.pid!,
      url: () => `http://127.0.0.1:${base.http}/v2/health/ready`,
      body: HEALTH,
    },
    {
      label: 'base cache hit',
      pid: () => base.proc.child.pid!,
      url: () => `http://127.0.0.1:${base.http}/v2/models/${CACHED}/infer`,
      body: cachedBody(),
    },
    {
      label: 'base refusal',
      pid: () => base.proc.child.pid!,
      url: () => `http://127.0.0.1:${base.http}/v2/models/${FULL}/infer`,
      body,
    },
  );
}
const points = new Map<string, CostPoint[]>(targets.map((t) => [t.label, []]));
try {
  await fillQueue(nereid.http, body);
  if (base !== undefined) await fillQueue(base.http, body);
  for (const t of targets) await runWrk(t.url(), t.body, CONCURRENCY, 1);
  for (let r = 0; r < ROUNDS; r++) {
    for (const t of targets) points.get(t.label)!.push(await measure(t.pid(), t.url(), t.body));
  }
} finally {
  await nereid.proc.stop();
  await base?.proc.stop();
  await naive.proc.stop();
  await floor.proc.stop();
}

/** The profiled pass: per stage, scaled to the main thread's measured CPU over the same interval. */
type Profiled = 'infer' | 'cache hit' | 'health';
const PROFILED_POINT: Record<Profiled, string> = {
  infer: 'nereid infer',
  'cache hit': 'nereid cache hit',
  health: 'nereid health',
};

async function profileStages(
  target: Profiled,
): Promise<{ stages: Map<Stage, number>; requests: number; selfTimes: Map<string, number> | undefined } | undefined> {
  const selfTimes: Map<string, number> | undefined = TOP > 0 ? new Map() : undefined;
  const profDir = mkdtempSync(path.join(tmpdir(), 'nereid-cost-prof-'));
  try {
    const profiled = await startServe(serveArgs, [
      '--cpu-prof',
      `--cpu-prof-dir=${profDir}`,
      '--cpu-prof-interval=250',
    ]);
    let fromUs = 0;
    let toUs = 0;
    let point: CostPoint;
    try {
      const url =
        target === 'health'
          ? `http://127.0.0.1:${profiled.http}/v2/health/ready`
          : `http://127.0.0.1:${profiled.http}/v2/models/${target === 'infer' ? inferModel : CACHED}/infer`;
      const b = target === 'infer' ? body : target === 'health' ? HEALTH : cachedBody();
      await runWrk(url, b, CONCURRENCY, 1);
      fromUs = Number(process.hrtime.bigint() / 1000n);
      point = await measure(profiled.proc.child.pid!, url, b);
      toUs = Number(process.hrtime.bigint() / 1000n);
    } finally {
      await profiled.proc.stop();
    }
    // The main thread's profile is the one with the lowest thread number in its name.
    const files = readdirSync(profDir)
      .filter((f) => f.endsWith('.cpuprofile'))
      .sort((a, b) => Number(a.split('.')[4]) - Number(b.split('.')[4]));
    if (files.length === 0) return undefined;
    const raw = attribute(
      JSON.parse(readFileSync(path.join(profDir, files[0]!), 'utf8')) as Profile,
      fromUs,
      toUs,
      selfTimes,
    );
    // Shares of the profile, of the CPU measured without the profiler (which costs the thread CPU of its own).
    let sampled = 0;
    for (const v of raw.values()) sampled += v;
    const unprofiled = median(points.get(PROFILED_POINT[target])!.map((p) => p.mainUs));
    const scale = sampled === 0 ? 0 : (unprofiled * point.wrk.requests) / sampled;
    return { stages: new Map([...raw].map(([k, v]) => [k, v * scale])), requests: point.wrk.requests, selfTimes };
  } finally {
    rmSync(profDir, { recursive: true, force: true });
  }
}

/** COST_TOP=n also prints the n functions with the most samples. */
const TOP = Number(process.env.COST_TOP ?? 0);
/** COST_PROFILE=0 skips the profiled passes (the alternated rounds alone). */
const profiles =
  process.env.COST_PROFILE === '0'
    ? {}
    : {
        infer: await profileStages('infer'),
        'cache hit': await profileStages('cache hit'),
        health: await profileStages('health'),
      };
rmSync(cacheRepo, { recursive: true, force: true });

const f1 = (v: number) => v.toFixed(1);
process.stdout.write(
  `\nEvent-loop cost per request: ${tiny.label} (${inferModel}, binary) and a response-cache ` +
  `hit, wrk -t1 -c${CONCURRENCY}, ${SECONDS}s per point, ${ROUNDS} alternated rounds (medians)\n`,
);
process.stdout.write(
  `${'point'.padEnd(18)}${'req/s'.padStart(9)}${'p50 µs'.padStart(9)}` +
  `${'main µs/req'.padStart(13)}${'process µs/req'.padStart(16)}\n`,
);
for (const [label, pts] of points) {
  process.stdout.write(
    `${label.padEnd(18)}${median(pts.map((p) => p.wrk.requestsPerSec)).toFixed(0).padStart(9)}` +
      `${median(pts.map((p) => p.wrk.p50us)).toFixed(0).padStart(9)}` +
      `${f1(median(pts.map((p) => p.mainUs))).padStart(13)}${f1(median(pts.map((p) => p.processUs))).padStart(16)}\n`,
  );
}
const paired = (a: string, b: string, f: (p: CostPoint) => number) =>
  median(points.get(a)!.map((p, i) => f(p) - f(points.get(b)![i]!)));
process.stdout.write(
  `nereid - naive (infer): main thread ${f1(paired('nereid infer', 'naive infer', (p) => p.mainUs))} µs/req, ` +
    `p50 ${paired('nereid infer', 'naive infer', (p) => p.wrk.p50us).toFixed(0)} ` +
    `µs (bar: p50 ≤ naive + 40 µs at c1)\n` +
    `cache hit - health: main thread ${f1(paired('nereid cache hit', 'nereid health', (p) => p.mainUs))} µs/req, ` +
    `p50 ${paired('nereid cache hit', 'nereid health', (p) => p.wrk.p50us).toFixed(0)} µs (bar: p50 within 30 µs)\n` +
    `nereid - naive (refusal, node:http's floor): main thread ` +
    `${f1(paired('nereid refusal', 'naive refusal', (p) => p.mainUs))} µs/req, ` +
    `process ${f1(paired('nereid refusal', 'naive refusal', (p) => p.processUs))} µs/req\n`,
);
if (base !== undefined) {
  process.stdout.write(
    `nereid - base (infer): main thread ${f1(paired('nereid infer', 'base infer', (p) => p.mainUs))} µs/req, ` +
      `process ${f1(paired('nereid infer', 'base infer', (p) => p.processUs))} µs/req, ` +
      `p50 ${paired('nereid infer', 'base infer', (p) => p.wrk.p50us).toFixed(0)} µs; ` +
      `health: main thread ${f1(paired('nereid health', 'base health', (p) => p.mainUs))} µs/req; ` +
      `refusal: main thread ${f1(paired('nereid refusal', 'base refusal', (p) => p.mainUs))} µs/req\n`,
  );
  process.stdout.write(
    `base: cache hit - health: main thread ${f1(paired('base cache hit', 'base health', (p) => p.mainUs))} µs/req, ` +
      `p50 ${paired('base cache hit', 'base health', (p) => p.wrk.p50us).toFixed(0)} µs (${BASE_DIST})\n`,
  );
}
const withStages = Object.entries(profiles).filter(
  (e): e is [string, NonNullable<(typeof e)[1]>] => e[1] !== undefined,
);
if (withStages.length > 0) {
  process.stdout.write(
    "\nNereid main thread by stage, µs per request (a CPU profile " +
    "sampled every 250 µs, scaled to the thread's CPU measured above;\n" +
      'a thread preempted in a system call is sampled there, so "write" ' +
      'also holds the waits for the core after the socket write)\n',
  );
  process.stdout.write(`${'stage'.padEnd(22)}${withStages.map(([k]) => k.padStart(11)).join('')}\n`);
  for (const s of STAGES) {
    process.stdout.write(
      `${s.padEnd(22)}${withStages.map(([, v]) => f1(v.stages.get(s)! / v.requests).padStart(11)).join('')}\n`,
    );
  }
  const totals = withStages.map(([, v]) => {
    let t = 0;
    for (const x of v.stages.values()) t += x;
    return f1(t / v.requests).padStart(11);
  });
  process.stdout.write(`${'total'.padEnd(22)}${totals.join('')}\n`);
}
for (const [label, v] of withStages) {
  if (v.selfTimes === undefined) continue;
  process.stdout.write(`\nmost sampled functions, ${label} (µs per request, unscaled)\n`);
  for (const [k, t] of [...v.selfTimes].sort((a, b) => b[1] - a[1]).slice(0, TOP)) {
    process.stdout.write(`${f1(t / v.requests).padStart(8)}  ${k}\n`);
  }
}
