/**
 * gRPC ModelInfer against HTTP binary infer on one `nereid serve` process,
 * batch 1 per request, 32 requests in flight (section `grpc` of bench/run.ts;
 * standalone `node dist/bench/grpc-http.js`).
 *
 * Three loads, alternated in rounds (the order reversed every other round):
 *
 *   http   wrk -t1 -c32: 32 HTTP/1.1 connections, one request each in flight;
 *   grpc   h2load -t1 -c32 -m1: 32 HTTP/2 connections, one stream each in
 *          flight (the same connection semantics as wrk);
 *   grpc4x8 h2load -t1 -c4 -m8: 4 connections x 8 streams (what a few shared
 *          channels carry; more calls per socket read and write).
 *
 * For each point: calls/s, the server's main-thread CPU per call and the
 * whole process's (session threads included), from /proc over the calls the
 * model counted (nv_inference_request_success, so h2load's warm-up second
 * counts on both sides of the division), and the load tool's own CPU per
 * call (a load tool that costs more per call leaves the server less of a
 * shared machine). Printed: medians, the gRPC/HTTP ratio of the medians and
 * the median of the ratios round by round (HTTP measured beside it in the
 * same round), and the load average before and after.
 *
 * Beside them, the same loads on the transport floors (bench/transport-floor.ts):
 * node:http and node:http2 servers that answer a fixed reply of the model's
 * response size without reading the request, the least any Node.js server
 * pays per call over each protocol, and a bare grpc-js server doing the same,
 * what the gRPC library adds ("floor" rows; their calls are h2load's and
 * wrk's counts).
 *
 * Environment: BENCH_SECONDS (per point, default 3), BENCH_ROUNDS (default 3),
 * BENCH_MODELS ("tiny,medium"), GRPC_HTTP_VARIANTS ("plain,batched"),
 * GRPC_HTTP_LOADS ("http,grpc,grpc4x8"), GRPC_HTTP_CONCURRENCY (default 32;
 * grpc4x8 becomes c/8 x 8), GRPC_HTTP_FLOORS (default 1; 0 leaves the floors
 * out), GRPC_HTTP_BASE_DIST (the dist folder of another build, started
 * beside this one; its points are labelled "base ...").
 */
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { connect } from 'node:net';
import { loadavg, tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { binaryBody } from './bodies.js';
import { h2loadArgs, modelInferBody, parseH2load } from './grpc.js';
import { type BenchModel, buildBenchModels } from './models.js';
import { DIST, Proc, cpuSeconds, freePort, startNereid } from './processes.js';
import type { HttpBody } from './wrk.js';

const CLOCK_TICKS_PER_SECOND = 100;

export type LoadKind = 'http' | 'grpc' | 'grpc4x8';

interface LoadRun {
  callsPerSec: number;
  failed: number;
  /** CPU seconds of the load tool itself. */
  clientCpu: number;
}

/**
 * Runs `argv` through sh, which prints its waited children's CPU time (fields cutime, cstime of its own stat) after it.
 */
function runCounted(argv: string[]): Promise<{ out: string; clientCpu: number }> {
  return new Promise((resolve, reject) => {
    const child = spawn('sh', ['-c', '"$@"; echo; echo NEREID_CHILD_STAT $(cat /proc/$$/stat)', 'sh', ...argv], {
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let out = '';
    child.stdout.on('data', (c: Buffer) => (out += c.toString()));
    child.stderr.on('data', (c: Buffer) => (out += c.toString()));
    child.on('error', reject);
    child.on('close', () => {
      const line = /NEREID_CHILD_STAT (.*)/.exec(out)?.[1];
      if (line === undefined) return reject(new Error(`no CPU reading:\n${out}`));
      const fields = line.slice(line.lastIndexOf(')') + 2).split(' ');
      resolve({ out, clientCpu: (Number(fields[13]) + Number(fields[14])) / CLOCK_TICKS_PER_SECOND });
    });
  });
}

function luaString(buf: Buffer): string {
  let s = '"';
  for (const b of buf) s += b >= 0x20 && b < 0x7f && b !== 0x22 && b !== 0x5c ? String.fromCharCode(b) : `\\${b}`;
  return `${s}"`;
}

export async function wrkLoad(url: string, req: HttpBody, connections: number, seconds: number): Promise<LoadRun> {
  const dir = mkdtempSync(path.join(tmpdir(), 'nereid-grpc-http-'));
  const file = path.join(dir, 'req.lua');
  const headers = Object.entries(req.headers).map(
    ([k, v]) => `wrk.headers[${JSON.stringify(k)}] = ${JSON.stringify(v)}`,
  );
  writeFileSync(
    file,
    [
      'wrk.method = "POST"',
      `wrk.body = ${luaString(req.body)}`,
      ...headers,
      'function done(summary, latency, requests)',
      '  local errs = summary.errors.connect + summary.errors.read + ' +
      'summary.errors.write + summary.errors.timeout + summary.errors.status',
      '  io.write(string.format("NEREID_RESULT %f %d\\n", summary.requests / (summary.duration / 1e6), errs))',
      'end',
      '',
    ].join('\n'),
  );
  try {
    const { out, clientCpu } = await runCounted([
      'wrk',
      '-t1',
      `-c${connections}`,
      `-d${seconds}s`,
      '--timeout',
      '10s',
      '-s',
      file,
      url,
    ]);
    const m = /NEREID_RESULT (\S+) (\d+)/.exec(out);
    if (!m) throw new Error(`wrk produced no result:\n${out}`);
    return { callsPerSec: Number(m[1]), failed: Number(m[2]), clientCpu };
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

export async function h2loadLoad(
  port: number,
  body: Buffer,
  clients: number,
  streams: number,
  seconds: number,
): Promise<LoadRun> {
  const dir = mkdtempSync(path.join(tmpdir(), 'nereid-grpc-http-'));
  const file = path.join(dir, 'body.bin');
  writeFileSync(file, body);
  try {
    const { out, clientCpu } = await runCounted(['h2load', ...h2loadArgs(port, file, clients, streams, seconds)]);
    const r = parseH2load(out);
    return { callsPerSec: r.requestsPerSec, failed: r.failed, clientCpu };
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

async function successCount(metricsPort: number, model: string): Promise<number> {
  const text = await (await fetch(`http://127.0.0.1:${metricsPort}/metrics`)).text();
  const m = new RegExp(`^nv_inference_request_success\\{model="${model}",version="1"[^}]*\\} (\\S+)`, 'm').exec(text);
  if (!m) throw new Error(`no nv_inference_request_success for ${model}`);
  return Number(m[1]);
}

interface Point {
  callsPerSec: number;
  mainUs: number;
  processUs: number;
  clientUs: number;
  failed: number;
}

interface Served {
  label: string;
  pid: number;
  http: number;
  grpc: number;
  /** Calls the server has answered for `model` so far; undefined: count the load tool's calls. */
  count?: (model: string) => Promise<number>;
}

async function measurePoint(
  s: Served,
  model: BenchModel,
  name: string,
  load: LoadKind,
  conc: number,
  seconds: number,
): Promise<Point> {
  const pid = s.pid;
  const [main0, all0, n0] = [cpuSeconds(pid, pid), cpuSeconds(pid), await s.count?.(name)];
  let run: LoadRun;
  if (load === 'http') {
    run = await wrkLoad(
      `http://127.0.0.1:${s.http}/v2/models/${name}/infer`,
      binaryBody(model.inputName, model.outputName, model.inputSize),
      conc,
      seconds,
    );
  } else {
    const body = modelInferBody(name, model.inputName, model.outputName, model.inputSize);
    run =
      load === 'grpc'
        ? await h2loadLoad(s.grpc, body, conc, 1, seconds)
        : await h2loadLoad(s.grpc, body, Math.max(1, conc / 8), 8, seconds);
  }
  const [main1, all1, n1] = [cpuSeconds(pid, pid), cpuSeconds(pid), await s.count?.(name)];
  const calls = Math.max(1, n0 === undefined || n1 === undefined ? run.callsPerSec * seconds : n1 - n0);
  return {
    callsPerSec: run.callsPerSec,
    mainUs: ((main1 - main0) * 1e6) / calls,
    processUs: ((all1 - all0) * 1e6) / calls,
    clientUs: (run.clientCpu * 1e6) / calls,
    failed: run.failed,
  };
}

/** The node:http, node:http2 and bare grpc-js floors answering `replyBytes`, one process each. */
async function startFloors(replyBytes: number): Promise<Array<{ served: Served; stop: () => Promise<void> }>> {
  const out: Array<{ served: Served; stop: () => Promise<void> }> = [];
  for (const kind of ['http', 'http2', 'grpc-js'] as const) {
    const port = await freePort();
    const proc = new Proc(
      spawn(
        process.execPath,
        [path.join(DIST, 'bench', 'transport-floor.js'), kind, String(port), String(replyBytes)],
        { stdio: ['ignore', 'ignore', 'inherit'] },
      ),
    );
    await waitForPort(port);
    out.push({
      served: { label: `${kind} floor `, pid: proc.child.pid!, http: port, grpc: port },
      stop: () => proc.stop(),
    });
  }
  return out;
}

async function waitForPort(port: number): Promise<void> {
  for (let i = 0; i < 100; i++) {
    const ok = await new Promise<boolean>((resolve) => {
      const s = connect(port, '127.0.0.1', () => {
        s.destroy();
        resolve(true);
      });
      s.on('error', () => resolve(false));
    });
    if (ok) return;
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new Error(`nothing listens on port ${port}`);
}

const median = (xs: number[]): number => {
  const s = [...xs].sort((a, b) => a - b);
  return s.length % 2 === 1 ? s[(s.length - 1) / 2]! : (s[s.length / 2 - 1]! + s[s.length / 2]!) / 2;
};
const load3 = (): string => loadavg().map((v) => v.toFixed(2)).join(' ');

export interface GrpcHttpOptions {
  seconds: number;
  rounds: number;
  variants: Array<'plain' | 'batched'>;
  loads: LoadKind[];
  concurrency: number;
  floors: boolean;
  baseDist?: string;
}

/** Runs the alternated rounds for each model and prints one table per model. */
export async function grpcVsHttp(models: BenchModel[], o: GrpcHttpOptions): Promise<void> {
  for (const model of models) {
    const servers: Array<{ served: Served; stop: () => Promise<void> }> = [];
    const floors: Array<{ served: Served; stop: () => Promise<void> }> = [];
    const start = async (label: string, dist?: string) => {
      const n = await startNereid(model.repository, [], dist === undefined ? {} : { dist });
      const count = (name: string) => successCount(n.metrics, name);
      servers.push({
        served: { label, pid: n.proc.child.pid!, http: n.http, grpc: n.grpc, count },
        stop: () => n.proc.stop(),
      });
    };
    await start('');
    if (o.baseDist !== undefined) await start('base ', path.resolve(o.baseDist));
    // The reply as Nereid's gRPC response carries it: names, shape and the output's bytes.
    if (o.floors) floors.push(...(await startFloors(model.outputSize * 4 + 40)));
    const names = o.variants.map((v) => (v === 'plain' ? model.plainName : model.batchedName));
    const points = new Map<string, Point[]>();
    const before = load3();
    try {
      const turns: Array<() => Promise<void>> = [];
      const turn = (served: Served, name: string, load: LoadKind, key: string) => {
        points.set(key, []);
        turns.push(async () => {
          points.get(key)!.push(await measurePoint(served, model, name, load, o.concurrency, o.seconds));
        });
      };
      for (const name of names) {
        for (const { served } of servers)
          for (const load of o.loads) turn(served, name, load, `${served.label}${load}\u0000${name}`);
      }
      for (const { served } of floors) {
        for (const load of o.loads) {
          if ((load === 'http') === served.label.startsWith('http floor'))
            turn(served, names[0]!, load, `${served.label}${load}\u0000(fixed reply)`);
        }
      }
      // Warm-up: every point once, briefly.
      for (const name of names) {
        for (const { served } of servers)
          for (const load of o.loads) await measurePoint(served, model, name, load, o.concurrency, 1);
      }
      for (let r = 0; r < o.rounds; r++) {
        const order = r % 2 === 0 ? turns : [...turns].reverse();
        for (const t of order) await t();
      }
    } finally {
      for (const s of [...servers, ...floors]) await s.stop();
    }
    const after = load3();
    const c = o.concurrency;
    const loadName: Record<LoadKind, string> = {
      http: `wrk -c${c}`,
      grpc: `h2load -c${c} -m1`,
      grpc4x8: `h2load -c${Math.max(1, c / 8)} -m8`,
    };
    process.stdout.write(
      `\n${model.label}: gRPC ModelInfer vs HTTP binary infer, same ` +
      `server, batch 1, ${c} in flight, ${o.seconds}s per point, ` +
        `${o.rounds} alternated rounds (medians); load average ${before} before, ${after} after\n`,
    );
    const header = [
      'model',
      'load',
      'tool',
      'calls/s',
      'x http',
      'x http paired',
      'main µs/call',
      'process µs/call',
      'tool µs/call',
      'failed',
    ];
    const rows: string[][] = [];
    for (const [key, pts] of points) {
      const [load, name] = key.split('\u0000') as [string, string];
      const kind = load.slice(load.lastIndexOf(' ') + 1) as LoadKind;
      const prefix = load.slice(0, load.lastIndexOf(' ') + 1);
      // Each gRPC row against HTTP on the same server; the gRPC floors against the http floor.
      const httpKey = prefix.endsWith('floor ') ? `http floor http\u0000${name}` : `${prefix}http\u0000${name}`;
      const httpPts = points.get(httpKey);
      const rps = median(pts.map((p) => p.callsPerSec));
      rows.push([
        name,
        load,
        loadName[kind],
        rps.toFixed(0),
        httpPts === undefined ? '-' : (rps / median(httpPts.map((p) => p.callsPerSec))).toFixed(2),
        // Round by round (HTTP measured next to it), then the median: steadier when the machine's load moves.
        httpPts === undefined ? '-' : median(pts.map((p, i) => p.callsPerSec / httpPts[i]!.callsPerSec)).toFixed(2),
        median(pts.map((p) => p.mainUs)).toFixed(1),
        median(pts.map((p) => p.processUs)).toFixed(1),
        median(pts.map((p) => p.clientUs)).toFixed(1),
        String(pts.reduce((n, p) => n + p.failed, 0)),
      ]);
    }
    const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => r[i]!.length)));
    const line = (cells: string[]) =>
      cells.map((s, i) => (i < 3 ? s.padEnd(widths[i]!) : s.padStart(widths[i]!))).join('  ');
    process.stdout.write(`${line(header)}\n${widths.map((w) => '-'.repeat(w)).join('  ')}\n`);
    for (const r of rows) process.stdout.write(`${line(r)}\n`);
  }
}

export function grpcHttpOptionsFromEnv(): GrpcHttpOptions {
  const env = process.env;
  return {
    seconds: Number(env.BENCH_SECONDS ?? 3),
    rounds: Number(env.BENCH_ROUNDS ?? 3),
    variants: (env.GRPC_HTTP_VARIANTS ?? 'plain,batched').split(',') as Array<'plain' | 'batched'>,
    loads: (env.GRPC_HTTP_LOADS ?? 'http,grpc,grpc4x8').split(',') as LoadKind[],
    concurrency: Number(env.GRPC_HTTP_CONCURRENCY ?? 32),
    floors: env.GRPC_HTTP_FLOORS !== '0',
    baseDist: env.GRPC_HTTP_BASE_DIST,
  };
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const only = process.env.BENCH_MODELS?.split(',');
  const models = (await buildBenchModels()).filter((m) => !only || only.some((o) => m.plainName.includes(o)));
  await grpcVsHttp(models, grpcHttpOptionsFromEnv());
}
