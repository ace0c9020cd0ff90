/**
 * Replies to response-cache hits kept by the HTTP frontend: a request sent
 * again is answered with the bytes the full path wrote, counted as a hit,
 * and never with a reply that another id, other outputs, a reload, a newer
 * version, an eviction or compression would change.
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import type { IncomingMessage } from 'node:http';
import { gunzipSync, gzipSync } from 'node:zlib';
import type { RunningServer } from '../../../src/cli/serve.js';
import { buildIdentityModel, buildMlp } from '../../helpers/onnx-builder.js';
import {
  BUDGET_BYTES,
  CacheReplies,
  MAX_REPLY_BYTES,
  MAX_REQUEST_BYTES,
  RequestKey,
  requestHash,
} from '../../../src/frontends/http/cache-replay.js';
import type { CacheHitTicket, InferRequest } from '../../../src/types/api.js';
import { serveInProcess } from '../../helpers/in-process-server.js';
import { TempRepository } from '../../helpers/repository.js';
import { sample } from '../../metrics/exposition.js';
import { type HttpReply, binaryRequest, call, int32Bytes, int32Values, json, splitBinaryReply } from './helpers.js';

const CONFIG = (name: string, extra = '') => `name: "${name}"
platform: "onnxruntime_onnx"
max_batch_size: 8
input [ { name: "INPUT0" data_type: TYPE_INT32 dims: [ 16 ] }, { name: "INPUT1" data_type: TYPE_INT32 dims: [ 16 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_INT32 dims: [ 16 ] }, { name: "OUTPUT1" data_type: TYPE_INT32 dims: [ 16 ]
  } ]
instance_group [ { kind: KIND_CPU count: 1 } ]
response_cache { enable: true }
${extra}
`;

const identityBytes = () =>
  buildIdentityModel([
    { name: 'INPUT0', datatype: 'INT32', shape: ['batch', 16] },
    { name: 'INPUT1', datatype: 'INT32', shape: ['batch', 16] },
  ]).toBytes();

const fill = (v: number) => new Array<number>(16).fill(v);

/** Both inputs binary; `outputs` as the request lists them (undefined: none listed). */
function binaryBody(a: number, id: string | undefined, outputs?: object[], parameters?: object) {
  return binaryRequest(
    {
      ...(id === undefined ? {} : { id }),
      ...(parameters === undefined ? {} : { parameters }),
      inputs: ['INPUT0', 'INPUT1'].map((name) => ({
        name,
        datatype: 'INT32',
        shape: [1, 16],
        parameters: { binary_data_size: 64 },
      })),
      ...(outputs === undefined ? {} : { outputs }),
    },
    [int32Bytes(fill(a)), int32Bytes(fill(1))],
  );
}

function jsonBody(a: number, id: string): string {
  return JSON.stringify({
    id,
    inputs: [
      { name: 'INPUT0', datatype: 'INT32', shape: [1, 16], data: fill(a) },
      { name: 'INPUT1', datatype: 'INT32', shape: [1, 16], data: fill(1) },
    ],
  });
}

const BINARY_OUTPUTS = [
  { name: 'OUTPUT0', parameters: { binary_data: true } },
  { name: 'OUTPUT1', parameters: { binary_data: true } },
];

/** Everything but the Date header, which changes by the second. */
function sameReply(a: HttpReply, b: HttpReply, what: string): void {
  const headers = (r: HttpReply) => ({ ...r.headers, date: undefined });
  assert.equal(a.status, b.status, what);
  assert.deepEqual(headers(a), headers(b), what);
  assert.ok(
    a.body.equals(b.body),
    `${what}: bodies differ\n${a.body.toString('latin1')}\n${b.body.toString('latin1')}`,
  );
}

interface Stats {
  version: string;
  execution_count: number;
  inference_stats: Record<string, { count: number; ns: number }>;
}

/** A served repository in explicit mode, counting the requests that reach Server.infer(). */
class Served {
  running!: RunningServer;
  inferCalls = 0;
  constructor(readonly repo: TempRepository, private readonly cacheSize: number) {}

  async start(): Promise<void> {
    this.running = await serveInProcess(this.repo.dir, [
      '--model-control-mode=explicit',
      '--load-model=*',
      `--cache-config=local,size=${this.cacheSize}`,
    ]);
    const server = this.running.server;
    const infer = server.infer.bind(server);
    server.infer = (request: InferRequest) => {
      this.inferCalls += 1;
      return infer(request);
    };
  }

  post(model: string, body: string | Buffer, headers: Record<string, string> = {}): Promise<HttpReply> {
    return call(this.running.ports.http!, 'POST', `/v2/models/${model}/infer`, { body, headers });
  }

  async stats(model: string): Promise<Stats[]> {
    return (json(await call(this.running.ports.http!, 'GET', `/v2/models/${model}/stats`)) as { model_stats: Stats[] })
      .model_stats;
  }
}

/** One FP32 input, 20,000 FP32 outputs: a small request whose reply is too large to keep. */
const WIDE_OUTPUTS = 20_000;
const WIDE_CONFIG = `name: "wide"
platform: "onnxruntime_onnx"
max_batch_size: 8
input [ { name: "input" data_type: TYPE_FP32 dims: [ 1 ] } ]
output [ { name: "output" data_type: TYPE_FP32 dims: [ ${WIDE_OUTPUTS} ] } ]
response_cache { enable: true }
`;

describe('kept replies of cache hits', () => {
  const repo = new TempRepository()
    .addSub('cached', [1], CONFIG('cached'))
    .config('wide', WIDE_CONFIG)
    .file('wide', '1/model.onnx', buildMlp([1, WIDE_OUTPUTS], 7).builder.toBytes());
  const served = new Served(repo, 1 << 20);
  before(() => served.start());
  after(async () => {
    await served.running.shutdown();
    repo.cleanup();
  });

  test('binary outputs: the replayed reply is the bytes of the ' +
    'miss and of the first hit, and counts as a hit', async () => {
    const req = binaryBody(5, 'bin-1', BINARY_OUTPUTS);
    const [before] = await served.stats('cached');
    const calls = served.inferCalls;
    const miss = await served.post('cached', req.body, req.headers);
    const hit = await served.post('cached', req.body, req.headers);
    const replayed = await served.post('cached', req.body, req.headers);
    const again = await served.post('cached', req.body, req.headers);
    assert.equal(miss.status, 200);
    sameReply(hit, miss, 'first hit against the miss');
    sameReply(replayed, miss, 'replay against the miss');
    sameReply(again, miss, 'second replay against the miss');
    assert.equal(served.inferCalls - calls, 2, 'the third and fourth requests never reached Server.infer()');
    const { header, binary } = splitBinaryReply(replayed);
    assert.equal(header.id, 'bin-1');
    assert.deepEqual(int32Values(binary.subarray(0, 64)), fill(6));
    assert.deepEqual(int32Values(binary.subarray(64)), fill(4));

    const [s] = await served.stats('cached');
    const d = (k: string) => s!.inference_stats[k]!.count - before!.inference_stats[k]!.count;
    assert.equal(s!.execution_count - before!.execution_count, 1);
    assert.equal(d('success'), 4);
    assert.equal(d('queue'), 4);
    assert.equal(d('cache_hit'), 3);
    assert.equal(d('cache_miss'), 1);
    assert.equal(d('compute_infer'), 1);
    assert.ok(s!.inference_stats['cache_hit']!.ns > before!.inference_stats['cache_hit']!.ns);

    const metrics = (await call(served.running.ports.metrics!, 'GET', '/metrics')).body.toString();
    const c = served.running.server.responseCache!.counters;
    assert.equal(
      sample(metrics, 'nv_cache_num_hits_per_model', { model: 'cached', version: '1' }),
      s!.inference_stats['cache_hit']!.count,
    );
    assert.equal(sample(metrics, 'nv_cache_num_hits', {}), c.hits);
    assert.equal(sample(metrics, 'nv_cache_num_lookups', {}), c.hits + c.misses);
    assert.equal(
      sample(metrics, 'nv_inference_request_success', { model: 'cached', version: '1' }),
      s!.inference_stats['success']!.count,
    );
  });

  test('JSON in and out: the replayed reply is the bytes of the miss', async () => {
    const body = jsonBody(7, 'json-1');
    const calls = served.inferCalls;
    const miss = await served.post('cached', body);
    await served.post('cached', body);
    const replayed = await served.post('cached', body);
    assert.equal(served.inferCalls - calls, 2);
    sameReply(replayed, miss, 'JSON replay');
    const doc = json(replayed) as { id: string; outputs: Array<{ name: string; data: number[] }> };
    assert.equal(doc.id, 'json-1');
    assert.deepEqual(doc.outputs.map((o) => [o.name, o.data]), [['OUTPUT0', fill(8)], ['OUTPUT1', fill(6)]]);
  });

  test('another id, other requested outputs or other parameters are answered for themselves', async () => {
    const first = binaryBody(9, 'a', BINARY_OUTPUTS);
    for (let i = 0; i < 3; i++) await served.post('cached', first.body, first.headers);
    const calls = served.inferCalls;

    const otherId = binaryBody(9, 'b', BINARY_OUTPUTS);
    const b = splitBinaryReply(await served.post('cached', otherId.body, otherId.headers));
    assert.equal(b.header.id, 'b');

    const noId = binaryBody(9, undefined, BINARY_OUTPUTS);
    const n = splitBinaryReply(await served.post('cached', noId.body, noId.headers));
    assert.equal(n.header.id, undefined);

    const one = binaryBody(9, 'a', [{ name: 'OUTPUT1' }]);
    const oneReply = await served.post('cached', one.body, one.headers);
    const doc = json(oneReply) as { outputs: Array<{ name: string; data: number[] }> };
    assert.deepEqual(doc.outputs.map((o) => [o.name, o.data]), [['OUTPUT1', fill(8)]], 'one output, as JSON');

    const allBinary = binaryBody(9, 'a', undefined, { binary_data_output: true });
    const all = splitBinaryReply(await served.post('cached', allBinary.body, allBinary.headers));
    assert.deepEqual(
      all.header.outputs.map((o: { name: string; parameters: object }) => [o.name, o.parameters]),
      [['OUTPUT0', { binary_data_size: 64 }], ['OUTPUT1', { binary_data_size: 64 }]],
    );
    assert.deepEqual(int32Values(all.binary.subarray(0, 64)), fill(10));

    const versioned = await call(served.running.ports.http!, 'POST', '/v2/models/cached/versions/1/infer', {
      body: first.body,
      headers: first.headers,
    });
    assert.equal(splitBinaryReply(versioned).header.id, 'a');
    assert.equal(served.inferCalls - calls, 5, 'none of them was answered with the kept reply of another request');
  });

  test('a client that accepts gzip gets a compressed reply, never the kept identity bytes', async () => {
    const req = binaryBody(11, 'z', BINARY_OUTPUTS);
    for (let i = 0; i < 3; i++) await served.post('cached', req.body, req.headers);
    const identity = await served.post('cached', req.body, req.headers);
    const zipped = await served.post('cached', req.body, { ...req.headers, 'Accept-Encoding': 'gzip' });
    assert.equal(zipped.headers['content-encoding'], 'gzip');
    assert.ok(gunzipSync(zipped.body).equals(identity.body));
    // A compressed request body is decoded anew every time.
    const calls = served.inferCalls;
    const gz = gzipSync(req.body);
    for (let i = 0; i < 2; i++) {
      const r = await served.post('cached', gz, { ...req.headers, 'Content-Encoding': 'gzip' });
      assert.ok(r.body.equals(identity.body));
    }
    assert.equal(served.inferCalls - calls, 2);
  });

  test('a reply too large to keep is written in its parts every time, the same bytes', async () => {
    assert.ok(WIDE_OUTPUTS * 4 > MAX_REPLY_BYTES);
    const req = binaryRequest(
      {
        id: 'w',
        inputs: [{ name: 'input', datatype: 'FP32', shape: [1, 1], parameters: { binary_data_size: 4 } }],
        outputs: [{ name: 'output', parameters: { binary_data: true } }],
      },
      [Buffer.from(new Float32Array([0.5]).buffer)],
    );
    const calls = served.inferCalls;
    const replies = [];
    for (let i = 0; i < 3; i++) replies.push(await served.post('wide', req.body, req.headers));
    assert.equal(served.inferCalls - calls, 3, 'not kept: each request went to Server.infer()');
    assert.equal(splitBinaryReply(replies[0]!).binary.byteLength, WIDE_OUTPUTS * 4);
    sameReply(replies[1]!, replies[0]!, 'the first hit against the miss');
    sameReply(replies[2]!, replies[0]!, 'the second hit against the miss');
    const [s] = await served.stats('wide');
    assert.equal(s!.inference_stats['cache_hit']!.count, 2);
    assert.equal(s!.execution_count, 1);
  });

  test('bad requests are never kept: the same bad body fails the same way every time', async () => {
    const bad = binaryRequest(
      { inputs: [{ name: 'INPUT0', datatype: 'INT32', shape: [1, 16], parameters: { binary_data_size: 64 } }] },
      [int32Bytes(fill(1))],
    );
    const replies = [];
    for (let i = 0; i < 3; i++) replies.push(await served.post('cached', bad.body, bad.headers));
    for (const r of replies) assert.equal(r.status, 400);
    sameReply(replies[2]!, replies[0]!, 'the same error');
  });
});

describe('kept replies and the model lifecycle', () => {
  test('a reload of the model answers from the new model, not the kept reply', async (t) => {
    const repo = new TempRepository().addSub('cached', [1], CONFIG('cached'));
    const served = new Served(repo, 1 << 20);
    await served.start();
    t.after(async () => {
      await served.running.shutdown();
      repo.cleanup();
    });
    const req = binaryBody(3, 'r', BINARY_OUTPUTS);
    for (let i = 0; i < 3; i++) await served.post('cached', req.body, req.headers);
    repo.file('cached', '1/model.onnx', identityBytes());
    await served.running.server.loadModel('cached');
    const calls = served.inferCalls;
    const after = splitBinaryReply(await served.post('cached', req.body, req.headers));
    assert.deepEqual(int32Values(after.binary.subarray(0, 64)), fill(3), 'the identity model answers now');
    assert.equal(served.inferCalls - calls, 1);
    const [s] = await served.stats('cached');
    assert.equal(s!.inference_stats['cache_miss']!.count, 1, 'the reloaded version missed');
    assert.equal(s!.inference_stats['cache_hit']!.count, 0);
  });

  test('a newer version serves requests without a version, while ' +
    'the kept reply of the older one stays unused', async (t) => {
    const repo = new TempRepository().addSub('cached', [1], CONFIG('cached', 'version_policy: { all: {} }'));
    const served = new Served(repo, 1 << 20);
    await served.start();
    t.after(async () => {
      await served.running.shutdown();
      repo.cleanup();
    });
    const req = binaryBody(3, 'v', BINARY_OUTPUTS);
    for (let i = 0; i < 3; i++)
      assert.equal(splitBinaryReply(await served.post('cached', req.body, req.headers)).header.model_version, '1');
    repo.file('cached', '2/model.onnx', identityBytes());
    await served.running.server.loadModel('cached');
    const now = splitBinaryReply(await served.post('cached', req.body, req.headers));
    assert.equal(now.header.model_version, '2');
    assert.deepEqual(int32Values(now.binary.subarray(0, 64)), fill(3));
    const v1 = await call(served.running.ports.http!, 'POST', '/v2/models/cached/versions/1/infer', {
      body: req.body,
      headers: req.headers,
    });
    assert.equal(splitBinaryReply(v1).header.model_version, '1');
    assert.deepEqual(int32Values(splitBinaryReply(v1).binary.subarray(0, 64)), fill(4));
  });

  test('an entry evicted from the cache is not answered from its kept reply', async (t) => {
    const repo = new TempRepository().addSub('cached', [1], CONFIG('cached'));
    // Room for two entries of this model (as in the cache's own tests).
    const served = new Served(repo, 1400);
    await served.start();
    t.after(async () => {
      await served.running.shutdown();
      repo.cleanup();
    });
    const a = binaryBody(1, 'e', BINARY_OUTPUTS);
    for (let i = 0; i < 3; i++) await served.post('cached', a.body, a.headers);
    for (const v of [2, 3]) {
      const other = binaryBody(v, 'e', BINARY_OUTPUTS);
      await served.post('cached', other.body, other.headers);
    }
    const [before] = await served.stats('cached');
    const again = splitBinaryReply(await served.post('cached', a.body, a.headers));
    assert.deepEqual(int32Values(again.binary.subarray(0, 64)), fill(2));
    const [s] = await served.stats('cached');
    assert.equal(s!.execution_count - before!.execution_count, 1, 'the evicted request ran again');
    assert.equal(s!.inference_stats['cache_miss']!.count - before!.inference_stats['cache_miss']!.count, 1);
    assert.equal(s!.inference_stats['cache_hit']!.count, before!.inference_stats['cache_hit']!.count);
  });
});

describe('CacheReplies', () => {
  const req = (rawHeaders: string[] = []) => ({ rawHeaders }) as unknown as IncomingMessage;
  const ticket: CacheHitTicket = { kind: 'cache-hit', heldBytes: 100 };
  const body = Buffer.from('{"inputs":[]}');
  const reply = Buffer.from('reply');

  test('a kept reply is found for the same model, version, ' +
    'Inference-Header-Content-Length, forwarded headers and body only', () => {
    const r = new CacheReplies();
    const pattern = /^x-fwd/i;
    const base = r.keyOf(req(['X-Fwd-A', '1', 'Other', 'q']), 'm', undefined, '13', pattern, body)!;
    r.keep(base, ticket, ['Content-Length', '5'], reply);
    const same = r.keyOf(req(['X-Fwd-A', '1', 'Other', 'z']), 'm', undefined, '13', pattern, Buffer.from(body));
    assert.equal(r.get(same!)?.body, reply, 'an equal body in another buffer, a header that is not forwarded changed');
    const others = {
      model: r.keyOf(req(['X-Fwd-A', '1']), 'n', undefined, '13', pattern, body),
      version: r.keyOf(req(['X-Fwd-A', '1']), 'm', '1', '13', pattern, body),
      'no Inference-Header-Content-Length': r.keyOf(req(['X-Fwd-A', '1']), 'm', undefined, undefined, pattern, body),
      'Inference-Header-Content-Length 0': r.keyOf(req(['X-Fwd-A', '1']), 'm', undefined, '0', pattern, body),
      'forwarded header value': r.keyOf(req(['X-Fwd-A', '2']), 'm', undefined, '13', pattern, body),
      'no forwarded header': r.keyOf(req(), 'm', undefined, '13', pattern, body),
      'one byte of the body': r.keyOf(
        req(['X-Fwd-A', '1']),
        'm',
        undefined,
        '13',
        pattern,
        Buffer.from('{"inputs":[ ]}'),
      ),
    };
    for (const [what, key] of Object.entries(others)) assert.equal(r.get(key!), undefined, what);
    assert.equal(
      r.keyOf(req(), 'm', undefined, '13', undefined, Buffer.alloc(MAX_REQUEST_BYTES + 1)),
      undefined,
      'too large to keep',
    );
  });

  test('a hash shared by two requests never answers one with the reply of the other', () => {
    const r = new CacheReplies();
    const a = new RequestKey(42, 'm\u0000\u0000-', Buffer.from('a'));
    r.keep(a, ticket, [], reply);
    assert.equal(r.get(new RequestKey(42, 'm\u0000\u0000-', Buffer.from('b'))), undefined);
    assert.equal(r.get(new RequestKey(42, 'n\u0000\u0000-', Buffer.from('a'))), undefined);
    assert.equal(r.get(new RequestKey(42, 'm\u0000\u0000-', Buffer.from('a')))?.body, reply);
  });

  test('the kept request is a copy: the buffer it came in may be reused', () => {
    const r = new CacheReplies();
    const incoming = Buffer.from('{"id":"x"}');
    r.keep(r.keyOf(req(), 'm', undefined, undefined, undefined, incoming)!, ticket, [], reply);
    incoming.fill(0x20);
    assert.equal(r.get(r.keyOf(req(), 'm', undefined, undefined, undefined, incoming)!), undefined);
    assert.ok(r.get(r.keyOf(req(), 'm', undefined, undefined, undefined, Buffer.from('{"id":"x"}'))!));
  });

  test('replies stay within the budget, least recently used dropped first; oversized ones are not kept', () => {
    const r = new CacheReplies();
    const large = Buffer.alloc(16 * 1024);
    const keys: RequestKey[] = [];
    for (let i = 0; i < 100; i++) {
      const key = r.keyOf(req(), 'm', undefined, undefined, undefined, Buffer.from(`{"id":"${i}"}`))!;
      keys.push(key);
      r.keep(key, ticket, [], large);
      if (i === 50) assert.ok(r.get(keys[0]!), 'the first one is used again');
    }
    assert.ok(r.usedBytes <= BUDGET_BYTES);
    assert.ok(r.size < 100 && r.size > 40, `${r.size} kept`);
    assert.ok(r.get(keys[0]!), 'used again halfway, so it outlived those after it');
    assert.equal(r.get(keys[1]!), undefined);
    assert.ok(r.get(keys[99]!));
    const big = r.keyOf(req(), 'm', undefined, undefined, undefined, Buffer.from('{"id":"big"}'))!;
    r.keep(big, ticket, [], Buffer.alloc(MAX_REPLY_BYTES + 1));
    assert.equal(r.get(big), undefined);
    const before = r.usedBytes;
    r.drop(keys[99]!);
    assert.equal(r.get(keys[99]!), undefined);
    assert.ok(r.usedBytes < before);
  });

  test('requestHash depends on every byte and on the prefix', () => {
    const b = Buffer.alloc(37, 1);
    const h = requestHash('p', b);
    for (let i = 0; i < b.length; i++) {
      const c = Buffer.from(b);
      c[i] = 2;
      assert.notEqual(requestHash('p', c), h, `byte ${i}`);
    }
    assert.notEqual(requestHash('q', b), h);
    assert.notEqual(requestHash('p', b.subarray(1)), h);
    assert.ok(Number.isSafeInteger(h) && h >= 0);
  });
});
