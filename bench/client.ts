/**
 * `npm run bench -- client`: nereid/client's cost over the code a user would
 * write by hand, on one `nereid serve` with the tiny MLP, 32 requests in flight.
 *
 * - HTTP: InferenceClient.infer (binary tensor extension) against a
 *   hand-written undici loop sending the same binary request bytes, built
 *   once, on the same kind of keep-alive pool, reading the answer's JSON
 *   header and a Float32Array view of the output.
 * - gRPC: InferenceClient.infer against a bare grpc-js stub
 *   (makeGenericClientConstructor with protobuf-es serializers) sending one
 *   ModelInferRequest message built once and decoding the response message.
 *
 * Each pair runs BENCH_ROUNDS rounds (default 4) of BENCH_SECONDS (default 3)
 * per variant; within a round the two variants take turns in slices of
 * BENCH_SLICE seconds (default 0.5, in the order ABBA...), so a drift in the
 * machine's load reaches both alike. Printed per variant: the median over
 * rounds of requests/s and of the load process's CPU per call; per pair the
 * median and range of each round's client/baseline ratio of requests/s, and
 * of the client's CPU per call over the baseline's. BENCH_PROTOCOLS ("http,grpc")
 * picks the pairs.
 */
import { create, fromBinary, toBinary } from '@bufbuild/protobuf';
import * as grpc from '@grpc/grpc-js';
import { Pool } from 'undici';
import { InferenceClient } from '../src/client/index.js';
import {
  ModelInferRequestSchema,
  ModelInferResponseSchema,
  type ModelInferRequest,
  type ModelInferResponse,
} from '../src/gen/grpc_service_pb.js';
import { buildBenchModels } from './models.js';
import { startNereid } from './processes.js';

const SECONDS = Number(process.env.BENCH_SECONDS ?? 3);
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 4);
const CONCURRENCY = Number(process.env.BENCH_CONCURRENCY ?? 32);
const SLICE = Number(process.env.BENCH_SLICE ?? 0.5);

interface Point {
  rps: number;
  cpuUs: number;
}

/** Calls, seconds and this process's CPU µs, added up over a round's slices. */
interface Tally {
  calls: number;
  seconds: number;
  cpuUs: number;
}

/** Runs `one` in CONCURRENCY closed loops for `seconds`, adding what it did to `tally`. */
async function closedLoops(one: () => Promise<void>, seconds: number, tally?: Tally): Promise<void> {
  let done = 0;
  const cpu0 = process.cpuUsage();
  const t0 = process.hrtime.bigint();
  const end = Date.now() + seconds * 1000;
  await Promise.all(Array.from({ length: CONCURRENCY }, async () => {
    while (Date.now() < end) {
      await one();
      done++;
    }
  }));
  if (tally === undefined) return;
  const cpu = process.cpuUsage(cpu0);
  tally.calls += done;
  tally.seconds += Number(process.hrtime.bigint() - t0) / 1e9;
  tally.cpuUs += cpu.user + cpu.system;
}

/** One round: both variants in turns of SLICE seconds (ABBA...), SECONDS each in all. */
async function round(a: () => Promise<void>, b: () => Promise<void>): Promise<[Point, Point]> {
  const ta: Tally = { calls: 0, seconds: 0, cpuUs: 0 };
  const tb: Tally = { calls: 0, seconds: 0, cpuUs: 0 };
  const slices = Math.max(1, Math.round(SECONDS / SLICE));
  for (let i = 0; i < slices; i++) {
    if (i % 2 === 0) {
      await closedLoops(a, SECONDS / slices, ta);
      await closedLoops(b, SECONDS / slices, tb);
    } else {
      await closedLoops(b, SECONDS / slices, tb);
      await closedLoops(a, SECONDS / slices, ta);
    }
  }
  const point = (t: Tally): Point => ({ rps: t.calls / t.seconds, cpuUs: t.cpuUs / t.calls });
  return [point(ta), point(tb)];
}

const median = (xs: number[]): number => {
  const s = [...xs].sort((a, b) => a - b);
  const m = s.length >> 1;
  return s.length % 2 ? s[m]! : (s[m - 1]! + s[m]!) / 2;
};
const fmt = (n: number, digits = 0) =>
  n.toLocaleString('en-US', { maximumFractionDigits: digits, minimumFractionDigits: digits });

const tiny = (await buildBenchModels()).find((m) => m.plainName === 'mlp_tiny')!;
const nereid = await startNereid(tiny.repository, []);
const values = Float32Array.from({ length: tiny.inputSize }, (_, i) => (i % 7) / 7);
const shape = [1, tiny.inputSize];

// HTTP: the hand-written loop's request, the bytes the client sends (JSON header, then the input's bytes).
const header = Buffer.from(
  JSON.stringify({
    inputs: [{ name: tiny.inputName, shape, datatype: 'FP32', parameters: { binary_data_size: values.byteLength } }],
    outputs: [{ name: tiny.outputName, parameters: { binary_data: true } }],
  }),
);
const httpBody = Buffer.concat([header, Buffer.from(values.buffer)]);
const httpHeaders = { 'inference-header-content-length': String(header.byteLength) };
const origin = `http://127.0.0.1:${nereid.http}`;
const path = `/v2/models/${tiny.plainName}/infer`;
const pool = new Pool(origin, { connections: null, pipelining: 1 });
const handHttp = async (): Promise<void> => {
  const res = await pool.request({ method: 'POST', path, body: httpBody, headers: httpHeaders });
  const bytes = Buffer.from(await res.body.arrayBuffer());
  if (res.statusCode !== 200) throw new Error(`HTTP ${res.statusCode}: ${bytes.toString()}`);
  const n = Number(res.headers['inference-header-content-length']);
  type Header = { outputs: Array<{ parameters: { binary_data_size: number } }> };
  const doc = JSON.parse(bytes.toString('utf8', 0, n)) as Header;
  const copy = new Uint8Array(doc.outputs[0]!.parameters.binary_data_size);
  copy.set(bytes.subarray(n, n + copy.byteLength));
  if (new Float32Array(copy.buffer).length !== 1) throw new Error('unexpected output');
};

const httpClient = new InferenceClient({ url: origin });
const request = {
  model: tiny.plainName,
  inputs: [{ name: tiny.inputName, datatype: 'FP32' as const, shape, data: values }],
  outputs: [{ name: tiny.outputName }],
};
const clientOne = (client: InferenceClient) => async (): Promise<void> => {
  const r = await client.infer(request);
  if ((r.outputs[0]!.data as Float32Array).length !== 1) throw new Error('unexpected output');
};

// gRPC: a bare stub with protobuf-es serializers and one message built once.
const Stub = grpc.makeGenericClientConstructor(
  {
    ModelInfer: {
      path: '/inference.GRPCInferenceService/ModelInfer',
      requestStream: false,
      responseStream: false,
      requestSerialize: (m: ModelInferRequest) => Buffer.from(toBinary(ModelInferRequestSchema, m)),
      requestDeserialize: (b: Buffer) => fromBinary(ModelInferRequestSchema, b),
      responseSerialize: (m: ModelInferResponse) => Buffer.from(toBinary(ModelInferResponseSchema, m)),
      responseDeserialize: (b: Buffer) => fromBinary(ModelInferResponseSchema, b),
    },
  },
  'GRPCInferenceService',
);
const stub = new Stub(`127.0.0.1:${nereid.grpc}`, grpc.credentials.createInsecure()) as unknown as grpc.Client & {
  ModelInfer(m: ModelInferRequest, cb: (err: grpc.ServiceError | null, res?: ModelInferResponse) => void): void;
};
const message = create(ModelInferRequestSchema, {
  modelName: tiny.plainName,
  inputs: [{ name: tiny.inputName, datatype: 'FP32', shape: shape.map(BigInt) }],
  outputs: [{ name: tiny.outputName }],
  rawInputContents: [new Uint8Array(values.buffer)],
});
const handGrpc = () =>
  new Promise<void>((resolve, reject) =>
    stub.ModelInfer(message, (err, res) => {
      if (err) return reject(err);
      const raw = res!.rawOutputContents[0]!;
      const copy = new Uint8Array(raw.byteLength);
      copy.set(raw);
      if (new Float32Array(copy.buffer).length !== 1) return reject(new Error('unexpected output'));
      resolve();
    }),
  );
const grpcClient = new InferenceClient({ url: `grpc://127.0.0.1:${nereid.grpc}` });

const PROTOCOLS = (process.env.BENCH_PROTOCOLS ?? 'http,grpc').toLowerCase().split(',');
type Pair = { protocol: string; baseline: [string, () => Promise<void>]; client: () => Promise<void> };
const pairs = ([
  { protocol: 'HTTP', baseline: ['hand-written undici loop', handHttp], client: clientOne(httpClient) },
  { protocol: 'gRPC', baseline: ['bare grpc-js stub', handGrpc], client: clientOne(grpcClient) },
] satisfies Pair[] as Pair[]).filter((p) => PROTOCOLS.includes(p.protocol.toLowerCase()));

try {
  const rows: string[][] = [];
  for (const pair of pairs) {
    const client: Point[] = [];
    const base: Point[] = [];
    const ratios: number[] = [];
    const cpuRatios: number[] = [];
    // A short warm-up so connections and JIT are in place before counting.
    await closedLoops(pair.client, 0.5);
    await closedLoops(pair.baseline[1], 0.5);
    for (let r = 0; r < ROUNDS; r++) {
      const [c, b] = await round(pair.client, pair.baseline[1]);
      client.push(c);
      base.push(b);
      ratios.push(c.rps / b.rps);
      cpuRatios.push(c.cpuUs / b.cpuUs);
    }
    const range = (xs: number[]) => `${fmt(Math.min(...xs), 3)}-${fmt(Math.max(...xs), 3)}`;
    rows.push([
      pair.protocol,
      pair.baseline[0],
      fmt(median(client.map((p) => p.rps))),
      fmt(median(client.map((p) => p.cpuUs)), 1),
      fmt(median(base.map((p) => p.rps))),
      fmt(median(base.map((p) => p.cpuUs)), 1),
      fmt(median(ratios), 3),
      range(ratios),
      fmt(median(cpuRatios), 3),
      range(cpuRatios),
    ]);
  }
  const head = [
    'protocol',
    'baseline',
    'client/s',
    'client CPU µs/call',
    'baseline/s',
    'baseline CPU µs/call',
    'ratio (median)',
    'ratio range',
    'CPU ratio (median)',
    'CPU ratio range',
  ];
  const widths = head.map((h, i) => Math.max(h.length, ...rows.map((r) => r[i]!.length)));
  const line = (cells: string[]) => cells.map((c, i) => c.padStart(widths[i]!)).join('  ');
  process.stdout.write(
    `\nnereid/client vs hand-written calls: ${tiny.label}, concurrency ${CONCURRENCY}, ` +
      `${ROUNDS} rounds of ${SECONDS}s per variant in alternated ${SLICE}s slices\n` +
      `${line(head)}\n${widths.map((w) => '-'.repeat(w)).join('  ')}\n${rows.map(line).join('\n')}\n` +
      'CPU µs/call: this load process (client side) only. ratio: client/baseline requests/s, per round; ' +
      'CPU ratio: client/baseline CPU per call, per round (below 1: the client costs less).\n',
  );
} finally {
  await Promise.all([httpClient.close(), grpcClient.close(), pool.close()]);
  stub.close();
  await nereid.proc.stop();
}
