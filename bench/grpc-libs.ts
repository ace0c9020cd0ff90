/**
 * `node dist/bench/grpc-libs.js` (section `grpclibs` of bench/run.ts): the
 * gRPC library under Triton's GRPCInferenceService. One in-process Server
 * (the tiny MLP) behind two frontends: Nereid's own, on @grpc/grpc-js, and a
 * ModelInfer served by @connectrpc/connect-node (gRPC protocol, Node's
 * http2 server) with the same decoding and the response built as a
 * protobuf-es message, as connect serializes it. h2load drives unary
 * ModelInfer at concurrency 1 (-c1 -m1) and 32 (-c4 -m8), the two servers
 * alternated in rounds. Printed: calls/s, mean latency, and the main
 * thread's CPU per call (from /proc, over the calls the server counted).
 *
 * connect-node is pinned at 2.1.1, the last release that runs on Node 20.
 * Environment: BENCH_SECONDS (per point, default 2), BENCH_ROUNDS (default 3).
 */
import http2 from 'node:http2';
import { create } from '@bufbuild/protobuf';
import { type ConnectRouter } from '@connectrpc/connect';
import { connectNodeAdapter } from '@connectrpc/connect-node';
import { Cancellation } from '../src/types/cancellation.js';
import { Server } from '../src/core/server.js';
import { GrpcFrontend } from '../src/frontends/grpc/index.js';
import { decodeInfer } from '../src/frontends/grpc/infer-decode.js';
import { GRPCInferenceService, ModelInferResponseSchema } from '../src/gen/grpc_service_pb.js';
import { modelInferBody, runH2load } from './grpc.js';
import { buildBenchModels } from './models.js';
import { cpuSeconds } from './processes.js';

const SECONDS = Number(process.env.BENCH_SECONDS ?? 2);
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 3);

const tiny = (await buildBenchModels()).find((m) => m.plainName === 'mlp_tiny')!;
const server = new Server({ modelRepositories: [tiny.repository] });
await server.start();

const grpcjs = new GrpcFrontend(server, { port: 0, address: '127.0.0.1' });
const grpcjsPort = (await grpcjs.start()).port;

const routes = (router: ConnectRouter): void => {
  router.service(GRPCInferenceService, {
    async modelInfer(request, context) {
      const abort = new Cancellation();
      context.signal.addEventListener('abort', () => abort.abort(), { once: true });
      const decoded = decodeInfer(request, abort, undefined);
      const r = await server.infer(decoded.request);
      return create(ModelInferResponseSchema, {
        modelName: r.modelName,
        modelVersion: r.modelVersion,
        id: r.id,
        outputs: r.outputs.map((t) => ({ name: t.name, datatype: t.datatype, shape: t.shape.map(BigInt) })),
        rawOutputContents: r.outputs.map((t) => t.data),
      });
    },
  });
};
const h2 = http2.createServer(connectNodeAdapter({ routes, grpc: true, grpcWeb: false, connect: false }));
await new Promise<void>((resolve) => h2.listen(0, '127.0.0.1', resolve));
const connectPort = (h2.address() as { port: number }).port;

const inferCount = (): number => server.modelStatistics(tiny.plainName)[0]!.inference_stats.success.count;
const body = modelInferBody(tiny.plainName, tiny.inputName, tiny.outputName, tiny.inputSize);
const libraries: Array<[string, number]> = [
  ['@grpc/grpc-js', grpcjsPort],
  ['@connectrpc/connect-node', connectPort],
];
interface Point {
  rps: number;
  meanUs: number;
  cpuUs: number;
  failed: number;
}
const points = new Map<string, Point[]>();
try {
  for (const [clients, streams] of [
    [1, 1],
    [4, 8],
  ] as const) {
    for (let r = 0; r < ROUNDS; r++) {
      const order = r % 2 === 0 ? libraries : [...libraries].reverse();
      for (const [name, port] of order) {
        const [c0, n0] = [cpuSeconds(process.pid, process.pid), inferCount()];
        const h = await runH2load(port, body, clients, streams, SECONDS);
        const [c1, n1] = [cpuSeconds(process.pid, process.pid), inferCount()];
        const key = `${name}\u0000${clients * streams}`;
        if (!points.has(key)) points.set(key, []);
        points
          .get(key)!
          .push({
            rps: h.requestsPerSec,
            meanUs: h.meanUs,
            cpuUs: ((c1 - c0) * 1e6) / Math.max(1, n1 - n0),
            failed: h.failed,
          });
      }
    }
  }
} finally {
  await grpcjs.stop();
  h2.close();
  await server.stop();
}

const median = (xs: number[]): number => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
process.stdout.write(
  `\ngRPC library, unary ModelInfer on ${tiny.label} (one in-process Server), ` +
  `h2load -t1, ${SECONDS}s per point, ${ROUNDS} alternated rounds (medians)\n`,
);
process.stdout.write(
  `${'library'.padEnd(26)}${'conc'.padStart(5)}${'calls/s'.padStart(10)}` +
  `${'mean µs'.padStart(10)}${'main µs/call'.padStart(14)}${'failed'.padStart(8)}\n`,
);
for (const [key, pts] of points) {
  const [name, conc] = key.split('\u0000');
  process.stdout.write(
    `${name!.padEnd(26)}${conc!.padStart(5)}` +
      `${median(pts.map((p) => p.rps)).toFixed(0).padStart(10)}` +
      `${median(pts.map((p) => p.meanUs)).toFixed(0).padStart(10)}` +
      `${median(pts.map((p) => p.cpuUs)).toFixed(1).padStart(14)}` +
      `${String(pts.reduce((n, p) => n + p.failed, 0)).padStart(8)}\n`,
  );
}
process.exit(0);
