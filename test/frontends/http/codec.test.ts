import { test } from 'node:test';
import assert from 'node:assert/strict';
import { create } from '@bufbuild/protobuf';
import { NereidError } from '../../../src/errors.js';
import { ModelConfigSchema, ModelInputSchema, DataType } from '../../../src/gen/model_config_pb.js';
import { decodeInferBody, decodeRawInfer } from '../../../src/frontends/http/infer-decode.js';
import { JOIN_LIMIT, encodeInferResponse, parametersJson } from '../../../src/frontends/http/infer-encode.js';
import { inferHeaderLength } from '../../../src/frontends/http/routes/infer.js';
import { mayHaveLostPrecision, parseJsonCarefully, parseJsonText } from '../../../src/frontends/http/json-parse.js';
import { negotiateResponseEncoding } from '../../../src/frontends/http/compression.js';
import { stoi } from '../../../src/frontends/http/settings.js';

const MAX = 64 * 1024 * 1024;

function rejects(fn: () => unknown, status: number, message: string | RegExp): void {
  assert.throws(fn, (err: unknown) => {
    assert.ok(err instanceof NereidError, `expected NereidError, got ${String(err)}`);
    if (typeof message === 'string') assert.equal(err.message, message);
    else assert.match(err.message, message);
    assert.equal(err.httpStatus, status);
    return true;
  });
}

/** A JSON header followed by binary chunks, as a binary-extension client sends it. */
function binaryBody(header: object, chunks: Uint8Array[]): { body: Buffer; headerLength: number } {
  const json = Buffer.from(JSON.stringify(header));
  return { body: Buffer.concat([json, ...chunks]), headerLength: json.byteLength };
}

function int32Bytes(values: number[]): Buffer {
  const a = new Int32Array(values);
  return Buffer.from(a.buffer, a.byteOffset, a.byteLength);
}

// --- Inference-Header-Content-Length ----------------------------------------

test('header length: absent means the whole body is JSON', () => {
  assert.equal(inferHeaderLength(undefined, 120), 120);
});

test('header length: 0 and values up to the body length are accepted', () => {
  assert.equal(inferHeaderLength('0', 10), 0);
  assert.equal(inferHeaderLength('10', 10), 10);
  assert.equal(inferHeaderLength(' 7', 10), 7);
});

test('header length: leading digits followed by junk are accepted (stoi)', () => {
  assert.equal(inferHeaderLength('5abc', 10), 5);
});

test('header length: negative is a 400 range error', () => {
  rejects(() => inferHeaderLength('-1', 10), 400, 'inference header size should be in range (0, 10), got: -1');
});

test('header length: larger than the body is a 400 range error', () => {
  rejects(() => inferHeaderLength('11', 10), 400, 'inference header size should be in range (0, 10), got: 11');
});

test('header length: non-numeric is a 400 parse error', () => {
  rejects(() => inferHeaderLength('abc', 10), 400, 'Unable to parse Inference-Header-Content-Length, got: abc');
});

test('header length: beyond int32 is a 400 out-of-range error', () => {
  rejects(
    () => inferHeaderLength('99999999999', 10),
    400,
    'Unable to parse Inference-Header-Content-Length, value is ' +
    'out of range [ -2147483648, 2147483647 ], got: 99999999999',
  );
});

test('stoi follows std::stoi', () => {
  assert.equal(stoi('12'), 12);
  assert.equal(stoi('  +3x'), 3);
  assert.equal(stoi('x3'), 'invalid');
  assert.equal(stoi('2147483648'), 'range');
});

// --- binary tensor extension --------------------------------------------------

test('binary chunks are taken in input order and are views into the body', () => {
  const a = int32Bytes([1, 2, 3, 4]);
  const b = int32Bytes([5, 6, 7, 8]);
  const { body, headerLength } = binaryBody(
    {
      inputs: [
        { name: 'INPUT0', datatype: 'INT32', shape: [4], parameters: { binary_data_size: 16 } },
        { name: 'INPUT1', datatype: 'INT32', shape: [4], data: [9, 9, 9, 9] },
        { name: 'INPUT2', datatype: 'INT32', shape: [4], parameters: { binary_data_size: 16 } },
      ],
    },
    [a, b],
  );
  const d = decodeInferBody(body, headerLength, 'm', MAX);
  assert.deepEqual(d.inputs.map((t) => t.name), ['INPUT0', 'INPUT1', 'INPUT2']);
  assert.deepEqual(Buffer.from(d.inputs[0]!.data), a);
  assert.deepEqual(Buffer.from(d.inputs[2]!.data), b);
  assert.equal(d.inputs[0]!.data.buffer, body.buffer, 'binary input is a view, not a copy');
  assert.equal(d.inputs[0]!.data.byteOffset, body.byteOffset + headerLength);
  assert.deepEqual(Buffer.from(d.inputs[1]!.data), int32Bytes([9, 9, 9, 9]));
});

test('FP16 and BF16 travel as binary', () => {
  const half = Buffer.from([0x00, 0x3c, 0x00, 0x40]);
  const { body, headerLength } = binaryBody(
    { inputs: [{ name: 'X', datatype: 'FP16', shape: [2], parameters: { binary_data_size: 4 } }] },
    [half],
  );
  const d = decodeInferBody(body, headerLength, 'm', MAX);
  assert.equal(d.inputs[0]!.datatype, 'FP16');
  assert.deepEqual(Buffer.from(d.inputs[0]!.data), half);
});

test('leftover binary bytes are a 400', () => {
  const { body, headerLength } = binaryBody(
    { inputs: [{ name: 'X', datatype: 'INT32', shape: [1], parameters: { binary_data_size: 4 } }] },
    [int32Bytes([1, 2])],
  );
  rejects(
    () => decodeInferBody(body, headerLength, 'simple', MAX),
    400,
    "unexpected additional input data for model 'simple'",
  );
});

test('missing binary bytes are a 400 naming how many more were expected', () => {
  const { body, headerLength } = binaryBody(
    { inputs: [{ name: 'X', datatype: 'INT32', shape: [4], parameters: { binary_data_size: 16 } }] },
    [int32Bytes([1])],
  );
  rejects(
    () => decodeInferBody(body, headerLength, 'simple', MAX),
    400,
    "unexpected size for input 'X', expecting 12 additional bytes for model 'simple'",
  );
});

test('binary_data_size without the header surfaces as the short-data error', () => {
  const body = Buffer.from(
    JSON.stringify({ inputs: [{ name: 'X', datatype: 'INT32', shape: [1], parameters: { binary_data_size: 4 } }] }),
  );
  rejects(
    () => decodeInferBody(body, body.byteLength, 'm', MAX),
    400,
    "unexpected size for input 'X', expecting 4 additional bytes for model 'm'",
  );
});

test('an input must set exactly one of data / binary_data_size / shared_memory_region', () => {
  const body = Buffer.from(JSON.stringify({ inputs: [{ name: 'X', datatype: 'INT32', shape: [1] }] }));
  rejects(
    () => decodeInferBody(body, body.byteLength, 'm', MAX),
    400,
    "Input must set only one of the following fields: 'data', 'binary_data_size' " +
    "in 'parameters', 'shared_memory_region' in 'parameters'. But no field is set",
  );
  const both = Buffer.from(
    JSON.stringify({
      inputs: [{ name: 'X', datatype: 'INT32', shape: [1], data: [1], parameters: { binary_data_size: 4 } }],
    }),
  );
  rejects(() => decodeInferBody(both, both.byteLength, 'm', MAX), 400, /But set 'data' 'binary_data_size'$/);
});

test('missing inputs / name / shape fields are 500 JSON access errors', () => {
  const noInputs = Buffer.from('{}');
  rejects(
    () => decodeInferBody(noInputs, 2, 'm', MAX),
    500,
    "Unable to parse 'inputs': attempt to access non-existing object member 'inputs'",
  );
  const negative = Buffer.from(
    JSON.stringify({ inputs: [{ name: 'X', datatype: 'FP32', shape: [2, -5], data: [1] }] }),
  );
  rejects(
    () => decodeInferBody(negative, negative.byteLength, 'm', MAX),
    500,
    "Unable to parse 'shape': attempt to access JSON non-unsigned-integer as unsigned-integer",
  );
});

test('request parameters: reserved keys are typed, triton_* is refused, other types are refused', () => {
  const parse = (parameters: object) => {
    const body = Buffer.from(JSON.stringify({ parameters, inputs: [] }));
    return decodeInferBody(body, body.byteLength, 'm', MAX);
  };
  const ok = parse({
    sequence_id: 5,
    sequence_start: true,
    priority: 1,
    binary_data_output: true,
    custom: 'x',
    ratio: 0.5,
  });
  assert.deepEqual(ok.parameters, { sequence_id: 5, sequence_start: true, priority: 1, custom: 'x', ratio: 0.5 });
  assert.equal(ok.defaultBinary, true);
  assert.equal(parse({ sequence_id: 'abc' }).parameters!['sequence_id'], 'abc');
  rejects(
    () => parse({ triton_enable_empty_final_response: true }),
    400,
    "parameter keys starting with 'triton_' are reserved for Triton usage and should not be specified.",
  );
  rejects(
    () => parse({ custom: [1] }),
    400,
    "parameter 'custom' has invalid type. It should be either 'int', 'bool', or 'string'.",
  );
  rejects(
    () => parse({ priority: -1 }),
    500,
    "Unable to parse 'priority': attempt to access JSON non-unsigned-integer as unsigned-integer",
  );
});

test('requested outputs: binary_data, classification, duplicates', () => {
  const body = Buffer.from(
    JSON.stringify({
      id: 'r1',
      parameters: { binary_data_output: true },
      inputs: [],
      outputs: [{ name: 'A', parameters: { binary_data: false } }, { name: 'B', parameters: { classification: 3 } }],
    }),
  );
  const d = decodeInferBody(body, body.byteLength, 'm', MAX);
  assert.equal(d.id, 'r1');
  assert.deepEqual(d.outputs, [{ name: 'A' }, { name: 'B', classification: 3 }]);
  assert.equal(d.isBinary('A'), false);
  assert.equal(d.isBinary('B'), false, 'binary_data_output does not affect listed outputs');
  assert.equal(d.isBinary('C'), true);
  const dup = Buffer.from(JSON.stringify({ inputs: [], outputs: [{ name: 'A' }, { name: 'A' }] }));
  rejects(
    () => decodeInferBody(dup, dup.byteLength, 'm', MAX),
    400,
    "[request id: <id_unknown>] output 'A' already exists in request",
  );
});

test('shared-memory references are kept for the frontend to resolve (offset and size default to 0)', () => {
  const body = Buffer.from(
    JSON.stringify({
      inputs: [
        { name: 'A', datatype: 'INT32', shape: [1], data: [1] },
        {
          name: 'X',
          datatype: 'INT32',
          shape: [1],
          parameters: { shared_memory_region: 'r', shared_memory_byte_size: 4, shared_memory_offset: 8 },
        },
      ],
      outputs: [{ name: 'Y', parameters: { shared_memory_region: 'o' } }],
    }),
  );
  const d = decodeInferBody(body, body.byteLength, 'm', MAX);
  assert.deepEqual(d.shmInputs, [{ index: 1, ref: { region: 'r', offset: 8, byteSize: 4 } }]);
  assert.equal(d.inputs[1]!.data.byteLength, 0);
  assert.deepEqual([...d.shmOutputs!], [['Y', { region: 'o', offset: 0, byteSize: 0 }]]);
  const bad = Buffer.from(
    JSON.stringify({
      inputs: [
        {
          name: 'X',
          datatype: 'INT32',
          shape: [1],
          parameters: { shared_memory_region: 'r', shared_memory_offset: -1 },
        },
      ],
    }),
  );
  rejects(() => decodeInferBody(bad, bad.byteLength, 'm', MAX), 500, /^Unable to parse 'shared_memory_offset'/);
});

test('a JSON header over the input limit is a 400', () => {
  const body = Buffer.from(JSON.stringify({ inputs: [] }));
  rejects(
    () => decodeInferBody(body, body.byteLength, 'm', 4),
    400,
    /^request JSON size of 13 bytes exceeds the maximum allowed input size of 4 bytes/,
  );
});

// --- raw binary requests ------------------------------------------------------

function rawConfig(dataType: DataType, dims: bigint[], maxBatchSize = 0, inputs = 1) {
  return create(ModelConfigSchema, {
    name: 'raw',
    maxBatchSize,
    input: Array.from({ length: inputs }, (_, i) => create(ModelInputSchema, { name: `INPUT${i}`, dataType, dims })),
  });
}

test('raw request: shape is derived from the byte count', () => {
  const body = Buffer.from(new Float32Array([1, 2, 3, 4, 5, 6, 7, 8]).buffer);
  const d = decodeRawInfer(body, rawConfig(DataType.TYPE_FP32, [-1n], 8));
  assert.deepEqual(d.inputs[0]!.shape, [1, 8]);
  assert.equal(d.inputs[0]!.name, 'INPUT0');
  assert.equal(d.isBinary('anything'), true);
});

test('raw request: errors as Triton words them', () => {
  rejects(
    () => decodeRawInfer(Buffer.alloc(4), rawConfig(DataType.TYPE_FP32, [-1n], 0, 3)),
    400,
    "[request id: <id_unknown>] Raw request must only have 1 input (found " +
    "1) to be deduced but got 3 inputs in 'raw' model configuration",
  );
  rejects(
    () => decodeRawInfer(Buffer.alloc(8), rawConfig(DataType.TYPE_FP16, [-1n, -1n])),
    400,
    "[request id: <id_unknown>] The shape of the raw input 'INPUT0' can not " +
    "be deduced because there are more than one variable-sized dimension",
  );
  rejects(
    () => decodeRawInfer(Buffer.from('427'), rawConfig(DataType.TYPE_STRING, [-1n])),
    400,
    "[request id: <id_unknown>] For BYTE datatype raw input 'INPUT0', the model must have input shape [1]",
  );
});

test('raw request: BYTES gets its length prefix', () => {
  const d = decodeRawInfer(Buffer.from('427'), rawConfig(DataType.TYPE_STRING, [1n]));
  assert.deepEqual(Buffer.from(d.inputs[0]!.data), Buffer.from([3, 0, 0, 0, 0x34, 0x32, 0x37]));
});

// --- response encoding --------------------------------------------------------

test('response JSON keeps Triton\'s key order and puts binary outputs after it', () => {
  const body = Buffer.from(
    JSON.stringify({ inputs: [], outputs: [{ name: 'A' }, { name: 'B', parameters: { binary_data: true } }] }),
  );
  const plan = decodeInferBody(body, body.byteLength, 'm', MAX);
  const enc = encodeInferResponse(
    {
      modelName: 'm',
      modelVersion: '1',
      id: 'x',
      parameters: { p: 1, q: 'z' },
      outputs: [
        { name: 'A', datatype: 'INT32', shape: [2], data: int32Bytes([1, 2]) },
        { name: 'B', datatype: 'INT32', shape: [1], data: int32Bytes([3]) },
      ],
    },
    plan,
  );
  assert.equal(
    enc.json.toString(),
    '{"id":"x","model_name":"m","model_version":"1","parameters":{"p":1,"q":"z"},"outputs":[' +
      '{"name":"A","datatype":"INT32","shape":[2],"data":[1,2]},' +
      '{"name":"B","datatype":"INT32","shape":[1],"parameters":{"binary_data_size":4}}]}',
  );
  assert.equal(enc.binaryByteLength, 4);
  assert.deepEqual(Buffer.from(enc.binary[0]!), int32Bytes([3]));
  assert.equal(enc.text, enc.json.toString(), 'the JSON part as text and as bytes');
});

test('a small body with binary outputs is also laid out whole (JSON then bytes); a large one is left in parts', () => {
  const body = Buffer.from(
    JSON.stringify({
      inputs: [],
      outputs: [
        { name: 'A', parameters: { binary_data: true } },
        { name: 'B', parameters: { binary_data: true } },
      ],
    }),
  );
  const plan = decodeInferBody(body, body.byteLength, 'm', MAX);
  const response = (n: number) => ({
    modelName: 'm',
    modelVersion: '1',
    id: 'é',
    outputs: [
      { name: 'A', datatype: 'INT32' as const, shape: [n], data: int32Bytes(Array.from({ length: n }, (_, i) => i)) },
      { name: 'B', datatype: 'INT32' as const, shape: [1], data: int32Bytes([-5]) },
    ],
  });
  const small = encodeInferResponse(response(3), plan);
  assert.ok(small.whole !== undefined);
  assert.equal(small.whole.byteLength, small.json.byteLength + small.binaryByteLength);
  assert.deepEqual(small.whole, Buffer.concat([small.json, ...small.binary]));
  assert.equal(JSON.parse(small.json.toString()).id, 'é', 'the JSON part is UTF-8');
  assert.deepEqual(
    small.whole.subarray(small.json.byteLength),
    Buffer.concat([int32Bytes([0, 1, 2]), int32Bytes([-5])]),
  );

  const large = encodeInferResponse(response(JOIN_LIMIT / 4), plan);
  assert.equal(large.whole, undefined);
  assert.equal(large.binaryByteLength, JOIN_LIMIT + 4);
  assert.deepEqual(Buffer.from(large.binary[1]!), int32Bytes([-5]));
});

test('response without an id omits it; zero-byte binary outputs add no bytes', () => {
  const body = Buffer.from(JSON.stringify({ parameters: { binary_data_output: true }, inputs: [] }));
  const plan = decodeInferBody(body, body.byteLength, 'm', MAX);
  const enc = encodeInferResponse(
    {
      modelName: 'm',
      modelVersion: '2',
      id: '',
      outputs: [{ name: 'E', datatype: 'FP32', shape: [0], data: new Uint8Array(0) }],
    },
    plan,
  );
  assert.equal(
    enc.json.toString(),
    '{"model_name":"m","model_version":"2",' +
      '"outputs":[{"name":"E","datatype":"FP32","shape":[0],"parameters":{"binary_data_size":0}}]}',
  );
  assert.equal(enc.binaryByteLength, 0);
});

test('a JSON output a backend formatted already is written with that text; binary outputs ignore it', () => {
  const body = Buffer.from(
    JSON.stringify({ inputs: [], outputs: [{ name: 'A' }, { name: 'B', parameters: { binary_data: true } }] }),
  );
  const plan = decodeInferBody(body, body.byteLength, 'm', MAX);
  const enc = encodeInferResponse(
    {
      modelName: 'm',
      modelVersion: '1',
      id: '',
      outputs: [
        // The text, not the bytes, is written (a backend formats it with the same codec; here it differs to show which
        // one is used).
        {
          name: 'A',
          datatype: 'FP32',
          shape: [2],
          data: new Uint8Array(new Float32Array([1, 2]).buffer),
          jsonData: '[7.0,8.0]',
        },
        { name: 'B', datatype: 'INT32', shape: [1], data: int32Bytes([3]), jsonData: '[9]' },
      ],
    },
    plan,
  );
  assert.equal(
    enc.json.toString(),
    '{"model_name":"m","model_version":"1","outputs":[{"name":"A","datatype":"FP32","shape":[2],"data":[7.0,8.0]},' +
      '{"name":"B","datatype":"INT32","shape":[1],"parameters":{"binary_data_size":4}}]}',
  );
  assert.deepEqual(Buffer.from(enc.binary[0]!), int32Bytes([3]));
});

test('the JSON output hint: binary, shared-memory and classification outputs ' +
  'are not JSON text; unlisted outputs follow binary_data_output', () => {
  const decode = (doc: object) => {
    const body = Buffer.from(JSON.stringify(doc));
    return decodeInferBody(body, body.byteLength, 'm', MAX);
  };
  const listed = decode({
    inputs: [],
    outputs: [
      { name: 'J' },
      { name: 'B', parameters: { binary_data: true } },
      { name: 'C', parameters: { classification: 2 } },
      { name: 'S', parameters: { shared_memory_region: 'r', shared_memory_byte_size: 4 } },
    ],
  });
  assert.deepEqual(['J', 'B', 'C', 'S'].map((n) => listed.wantsJson(n)), [true, false, false, false]);
  assert.equal(listed.anyJson, true);
  assert.equal(decode({ inputs: [], outputs: [{ name: 'B', parameters: { binary_data: true } }] }).anyJson, false);
  const unlisted = decode({ inputs: [] });
  assert.equal(unlisted.anyJson, true);
  assert.equal(unlisted.wantsJson('ANY'), true);
  const binaryByDefault = decode({ inputs: [], parameters: { binary_data_output: true } });
  assert.equal(binaryByDefault.anyJson, false);
  assert.equal(binaryByDefault.wantsJson('ANY'), false);
});

// --- JSON parsing -------------------------------------------------------------

test('malformed JSON reports Triton\'s parser error text (500)', () => {
  rejects(() => parseJsonText(''), 500, 'failed to parse the request JSON buffer: The document is empty. at 0');
  rejects(() => parseJsonText('{"a":}'), 500, 'failed to parse the request JSON buffer: Invalid value. at 5');
  rejects(
    () => parseJsonText('{"a":1'),
    500,
    "failed to parse the request JSON buffer: Missing a comma or '}' after an object member. at 6",
  );
  rejects(
    () => parseJsonText('[1,2'),
    500,
    "failed to parse the request JSON buffer: Missing a comma or ']' after an array element. at 4",
  );
  rejects(
    () => parseJsonText('{1:2}'),
    500,
    'failed to parse the request JSON buffer: Missing a name for object member. at 1',
  );
  rejects(
    () => parseJsonText('{"a" 1}'),
    500,
    'failed to parse the request JSON buffer: Missing a colon after a name of object member. at 5',
  );
  rejects(
    () => parseJsonText('{} x'),
    500,
    'failed to parse the request JSON buffer: The document root must not be followed by other values. at 3',
  );
  rejects(
    () => parseJsonText('"abc'),
    500,
    'failed to parse the request JSON buffer: Missing a closing quotation mark in string. at 4',
  );
  rejects(
    () => parseJsonText('[1.]'),
    500,
    'failed to parse the request JSON buffer: Miss fraction part in number. at 3',
  );
  rejects(() => parseJsonText('[nul]'), 500, 'failed to parse the request JSON buffer: Invalid value. at 4');
});

test('NaN and Infinity literals are accepted as numbers', () => {
  const v = parseJsonText('{"data":[NaN, Infinity, -Infinity, -Inf, "NaN"]}') as { data: unknown[] };
  assert.ok(Number.isNaN(v.data[0]));
  assert.equal(v.data[1], Infinity);
  assert.equal(v.data[2], -Infinity);
  assert.equal(v.data[3], -Infinity);
  assert.equal(v.data[4], 'NaN');
});

test('deeply nested documents do not overflow the parser', () => {
  const depth = 100000;
  const text = '{"ready":' + '['.repeat(depth) + 'true' + ']'.repeat(depth) + '}';
  assert.equal(typeof parseJsonText(text), 'object');
  rejects(
    () => parseJsonText('['.repeat(depth) + ']'.repeat(depth - 1)),
    500,
    /Missing a comma or '\]' after an array element/,
  );
});

// --- compression negotiation --------------------------------------------------

test('Accept-Encoding is negotiated with q-values, first wins ties', () => {
  assert.equal(negotiateResponseEncoding(undefined), 'identity');
  assert.equal(negotiateResponseEncoding('gzip'), 'gzip');
  assert.equal(negotiateResponseEncoding('deflate, gzip'), 'deflate');
  assert.equal(negotiateResponseEncoding('gzip;q=0.5, deflate;q=0.8'), 'deflate');
  assert.equal(negotiateResponseEncoding('gzip;q=0'), 'identity');
  assert.equal(negotiateResponseEncoding('br'), 'identity');
  assert.equal(negotiateResponseEncoding('identity;q=0.9, gzip;q=0.1'), 'identity');
  assert.equal(negotiateResponseEncoding('gzip;q=abc, deflate'), 'deflate');
});

test('integers beyond 2^53 stay exact (BigInt) for INT64/UINT64 data and parameters', () => {
  const text =
    '{"parameters":{"sequence_id":18446744073709551615,"big":-9223372036854775808},"inputs":[' +
    '{"name":"A","datatype":"INT64","shape":[3],"data":[9007199254740993,-9223372036854775808,1]},' +
    '{"name":"B","datatype":"UINT64","shape":[1],"data":[18446744073709551615]},' +
    '{"name":"C","datatype":"FP64","shape":[2],"data":[0.12345678901234567,12345678901234567890]},' +
    '{"name":"S","datatype":"BYTES","shape":[1],"data":["12345678901234567890"]}]}';
  const body = Buffer.from(text);
  const d = decodeInferBody(body, body.byteLength, 'm', MAX);
  const a = d.inputs[0]!.data;
  assert.deepEqual([...new BigInt64Array(new Uint8Array(a).buffer)], [9007199254740993n, -9223372036854775808n, 1n]);
  const b = Buffer.from(d.inputs[1]!.data);
  assert.equal(b.readBigUInt64LE(0), 18446744073709551615n);
  const c = Buffer.from(d.inputs[2]!.data);
  // eslint-disable-next-line no-loss-of-precision -- the literal rounds as the JSON text does, which is what is tested
  assert.equal(c.readDoubleLE(0), 0.12345678901234567);
  // eslint-disable-next-line no-loss-of-precision -- the literal rounds as the JSON text does, which is what is tested
  assert.equal(c.readDoubleLE(8), 12345678901234567890);
  assert.equal(Buffer.from(d.inputs[3]!.data).subarray(4).toString(), '12345678901234567890');
  assert.deepEqual(d.parameters, { sequence_id: 18446744073709551615n, big: -9223372036854775808n });
  const tooBig = Buffer.from('{"inputs":[{"name":"A","datatype":"INT64","shape":[1],"data":[9223372036854775808]}]}');
  rejects(
    () => decodeInferBody(tooBig, tooBig.byteLength, 'm', MAX),
    400,
    "unable to parse 'data' for input 'A': the number 9223372036854775808 overflows the input's data type INT64",
  );
  assert.equal(
    typeof (parseJsonText('[0.1234567890123456789]') as unknown[])[0],
    'number',
    'long fractions are not integers',
  );
});

test('a long integer parameter stays exact in any request, and comes back exact in the response parameters', () => {
  const text =
    '{"id":"q","parameters":{"p":12345678901234567891,"n":-12345678901234567},"inputs":[' +
    '{"name":"F","datatype":"FP32","shape":[2],"data":[1.5,12345678901234567891]}]}';
  const body = Buffer.from(text);
  const d = decodeInferBody(body, body.byteLength, 'm', MAX);
  assert.deepEqual(d.parameters, { p: 12345678901234567891n, n: -12345678901234567n });
  const f = new Float32Array(new Uint8Array(d.inputs[0]!.data).buffer);
  // eslint-disable-next-line no-loss-of-precision -- the literal rounds as the JSON text does, which is what is tested
  assert.deepEqual([...f], [1.5, Math.fround(12345678901234567891)]);
  assert.equal(parametersJson(d.parameters), '{"p":12345678901234567891,"n":-12345678901234567}');
});

test('parseJsonText answers as the careful path on generated ' +
  'documents (long integers, huge numbers, digits in strings)', () => {
  let seed = 12345;
  const rand = (n: number) => {
    seed = (seed * 1103515245 + 12345) % 2147483648;
    return seed % n;
  };
  const numbers = [
    '0',
    '-1',
    '7',
    '1.5',
    '-2.25e3',
    '1e20',
    '1e100',
    '1E+0100',
    '1e-400',
    '1e400',
    '-1e309',
    '9007199254740991',
    '9007199254740992',
    '-9007199254740993',
    '12345678901234567891',
    '1234567890123456',
    '1.1234567890123456',
    `${'1'.repeat(309)}`,
    `0.${'1'.repeat(400)}`,
  ];
  const strings = ['"a"', '"12345678901234567891"', '"1e400"', '""'];
  const value = (depth: number): string => {
    const k = rand(depth > 3 ? 2 : 4);
    if (k === 0) return numbers[rand(numbers.length)]!;
    if (k === 1) return strings[rand(strings.length)]!;
    const n = rand(4);
    const items = Array.from({ length: n }, (_, i) => (k === 2 ? value(depth + 1) : `"k${i}":${value(depth + 1)}`));
    return k === 2 ? `[${items.join(',')}]` : `{${items.join(',')}}`;
  };
  let lossy = 0;
  for (let i = 0; i < 5000; i++) {
    const text = value(0);
    if (mayHaveLostPrecision(JSON.parse(text))) lossy++;
    assert.deepEqual(parseJsonText(text), parseJsonCarefully(text), text);
  }
  assert.ok(lossy > 500 && lossy < 4500, `the generator reaches both answers (${lossy} lossy)`);
  assert.equal(
    mayHaveLostPrecision(JSON.parse('[9007199254740991, "12345678901234567891", -1.5e-300, 12345.678]')),
    false,
  );
  // Every double from 2^53 up is integral: a large float takes the careful path too, which answers the same.
  assert.equal(mayHaveLostPrecision(JSON.parse('[1e308]')), true);
  assert.equal(mayHaveLostPrecision(JSON.parse('{"a":[[{"b":9007199254740992}]]}')), true);
  assert.equal(mayHaveLostPrecision(JSON.parse('[1, 2, -1e309]')), true);
  const deep = '['.repeat(100_000) + '12345678901234567891' + ']'.repeat(100_000);
  assert.equal(mayHaveLostPrecision(JSON.parse(deep)), true, 'deep nesting is walked without recursion');
});

test('a header sent again decodes the same, each body keeping its own ' +
  'bytes, and later requests are not changed by earlier ones', () => {
  const header = {
    id: '',
    parameters: { priority: 2 },
    inputs: [
      { name: 'A', datatype: 'INT32', shape: [1, 2], parameters: { binary_data_size: 8 } },
      { name: 'B', datatype: 'INT32', shape: [2], data: [5, 6] },
    ],
    outputs: [{ name: 'OUT', parameters: { binary_data: true } }],
  };
  const first = binaryBody(header, [int32Bytes([1, 2])]);
  const second = binaryBody(header, [int32Bytes([3, 4])]);
  const a = decodeInferBody(first.body, first.headerLength, 'm', MAX);
  (a.inputs[0]!.shape as number[]).push(99);
  a.parameters!['priority'] = 7;
  a.outputs!.push({ name: 'EXTRA' });
  const b = decodeInferBody(second.body, second.headerLength, 'm', MAX);
  assert.deepEqual([...new Int32Array(Uint8Array.from(b.inputs[0]!.data).buffer)], [3, 4]);
  assert.deepEqual([...new Int32Array(Uint8Array.from(b.inputs[1]!.data).buffer)], [5, 6]);
  assert.deepEqual(b.inputs[0]!.shape, [1, 2]);
  assert.deepEqual(b.parameters, { priority: 2 });
  assert.deepEqual(b.outputs, [{ name: 'OUT' }]);
  assert.deepEqual([...new Int32Array(Uint8Array.from(a.inputs[0]!.data).buffer)], [1, 2]);
});
