/**
 * Decoupled models over the wire, with a real Server and a real Python
 * process: gRPC ModelStreamInfer and HTTP generate / generate_stream (SSE).
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import http from 'node:http';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { create, type MessageInitShape } from '@bufbuild/protobuf';
import * as grpc from '@grpc/grpc-js';
import {
  InferParameterSchema,
  ModelInferRequestSchema,
  type ModelInferRequest,
  type ModelStreamInferResponse,
} from '../../src/gen/grpc_service_pb.js';
import { Server } from '../../src/core/server.js';
import { HttpFrontend } from '../../src/frontends/http/server.js';
import { silentLogger } from '../../src/logger.js';
import { decoupledRepository } from '../helpers/decoupled.js';
import { PYTHON, missingPythonModule } from '../backends/python/helpers.js';
import { startHarness, type Harness } from './grpc/helpers.js';
import { call, json } from './http/helpers.js';

const noNumpy = missingPythonModule('numpy');
const int32Bytes = (values: number[]) => new Uint8Array(new Int32Array(values).buffer);

function streamRequest(
  values: number[],
  params: Record<string, string | number | boolean> = {},
  id = 'q',
): ModelInferRequest {
  const parameters: Record<string, MessageInitShape<typeof InferParameterSchema>> = {};
  for (const [k, v] of Object.entries(params)) {
    parameters[k] =
      typeof v === 'string'
        ? { parameterChoice: { case: 'stringParam', value: v } }
        : typeof v === 'boolean'
          ? { parameterChoice: { case: 'boolParam', value: v } }
          : { parameterChoice: { case: 'int64Param', value: BigInt(v) } };
  }
  return create(ModelInferRequestSchema, {
    modelName: 'decoupled_repeat',
    id,
    inputs: [{ name: 'IN', datatype: 'INT32', shape: [BigInt(values.length)] }],
    rawInputContents: [int32Bytes(values)],
    parameters,
  });
}

type Stream = grpc.ClientDuplexStream<ModelInferRequest, ModelStreamInferResponse>;

function openStream(client: grpc.Client, metadata = new grpc.Metadata()): Stream {
  return (client as unknown as { ModelStreamInfer(md: grpc.Metadata): Stream }).ModelStreamInfer(metadata);
}

function streamAll(client: grpc.Client, requests: ModelInferRequest[], metadata?: grpc.Metadata) {
  return new Promise<{ messages: ModelStreamInferResponse[]; error?: grpc.ServiceError }>((resolve) => {
    const messages: ModelStreamInferResponse[] = [];
    const s = openStream(client, metadata);
    s.on('data', (m: ModelStreamInferResponse) => messages.push(m));
    s.on('error', (error: grpc.ServiceError) => resolve({ messages, error }));
    s.on('end', () => resolve({ messages }));
    for (const r of requests) s.write(r);
    s.end();
  });
}

const finalFlag = (m: ModelStreamInferResponse) => {
  const p = m.inferResponse?.parameters['triton_final_response']?.parameterChoice;
  return p?.case === 'boolParam' ? p.value : undefined;
};
const outValue = (m: ModelStreamInferResponse) => {
  const r = m.inferResponse!;
  const i = r.outputs.findIndex((o) => o.name === 'OUT');
  return i === -1 ? undefined : new Int32Array(new Uint8Array(r.rawOutputContents[i]!).buffer)[0];
};

/** Reads an SSE response event by event; `onEvent` may destroy the request. */
function sse(port: number, pathName: string, body: object, onEvent?: (data: unknown, req: http.ClientRequest) => void) {
  return new Promise<{ status: number; type: string; events: unknown[]; aborted: boolean }>((resolve, reject) => {
    const text = JSON.stringify(body);
    const events: unknown[] = [];
    const req = http.request(
      {
        host: '127.0.0.1',
        port,
        method: 'POST',
        path: pathName,
        headers: { 'Content-Length': String(Buffer.byteLength(text)) },
        agent: false,
      },
      (res) => {
        let buf = '';
        res.setEncoding('utf8');
        const done = (aborted: boolean) =>
          resolve({ status: res.statusCode!, type: String(res.headers['content-type']), events, aborted });
        res.on('data', (chunk: string) => {
          buf += chunk;
          let i;
          while ((i = buf.indexOf('\n\n')) !== -1) {
            const frame = buf.slice(0, i);
            buf = buf.slice(i + 2);
            assert.ok(frame.startsWith('data: '), `SSE frame ${JSON.stringify(frame)}`);
            const data = JSON.parse(frame.slice(6));
            events.push(data);
            onEvent?.(data, req);
          }
        });
        res.on('end', () => done(false));
        res.on('close', () => done(true));
        res.on('error', () => done(true));
      },
    );
    req.on('error', (e) => (req.destroyed ? undefined : reject(e)));
    req.end(text);
  });
}

describe('decoupled models over gRPC streams and HTTP generate', { skip: noNumpy }, () => {
  let repo: ReturnType<typeof decoupledRepository>;
  let server: Server;
  let h: Harness;
  let http1: HttpFrontend;
  let port: number;
  let markers: string;

  before(async () => {
    repo = decoupledRepository();
    repo.addSub('simple');
    markers = mkdtempSync(path.join(tmpdir(), 'nereid-markers-'));
    server = new Server({ modelRepositories: [repo.dir], backendConfig: { python: { 'python-executable': PYTHON } } });
    await server.start();
    h = await startHarness(server);
    http1 = new HttpFrontend(server, { port: 0, address: '127.0.0.1', maxInputSize: 1 << 20, logger: silentLogger });
    ({ port } = await http1.start());
  });
  after(async () => {
    await h.close();
    await http1.stop();
    await server.stop();
    repo.cleanup();
    rmSync(markers, { recursive: true, force: true });
  });

  test('ModelStreamInfer carries every response with triton_final_response false until the last', async () => {
    const { messages, error } = await streamAll(h.client, [streamRequest([5, 6, 7])]);
    assert.equal(error, undefined);
    assert.deepEqual(messages.map(outValue), [5, 6, 7]);
    assert.deepEqual(messages.map(finalFlag), [false, false, false]);
    assert.equal(messages[0]!.inferResponse!.id, 'q');
    assert.equal(messages[0]!.inferResponse!.modelName, 'decoupled_repeat');
  });

  test('the bare final flag becomes an empty response only with triton_enable_empty_final_response', async () => {
    const plain = await streamAll(h.client, [streamRequest([])]);
    assert.equal(plain.messages.length, 0);
    const withEmpty = await streamAll(h.client, [
      streamRequest([1], { triton_enable_empty_final_response: true }, 'e1'),
    ]);
    assert.equal(withEmpty.messages.length, 2);
    assert.equal(finalFlag(withEmpty.messages[0]!), false);
    const last = withEmpty.messages[1]!;
    assert.equal(finalFlag(last), true);
    assert.equal(last.inferResponse!.outputs.length, 0);
    assert.equal(last.inferResponse!.id, 'e1');
    assert.equal(last.inferResponse!.modelName, 'decoupled_repeat');
  });

  test('a final response with outputs, error responses, and a crash are reported in-stream', async () => {
    const { messages } = await streamAll(h.client, [streamRequest([3], { mode: 'final_with_response' })]);
    assert.deepEqual(messages.map(finalFlag), [true]);
    assert.equal(outValue(messages[0]!), 3);

    const errs = await streamAll(h.client, [streamRequest([1, 2, 3], { mode: 'error_response' })]);
    assert.deepEqual(errs.messages.map((m) => m.errorMessage), ['', 'element 1 is refused', '']);
    assert.deepEqual(errs.messages.map(finalFlag), [false, false, false]);

    const crash = await streamAll(h.client, [streamRequest([1, 2, 3], { mode: 'crash' })]);
    assert.equal(crash.error, undefined, 'the stream itself ends normally');
    assert.equal(outValue(crash.messages[0]!), 1);
    const last = crash.messages.at(-1)!;
    assert.match(last.errorMessage, /exited with code 3/);
    assert.equal(finalFlag(last), true);
  });

  test('with triton_grpc_error the first error ends the stream with its status', async () => {
    const md = new grpc.Metadata();
    md.set('triton_grpc_error', 'true');
    const { messages, error } = await streamAll(h.client, [streamRequest([1], { mode: 'raise' })], md);
    assert.equal(messages.length, 0);
    assert.equal(error?.code, grpc.status.INTERNAL);
    assert.match(error!.details, /execute refused the request/);
  });

  test('many requests on one stream, decoupled and not, each answered', async () => {
    const simple = create(ModelInferRequestSchema, {
      modelName: 'simple',
      id: 's',
      inputs: [
        { name: 'INPUT0', datatype: 'INT32', shape: [1n, 16n] },
        { name: 'INPUT1', datatype: 'INT32', shape: [1n, 16n] },
      ],
      rawInputContents: [int32Bytes(new Array(16).fill(1)), int32Bytes(new Array(16).fill(2))],
    });
    const { messages } = await streamAll(h.client, [
      streamRequest([1, 2], {}, 'a'),
      simple,
      streamRequest([3], {}, 'b'),
    ]);
    const ids = messages.map((m) => m.inferResponse!.id).sort();
    assert.deepEqual(ids, ['a', 'a', 'b', 's']);
    const s = messages.find((m) => m.inferResponse!.id === 's')!;
    assert.equal(finalFlag(s), true);
  });

  test('a client that cancels the stream cancels the request in the model', async () => {
    const marker = path.join(markers, 'grpc-cancel');
    const s = openStream(h.client);
    let seen = 0;
    await new Promise<void>((resolve) => {
      s.on('data', () => {
        seen += 1;
        if (seen === 3) s.cancel();
      });
      s.on('error', () => resolve());
      s.write(streamRequest([0], { mode: 'until_cancelled', marker, delay_ms: 5 }));
    });
    for (let i = 0; i < 200 && !existsSync(marker); i++) await new Promise((r) => setTimeout(r, 20));
    assert.match(readFileSync(marker, 'utf8'), /^cancelled after \d+$/);
  });

  test('generate_stream sends each response as a Server-Sent Event', async () => {
    const r = await sse(port, '/v2/models/decoupled_repeat/generate_stream', { IN: [4, 5, 6], id: 'g1' });
    assert.equal(r.status, 200);
    assert.equal(r.type, 'text/event-stream; charset=utf-8');
    assert.deepEqual(r.events, [
      { IDX: 0, OUT: 4, id: 'g1', model_name: 'decoupled_repeat', model_version: '1' },
      { IDX: 1, OUT: 5, id: 'g1', model_name: 'decoupled_repeat', model_version: '1' },
      { IDX: 2, OUT: 6, id: 'g1', model_name: 'decoupled_repeat', model_version: '1' },
    ]);
    const versioned = await sse(port, '/v2/models/decoupled_repeat/versions/1/generate_stream', {
      IN: 8,
      parameters: { delay_ms: 10 },
    });
    assert.deepEqual(versioned.events, [{ IDX: 0, OUT: 8, model_name: 'decoupled_repeat', model_version: '1' }]);
    const none = await sse(port, '/v2/models/decoupled_repeat/generate_stream', { IN: [] });
    assert.deepEqual(none.events, []);
    const errs = await sse(port, '/v2/models/decoupled_repeat/generate_stream', { IN: [1, 2], mode: 'error_response' });
    assert.deepEqual(errs.events[1], { error: 'element 1 is refused' });
  });

  test('generate answers a single response; more than one is an error; non-decoupled models work too', async () => {
    const one = await call(port, 'POST', '/v2/models/decoupled_repeat/generate', {
      body: JSON.stringify({ IN: [7], mode: 'final_with_response' }),
    });
    assert.equal(one.status, 200);
    assert.equal(one.headers['content-type'], 'application/json');
    assert.equal(one.body.toString(), '{"IDX":0,"OUT":7,"model_name":"decoupled_repeat","model_version":"1"}');
    const two = await call(port, 'POST', '/v2/models/decoupled_repeat/generate', {
      body: JSON.stringify({ IN: [1, 2] }),
    });
    assert.deepEqual(json(two), {
      error:
        'generate expects model to produce exactly 1 response, use generate ' +
        'stream for model that generates various number of responses',
    });
    const simple = await call(port, 'POST', '/v2/models/simple/generate', {
      body: JSON.stringify({ INPUT0: new Array(16).fill(2), INPUT1: new Array(16).fill(1) }),
    });
    assert.equal(simple.status, 200);
    const doc = json(simple) as Record<string, unknown>;
    assert.deepEqual(doc['OUTPUT0'], new Array(16).fill(3));
    assert.deepEqual(doc['OUTPUT1'], new Array(16).fill(1));
  });

  test('generate refuses JSON that cannot become the inputs with 400 naming the input', async () => {
    const shape = await call(port, 'POST', '/v2/models/simple/generate', {
      body: JSON.stringify({ INPUT0: [1, 2, 3], INPUT1: new Array(16).fill(1) }),
    });
    assert.equal(shape.status, 400);
    assert.deepEqual(json(shape), { error: "The schema can not convert input 'INPUT0' to tensor with proper shape" });
    const type = await call(port, 'POST', '/v2/models/simple/generate', {
      body: JSON.stringify({ INPUT0: new Array(16).fill('x'), INPUT1: new Array(16).fill(1) }),
    });
    assert.equal(type.status, 400);
    assert.match((json(type) as { error: string }).error, /input 'INPUT0'/);
    const missing = await call(port, 'POST', '/v2/models/simple/generate', {
      body: JSON.stringify({ INPUT0: new Array(16).fill(1) }),
    });
    assert.equal(missing.status, 400);
    assert.match((json(missing) as { error: string }).error, /missing required input\(s\) \['INPUT1'\]/);
    const badParam = await call(port, 'POST', '/v2/models/simple/generate', { body: JSON.stringify({ odd: [1] }) });
    assert.equal(badParam.status, 400);
    assert.deepEqual(json(badParam), {
      error: "parameter 'odd' has invalid type. It should be either 'int', 'bool', or 'string'.",
    });
    const unknown = await call(port, 'POST', '/v2/models/nope/generate_stream', { body: '{}' });
    assert.equal(unknown.status, 404);
    const get = await call(port, 'GET', '/v2/models/simple/generate');
    assert.equal(get.status, 405);
  });

  test('a client that goes away mid-stream cancels the request in the model', async () => {
    const marker = path.join(markers, 'sse-cancel');
    const r = await sse(
      port,
      '/v2/models/decoupled_repeat/generate_stream',
      { IN: [0], mode: 'until_cancelled', marker, delay_ms: 5 },
      (_d, req) => {
        if (r0.count++ === 2) req.destroy();
      },
    );
    assert.equal(r.aborted, true);
    for (let i = 0; i < 200 && !existsSync(marker); i++) await new Promise((res) => setTimeout(res, 20));
    assert.match(readFileSync(marker, 'utf8'), /^cancelled after \d+$/);
  });
});

const r0 = { count: 0 };
