/**
 * `node dist/bench/openai.js` (section `openai` of bench/run.ts): the cost of
 * the OpenAI layer on one Nereid process serving the examples text_embedder
 * and tiny_llm, each variant against its /v2 counterpart in the same run,
 * alternated rounds, medians.
 *
 * (a) /v1/embeddings with 16 short texts per request (tokenizing, pooling and
 *     JSON included) against /v2/models/text_embedder/infer in binary with the
 *     same tokens, concurrency 8 (wrk). Bar: >= 0.7x the /v2 throughput. The
 *     requests take turns among BODIES sets of 16 texts drawn from SENTENCES
 *     seeded sentences, the same sets both ways, so answers vary as a real
 *     client's do.
 * (b) time to first token, one request at a time: /v1/chat/completions
 *     streamed against /v2/models/tiny_llm/generate_stream with the prompt
 *     the chat template renders. Bar: p50 within 150 us.
 * (c) streamed tokens per second at concurrency 32 over /v1/chat/completions
 *     (and generate_stream beside it).
 * The layer alone: (a)'s /v1/embeddings work in this process, from the body's
 * bytes to the answer's, with the model call answered by a canned output:
 * microseconds of this thread's CPU per request, which a busy machine
 * inflates far less than it does throughput.
 *
 * Environment: BENCH_SECONDS (per round, default 5), BENCH_OPENAI_ROUNDS (default 3),
 * BENCH_OPENAI_TTFT (requests per round for (b), default 300), BENCH_OPENAI_PARTS (the parts to run, e.g.
 * "a" or "a,layer"; default all of a, layer, b, c), BENCH_OPENAI_PROFILE=n (the server runs under V8's CPU
 * profiler: its main thread's self time per request in (a), floats against /v2, the n largest differences).
 */
import { cpSync, mkdtempSync, readFileSync, readdirSync, rmSync } from 'node:fs';
import http, { type ServerResponse } from 'node:http';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { Tokenizer } from '@huggingface/tokenizers';
import type { ServerApi } from '../src/core/server-api.js';
import type { ModelConfig } from '../src/gen/model_config_pb.js';
import { EmbeddingsEndpoint } from '../src/frontends/openai/embeddings.js';
import { ModelTexts } from '../src/frontends/openai/model-text.js';
import { parseJsonBytes } from '../src/frontends/http/json-parse.js';
import type { InferRequest } from '../src/types/api.js';
import { seededRandom } from '../test/helpers/random.js';
import { cpuSeconds, startNereid } from './processes.js';
import { type Window, diffRows, monotonicUs, selfTimes } from './profile-diff.js';
import { type HttpBody, runWrk, type WrkResult } from './wrk.js';

const SECONDS = Number(process.env.BENCH_SECONDS ?? 5);
const ROUNDS = Number(process.env.BENCH_OPENAI_ROUNDS ?? 3);
const TTFT_REQUESTS = Number(process.env.BENCH_OPENAI_TTFT ?? 300);
const PARTS = new Set((process.env.BENCH_OPENAI_PARTS ?? 'a,layer,b,c').split(',').map((x) => x.trim()));
const PROFILE_TOP = Number(process.env.BENCH_OPENAI_PROFILE ?? 0);
const EXAMPLES = path.resolve(
  path.dirname(new URL(import.meta.url).pathname),
  '..',
  '..',
  'examples',
  'model_repository',
);

/** Distinct short sentences, and the request bodies (each 16 of them) that take turns in (a). */
const SENTENCES = 256;
const BODIES = 64;
const PER_REQUEST = 16;

function tokenizerOf(dir: string): Tokenizer {
  return new Tokenizer(
    JSON.parse(readFileSync(path.join(dir, 'tokenizer.json'), 'utf8')),
    JSON.parse(readFileSync(path.join(dir, 'tokenizer_config.json'), 'utf8')),
  );
}

/** BODIES lists of PER_REQUEST texts from SENTENCES sentences of 6 to 10 of the tokenizer's whole words, seeded. */
function requestTexts(): string[][] {
  const vocab = JSON.parse(readFileSync(path.join(EXAMPLES, 'text_embedder', 'tokenizer.json'), 'utf8')) as {
    model: { vocab: Record<string, number> };
  };
  const words = Object.keys(vocab.model.vocab).filter((w) => /^[a-z]{2,}$/.test(w));
  const random = seededRandom(0x5eed0023);
  const pick = <T>(xs: readonly T[]): T => xs[Math.floor(random() * xs.length)]!;
  const sentences = Array.from({ length: SENTENCES }, () =>
    Array.from({ length: 6 + Math.floor(random() * 5) }, () => pick(words)).join(' '),
  );
  return Array.from({ length: BODIES }, () => Array.from({ length: PER_REQUEST }, () => pick(sentences)));
}

const TEXTS = requestTexts();

const median = (xs: number[]): number => {
  const s = [...xs].sort((a, b) => a - b);
  return s.length === 0 ? NaN : s.length % 2 ? s[(s.length - 1) / 2]! : (s[s.length / 2 - 1]! + s[s.length / 2]!) / 2;
};
const fmt = (n: number, digits = 0) =>
  n.toLocaleString('en-US', { maximumFractionDigits: digits, minimumFractionDigits: digits });

/** The /v2 binary body holding the tokens /v1/embeddings makes of `texts` (padded to the longest, as it pads). */
function v2EmbeddingBody(tokenizer: Tokenizer, texts: readonly string[]): HttpBody {
  const ids = texts.map((t) => tokenizer.encode(t).ids);
  const seq = Math.max(...ids.map((x) => x.length));
  const rows = ids.length;
  const tensor = (fill: (row: number[], s: number) => number) => {
    const a = new BigInt64Array(rows * seq);
    ids.forEach((row, r) => {
      for (let s = 0; s < seq; s++) a[r * seq + s] = BigInt(s < row.length ? fill(row, s) : 0);
    });
    return Buffer.from(a.buffer);
  };
  const parts = [tensor((row, s) => row[s]!), tensor(() => 1), tensor(() => 0)];
  const input = (name: string, b: Buffer) => ({
    name,
    datatype: 'INT64',
    shape: [rows, seq],
    parameters: { binary_data_size: b.byteLength },
  });
  const header = Buffer.from(
    JSON.stringify({
      inputs: [input('input_ids', parts[0]!), input('attention_mask', parts[1]!), input('token_type_ids', parts[2]!)],
      outputs: [{ name: 'last_hidden_state', parameters: { binary_data: true } }],
    }),
  );
  return {
    body: Buffer.concat([header, ...parts]),
    headers: {
      'Content-Type': 'application/octet-stream',
      'Inference-Header-Content-Length': String(header.byteLength),
    },
  };
}

/** Time from sending a streamed request to its first event carrying a token, in microseconds. */
function firstTokenUs(agent: http.Agent, port: number, pathName: string, body: string): Promise<number> {
  return new Promise((resolve, reject) => {
    const start = process.hrtime.bigint();
    const options = { host: '127.0.0.1', port, path: pathName, method: 'POST', agent };
    const headers = { 'content-type': 'application/json' };
    const req = http.request({ ...options, headers }, (res) => {
      let seen = false;
      let buf = '';
      res.setEncoding('utf8');
      res.on('data', (d: string) => {
        if (seen) return;
        buf += d;
        // The chat stream's first event is the role; a token event has "content" or "text_output".
        if (/"content":"[^"]|"text_output":/.test(buf)) {
          seen = true;
          resolve(Number(process.hrtime.bigint() - start) / 1000);
        }
      });
      res.on('end', () => (seen ? undefined : reject(new Error(`no token in ${buf.slice(0, 200)}`))));
    });
    req.on('error', reject);
    req.end(body);
  });
}

/** Streams for `seconds` with `concurrency` clients; returns tokens (events with text) per second. */
async function tokensPerSecond(
  port: number,
  pathName: string,
  body: string,
  concurrency: number,
  seconds: number,
): Promise<number> {
  const agent = new http.Agent({ keepAlive: true, maxSockets: concurrency });
  const end = Date.now() + seconds * 1000;
  let tokens = 0;
  const one = () =>
    new Promise<void>((resolve, reject) => {
      const options = { host: '127.0.0.1', port, path: pathName, method: 'POST', agent };
      const headers = { 'content-type': 'application/json' };
      const req = http.request({ ...options, headers }, (res) => {
        let rest = '';
        res.setEncoding('utf8');
        res.on('data', (d: string) => {
          const text = rest + d;
          const events = text.split('\n\n');
          rest = events.pop()!;
          for (const e of events) if (e.includes('"content":"') || e.includes('"text_output":')) tokens++;
        });
        res.on('end', () => resolve());
      });
      req.on('error', reject);
      req.end(body);
    });
  const start = process.hrtime.bigint();
  await Promise.all(
    Array.from({ length: concurrency }, async () => {
      while (Date.now() < end) await one();
    }),
  );
  agent.destroy();
  return tokens / (Number(process.hrtime.bigint() - start) / 1e9);
}

/** Thread CPU (process CPU where Node has no per-thread figure) in microseconds. */
const threadCpuUsage = (process as { threadCpuUsage?: () => NodeJS.CpuUsage }).threadCpuUsage;
const cpuUs = (): number => {
  const u = threadCpuUsage?.call(process) ?? process.cpuUsage();
  return u.user + u.system;
};

/**
 * Microseconds of thread CPU per /v1/embeddings request over 20,000 of them (the bodies of (a) taking turns), the
 * model call stubbed out.
 * With `variants` > 1 the stub's canned outputs take turns, so the vectors differ from request to
 * request as a real client's do (the same 512 floats again and again are served by the engine's
 * number-to-string cache).
 */
async function layerCost(format: 'float' | 'base64', variants = 1): Promise<number> {
  const dir = path.join(EXAMPLES, 'text_embedder');
  const int64 = (name: string) => ({ name, datatype: 'INT64', shape: [-1, -1] });
  const names = ['input_ids', 'attention_mask', 'token_type_ids'];
  const metadata = {
    name: 'text_embedder',
    versions: ['1'],
    platform: 'onnxruntime_onnx',
    inputs: names.map(int64),
    outputs: [{ name: 'last_hidden_state', datatype: 'FP32', shape: [-1, -1, 32] }],
  };
  const config = { maxBatchSize: 64, input: names.map((name) => ({ name })), parameters: {} } as unknown as ModelConfig;
  const outputs = new Map<string, Uint8Array>();
  let call = 0;
  const server = {
    modelConfig: () => config,
    modelMetadata: () => metadata,
    modelDirectory: () => dir,
    admissionError: () => undefined,
    infer: (r: InferRequest) => {
      const [rows, seq] = r.inputs[0]!.shape as number[];
      const variant = call++ % variants;
      let data = outputs.get(`${rows}x${seq}/${variant}`);
      if (data === undefined) {
        const f = Float32Array.from({ length: rows! * seq! * 32 }, (_, i) => Math.sin(i * 0.37 + variant) + 0.1);
        data = new Uint8Array(f.buffer);
        outputs.set(`${rows}x${seq}/${variant}`, data);
      }
      const out = { name: 'last_hidden_state', datatype: 'FP32', shape: [rows, seq, 32], data };
      return Promise.resolve({ model_name: 'text_embedder', model_version: '1', outputs: [out] });
    },
  } as unknown as ServerApi;
  const texts = new ModelTexts(undefined);
  const endpoint = new EmbeddingsEndpoint({ server, texts, timings: undefined, maxInputSize: 1 << 26 });
  const bodies = TEXTS.map((input) =>
    Buffer.from(JSON.stringify({ model: 'text_embedder', input, encoding_format: format })),
  );
  let written = 0;
  const res = {
    destroyed: false,
    writableFinished: true,
    on: () => res,
    writeHead: () => res,
    // A string is turned into bytes on its way to the socket.
    end: (b: string | Buffer, encoding?: BufferEncoding) =>
      (written += typeof b === 'string' ? Buffer.byteLength(b, encoding) : b.byteLength),
  } as unknown as ServerResponse;
  let turn = 0;
  const one = () =>
    endpoint.handle(res, parseJsonBytes(bodies[turn++ % bodies.length]!) as Record<string, unknown>);
  for (let i = 0; i < 3000; i++) await one();
  // One span: the thread's CPU clock ticks in milliseconds, which short blocks would round to 20 µs a request.
  const requests = 20000;
  const start = cpuUs();
  for (let i = 0; i < requests; i++) await one();
  const perRequest = (cpuUs() - start) / requests;
  if (written === 0) throw new Error('no answer written');
  return perRequest;
}

async function main(): Promise<void> {
  const repo = mkdtempSync(path.join(tmpdir(), 'nereid-bench-openai-'));
  for (const m of ['text_embedder', 'tiny_llm'])
    cpSync(path.join(EXAMPLES, m), path.join(repo, m), { recursive: true });
  const profDir = PROFILE_TOP > 0 ? mkdtempSync(path.join(tmpdir(), 'nereid-bench-openai-prof-')) : undefined;
  const nodeArgs = profDir === undefined ? [] : ['--cpu-prof', `--cpu-prof-dir=${profDir}`, '--cpu-prof-interval=100'];
  const server = await startNereid(repo, ['--allow-grpc=false', '--allow-metrics=false'], { nodeArgs });
  const port = server.http;
  /** BENCH_OPENAI_PROFILE: per variant of (a), the windows its rounds ran in and the requests served in them. */
  const profiled = new Map<WrkResult[], { windows: Window[]; requests: number }>();
  try {
    if (PARTS.has('a')) {
      // (a) embeddings
      const json = (format: string) => {
        const [first, ...more] = TEXTS.map((input) =>
          Buffer.from(JSON.stringify({ model: 'text_embedder', input, encoding_format: format })),
        );
        const headers = { 'Content-Type': 'application/json' };
        return { body: first!, headers, more: more.map((body) => ({ body, headers })) };
      };
      const v1 = json('float');
      // What the official openai client sends by default (it decodes the base64 itself).
      const v1b64 = json('base64');
      const tokenizer = tokenizerOf(path.join(EXAMPLES, 'text_embedder'));
      const [first, ...more] = TEXTS.map((texts) => v2EmbeddingBody(tokenizer, texts));
      const v2 = { ...first!, more };
      const v1Url = `http://127.0.0.1:${port}/v1/embeddings`;
      const v2Url = `http://127.0.0.1:${port}/v2/models/text_embedder/infer`;
      // Every body must be answered (a refused one would be counted as fast service).
      for (const [url, req] of [
        [v1Url, v1],
        [v1Url, v1b64],
        [v2Url, v2],
      ] as const) {
        for (const r of [req, ...req.more]) {
          const answer = await fetch(url, { method: 'POST', headers: r.headers, body: r.body });
          if (answer.status !== 200) throw new Error(`${url} answered ${answer.status}: ${await answer.text()}`);
          await answer.arrayBuffer().catch(() => undefined);
        }
    }
    await runWrk(v1Url, v1, 8, 1);
    await runWrk(v2Url, v2, 8, 1);
    const pid = server.proc.child.pid!;
    /** A round, with the server's main-thread CPU per request (µs) in `mainUs`. */
    const round = async (url: string, req: HttpBody, into: WrkResult[], mainUs: number[]) => {
      const before = cpuSeconds(pid, pid);
      const fromUs = monotonicUs();
      const w = await runWrk(url, req, 8, SECONDS);
      const toUs = monotonicUs();
      mainUs.push(((cpuSeconds(pid, pid) - before) * 1e6) / Math.max(1, w.requests));
      into.push(w);
      const p = profiled.get(into) ?? { windows: [], requests: 0 };
      p.windows.push({ fromUs, toUs });
      p.requests += w.requests;
      profiled.set(into, p);
    };
    const m1: number[] = [];
    const m1b: number[] = [];
    const m2: number[] = [];
    const a1: WrkResult[] = [];
    const a1b: WrkResult[] = [];
    const a2: WrkResult[] = [];
    for (let r = 0; r < ROUNDS; r++) {
      await round(v1Url, v1, a1, m1);
      await round(v1Url, v1b64, a1b, m1b);
      await round(v2Url, v2, a2, m2);
    }
    const errors = [...a1, ...a1b, ...a2].reduce((n, w) => n + w.errors + w.non2xx, 0);
    const rps = (ws: WrkResult[]) => median(ws.map((w) => w.requestsPerSec));
    const line = (label: string, ws: WrkResult[], mainUs: number[]) =>
      `  ${label.padEnd(40)}${fmt(rps(ws)).padStart(7)} req/s (${fmt(rps(ws) * 16)} ` +
      `texts/s)  p50 ${fmt(median(ws.map((w) => w.p50us)))} us  main thread ${fmt(median(mainUs))} us/req` +
      `${ws.some((w) => w.errors + w.non2xx > 0) ? `  errors ${ws.map((w) => w.errors + w.non2xx).join(' ')}` : ''}\n`;
    process.stdout.write(
      `\n(a) embeddings, 16 texts per request, concurrency 8, ${ROUNDS} alternated rounds of ${SECONDS}s (medians)\n` +
        line('/v1/embeddings, floats in JSON', a1, m1) +
        line('/v1/embeddings, base64 (client default)', a1b, m1b) +
        line('/v2 infer, binary, same tokens', a2, m2) +
        `  ratio v1/v2: floats ${fmt(rps(a1) / rps(a2), 2)}x, base64 ` +
        `${fmt(rps(a1b) / rps(a2), 2)}x (bar >= 0.7)   errors: ${errors}\n`,
    );
    if (profDir !== undefined) {
      const floats = profiled.get(a1)!;
      const binary = profiled.get(a2)!;
      profileDiff = (file) =>
        diffRows(selfTimes(file, binary.windows), binary.requests, selfTimes(file, floats.windows), floats.requests,
          PROFILE_TOP);
    }
    }
    if (PARTS.has('layer')) {
      const layer = { float: [] as number[], fresh: [] as number[], base64: [] as number[] };
      for (let r = 0; r < ROUNDS; r++) {
        layer.float.push(await layerCost('float'));
        layer.fresh.push(await layerCost('float', 64));
        layer.base64.push(await layerCost('base64'));
    }
    process.stdout.write(
      `  the layer alone (body bytes to answer, model stubbed), thread CPU per request: ` +
        `floats ${fmt(median(layer.float), 1)} us (vectors differing per request ` +
        `${fmt(median(layer.fresh), 1)} us), base64 ${fmt(median(layer.base64), 1)} us\n`,
    );

    }
    if (PARTS.has('b')) {
      // (b) time to first token
      const messages = [{ role: 'user', content: 'tell me about the fast model server and its tokens' }];
      const prompt = `<|user|>\n${messages[0]!.content}<|end|>\n<|assistant|>\n`;
      const chatBody = JSON.stringify({ model: 'tiny_llm', messages, stream: true, max_tokens: 16 });
      const genBody = JSON.stringify({ text_input: prompt, stream: true, max_tokens: 16 });
      const agent = new http.Agent({ keepAlive: true, maxSockets: 1 });
      for (let i = 0; i < 50; i++) {
        await firstTokenUs(agent, port, '/v1/chat/completions', chatBody);
        await firstTokenUs(agent, port, '/v2/models/tiny_llm/generate_stream', genBody);
    }
    const t1: number[] = [];
    const t2: number[] = [];
    for (let r = 0; r < ROUNDS; r++) {
      for (let i = 0; i < TTFT_REQUESTS; i++) {
        t1.push(await firstTokenUs(agent, port, '/v1/chat/completions', chatBody));
        t2.push(await firstTokenUs(agent, port, '/v2/models/tiny_llm/generate_stream', genBody));
      }
    }
    agent.destroy();
    const p50a = median(t1);
    const p50b = median(t2);
    process.stdout.write(
      `\n(b) time to first token, one request at a time, ${ROUNDS * TTFT_REQUESTS} alternated requests each\n` +
        `  /v1/chat/completions stream     p50 ${fmt(p50a)} us\n` +
        `  /v2 generate_stream             p50 ${fmt(p50b)} us\n` +
        `  difference: ${fmt(p50a - p50b)} us (bar <= 150)\n`,
    );

    }
    if (PARTS.has('c')) {
      // (c) streamed tokens per second at concurrency 32
      const words = Array.from({ length: 64 }, (_, i) => `w${i}`).join(' ');
      const chat64 = JSON.stringify({
        model: 'tiny_llm',
        messages: [{ role: 'user', content: words }],
        stream: true,
        max_tokens: 64,
      });
      const gen64 = JSON.stringify({
        text_input: `<|user|>\n${words}<|end|>\n<|assistant|>\n`,
        stream: true,
        max_tokens: 64,
      });
      const c1: number[] = [];
      const c2: number[] = [];
      for (let r = 0; r < ROUNDS; r++) {
        c1.push(await tokensPerSecond(port, '/v1/chat/completions', chat64, 32, SECONDS));
        c2.push(await tokensPerSecond(port, '/v2/models/tiny_llm/generate_stream', gen64, 32, SECONDS));
    }
    process.stdout.write(
      `\n(c) streamed tokens per second, concurrency 32, 64 tokens ` +
      `per answer, ${ROUNDS} alternated rounds (medians)\n` +
        `  /v1/chat/completions stream     ${fmt(median(c1))} tokens/s\n` +
        `  /v2 generate_stream             ${fmt(median(c2))} tokens/s\n` +
        `  ratio v1/v2: ${fmt(median(c1) / median(c2), 2)}x\n`,
    );
    }
  } finally {
    await server.proc.stop();
    rmSync(repo, { recursive: true, force: true });
  }
  if (profDir !== undefined) {
    // The main thread's profile: the file with the lowest thread number (CPU.date.time.pid.tid.seq).
    const files = readdirSync(profDir)
      .filter((f) => f.endsWith('.cpuprofile'))
      .sort((a, b) => Number(a.split('.')[4]) - Number(b.split('.')[4]));
    if (profileDiff !== undefined && files.length > 0) {
      const rows = profileDiff(path.join(profDir, files[0]!));
      const widths = [0, 1, 2, 3].map((i) => Math.max(...rows.map((r) => r[i]!.length), 8));
      const row = (r: readonly string[]) =>
        `${r[0]!.padEnd(widths[0]!)}  ${r.slice(1).map((x, i) => x.padStart(widths[i + 1]!)).join('  ')}\n`;
      process.stdout.write(
        `\n(a) main-thread self time, us per request (profiler on): /v2 binary against /v1 floats\n` +
          row(['function', '/v2', '/v1', '/v1-/v2']) +
          rows.map(row).join(''),
      );
    }
    rmSync(profDir, { recursive: true, force: true });
  }
}

/** BENCH_OPENAI_PROFILE: the rows of (a)'s profile diff, from the main thread's profile file. */
let profileDiff: ((file: string) => string[][]) | undefined;

await main();
