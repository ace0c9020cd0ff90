/**
 * `node dist/bench/malloc.js` (section `malloc` of bench/run.ts): what glibc's
 * malloc settings cost. One server per setting on one repository (by default
 * glibc's defaults, NEREID_MALLOC_TUNING=off; a fixed 128 KiB mmap threshold
 * alone; and what `nereid serve` sets at start, that threshold with huge pages
 * for large mappings), measured in turns, A B C A B C, on:
 * an FP32 identity model with inputs of 256 KiB, 1 MiB, 4 MiB and 16 MiB over
 * binary HTTP (binary output), 256 KiB as JSON, and the tiny MLP at concurrency
 * 32 (wrk). Per point and setting: the median over the rounds of requests/s,
 * the server's CPU time per request (all its threads; on a shared machine
 * steadier than the rate) and its minor page faults per request (what a
 * mapping of its own per large body costs: its pages are faulted in each
 * time). At the end, each server's RSS and brk heap.
 *
 * Environment: BENCH_SECONDS (per point, setting and round, default 2),
 * BENCH_ROUNDS (default 3), MALLOC_BENCH_CONCURRENCY (large tensors, default 2),
 * MALLOC_BENCH_SIZES (KiB, default "256,1024,4096,16384"),
 * MALLOC_BENCH_VARIANTS: settings separated by ';', each a space-separated list
 * of NAME=VALUE (default the three above).
 * A variable a setting does not name is removed from its server's environment
 * when it is a MALLOC_* one, so the parent's own tuning does not leak in.
 */
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { Pool } from 'undici';
import { NEREID_TUNABLES } from '../src/cli/allocator.js';
import { buildIdentityModel, buildMlp } from '../test/helpers/onnx-builder.js';
import { jsonBody } from './bodies.js';
import { cpuSeconds, startNereid } from './processes.js';
import { runWrk } from './wrk.js';

const SECONDS = Number(process.env.BENCH_SECONDS ?? 2);
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 3);
const CONCURRENCY = Number(process.env.MALLOC_BENCH_CONCURRENCY ?? 2);
const SIZES_KIB = (process.env.MALLOC_BENCH_SIZES ?? '256,1024,4096,16384').split(',').map(Number);
const VARIANTS = (
  process.env.MALLOC_BENCH_VARIANTS ??
  `NEREID_MALLOC_TUNING=off;MALLOC_MMAP_THRESHOLD_=131072;GLIBC_TUNABLES=${NEREID_TUNABLES}`
)
  .split(';')
  .map((v) => v.trim())
  .filter((v) => v !== '');
const TINY_LAYERS = [10, 64, 64, 1];

function fmt(n: number, digits = 0): string {
  return n.toLocaleString('en-US', { maximumFractionDigits: digits, minimumFractionDigits: digits });
}

function median(values: readonly number[]): number {
  const s = [...values].sort((a, b) => a - b);
  const mid = Math.floor(s.length / 2);
  return s.length % 2 === 1 ? s[mid]! : (s[mid - 1]! + s[mid]!) / 2;
}

/** The environment of a setting: its assignments, and every other MALLOC_* variable removed. */
function variantEnv(spec: string): Record<string, string | undefined> {
  const env: Record<string, string | undefined> = {};
  for (const key of Object.keys(process.env))
    if (key.startsWith('MALLOC_') || key === 'GLIBC_TUNABLES' || key === 'NEREID_MALLOC_TUNING') env[key] = undefined;
  for (const pair of spec.split(/\s+/)) {
    const eq = pair.indexOf('=');
    if (eq <= 0) throw new Error(`MALLOC_BENCH_VARIANTS: '${pair}' is not NAME=VALUE`);
    env[pair.slice(0, eq)] = pair.slice(eq + 1);
  }
  return env;
}

/** Minor page faults of a process so far (field 10 of /proc/PID/stat). */
function minorFaults(pid: number): number {
  const text = readFileSync(`/proc/${pid}/stat`, 'utf8');
  return Number(text.slice(text.lastIndexOf(')') + 2).split(' ')[7]);
}

function residentMiB(pid: number): { rss: number; heap: number } {
  const status = readFileSync(`/proc/${pid}/status`, 'utf8');
  const rss = Number(/VmRSS:\s+(\d+)/.exec(status)?.[1] ?? 0) / 1024;
  let heap = 0;
  let inHeap = false;
  for (const line of readFileSync(`/proc/${pid}/smaps`, 'utf8').split('\n')) {
    if (/^[0-9a-f]+-[0-9a-f]+ /.test(line)) inHeap = line.endsWith('[heap]');
    else if (inHeap && line.startsWith('Rss:')) heap += Number(/(\d+)/.exec(line)?.[1] ?? 0) / 1024;
  }
  return { rss, heap };
}

interface Sample {
  perSec: number;
  cpuMs: number;
  faults: number;
}

interface Request {
  readonly path: string;
  readonly body: Buffer;
  readonly headers: Record<string, string>;
}

function identityBinary(elements: number): Request {
  const values = new Float32Array(elements);
  for (let i = 0; i < elements; i++) values[i] = (i % 251) * 0.5;
  const header = Buffer.from(
    JSON.stringify({
      inputs: [{ name: 'INPUT0', datatype: 'FP32', shape: [elements], parameters: { binary_data_size: elements * 4 } }],
      outputs: [{ name: 'OUTPUT0', parameters: { binary_data: true } }],
    }),
  );
  return {
    path: '/v2/models/identity/infer',
    body: Buffer.concat([header, Buffer.from(values.buffer)]),
    headers: {
      'content-type': 'application/octet-stream',
      'inference-header-content-length': String(header.byteLength),
    },
  };
}

function identityJson(elements: number): Request {
  const data = Array.from({ length: elements }, (_, i) => (i % 251) * 0.5);
  return {
    path: '/v2/models/identity/infer',
    body: Buffer.from(JSON.stringify({ inputs: [{ name: 'INPUT0', datatype: 'FP32', shape: [elements], data }] })),
    headers: { 'content-type': 'application/json' },
  };
}

/** One request; returns the reply's length (its bytes are read and dropped). */
async function post(pool: Pool, r: Request): Promise<number> {
  const res = await pool.request({ method: 'POST', path: r.path, body: r.body, headers: r.headers });
  let bytes = 0;
  for await (const chunk of res.body) bytes += (chunk as Buffer).byteLength;
  if (res.statusCode !== 200) throw new Error(`${r.path}: status ${res.statusCode}`);
  return bytes;
}

/** Closed loop at `concurrency` for SECONDS against one server. */
async function closedLoop(pool: Pool, pid: number, r: Request, concurrency: number): Promise<Sample> {
  const cpu0 = cpuSeconds(pid);
  const faults0 = minorFaults(pid);
  const t0 = process.hrtime.bigint();
  const end = Date.now() + SECONDS * 1000;
  let done = 0;
  await Promise.all(
    Array.from({ length: concurrency }, async () => {
      while (Date.now() < end) {
        await post(pool, r);
        done++;
      }
    }),
  );
  const secs = Number(process.hrtime.bigint() - t0) / 1e9;
  return {
    perSec: done / secs,
    cpuMs: ((cpuSeconds(pid) - cpu0) * 1000) / done,
    faults: (minorFaults(pid) - faults0) / done,
  };
}

const repo = mkdtempSync(path.join(tmpdir(), 'nereid-bench-malloc-'));
mkdirSync(path.join(repo, 'identity', '1'), { recursive: true });
writeFileSync(
  path.join(repo, 'identity', '1', 'model.onnx'),
  buildIdentityModel([{ name: 'INPUT0', datatype: 'FP32', shape: ['n'] }]).toBytes(),
);
writeFileSync(
  path.join(repo, 'identity', 'config.pbtxt'),
  `platform: "onnxruntime_onnx"
max_batch_size: 0
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ -1 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ -1 ] } ]
instance_group [ { kind: KIND_CPU count: 1 } ]
`,
);
mkdirSync(path.join(repo, 'mlp_tiny', '1'), { recursive: true });
writeFileSync(
  path.join(repo, 'mlp_tiny', '1', 'model.onnx'),
  buildMlp(TINY_LAYERS, 1, { inputName: 'input', outputName: 'output' }).builder.toBytes(),
);
writeFileSync(
  path.join(repo, 'mlp_tiny', 'config.pbtxt'),
  `platform: "onnxruntime_onnx"
max_batch_size: 64
input [ { name: "input" data_type: TYPE_FP32 dims: [ ${TINY_LAYERS[0]} ] } ]
output [ { name: "output" data_type: TYPE_FP32 dims: [ ${TINY_LAYERS.at(-1)} ] } ]
`,
);

const servers: Array<{ label: string; pid: number; http: number; pool: Pool; stop: () => Promise<void> }> = [];
try {
  for (const spec of VARIANTS) {
    const s = await startNereid(repo, [], { env: variantEnv(spec) });
    servers.push({
      label: spec,
      pid: s.proc.child.pid!,
      http: s.http,
      pool: new Pool(`http://127.0.0.1:${s.http}`, { connections: 32 }),
      stop: () => s.proc.stop(),
    });
  }

  interface Point {
    readonly label: string;
    readonly run: (server: (typeof servers)[number]) => Promise<Sample>;
  }
  const points: Point[] = [];
  for (const kib of SIZES_KIB) {
    const r = identityBinary((kib * 1024) / 4);
    points.push({
      label: `${kib >= 1024 ? `${kib / 1024} MiB` : `${kib} KiB`} binary c${CONCURRENCY}`,
      run: (s) => closedLoop(s.pool, s.pid, r, CONCURRENCY),
    });
  }
  const json = identityJson((SIZES_KIB[0]! * 1024) / 4);
  points.push({
    label: `${SIZES_KIB[0]} KiB JSON c${CONCURRENCY}`,
    run: (s) => closedLoop(s.pool, s.pid, json, CONCURRENCY),
  });
  const tiny = jsonBody('input', 'output', TINY_LAYERS[0]!);
  points.push({
    label: 'tiny MLP JSON c32 (wrk)',
    run: async (s) => {
      const cpu0 = cpuSeconds(s.pid);
      const faults0 = minorFaults(s.pid);
      const w = await runWrk(`http://127.0.0.1:${s.http}/v2/models/mlp_tiny/infer`, tiny, 32, SECONDS);
      if (w.errors + w.non2xx > 0) throw new Error(`tiny MLP: ${w.errors} errors, ${w.non2xx} not 2xx`);
      return {
        perSec: w.requestsPerSec,
        cpuMs: ((cpuSeconds(s.pid) - cpu0) * 1000) / w.requests,
        faults: (minorFaults(s.pid) - faults0) / w.requests,
      };
    },
  });

  // Each server answers correctly once before it is measured (the identity gives its input back).
  for (const s of servers) {
    const r = identityBinary(1024);
    const res = await s.pool.request({ method: 'POST', path: r.path, body: r.body, headers: r.headers });
    const reply = Buffer.from(await res.body.arrayBuffer());
    if (
      res.statusCode !== 200 ||
      reply.subarray(reply.byteLength - 4096).compare(r.body.subarray(r.body.byteLength - 4096)) !== 0
    ) {
      throw new Error(`${s.label}: the identity did not give its input back (status ${res.statusCode})`);
    }
  }

  const rows: string[][] = [];
  for (const point of points) {
    for (const s of servers) await point.run(s); // warm-up
    const samples = servers.map(() => [] as Sample[]);
    for (let round = 0; round < ROUNDS; round++) {
      for (let i = 0; i < servers.length; i++) samples[i]!.push(await point.run(servers[i]!));
    }
    const base = median(samples[0]!.map((x) => x.perSec));
    servers.forEach((s, i) => {
      const perSec = median(samples[i]!.map((x) => x.perSec));
      rows.push([
        i === 0 ? point.label : '',
        s.label,
        fmt(perSec, perSec < 100 ? 1 : 0),
        i === 0 ? '' : fmt(perSec / base, 2),
        fmt(median(samples[i]!.map((x) => x.cpuMs)), 2),
        fmt(median(samples[i]!.map((x) => x.faults))),
        samples[i]!.map((x) => fmt(x.perSec, x.perSec < 100 ? 1 : 0)).join(' '),
      ]);
    });
  }
  const header = ['point', 'setting', 'req/s', 'vs first', 'CPU ms/req', 'faults/req', 'rounds req/s'];
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => r[i]!.length)));
  const line = (cells: string[]): string =>
    cells.map((c, i) => (i < 2 ? c.padEnd(widths[i]!) : c.padStart(widths[i]!))).join('  ');
  process.stdout.write(
    `\nglibc malloc settings, ${SECONDS}s per point and setting, ${ROUNDS} rounds in ` +
    `turns (medians)\n${line(header)}\n${widths.map((w) => '-'.repeat(w)).join('  ')}\n`,
  );
  for (const r of rows) process.stdout.write(`${line(r)}\n`);
  for (const s of servers) {
    const m = residentMiB(s.pid);
    process.stdout.write(`after the points: ${s.label}: RSS ${fmt(m.rss, 1)} MiB, brk heap ${fmt(m.heap, 1)} MiB\n`);
  }
} finally {
  for (const s of servers) {
    await s.pool.close();
    await s.stop();
  }
  rmSync(repo, { recursive: true, force: true });
}
