/**
 * `node dist/bench/trace-path.js` (section `tracepath` of bench/run.ts): the
 * CPU that tracing itself costs per request, without HTTP, the model or a
 * load generator around it, so that it can be compared between builds on a
 * busy machine. A traced request's life is replayed through the Tracer (sample,
 * the timestamps of an HTTP request to a dynamically batched model, end) at
 * a steady 20,000 requests/s, and the CPU of the event loop and of the
 * tracer's own thread (OTLP export, trace file writer) is read from /proc, per request: rate=1000 (the check on
 * untraced requests), rate=1 to a file (log-frequency=1000), rate=1 over
 * OTLP/HTTP to a receiver in a child process. V8's helper threads (garbage
 * collection, compilation) are read too. Variants alternate, ROUNDS
 * times; medians. TRACE_PATH_BASE=<another build's dist folder> runs
 * that build's tracer beside this one.
 *
 * Environment: BENCH_SECONDS (per point, default 2), BENCH_ROUNDS (default 3),
 * TRACE_PATH_ONLY (a word of the variants' labels, e.g. OTLP: only those), TRACE_PATH_BSP=QUEUE,BATCH (the batch
 * span processor's bsp_max_queue_size and bsp_max_export_batch_size; default Triton's 2048,512).
 */
import { fork } from 'node:child_process';
import { mkdtempSync, readFileSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import type { TraceStampName } from '../src/types/api.js';
import type { Tracer as TracerClass, TracerOptions } from '../src/trace/index.js';
import { CORE_ORDER } from '../test/helpers/trace-models.js';

/** CPU seconds of one thread, from the scheduler's ns count (the clock ticks of /proc/.../stat are 10 ms). */
function cpuSeconds(pid: number, tid: number): number {
  try {
    return Number(readFileSync(`/proc/${pid}/task/${tid}/schedstat`, 'utf8').split(' ')[0]) / 1e9;
  } catch {
    return 0; // a thread gone
  }
}

const SECONDS = Number(process.env.BENCH_SECONDS ?? 2);
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 3);
const PER_SECOND = 20_000;
const MODEL = 'tiny_mlp_batched';

type TracerCtor = new (options: TracerOptions) => TracerClass;

async function loadTracer(dist: string): Promise<TracerCtor> {
  const url = pathToFileURL(path.join(dist, 'src/trace/index.js')).href;
  return ((await import(url)) as { Tracer: TracerCtor }).Tracer;
}

const HTTP_STAMPS: TraceStampName[] = ['HTTP_RECV_START', 'HTTP_RECV_END'];

/** One request's trace as the HTTP frontend, the core and the scheduler make it. */
function request(tracer: TracerClass): void {
  const trace = tracer.sample(MODEL);
  if (trace === undefined) return;
  for (const s of HTTP_STAMPS) trace.stamp(s);
  trace.setModel(MODEL, '1', '');
  const t = process.hrtime.bigint();
  for (const s of CORE_ORDER) trace.stamp(s, s.startsWith('COMPUTE') ? t : undefined);
  trace.stamp('HTTP_SEND_START');
  trace.stamp('HTTP_SEND_END');
  trace.end();
}

/** The threads of this process other than the main one whose name says they are worker threads. */
function workerThreads(): number[] {
  const named = (tid: number): boolean => {
    try {
      return readFileSync(`/proc/${process.pid}/task/${tid}/comm`, 'utf8').trim() === 'WorkerThread';
    } catch {
      return false; // gone since the listing
    }
  };
  return readdirSync(`/proc/${process.pid}/task`).map(Number).filter(named);
}

/** The process's threads that V8 runs its own work on (parallel and concurrent GC, compilation). */
function helperThreads(): number[] {
  const named = (tid: number): boolean => {
    try {
      return readFileSync(`/proc/${process.pid}/task/${tid}/comm`, 'utf8').startsWith('V8Worker');
    } catch {
      return false; // gone since the listing
    }
  };
  return readdirSync(`/proc/${process.pid}/task`).map(Number).filter(named);
}

interface Point {
  main: number;
  exporter: number;
  /** V8's helper threads. */
  helpers: number;
  /** Spans dropped (queue full or export failed), per 1000 requests. */
  dropped: number;
}

/** Runs `seconds` of requests at PER_SECOND; CPU µs per request of the event loop and of the export thread. */
async function run(tracer: TracerClass, seconds: number): Promise<Point> {
  const pid = process.pid;
  const threads = workerThreads();
  const exportCpu = (): number => threads.reduce((s, tid) => s + cpuSeconds(pid, tid), 0);
  const helpers = helperThreads();
  const helperCpu = (): number => helpers.reduce((s, tid) => s + cpuSeconds(pid, tid), 0);
  const lost = async (): Promise<number> => {
    const d = await tracer.droppedSpans();
    return d.queueFull + d.exportFailed;
  };
  const lost0 = await lost();
  const [main0, exp0, help0] = [cpuSeconds(pid, pid), exportCpu(), helperCpu()];
  const start = performance.now();
  let done = 0;
  const total = Math.round(seconds * PER_SECOND);
  while (done < total) {
    const due = Math.min(total, Math.floor(((performance.now() - start) / 1000) * PER_SECOND));
    for (; done < due; done++) request(tracer);
    await new Promise((resolve) => setTimeout(resolve, 1));
  }
  await tracer.droppedSpans(); // the export thread has taken every span
  await new Promise((resolve) => setTimeout(resolve, 50));
  const [main1, exp1, help1] = [cpuSeconds(pid, pid), exportCpu(), helperCpu()];
  const dropped = ((await lost()) - lost0) / (total / 1000);
  const per = (cpu: number): number => (cpu * 1e6) / total;
  return { main: per(main1 - main0), exporter: per(exp1 - exp0), helpers: per(help1 - help0), dropped };
}

async function main(): Promise<void> {
  const here = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
  const builds: Array<{ label: string; Tracer: TracerCtor }> = [{ label: 'this', Tracer: await loadTracer(here) }];
  if (process.env.TRACE_PATH_BASE) {
    builds.unshift({ label: 'base', Tracer: await loadTracer(path.resolve(process.env.TRACE_PATH_BASE)) });
  }
  const receiver = fork(fileURLToPath(import.meta.url), ['receiver'], { stdio: 'ignore' });
  const port = await new Promise<number>((resolve) => receiver.once('message', (m) => resolve(m as number)));
  const dir = mkdtempSync(path.join(tmpdir(), 'nereid-trace-path-'));
  const [queue, batch] = (process.env.TRACE_PATH_BSP ?? '2048,512').split(',').map(Number);
  const otel = {
    url: `http://127.0.0.1:${port}/v1/traces`,
    resource: { 'service.name': 'nereid' },
    bspMaxQueueSize: queue!,
    bspScheduleDelayMs: 5000,
    bspMaxExportBatchSize: batch!,
  };
  const variants: Array<{ label: string; options: (i: number) => TracerOptions }> = [
    { label: 'rate=1000, file', options: (i) => ({ level: 1, rate: 1000, file: `${dir}/a${i}.json` }) },
    { label: 'rate=1, file', options: (i) => ({ level: 1, rate: 1, logFrequency: 1000, file: `${dir}/b${i}.json` }) },
    { label: 'rate=1, OTLP', options: () => ({ level: 1, rate: 1, mode: 'opentelemetry', otel }) },
  ];
  const only = process.env.TRACE_PATH_ONLY;
  if (only) variants.splice(0, variants.length, ...variants.filter((v) => v.label.includes(only)));
  const tracers = builds.map((b) => variants.map((v, i) => new b.Tracer(v.options(i))));
  const points: Point[][][] = builds.map(() => variants.map(() => []));
  try {
    for (const row of tracers) for (const t of row) await run(t, 0.5); // warm-up
    for (let round = 0; round < ROUNDS; round++) {
      for (let v = 0; v < variants.length; v++) {
        for (let b = 0; b < builds.length; b++) points[b]![v]!.push(await run(tracers[b]![v]!, SECONDS));
      }
    }
  } finally {
    for (const row of tracers) for (const t of row) await t.close();
    receiver.kill();
    rmSync(dir, { recursive: true, force: true });
  }
  const median = (xs: number[]): number => [...xs].sort((a, b) => a - b)[xs.length >> 1]!;
  process.stdout.write(
    `\nTracing's own CPU per request (µs), ${PER_SECOND} requests/s, ${ROUNDS} rounds × ${SECONDS}s; medians\n` +
      `${'variant'.padEnd(18)}${'build'.padEnd(7)}${'event loop'.padStart(11)}${'its thread'.padStart(15)}` +
      `${'V8 helpers'.padStart(12)}${'dropped/1000'.padStart(14)}\n`,
  );
  for (let v = 0; v < variants.length; v++) {
    for (let b = 0; b < builds.length; b++) {
      const ps = points[b]![v]!;
      const exporter = variants[v]!.label.startsWith('rate=1,') ? median(ps.map((p) => p.exporter)).toFixed(2) : '';
      process.stdout.write(
        `${variants[v]!.label.padEnd(18)}${builds[b]!.label.padEnd(7)}` +
          `${median(ps.map((p) => p.main)).toFixed(2).padStart(11)}${exporter.padStart(15)}` +
          `${median(ps.map((p) => p.helpers)).toFixed(2).padStart(12)}` +
          `${median(ps.map((p) => p.dropped)).toFixed(1).padStart(14)}\n`,
      );
    }
  }
}

if (process.argv[2] === 'receiver') {
  // The OTLP receiver, in its own process so that its CPU is not the event loop's.
  const http = await import('node:http');
  const server = http.createServer((req, res) => {
    req.resume();
    req.on('end', () => res.writeHead(200, { 'Content-Type': 'application/x-protobuf' }).end());
  });
  server.listen(0, '127.0.0.1', () => {
    const address = server.address();
    process.send!(typeof address === 'object' && address !== null ? address.port : 0);
  });
} else {
  await main();
}
