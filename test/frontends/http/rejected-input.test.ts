/**
 * Inputs Triton rejects, rejected here too, with a clear text and the status
 * Triton uses: numbers that overflow the tensor's type, versions that are not
 * integers > 0 (HTTP and gRPC), chunk floods, and bodies framed two ways.
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import net from 'node:net';
import { create } from '@bufbuild/protobuf';
import * as grpc from '@grpc/grpc-js';
import { HttpFrontend } from '../../../src/frontends/http/index.js';
import { ModelInferRequestSchema } from '../../../src/gen/grpc_service_pb.js';
import { silentLogger } from '../../../src/logger.js';
import { EchoServer } from './echo-server.js';
import { EchoServer as GrpcEchoServer, callError, startHarness, unary, type Harness } from '../grpc/helpers.js';
import { call, json } from './helpers.js';

let frontend: HttpFrontend;
let port: number;

before(async () => {
  frontend = new HttpFrontend(new EchoServer(), {
    port: 0,
    address: '127.0.0.1',
    maxInputSize: 64 * 1024 * 1024,
    logger: silentLogger,
  });
  ({ port } = await frontend.start());
});
after(() => frontend.stop());

const inferText = (datatype: string, dataText: string) =>
  `{"inputs":[{"name":"INPUT0","datatype":"${datatype}","shape":[1],"data":[${dataText}]}]}`;

async function expectError(path: string, body: string, status: number, message: RegExp): Promise<void> {
  const r = await call(port, 'POST', path, { body });
  assert.equal(r.status, status, r.body.toString());
  assert.match((json(r) as { error: string }).error, message);
}

describe('JSON numbers that overflow the tensor type', () => {
  const cases: Array<[string, string]> = [
    ['FP64', '1e309'],
    ['FP32', '-1e400'],
    ['FP32', '1e39'],
    ['INT64', '9'.repeat(300)],
    ['INT32', '9'.repeat(300)],
    ['UINT64', '18446744073709551616'],
    ['FP64', '1'.repeat(400)],
  ];
  for (const [datatype, literal] of cases) {
    test(`${datatype} ${literal.length > 20 ? `${literal.length}-digit integer` : literal} ` +
      `is a 400 naming the input`, async () => {
      await expectError(
        '/v2/models/echo/infer',
        inferText(datatype, literal),
        400,
        /for input 'INPUT0': the number .* overflows the input's data type/,
      );
    });
  }

  test('Infinity and NaN literals and in-range values are still accepted', async () => {
    for (const [datatype, literal] of [
      ['FP32', 'Infinity'],
      ['FP64', '-Infinity'],
      ['FP64', 'NaN'],
      ['FP64', '1e308'],
      ['FP32', '3.4e38'],
      ['INT64', '-9223372036854775808'],
    ]) {
      const r = await call(port, 'POST', '/v2/models/echo/infer', { body: inferText(datatype!, literal!) });
      assert.equal(r.status, 200, `${datatype} ${literal}: ${r.body.toString()}`);
    }
  });
});

describe('model versions must be integers > 0', () => {
  for (const [version, message] of [
    ['-1', /^invalid model version specified '-1' , version should be an integral value > 0$/],
    ['0', /^invalid model version specified '0' , version should be an integral value > 0$/],
    [
      '1.5',
      new RegExp(
        String.raw`^failed to get model version from specified version string '1\.5' \(details: stol\), version ` +
        String.raw`should be an integral value > 0$`,
      ),
    ],
    ['abc', /^failed to get model version from specified version string 'abc'/],
    ['99999999999999999999', /^failed to get model version from specified version string '99999999999999999999'/],
  ] as const) {
    test(`HTTP /versions/${version}/infer`, async () => {
      await expectError(`/v2/models/echo/versions/${version}/infer`, inferText('INT32', '1'), 400, message);
    });
  }

  describe('gRPC', () => {
    let h: Harness;
    before(async () => {
      h = await startHarness(new GrpcEchoServer());
    });
    after(() => h.close());
    for (const version of ['-1', '0', 'x']) {
      test(`model_version "${version}" is INVALID_ARGUMENT for ModelInfer and ModelReady`, async () => {
        const request = create(ModelInferRequestSchema, {
          modelName: 'echo',
          modelVersion: version,
          inputs: [{ name: 'INPUT0', datatype: 'INT32', shape: [1n] }],
          rawInputContents: [new Uint8Array(4)],
        });
        const err = await callError(unary(h.client, 'ModelInfer', request));
        assert.equal(err.code, grpc.status.INVALID_ARGUMENT);
        assert.match(err.details, /version should be an integral value > 0/);
        const ready = await callError(unary(h.client, 'ModelReady', { name: 'echo', version }));
        assert.equal(ready.code, grpc.status.INVALID_ARGUMENT);
      });
    }
  });
});

/** Sends raw bytes on a fresh connection; resolves with everything the server wrote back. */
function rawExchange(payload: Buffer | string): Promise<string> {
  return new Promise((resolve, reject) => {
    const socket = net.connect(port, '127.0.0.1');
    const got: Buffer[] = [];
    socket.on('data', (d) => got.push(d));
    socket.on('error', reject);
    socket.on('close', () => resolve(Buffer.concat(got).toString()));
    socket.write(payload);
  });
}

describe('HTTP framing', () => {
  test('more than 65,536 chunks is refused with Triton\'s text and the connection closes', async () => {
    const body = inferText('INT32', '1');
    let payload = 'POST /v2/models/echo/infer HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n';
    // 70,000 one-byte chunks: spaces, so the JSON would be valid if it were accepted.
    payload += '1\r\n \r\n'.repeat(70_000);
    payload += `${body.length.toString(16)}\r\n${body}\r\n0\r\n\r\n`;
    const reply = await rawExchange(payload);
    assert.match(reply, /^HTTP\/1\.1 400 /);
    assert.match(
      reply,
      /Chunked request body exceeds maximum of 65536 non-empty chunks\. Send fewer or larger HTTP chunks\./,
    );
  });

  test('a few chunks are fine', async () => {
    const r = await call(port, 'POST', '/v2/models/echo/infer', { body: inferText('INT32', '1'), chunkSize: 7 });
    assert.equal(r.status, 200, r.body.toString());
  });

  test('Content-Length together with Transfer-Encoding: chunked gets a JSON error body saying why', async () => {
    const body = inferText('INT32', '1');
    const reply = await rawExchange(
      `POST /v2/models/echo/infer HTTP/1.1\r\nHost: x\r\nContent-Length: ${body.length}\r\nTransfer-Encoding: ` +
      `chunked\r\n\r\n${body.length.toString(16)}\r\n${body}\r\n0\r\n\r\n`,
    );
    assert.match(reply, /^HTTP\/1\.1 400 /);
    assert.match(reply, /content-type: application\/json/i);
    const jsonText = reply.slice(reply.indexOf('\r\n\r\n') + 4);
    assert.match(
      (JSON.parse(jsonText) as { error: string }).error,
      /both 'Content-Length' and 'Transfer-Encoding: chunked'/,
    );
  });

  test('the server keeps serving after all of it', async () => {
    const r = await call(port, 'GET', '/v2/health/live');
    assert.equal(r.status, 200);
  });
});
