/**
 * `node dist/bench/auth.js` (section `auth` of bench/run.ts): what
 * `--auth-keys` costs a request. Two servers on the same repository, one
 * without keys and one with a keys file of AUTH_BENCH_KEYS keys (the
 * client's key narrowed to the model by a glob, so the check runs the model
 * pattern too), with wrk on the tiny MLP at concurrency 32 with binary
 * tensors. Per setting: the median over the rounds of requests/s and of the
 * server's CPU time per request (all its threads; on a shared machine
 * steadier than the rate), and each round's ratio on/off (both measured
 * back to back, so a round slowed by other work slows both), and of the main
 * thread's CPU per request (where the check runs; with one frontend thread,
 * the default up to 3 cores, it is the bottleneck).
 *
 * Two runs of 4 rounds on an idle machine gave 0.847x and 1.02x. Apart from
 * the keys, two things can set the servers apart for a whole run: the order
 * within a round (always the same setting second, after the other's load)
 * and the servers themselves (each adapts, e.g. whether it runs the tiny
 * model on the event loop, from timings of its own first moments, and keeps
 * that). So the rounds alternate the order (off on, on off, ...) and run in
 * BENCH_BLOCKS blocks, each with a fresh pair of servers; the ratio reported
 * is the median over every round, with each block's median beside it. Five
 * blocks by default: with three, one pair of servers that stood apart (a
 * block median of 1.22x beside 0.92x and 0.93x) moved the whole figure.
 *
 * Environment: BENCH_SECONDS (per setting and round, default 3),
 * BENCH_ROUNDS (per block, default 4), BENCH_BLOCKS (default 5),
 * AUTH_BENCH_KEYS (default 100), AUTH_BENCH_MODEL (plain | batched, default
 * batched: dynamic batching), AUTH_BENCH_CONCURRENCY (default 32),
 * AUTH_BENCH_THREADS (`--frontend-threads` of both servers; default: the
 * server's own, 1 up to 3 cores), AUTH_BENCH_PROTOCOL (http | grpc, default
 * http; grpc: ModelInfer through h2load, AUTH_BENCH_GRPC connections x
 * streams, default 4x8, each run checked against the model's success count,
 * as h2load does not read grpc-status), AUTH_BENCH_BASE_DIST (the dist
 * folder of another build: a third server, keys on, from that build, so a
 * change to the check is measured before and after in one run),
 * AUTH_BENCH_PROFILE=n (servers run under V8's CPU profiler, sampling every
 * 100 µs: the n functions whose main-thread self time per request differs
 * most between keys off and keys on, and between the base build and this
 * one, counted only while the load ran; the profiler slows every server, so
 * take the rates from a run without it).
 */
import { spawn } from 'node:child_process';
import { mkdirSync, mkdtempSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import { Metadata } from '@grpc/grpc-js';
import { AccessControl, createKey, parseKeysFile } from '../src/auth/index.js';
import { binaryBody } from './bodies.js';
import { h2loadArgs, modelInferBody, parseH2load } from './grpc.js';
import { buildBenchModels } from './models.js';
import { type Window, diffRows, monotonicUs, selfTimes } from './profile-diff.js';
import { DIST, cpuSeconds, startNereid } from './processes.js';
import { runWrk } from './wrk.js';

const SECONDS = Number(process.env.BENCH_SECONDS ?? 3);
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 4);
const BLOCKS = Number(process.env.BENCH_BLOCKS ?? 5);
const KEYS = Number(process.env.AUTH_BENCH_KEYS ?? 100);
const CONCURRENCY = Number(process.env.AUTH_BENCH_CONCURRENCY ?? 32);
const THREADS = process.env.AUTH_BENCH_THREADS;
const threadArgs = THREADS === undefined || THREADS === '' ? [] : [`--frontend-threads=${THREADS}`];
const VARIANT = process.env.AUTH_BENCH_MODEL ?? 'batched';
const PROTOCOL = process.env.AUTH_BENCH_PROTOCOL ?? 'http';
if (PROTOCOL !== 'http' && PROTOCOL !== 'grpc') {
  throw new Error(`AUTH_BENCH_PROTOCOL must be http or grpc, got ${PROTOCOL}`);
}
/** gRPC: h2load's connections and streams per connection (AUTH_BENCH_GRPC, "4x8"). */
const GRPC_SHAPE = (process.env.AUTH_BENCH_GRPC ?? '4x8').split('x').map(Number) as [number, number];
const BASE_DIST = process.env.AUTH_BENCH_BASE_DIST;
const PROFILE_TOP = Number(process.env.AUTH_BENCH_PROFILE ?? 0);

function fmt(n: number, digits = 0): string {
  return n.toLocaleString('en-US', { maximumFractionDigits: digits, minimumFractionDigits: digits });
}

function median(values: readonly number[]): number {
  const s = [...values].sort((a, b) => a - b);
  const mid = Math.floor(s.length / 2);
  return s.length % 2 === 1 ? s[mid]! : (s[mid - 1]! + s[mid]!) / 2;
}

interface Point {
  rps: number;
  cpuMsPerRequest: number;
  mainMsPerRequest: number;
  failed: number;
}

const tiny = (await buildBenchModels()).find((m) => m.label.startsWith('tiny'))!;
const model = VARIANT === 'plain' ? tiny.plainName : tiny.batchedName;
const dir = mkdtempSync(path.join(tmpdir(), 'nereid-bench-auth-'));
const keysFile = path.join(dir, 'keys.yaml');
const client = createKey('bench-client', [`inference:${tiny.plainName}*`, 'health']);
let entries = '';
for (let i = 1; i < KEYS; i++) {
  entries += createKey(`tenant-${i}`, [`inference:tenant_${i}_*`, `metadata:tenant_${i}_*`]).entry;
}
// Reads the metrics port (the model's success count, which checks h2load's gRPC calls).
const metricsKey = createKey('bench-metrics', ['metrics']);
writeFileSync(keysFile, `keys:\n${entries}${client.entry}${metricsKey.entry}`);

/**
 * The check alone, in this process: microseconds per call for the client's key (best of 3 runs of 200,000), on a
 * new connection each time (the token hashed) or on one kept-alive connection (as wrk's requests are checked).
 */
function checkMicros(sameConnection: boolean): number {
  const access = new AccessControl(parseKeysFile(keysFile, `keys:\n${entries}${client.entry}`), { failureLimit: 0 });
  // Strings of their own, as the HTTP parser makes one per request.
  const headers = Array.from({ length: 64 }, () => Buffer.from(`Bearer ${client.secret}`).toString('latin1'));
  const connection = {};
  let best = Infinity;
  for (let run = 0; run < 3; run++) {
    const n = 200_000;
    const t0 = process.hrtime.bigint();
    for (let i = 0; i < n; i++) {
      const on = sameConnection ? connection : undefined;
      const refused = access.check(headers[i & 63], '127.0.0.1', 'inference', model, on);
      if (refused !== undefined) throw new Error(`the bench key is refused: ${refused.message}`);
    }
    best = Math.min(best, Number(process.hrtime.bigint() - t0) / 1000 / n);
  }
  return best;
}

/**
 * gRPC ModelInfer's check alone (the handler's, inferKeyCheck), as `dist`'s build makes it: microseconds per call
 * (best of 3 runs of 200,000), every call on one connection (peer) with its own metadata, as h2load's come.
 */
async function grpcCheckMicros(dist: string): Promise<number> {
  type Access = typeof AccessControl;
  type Check = (call: { metadata: Metadata; getPeer(): string }, model: string | undefined) => unknown;
  const auth = (await import(pathToFileURL(path.join(dist, 'src', 'auth', 'index.js')).href)) as {
    AccessControl: Access;
    parseKeysFile: typeof parseKeysFile;
  };
  const grpcAuth = (await import(pathToFileURL(path.join(dist, 'src', 'frontends', 'grpc', 'auth.js')).href)) as {
    inferKeyCheck: (access: AccessControl, forwardedPeer: boolean) => Check;
  };
  const text = `keys:\n${entries}${client.entry}`;
  const access = new auth.AccessControl(auth.parseKeysFile(keysFile, text), { failureLimit: 0 });
  const check = grpcAuth.inferKeyCheck(access, false);
  const socket = { remoteAddress: '127.0.0.1', remotePort: 50123 };
  const calls = Array.from({ length: 64 }, () => {
    const metadata = new Metadata();
    metadata.set('authorization', Buffer.from(`Bearer ${client.secret}`).toString('latin1'));
    // A string made per call, as grpc-js makes the peer.
    return { metadata, getPeer: () => `${socket.remoteAddress}:${socket.remotePort}` };
  });
  let best = Infinity;
  for (let run = 0; run < 3; run++) {
    const n = 200_000;
    const t0 = process.hrtime.bigint();
    for (let i = 0; i < n; i++) {
      if (check(calls[i & 63]!, model) !== undefined) throw new Error('the bench key is refused over gRPC');
    }
    best = Math.min(best, Number(process.hrtime.bigint() - t0) / 1000 / n);
  }
  return best;
}

const body = binaryBody(tiny.inputName, tiny.outputName, tiny.inputSize);
const inferUrl = (port: number): string => `http://127.0.0.1:${port}/v2/models/${model}/infer`;
const withHeaders = (headers: Record<string, string>) => ({ ...body, headers: { ...body.headers, ...headers } });
const grpcBodyFile = path.join(dir, 'infer.grpc');
writeFileSync(grpcBodyFile, modelInferBody(model, tiny.inputName, tiny.outputName, tiny.inputSize));
const metricsHeaders = { Authorization: `Bearer ${metricsKey.secret}` };

interface Setting {
  readonly name: string;
  readonly args: string[];
  readonly headers: Record<string, string>;
  /** Another build's dist folder (AUTH_BENCH_BASE_DIST). */
  readonly dist?: string;
}
const settings: Setting[] = [
  { name: 'keys off', args: threadArgs, headers: {} },
  {
    name: `keys on (${KEYS} keys)`,
    args: [...threadArgs, `--auth-keys=${keysFile}`],
    headers: { Authorization: `Bearer ${client.secret}` },
  },
];
if (BASE_DIST !== undefined && BASE_DIST !== '') {
  settings.push({ ...settings[1]!, name: 'keys on, base build', dist: path.resolve(BASE_DIST) });
}

type Server = Awaited<ReturnType<typeof startNereid>>;

/** The model's successful requests so far (h2load counts HTTP statuses, not grpc-status: every call is checked). */
async function successCount(server: Server): Promise<number> {
  const r = await fetch(`http://127.0.0.1:${server.metrics}/metrics`, { headers: metricsHeaders });
  const text = await r.text();
  const m = new RegExp(`^nv_inference_request_success\\{model="${model}",version="1"[^}]*\\} (\\S+)`, 'm').exec(text);
  if (!m) throw new Error(`no nv_inference_request_success for ${model} (metrics answered ${r.status})`);
  return Number(m[1]);
}

/** h2load posting ModelInfer: requests completed and per second, the calls the model did not count as failed. */
interface LoadRun {
  readonly requests: number;
  readonly rps: number;
  readonly failed: number;
}

async function runGrpc(server: Server, s: Setting, seconds: number): Promise<LoadRun> {
  const extra = Object.entries(s.headers).flatMap(([k, v]) => ['-H', `${k.toLowerCase()}: ${v}`]);
  const [clients, streams] = GRPC_SHAPE;
  const args = h2loadArgs(server.grpc, grpcBodyFile, clients, streams, seconds, extra);
  const before = await successCount(server);
  const out = await new Promise<string>((resolve, reject) => {
    const child = spawn('h2load', args, { stdio: ['ignore', 'pipe', 'pipe'] });
    let text = '';
    child.stdout.on('data', (c: Buffer) => (text += c.toString()));
    child.stderr.on('data', (c: Buffer) => (text += c.toString()));
    child.on('error', reject);
    child.on('close', () => resolve(text));
  });
  const h = parseH2load(out);
  const succeeded = (await successCount(server)) - before;
  const requests = h.succeeded + h.failed;
  return { requests, rps: h.requestsPerSec, failed: Math.max(0, requests - succeeded) };
}

async function runLoad(server: Server, s: Setting, seconds: number): Promise<LoadRun> {
  if (PROTOCOL === 'grpc') return runGrpc(server, s, seconds);
  const w = await runWrk(inferUrl(server.http), withHeaders(s.headers), CONCURRENCY, seconds);
  return { requests: w.requests, rps: w.requestsPerSec, failed: w.errors + w.non2xx };
}

const points: Point[][] = settings.map(() => []);
/** AUTH_BENCH_PROFILE: per setting, main-thread self µs by function over every block's load, and its requests. */
const profiles = settings.map(() => ({ times: new Map<string, number>(), requests: 0 }));

/**
 * The main thread's profiles in `dir` (file names end in pid.thread.sequence; the main thread is thread 0). A server
 * with `--auth-keys` leaves two: the samples of the windows are in one of them.
 */
function mainProfiles(dir: string): string[] {
  return readdirSync(dir)
    .filter((f) => f.endsWith('.cpuprofile') && f.split('.')[4] === '0')
    .map((f) => path.join(dir, f));
}
/** Each block's rounds: [block][round] = on/off requests/s (this build). */
const blockRatios: number[][] = [];
try {
  for (let block = 0; block < BLOCKS; block++) {
    const servers: Server[] = [];
    const profDirs = settings.map((_, i) => path.join(dir, `profile-${block}-${i}`));
    const windows: Window[][] = settings.map(() => []);
    const served = settings.map(() => 0);
    try {
      for (const [i, s] of settings.entries()) {
        const nodeArgs =
          PROFILE_TOP > 0 ? ['--cpu-prof', `--cpu-prof-dir=${profDirs[i]}`, '--cpu-prof-interval=100'] : [];
        if (PROFILE_TOP > 0) mkdirSync(profDirs[i]!);
        const launch = { nodeArgs, ...(s.dist === undefined ? {} : { dist: s.dist }) };
        servers.push(await startNereid(tiny.repository, s.args, launch));
      }
      for (const [i, s] of settings.entries()) {
        const port = servers[i]!.http;
        // Warm-up, and a check that the key opens the model (a refused request would measure 403s).
        const headers = { ...body.headers, ...s.headers };
        const r = await fetch(inferUrl(port), { method: 'POST', headers, body: body.body });
        if (r.status !== 200) throw new Error(`${s.name}: warm-up answered ${r.status}: ${await r.text()}`);
        const warm = await runLoad(servers[i]!, s, 1);
        if (warm.failed > 0) throw new Error(`${s.name}: ${warm.failed} calls of the warm-up failed`);
      }
      const ratios: number[] = [];
      for (let round = 0; round < ROUNDS; round++) {
        const got: Point[] = [];
        // In order in even rounds, in reverse in odd ones.
        const order = settings.map((_, i) => i);
        if (round % 2 === 1) order.reverse();
        for (const i of order) {
          const s = settings[i]!;
          const pid = servers[i]!.proc.child.pid!;
          const cpu0 = cpuSeconds(pid);
          const main0 = cpuSeconds(pid, pid);
          const fromUs = monotonicUs();
          const w = await runLoad(servers[i]!, s, SECONDS);
          windows[i]!.push({ fromUs, toUs: monotonicUs() });
          served[i]! += w.requests;
          const cpu = cpuSeconds(pid) - cpu0;
          const main = cpuSeconds(pid, pid) - main0;
          const n = Math.max(1, w.requests);
          got[i] = {
            rps: w.rps,
            cpuMsPerRequest: (cpu * 1000) / n,
            mainMsPerRequest: (main * 1000) / n,
            failed: w.failed,
          };
        }
        for (const [i, p] of got.entries()) points[i]!.push(p);
        ratios.push(got[1]!.rps / got[0]!.rps);
      }
      blockRatios.push(ratios);
    } finally {
      await Promise.all(servers.map((s) => s.proc.stop()));
    }
    for (const [i, profDir] of (PROFILE_TOP > 0 ? profDirs : []).entries()) {
      const files = mainProfiles(profDir);
      if (files.length === 0) throw new Error(`${settings[i]!.name}: no CPU profile in ${profDir}`);
      const into = profiles[i]!.times;
      for (const file of files) {
        for (const [k, us] of selfTimes(file, windows[i]!)) into.set(k, (into.get(k) ?? 0) + us);
      }
      profiles[i]!.requests += served[i]!;
    }
  }
} finally {
  rmSync(dir, { recursive: true, force: true });
}

const micros = checkMicros(true);
const microsHashed = checkMicros(false);
const grpcMicros = await grpcCheckMicros(DIST);
const grpcBaseMicros = BASE_DIST === undefined || BASE_DIST === '' ? undefined : await grpcCheckMicros(BASE_DIST);
const ratios = blockRatios.flat();
/** Each round's ratio of setting i to keys off, for one measure. */
const ratiosOf = (i: number, of: (p: Point) => number): number[] =>
  points[i]!.map((p, r) => of(p) / of(points[0]![r]!));
const fmtRatios = (rs: number[]): string =>
  `median ${fmt(median(rs), 3)}x (rounds ${rs.map((r) => fmt(r, 3)).join(' ')})`;
const rows = settings.map((s, i) => {
  const ps = points[i]!;
  return [
    s.name,
    fmt(median(ps.map((p) => p.rps))),
    fmt(median(ps.map((p) => p.cpuMsPerRequest * 1000)), 1),
    fmt(median(ps.map((p) => p.mainMsPerRequest * 1000)), 1),
    String(ps.reduce((n, p) => n + p.failed, 0)),
    ps.map((p) => fmt(p.rps)).join(' '),
  ];
});
const header = ['setting', 'req/s', 'CPU us/req', 'main us/req', 'failed', 'rounds req/s'];
const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => r[i]!.length)));
const line = (cells: string[]) => cells.map((c, i) => c.padStart(widths[i]!)).join('  ');
let versus = '';
for (let i = 1; i < settings.length; i++) {
  versus +=
    `${settings[i]!.name} / keys off: requests/s ${fmtRatios(ratiosOf(i, (p) => p.rps))}\n` +
    `  CPU per request ${fmtRatios(ratiosOf(i, (p) => p.cpuMsPerRequest))}\n` +
    `  main-thread CPU per request ${fmtRatios(ratiosOf(i, (p) => p.mainMsPerRequest))}\n`;
}
const load =
  PROTOCOL === 'grpc'
    ? `gRPC ModelInfer (h2load, ${GRPC_SHAPE[0]} connections x ${GRPC_SHAPE[1]} streams)`
    : `HTTP binary, concurrency ${CONCURRENCY}`;
process.stdout.write(
  `\n--auth-keys on vs off: ${tiny.label} (${VARIANT}), ${load}, ` +
    `frontend threads ${THREADS ?? 'default'}, ` +
    `${SECONDS}s per setting and round, ${BLOCKS} blocks (fresh servers) of ${ROUNDS} rounds, order alternating ` +
    '(medians)\n' +
    `${line(header)}\n${widths.map((w) => '-'.repeat(w)).join('  ')}\n${rows.map(line).join('\n')}\n` +
    `on/off requests/s: median ${fmt(median(ratios), 3)}x ` +
    `(block medians ${blockRatios.map((b) => fmt(median(b), 3)).join(' ')})\n` +
    versus +
    `the check alone: ${fmt(micros, 2)} us on a kept-alive connection, ` +
    `${fmt((100 * micros) / (1000 * median(points[0]!.map((p) => p.mainMsPerRequest))), 1)} % ` +
    `of the main thread's CPU a request takes without keys; ${fmt(microsHashed, 2)} us on a new connection ` +
    `(SHA-256 of the token, the digest's lookup, the scope)\n` +
    `gRPC ModelInfer's check alone: ${fmt(grpcMicros, 2)} us a call on one connection` +
    `${grpcBaseMicros === undefined ? '' : `, ${fmt(grpcBaseMicros, 2)} us in the base build`}\n`,
);

/** AUTH_BENCH_PROFILE: main-thread self time per request, `base` against `cur`, the largest differences first. */
function printProfile(base: number, cur: number): void {
  const rows = diffRows(
    profiles[base]!.times,
    profiles[base]!.requests,
    profiles[cur]!.times,
    profiles[cur]!.requests,
    PROFILE_TOP,
  );
  const widths = [0, 1, 2, 3].map((i) => Math.max(...rows.map((r) => r[i]!.length), 8));
  let out =
    `\nmain-thread self time, us per request (profiler on): ${settings[cur]!.name} against ${settings[base]!.name}\n` +
    `${'function'.padEnd(widths[0]!)}  ${'base'.padStart(widths[1]!)}  ${'this'.padStart(widths[2]!)}  ` +
    `${'this-base'.padStart(widths[3]!)}\n`;
  for (const r of rows) {
    out +=
      `${r[0]!.padEnd(widths[0]!)}  ${r[1]!.padStart(widths[1]!)}  ${r[2]!.padStart(widths[2]!)}  ` +
      `${r[3]!.padStart(widths[3]!)}\n`;
  }
  process.stdout.write(out);
}

if (PROFILE_TOP > 0) {
  printProfile(0, 1);
  if (settings.length > 2) printProfile(2, 1);
}
