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
 * server's own, 1 up to 3 cores).
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { AccessControl, createKey, parseKeysFile } from '../src/auth/index.js';
import { binaryBody } from './bodies.js';
import { buildBenchModels } from './models.js';
import { cpuSeconds, startNereid } from './processes.js';
import { runWrk } from './wrk.js';

const SECONDS = Number(process.env.BENCH_SECONDS ?? 3);
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 4);
const BLOCKS = Number(process.env.BENCH_BLOCKS ?? 5);
const KEYS = Number(process.env.AUTH_BENCH_KEYS ?? 100);
const CONCURRENCY = Number(process.env.AUTH_BENCH_CONCURRENCY ?? 32);
const THREADS = process.env.AUTH_BENCH_THREADS;
const threadArgs = THREADS === undefined || THREADS === '' ? [] : [`--frontend-threads=${THREADS}`];
const VARIANT = process.env.AUTH_BENCH_MODEL ?? 'batched';

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
writeFileSync(keysFile, `keys:\n${entries}${client.entry}`);

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

const body = binaryBody(tiny.inputName, tiny.outputName, tiny.inputSize);
const inferUrl = (port: number): string => `http://127.0.0.1:${port}/v2/models/${model}/infer`;
const withHeaders = (headers: Record<string, string>) => ({ ...body, headers: { ...body.headers, ...headers } });
const settings = [
  { name: 'keys off', args: threadArgs, headers: {} as Record<string, string> },
  {
    name: `keys on (${KEYS} keys)`,
    args: [...threadArgs, `--auth-keys=${keysFile}`],
    headers: { Authorization: `Bearer ${client.secret}` },
  },
];
const points: Point[][] = settings.map(() => []);
/** Each block's rounds: [block][round] = on/off requests/s. */
const blockRatios: number[][] = [];
try {
  for (let block = 0; block < BLOCKS; block++) {
    const servers: Array<Awaited<ReturnType<typeof startNereid>>> = [];
    try {
      for (const s of settings) servers.push(await startNereid(tiny.repository, s.args));
      for (const [i, s] of settings.entries()) {
        const port = servers[i]!.http;
        // Warm-up, and a check that the key opens the model (a refused request would measure 403s).
        const headers = { ...body.headers, ...s.headers };
        const r = await fetch(inferUrl(port), { method: 'POST', headers, body: body.body });
        if (r.status !== 200) throw new Error(`${s.name}: warm-up answered ${r.status}: ${await r.text()}`);
        await runWrk(inferUrl(port), withHeaders(s.headers), CONCURRENCY, 1);
      }
      const ratios: number[] = [];
      for (let round = 0; round < ROUNDS; round++) {
        const got: Point[] = [];
        // Off then on in even rounds, on then off in odd ones.
        const order = round % 2 === 0 ? [0, 1] : [1, 0];
        for (const i of order) {
          const s = settings[i]!;
          const pid = servers[i]!.proc.child.pid!;
          const cpu0 = cpuSeconds(pid);
          const main0 = cpuSeconds(pid, pid);
          const w = await runWrk(inferUrl(servers[i]!.http), withHeaders(s.headers), CONCURRENCY, SECONDS);
          const cpu = cpuSeconds(pid) - cpu0;
          const main = cpuSeconds(pid, pid) - main0;
          const n = Math.max(1, w.requests);
          got[i] = {
            rps: w.requestsPerSec,
            cpuMsPerRequest: (cpu * 1000) / n,
            mainMsPerRequest: (main * 1000) / n,
            failed: w.errors + w.non2xx,
          };
        }
        for (const [i, p] of got.entries()) points[i]!.push(p);
        ratios.push(got[1]!.rps / got[0]!.rps);
      }
      blockRatios.push(ratios);
    } finally {
      await Promise.all(servers.map((s) => s.proc.stop()));
    }
  }
} finally {
  rmSync(dir, { recursive: true, force: true });
}

const micros = checkMicros(true);
const microsHashed = checkMicros(false);
const ratios = blockRatios.flat();
const cpuRatios = points[1]!.map((p, r) => p.cpuMsPerRequest / points[0]![r]!.cpuMsPerRequest);
const mainRatios = points[1]!.map((p, r) => p.mainMsPerRequest / points[0]![r]!.mainMsPerRequest);
const rows = settings.map((s, i) => {
  const ps = points[i]!;
  return [
    s.name,
    fmt(median(ps.map((p) => p.rps))),
    fmt(median(ps.map((p) => p.cpuMsPerRequest)), 3),
    fmt(median(ps.map((p) => p.mainMsPerRequest)), 3),
    String(ps.reduce((n, p) => n + p.failed, 0)),
    ps.map((p) => fmt(p.rps)).join(' '),
  ];
});
const header = ['setting', 'req/s', 'CPU ms/req', 'main ms/req', 'failed', 'rounds req/s'];
const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => r[i]!.length)));
const line = (cells: string[]) => cells.map((c, i) => c.padStart(widths[i]!)).join('  ');
process.stdout.write(
  `\n--auth-keys on vs off: ${tiny.label} (${VARIANT}), binary, concurrency ${CONCURRENCY}, ` +
    `frontend threads ${THREADS ?? 'default'}, ` +
    `${SECONDS}s per setting and round, ${BLOCKS} blocks (fresh servers) of ${ROUNDS} rounds, order alternating ` +
    '(medians)\n' +
    `${line(header)}\n${widths.map((w) => '-'.repeat(w)).join('  ')}\n${rows.map(line).join('\n')}\n` +
    `on/off requests/s: median ${fmt(median(ratios), 3)}x (rounds ${ratios.map((r) => fmt(r, 3)).join(' ')}; ` +
    `block medians ${blockRatios.map((b) => fmt(median(b), 3)).join(' ')})\n` +
    `on/off CPU per request: median ${fmt(median(cpuRatios), 3)}x ` +
    `(rounds ${cpuRatios.map((r) => fmt(r, 3)).join(' ')})\n` +
    `on/off main-thread CPU per request: median ${fmt(median(mainRatios), 3)}x ` +
    `(rounds ${mainRatios.map((r) => fmt(r, 3)).join(' ')})\n` +
    `the check alone: ${fmt(micros, 2)} us on a kept-alive connection, ` +
    `${fmt((100 * micros) / (1000 * median(points[0]!.map((p) => p.mainMsPerRequest))), 1)} % ` +
    `of the main thread's CPU a request takes without keys; ${fmt(microsHashed, 2)} us on a new connection ` +
    `(SHA-256 of the token, the digest's lookup, the scope)\n`,
);
