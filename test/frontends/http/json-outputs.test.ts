/**
 * JSON outputs over HTTP with the text formatted on the session thread and
 * without: the real Server and HTTP frontend with identity models, the
 * share of texts the thread formats forced either way. The response bodies
 * must be byte for byte the same.
 */
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { forceJsonTextShare } from '../../../src/backends/onnxruntime/policies/json-text.js';
import { Server } from '../../../src/core/server.js';
import { HttpFrontend } from '../../../src/frontends/http/index.js';
import { silentLogger } from '../../../src/logger.js';
import { buildIdentityModel } from '../../helpers/onnx-builder.js';
import type { Datatype } from '../../../src/tensor/datatype.js';
import { encodeJsonTensorData } from '../../../src/tensor/json-codec.js';
import { HARD_VALUES, rotatedValues, valuesBytes } from '../../helpers/json-values.js';
import { TempRepository } from '../../helpers/repository.js';
import { parseJsonText } from '../../../src/frontends/http/json-parse.js';
import { binaryRequest, call, type HttpReply } from './helpers.js';

const TYPES: Datatype[] = ['FP32', 'FP64', 'INT8', 'INT32', 'INT64', 'UINT16', 'UINT64', 'BOOL', 'BYTES'];
const CONFIG_TYPE: Record<string, string> = { BYTES: 'TYPE_STRING' };


/** Request k's rows: the values rotated by k, `rows` times. */
function rowsOf(dt: Datatype, k: number, rows: number): (number | bigint | string)[] {
  const row = rotatedValues(dt, k);
  return Array.from({ length: rows }, () => row).flat();
}

function configText(name: string, types: readonly Datatype[], extra: string): string {
  const io = (kind: string, prefix: (dt: Datatype, i: number) => string) =>
    `${kind} [ ${types
      .map((dt, i) => `{ name: "${prefix(dt, i)}" data_type: ${CONFIG_TYPE[dt] ?? `TYPE_${dt}`} dims: [ -1 ] }`)
      .join(', ')} ]`;
  return [
    `name: "${name}"`,
    'platform: "onnxruntime_onnx"',
    'max_batch_size: 8',
    io('input', (dt) => `IN_${dt}`),
    io('output', (_dt, i) => `OUTPUT${i}`),
    'instance_group [ { kind: KIND_CPU count: 1 } ]',
    'parameters { key: "inline_execution" value: { string_value: "off" } }',
    extra,
    '',
  ].join('\n');
}

let repo: TempRepository;
let server: Server;
let frontend: HttpFrontend;
let port: number;

before(async () => {
  const model = buildIdentityModel(
    TYPES.map((dt) => ({ name: `IN_${dt}`, datatype: dt, shape: ['batch', 'n'] })),
  ).toBytes();
  repo = new TempRepository()
    .config('identity', configText('identity', TYPES, ''))
    .file('identity', '1/model.onnx', model)
    // Holds requests up to 300 ms so that the concurrent ones below form one batch.
    .config(
      'identity_batched',
      configText(
        'identity_batched',
        TYPES,
        'dynamic_batching { preferred_batch_size: [ 4 ] max_queue_delay_microseconds: 300000 }',
      ),
    )
    .file('identity_batched', '1/model.onnx', model);
  server = new Server({
    modelRepositories: [repo.dir],
    modelControlMode: 'explicit',
    loadModels: ['identity', 'identity_batched'],
    logger: silentLogger,
  });
  await server.start();
  frontend = new HttpFrontend(server, { port: 0, address: '127.0.0.1', maxInputSize: 1 << 20, logger: silentLogger });
  ({ port } = await frontend.start());
});

after(async () => {
  await frontend.stop();
  await server.stop();
  repo.cleanup();
});

/** Binary inputs (exact bytes) for request k; `outputs` as given. */
function inferBody(
  k: number,
  rows: number,
  outputs: object[] | undefined,
): { body: Buffer; headers: Record<string, string> } {
  const chunks = TYPES.map((dt) => valuesBytes(dt, rowsOf(dt, k, rows)));
  const header = {
    id: `r${k}`,
    inputs: TYPES.map((dt, i) => ({
      name: `IN_${dt}`,
      datatype: dt,
      shape: [rows, HARD_VALUES[dt]!.length],
      parameters: { binary_data_size: chunks[i]!.byteLength },
    })),
    ...(outputs === undefined ? {} : { outputs }),
  };
  return binaryRequest(header, chunks);
}

async function infer(model: string, body: { body: Buffer; headers: Record<string, string> }): Promise<HttpReply> {
  const reply = await call(port, 'POST', `/v2/models/${model}/infer`, body);
  assert.equal(reply.status, 200, reply.body.toString());
  return reply;
}

/** The same requests with every text formatted on the session thread, then every one by the frontend. */
async function bothWays(send: () => Promise<HttpReply[]>): Promise<HttpReply[]> {
  const restore = forceJsonTextShare(1);
  let offLoop: HttpReply[];
  try {
    offLoop = await send();
  } finally {
    restore();
  }
  const restoreIdle = forceJsonTextShare(0);
  let onLoop: HttpReply[];
  try {
    onLoop = await send();
  } finally {
    restoreIdle();
  }
  assert.equal(offLoop.length, onLoop.length);
  for (let i = 0; i < offLoop.length; i++) {
    assert.equal(offLoop[i]!.body.toString('latin1'), onLoop[i]!.body.toString('latin1'), `response ${i}`);
    assert.equal(offLoop[i]!.headers['content-type'], onLoop[i]!.headers['content-type']);
  }
  return offLoop;
}

function expectedOutputs(k: number, rows: number): object[] {
  return TYPES.map((dt, i) => {
    const values = rowsOf(dt, k, rows);
    return {
      name: `OUTPUT${i}`,
      datatype: dt,
      shape: [rows, HARD_VALUES[dt]!.length],
      text: encodeJsonTensorData('x', dt, valuesBytes(dt, values), values.length),
    };
  });
}

/** The `data` text of each output in a JSON reply, in order (read from the body, not re-serialised). */
function dataTexts(body: string): string[] {
  return [...body.matchAll(/"data":(\[[^\]]*\])/g)].map((m) => m[1]!);
}

test('every output as JSON: the same bytes with the text from the session ' +
  'thread and from the frontend, for every datatype', async () => {
  const [reply] = await bothWays(async () => [await infer('identity', inferBody(0, 2, undefined))]);
  const text = reply!.body.toString('utf8');
  const expected = expectedOutputs(0, 2) as { text: string }[];
  assert.deepEqual(dataTexts(text), expected.map((e) => e.text));
  assert.match(text, /-0\.0,1\.0,-1\.0,NaN,Infinity,-Infinity,3\.4028234663852886e38/);
  assert.match(text, /\[-9223372036854775808,9223372036854775807,0,-1,/);
  assert.match(text, /\[0,18446744073709551615,1,9007199254740993,/);
  assert.match(text, /\[true,false,true,true,/);
});

test('binary and JSON outputs mixed in one request: the same JSON header and bytes either way', async () => {
  const outputs = TYPES.map((_dt, i) => ({ name: `OUTPUT${i}`, parameters: { binary_data: i % 2 === 1 } }));
  const [reply] = await bothWays(async () => [await infer('identity', inferBody(3, 1, outputs))]);
  // Parsed as Triton's clients do: NaN and Infinity are numbers.
  const jsonLength = Number(reply!.headers['inference-header-content-length']);
  const header = parseJsonText(reply!.body.toString('utf8', 0, jsonLength)) as {
    outputs: { name: string; data?: unknown }[];
  };
  const binary = reply!.body.subarray(jsonLength);
  const odd = TYPES.filter((_dt, i) => i % 2 === 1);
  assert.equal(binary.byteLength, odd.reduce((n, dt) => n + valuesBytes(dt, rowsOf(dt, 3, 1)).byteLength, 0));
  for (let i = 0; i < TYPES.length; i++) {
    const o = header.outputs[i]!;
    if (i % 2 === 1) assert.equal(o.data, undefined);
    else assert.ok(Array.isArray(o.data), `${o.name} is JSON`);
  }
});

test('a classification output beside JSON outputs: the same bytes either way', async () => {
  const fp32 = TYPES.indexOf('FP32');
  const outputs = [
    { name: `OUTPUT${fp32}`, parameters: { classification: 2 } },
    { name: `OUTPUT${TYPES.indexOf('INT32')}` },
  ];
  const [reply] = await bothWays(async () => [await infer('identity', inferBody(1, 1, outputs))]);
  const body = JSON.parse(reply!.body.toString('utf8')) as { outputs: { datatype: string; data: unknown[] }[] };
  assert.equal(body.outputs[0]!.datatype, 'BYTES');
  assert.equal(body.outputs[0]!.data.length, 2);
  assert.deepEqual(body.outputs[1]!.data, [2147483647, 0, -5, -2147483648]);
});

test('requests batched together each get the JSON text of their own rows, the same bytes either way', async () => {
  const rows = [1, 2, 1];
  const replies = await bothWays(() =>
    Promise.all(rows.map((n, k) => infer('identity_batched', inferBody(k, n, undefined)))),
  );
  replies.forEach((reply, k) => {
    const expected = expectedOutputs(k, rows[k]!) as { text: string }[];
    assert.deepEqual(dataTexts(reply.body.toString('utf8')), expected.map((e) => e.text), `request ${k}`);
  });
  const stats = server.modelStatistics('identity_batched')[0]!;
  assert.ok(
    stats.execution_count < stats.inference_count,
    `the requests ran in batches (${stats.execution_count} executions for ${stats.inference_count} requests)`,
  );
});
