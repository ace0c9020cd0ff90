/** The HTTP frontend over real HTTP, against an echoing ServerApi double. */
import { Cancellation } from '../../../src/types/cancellation.js';
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import http from 'node:http';
import { existsSync } from 'node:fs';
import { gunzipSync, gzipSync, deflateSync } from 'node:zlib';
import { HttpFrontend } from '../../../src/frontends/http/index.js';
import { silentLogger } from '../../../src/logger.js';
import { EchoServer } from './echo-server.js';
import { binaryRequest, call, int32Bytes, int32Values, json, splitBinaryReply, type HttpReply } from './helpers.js';

const MAX_INPUT = 64 * 1024;

let core: EchoServer;
let frontend: HttpFrontend;
let port: number;

before(async () => {
  core = new EchoServer();
  frontend = new HttpFrontend(core, { port: 0, address: '127.0.0.1', maxInputSize: MAX_INPUT, logger: silentLogger });
  ({ port } = await frontend.start());
});

after(async () => {
  await frontend.stop();
});

const get = (path: string, headers?: Record<string, string>) => call(port, 'GET', path, { headers });
const post = (path: string, body?: string | Buffer, headers?: Record<string, string>) =>
  call(port, 'POST', path, { body, headers });

function assertError(reply: HttpReply, status: number, message: string | RegExp): void {
  assert.equal(reply.status, status, reply.body.toString());
  assert.equal(reply.headers['content-type'], 'application/json');
  const body = json(reply) as { error: string };
  if (typeof message === 'string') assert.equal(body.error, message);
  else assert.match(body.error, message);
}

async function assertStillReady(): Promise<void> {
  const r = await get('/v2/health/ready');
  assert.equal(r.status, 200);
}

const simpleInputs = (a: number[], b?: number[]) => ({
  inputs: [
    { name: 'INPUT0', datatype: 'INT32', shape: [a.length], data: a },
    ...(b === undefined ? [] : [{ name: 'INPUT1', datatype: 'INT32', shape: [b.length], data: b }]),
  ],
});

describe('health and metadata', () => {
  test('health probes answer 200 with an empty body, 400 when not live/ready', async () => {
    for (const path of ['/v2/health/live', '/v2/health/ready']) {
      const r = await get(path);
      assert.equal(r.status, 200);
      assert.equal(r.body.byteLength, 0);
    }
    core.ready = false;
    core.live = false;
    try {
      for (const path of ['/v2/health/live', '/v2/health/ready']) {
        const r = await get(path);
        assert.equal(r.status, 400);
        assert.equal(r.body.byteLength, 0);
      }
    } finally {
      core.ready = true;
      core.live = true;
    }
  });

  test('server metadata', async () => {
    const r = await get('/v2');
    assert.equal(r.status, 200);
    assert.equal(r.headers['content-type'], 'application/json');
    assert.equal(
      r.body.toString(),
      '{"name":"triton","version":"2.50.0","extensions":["classification","binary_tensor_data","statistics"]}',
    );
  });

  test('model metadata, with and without a version; unknown model is 404', async () => {
    const r = await get('/v2/models/echo');
    assert.equal(r.status, 200);
    assert.deepEqual(Object.keys(json(r) as object), ['name', 'versions', 'platform', 'inputs', 'outputs']);
    assert.equal((await get('/v2/models/echo/versions/1')).status, 200);
    assert.equal((await get('/v2/models/echo/versions/001')).status, 200, 'version digits are read as a number');
    assertError(await get('/v2/models/nope'), 404, "Request for unknown model: 'nope' is not found");
    assertError(
      await get('/v2/models/echo/versions/7'),
      404,
      "Request for unknown model: 'echo' version 7 is not found",
    );
  });

  test('model ready: 200, 404 unknown, 503 version not ready, 400 when the instance says no', async () => {
    const ok = await get('/v2/models/echo/ready');
    assert.equal(ok.status, 200);
    assert.equal(ok.body.byteLength, 0);
    assertError(await get('/v2/models/nope/ready'), 404, "Request for unknown model: 'nope' is not found");
    assertError(
      await get('/v2/models/echo/versions/2/ready'),
      503,
      "Request for unknown model: 'echo' version 2 is not at ready state",
    );
    assertError(await get('/v2/models/unhealthy/ready'), 400, 'Model version not ready');
  });

  test('model config is served as JSON', async (t) => {
    if (!existsSync(new URL('../../../src/config/index.js', import.meta.url))) {
      t.skip('the config module is not built yet');
      return;
    }
    const r = await get('/v2/models/echo/config');
    assert.equal(r.status, 200);
    assert.equal((json(r) as { name: string }).name, 'echo');
    assertError(await get('/v2/models/nope/config'), 404, "Request for unknown model: 'nope' is not found");
  });

  test('statistics: all models, one model, unknown model', async () => {
    const all = json(await get('/v2/models/stats')) as { model_stats: Array<{ name: string }> };
    assert.deepEqual(all.model_stats.map((s) => s.name), ['echo', 'raw_fp32']);
    const one = json(await get('/v2/models/echo/stats')) as { model_stats: Array<{ name: string }> };
    assert.deepEqual(one.model_stats.map((s) => s.name), ['echo']);
    assertError(await get('/v2/models/nope/stats'), 400, "requested model 'nope' is not available");
  });
});

describe('routing', () => {
  test('unmatched paths are 404 Not Found; a version that is not an integer > 0 is a 400 saying so', async () => {
    for (const path of ['/', '/v1', '/v2/models', '/v2/models/echo/versions/1/trace/setting', '/v2/health/other']) {
      assertError(await get(path), 404, 'Not Found');
    }
    assertError(
      await get('/v2/models/echo/versions/abc'),
      400,
      /^failed to get model version from specified version string 'abc'/,
    );
  });

  test('the query string is ignored', async () => {
    assert.equal((await get('/v2/health/ready?x=1')).status, 200);
  });

  test('known paths with the wrong method are 405 Method Not Allowed', async () => {
    const cases: Array<[string, string]> = [
      ['POST', '/v2/health/live'],
      ['POST', '/v2'],
      ['POST', '/v2/models/echo'],
      ['POST', '/v2/models/echo/ready'],
      ['POST', '/v2/models/echo/config'],
      ['POST', '/v2/models/echo/stats'],
      ['POST', '/v2/models/stats'],
      ['GET', '/v2/models/echo/infer'],
      ['GET', '/v2/repository/index'],
      ['GET', '/v2/repository/models/echo/load'],
      ['POST', '/v2/systemsharedmemory/status'],
      ['GET', '/v2/cudasharedmemory/region/r/register'],
      ['PUT', '/v2/logging'],
      ['DELETE', '/v2/trace/setting'],
    ];
    for (const [method, path] of cases) {
      assertError(await call(port, method, path), 405, 'Method Not Allowed');
    }
  });

  test('connections are kept alive between requests', async () => {
    const agent = new http.Agent({ keepAlive: true, maxSockets: 1 });
    try {
      await call(port, 'GET', '/v2/health/live', { agent });
      const second = await call(port, 'GET', '/v2/health/live', { agent });
      assert.equal(second.reusedSocket, true);
    } finally {
      agent.destroy();
    }
  });
});

describe('model repository', () => {
  test('index lists models; ready filter; bad ready value is 400', async () => {
    const all = await post('/v2/repository/index');
    assert.equal(all.status, 200);
    assert.equal(all.body.toString(), '[{"name":"echo","version":"1","state":"READY"},{"name":"never_loaded"}]');
    const ready = json(await post('/v2/repository/index', '{"ready":true}')) as unknown[];
    assert.equal(ready.length, 1);
    assertError(
      await post('/v2/repository/index', '{"ready":"yes"}'),
      400,
      "Invalid value for 'ready': expected a boolean",
    );
    assertError(await post('/v2/repository/index', '{"ready":'), 500, /^failed to parse the request JSON buffer: /);
    assertError(await post('/v2/repository/myrepo/index'), 400, "no model repository named 'myrepo'");
    assert.equal((await post('/v2/repository/models/index')).status, 200, 'a known repository name scopes the index');
  });

  test('load passes config and base64 file overrides; failures keep their status', async () => {
    const r = await post(
      '/v2/repository/models/echo/load',
      JSON.stringify({
        parameters: {
          config: '{"backend":"onnxruntime"}',
          'file:1/model.onnx': Buffer.from('abc').toString('base64'),
        },
      }),
    );
    assert.equal(r.status, 200);
    assert.equal(r.body.byteLength, 0);
    const last = core.loads.at(-1)!;
    assert.equal(last.name, 'echo');
    assert.equal(last.options?.config, '{"backend":"onnxruntime"}');
    assert.equal(Buffer.from(last.options!.files!['file:1/model.onnx']!).toString(), 'abc');

    assert.equal((await post('/v2/repository/models/echo/load')).status, 200, 'an empty body is fine');
    assert.equal(core.loads.at(-1)!.options, undefined);
    assertError(
      await post('/v2/repository/models/broken/load'),
      400,
      "load failed for model 'broken': no such backend",
    );
    assertError(
      await post('/v2/repository/models/echo/load', '{"parameters":{"config":{}}}'),
      500,
      'attempt to access JSON non-string as string',
    );
    assertError(
      await post('/v2/repository/models/echo/load', '{"parameters":{"other":"x"}}'),
      500,
      'unexpected error on creating Triton parameter',
    );
    assertError(await post('/v2/repository/myrepo/models/echo/load'), 400, "no model repository named 'myrepo'");
    assert.equal((await post('/v2/repository/models/models/echo/load')).status, 200);
    assert.equal(core.loads.at(-1)!.options?.repository, 'models');
  });

  test('unload passes unload_dependents', async () => {
    assert.equal(
      (await post('/v2/repository/models/echo/unload', '{"parameters":{"unload_dependents":true}}')).status,
      200,
    );
    assert.deepEqual(core.unloads.at(-1), { name: 'echo', unloadDependents: true });
    assert.equal((await post('/v2/repository/models/unknown/unload')).status, 200);
    assert.deepEqual(core.unloads.at(-1), { name: 'unknown', unloadDependents: false });
  });
});

describe('shared memory, trace and logging', () => {
  test('shared memory status is empty; register/unregister say client shm is disabled', async () => {
    for (const kind of ['systemsharedmemory', 'cudasharedmemory']) {
      const r = await get(`/v2/${kind}/status`);
      assert.equal(r.status, 200);
      assert.equal(r.body.toString(), '[]');
      const disabled = "Client shared memory is disabled. Start the server with '--allow-client-shm=true' to enable.";
      assertError(await post(`/v2/${kind}/region/r1/register`, '{"key":"k","byte_size":4}'), 501, disabled);
      assertError(await post(`/v2/${kind}/unregister`), 501, disabled);
    }
    assertError(
      await get('/v2/systemsharedmemory/region/r1/status'),
      404,
      "Unable to find system shared memory region: 'r1'",
    );
    assertError(
      await get('/v2/cudasharedmemory/region/r1/status'),
      404,
      "Unable to find cuda shared memory region: 'r1'",
    );
  });

  test('trace settings: defaults, update, model override, errors', async () => {
    const defaults = await get('/v2/trace/setting');
    assert.equal(
      defaults.body.toString(),
      '{"trace_level":["OFF"],"trace_rate":"1000","trace_count":"-1","log_frequency":"0",' +
        '"trace_file":"","trace_mode":"triton"}',
    );
    // Without a trace file (Triton mode) a level that traces is refused, as Triton refuses it.
    assertError(
      await post('/v2/models/echo/trace/setting', '{"trace_level":["TIMESTAMPS"],"trace_rate":"5"}'),
      400,
      'Attempting to set invalid trace setting :trace file name is not given',
    );
    const updated = json(await post('/v2/models/echo/trace/setting', '{"trace_rate":"5"}')) as Record<string, unknown>;
    assert.deepEqual(updated['trace_level'], ['OFF']);
    assert.equal(updated['trace_rate'], '5');
    assert.equal(
      (json(await get('/v2/trace/setting')) as Record<string, unknown>)['trace_rate'],
      '1000',
      'the global setting is unchanged',
    );
    const cleared = json(await post('/v2/models/echo/trace/setting', '{"trace_rate":null}')) as Record<string, unknown>;
    assert.equal(cleared['trace_rate'], '1000');
    assertError(
      await post('/v2/trace/setting', '{"trace_file":"x"}'),
      501,
      'trace file location can not be updated through network protocol',
    );
    assertError(await post('/v2/trace/setting', '{"trace_rate":"abc"}'), 400, "Unable to parse 'trace_rate', got: abc");
    assertError(
      await post('/v2/trace/setting', '{"trace_level":["OFF","TENSORS"]}'),
      400,
      "Expect only one trace level 'OFF' is specified",
    );
    assertError(await get('/v2/models/unhealthy/trace/setting'), 400, 'Request for unknown model : unhealthy');
    assertError(await get('/v2/models/nope/trace/setting'), 404, "Request for unknown model: 'nope' is not found");
  });

  test('logging settings: Triton defaults, documented keys, log_file refused', async () => {
    const defaults = await get('/v2/logging');
    assert.equal(
      defaults.body.toString(),
      '{"log_file":"","log_info":true,"log_warning":true,"log_error":true,' +
        '"log_verbose_level":0,"log_format":"default"}',
    );
    const updated = json(
      await post('/v2/logging', '{"log_info":false,"log_verbose_level":2,"log_format":"ISO8601"}'),
    ) as Record<string, unknown>;
    assert.equal(updated['log_info'], false);
    assert.equal(updated['log_verbose_level'], 2);
    assert.equal(updated['log_format'], 'ISO8601');
    assertError(
      await post('/v2/logging', '{"log_file":"/tmp/x"}'),
      501,
      'log file location can not be updated through network protocol',
    );
    assertError(await post('/v2/logging', '{"log_format":"xml"}'), 503, 'invalid argument for --log_format, got: xml');
    assertError(await post('/v2/logging', '{"log_info":1}'), 500, 'attempt to access JSON non-boolean as boolean');
    assertError(await post('/v2/logging'), 500, 'failed to parse the request JSON buffer: The document is empty. at 0');
    await post('/v2/logging', '{"log_info":true,"log_verbose_level":0,"log_format":"default"}');
  });
});

describe('infer', () => {
  test('JSON in, JSON out, id echoed, keys in Triton order', async () => {
    const r = await post('/v2/models/echo/infer', JSON.stringify({ id: 'abc', ...simpleInputs([1, 2, 3]) }));
    assert.equal(r.status, 200);
    assert.equal(r.headers['content-type'], 'application/json');
    assert.equal(
      r.body.toString(),
      '{"id":"abc","model_name":"echo","model_version":"1",' +
        '"outputs":[{"name":"OUTPUT0","datatype":"INT32","shape":[3],"data":[1,2,3]}]}',
    );
  });

  test('every JSON datatype round-trips; nested data is flattened', async () => {
    const inputs = [
      { name: 'B', datatype: 'BOOL', shape: [2], data: [true, false] },
      { name: 'U8', datatype: 'UINT8', shape: [2], data: [0, 255] },
      { name: 'U16', datatype: 'UINT16', shape: [1], data: [65535] },
      { name: 'U32', datatype: 'UINT32', shape: [1], data: [4294967295] },
      { name: 'U64', datatype: 'UINT64', shape: [1], data: [1099511627776] },
      { name: 'I8', datatype: 'INT8', shape: [1], data: [-128] },
      { name: 'I16', datatype: 'INT16', shape: [1], data: [-32768] },
      { name: 'I32', datatype: 'INT32', shape: [2, 2], data: [[1, 2], [3, 4]] },
      { name: 'I64', datatype: 'INT64', shape: [1], data: [-1099511627776] },
      { name: 'F32', datatype: 'FP32', shape: [2], data: [1.5, 2] },
      { name: 'F64', datatype: 'FP64', shape: [2], data: [0.1, -3] },
      { name: 'S', datatype: 'BYTES', shape: [2], data: ['hello', 'wörld'] },
    ];
    const r = await post('/v2/models/echo/infer', JSON.stringify({ inputs }));
    assert.equal(r.status, 200, r.body.toString());
    const outputs = (json(r) as { outputs: Array<{ datatype: string; shape: number[]; data: unknown[] }> }).outputs;
    assert.deepEqual(
      outputs.map((o) => o.data),
      [
        [true, false],
        [0, 255],
        [65535],
        [4294967295],
        [1099511627776],
        [-128],
        [-32768],
        [1, 2, 3, 4],
        [-1099511627776],
        [1.5, 2],
        [0.1, -3],
        ['hello', 'wörld'],
      ],
    );
    assert.deepEqual(outputs[7]!.shape, [2, 2]);
    assert.match(r.body.toString(), /"data":\[1\.5,2\.0\]/, 'FP32 prints like Triton');
  });

  test('64-bit integers beyond 2^53 round-trip exactly through JSON', async () => {
    const r = await post(
      '/v2/models/echo/infer',
      '{"inputs":[{"name":"A","datatype":"INT64","shape":[2],"data":[9007199254740993,-9223372036854775808]},' +
        '{"name":"B","datatype":"UINT64","shape":[1],"data":[18446744073709551615]}]}',
    );
    assert.equal(r.status, 200, r.body.toString());
    assert.match(r.body.toString(), /"data":\[9007199254740993,-9223372036854775808\]/);
    assert.match(r.body.toString(), /"data":\[18446744073709551615\]/);
  });

  test('binary inputs and outputs (Inference-Header-Content-Length)', async () => {
    const { body, headers } = binaryRequest(
      {
        inputs: [
          { name: 'INPUT0', datatype: 'INT32', shape: [4], parameters: { binary_data_size: 16 } },
          { name: 'INPUT1', datatype: 'INT32', shape: [2], parameters: { binary_data_size: 8 } },
        ],
        outputs: [
          { name: 'OUTPUT1', parameters: { binary_data: true } },
          { name: 'OUTPUT0', parameters: { binary_data: true } },
        ],
      },
      [int32Bytes([1, 2, 3, 4]), int32Bytes([5, 6])],
    );
    const r = await post('/v2/models/echo/infer', body, headers);
    assert.equal(r.status, 200, r.body.toString());
    assert.equal(r.headers['content-type'], 'application/octet-stream');
    assert.equal(Number(r.headers['content-length']), r.body.byteLength);
    const { header, binary } = splitBinaryReply(r);
    assert.deepEqual(header.outputs, [
      { name: 'OUTPUT1', datatype: 'INT32', shape: [2], parameters: { binary_data_size: 8 } },
      { name: 'OUTPUT0', datatype: 'INT32', shape: [4], parameters: { binary_data_size: 16 } },
    ]);
    assert.deepEqual(int32Values(binary), [5, 6, 1, 2, 3, 4]);
  });

  test('binary_data_output applies only to outputs not listed', async () => {
    const r = await post(
      '/v2/models/echo/infer',
      JSON.stringify({
        parameters: { binary_data_output: true },
        ...simpleInputs([1, 2], [3, 4]),
        outputs: [{ name: 'OUTPUT0' }],
      }),
    );
    assert.equal(r.headers['content-type'], 'application/json');
    assert.match(r.body.toString(), /"data":\[1,2\]/);
    const all = await post(
      '/v2/models/echo/infer',
      JSON.stringify({ parameters: { binary_data_output: true }, ...simpleInputs([1, 2], [3, 4]) }),
    );
    assert.equal(all.headers['content-type'], 'application/octet-stream');
    assert.deepEqual(int32Values(splitBinaryReply(all).binary), [1, 2, 3, 4]);
  });

  test('raw binary request (header 0) derives the input and returns binary outputs', async () => {
    const bytes = Buffer.from(new Float32Array([1, 2, 3, 4]).buffer);
    const r = await post('/v2/models/raw_fp32/infer', bytes, { 'Inference-Header-Content-Length': '0' });
    assert.equal(r.status, 200, r.body.toString());
    assert.deepEqual(core.lastRequest!.inputs[0]!.shape, [1, 4]);
    const { header, binary } = splitBinaryReply(r);
    assert.equal(header.outputs[0].parameters.binary_data_size, 16);
    assert.deepEqual(binary, bytes);
  });

  test('request parameters, classification and a cancellation signal reach the core', async () => {
    const r = await post(
      '/v2/models/echo/infer',
      JSON.stringify({
        parameters: { priority: 2, sequence_id: 'seq', custom: 1.5, echo_parameters: true },
        ...simpleInputs([1]),
        outputs: [{ name: 'OUTPUT0', parameters: { classification: 2 } }],
      }),
    );
    assert.equal(r.status, 200, r.body.toString());
    const req = core.lastRequest!;
    assert.deepEqual(req.parameters, { priority: 2, sequence_id: 'seq', custom: 1.5, echo_parameters: true });
    assert.deepEqual(req.outputs, [{ name: 'OUTPUT0', classification: 2 }]);
    assert.ok(req.signal instanceof Cancellation);
    assert.match(
      r.body.toString(),
      new RegExp(
        String.raw`^\{"model_name":"echo","model_version":"1","parameters":\{"flag":true,"count":3,"label":"x","ratio` +
        String.raw`":0.25\},"outputs"`,
      ),
    );
  });

  test('gzip and deflate request bodies are inflated; unknown encodings are 501', async () => {
    const body = JSON.stringify(simpleInputs([7, 8]));
    for (const [encoding, packed] of [['gzip', gzipSync(body)], ['deflate', deflateSync(body)]] as const) {
      const r = await post('/v2/models/echo/infer', packed, { 'Content-Encoding': encoding });
      assert.equal(r.status, 200, r.body.toString());
      assert.match(r.body.toString(), /"data":\[7,8\]/);
    }
    const bad = await post('/v2/models/echo/infer', body, { 'Content-Encoding': 'br' });
    assertError(bad, 501, 'Unsupported compression type');
    assert.equal(bad.headers['accept-encoding'], 'gzip, deflate');
  });

  test('responses are compressed when Accept-Encoding asks', async () => {
    const body = JSON.stringify(simpleInputs([1, 2, 3]));
    const r = await post('/v2/models/echo/infer', body, { 'Accept-Encoding': 'deflate;q=0.5, gzip' });
    assert.equal(r.headers['content-encoding'], 'gzip');
    assert.match(gunzipSync(r.body).toString(), /"data":\[1,2,3\]/);
    const plain = await post('/v2/models/echo/infer', body, { 'Accept-Encoding': 'gzip;q=0' });
    assert.equal(plain.headers['content-encoding'], undefined);
    const meta = await get('/v2/models/echo', { 'Accept-Encoding': 'gzip' });
    assert.equal(meta.headers['content-encoding'], undefined, 'only infer replies are compressed');
  });

  test('a client that goes away cancels the request', async () => {
    const req = http.request({ host: '127.0.0.1', port, method: 'POST', path: '/v2/models/hang/infer' });
    req.on('error', () => {});
    req.end(JSON.stringify(simpleInputs([1])));
    await new Promise((r) => setImmediate(r));
    while (core.lastRequest?.model !== 'hang') await new Promise((r) => setImmediate(r));
    req.destroy();
    await core.aborted;
    await assertStillReady();
  });
});

/** A gzip body whose trailer claims 100 bytes: only inflating it shows its size. */
function lyingGzip(body: Buffer): Buffer {
  const packed = gzipSync(body);
  packed.writeUInt32LE(100, packed.byteLength - 4);
  return packed;
}

describe('bad requests leave the server healthy', () => {
  const cases: Array<{ name: string; send: () => Promise<HttpReply>; status: number; message: string | RegExp }> = [
    {
      name: 'malformed JSON',
      send: () => post('/v2/models/echo/infer', '{"inputs":[}'),
      status: 500,
      message: 'failed to parse the request JSON buffer: Invalid value. at 11',
    },
    {
      name: 'unknown model (before the body is read)',
      send: () => post('/v2/models/nope/infer', '{"inputs":['),
      status: 404,
      message: "Request for unknown model: 'nope' is not found",
    },
    {
      name: 'unknown version',
      send: () => post('/v2/models/echo/versions/9/infer', '{}'),
      status: 404,
      message: "Request for unknown model: 'echo' version 9 is not found",
    },
    {
      name: 'version too large',
      send: () => post('/v2/models/echo/versions/99999999999999999999/infer', '{}'),
      status: 400,
      message: /failed to get model version/,
    },
    {
      name: 'decoupled model',
      send: () => post('/v2/models/decoupled/infer', '{}'),
      status: 501,
      message: "HTTP end point doesn't support models with decoupled transaction policy",
    },
    {
      name: 'missing inputs field',
      send: () => post('/v2/models/echo/infer', '{}'),
      status: 500,
      message: "Unable to parse 'inputs': attempt to access non-existing object member 'inputs'",
    },
    {
      name: 'too few elements',
      send: () =>
        post(
          '/v2/models/echo/infer',
          JSON.stringify({ inputs: [{ name: 'INPUT0', datatype: 'INT32', shape: [1, 16], data: [1, 2] }] }),
        ),
      status: 500,
      message: "Failed to parse 'data' field: shape does not match true shape",
    },
    {
      name: 'too many elements',
      send: () =>
        post(
          '/v2/models/echo/infer',
          JSON.stringify({ inputs: [{ name: 'INPUT0', datatype: 'INT32', shape: [1, 2], data: [1, 2, 3] }] }),
        ),
      status: 500,
      message: "Unable to parse 'data': Shape does not match true shape of 'data' field",
    },
    {
      name: 'FP16 as JSON',
      send: () =>
        post(
          '/v2/models/echo/infer',
          JSON.stringify({ inputs: [{ name: 'INPUT0', datatype: 'FP16', shape: [1], data: [1] }] }),
        ),
      status: 400,
      message: /receiving FP16 data via JSON is not supported/,
    },
    {
      name: 'reserved triton_ parameter',
      send: () => post('/v2/models/echo/infer', JSON.stringify({ parameters: { triton_x: 1 }, inputs: [] })),
      status: 400,
      message: /reserved for Triton usage/,
    },
    {
      name: 'header length non-numeric',
      send: () => post('/v2/models/echo/infer', '{"inputs":[]}', { 'Inference-Header-Content-Length': 'abc' }),
      status: 400,
      message: 'Unable to parse Inference-Header-Content-Length, got: abc',
    },
    {
      name: 'header length negative',
      send: () => post('/v2/models/echo/infer', '{"inputs":[]}', { 'Inference-Header-Content-Length': '-4' }),
      status: 400,
      message: 'inference header size should be in range (0, 13), got: -4',
    },
    {
      name: 'header length larger than the body',
      send: () => post('/v2/models/echo/infer', '{"inputs":[]}', { 'Inference-Header-Content-Length': '14' }),
      status: 400,
      message: 'inference header size should be in range (0, 13), got: 14',
    },
    {
      name: 'header length out of int32 range',
      send: () => post('/v2/models/echo/infer', '{"inputs":[]}', { 'Inference-Header-Content-Length': '99999999999' }),
      status: 400,
      message: /value is out of range/,
    },
    {
      name: 'leftover binary bytes',
      send: () => {
        const { body, headers } = binaryRequest(
          { inputs: [{ name: 'INPUT0', datatype: 'INT32', shape: [1], parameters: { binary_data_size: 4 } }] },
          [int32Bytes([1, 2])],
        );
        return post('/v2/models/echo/infer', body, headers);
      },
      status: 400,
      message: "unexpected additional input data for model 'echo'",
    },
    {
      name: 'missing binary bytes',
      send: () => {
        const { body, headers } = binaryRequest(
          { inputs: [{ name: 'INPUT0', datatype: 'INT32', shape: [3], parameters: { binary_data_size: 12 } }] },
          [int32Bytes([1])],
        );
        return post('/v2/models/echo/infer', body, headers);
      },
      status: 400,
      message: "unexpected size for input 'INPUT0', expecting 8 additional bytes for model 'echo'",
    },
    {
      name: 'binary_data_size without the header',
      send: () =>
        post(
          '/v2/models/echo/infer',
          JSON.stringify({
            inputs: [{ name: 'INPUT0', datatype: 'INT32', shape: [1], parameters: { binary_data_size: 4 } }],
          }),
        ),
      status: 400,
      message: "unexpected size for input 'INPUT0', expecting 4 additional bytes for model 'echo'",
    },
    {
      name: 'duplicated output',
      send: () =>
        post(
          '/v2/models/echo/infer',
          JSON.stringify({ ...simpleInputs([1]), outputs: [{ name: 'OUTPUT0' }, { name: 'OUTPUT0' }] }),
        ),
      status: 400,
      message: "[request id: <id_unknown>] output 'OUTPUT0' already exists in request",
    },
    {
      name: 'FP16 output as JSON',
      send: () =>
        post(
          '/v2/models/echo/infer',
          binaryRequest(
            { inputs: [{ name: 'INPUT0', datatype: 'FP16', shape: [1], parameters: { binary_data_size: 2 } }] },
            [Buffer.alloc(2)],
          ).body,
          binaryRequest(
            { inputs: [{ name: 'INPUT0', datatype: 'FP16', shape: [1], parameters: { binary_data_size: 2 } }] },
            [],
          ).headers,
        ),
      status: 400,
      message: 'sending FP16 data via JSON is not supported. Please use the binary data format for output',
    },
    {
      name: 'oversized body with Content-Length',
      send: () => post('/v2/models/echo/infer', Buffer.alloc(MAX_INPUT + 1, 0x20)),
      status: 400,
      message: `request JSON size of ${MAX_INPUT + 1} bytes exceeds the maximum allowed ` +
        `input size of ${MAX_INPUT} bytes. Use --http-max-input-size to increase the limit.`,
    },
    {
      name: 'oversized chunked body',
      send: () =>
        call(port, 'POST', '/v2/models/echo/infer', { body: Buffer.alloc(MAX_INPUT * 2, 0x20), chunkSize: 8192 }),
      status: 400,
      message: /^request JSON size of \d+ bytes exceeds the maximum allowed input size of 65536 bytes/,
    },
    // Only infer reads Inference-Header-Content-Length: elsewhere the whole body is JSON, whatever that header says.
    {
      name: 'oversized generate body, header it does not read',
      send: () =>
        post('/v2/models/echo/generate', Buffer.alloc(MAX_INPUT + 1, 0x20), {
          'Inference-Header-Content-Length': '0',
        }),
      status: 400,
      message: `request JSON size of ${MAX_INPUT + 1} bytes exceeds the maximum allowed ` +
        `input size of ${MAX_INPUT} bytes. Use --http-max-input-size to increase the limit.`,
    },
    {
      name: 'oversized chunked generate_stream body, header it does not read',
      send: () =>
        call(port, 'POST', '/v2/models/echo/generate_stream', {
          body: Buffer.alloc(MAX_INPUT * 2, 0x20),
          chunkSize: 8192,
          headers: { 'Inference-Header-Content-Length': '16' },
        }),
      status: 400,
      message:
        new RegExp(
          String.raw`^request JSON size of \d+ bytes exceeds the maximum allowed input size of 65536 bytes\. Use ` +
          String.raw`--http-max-input-size`,
        ),
    },
    {
      name: 'oversized repository index body, header it does not read',
      send: () =>
        post('/v2/repository/index', Buffer.alloc(MAX_INPUT + 1, 0x20), { 'Inference-Header-Content-Length': '8' }),
      status: 400,
      message: `request JSON size of ${MAX_INPUT + 1} bytes exceeds the maximum allowed ` +
        `input size of ${MAX_INPUT} bytes. Use --http-max-input-size to increase the limit.`,
    },
    {
      name: 'oversized after inflating',
      send: () =>
        post('/v2/models/echo/infer', gzipSync(Buffer.alloc(MAX_INPUT * 4, 0x20)), { 'Content-Encoding': 'gzip' }),
      status: 400,
      message: `Decompressed data size exceeds the maximum allowed value of ` +
        `${MAX_INPUT} bytes. Use --http-max-input-size to increase the limit.`,
    },
    {
      name: 'oversized after inflating, gzip trailer understating',
      send: () =>
        post('/v2/models/echo/infer', lyingGzip(Buffer.alloc(MAX_INPUT * 4, 0x20)), { 'Content-Encoding': 'gzip' }),
      status: 400,
      message: `Decompressed data size exceeds the maximum allowed value of ` +
        `${MAX_INPUT} bytes. Use --http-max-input-size to increase the limit.`,
    },
    {
      name: 'oversized after inflating, deflate',
      send: () =>
        post('/v2/models/echo/infer', deflateSync(Buffer.alloc(MAX_INPUT * 4, 0x20)), {
          'Content-Encoding': 'deflate',
        }),
      status: 400,
      message: `Decompressed data size exceeds the maximum allowed value of ` +
        `${MAX_INPUT} bytes. Use --http-max-input-size to increase the limit.`,
    },
  ];
  for (const c of cases) {
    test(c.name, async () => {
      assertError(await c.send(), c.status, c.message);
      await assertStillReady();
    });
  }
});

describe('stop', () => {
  test('stop lets an in-flight request finish, then refuses new connections', async () => {
    const local = new EchoServer();
    const fe = new HttpFrontend(local, {
      port: 0,
      address: '127.0.0.1',
      maxInputSize: MAX_INPUT,
      logger: silentLogger,
    });
    const { port: p } = await fe.start();
    const inflight = call(p, 'POST', '/v2/models/slow/infer', { body: JSON.stringify(simpleInputs([5])) });
    await local.slowArrived;
    const stopped = fe.stop();
    local.slow.forEach((release) => release());
    const r = await inflight;
    assert.equal(r.status, 200);
    assert.match(r.body.toString(), /"data":\[5\]/);
    await stopped;
    await assert.rejects(call(p, 'GET', '/v2/health/live'), /ECONNREFUSED/);
  });
});

describe('restricted APIs and header forwarding', () => {
  let local: EchoServer;
  let fe: HttpFrontend;
  let p: number;
  before(async () => {
    local = new EchoServer();
    fe = new HttpFrontend(local, {
      port: 0,
      address: '127.0.0.1',
      maxInputSize: MAX_INPUT,
      logger: silentLogger,
      restrictedApis: ['health,inference:api-key=secret', 'logging:admin=yes'],
      headerForwardPattern: '^(x-fwd-|priority$)',
    });
    ({ port: p } = await fe.start());
  });
  after(() => fe.stop());

  test('a restricted category without its header is 403; with it, it works', async () => {
    assertError(await call(p, 'GET', '/v2/health/ready'), 403, "This API is restricted, expecting header 'api-key'");
    assertError(
      await call(p, 'GET', '/v2/models/echo/ready'),
      403,
      "This API is restricted, expecting header 'api-key'",
    );
    assertError(await call(p, 'GET', '/v2/health/ready', { headers: { 'api-key': 'wrong' } }), 403, /restricted/);
    assert.equal((await call(p, 'GET', '/v2/health/ready', { headers: { 'API-Key': 'secret' } })).status, 200);
    assertError(await call(p, 'GET', '/v2/logging'), 403, "This API is restricted, expecting header 'admin'");
    assert.equal((await call(p, 'GET', '/v2'))?.status, 200, 'metadata is not restricted');
    assertError(
      await call(p, 'POST', '/v2/models/echo/infer', { body: JSON.stringify(simpleInputs([1])) }),
      403,
      /restricted/,
    );
  });

  test('matching headers become string parameters; reserved names are refused', async () => {
    const r = await call(p, 'POST', '/v2/models/echo/infer', {
      body: JSON.stringify({ parameters: { own: 1 }, ...simpleInputs([1]) }),
      headers: { 'api-key': 'secret', 'X-Fwd-Tenant': 'blue', 'x-other': 'no' },
    });
    assert.equal(r.status, 200, r.body.toString());
    assert.deepEqual(local.lastRequest!.parameters, { own: 1, 'X-Fwd-Tenant': 'blue' });
    assertError(
      await call(p, 'POST', '/v2/models/echo/infer', {
        body: JSON.stringify(simpleInputs([1])),
        headers: { 'api-key': 'secret', priority: '1' },
      }),
      400,
      "Header 'priority' is reserved for Triton usage and cannot be forwarded.",
    );
  });

  test('malformed --http-restricted-api values are refused with Triton\'s texts', () => {
    const make = (restrictedApis: string[]) =>
      new HttpFrontend(local, {
        port: 0,
        address: '127.0.0.1',
        maxInputSize: MAX_INPUT,
        logger: silentLogger,
        restrictedApis,
      });
    assert.throws(
      () => make(['health']),
      /--http-restricted-api option format is '<config name>:<setting>=<value>'. Got health/,
    );
    assert.throws(() => make(['nope:k=v']), /unknown restricted api 'nope'/);
    assert.throws(
      () => make(['health:k=v', 'health:a=b']),
      /restricted api 'health' can not be specified in multiple config groups/,
    );
  });
});

test('starting on a port in use fails with Triton\'s text', async () => {
  const other = new HttpFrontend(new EchoServer(), {
    port,
    address: '127.0.0.1',
    maxInputSize: MAX_INPUT,
    logger: silentLogger,
  });
  await assert.rejects(other.start(), { message: `Socket '127.0.0.1:${port}' already in use ` });
});
