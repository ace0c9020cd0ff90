/**
 * The request log (--log-requests): one line per request in the server's
 * log format, every --log-requests-rate-th, with protocol, method or RPC,
 * path, model, version, status, bytes, queue/compute/total µs, and the
 * trace id when the request is traced too.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { Writable } from 'node:stream';
import * as grpc from '@grpc/grpc-js';
import { create } from '@bufbuild/protobuf';
import { pino } from 'pino';
import { ModelInferRequestSchema } from '../../src/gen/grpc_service_pb.js';
import { buildServeConfig } from '../../src/cli/serve.js';
import { inferenceServiceDefinition } from '../../src/frontends/grpc/index.js';
import { serveInProcess } from '../helpers/in-process-server.js';
import { TempRepository } from '../helpers/repository.js';
import { call, int32Bytes } from '../frontends/http/helpers.js';

const BODY = JSON.stringify({
  inputs: ['INPUT0', 'INPUT1'].map((name) => ({
    name,
    datatype: 'INT32',
    shape: [1, 16],
    data: new Array(16).fill(3),
  })),
});

function capture(): { logger: pino.Logger; lines: () => Array<Record<string, unknown>> } {
  const out: string[] = [];
  const stream = new Writable({
    write(chunk: Buffer, _enc, done) {
      out.push(
        ...chunk
          .toString()
          .split('\n')
          .filter((l) => l !== ''),
      );
      done();
    },
  });
  return {
    logger: pino({ level: 'info' }, stream),
    lines: () => out.map((l) => JSON.parse(l) as Record<string, unknown>).filter((l) => l.msg === 'request'),
  };
}

test('--log-requests writes a line per HTTP and gRPC request, with timings, status and bytes', async () => {
  const repo = new TempRepository().addSub('simple');
  const { logger, lines } = capture();
  const running = await serveInProcess(repo.dir, ['--allow-metrics=false', '--log-requests=true'], logger);
  try {
    assert.equal((await call(running.ports.http!, 'POST', '/v2/models/simple/infer', { body: BODY })).status, 200);
    assert.equal(
      (await call(running.ports.http!, 'POST', '/v2/models/simple/infer', { body: '{"inputs":[]}' })).status,
      400,
    );
    const client = new (grpc.makeGenericClientConstructor(inferenceServiceDefinition, 'GRPCInferenceService'))(
      `127.0.0.1:${running.ports.grpc}`,
      grpc.credentials.createInsecure(),
    );
    try {
      const request = create(ModelInferRequestSchema, {
        modelName: 'simple',
        inputs: [
          { name: 'INPUT0', datatype: 'INT32', shape: [1n, 16n] },
          { name: 'INPUT1', datatype: 'INT32', shape: [1n, 16n] },
        ],
        rawInputContents: [int32Bytes(new Array(16).fill(1)), int32Bytes(new Array(16).fill(2))],
      });
      await new Promise((resolve, reject) =>
        (client as unknown as { ModelInfer: (...args: unknown[]) => void }).ModelInfer(
          request,
          (err: Error | null, res: unknown) => (err ? reject(err) : resolve(res)),
        ),
      );
    } finally {
      client.close();
    }
  } finally {
    await running.shutdown();
    repo.cleanup();
  }
  const [ok, bad, rpc] = lines();
  assert.ok(ok && bad && rpc, `three request lines: ${JSON.stringify(lines())}`);
  assert.deepEqual(
    {
      protocol: ok.protocol,
      method: ok.method,
      path: ok.path,
      model: ok.model,
      version: ok.version,
      status: ok.status,
      bytes_in: ok.bytes_in,
    },
    {
      protocol: 'http',
      method: 'POST',
      path: '/v2/models/simple/infer',
      model: 'simple',
      version: '1',
      status: 200,
      bytes_in: BODY.length,
    },
  );
  assert.ok((ok.bytes_out as number) > 0);
  for (const key of ['queue_us', 'compute_us', 'total_us']) assert.equal(typeof ok[key], 'number', key);
  assert.ok((ok.total_us as number) >= (ok.compute_us as number));
  assert.equal(ok.trace_id, undefined, 'not traced: no trace id');
  assert.equal(bad.status, 400);
  assert.equal(bad.compute_us, undefined, 'refused before it ran');
  assert.deepEqual(
    { protocol: rpc.protocol, method: rpc.method, status: rpc.status, bytes_in: rpc.bytes_in, model: rpc.model },
    { protocol: 'grpc', method: 'ModelInfer', status: 'OK', bytes_in: 128, model: 'simple' },
  );
  assert.equal(typeof rpc.total_us, 'number');
});

test('--log-requests-rate=2 logs every second request; a traced request carries its trace id', async () => {
  const repo = new TempRepository().addSub('simple');
  const { logger, lines } = capture();
  const running = await serveInProcess(
    repo.dir,
    [
      '--allow-metrics=false',
      '--log-requests=true',
      '--log-requests-rate=2',
      '--trace-config=mode=opentelemetry',
      '--trace-config=level=TIMESTAMPS',
      '--trace-config=rate=0',
      '--trace-config=opentelemetry,url=http://127.0.0.1:9/v1/traces',
    ],
    logger,
  );
  try {
    for (let i = 0; i < 4; i++) {
      const headers: Record<string, string> =
        i === 3 ? { traceparent: '00-11111111111111111111111111111111-2222222222222222-01' } : {};
      assert.equal(
        (await call(running.ports.http!, 'POST', '/v2/models/simple/infer', { body: BODY, headers })).status,
        200,
      );
    }
  } finally {
    await running.shutdown();
    repo.cleanup();
  }
  const logged = lines();
  assert.equal(logged.length, 2);
  assert.equal(logged[0]!.trace_id, undefined);
  assert.equal(logged[1]!.trace_id, '11111111111111111111111111111111');
  assert.throws(() => buildServeConfig(['--log-requests-rate=5']), /--log-requests-rate needs --log-requests=true/);
  assert.throws(
    () => buildServeConfig(['--log-requests=true', '--log-requests-rate=0']),
    /--log-requests-rate must be 1 or more/,
  );
});
