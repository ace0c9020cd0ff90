import { test } from 'node:test';
import assert from 'node:assert/strict';
import { DATATYPES, type Datatype } from '../../../src/tensor/datatype.js';
import { decodeBytesElements } from '../../../src/tensor/tensor.js';
import { type ModelInfo, parseModel } from '../../../src/cli/perf/model.js';
import {
  assembleRequest,
  generateStep,
  parseInputDataJson,
  toBFloat16Bits,
  toFloat16Bits,
} from '../../../src/cli/perf/input-data.js';
import { encodeHttpInferBody } from '../../../src/cli/perf/http-body.js';
import { PerfError } from '../../../src/cli/perf/errors.js';

interface T {
  name: string;
  datatype: string;
  shape: number[];
}

function model(
  inputs: T[],
  maxBatchSize = 0,
  shapes = new Map<string, number[]>(),
  configInputs: unknown[] = [],
): ModelInfo {
  const withBatch = (t: T) => ({ ...t, shape: maxBatchSize > 0 ? [-1, ...t.shape] : t.shape });
  return parseModel(
    {
      name: 'm',
      versions: ['1'],
      platform: 'x',
      inputs: inputs.map(withBatch),
      outputs: [
        { name: 'OUT', datatype: 'FP32', shape: withBatch({ name: 'OUT', datatype: 'FP32', shape: [2] }).shape },
      ],
    },
    { name: 'm', max_batch_size: maxBatchSize, input: configInputs },
    '',
    shapes,
  );
}

function seq(values: number[]): () => number {
  let i = 0;
  return () => values[i++ % values.length]!;
}

function perfError(fn: () => unknown, pattern: RegExp): void {
  assert.throws(fn, (e: unknown) => e instanceof PerfError && pattern.test(e.message));
}

test('generates data of the right size for every fixed-size datatype', () => {
  for (const info of DATATYPES) {
    if (info.name === 'BYTES') continue;
    const m = model([{ name: 'X', datatype: info.name, shape: [2, 3] }]);
    const step = generateStep(m, { zero: false, stringLength: 4, stringData: undefined, random: seq([0.25, 0.75]) });
    const t = step.get('X')!;
    assert.deepEqual(t.shape, [2, 3]);
    assert.equal(t.data.byteLength, 6 * info.byteSize, info.name);
    const zero = generateStep(m, { zero: true, stringLength: 4, stringData: undefined }).get('X')!;
    assert.ok(zero.data.every((b) => b === 0), `${info.name} zero`);
  }
});

test('random BOOL is 0/1 and random floats are finite', () => {
  const m = model([
    { name: 'B', datatype: 'BOOL', shape: [50] },
    { name: 'F', datatype: 'FP32', shape: [50] },
    { name: 'H', datatype: 'FP16', shape: [4] },
  ]);
  const step = generateStep(m, {
    zero: false,
    stringLength: 1,
    stringData: undefined,
    random: seq([0.1, 0.9, 0.5, 0.3]),
  });
  assert.ok(step.get('B')!.data.every((b) => b === 0 || b === 1));
  assert.ok(step.get('B')!.data.some((b) => b === 1));
  const f = new Float32Array(Uint8Array.from(step.get('F')!.data).buffer);
  assert.ok(f.every((x) => Number.isFinite(x) && x >= 0 && x < 1));
  const h = step.get('H')!.data;
  assert.equal(h[0]! | (h[1]! << 8), toFloat16Bits(0.1));
});

test('half and bfloat16 conversions', () => {
  assert.equal(toFloat16Bits(1), 0x3c00);
  assert.equal(toFloat16Bits(0.5), 0x3800);
  assert.equal(toFloat16Bits(-2), 0xc000);
  assert.equal(toFloat16Bits(65504), 0x7bff);
  assert.equal(toFloat16Bits(1e6), 0x7c00);
  assert.equal(toBFloat16Bits(1), 0x3f80);
  assert.equal(toBFloat16Bits(-2), 0xc000);
});

test('BYTES inputs use --string-length random strings or --string-data', () => {
  const m = model([{ name: 'S', datatype: 'BYTES', shape: [3] }]);
  const rnd = generateStep(m, { zero: false, stringLength: 7, stringData: undefined }).get('S')!;
  const els = decodeBytesElements(rnd.data);
  assert.equal(els.length, 3);
  for (const e of els) assert.equal(e.byteLength, 7);
  const fixed = generateStep(m, { zero: true, stringLength: 7, stringData: 'héllo' }).get('S')!;
  assert.deepEqual(
    decodeBytesElements(fixed.data).map((e) => Buffer.from(e).toString('utf8')),
    ['héllo', 'héllo', 'héllo'],
  );
});

test('variable dims need --shape; --shape fills them', () => {
  const noShape = model([{ name: 'IMG', datatype: 'FP32', shape: [3, -1, -1] }], 4);
  perfError(
    () => generateStep(noShape, { zero: true, stringLength: 1, stringData: undefined }),
    /IMG contains dynamic shape.*--shape IMG:3,N,N/,
  );
  const shaped = model([{ name: 'IMG', datatype: 'FP32', shape: [3, -1, -1] }], 4, new Map([['IMG', [3, 8, 8]]]));
  const t = generateStep(shaped, { zero: true, stringLength: 1, stringData: undefined }).get('IMG')!;
  assert.deepEqual(t.shape, [3, 8, 8]);
  assert.equal(t.data.byteLength, 3 * 8 * 8 * 4);
});

test('--shape naming an input the model lacks is an error', () => {
  perfError(
    () => model([{ name: 'IN', datatype: 'FP32', shape: [-1] }], 0, new Map([['NOPE', [3]]])),
    /--shape names input 'NOPE', but model 'm' has no such input \(inputs: IN\)/,
  );
});

test('model parser strips the batch dim, sorts inputs and reads config flags', () => {
  const m = parseModel(
    {
      name: 'm',
      inputs: [
        { name: 'b', datatype: 'INT64', shape: [-1, 4] },
        { name: 'a', datatype: 'BYTES', shape: [-1, 1] },
      ],
      outputs: [{ name: 'o', datatype: 'FP32', shape: [-1, 2] }],
    },
    {
      max_batch_size: '8',
      dynamic_batching: {},
      response_cache: { enable: true },
      input: [{ name: 'a', optional: true }, { name: 'b', is_shape_tensor: false }],
    },
    '3',
    new Map(),
  );
  assert.equal(m.maxBatchSize, 8);
  assert.equal(m.schedulerType, 'dynamic');
  assert.equal(m.responseCacheEnabled, true);
  assert.deepEqual(m.inputs.map((i) => [i.name, i.shape, i.optional]), [
    ['a', [1], true],
    ['b', [4], false],
  ]);
  assert.deepEqual(m.outputs[0]!.shape, [2]);
});

test('ensemble config lists composing models', () => {
  const m = parseModel(
    { name: 'ens', inputs: [], outputs: [] },
    {
      platform: 'ensemble',
      ensemble_scheduling: {
        step: [
          { model_name: 'pre', model_version: -1 },
          { model_name: 'net', model_version: '2' },
        ],
      },
    },
    '',
    new Map(),
  );
  assert.equal(m.schedulerType, 'ensemble');
  assert.deepEqual(m.composingModels, [
    { name: 'pre', version: '' },
    { name: 'net', version: '2' },
  ]);
});

const INT_MODEL = () =>
  model([
    { name: 'INPUT0', datatype: 'INT32', shape: [4] },
    { name: 'INPUT1', datatype: 'INT32', shape: [4] },
  ], 8);

test('JSON input data: flat, nested, content+shape and b64 forms', () => {
  const m = INT_MODEL();
  const b64 = Buffer.from(new Int32Array([9, 8, 7, 6]).buffer).toString('base64');
  const steps = parseInputDataJson(
    JSON.stringify({
      data: [
        { INPUT0: [1, 2, 3, 4], INPUT1: [[5, 6], [7, 8]] },
        { INPUT0: { content: [1, 1, 1, 1], shape: [4] }, INPUT1: { b64 } },
      ],
    }),
    m,
  );
  assert.equal(steps.length, 2);
  const i32 = (u: Uint8Array) => [...new Int32Array(Uint8Array.from(u).buffer)];
  assert.deepEqual(i32(steps[0]!.get('INPUT0')!.data), [1, 2, 3, 4]);
  assert.deepEqual(i32(steps[0]!.get('INPUT1')!.data), [5, 6, 7, 8]);
  assert.deepEqual(i32(steps[1]!.get('INPUT1')!.data), [9, 8, 7, 6]);

  // A batch of 3 takes steps 0, 1, 0 in order.
  const req = assembleRequest(m, steps, 0, 3);
  assert.deepEqual(req[0]!.shape, [3, 4]);
  assert.deepEqual(i32(req[0]!.data), [1, 2, 3, 4, 1, 1, 1, 1, 1, 2, 3, 4]);
});

test('JSON input data: every datatype converts, BYTES from strings', () => {
  const values: Record<string, unknown[]> = {
    BOOL: [true, false],
    UINT8: [0, 255],
    UINT16: [1, 65535],
    UINT32: [1, 4294967295],
    UINT64: [1, 2],
    INT8: [-128, 127],
    INT16: [-1, 1],
    INT32: [-5, 5],
    INT64: [-7, 7],
    FP32: [0.5, -1],
    FP64: [0.25, 2],
    BYTES: ['ab', 'c'],
  };
  for (const [dt, v] of Object.entries(values)) {
    const m = model([{ name: 'X', datatype: dt, shape: [2] }]);
    const step = parseInputDataJson(JSON.stringify({ data: [{ X: v }] }), m)[0]!;
    const data = step.get('X')!.data;
    if (dt === 'BYTES') assert.deepEqual(decodeBytesElements(data).map((e) => Buffer.from(e).toString()), ['ab', 'c']);
    else assert.equal(data.byteLength, 2 * (DATATYPES.find((d) => d.name === (dt as Datatype))!.byteSize), dt);
  }
});

test('JSON input data errors name the problem and the place', () => {
  const m = INT_MODEL();
  perfError(() => parseInputDataJson('{"data": [', m), /failed to parse the specified json file/);
  perfError(() => parseInputDataJson('{"rows": []}', m), /doesn't contain data field/);
  perfError(
    () => parseInputDataJson('{"data": [{"INPUT0": [1,2,3,4]}]}', m),
    /missing tensor INPUT1 \( Location stream id: 0, step id: 0\)/,
  );
  perfError(
    () => parseInputDataJson('{"data": [{"INPUT0": [1,2,3,4], "INPUT1": [1,2,3,4], "EXTRA": [1]}]}', m),
    /The input or output 'EXTRA' is not found/,
  );
  perfError(
    () => parseInputDataJson('{"data": [{"INPUT0": [1,2,3], "INPUT1": [1,2,3,4]}]}', m),
    /Expected: 16 bytes, Got: 12 bytes/,
  );
  perfError(() => parseInputDataJson('{"data": [{"INPUT0": [1,2,3,"x"], "INPUT1": [1,2,3,4]}]}', m), /int32 data/);
  perfError(() => parseInputDataJson('{"data": [{"INPUT0": 5, "INPUT1": [1,2,3,4]}]}', m), /malformed/);
  perfError(
    () => parseInputDataJson('{"data": [{"INPUT0": {"content": [1,2,3,4], "shape": [2,2]}, "INPUT1": [1,2,3,4]}]}', m),
    /incompatible with the model's input shape of \[4\]/,
  );
  const half = model([{ name: 'H', datatype: 'FP16', shape: [1] }]);
  perfError(() => parseInputDataJson('{"data": [{"H": [1.0]}]}', half), /explicit tensor description for fp16/);
});

test('HTTP body: binary layout and JSON layout', () => {
  const m = INT_MODEL();
  const steps = parseInputDataJson('{"data":[{"INPUT0":[1,2,3,4],"INPUT1":[5,6,7,8]}]}', m);
  const req = assembleRequest(m, steps, 0, 2);
  const bin = encodeHttpInferBody(req, ['OUT'], 'binary', 'binary');
  const header = JSON.parse(bin.body.subarray(0, bin.headerLength).toString());
  assert.deepEqual(header.inputs[0], {
    name: 'INPUT0',
    shape: [2, 4],
    datatype: 'INT32',
    parameters: { binary_data_size: 32 },
  });
  assert.deepEqual(header.outputs, [{ name: 'OUT', parameters: { binary_data: true } }]);
  assert.equal(bin.body.byteLength, bin.headerLength! + 64);
  const tail = new Int32Array(Uint8Array.from(bin.body.subarray(bin.headerLength!)).buffer);
  assert.deepEqual([...tail], [1, 2, 3, 4, 1, 2, 3, 4, 5, 6, 7, 8, 5, 6, 7, 8]);

  const json = encodeHttpInferBody(req, ['OUT'], 'json', 'json');
  assert.equal(json.headerLength, undefined);
  const doc = JSON.parse(json.body.toString());
  assert.deepEqual(doc.inputs[1].data, [5, 6, 7, 8, 5, 6, 7, 8]);
  assert.deepEqual(doc.outputs, [{ name: 'OUT', parameters: { binary_data: false } }]);

  const big = model([{ name: 'L', datatype: 'INT64', shape: [1] }]);
  const bigReq = assembleRequest(big, parseInputDataJson('{"data":[{"L":[123456789012]}]}', big), 0, 1);
  assert.match(encodeHttpInferBody(bigReq, [], 'json', 'binary').body.toString(), /"data":\[123456789012\]/);
});
