/**
 * The client against servers that misbehave, written here: answers that do
 * not parse, UNAVAILABLE answers it retries (only when asked), a closed
 * port, and the HTTP pool's kept-alive connection.
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { create, toBinary } from '@bufbuild/protobuf';
import * as grpc from '@grpc/grpc-js';
import { ModelInferResponseSchema, ServerMetadataResponseSchema } from '../../src/gen/grpc_service_pb.js';
import { ConnectionError, InferenceClient, InferenceServerError, ProtocolError } from '../../src/client/index.js';

type Reply = { status: number; headers?: Record<string, string>; body: string | Buffer };

/** An HTTP server that answers each request with the next reply of the current script. */
class ScriptedHttpServer {
  readonly server = http.createServer((req, res) => {
    this.requests.push(`${req.method} ${req.url}`);
    this.headers.push(req.headers);
    req.resume();
    req.on('end', () => {
      const reply = this.script.shift() ?? this.fallback;
      res.writeHead(reply.status, {
        'content-length': String(Buffer.byteLength(reply.body)),
        ...(reply.headers ?? {}),
      });
      res.end(reply.body);
    });
  });
  requests: string[] = [];
  headers: http.IncomingHttpHeaders[] = [];
  connections = 0;
  script: Reply[] = [];
  fallback: Reply = { status: 200, body: '{"name":"triton","version":"1","extensions":[]}' };

  async start(): Promise<string> {
    this.server.on('connection', () => this.connections++);
    await new Promise<void>((resolve) => this.server.listen(0, '127.0.0.1', resolve));
    return `http://127.0.0.1:${(this.server.address() as AddressInfo).port}`;
  }

  reset(script: Reply[]): void {
    this.script = script;
    this.requests = [];
    this.headers = [];
  }

  stop(): Promise<void> {
    this.server.closeAllConnections();
    return new Promise((resolve) => this.server.close(() => resolve()));
  }
}

/** An infer answer in the binary format: the JSON header, then `binary`. */
function binaryAnswer(header: object, binary: Buffer, declaredLength?: string): Reply {
  const json = Buffer.from(JSON.stringify(header));
  return {
    status: 200,
    headers: {
      'inference-header-content-length': declaredLength ?? String(json.byteLength),
      'content-type': 'application/octet-stream',
    },
    body: Buffer.concat([json, binary]),
  };
}

const INFER = {
  model: 'm',
  inputs: [{ name: 'X', datatype: 'INT32', shape: [1, 4], data: new Int32Array(4) }],
} as const;

describe('HTTP answers that do not parse, retries and the pool', () => {
  const fake = new ScriptedHttpServer();
  let url: string;
  before(async () => {
    url = await fake.start();
  });
  after(() => fake.stop());

  const out = (size: number) => ({
    model_name: 'm',
    model_version: '1',
    outputs: [{ name: 'Y', datatype: 'INT32', shape: [1, 4], parameters: { binary_data_size: size } }],
  });

  test('each broken answer is a ProtocolError saying what was wrong', async () => {
    const client = new InferenceClient({ url });
    const cases: Array<[Reply, RegExp]> = [
      [{ status: 200, body: 'not json' }, /the answer is not JSON/],
      [
        binaryAnswer(out(16), Buffer.alloc(16), '9999'),
        /Inference-Header-Content-Length "9999" does not fit a body of \d+ bytes/,
      ],
      [
        binaryAnswer(out(8), Buffer.alloc(8)),
        /output 'Y' of the answer has 8 bytes but INT32 of shape \[1,4\] needs 16/,
      ],
      [binaryAnswer(out(16), Buffer.alloc(10)), /output 'Y' declares 16 binary bytes but 10 remain/],
      [binaryAnswer(out(16), Buffer.alloc(20)), /4 bytes after its outputs' binary data/],
      [binaryAnswer({ model_name: 'm', model_version: '1' }, Buffer.alloc(0)), /the answer has no outputs list/],
      [
        binaryAnswer(
          {
            model_name: 'm',
            outputs: [{ name: 'Y', datatype: 'INT33', shape: [4], parameters: { binary_data_size: 16 } }],
          },
          Buffer.alloc(16),
        ),
        /unknown datatype "INT33"/,
      ],
      [
        binaryAnswer(
          {
            model_name: 'm',
            outputs: [{ name: 'Y', datatype: 'INT32', shape: [-4], parameters: { binary_data_size: 16 } }],
          },
          Buffer.alloc(16),
        ),
        /output 'Y' of the answer has a bad shape \[-4\]/,
      ],
      [
        {
          status: 200,
          body: JSON.stringify({
            model_name: 'm',
            outputs: [{ name: 'Y', datatype: 'INT32', shape: [2], data: [1, 'x'] }],
          }),
        },
        /output 'Y' of the answer: .*signed-integer/,
      ],
      [
        {
          status: 200,
          body: JSON.stringify({ model_name: 'm', outputs: [{ name: 'Y', datatype: 'INT32', shape: [2] }] }),
        },
        /output 'Y' has neither data nor binary_data_size/,
      ],
    ];
    for (const [reply, pattern] of cases) {
      fake.reset([reply]);
      await assert.rejects(client.infer(INFER), (err: unknown) => {
        assert.ok(err instanceof ProtocolError, `${pattern}: ${String(err)}`);
        assert.match(err.message, pattern);
        assert.match(err.message, /inference request to model 'm'/);
        return true;
      });
    }
    fake.reset([{ status: 200, body: '[1,2]' }]);
    await assert.rejects(client.serverMetadata(), /server metadata: the answer has no name or version/);
    await client.close();
  });

  test('an error status carries the server message, or the body when it is not JSON', async () => {
    const client = new InferenceClient({ url });
    fake.reset([{ status: 400, body: '{"error":"input is wrong"}' }]);
    await assert.rejects(client.infer(INFER), (err: unknown) => {
      assert.ok(err instanceof InferenceServerError);
      assert.deepEqual(
        [err.status, err.code, err.message, err.protocol],
        [400, 'INVALID_ARGUMENT', 'input is wrong', 'http'],
      );
      return true;
    });
    fake.reset([{ status: 502, body: 'Bad gateway' }]);
    await assert.rejects(client.serverMetadata(), {
      name: 'InferenceServerError',
      status: 502,
      code: 'UNAVAILABLE',
      message: 'HTTP 502: Bad gateway',
    });
    await client.close();
  });

  test('UNAVAILABLE answers are retried with backoff only when asked', async () => {
    const busy: Reply = { status: 503, body: '{"error":"busy"}' };
    const plain = new InferenceClient({ url });
    fake.reset([busy, busy]);
    await assert.rejects(plain.serverMetadata(), { code: 'UNAVAILABLE', message: 'busy' });
    assert.equal(fake.requests.length, 1);

    const retrying = new InferenceClient({ url, retry: { attempts: 3, initialDelay: 5 } });
    fake.reset([busy, busy]);
    assert.equal((await retrying.serverMetadata()).name, 'triton');
    assert.deepEqual(fake.requests, ['GET /v2', 'GET /v2', 'GET /v2']);

    fake.reset([busy, busy, busy]);
    await assert.rejects(retrying.serverMetadata(), { code: 'UNAVAILABLE' });
    assert.equal(fake.requests.length, 3);

    // Other errors are not retried.
    fake.reset([{ status: 400, body: '{"error":"no"}' }]);
    await assert.rejects(retrying.serverMetadata(), { code: 'INVALID_ARGUMENT' });
    assert.equal(fake.requests.length, 1);
    await Promise.all([plain.close(), retrying.close()]);
  });

  test("the client's headers and a call's own go with the request", async () => {
    const client = new InferenceClient({ url, headers: { 'x-api-key': 'k1', 'x-team': 'a' } });
    fake.reset([]);
    await client.serverMetadata();
    await client.serverMetadata({ headers: { 'x-team': 'b', 'x-call': '2' } });
    assert.deepEqual(
      fake.headers.map((h) => [h['x-api-key'], h['x-team'], h['x-call']]),
      [
        ['k1', 'a', undefined],
        ['k1', 'b', '2'],
      ],
    );
    await client.close();
  });

  test('the pool keeps its connection alive across calls', async () => {
    const client = new InferenceClient({ url });
    fake.reset([]);
    const before = fake.connections;
    for (let i = 0; i < 20; i++) await client.serverMetadata();
    // undici may hand the next call to a second connection while the first settles; both are reused.
    const opened = fake.connections - before;
    assert.ok(opened >= 1 && opened <= 2, `20 calls opened ${opened} connections`);
    await client.close();
  });
});

describe('gRPC answers that do not parse and retries', () => {
  let server: grpc.Server;
  let url: string;
  const plan: { metadata: Array<grpc.StatusObject | Buffer>; infer: Array<grpc.StatusObject | Buffer> } = {
    metadata: [],
    infer: [],
  };
  let inferCalls = 0;
  let metadataCalls = 0;
  let lastMetadata: grpc.Metadata | undefined;
  const identity = (b: Buffer) => b;
  const unary = (path: string) => ({
    path,
    requestStream: false,
    responseStream: false,
    requestSerialize: identity,
    requestDeserialize: identity,
    responseSerialize: identity,
    responseDeserialize: identity,
  });

  before(async () => {
    server = new grpc.Server();
    const ok = Buffer.from(
      toBinary(ServerMetadataResponseSchema, create(ServerMetadataResponseSchema, { name: 'triton', version: '1' })),
    );
    server.addService(
      {
        ServerMetadata: unary('/inference.GRPCInferenceService/ServerMetadata'),
        ModelInfer: unary('/inference.GRPCInferenceService/ModelInfer'),
      } as grpc.ServiceDefinition,
      {
        ServerMetadata: (call: grpc.ServerUnaryCall<Buffer, Buffer>, cb: grpc.sendUnaryData<Buffer>) => {
          metadataCalls++;
          lastMetadata = call.metadata;
          const next = plan.metadata.shift();
          if (next === undefined) cb(null, ok);
          else if (Buffer.isBuffer(next)) cb(null, next);
          else cb(next as grpc.ServiceError);
        },
        ModelInfer: (_call: unknown, cb: grpc.sendUnaryData<Buffer>) => {
          inferCalls++;
          const next = plan.infer.shift()!;
          if (Buffer.isBuffer(next)) cb(null, next);
          else cb(next as grpc.ServiceError);
        },
      },
    );
    const port = await new Promise<number>((resolve, reject) =>
      server.bindAsync('127.0.0.1:0', grpc.ServerCredentials.createInsecure(), (err, p) =>
        err ? reject(err) : resolve(p),
      ),
    );
    url = `grpc://127.0.0.1:${port}`;
  });
  after(() => server.forceShutdown());

  test('bytes that are not a message, and outputs that do not fit their shape, are ProtocolErrors', async () => {
    const client = new InferenceClient({ url });
    plan.infer.push(Buffer.from([0xff, 0xff, 0xff, 0xff]));
    await assert.rejects(
      client.infer(INFER),
      (err: unknown) => err instanceof ProtocolError && /does not parse/.test(err.message),
    );
    const short = create(ModelInferResponseSchema, {
      modelName: 'm',
      modelVersion: '1',
      outputs: [{ name: 'Y', datatype: 'INT32', shape: [1n, 4n] }],
      rawOutputContents: [new Uint8Array(6)],
    });
    plan.infer.push(Buffer.from(toBinary(ModelInferResponseSchema, short)));
    await assert.rejects(
      client.infer(INFER),
      /output 'Y' of the answer has 6 bytes but INT32 of shape \[1,4\] needs 16/,
    );
    const missing = create(ModelInferResponseSchema, {
      modelName: 'm',
      outputs: [
        { name: 'Y', datatype: 'INT32', shape: [1n] },
        { name: 'Z', datatype: 'INT32', shape: [1n] },
      ],
      rawOutputContents: [new Uint8Array(4)],
    });
    plan.infer.push(Buffer.from(toBinary(ModelInferResponseSchema, missing)));
    await assert.rejects(client.infer(INFER), /the answer has 2 outputs but 1 raw_output_contents/);
    await client.close();
  });

  test("an inference call's error status is the server's, and UNAVAILABLE is retried when asked", async () => {
    const unavailable = { code: grpc.status.UNAVAILABLE, details: 'model is reloading' } as grpc.StatusObject;
    const notFound = { code: grpc.status.NOT_FOUND, details: "Request for unknown model: 'x'" } as grpc.StatusObject;
    const plain = new InferenceClient({ url });
    plan.infer = [notFound];
    await assert.rejects(plain.infer(INFER), (err: unknown) => {
      assert.ok(err instanceof InferenceServerError);
      assert.deepEqual([err.status, err.code, err.message], [5, 'NOT_FOUND', "Request for unknown model: 'x'"]);
      return true;
    });
    const retrying = new InferenceClient({ url, retry: { attempts: 3, initialDelay: 5 } });
    const answer = create(ModelInferResponseSchema, {
      modelName: 'm',
      outputs: [{ name: 'Y', datatype: 'INT32', shape: [1n] }],
      rawOutputContents: [new Uint8Array(new Int32Array([7]).buffer)],
    });
    plan.infer = [unavailable, unavailable, Buffer.from(toBinary(ModelInferResponseSchema, answer))];
    inferCalls = 0;
    const r = await retrying.infer(INFER);
    assert.deepEqual([inferCalls, r.model, [...(r.outputs[0]!.data as Int32Array)]], [3, 'm', [7]]);
    await Promise.all([plain.close(), retrying.close()]);
  });

  test("the client's headers and a call's own go as metadata", async () => {
    const client = new InferenceClient({ url, headers: { 'X-Api-Key': 'k1' } });
    await client.serverMetadata({ headers: { 'x-call': '2' } });
    assert.deepEqual([lastMetadata?.get('x-api-key'), lastMetadata?.get('x-call')], [['k1'], ['2']]);
    await client.serverMetadata();
    assert.deepEqual([lastMetadata?.get('x-api-key'), lastMetadata?.get('x-call')], [['k1'], []]);
    await client.close();
  });

  test('UNAVAILABLE is retried only when asked; the status and message are the server\'s', async () => {
    const unavailable = { code: grpc.status.UNAVAILABLE, details: 'model is reloading' } as grpc.StatusObject;
    const plain = new InferenceClient({ url });
    plan.metadata = [unavailable];
    metadataCalls = 0;
    await assert.rejects(plain.serverMetadata(), (err: unknown) => {
      assert.ok(err instanceof InferenceServerError);
      assert.deepEqual(
        [err.status, err.code, err.message, err.protocol],
        [14, 'UNAVAILABLE', 'model is reloading', 'grpc'],
      );
      return true;
    });
    assert.equal(metadataCalls, 1);
    const retrying = new InferenceClient({ url, retry: { attempts: 4, initialDelay: 5 } });
    plan.metadata = [unavailable, unavailable, unavailable];
    metadataCalls = 0;
    assert.equal((await retrying.serverMetadata()).name, 'triton');
    assert.equal(metadataCalls, 4);
    await Promise.all([plain.close(), retrying.close()]);
  });
});

test('a closed port is a ConnectionError naming the server, over both protocols', async () => {
  const probe = http.createServer();
  await new Promise<void>((resolve) => probe.listen(0, '127.0.0.1', resolve));
  const port = (probe.address() as AddressInfo).port;
  await new Promise((resolve) => probe.close(resolve));
  for (const url of [`http://127.0.0.1:${port}`, `grpc://127.0.0.1:${port}`]) {
    const client = new InferenceClient({ url, retry: { attempts: 2, initialDelay: 1 } });
    await assert.rejects(client.isLive(), (err: unknown) => {
      assert.ok(err instanceof ConnectionError, `${url}: ${String(err)}`);
      assert.equal(err.code, 'UNAVAILABLE');
      assert.match(err.message, new RegExp(`127\\.0\\.0\\.1:${port}`));
      return true;
    });
    await client.close();
  }
});
