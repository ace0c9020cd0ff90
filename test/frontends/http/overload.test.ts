/**
 * A bounded queue under overload over HTTP, with a real server and a
 * javascript model that holds its thread: requests beyond the queue are
 * refused with Triton's 503 text plus Retry-After, before their body is read,
 * and the accepted ones complete.
 */
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { Server } from '../../../src/core/server.js';
import { HttpFrontend } from '../../../src/frontends/http/index.js';
import { silentLogger } from '../../../src/logger.js';
import { TempRepository } from '../../helpers/repository.js';
import { jsModel } from '../../backends/javascript/fixtures.js';
import { call, json } from './helpers.js';
import { create } from '@bufbuild/protobuf';
import * as grpc from '@grpc/grpc-js';
import { ModelInferRequestSchema } from '../../../src/gen/grpc_service_pb.js';
import { startHarness, unary, type Harness } from '../grpc/helpers.js';

const CONFIG = `name: "slow"
backend: "javascript"
max_batch_size: 1
input [ { name: "IN" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
dynamic_batching { default_queue_policy { max_queue_size: 1 } }
instance_group [ { kind: KIND_CPU count: 1 } ]
`;

// Each execution holds the thread for a while, so the queue stays full while the test looks.
const MODEL = `
export default class {
  async execute(requests) {
    await new Promise((r) => setTimeout(r, 400));
    return requests.map((r) => ({ outputs: [{ name: 'OUT', datatype: 'INT32', shape: r.inputs[0].shape, data: r.inputs[0].data }] }));
  }
}
`;

let repo: TempRepository;
let server: Server;
let frontend: HttpFrontend;
let port: number;
let h: Harness;

before(async () => {
  repo = new TempRepository();
  jsModel(repo, 'slow', CONFIG, MODEL);
  server = new Server({ modelRepositories: [repo.dir], logger: silentLogger });
  await server.start();
  frontend = new HttpFrontend(server, { port: 0, address: '127.0.0.1', maxInputSize: 1 << 20, logger: silentLogger });
  ({ port } = await frontend.start());
  h = await startHarness(server);
});

after(async () => {
  await h?.close();
  await frontend?.stop();
  await server?.stop();
  repo?.cleanup();
});

const body = (id: string, v: number) => JSON.stringify({ id, inputs: [{ name: 'IN', datatype: 'INT32', shape: [1, 1], data: [v] }] });

test('a full queue answers 503 with Retry-After and Triton\'s text, before reading the body; accepted requests complete', async () => {
  const replies = Array.from({ length: 12 }, (_, i) => call(port, 'POST', '/v2/models/slow/infer', { body: body(`r${i}`, i) }));
  // The first refusal comes while the accepted ones still run.
  const first = await Promise.race(replies.map((p) => p.then((r) => (r.status === 503 ? r : new Promise<never>(() => {})))));
  assert.equal(first.headers['retry-after'], '1');
  assert.match((json(first) as { error: string }).error, /^(\[request id: r\d+\] )?Exceeds maximum queue size$/);

  // While the queue is full, a body that is not even JSON is refused for the queue, not decoded.
  const garbage = await call(port, 'POST', '/v2/models/slow/infer', { body: '{not json' });
  assert.equal(garbage.status, 503);
  assert.equal((json(garbage) as { error: string }).error, 'Exceeds maximum queue size');
  assert.equal(garbage.headers['retry-after'], '1');

  const all = await Promise.all(replies);
  const ok = all.filter((r) => r.status === 200);
  const refused = all.filter((r) => r.status === 503);
  assert.equal(ok.length + refused.length, 12, all.map((r) => `${r.status} ${r.body}`).join('\n'));
  assert.ok(ok.length >= 2, `some requests are accepted (${ok.length})`);
  assert.ok(refused.length >= 1);
  for (const r of ok) assert.equal(r.headers['retry-after'], undefined);
  const stats = server.modelStatistics('slow')[0]!;
  assert.equal(Number(stats.inference_stats.fail.count), refused.length + 1, 'every refusal counts as a failed request');

  // Once drained the model serves again.
  const again = await call(port, 'POST', '/v2/models/slow/infer', { body: body('again', 7) });
  assert.equal(again.status, 200);
  assert.deepEqual((json(again) as { outputs: { data: number[] }[] }).outputs[0]!.data, [7]);
});

test('gRPC: a full queue answers UNAVAILABLE with Triton\'s text (and the request id), accepted calls complete', async () => {
  const calls = Array.from({ length: 12 }, (_, i) =>
    unary(
      h.client,
      'ModelInfer',
      create(ModelInferRequestSchema, {
        modelName: 'slow',
        id: `g${i}`,
        inputs: [{ name: 'IN', datatype: 'INT32', shape: [1n, 1n] }],
        rawInputContents: [new Uint8Array(new Int32Array([i]).buffer)],
      }),
    ).then(
      () => ({ ok: true as const }),
      (e: grpc.ServiceError) => ({ ok: false as const, code: e.code, details: e.details }),
    ),
  );
  const all = await Promise.all(calls);
  const refused = all.filter((r) => !r.ok);
  assert.ok(all.some((r) => r.ok), 'some calls are accepted');
  assert.ok(refused.length >= 1, 'some calls are refused');
  for (const r of refused) {
    assert.equal(r.code, grpc.status.UNAVAILABLE);
    assert.match(r.details!, /^\[request id: g\d+\] Exceeds maximum queue size$/);
  }
});
