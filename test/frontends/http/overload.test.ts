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
import net from 'node:net';
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
    return requests.map((r) => ({
      outputs: [{ name: 'OUT', datatype: 'INT32', shape: r.inputs[0].shape, data: r.inputs[0].data }],
    }));
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

const body = (id: string, v: number) =>
  JSON.stringify({ id, inputs: [{ name: 'IN', datatype: 'INT32', shape: [1, 1], data: [v] }] });

test('a full queue answers 503 with Retry-After and Triton\'s text, ' +
  'before reading the body; accepted requests complete', async () => {
  const replies = Array.from({ length: 12 }, (_, i) =>
    call(port, 'POST', '/v2/models/slow/infer', { body: body(`r${i}`, i) }),
  );
  // The first refusal comes while the accepted ones still run.
  const first = await Promise.race(
    replies.map((p) => p.then((r) => (r.status === 503 ? r : new Promise<never>(() => {})))),
  );
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
  assert.equal(
    Number(stats.inference_stats.fail.count),
    refused.length + 1,
    'every refusal counts as a failed request',
  );

  // Once drained the model serves again.
  const again = await call(port, 'POST', '/v2/models/slow/infer', { body: body('again', 7) });
  assert.equal(again.status, 200);
  assert.deepEqual((json(again) as { outputs: { data: number[] }[] }).outputs[0]!.data, [7]);
});

/**
 * Sends `raw` on one connection and collects `count` whole replies (status, headers, body); reports whether the server
 * closed it.
 */
function rawReplies(
  raw: string,
  count: number,
): Promise<{ replies: { status: number; headers: Map<string, string>; body: string }[]; closed: boolean }> {
  return new Promise((resolve, reject) => {
    const socket = net.connect(port, '127.0.0.1');
    let data = Buffer.alloc(0);
    let closed = false;
    const replies: { status: number; headers: Map<string, string>; body: string }[] = [];
    const parse = (): void => {
      for (;;) {
        const end = data.indexOf('\r\n\r\n');
        if (end < 0) return;
        const lines = data.subarray(0, end).toString('latin1').split('\r\n');
        const headers = new Map(
          lines.slice(1).map((l) => [l.slice(0, l.indexOf(':')).toLowerCase(), l.slice(l.indexOf(':') + 1).trim()]),
        );
        const length = Number(headers.get('content-length'));
        if (data.byteLength < end + 4 + length) return;
        replies.push({
          status: Number(lines[0]!.split(' ')[1]),
          headers,
          body: data.subarray(end + 4, end + 4 + length).toString(),
        });
        data = data.subarray(end + 4 + length);
      }
    };
    socket.on('data', (chunk: Buffer) => {
      data = Buffer.concat([data, chunk]);
      parse();
      // Give the server a moment to close the connection if it were going to.
      if (replies.length === count) setTimeout(() => { socket.destroy(); resolve({ replies, closed }); }, 50);
    });
    socket.on('end', () => (closed = true));
    socket.on('error', reject);
    socket.write(raw);
  });
}

test('refusals on one keep-alive connection: each is a whole 503 with Retry-After, ' +
  'the body left unread is skipped, the connection stays open', async () => {
  const replies = Array.from({ length: 12 }, (_, i) =>
    call(port, 'POST', '/v2/models/slow/infer', { body: body(`k${i}`, i) }),
  );
  await Promise.race(replies.map((p) => p.then((r) => (r.status === 503 ? r : new Promise<never>(() => {})))));
  const one = (b: string): string =>
    `POST /v2/models/slow/infer HTTP/1.1\r\nHost: x\r\nContent-Type: ` +
    `application/json\r\nContent-Length: ${Buffer.byteLength(b)}\r\n\r\n${b}`;
  const { replies: refused, closed } = await rawReplies(one(body('', 1)) + one('{not json') + one(body('', 2)), 3);
  assert.equal(closed, false, 'keep-alive is preserved');
  for (const r of refused) {
    assert.equal(r.status, 503);
    assert.equal(r.headers.get('retry-after'), '1');
    assert.equal(r.headers.get('content-type'), 'application/json');
    assert.equal(r.headers.get('connection'), 'keep-alive');
    assert.deepEqual(JSON.parse(r.body), { error: 'Exceeds maximum queue size' });
  }
  await Promise.all(replies);
});

test('gRPC: a full queue answers UNAVAILABLE with Triton\'s text ' +
  '(and the request id), accepted calls complete', async () => {
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
