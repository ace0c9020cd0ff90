/**
 * Tracing with HTTP frontend threads: at rate=N the threads pick every N-th infer request and only those carry what
 * tracing needs; with a setting the threads cannot count for (a model's own) every request carries it and the main
 * thread decides. Either way the threads serve them, with the request log on too. gRPC ModelInfer likewise.
 */
import { after, before, test } from 'node:test';
import { Writable } from 'node:stream';
import { pino } from 'pino';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { credentials, makeGenericClientConstructor, Metadata } from '@grpc/grpc-js';
import { create } from '@bufbuild/protobuf';
import { HttpFrontend } from '../../src/frontends/http/index.js';
import { GrpcFrontend, inferenceServiceDefinition } from '../../src/frontends/grpc/index.js';
import { ModelInferRequestSchema, type ModelInferResponse } from '../../src/gen/grpc_service_pb.js';
import type { ServerApi } from '../../src/core/server-api.js';
import { silentLogger } from '../../src/logger.js';
import { LEVEL_TIMESTAMPS, Tracer } from '../../src/trace/index.js';
import type { InferRequest, InferResponse } from '../../src/types/api.js';
import { EchoServer } from '../frontends/http/echo-server.js';
import { call, json } from '../frontends/http/helpers.js';
import { unary } from '../frontends/grpc/helpers.js';

/** Tells the requests the main thread's HTTP frontend made (they carry a `jsonOutputs` key) from the threads'. */
class CountingServer extends EchoServer {
  viaMain = 0;
  traced = 0;
  override infer(request: InferRequest): Promise<InferResponse> {
    if ('jsonOutputs' in request) this.viaMain += 1;
    if (request.trace !== undefined) this.traced += 1;
    return super.infer(request);
  }
}

const INPUTS = JSON.stringify({ inputs: [{ name: 'INPUT0', datatype: 'INT32', shape: [1], data: [7] }] });

async function infer(port: number, headers: Record<string, string> = {}): Promise<void> {
  const r = await call(port, 'POST', '/v2/models/echo/infer', { body: INPUTS, headers });
  assert.equal(r.status, 200);
  assert.deepEqual((json(r) as { outputs: Array<{ data: number[] }> }).outputs[0]!.data, [7]);
}

let dir: string;
let core: CountingServer;
let tracer: Tracer;
let fe: HttpFrontend;
let port: number;
before(async () => {
  dir = mkdtempSync(path.join(tmpdir(), 'nereid-trace-threads-'));
  core = new CountingServer();
  tracer = new Tracer({ mode: 'triton', file: path.join(dir, 'trace.json'), level: LEVEL_TIMESTAMPS, rate: 4 });
  const options = { port: 0, address: '127.0.0.1', maxInputSize: 1 << 20, logger: silentLogger, threads: 2, tracer };
  fe = new HttpFrontend(core, options);
  ({ port } = await fe.start());
});
after(async () => {
  await fe.stop();
  await tracer.close();
  rmSync(dir, { recursive: true, force: true });
});

test('rate=4 on two threads: every 4th request is traced, all are served on the threads', async () => {
  assert.equal(fe.threads?.size, 2);
  // A client's own pick header is not taken for the thread's.
  for (let i = 0; i < 20; i++) await infer(port, { 'X-Nereid-Trace-Pick': '1' });
  assert.equal(core.traced, 5, 'one request in four traced');
  assert.equal(core.viaMain, 0, 'the traced requests too were served on the threads');
  // A new global rate reaches the threads before the answer to the change.
  const set = await call(port, 'POST', '/v2/trace/setting', { body: JSON.stringify({ trace_rate: '2' }) });
  assert.equal(set.status, 200);
  for (let i = 0; i < 8; i++) await infer(port);
  assert.equal(core.traced, 9, 'then one in two');
  assert.equal(core.viaMain, 0);
  const back = await call(port, 'POST', '/v2/trace/setting', { body: JSON.stringify({ trace_rate: '4' }) });
  assert.equal(back.status, 200);
});

test('count=2 on two threads: once two traces were taken, the threads serve every request', async () => {
  const spentCore = new CountingServer();
  const spentTracer = new Tracer({
    mode: 'triton',
    file: path.join(dir, 'spent.json'),
    level: LEVEL_TIMESTAMPS,
    rate: 2,
    count: 2,
  });
  const options = { port: 0, address: '127.0.0.1', maxInputSize: 1 << 20, logger: silentLogger, threads: 2 };
  const spentFe = new HttpFrontend(spentCore, { ...options, tracer: spentTracer });
  try {
    const { port: spentPort } = await spentFe.start();
    for (let i = 0; i < 10; i++) await infer(spentPort);
    assert.equal(spentCore.traced, 2);
    assert.equal(spentCore.viaMain, 0, 'all served on the threads');
  } finally {
    await spentFe.stop();
    await spentTracer.close();
  }
});

test("a model's own setting: the main thread decides for every request, the threads serve them", async () => {
  const set = await call(port, 'POST', '/v2/models/echo/trace/setting', { body: JSON.stringify({ trace_rate: '2' }) });
  assert.equal(set.status, 200);
  const [main0, traced0] = [core.viaMain, core.traced];
  for (let i = 0; i < 8; i++) await infer(port);
  assert.equal(core.viaMain - main0, 0, 'every request served on the threads');
  assert.equal(core.traced - traced0, 4, "the model's rate, counted there");
  // Cleared, the model keeps a setting (and a count) of its own, as in Triton: still the main thread's to decide.
  const body = JSON.stringify({ trace_rate: null });
  const clear = await call(port, 'POST', '/v2/models/echo/trace/setting', { body });
  assert.equal(clear.status, 200);
  const [main1, traced1] = [core.viaMain, core.traced];
  for (let i = 0; i < 8; i++) await infer(port);
  assert.equal(core.traced - traced1, 2, 'the global rate again, counted on the main thread');
  assert.equal(core.viaMain - main1, 0);
});

/** A frontend on two threads with the request log on: its log lines, parsed. */
interface LoggingFrontend {
  fe: HttpFrontend;
  core: CountingServer;
  tracer: Tracer;
  lines: Array<Record<string, unknown>>;
}

function loggingFrontend(): LoggingFrontend {
  const logCore = new CountingServer();
  const lines: Array<Record<string, unknown>> = [];
  const stream = new Writable({
    write(chunk: Buffer, _enc, done) {
      for (const l of chunk.toString().split('\n')) if (l !== '') lines.push(JSON.parse(l) as Record<string, unknown>);
      done();
    },
  });
  const logTracer = new Tracer({ mode: 'triton', requestLogRate: 1, logger: pino({ level: 'info' }, stream) });
  const options = { port: 0, address: '127.0.0.1', maxInputSize: 1 << 20, logger: silentLogger, threads: 2 };
  return { fe: new HttpFrontend(logCore, { ...options, tracer: logTracer }), core: logCore, tracer: logTracer, lines };
}

function assertLogged(lines: ReadonlyArray<Record<string, unknown>>, count: number): void {
  const logged = lines.filter((l) => l.msg === 'request');
  assert.equal(logged.length, count);
  for (const l of logged) {
    assert.deepEqual(
      [l.protocol, l.method, l.path, l.status, l.bytes_in],
      ['http', 'POST', '/v2/models/echo/infer', 200, INPUTS.length],
    );
    assert.ok((l.bytes_out as number) > 0);
    assert.equal(typeof l.total_us, 'number');
  }
}

/** Keeps the main thread from its event loop for `ms` milliseconds. */
function busy(ms: number): void {
  const until = performance.now() + ms;
  while (performance.now() < until);
}

test('the request log: the threads serve every infer request, the main thread logs each', async () => {
  const { fe: logFe, core: logCore, tracer: logTracer, lines } = loggingFrontend();
  try {
    const { port: logPort } = await logFe.start();
    for (let i = 0; i < 4; i++) await infer(logPort);
    assert.equal(logCore.viaMain, 0);
  } finally {
    await logFe.stop();
    await logTracer.close();
  }
  assertLogged(lines, 4);
});

test("stopped right after a reply: what the thread said of it last is read before its port closes", async () => {
  const { fe: logFe, tracer: logTracer, lines } = loggingFrontend();
  const { port: logPort } = await logFe.start();
  await infer(logPort);
  // The thread tells the reply's status and bytes after writing it. With the main thread busy from here until the
  // threads have exited, it sees their exits before that message: stop() must read it before closing their ports.
  busy(100);
  const stopped = logFe.stop();
  busy(500);
  await stopped;
  await logTracer.close();
  assertLogged(lines, 1);
});

test('gRPC ModelInfer at rate=4 on two threads: the picked calls are traced, all served on the threads', async () => {
  const grpcCore = new CountingServer();
  // The main thread's gRPC frontend asks for admission before every ModelInfer it serves itself.
  let onMain = 0;
  (grpcCore as ServerApi).admissionError = () => void onMain++;
  const file = path.join(dir, 'grpc.json');
  const grpcTracer = new Tracer({ mode: 'triton', file, level: LEVEL_TIMESTAMPS, rate: 4 });
  const grpcFe = new GrpcFrontend(grpcCore, { port: 0, address: '127.0.0.1', threads: 2, tracer: grpcTracer });
  const { port: grpcPort } = await grpcFe.start();
  const Client = makeGenericClientConstructor(inferenceServiceDefinition, 'GRPCInferenceService');
  const client = new Client(`127.0.0.1:${grpcPort}`, credentials.createInsecure());
  try {
    const request = create(ModelInferRequestSchema, {
      modelName: 'echo',
      inputs: [{ name: 'INPUT0', datatype: 'INT32', shape: [1n] }],
      rawInputContents: [new Uint8Array(new Int32Array([7]).buffer)],
    });
    // A client's own pick is not taken for the thread's.
    const metadata = new Metadata();
    metadata.set('x-nereid-trace-pick', '1');
    for (let i = 0; i < 20; i++) {
      const res = await unary<ModelInferResponse>(client, 'ModelInfer', request, metadata);
      assert.deepEqual([...new Int32Array(new Uint8Array(res.rawOutputContents[0]!).buffer)], [7]);
    }
    assert.equal(grpcCore.traced, 5, 'one call in four traced');
    assert.equal(onMain, 0, 'the traced calls too were served on the threads');
  } finally {
    client.close();
    await grpcFe.stop();
    await grpcTracer.close();
  }
});
