/**
 * The client's hand-written ModelInferRequest writer and ModelInferResponse
 * reader against the generated protobuf code: what one writes, the other
 * reads the same.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { create, equals, fromBinary, toBinary } from '@bufbuild/protobuf';
import {
  ModelInferRequestSchema,
  ModelInferResponseSchema,
  type ModelInferResponse,
} from '../../src/gen/grpc_service_pb.js';
import { encodeInferRequest, readInferAnswer } from '../../src/client/grpc-wire.js';
import { wireInputs } from '../../src/client/tensors.js';
import type { WireRequest } from '../../src/client/transport.js';

const int = (v: bigint) => ({ parameterChoice: { case: 'int64Param' as const, value: v } });
const str = (v: string) => ({ parameterChoice: { case: 'stringParam' as const, value: v } });

test('the hand-written ModelInferRequest decodes as the generated code expects', () => {
  const inputs = wireInputs('m', [
    { name: 'A', datatype: 'FP32', shape: [2, 3], data: new Float32Array([1, 2, 3, 4, 5, 6]) },
    { name: 'ü-name', datatype: 'BYTES', shape: [2], data: ['x', 'ÿz'], parameters: { p: 'q', n: -5, big: 300 } },
    { name: 'S', datatype: 'INT32', shape: [200, 1000], sharedMemory: { region: 'r', byteSize: 800000, offset: 8 } },
    { name: 'E', datatype: 'INT64', shape: [], data: [7n] },
  ]);
  const r: WireRequest = {
    model: 'model',
    version: '3',
    id: 'req-1',
    inputs,
    outputs: [
      { name: 'OUT' },
      { name: 'TOP', classification: 3, parameters: { f: 0.5, t: true, u: 2n ** 64n - 1n, neg: -(2n ** 63n) } },
      { name: 'SHM', sharedMemory: { region: 'o', byteSize: 16 } },
    ],
    parameters: { priority: 2, flag: false, huge: 1e300, text: 'a"b' },
    bytesAsStrings: false,
  };
  const got = fromBinary(ModelInferRequestSchema, encodeInferRequest(r, true));
  const want = create(ModelInferRequestSchema, {
    modelName: 'model',
    modelVersion: '3',
    id: 'req-1',
    parameters: {
      priority: int(2n),
      flag: { parameterChoice: { case: 'boolParam', value: false } },
      huge: { parameterChoice: { case: 'doubleParam', value: 1e300 } },
      text: str('a"b'),
      triton_enable_empty_final_response: { parameterChoice: { case: 'boolParam', value: true } },
    },
    inputs: [
      { name: 'A', datatype: 'FP32', shape: [2n, 3n] },
      { name: 'ü-name', datatype: 'BYTES', shape: [2n], parameters: { p: str('q'), n: int(-5n), big: int(300n) } },
      {
        name: 'S',
        datatype: 'INT32',
        shape: [200n, 1000n],
        parameters: {
          shared_memory_region: str('r'),
          shared_memory_byte_size: int(800000n),
          shared_memory_offset: int(8n),
        },
      },
      { name: 'E', datatype: 'INT64', shape: [] },
    ],
    outputs: [
      { name: 'OUT' },
      {
        name: 'TOP',
        parameters: {
          f: { parameterChoice: { case: 'doubleParam', value: 0.5 } },
          t: { parameterChoice: { case: 'boolParam', value: true } },
          u: { parameterChoice: { case: 'uint64Param', value: 2n ** 64n - 1n } },
          neg: int(-(2n ** 63n)),
          classification: int(3n),
        },
      },
      { name: 'SHM', parameters: { shared_memory_region: str('o'), shared_memory_byte_size: int(16n) } },
    ],
    rawInputContents: [inputs[0]!.bytes!, inputs[1]!.bytes!, inputs[3]!.bytes!],
  });
  assert.ok(equals(ModelInferRequestSchema, got, want), JSON.stringify(got, (_k, v: unknown) => String(v)));
  // A bare request: no version, id or parameters written.
  const bare = encodeInferRequest({ ...r, version: '', id: '', parameters: undefined, outputs: undefined }, false);
  const b = fromBinary(ModelInferRequestSchema, bare);
  assert.equal(b.modelVersion, '');
  assert.deepEqual(Object.keys(b.parameters), []);
  assert.equal(b.outputs.length, 0);
  assert.equal(b.rawInputContents.length, 3);
});

function sameAnswer(got: ReturnType<typeof readInferAnswer>, want: ModelInferResponse): void {
  assert.ok(got !== undefined);
  assert.equal(got.modelName, want.modelName);
  assert.equal(got.modelVersion, want.modelVersion);
  assert.equal(got.id, want.id);
  assert.deepEqual(got.parameters, want.parameters);
  assert.equal(got.outputs.length, want.outputs.length);
  got.outputs.forEach((o, i) => {
    const w = want.outputs[i]!;
    assert.equal(o.name, w.name);
    assert.equal(o.datatype, w.datatype);
    assert.deepEqual(o.shape.map(Number), w.shape.map(Number));
    assert.deepEqual(o.parameters, w.parameters);
  });
  assert.deepEqual(got.rawOutputContents.map((b) => [...b]), want.rawOutputContents.map((b) => [...b]));
}

test('the hand-written ModelInferResponse reader reads what the generated code writes', () => {
  const msg = create(ModelInferResponseSchema, {
    modelName: 'mlp',
    modelVersion: '1',
    id: 'é',
    parameters: {
      triton_final_response: { parameterChoice: { case: 'boolParam', value: true } },
      n: int(12345678901n),
      d: { parameterChoice: { case: 'doubleParam', value: -2.5 } },
      s: str('text'),
      u: { parameterChoice: { case: 'uint64Param', value: 7n } },
    },
    outputs: [
      { name: 'Y', datatype: 'FP32', shape: [1n, 300n], parameters: { k: str('v') } },
      { name: 'Z', datatype: 'BYTES', shape: [0n] },
    ],
    rawOutputContents: [new Uint8Array(1200).fill(7), new Uint8Array(0)],
  });
  const bytes = toBinary(ModelInferResponseSchema, msg);
  const got = readInferAnswer(bytes);
  sameAnswer(got, fromBinary(ModelInferResponseSchema, bytes));
  // Raw contents are views of the received bytes, not copies.
  assert.equal(got!.rawOutputContents[0]!.buffer, bytes.buffer);
});

test('the reader leaves typed contents, unknown fields and malformed bytes to the generated decoder', () => {
  const typed = create(ModelInferResponseSchema, {
    modelName: 'm',
    outputs: [{ name: 'Y', datatype: 'INT32', shape: [1n], contents: { intContents: [1] } }],
  });
  assert.equal(readInferAnswer(toBinary(ModelInferResponseSchema, typed)), undefined);
  const good = toBinary(ModelInferResponseSchema, create(ModelInferResponseSchema, { modelName: 'm' }));
  // Field 9, varint: unknown to the reader.
  assert.equal(readInferAnswer(new Uint8Array([...good, 0x48, 0x01])), undefined);
  // A length that runs past the end.
  assert.equal(readInferAnswer(new Uint8Array([0x0a, 0x05, 0x61])), undefined);
  // A negative dim (a 10-byte varint).
  const negative = create(ModelInferResponseSchema, { outputs: [{ name: 'Y', datatype: 'INT32', shape: [-1n] }] });
  assert.equal(readInferAnswer(toBinary(ModelInferResponseSchema, negative)), undefined);
});
