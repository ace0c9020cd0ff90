/**
 * Frontend threads (--frontend-threads): a thread that dies is restarted while the others serve, HTTP and gRPC
 * infer are served on a thread, cancellation crosses from a thread to the server, and a Node without reusePort
 * serves on one thread, saying so once.
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import http from 'node:http';
import { credentials, makeGenericClientConstructor } from '@grpc/grpc-js';
import { HttpFrontend } from '../../../src/frontends/http/index.js';
import { create, toBinary } from '@bufbuild/protobuf';
import {
  GrpcFrontend,
  healthServiceDefinition,
  inferenceServiceDefinition,
} from '../../../src/frontends/grpc/index.js';
import {
  ModelInferRequestSchema,
  type ModelInferRequest,
  type ModelInferResponse,
} from '../../../src/gen/grpc_service_pb.js';
import {
  FrontendBridge,
  FrontendThreadPool,
  resetReusePortWarning,
} from '../../../src/frontends/threads/index.js';
import { silentLogger } from '../../../src/logger.js';
import type { ServerApi } from '../../../src/core/server-api.js';
import { budgetFrontendThreads, buildServeConfig } from '../../../src/cli/serve.js';
import { EchoServer } from '../http/echo-server.js';
import { call, json } from '../http/helpers.js';
import { recordingLogger } from '../../helpers/recording-logger.js';
import { callError, unary } from '../grpc/helpers.js';

const HealthClient = makeGenericClientConstructor(healthServiceDefinition, 'Health');
const InferenceClient = makeGenericClientConstructor(inferenceServiceDefinition, 'GRPCInferenceService');

const INPUTS = JSON.stringify({ inputs: [{ name: 'INPUT0', datatype: 'INT32', shape: [1], data: [7] }] });

/** One request on a connection of its own (the kernel spreads new connections over the threads). */
function inferOnce(port: number): Promise<number> {
  return call(port, 'POST', '/v2/models/echo/infer', { body: INPUTS, headers: { Connection: 'close' } }).then((r) => {
    assert.deepEqual((json(r) as { outputs: Array<{ data: number[] }> }).outputs[0]!.data, [7]);
    return r.status;
  });
}

describe('HTTP on two frontend threads', () => {
  let core: EchoServer;
  let fe: HttpFrontend;
  let port: number;
  before(async () => {
    core = new EchoServer();
    const options = { port: 0, address: '127.0.0.1', maxInputSize: 1 << 20, logger: silentLogger, threads: 2 };
    fe = new HttpFrontend(core, options);
    ({ port } = await fe.start());
  });
  after(() => fe.stop());

  test('requests are served on both threads, and reach the one server', async () => {
    assert.equal(fe.threads?.size, 2);
    for (let i = 0; i < 20; i++) assert.equal(await inferOnce(port), 200);
    assert.equal(core.lastRequest?.model, 'echo');
    // Everything else is forwarded whole to the main thread's frontend.
    const meta = await call(port, 'GET', '/v2/models/echo');
    assert.equal(meta.status, 200);
    assert.equal((json(meta) as { name: string }).name, 'echo');
  });

  test('a thread that dies is restarted; the other keeps serving meanwhile', async () => {
    const pool = fe.threads!;
    const [victim] = pool.workers();
    const exited = new Promise((resolve) => victim!.once('exit', resolve));
    await victim!.terminate();
    await exited;
    // Served by the surviving thread (or the restarted one) on every new connection.
    for (let i = 0; i < 10; i++) assert.equal(await inferOnce(port), 200);
    while (pool.workers().length < 2 || pool.restarts < 1) await new Promise((r) => setTimeout(r, 20));
    assert.equal(pool.restarts, 1);
    assert.ok(!pool.workers().includes(victim!));
    for (let i = 0; i < 10; i++) assert.equal(await inferOnce(port), 200);
  });

  test('a client that goes away cancels its request on the main thread', async () => {
    const req = http.request({ host: '127.0.0.1', port, method: 'POST', path: '/v2/models/hang/infer' });
    req.on('error', () => undefined);
    req.end(INPUTS);
    while (core.lastRequest?.model !== 'hang') await new Promise((r) => setTimeout(r, 5));
    req.destroy();
    await core.aborted;
    assert.equal(core.lastRequest.signal?.aborted, true);
  });
});

test('gRPC on two frontend threads: a thread that dies is restarted', async () => {
  const core = new EchoServer();
  const fe = new GrpcFrontend(core, { port: 0, address: '127.0.0.1', threads: 2 });
  const { port } = await fe.start();
  try {
    const live = async (): Promise<boolean> => {
      // A client of its own each time: a new connection, to whichever thread the kernel picks.
      const client = new HealthClient(`127.0.0.1:${port}`, credentials.createInsecure());
      try {
        const r = await unary<{ status: number }>(client, 'Check', { service: '' });
        return r.status === 1;
      } finally {
        client.close();
      }
    };
    assert.equal(await live(), true);
    const pool = fe.threads!;
    await pool.workers()[0]!.terminate();
    while (pool.workers().length < 2) await new Promise((r) => setTimeout(r, 20));
    assert.equal(pool.restarts, 1);
    for (let i = 0; i < 5; i++) assert.equal(await live(), true);
  } finally {
    await fe.stop();
  }
});

test('gRPC on two frontend threads: ModelInfer is served on a thread; the rest is forwarded', async () => {
  const core = new EchoServer();
  // The main thread's gRPC frontend asks for admission before every ModelInfer it serves itself.
  let askedOnMain = 0;
  const api: ServerApi = core;
  api.admissionError = () => void askedOnMain++;
  const fe = new GrpcFrontend(core, { port: 0, address: '127.0.0.1', threads: 2 });
  const { port } = await fe.start();
  const client = new InferenceClient(`127.0.0.1:${port}`, credentials.createInsecure());
  try {
    const request = (model: string, id: string) =>
      create(ModelInferRequestSchema, {
        modelName: model,
        id,
        inputs: [{ name: 'INPUT0', datatype: 'INT32', shape: [1n] }],
        rawInputContents: [new Uint8Array(new Int32Array([7]).buffer)],
      });
    const res = await unary<ModelInferResponse>(client, 'ModelInfer', request('echo', 'a'));
    assert.equal(res.id, 'a');
    assert.deepEqual(res.outputs.map((o) => [o.name, o.datatype, o.shape]), [['OUTPUT0', 'INT32', [1n]]]);
    assert.deepEqual([...new Int32Array(new Uint8Array(res.rawOutputContents[0]!).buffer)], [7]);
    assert.equal(core.lastRequest?.id, 'a');
    assert.equal(askedOnMain, 0);
    // A decoupled model is refused by the main thread's frontend, with Triton's words.
    const decoupled = await callError(unary(client, 'ModelInfer', request('decoupled', 'b')));
    assert.match(decoupled.details, /doesn't support models with decoupled transaction policy/);
    assert.equal(askedOnMain, 1);
    // A client that gives up cancels its request on the main thread.
    const hanging = client.makeUnaryRequest(
      inferenceServiceDefinition.ModelInfer!.path,
      (m: ModelInferRequest) => Buffer.from(toBinary(ModelInferRequestSchema, m)),
      (b: Buffer) => b,
      request('hang', 'c'),
      () => undefined,
    );
    while (core.lastRequest?.model !== 'hang') await new Promise((r) => setTimeout(r, 5));
    hanging.cancel();
    await core.aborted;
    assert.equal(core.lastRequest.signal?.aborted, true);
    assert.equal(askedOnMain, 1);
  } finally {
    client.close();
    await fe.stop();
  }
});

test('without reusePort both frontends serve on one thread, and the log says so once', async () => {
  resetReusePortWarning();
  const { logger, records } = recordingLogger();
  const core = new EchoServer();
  const noReusePort = (): boolean => false;
  const httpFe = new HttpFrontend(core, {
    port: 0,
    address: '127.0.0.1',
    maxInputSize: 1 << 20,
    logger,
    threads: 4,
    canReusePort: noReusePort,
  });
  const grpcOptions = { port: 0, address: '127.0.0.1', logger, threads: 4, canReusePort: noReusePort };
  const grpcFe = new GrpcFrontend(core, grpcOptions);
  try {
    const { port } = await httpFe.start();
    await grpcFe.start();
    assert.equal(httpFe.threads, undefined);
    assert.equal(grpcFe.threads, undefined);
    assert.equal(await inferOnce(port), 200);
    const said = records.filter((r) => String(r['msg']).includes('needs a Node.js with reusePort'));
    assert.equal(said.length, 1);
    assert.match(String(said[0]!['msg']), /--frontend-threads=4 .*serving HTTP and gRPC on one thread/);
  } finally {
    await Promise.all([httpFe.stop(), grpcFe.stop()]);
    resetReusePortWarning();
  }
});

test('--frontend-threads: a count or auto (half the CPU budget, 1 up to 3 cores, at most 8), the default', () => {
  const saved = process.env['NEREID_FRONTEND_THREADS'];
  delete process.env['NEREID_FRONTEND_THREADS'];
  try {
    assert.equal(buildServeConfig([]).frontendThreads, budgetFrontendThreads());
    assert.equal(buildServeConfig(['--frontend-threads=3']).frontendThreads, 3);
    assert.equal(buildServeConfig(['--frontend-threads=auto']).frontendThreads, budgetFrontendThreads());
    const rule = [1, 1.5, 2, 2.5, 3, 3.9, 4, 6, 16, 64].map((cores) => [cores, budgetFrontendThreads(cores)]);
    assert.deepEqual(rule, [[1, 1], [1.5, 1], [2, 1], [2.5, 1], [3, 1], [3.9, 1], [4, 2], [6, 3], [16, 8], [64, 8]]);
    for (const bad of ['0', '-2', 'two', '1.5']) {
      assert.throws(() => buildServeConfig([`--frontend-threads=${bad}`]), {
        message: `--frontend-threads must be auto or 1 or more, got '${bad}'`,
      });
    }
    process.env['NEREID_FRONTEND_THREADS'] = '2';
    assert.equal(buildServeConfig([]).frontendThreads, 2);
  } finally {
    if (saved === undefined) delete process.env['NEREID_FRONTEND_THREADS'];
    else process.env['NEREID_FRONTEND_THREADS'] = saved;
  }
});

test('a thread that cannot be created: start() fails with the reason, and stops without waiting for it', async () => {
  const bridge = new FrontendBridge(new EchoServer(), undefined);
  // A function cannot be copied to a thread: the Worker constructor throws before any thread takes the ports.
  const init = { kind: 'http', port: 0, address: '127.0.0.1', upstream: '', http: { notCopyable: () => 0 } };
  const pool = new FrontendThreadPool(init as never, 2, silentLogger, bridge);
  let timer: NodeJS.Timeout | undefined;
  const hung = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error('start() never settled: stop() waits for ports no thread took')), 10_000);
  });
  try {
    await assert.rejects(Promise.race([pool.start(), hung]), { name: 'DataCloneError' });
  } finally {
    clearTimeout(timer);
    bridge.close();
  }
});
