import { test } from 'node:test';
import assert from 'node:assert/strict';
import { create, equals, fromBinary, toBinary, type MessageInitShape } from '@bufbuild/protobuf';
import { ModelInferRequestSchema, type InferParameter } from '../../../src/gen/grpc_service_pb.js';
import { readModelInferRequest } from '../../../src/frontends/grpc/infer-request-read.js';
import { inferenceServiceDefinition } from '../../../src/frontends/grpc/index.js';
import { MalformedMessage } from '../../../src/frontends/grpc/service.js';

type Init = MessageInitShape<typeof ModelInferRequestSchema>;

const param = (c: InferParameter['parameterChoice']): { parameterChoice: InferParameter['parameterChoice'] } => ({
  parameterChoice: c,
});

/** Encoded as a client would, handed over as grpc-js does (a Buffer view past the 5-byte prefix). */
function onWire(init: Init): Buffer {
  const bytes = toBinary(ModelInferRequestSchema, create(ModelInferRequestSchema, init));
  const framed = Buffer.alloc(bytes.byteLength + 5);
  framed.set(bytes, 5);
  return framed.subarray(5);
}

/** The fast reader takes `bytes` and gives exactly what fromBinary gives. */
function assertSameAsGeneric(bytes: Buffer): void {
  const fast = readModelInferRequest(bytes);
  assert.ok(fast !== undefined, 'the fast reader declined a message it handles');
  const generic = fromBinary(ModelInferRequestSchema, bytes);
  // Prototypes (Buffer views), key order and values.
  assert.deepStrictEqual(fast, generic);
  assert.deepStrictEqual(Object.keys(fast), Object.keys(generic));
  assert.deepStrictEqual(Object.keys(fast.inputs[0] ?? {}), Object.keys(generic.inputs[0] ?? {}));
  assert.ok(equals(ModelInferRequestSchema, fast, generic));
  // Raw contents stay views into the received buffer.
  for (const raw of fast.rawInputContents) assert.equal(raw.buffer, bytes.buffer);
}

test('fast ModelInferRequest reader: typical requests equal fromBinary', () => {
  const cases: Init[] = [
    {},
    { modelName: 'm' },
    {
      modelName: 'mlp_tiny',
      modelVersion: '1',
      id: 'req-7',
      inputs: [{ name: 'input', datatype: 'FP32', shape: [1n, 10n] }],
      outputs: [{ name: 'output' }],
      rawInputContents: [new Uint8Array(40).fill(3)],
    },
    {
      modelName: 'simple',
      inputs: [
        { name: 'INPUT0', datatype: 'INT32', shape: [1n, 16n] },
        {
          name: 'INPUT1',
          datatype: 'INT32',
          shape: [1n, 16n],
          parameters: { binary_data_size: param({ case: 'int64Param', value: 64n }) },
        },
      ],
      outputs: [
        { name: 'OUTPUT0', parameters: { classification: param({ case: 'int64Param', value: 3n }) } },
        { name: 'OUTPUT1' },
      ],
      rawInputContents: [new Uint8Array(64), new Uint8Array(64).fill(255)],
    },
    {
      modelName: 'seq',
      parameters: {
        sequence_id: param({ case: 'int64Param', value: 2n ** 40n }),
        sequence_start: param({ case: 'boolParam', value: true }),
        sequence_end: param({ case: 'boolParam', value: false }),
        priority: param({ case: 'uint64Param', value: 7n }),
        ratio: param({ case: 'doubleParam', value: -0.125 }),
        text: param({ case: 'stringParam', value: 'héllo wörld' }),
        empty: param({ case: undefined }),
      },
      inputs: [
        {
          name: 'INPUT',
          datatype: 'BYTES',
          shape: [],
          parameters: { shared_memory_region: param({ case: 'stringParam', value: 'r0' }) },
        },
      ],
    },
    // Non-ASCII, a leading U+FEFF (text, not a byte-order mark), names past the short-ASCII path.
    {
      modelName: 'modèle-ü',
      id: '\uFEFFid',
      inputs: [{ name: 'x'.repeat(200), datatype: 'UINT8', shape: [0n, 2n ** 48n] }],
    },
    // Empty raw contents, many inputs.
    {
      modelName: 'many',
      inputs: Array.from({ length: 20 }, (_, i) => ({ name: `in${i}`, datatype: 'FP16', shape: [1n, BigInt(i)] })),
      rawInputContents: Array.from({ length: 20 }, (_, i) => new Uint8Array(i)),
    },
  ];
  for (const c of cases) assertSameAsGeneric(onWire(c));
});

/** Hand-built wire bytes: tag, then a length-delimited body. */
const field = (tag: number, body: number[]): number[] => [tag, body.length, ...body];
const ascii = (s: string): number[] => [...Buffer.from(s)];

test('fast ModelInferRequest reader: unpacked shapes, repeated scalars and map keys follow fromBinary', () => {
  const input = [
    ...field(0x0a, ascii('a')),
    0x18, 1, // shape, unpacked
    0x18, 0x80, 0x01, // 128
    ...field(0x1a, [2, 3]), // packed, appended
    ...field(0x0a, ascii('b')), // a later name replaces the first
  ];
  const entry = (key: string, value: number[]): number[] =>
    field(0x22, [...field(0x0a, ascii(key)), ...field(0x12, value)]);
  const bytes = Buffer.from([
    ...field(0x0a, ascii('first')),
    ...field(0x0a, ascii('second')),
    ...entry('k', [0x08, 1]),
    ...entry('k', [0x10, 5]), // the same key again: the later value wins
    ...field(0x22, field(0x0a, ascii('novalue'))), // an entry without a value
    ...field(0x22, field(0x12, [0x28, 0])), // an entry without a key
    ...entry('last', [0x08, 1, 0x10, 9]), // two choices of the oneof: the later wins
    ...field(0x2a, input),
  ]);
  assertSameAsGeneric(bytes);
  assert.equal(readModelInferRequest(bytes)!.modelName, 'second');
});

test('fast ModelInferRequest reader: declines what only fromBinary may ' +
  'decide, and the deserializer still answers as fromBinary', () => {
  const deserialize = inferenceServiceDefinition.ModelInfer!.requestDeserialize as (b: Buffer) => unknown;
  const valid = [...field(0x0a, ascii('m'))];
  const declined: Array<[string, Buffer]> = [
    [
      'typed contents',
      onWire({
        modelName: 'm',
        inputs: [{ name: 'i', datatype: 'INT32', shape: [1n], contents: { intContents: [1, 2] } }],
      }),
    ],
    ['a negative dimension', onWire({ modelName: 'm', inputs: [{ name: 'i', datatype: 'INT32', shape: [-1n] }] })],
    [
      'a negative int64 parameter',
      onWire({ modelName: 'm', parameters: { p: param({ case: 'int64Param', value: -3n }) } }),
    ],
    ['an unknown top-level field', Buffer.from([...valid, 0x40, 1])],
    ['an unknown tensor field', Buffer.from([...valid, ...field(0x2a, [0x30, 1])])],
    ['a known field with another wire type', Buffer.from([...valid, 0x08, 1])],
    ['invalid UTF-8 in a name', Buffer.from([...field(0x0a, [0xc3, 0x28])])],
    ['a length past the end', Buffer.from([0x0a, 5, 0x61])],
    ['a truncated varint', Buffer.from([...valid, 0x3a, 0x80])],
    ['a nested length past its parent', Buffer.from([0x2a, 2, 0x0a, 5, 0x61, 0x61, 0x61, 0x61, 0x61])],
    ['a group', Buffer.from([...valid, 0x0b, 0x0c])],
    [
      'a parameter named __proto__',
      onWire({ modelName: 'm', parameters: { ['__proto__']: param({ case: 'boolParam', value: true }) } }),
    ],
  ];
  for (const [what, bytes] of declined) {
    assert.equal(readModelInferRequest(bytes), undefined, what);
    let expected: unknown;
    try {
      expected = fromBinary(ModelInferRequestSchema, bytes);
    } catch (e) {
      expected = new MalformedMessage(ModelInferRequestSchema.typeName, (e as Error).message);
    }
    assert.deepStrictEqual(deserialize(bytes), expected, what);
  }
  // The invalid UTF-8 and the truncations are errors of the generic decoder, named in the reply.
  assert.ok(deserialize(Buffer.from([0x0a, 5, 0x61])) instanceof MalformedMessage);
  assert.ok(deserialize(Buffer.from([...field(0x0a, [0xc3, 0x28])])) instanceof MalformedMessage);
});

test('fast ModelInferRequest reader: ModelInfer and ModelStreamInfer ' +
  'deserialize through it to the generic result', () => {
  const bytes = onWire({
    modelName: 'm',
    inputs: [{ name: 'i', datatype: 'FP32', shape: [1n, 2n] }],
    rawInputContents: [new Uint8Array(8)],
  });
  for (const rpc of ['ModelInfer', 'ModelStreamInfer']) {
    const decoded = (inferenceServiceDefinition[rpc]!.requestDeserialize as (b: Buffer) => unknown)(bytes);
    assert.deepStrictEqual(decoded, fromBinary(ModelInferRequestSchema, bytes), rpc);
  }
});
