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
 * Each pair runs in alternating rounds (BENCH_ROUNDS, default 4, of
 * BENCH_SECONDS, default 3, each); printed per variant: the median of
 * requests/s, the load process's CPU per request, and the median of each
 * round's client/baseline ratio (both measured in the same round).
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

interface Point {
  rps: number;
  cpuUs: number;
}

/** Runs `one` in CONCURRENCY closed loops for SECONDS; requests/s and this process's CPU per request. */
async function closedLoops(one: () => Promise<void>): Promise<Point> {
  // A short warm-up so connections and JIT are in place before counting.
  const warmEnd = Date.now() + 300;
  await Promise.all(Array.from({ length: CONCURRENCY }, async () => {
    while (Date.now() < warmEnd) await one();
  }));
  let done = 0;
  const cpu0 = process.cpuUsage();
  const t0 = process.hrtime.bigint();
  const end = Date.now() + SECONDS * 1000;
  await Promise.all(Array.from({ length: CONCURRENCY }, async () => {
    while (Date.now() < end) {
      await one();
      done++;
    }
  }));
  const seconds = Number(process.hrtime.bigint() - t0) / 1e9;
  const cpu = process.cpuUsage(cpu0);
  return { rps: done / seconds, cpuUs: (cpu.user + cpu.system) / done };
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

const pairs: Array<{ protocol: string; baseline: [string, () => Promise<void>]; client: () => Promise<void> }> = [
  { protocol: 'HTTP', baseline: ['hand-written undici loop', handHttp], client: clientOne(httpClient) },
  { protocol: 'gRPC', baseline: ['bare grpc-js stub', handGrpc], client: clientOne(grpcClient) },
];

try {
  const rows: string[][] = [];
  for (const pair of pairs) {
    const client: Point[] = [];
    const base: Point[] = [];
    const ratios: number[] = [];
    for (let r = 0; r < ROUNDS; r++) {
      // Alternate which variant goes first, so a drift in the machine's load favours neither.
      let c: Point;
      let b: Point;
      if (r % 2 === 0) {
        c = await closedLoops(pair.client);
        b = await closedLoops(pair.baseline[1]);
      } else {
        b = await closedLoops(pair.baseline[1]);
        c = await closedLoops(pair.client);
      }
      client.push(c);
      base.push(b);
      ratios.push(c.rps / b.rps);
    }
    rows.push([
      pair.protocol,
      pair.baseline[0],
      fmt(median(client.map((p) => p.rps))),
      fmt(median(client.map((p) => p.cpuUs)), 1),
      fmt(median(base.map((p) => p.rps))),
      fmt(median(base.map((p) => p.cpuUs)), 1),
      fmt(median(ratios), 3),
      `${fmt(Math.min(...ratios), 3)}-${fmt(Math.max(...ratios), 3)}`,
    ]);
  }
  const head = [
    'protocol',
    'baseline',
    'client/s',
    'client CPU µs/req',
    'baseline/s',
    'baseline CPU µs/req',
    'ratio (median)',
    'ratio range',
  ];
  const widths = head.map((h, i) => Math.max(h.length, ...rows.map((r) => r[i]!.length)));
  const line = (cells: string[]) => cells.map((c, i) => c.padStart(widths[i]!)).join('  ');
  process.stdout.write(
    `\nnereid/client vs hand-written calls: ${tiny.label}, concurrency ${CONCURRENCY}, ` +
      `${ROUNDS} alternated rounds of ${SECONDS}s\n` +
      `${line(head)}\n${widths.map((w) => '-'.repeat(w)).join('  ')}\n${rows.map(line).join('\n')}\n` +
      'CPU µs/req: this load process (client side) only; the ratio is client/baseline requests/s, per round.\n',
  );
} finally {
  await Promise.all([httpClient.close(), grpcClient.close(), pool.close()]);
  stub.close();
  await nereid.proc.stop();
}
