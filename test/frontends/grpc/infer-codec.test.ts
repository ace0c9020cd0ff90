import { test } from 'node:test';
import assert from 'node:assert/strict';
import { create, fromBinary, toBinary } from '@bufbuild/protobuf';
import {
  ModelInferRequestSchema,
  ModelInferResponseSchema,
  ModelStreamInferResponseSchema,
  type ModelInferRequest,
} from '../../../src/gen/grpc_service_pb.js';
import { decodeInferRequest } from '../../../src/frontends/grpc/infer-decode.js';
import { encodeInferResponse } from '../../../src/frontends/grpc/infer-encode.js';
import {
  bindAddress,
  channelOptionsFor,
  MAX_MESSAGE_BYTES,
  parseCompressionLevel,
} from '../../../src/frontends/grpc/options.js';
import type { InferResponse } from '../../../src/types/api.js';
import { NereidError } from '../../../src/errors.js';

function wire(init: Parameters<typeof create<typeof ModelInferRequestSchema>>[1]): ModelInferRequest {
  // Through the wire format, as the server sees it.
  return fromBinary(ModelInferRequestSchema, toBinary(ModelInferRequestSchema, create(ModelInferRequestSchema, init)));
}

const sampleResponse: InferResponse = {
  modelName: 'modèle',
  modelVersion: '3',
  id: 'req-1',
  parameters: {
    flag: true,
    off: false,
    count: 42,
    negative: -5,
    big: 2n ** 62n,
    huge: 2n ** 63n + 1n,
    ratio: 0.25,
    // An integral number past int64's range cannot be a varint: it goes as a double.
    outOfRange: 1e20,
    text: 'héllo',
    empty: '',
  },
  outputs: [
    {
      name: 'OUTPUT0',
      datatype: 'INT32',
      shape: [1, 4],
      data: new Uint8Array(new Int32Array([1, -2, 3, 2 ** 30]).buffer),
    },
    { name: 'EMPTY', datatype: 'FP32', shape: [0], data: new Uint8Array(0) },
    { name: 'S', datatype: 'BYTES', shape: [], data: new Uint8Array([1, 0, 0, 0, 120]) },
  ],
};

test('the hand-written response encoder agrees with the generated decoder', () => {
  const msg = fromBinary(ModelInferResponseSchema, encodeInferResponse(sampleResponse));
  assert.equal(msg.modelName, 'modèle');
  assert.equal(msg.modelVersion, '3');
  assert.equal(msg.id, 'req-1');
  const p = msg.parameters;
  assert.deepEqual(p.flag!.parameterChoice, { case: 'boolParam', value: true });
  assert.deepEqual(p.off!.parameterChoice, { case: 'boolParam', value: false });
  assert.deepEqual(p.count!.parameterChoice, { case: 'int64Param', value: 42n });
  assert.deepEqual(p.negative!.parameterChoice, { case: 'int64Param', value: -5n });
  assert.deepEqual(p.big!.parameterChoice, { case: 'int64Param', value: 2n ** 62n });
  assert.deepEqual(p.huge!.parameterChoice, { case: 'uint64Param', value: 2n ** 63n + 1n });
  assert.deepEqual(p.ratio!.parameterChoice, { case: 'doubleParam', value: 0.25 });
  assert.deepEqual(p.outOfRange!.parameterChoice, { case: 'doubleParam', value: 1e20 });
  assert.deepEqual(p.text!.parameterChoice, { case: 'stringParam', value: 'héllo' });
  assert.deepEqual(p.empty!.parameterChoice, { case: 'stringParam', value: '' });
  assert.equal(msg.parameters.triton_final_response, undefined);
  assert.deepEqual(
    msg.outputs.map((o) => [o.name, o.datatype, o.shape]),
    [
      ['OUTPUT0', 'INT32', [1n, 4n]],
      ['EMPTY', 'FP32', [0n]],
      ['S', 'BYTES', []],
    ],
  );
  assert.equal(msg.rawOutputContents.length, 3);
  assert.deepEqual([...new Int32Array(new Uint8Array(msg.rawOutputContents[0]!).buffer)], [1, -2, 3, 2 ** 30]);
  assert.equal(msg.rawOutputContents[1]!.byteLength, 0);
  assert.deepEqual([...msg.rawOutputContents[2]!], [1, 0, 0, 0, 120]);
});

test('the stream form wraps the response and marks it final', () => {
  const msg = fromBinary(ModelStreamInferResponseSchema, encodeInferResponse(sampleResponse, true));
  assert.equal(msg.errorMessage, '');
  assert.equal(msg.inferResponse!.id, 'req-1');
  assert.deepEqual(msg.inferResponse!.parameters.triton_final_response!.parameterChoice, {
    case: 'boolParam',
    value: true,
  });
  assert.equal(msg.inferResponse!.rawOutputContents.length, 3);
});

test('a large output is carried intact', () => {
  const data = new Uint8Array(3_000_000);
  for (let i = 0; i < data.length; i++) data[i] = i & 255;
  const res: InferResponse = {
    modelName: 'm',
    modelVersion: '1',
    id: '',
    outputs: [{ name: 'X', datatype: 'UINT8', shape: [data.length], data }],
  };
  const msg = fromBinary(ModelInferResponseSchema, encodeInferResponse(res));
  assert.ok(Buffer.from(msg.rawOutputContents[0]!).equals(data));
  assert.deepEqual(msg.outputs[0]!.shape, [BigInt(data.length)]);
});

test('raw input contents become tensors that view the received bytes', () => {
  const bytes = toBinary(
    ModelInferRequestSchema,
    create(ModelInferRequestSchema, {
      modelName: 'm',
      inputs: [{ name: 'A', datatype: 'INT32', shape: [2n] }],
      rawInputContents: [new Uint8Array(new Int32Array([7, 8]).buffer)],
    }),
  );
  const req = decodeInferRequest(fromBinary(ModelInferRequestSchema, bytes));
  const t = req.inputs[0]!;
  assert.equal(t.data.buffer, bytes.buffer, 'tensor data shares the message buffer');
  assert.deepEqual(t.shape, [2]);
  assert.equal(req.parameters, undefined);
  assert.equal(req.outputs, undefined);
});

test('typed contents of every data type pack to little-endian raw bytes', () => {
  const cases: Array<[string, Record<string, unknown>, ArrayBufferView]> = [
    ['BOOL', { boolContents: [true, false, true] }, new Uint8Array([1, 0, 1])],
    ['INT8', { intContents: [-1, 2] }, new Int8Array([-1, 2])],
    ['INT16', { intContents: [-300, 2] }, new Int16Array([-300, 2])],
    ['INT32', { intContents: [-70000, 2] }, new Int32Array([-70000, 2])],
    ['INT64', { int64Contents: [-(2n ** 40n), 5n] }, new BigInt64Array([-(2n ** 40n), 5n])],
    ['UINT8', { uintContents: [255, 1] }, new Uint8Array([255, 1])],
    ['UINT16', { uintContents: [65535, 1] }, new Uint16Array([65535, 1])],
    ['UINT32', { uintContents: [4294967295, 1] }, new Uint32Array([4294967295, 1])],
    ['UINT64', { uint64Contents: [2n ** 63n, 1n] }, new BigUint64Array([2n ** 63n, 1n])],
    ['FP32', { fp32Contents: [1.5, -2.25] }, new Float32Array([1.5, -2.25])],
    ['FP64', { fp64Contents: [1e300, -2.5] }, new Float64Array([1e300, -2.5])],
  ];
  for (const [datatype, contents, expected] of cases) {
    const req = decodeInferRequest(
      wire({ modelName: 'm', inputs: [{ name: 'X', datatype, shape: [2n], contents: contents as never }] }),
    );
    const want = new Uint8Array(expected.buffer, expected.byteOffset, expected.byteLength);
    assert.deepEqual([...req.inputs[0]!.data], [...want], datatype);
  }
});

test('BYTES from bytes_contents are length-prefixed like raw BYTES', () => {
  const enc = new TextEncoder();
  const req = decodeInferRequest(
    wire({
      modelName: 'm',
      inputs: [
        { name: 'S', datatype: 'BYTES', shape: [2n], contents: { bytesContents: [enc.encode('ab'), enc.encode('')] } },
      ],
    }),
  );
  assert.deepEqual([...req.inputs[0]!.data], [2, 0, 0, 0, 97, 98, 0, 0, 0, 0]);
});

test('request parameters are checked and passed through as Triton does', () => {
  const req = decodeInferRequest(
    wire({
      modelName: 'm',
      parameters: {
        priority: { parameterChoice: { case: 'int64Param', value: 2n } },
        timeout: { parameterChoice: { case: 'int64Param', value: 1000n } },
        sequence_id: { parameterChoice: { case: 'int64Param', value: 2n ** 60n } },
        sequence_start: { parameterChoice: { case: 'boolParam', value: true } },
        sequence_end: { parameterChoice: { case: 'boolParam', value: false } },
        custom_d: { parameterChoice: { case: 'doubleParam', value: 0.5 } },
        custom_s: { parameterChoice: { case: 'stringParam', value: 'x' } },
        triton_enable_empty_final_response: { parameterChoice: { case: 'boolParam', value: true } },
      },
    }),
  );
  assert.deepEqual(req.parameters, {
    priority: 2,
    timeout: 1000,
    sequence_id: 2n ** 60n,
    sequence_start: true,
    sequence_end: false,
    custom_d: 0.5,
    custom_s: 'x',
  });
  const uintPriority = decodeInferRequest(
    wire({ modelName: 'm', parameters: { priority: { parameterChoice: { case: 'uint64Param', value: 3n } } } }),
  );
  assert.equal(uintPriority.parameters!.priority, 3);
  const stringSequence = decodeInferRequest(
    wire({ modelName: 'm', parameters: { sequence_id: { parameterChoice: { case: 'stringParam', value: 'abc' } } } }),
  );
  assert.equal(stringSequence.parameters!.sequence_id, 'abc');
});

test('bad request parameters are INVALID_ARG with Triton wording', () => {
  const bad: Array<[string, Record<string, unknown>, RegExp]> = [
    ['priority', { case: 'int64Param', value: -1n }, /expected value >= 0/],
    ['priority', { case: 'stringParam', value: '1' }, /'priority' parameter, expected int64_param or uint64_param/],
    ['timeout', { case: 'doubleParam', value: 1 }, /'timeout' parameter, expected int64_param/],
    [
      'sequence_id',
      { case: 'boolParam', value: true },
      /'sequence_id' parameter, expected int64_param or string_param/,
    ],
    ['sequence_start', { case: 'int64Param', value: 1n }, /'sequence_start' parameter, expected bool_param/],
    ['triton_secret', { case: 'boolParam', value: true }, /reserved for Triton usage/],
    ['triton_enable_empty_final_response', { case: 'int64Param', value: 1n }, /expected bool_param/],
    [
      'custom',
      { case: 'uint64Param', value: 1n },
      /'custom' parameter, expected int64_param, bool_param, or string_param/,
    ],
  ];
  for (const [key, choice, message] of bad) {
    assert.throws(
      () => decodeInferRequest(wire({ modelName: 'm', parameters: { [key]: { parameterChoice: choice as never } } })),
      (e: unknown) => e instanceof NereidError && e.errorClass === 'INVALID_ARG' && message.test(e.message),
      key,
    );
  }
});

test('requested outputs carry classification and other parameters', () => {
  const req = decodeInferRequest(
    wire({
      modelName: 'm',
      outputs: [
        { name: 'A', parameters: { classification: { parameterChoice: { case: 'int64Param', value: 3n } } } },
        { name: 'B', parameters: { binary_data: { parameterChoice: { case: 'boolParam', value: true } } } },
        { name: 'C', parameters: { custom: { parameterChoice: { case: 'stringParam', value: 'v' } } } },
      ],
    }),
  );
  assert.deepEqual(req.outputs, [
    { name: 'A', classification: 3, parameters: undefined },
    { name: 'B' },
    { name: 'C', classification: undefined, parameters: { custom: 'v' } },
  ]);
  assert.throws(
    () =>
      decodeInferRequest(
        wire({
          modelName: 'm',
          outputs: [
            { name: 'A', parameters: { classification: { parameterChoice: { case: 'stringParam', value: '3' } } } },
          ],
        }),
      ),
    /'classification' parameter, expected int64_param/,
  );
});

test('contents mismatching the datatype, or two contents fields, are refused', () => {
  assert.throws(
    () =>
      decodeInferRequest(
        wire({
          modelName: 'm',
          inputs: [{ name: 'X', datatype: 'FP32', shape: [1n], contents: { intContents: [1] } }],
        }),
      ),
    /of type 'INT32', expected datatype 'FP32'/,
  );
  assert.throws(
    () =>
      decodeInferRequest(
        wire({
          modelName: 'm',
          inputs: [{ name: 'X', datatype: 'INT32', shape: [1n], contents: { intContents: [1], fp32Contents: [1] } }],
        }),
      ),
    /binary data was already supplied/,
  );
  assert.throws(
    () =>
      decodeInferRequest(
        wire({ modelName: 'm', inputs: [{ name: 'X', datatype: 'FLOAT', shape: [1n], contents: {} }] }),
      ),
    /invalid datatype 'FLOAT'/,
  );
});

test('options map flags onto grpc-js channel options', () => {
  const o = channelOptionsFor({ keepaliveTimeMs: 1000, keepalivePermitWithoutCalls: true, maxConnectionAgeMs: 5000 });
  assert.equal(o['grpc.keepalive_time_ms'], 1000);
  assert.equal(o['grpc.keepalive_timeout_ms'], 20000);
  assert.equal(o['grpc.keepalive_permit_without_calls'], 1);
  assert.equal(o['grpc.http2.max_pings_without_data'], 2);
  assert.equal(o['grpc.http2.min_ping_interval_without_data_ms'], 300000);
  assert.equal(o['grpc.http2.max_ping_strikes'], 2);
  assert.equal(o['grpc.max_connection_age_ms'], 5000);
  assert.equal(o['grpc.max_connection_age_grace_ms'], undefined);
  assert.equal(o['grpc.max_receive_message_length'], MAX_MESSAGE_BYTES);
  assert.equal(o['grpc.max_send_message_length'], 2 ** 31 - 1);
  assert.equal(o['grpc.enable_channelz'], 0);
  assert.equal(bindAddress('0.0.0.0', 8001), '0.0.0.0:8001');
  assert.equal(bindAddress('::1', 1), '[::1]:1');
  assert.equal(bindAddress('ipv6:[::1]', 1), '[::1]:1');
  assert.equal(parseCompressionLevel('HIGH'), 'high');
  assert.equal(parseCompressionLevel('max'), undefined);
});
