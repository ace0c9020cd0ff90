/**
 * `node dist/bench/json-text.js` (section `jsontext` of bench/run.ts): JSON
 * outputs formatted on the session thread, against another build and the
 * naive wrapper in the same run. The medium MLP (768 FP32 per response),
 * wrk -t1, with the default scheduler and with dynamic batching; the bodies
 * binary in / JSON out, JSON in / JSON out, and binary (which must not
 * change). Targets alternate point by point for BENCH_ROUNDS rounds; the
 * table gives medians, the ratio to naive and each server's CPU per request
 * split into its main thread and the rest (session threads, onnxruntime's
 * pool, V8's helpers), so a shift of work off the event loop shows.
 *
 * Environment: BENCH_SECONDS (per point, default 2), BENCH_ROUNDS (default 3),
 * BENCH_CONCURRENCY (default 32), BENCH_FORMATS (default "bin→json,json,binary"),
 * JSON_TEXT_BASE_DIST (the dist folder of the build to compare with; without
 * it only this build and naive run).
 */
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { binaryBody, binaryInJsonOutBody, jsonBody } from './bodies.js';
import { buildBenchModels } from './models.js';
import { cpuSeconds, startNaive, startNereid } from './processes.js';
import { type HttpBody, runWrk } from './wrk.js';

const SECONDS = Number(process.env.BENCH_SECONDS ?? 2);
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 3);
const CONCURRENCY = (process.env.BENCH_CONCURRENCY ?? '32').split(',').map(Number);
const FORMATS = (process.env.BENCH_FORMATS ?? 'bin→json,json,binary').split(',');
const BASE_DIST = process.env.JSON_TEXT_BASE_DIST;

interface Point {
  readonly rps: number;
  readonly p50us: number;
  readonly mainUs: number;
  readonly otherUs: number;
  readonly errors: number;
}

function median(values: readonly number[]): number {
  const s = [...values].sort((a, b) => a - b);
  return s[Math.floor(s.length / 2)]!;
}

function fmt(n: number, digits = 0): string {
  return n.toLocaleString('en-US', { maximumFractionDigits: digits, minimumFractionDigits: digits });
}

function loadAverage(): string {
  return readFileSync('/proc/loadavg', 'utf8').split(' ')[0]!;
}

const medium = (await buildBenchModels()).find((m) => m.plainName === 'mlp_medium')!;

function body(format: string): HttpBody {
  if (format === 'json') return jsonBody(medium.inputName, medium.outputName, medium.inputSize);
  if (format === 'binary') return binaryBody(medium.inputName, medium.outputName, medium.inputSize);
  return binaryInJsonOutBody(medium.inputName, medium.outputName, medium.inputSize);
}

async function measure(url: string, pid: number, format: string, c: number): Promise<Point> {
  const main0 = cpuSeconds(pid, pid);
  const all0 = cpuSeconds(pid);
  const w = await runWrk(url, body(format), c, SECONDS);
  const main1 = cpuSeconds(pid, pid);
  const all1 = cpuSeconds(pid);
  const n = Math.max(1, w.requests);
  const mainUs = ((main1 - main0) * 1e6) / n;
  return {
    rps: w.requestsPerSec,
    p50us: w.p50us,
    mainUs,
    otherUs: ((all1 - all0) * 1e6) / n - mainUs,
    errors: w.errors + w.non2xx,
  };
}

const current = await startNereid(medium.repository);
const base =
  BASE_DIST === undefined ? undefined : await startNereid(medium.repository, [], { dist: path.resolve(BASE_DIST) });
const naive = await startNaive(medium.onnxFile);
const servers: Array<{ label: string; port: number; pid: number }> = [
  { label: 'this build', port: current.http, pid: current.proc.child.pid! },
];
if (base !== undefined) servers.unshift({ label: 'base', port: base.http, pid: base.proc.child.pid! });
const points = new Map<string, Point[]>();
const loads: string[] = [];
try {
  for (let round = 0; round < ROUNDS; round++) {
    loads.push(loadAverage());
    for (const model of [medium.plainName, medium.batchedName]) {
      for (const format of FORMATS) {
        for (const c of CONCURRENCY) {
          const targets = [
            ...servers.map((s) => ({
              label: s.label,
              url: `http://127.0.0.1:${s.port}/v2/models/${model}/infer`,
              pid: s.pid,
            })),
            { label: 'naive', url: `http://127.0.0.1:${naive.port}/`, pid: naive.proc.child.pid! },
          ];
          for (const t of targets) {
            const key = `${model}\u0000${format}\u0000${c}\u0000${t.label}`;
            const list = points.get(key) ?? [];
            list.push(await measure(t.url, t.pid, format, c));
            points.set(key, list);
          }
        }
      }
    }
  }
} finally {
  await current.proc.stop();
  await base?.proc.stop();
  await naive.proc.stop();
}

const rows: string[][] = [];
for (const model of [medium.plainName, medium.batchedName]) {
  for (const format of FORMATS) {
    for (const c of CONCURRENCY) {
      const of = (label: string) => points.get(`${model}\u0000${format}\u0000${c}\u0000${label}`)!;
      const naiveRps = median(of('naive').map((p) => p.rps));
      for (const label of [...servers.map((s) => s.label), 'naive']) {
        const ps = of(label);
        const rps = median(ps.map((p) => p.rps));
        rows.push([
          model,
          format,
          String(c),
          label,
          fmt(rps),
          fmt(median(ps.map((p) => p.p50us))),
          label === 'naive' ? '' : fmt(rps / naiveRps, 2),
          fmt(median(ps.map((p) => p.mainUs))),
          fmt(median(ps.map((p) => p.otherUs))),
          String(ps.reduce((n, p) => n + p.errors, 0)),
        ]);
      }
    }
  }
}
const header = [
  'model',
  'body',
  'conc',
  'server',
  'req/s',
  'p50us',
  'x naive',
  'main us/req',
  'other us/req',
  'errors',
];
const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => r[i]!.length)));
const line = (cells: string[]) => cells.map((cell, i) => cell.padStart(widths[i]!)).join('  ');
process.stdout.write(
  `\nJSON outputs formatted on the session thread: medians of ${ROUNDS} alternating rounds, ` +
  `wrk -t1, ${SECONDS}s per point; load averages at round starts ${loads.join(' ')}` +
    `${BASE_DIST === undefined ? '' : `; base = ${BASE_DIST}`}\n` +
    `${line(header)}\n${widths.map((w) => '-'.repeat(w)).join('  ')}\n`,
);
for (const r of rows) process.stdout.write(`${line(r)}\n`);
