/**
 * The HTTP frontend in front of the real Server with real ONNX models:
 * Triton's "simple" example (INPUT0/INPUT1 INT32[16] -> sum, difference),
 * a BYTES identity model and a raw-input FP32 identity model.
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { Server } from '../../../src/core/server.js';
import { HttpFrontend } from '../../../src/frontends/http/index.js';
import { silentLogger } from '../../../src/logger.js';
import { buildAddSubModel, buildIdentityModel } from '../../helpers/onnx-builder.js';
import { TempRepository } from '../../helpers/repository.js';
import { binaryRequest, call, int32Bytes, int32Values, json, splitBinaryReply, type HttpReply } from './helpers.js';

const MAX_INPUT = 256 * 1024;
const A = Array.from({ length: 16 }, (_, i) => i + 1);
const B = Array.from({ length: 16 }, () => 1);

let repo: TempRepository;
let server: Server;
let frontend: HttpFrontend;
let port: number;

before(async () => {
  const simpleConfig = readFileSync(
    new URL('../../../../examples/model_repository/simple/config.pbtxt', import.meta.url),
    'utf8',
  );
  repo = new TempRepository()
    .config('simple', simpleConfig)
    .file('simple', '1/model.onnx', buildAddSubModel('INT32', 16).toBytes())
    .config(
      'strings',
      `name: "strings"
platform: "onnxruntime_onnx"
max_batch_size: 4
input [ { name: "INPUT0" data_type: TYPE_STRING dims: [ 2 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_STRING dims: [ 2 ] } ]
`,
    )
    .file('strings', '1/model.onnx', buildIdentityModel([{ name: 'INPUT0', datatype: 'BYTES', shape: ['batch', 2] }])
      .toBytes())
    .config(
      'raw_fp32',
      `name: "raw_fp32"
platform: "onnxruntime_onnx"
max_batch_size: 0
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ -1 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ -1 ] } ]
`,
    )
    .file('raw_fp32', '1/model.onnx', buildIdentityModel([{ name: 'INPUT0', datatype: 'FP32', shape: ['n'] }])
      .toBytes())
    .addSub('later');
  server = new Server({
    modelRepositories: [repo.dir],
    modelControlMode: 'explicit',
    loadModels: ['simple', 'strings', 'raw_fp32'],
    logger: silentLogger,
  });
  await server.start();
  frontend = new HttpFrontend(server, { port: 0, address: '127.0.0.1', maxInputSize: MAX_INPUT, logger: silentLogger });
  ({ port } = await frontend.start());
});

after(async () => {
  await frontend?.stop();
  await server?.stop();
  repo?.cleanup();
});

const get = (path: string) => call(port, 'GET', path);
const post = (path: string, body?: string | Buffer, headers?: Record<string, string>) =>
  call(port, 'POST', path, { body, headers });

function assertError(reply: HttpReply, status: number, message?: string | RegExp): void {
  assert.equal(reply.status, status, reply.body.toString());
  const body = json(reply) as { error: string };
  assert.equal(typeof body.error, 'string');
  if (typeof message === 'string') assert.equal(body.error, message);
  else if (message !== undefined) assert.match(body.error, message);
}

async function assertStillReady(): Promise<void> {
  const r = await get('/v2/health/ready');
  assert.equal(r.status, 200, 'the server stays ready');
  const infer = await post('/v2/models/simple/infer', JSON.stringify(simpleJson(A, B)));
  assert.equal(infer.status, 200, 'and still serves');
}

function simpleJson(a: number[], b: number[], shape: number[] = [1, 16]) {
  return {
    inputs: [
      { name: 'INPUT0', datatype: 'INT32', shape, data: a },
      { name: 'INPUT1', datatype: 'INT32', shape, data: b },
    ],
  };
}

type Output = {
  name: string;
  datatype: string;
  shape: number[];
  data?: unknown[];
  parameters?: Record<string, unknown>;
};

describe('every endpoint with the simple model', () => {
  test('health, server metadata, model metadata, ready, config', async () => {
    assert.equal((await get('/v2/health/live')).status, 200);
    assert.equal((await get('/v2/health/ready')).status, 200);
    assert.equal((json(await get('/v2')) as { name: string }).name, 'triton');
    const md = json(await get('/v2/models/simple')) as { versions: string[]; platform: string; inputs: Output[] };
    assert.deepEqual(md.versions, ['1']);
    assert.equal(md.platform, 'onnxruntime_onnx');
    assert.deepEqual(md.inputs[0], { name: 'INPUT0', datatype: 'INT32', shape: [-1, 16] });
    assert.equal((await get('/v2/models/simple/ready')).status, 200);
    assert.equal((await get('/v2/models/simple/versions/1/ready')).status, 200);
    const cfg = json(await get('/v2/models/simple/config')) as {
      name: string;
      max_batch_size: number;
      input: Array<{ dims: number[] }>;
    };
    assert.equal(cfg.name, 'simple');
    assert.equal(cfg.max_batch_size, 8);
    assert.deepEqual(cfg.input[0]!.dims, [16]);
  });

  test('JSON infer: OUTPUT0 is the sum, OUTPUT1 the difference', async () => {
    const r = await post('/v2/models/simple/infer', JSON.stringify({ id: 'q1', ...simpleJson(A, B) }));
    assert.equal(r.status, 200, r.body.toString());
    const body = json(r) as { id: string; model_version: string; outputs: Output[] };
    assert.equal(body.id, 'q1');
    assert.equal(body.model_version, '1');
    assert.deepEqual(body.outputs.map((o) => o.name), ['OUTPUT0', 'OUTPUT1']);
    assert.deepEqual(body.outputs[0]!.data, A.map((x) => x + 1));
    assert.deepEqual(body.outputs[1]!.data, A.map((x) => x - 1));
    assert.deepEqual(body.outputs[0]!.shape, [1, 16]);
  });

  test('binary infer with a batch of 2', async () => {
    const a2 = [...A, ...A];
    const b2 = [...B, ...B.map((x) => x * 2)];
    const { body, headers } = binaryRequest(
      {
        inputs: [
          { name: 'INPUT0', datatype: 'INT32', shape: [2, 16], parameters: { binary_data_size: 128 } },
          { name: 'INPUT1', datatype: 'INT32', shape: [2, 16], parameters: { binary_data_size: 128 } },
        ],
        parameters: { binary_data_output: true },
      },
      [int32Bytes(a2), int32Bytes(b2)],
    );
    const r = await post('/v2/models/simple/infer', body, headers);
    assert.equal(r.status, 200, r.body.toString());
    assert.equal(r.headers['content-type'], 'application/octet-stream');
    const { header, binary } = splitBinaryReply(r);
    assert.deepEqual(header.outputs.map((o: Output) => o.parameters!['binary_data_size']), [128, 128]);
    const values = int32Values(binary);
    assert.deepEqual(values.slice(0, 32), a2.map((x, i) => x + b2[i]!));
    assert.deepEqual(values.slice(32), a2.map((x, i) => x - b2[i]!));
  });

  test('classification of an output', async () => {
    const r = await post(
      '/v2/models/simple/infer',
      JSON.stringify({ ...simpleJson(A, B), outputs: [{ name: 'OUTPUT0', parameters: { classification: 3 } }] }),
    );
    assert.equal(r.status, 200, r.body.toString());
    const out = (json(r) as { outputs: Output[] }).outputs[0]!;
    assert.equal(out.datatype, 'BYTES');
    assert.deepEqual(out.shape, [1, 3]);
    assert.deepEqual(out.data, ['17:15', '16:14', '15:13']);
  });

  test('BYTES model over JSON and binary', async () => {
    const r = await post(
      '/v2/models/strings/infer',
      JSON.stringify({ inputs: [{ name: 'INPUT0', datatype: 'BYTES', shape: [1, 2], data: ['ab', 'cdé'] }] }),
    );
    assert.equal(r.status, 200, r.body.toString());
    assert.deepEqual((json(r) as { outputs: Output[] }).outputs[0]!.data, ['ab', 'cdé']);
    const bytes = Buffer.concat([Buffer.from([1, 0, 0, 0]), Buffer.from('x'), Buffer.from([0, 0, 0, 0])]);
    const { body, headers } = binaryRequest(
      {
        inputs: [
          { name: 'INPUT0', datatype: 'BYTES', shape: [1, 2], parameters: { binary_data_size: bytes.byteLength } },
        ],
        outputs: [{ name: 'OUTPUT0', parameters: { binary_data: true } }],
      },
      [bytes],
    );
    const rb = await post('/v2/models/strings/infer', body, headers);
    assert.equal(rb.status, 200, rb.body.toString());
    assert.deepEqual(splitBinaryReply(rb).binary, bytes);
  });

  test('raw binary request', async () => {
    const bytes = Buffer.from(new Float32Array([1.5, 2.5, -3]).buffer);
    const r = await post('/v2/models/raw_fp32/infer', bytes, { 'Inference-Header-Content-Length': '0' });
    assert.equal(r.status, 200, r.body.toString());
    const { header, binary } = splitBinaryReply(r);
    assert.deepEqual(header.outputs[0].shape, [3]);
    assert.deepEqual(binary, bytes);
  });

  test('statistics', async () => {
    const one = json(await get('/v2/models/simple/stats')) as {
      model_stats: Array<{ name: string; inference_count: number }>;
    };
    assert.equal(one.model_stats[0]!.name, 'simple');
    assert.ok(one.model_stats[0]!.inference_count > 0);
    const all = json(await get('/v2/models/stats')) as { model_stats: Array<{ name: string }> };
    assert.ok(all.model_stats.some((s) => s.name === 'strings'));
    assertError(await get('/v2/models/later/stats'), 400, "requested model 'later' is not available");
  });

  test('shared memory, trace and logging endpoints', async () => {
    assert.equal((await get('/v2/systemsharedmemory/status')).body.toString(), '[]');
    assert.equal((await get('/v2/cudasharedmemory/status')).body.toString(), '[]');
    assertError(await post('/v2/systemsharedmemory/region/r/register', '{}'), 501, /Client shared memory is disabled/);
    assert.equal((await get('/v2/trace/setting')).status, 200);
    assert.equal((await get('/v2/models/simple/trace/setting')).status, 200);
    assert.equal((json(await get('/v2/logging')) as { log_info: boolean }).log_info, true);
  });
});

describe('bad inputs to the simple model leave the server ready', () => {
  const infer = (body: string | Buffer, headers?: Record<string, string>) =>
    post('/v2/models/simple/infer', body, headers);
  const one = (name: string, datatype = 'INT32', shape = [1, 16], data: unknown[] = A) => ({
    name,
    datatype,
    shape,
    data,
  });
  const cases: Array<{ name: string; send: () => Promise<HttpReply>; status: number; message?: string | RegExp }> = [
    {
      name: 'malformed JSON',
      send: () => infer('{"inputs": [ {"name": "INPUT0",, }'),
      status: 500,
      message: /^failed to parse the request JSON buffer: /,
    },
    {
      name: 'unknown model',
      send: () => post('/v2/models/nope/infer', '{}'),
      status: 404,
      message: "Request for unknown model: 'nope' is not found",
    },
    {
      name: 'unknown version',
      send: () => post('/v2/models/simple/versions/3/infer', JSON.stringify(simpleJson(A, B))),
      status: 404,
      message: /'simple' version 3 is not found/,
    },
    {
      name: 'missing input',
      send: () => infer(JSON.stringify({ inputs: [one('INPUT0')] })),
      status: 400,
      message: /expected 2 inputs but got 1 inputs for model 'simple'/,
    },
    {
      name: 'extra input',
      send: () => infer(JSON.stringify({ inputs: [one('INPUT0'), one('INPUT1'), one('INPUT2')] })),
      status: 400,
    },
    {
      name: 'duplicated input',
      send: () => infer(JSON.stringify({ inputs: [one('INPUT0'), one('INPUT0'), one('INPUT1')] })),
      status: 400,
    },
    {
      name: 'wrong datatype',
      send: () => infer(JSON.stringify({ inputs: [one('INPUT0', 'FP32'), one('INPUT1')] })),
      status: 400,
      message: /data-type is 'FP32', but model 'simple' expects 'INT32'/,
    },
    {
      name: 'shape not matching the config',
      send: () => infer(JSON.stringify(simpleJson(A.slice(0, 15), B.slice(0, 15), [1, 15]))),
      status: 400,
      message: /unexpected shape for input 'INPUT0' for model 'simple'/,
    },
    {
      name: 'too few elements for the shape',
      send: () => infer(JSON.stringify(simpleJson(A.slice(0, 15), B))),
      status: 500,
      message: "Failed to parse 'data' field: shape does not match true shape",
    },
    {
      name: 'too many elements for the shape',
      send: () => infer(JSON.stringify(simpleJson([...A, 17, 18], B))),
      status: 500,
      message: "Unable to parse 'data': Shape does not match true shape of 'data' field",
    },
    {
      name: 'binary header absent',
      send: () =>
        infer(
          JSON.stringify({
            inputs: [
              { name: 'INPUT0', datatype: 'INT32', shape: [1, 16], parameters: { binary_data_size: 64 } },
              one('INPUT1'),
            ],
          }),
        ),
      status: 400,
      message: "unexpected size for input 'INPUT0', expecting 64 additional bytes for model 'simple'",
    },
    {
      name: 'binary header negative',
      send: () => infer(JSON.stringify(simpleJson(A, B)), { 'Inference-Header-Content-Length': '-1' }),
      status: 400,
      message: /^inference header size should be in range \(0, \d+\), got: -1$/,
    },
    {
      name: 'binary header non-numeric',
      send: () => infer(JSON.stringify(simpleJson(A, B)), { 'Inference-Header-Content-Length': 'x12' }),
      status: 400,
      message: 'Unable to parse Inference-Header-Content-Length, got: x12',
    },
    {
      name: 'binary header larger than the body',
      send: () => infer(JSON.stringify(simpleJson(A, B)), { 'Inference-Header-Content-Length': '100000' }),
      status: 400,
      message: /^inference header size should be in range/,
    },
    {
      name: 'leftover binary bytes',
      send: () => {
        const r = binaryRequest(
          {
            inputs: [
              { name: 'INPUT0', datatype: 'INT32', shape: [1, 16], parameters: { binary_data_size: 64 } },
              one('INPUT1'),
            ],
          },
          [int32Bytes([...A, 99])],
        );
        return infer(r.body, r.headers);
      },
      status: 400,
      message: "unexpected additional input data for model 'simple'",
    },
    {
      name: 'missing binary bytes',
      send: () => {
        const r = binaryRequest(
          {
            inputs: [
              { name: 'INPUT0', datatype: 'INT32', shape: [1, 16], parameters: { binary_data_size: 64 } },
              one('INPUT1'),
            ],
          },
          [int32Bytes(A.slice(0, 10))],
        );
        return infer(r.body, r.headers);
      },
      status: 400,
      message: "unexpected size for input 'INPUT0', expecting 24 additional bytes for model 'simple'",
    },
    {
      name: 'binary byte size not matching the shape',
      send: () => {
        const r = binaryRequest(
          {
            inputs: [
              { name: 'INPUT0', datatype: 'INT32', shape: [1, 16], parameters: { binary_data_size: 60 } },
              one('INPUT1'),
            ],
          },
          [int32Bytes(A.slice(0, 15))],
        );
        return infer(r.body, r.headers);
      },
      status: 400,
    },
    {
      name: 'BYTES element with a bad length prefix',
      send: () => {
        const bad = Buffer.concat([
          Buffer.from([1, 0, 0, 0]),
          Buffer.from('x'),
          Buffer.from([200, 0, 0, 0]),
          Buffer.from('y'),
        ]);
        const r = binaryRequest(
          {
            inputs: [
              { name: 'INPUT0', datatype: 'BYTES', shape: [1, 2], parameters: { binary_data_size: bad.byteLength } },
            ],
          },
          [bad],
        );
        return post('/v2/models/strings/infer', r.body, r.headers);
      },
      status: 400,
    },
    {
      name: 'BYTES element count not matching the shape (400, found by the core)',
      send: () =>
        post(
          '/v2/models/strings/infer',
          JSON.stringify({ inputs: [{ name: 'INPUT0', datatype: 'BYTES', shape: [1, 2], data: ['only one'] }] }),
        ),
      status: 400,
      message: /expected 2 string elements for inference input 'INPUT0'/,
    },
    {
      name: 'oversized body',
      send: () => infer(Buffer.alloc(MAX_INPUT + 10, 0x20)),
      status: 400,
      message: /exceeds the maximum allowed input size of 262144 bytes/,
    },
  ];
  for (const c of cases) {
    test(c.name, async () => {
      assertError(await c.send(), c.status, c.message);
      await assertStillReady();
    });
  }
});

describe('model repository control', () => {
  test('repository index, load and unload', async () => {
    const index = json(await post('/v2/repository/index')) as Array<{ name: string; state?: string }>;
    assert.equal(index.find((e) => e.name === 'simple')!.state, 'READY');
    assert.deepEqual(index.find((e) => e.name === 'later'), { name: 'later' });
    assertError(await get('/v2/models/later/ready'), 404);
    assert.equal((await post('/v2/repository/models/later/load')).status, 200);
    assert.equal((await get('/v2/models/later/ready')).status, 200);
    assert.equal((await post('/v2/repository/models/later/unload')).status, 200);
    assert.notEqual((await get('/v2/models/later/ready')).status, 200);
    // Triton's strict readiness ignores versions that are unavailable because they were unloaded.
    assert.equal((await get('/v2/health/ready')).status, 200, 'an explicit unload leaves the server ready');
    assert.equal((await post('/v2/repository/models/never_heard_of/unload')).status, 200);
  });
});
