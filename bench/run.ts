/**
 * `npm run bench [-- <section> ...]`: Nereid side by side with the compute
 * ceiling (onnxruntime in-process) and a naive node:http wrapper, measured in
 * the same run with the same load, printed as tables of ratios.
 *
 * Sections: http (default scheduler vs naive), batching (dynamic batcher),
 * grpc (gRPC vs HTTP binary on the same server, alternated, with main-thread CPU per call and the
 * node:http / node:http2 floors; then the h2load ceiling; GRPC_HTTP_* in bench/grpc-http.ts),
 * python (process boundary, TorchScript vs onnxruntime), loadtool (nereid perf's own ceiling),
 * javascript (a model.mjs identity against an ONNX identity, concurrency 1),
 * stream (decoupled responses over gRPC and SSE), cache (response-cache hits vs the health endpoint),
 * shm (4 MiB input via system shared memory vs binary HTTP), sequence (64 live sequences of a
 * stateful accumulator vs the same model under the dynamic batcher),
 * ensemble (an ensemble of two ONNX steps against its slowest step alone; added latency),
 * lifecycle (cold start of 100 models, a swap under load),
 * cloud (cold start of 100 models from a local folder vs an S3 server, and a warm-cache restart),
 * overload (a bounded queue at 2x capacity: goodput and accepted p99),
 * overloadmodel (the dynamic batcher alone at 2x capacity, in virtual time),
 * json (JSON tensor decode/encode in process, previous vs current code),
 * cost (main-thread CPU per request against the naive wrapper, and by stage),
 * inline (inline execution vs the session thread vs naive, with server CPU),
 * grpclibs (@grpc/grpc-js against @connectrpc/connect-node under the same ModelInfer),
 * jsontext (JSON outputs formatted on the session thread: the medium MLP against another build and naive),
 * medium (the medium MLP under dynamic batching at c32, binary and binary in / JSON out, against the ceiling, naive and
 * another build),
 * trace (request tracing off twice (an A/A control), rate=1000 and rate=1 to a file, rate=1 over OTLP; blocks of
 * fresh servers),
 * aa (identical servers of the tiny MLP, rotated rounds: per server req/s, CPU per request by thread, requests per
 * batch, batches by reason; why two servers of one build differ),
 * tracepath (tracing's own CPU per request on the event loop and the OTLP export thread, without HTTP),
 * otlpserialize (the OTLP protobuf body of 512 spans: the SDK's serializer against ours, in process),
 * malloc (glibc's malloc defaults against the fixed mmap threshold nereid serve sets: large tensors and the tiny MLP),
 * openai (/v1/embeddings against /v2 infer, time to first token and streamed tokens/s over /v1/chat/completions),
 * float32json (the float32 JSON writer of /v1/embeddings in process, previous vs current code),
 * auth (--auth-keys on vs off: the tiny MLP at concurrency 32, binary, alternated),
 * client (nereid/client against a hand-written undici loop and a bare grpc-js stub, tiny MLP at concurrency 32),
 * dashboard (the server's throughput with a dashboard page open in Chromium vs closed, tiny MLP at concurrency 32),
 * paging (30 models under a memory budget for 8, a Zipf stream: RSS, evictions, hit/miss latency, from a cold
 * start and restarted with the scores kept; against all loaded and the client-side load→infer→unload dance),
 * paging-rules (unload rules played through the paging simulation: unloads of the five hottest; no server),
 * paging-memory (what a paging server holds beyond its models' figures after load/unload churn, serial and at
 * concurrency 8, and while 8 loaded models serve, for memory settings given in PAGING_MEMORY_VARIANTS),
 * ab (this build against another build's dist folder, AB_BASE_DIST: tiny and medium MLP, JSON and binary, c32),
 * adaptive (the dynamic batcher's adaptive policy against fixed and unbatched: c1 latency, c8/c32
 * throughput, open-loop Poisson at 30/60/90 % of capacity, 2× overload, the batcher's own cost),
 * frontends (--frontend-threads=1 against the default and naive: tiny and medium MLP, binary and JSON, c8/c32,
 * server CPU per request; the thread crossing; 2× overload with each),
 * crossing (a frontend thread's request and answer: postMessage with transferred buffers against a
 * SharedArrayBuffer ring with Atomics.waitAsync; round-trip p50 and CPU per round trip).
 * Environment: BENCH_SECONDS (per point, default 5), BENCH_CONCURRENCY (e.g. "1,8,32"),
 * BENCH_MODELS (e.g. "tiny" or "tiny,medium"), BENCH_FORMATS (http and batching: "binary,json,bin→json";
 * bin→json is binary input with the output asked back as JSON).
 */
import { spawnSync } from 'node:child_process';
import path from 'node:path';
import { binaryBody, binaryInJsonOutBody, jsonBody } from './bodies.js';
import { type BenchModel, buildBenchModels } from './models.js';
import { DIST, startNaive, startNereid } from './processes.js';
import { type WrkResult, runWrk } from './wrk.js';
import { grpcSection } from './grpc.js';
import { grpcHttpOptionsFromEnv, grpcVsHttp } from './grpc-http.js';

const SECONDS = Number(process.env.BENCH_SECONDS ?? 5);
const sections = process.argv.slice(2);
const want = (s: string) => sections.length === 0 ? s === 'http' || s === 'batching' : sections.includes(s);

function fmt(n: number, digits = 0): string {
  return n.toLocaleString('en-US', { maximumFractionDigits: digits, minimumFractionDigits: digits });
}

function printTable(title: string, header: string[], rows: string[][]): void {
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => r[i]!.length)));
  const line = (cells: string[]) => cells.map((c, i) => c.padStart(widths[i]!)).join('  ');
  process.stdout.write(`\n${title}\n${line(header)}\n${widths.map((w) => '-'.repeat(w)).join('  ')}\n`);
  for (const r of rows) process.stdout.write(`${line(r)}\n`);
}

export function ceiling(model: BenchModel, batches: number[], threads: number): Map<number, number> {
  const r = spawnSync(
    process.execPath,
    [path.join(DIST, 'bench', 'ceiling.js'), model.onnxFile, String(model.inputSize), batches.join(','), '2'],
    {
      encoding: 'utf8',
      env: { ...process.env, CEILING_THREADS: String(threads) },
    },
  );
  const out = new Map<number, number>();
  for (const line of r.stdout.split('\n')) {
    if (!line.trim()) continue;
    const j = JSON.parse(line) as { batch: number; inferPerSec: number };
    out.set(j.batch, j.inferPerSec);
  }
  return out;
}

type BodyFormat = 'json' | 'binary' | 'bin→json';

async function measure(url: string, model: BenchModel, format: BodyFormat, c: number): Promise<WrkResult> {
  const body =
    format === 'json'
      ? jsonBody(model.inputName, model.outputName, model.inputSize)
      : format === 'binary'
        ? binaryBody(model.inputName, model.outputName, model.inputSize)
        : binaryInJsonOutBody(model.inputName, model.outputName, model.inputSize);
  return runWrk(url, body, c, SECONDS);
}

/** The model's inference and execution counts from the metrics endpoint. */
async function scrapeCounts(
  metricsPort: number,
  modelName: string,
): Promise<{ inferences: number; executions: number } | undefined> {
  try {
    const text = await (await fetch(`http://127.0.0.1:${metricsPort}/metrics`)).text();
    const count = new RegExp(`^nv_inference_count\\{model="${modelName}",version="1"[^}]*\\} (\\S+)`, 'm').exec(text);
    const exec = new RegExp(`^nv_inference_exec_count\\{model="${modelName}",version="1"[^}]*\\} (\\S+)`, 'm').exec(
      text,
    );
    if (!count || !exec) return undefined;
    return { inferences: Number(count[1]), executions: Number(exec[1]) };
  } catch {
    return undefined;
  }
}

/** Mean executed batch size between two scrapes. */
function meanBatchBetween(
  before: { inferences: number; executions: number } | undefined,
  after: { inferences: number; executions: number } | undefined,
): number | undefined {
  if (!before || !after || after.executions === before.executions) return undefined;
  return (after.inferences - before.inferences) / (after.executions - before.executions);
}

async function httpSection(models: BenchModel[]): Promise<void> {
  const conc = (process.env.BENCH_CONCURRENCY ?? '1,8,32').split(',').map(Number);
  // bin→json: binary input, the output asked back as JSON (the float-to-text encoding's cost).
  const formats = (process.env.BENCH_FORMATS ?? 'binary,json,bin→json').split(',') as BodyFormat[];
  for (const model of models) {
    const nereid = await startNereid(model.repository, []);
    const naive = await startNaive(model.onnxFile);
    const rows: string[][] = [];
    try {
      for (const format of formats) {
        for (const c of conc) {
          const n = await measure(
            `http://127.0.0.1:${nereid.http}/v2/models/${model.plainName}/infer`,
            model,
            format,
            c,
          );
          const b = await measure(`http://127.0.0.1:${naive.port}/`, model, format, c);
          rows.push([
            format,
            String(c),
            fmt(n.requestsPerSec),
            fmt(n.p50us),
            fmt(n.p99us),
            fmt(b.requestsPerSec),
            fmt(b.p50us),
            fmt(b.p99us),
            fmt(n.requestsPerSec / b.requestsPerSec, 2),
            fmt(n.p50us - b.p50us),
            String(n.errors + n.non2xx + b.errors + b.non2xx),
          ]);
        }
      }
    } finally {
      await nereid.proc.stop();
      await naive.proc.stop();
    }
    printTable(
      `${model.label}: Nereid (default scheduler) vs naive node:http + ` +
      `onnxruntime wrapper, batch 1 per request, wrk -t1, ${SECONDS}s per point`,
      ['body', 'conc', 'nereid/s', 'p50us', 'p99us', 'naive/s', 'p50us', 'p99us', 'ratio', 'Δp50us', 'errors'],
      rows,
    );
    const ceil = ceiling(model, [1, 8, 32, 64], 1);
    printTable(
      `${model.label}: in-process onnxruntime ceiling (1 intra-op thread, no spinning)`,
      ['batch', 'infer/s'],
      [...ceil].map(([b, v]) => [String(b), fmt(v)]),
    );
  }
}

async function batchingSection(models: BenchModel[]): Promise<void> {
  const conc = (process.env.BENCH_CONCURRENCY ?? '1,8,32,64').split(',').map(Number);
  const formats = (process.env.BENCH_FORMATS ?? 'binary,json,bin→json').split(',') as BodyFormat[];
  for (const model of models) {
    const ceil = ceiling(model, [1, 8, 32, 64], 1);
    const best = Math.max(...ceil.values());
    const nereid = await startNereid(model.repository, []);
    const naive = await startNaive(model.onnxFile);
    const rows: string[][] = [];
    try {
      for (const format of formats) {
        for (const c of conc) {
          const before = await scrapeCounts(nereid.metrics, model.batchedName);
          const d = await measure(
            `http://127.0.0.1:${nereid.http}/v2/models/${model.batchedName}/infer`,
            model,
            format,
            c,
          );
          const meanBatch = meanBatchBetween(before, await scrapeCounts(nereid.metrics, model.batchedName));
          const p = await measure(
            `http://127.0.0.1:${nereid.http}/v2/models/${model.plainName}/infer`,
            model,
            format,
            c,
          );
          const b = await measure(`http://127.0.0.1:${naive.port}/`, model, format, c);
          rows.push([
            format,
            String(c),
            fmt(d.requestsPerSec),
            fmt(d.p50us),
            fmt(d.p99us),
            meanBatch === undefined ? '-' : fmt(meanBatch, 1),
            fmt(p.requestsPerSec),
            fmt(b.requestsPerSec),
            fmt(b.p50us),
            fmt(d.requestsPerSec / b.requestsPerSec, 2),
            fmt(d.requestsPerSec / best, 2),
            String(d.errors + d.non2xx + p.errors + p.non2xx + b.errors + b.non2xx),
          ]);
        }
      }
    } finally {
      await nereid.proc.stop();
      await naive.proc.stop();
    }
    printTable(
      `${model.label}: dynamic batching vs default scheduler vs naive ` +
      `wrapper; ceiling = best in-process batch (${fmt(best)} infer/s)`,
      [
        'body',
        'conc',
        'batched/s',
        'p50us',
        'p99us',
        'meanBatch*',
        'unbatched/s',
        'naive/s',
        'naive p50',
        'x naive',
        'x ceiling',
        'errors',
      ],
      rows,
    );
    process.stdout.write(
      '* mean executed batch size during the point, from the metrics ' +
      '(nv_inference_count / nv_inference_exec_count, differences)\n',
    );
  }
}

/**
 * gRPC against HTTP binary on one Nereid process, 32 requests in flight, both schedulers,
 * alternated rounds with main-thread CPU per call and the transport floors (bench/grpc-http.ts);
 * then the h2load ceiling table (bench/grpc.ts).
 */
async function grpcVsHttpSection(models: BenchModel[]): Promise<void> {
  await grpcVsHttp(models, grpcHttpOptionsFromEnv());
  await grpcSection(models, SECONDS, [
    [1, 1],
    [4, 8],
  ]);
}

function runScript(script: string, args: string[] = []): void {
  spawnSync(process.execPath, [path.join(DIST, 'bench', script), ...args], { stdio: 'inherit' });
}

const onlyModels = process.env.BENCH_MODELS?.split(',');
const models = (await buildBenchModels()).filter((m) => !onlyModels || onlyModels.some((o) => m.plainName.includes(o)));
if (want('http')) await httpSection(models);
if (want('batching')) await batchingSection(models);
if (want('grpc')) await grpcVsHttpSection(models);
if (want('python')) runScript('python.js');
if (want('loadtool')) runScript('load-tool.js');
if (want('javascript')) runScript('javascript.js');
if (want('stream')) runScript('stream.js');
if (want('cache')) runScript('cache.js');
if (want('shm')) runScript('shm.js');
if (want('sequence')) runScript('sequence.js');
if (want('ensemble')) runScript('ensemble.js');
if (want('lifecycle')) runScript('lifecycle.js');
if (want('cloud')) runScript('cloud.js');
if (want('overload')) runScript('overload.js');
if (want('overloadmodel')) runScript('overload-model.js');
if (want('json')) runScript('json.js');
if (want('hostile')) runScript('hostile.js');
if (want('cost')) runScript('request-cost.js');
if (want('inline')) runScript('inline.js');
if (want('grpclibs')) runScript('grpc-libs.js');
if (want('jsontext')) runScript('json-text.js');
if (want('medium')) runScript('medium.js');
if (want('malloc')) runScript('malloc.js');
if (want('auth')) runScript('auth.js');
if (want('openai')) runScript('openai.js');
if (want('float32json')) runScript('float32-json.js');
if (want('client')) runScript('client.js');
if (want('dashboard')) runScript('dashboard.js');
if (want('trace')) runScript('trace.js');
if (want('aa')) runScript('aa.js');
if (want('tracepath')) runScript('trace-path.js');
if (want('otlpserialize')) runScript('otlp-serialize.js');
if (want('paging')) runScript('paging.js');
if (want('paging-memory')) runScript('paging-memory.js');
if (want('paging-rules')) runScript('paging-rules.js');
if (want('ab')) runScript('ab.js');
if (want('adaptive')) runScript('adaptive.js');
if (want('frontends')) runScript('frontends.js');
if (want('crossing')) runScript('crossing.js');
