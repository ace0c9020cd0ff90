/** The worker-side checks of what a JavaScript model returns, and how its errors are described. */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import { describeError, locationIn } from '../../../src/backends/javascript/describe.js';
import { OutputChecker } from '../../../src/backends/javascript/outputs.js';
import type { WireRequest } from '../../../src/backends/javascript/protocol.js';
import { TensorError, packStaged, stageTensor, toModelTensor } from '../../../src/backends/javascript/tensors.js';

const request = (batchSize: number, requestedOutputs: string[]): WireRequest => ({
  id: 'r',
  inputs: [],
  requestedOutputs,
  parameters: {},
  batchSize,
  correlationId: 0n,
  flags: 0,
});

test('stageTensor accepts typed arrays of the datatype, raw bytes, plain arrays and BYTES elements', () => {
  const f = stageTensor('output', 0, { name: 'A', datatype: 'FP32', shape: [2], data: new Float32Array([1, 2]) });
  assert.equal(f.kind, 'copy');
  assert.deepEqual([...new Float32Array(f.bytes.slice().buffer)], [1, 2]);
  const raw = stageTensor('output', 0, {
    name: 'A',
    datatype: 'INT16',
    shape: [2],
    data: new Uint8Array([1, 0, 2, 0]),
  });
  assert.equal(raw.bytes.byteLength, 4);
  const plain = stageTensor('output', 0, { name: 'A', datatype: 'INT64', shape: [2], data: [3, 4n] });
  assert.deepEqual([...new BigInt64Array(plain.bytes.slice().buffer)], [3n, 4n]);
  const bools = stageTensor('output', 0, { name: 'A', datatype: 'BOOL', shape: [3], data: [true, false, true] });
  assert.deepEqual([...bools.bytes], [1, 0, 1]);
  const strings = stageTensor('output', 0, {
    name: 'S',
    datatype: 'BYTES',
    shape: [2],
    data: ['hé', new Uint8Array([0, 255])],
  });
  assert.equal(strings.kind, 'owned');
  assert.deepEqual([...strings.bytes], [3, 0, 0, 0, 0x68, 0xc3, 0xa9, 2, 0, 0, 0, 0, 255]);
  const shared = new Float64Array(new SharedArrayBuffer(16));
  assert.equal(stageTensor('output', 0, { name: 'A', datatype: 'FP64', shape: [2], data: shared }).kind, 'shared');
  // The datatype may be left to the configuration.
  assert.equal(stageTensor('output', 0, { name: 'A', shape: [1], data: new Int32Array(1) }, 'INT32').datatype, 'INT32');
});

test('BYTES elements passed on as they came stay in their shared buffer; any other arrangement is encoded', () => {
  const sab = new SharedArrayBuffer(32);
  const bytes = new Uint8Array(sab);
  bytes.set([2, 0, 0, 0, 104, 105, 0, 0, 0, 0, 1, 0, 0, 0, 33], 8);
  const a = new Uint8Array(sab, 12, 2);
  const empty = new Uint8Array(sab, 18, 0);
  const b = new Uint8Array(sab, 22, 1);
  const passed = stageTensor('output', 0, { name: 'S', datatype: 'BYTES', shape: [3], data: [a, empty, b] });
  assert.equal(passed.kind, 'shared');
  assert.equal(passed.bytes.buffer, sab);
  assert.deepEqual([passed.bytes.byteOffset, passed.bytes.byteLength], [8, 15]);
  // Reordered, or a view whose prefix is not its length: encoded afresh.
  assert.equal(stageTensor('output', 0, { name: 'S', datatype: 'BYTES', shape: [2], data: [b, a] }).kind, 'owned');
  const sub = stageTensor('output', 0, { name: 'S', datatype: 'BYTES', shape: [1], data: [a.subarray(1)] });
  assert.equal(sub.kind, 'owned');
  assert.deepEqual([...sub.bytes], [1, 0, 0, 0, 105]);
});

test('stageTensor names the tensor and what is wrong with it', () => {
  const cases: [unknown, RegExp][] = [
    [null, /^output 3 is null, not a \{ name, datatype, shape, data \} object$/],
    [{ datatype: 'FP32', shape: [1], data: [1] }, /^output 3 has no name$/],
    [
      { name: 'A', datatype: 'FLOAT', shape: [1], data: [1] },
      /^output 'A' has datatype "FLOAT", which is not a Triton datatype$/,
    ],
    [
      { name: 'A', datatype: 'FP32', shape: [1.5], data: [1] },
      /^output 'A' has shape \[1\.5\]; a shape is an array of whole numbers$/,
    ],
    [
      { name: 'A', datatype: 'FP32', shape: [2], data: new Float64Array(2) },
      /^output 'A' is FP32, so its data must be a Float32Array \(or raw bytes in a Uint8Array\), not a Float64Array$/,
    ],
    [
      { name: 'A', datatype: 'FP32', shape: [2], data: new Float32Array(3) },
      /^output 'A' has 12 bytes of data, but shape \[2\] of FP32 needs 8$/,
    ],
    [{ name: 'A', datatype: 'FP16', shape: [1], data: [1.5] }, /FP16 data must be a Uint16Array of raw 16-bit values/],
    [{ name: 'A', datatype: 'INT64', shape: [1], data: [1.5] }, /element 0 is a number, not an integer/],
    [{ name: 'A', datatype: 'INT32', shape: [1], data: ['x'] }, /element 0 is a string, not a number/],
    [
      { name: 'S', datatype: 'BYTES', shape: [2], data: ['a'] },
      /^output 'S' has 1 elements, but its shape \[2\] holds 2$/,
    ],
    [
      { name: 'S', datatype: 'BYTES', shape: [1], data: [42] },
      /BYTES element 0 is a number; give a Uint8Array or a string/,
    ],
    [
      { name: 'S', datatype: 'BYTES', shape: [1], data: 'abc' },
      /its data must be an array of Uint8Array or strings, not a string/,
    ],
    [{ name: 'A', datatype: 'FP32', shape: [1], data: { 0: 1 } }, /has data an object; give a typed array/],
  ];
  for (const [value, expected] of cases) {
    assert.throws(
      () => stageTensor('output', 3, value),
      (e: unknown) => e instanceof TensorError && expected.test(e.message),
      JSON.stringify(value),
    );
  }
});

test('packStaged shares shared bytes, hands over owned buffers and copies the rest into one buffer', () => {
  const shared = new Int32Array(new SharedArrayBuffer(8)).fill(7);
  const a = stageTensor('output', 0, { name: 'A', datatype: 'INT32', shape: [2], data: shared });
  const b = stageTensor('output', 1, { name: 'B', datatype: 'INT8', shape: [3], data: new Int8Array([1, -2, 3]) });
  const c = stageTensor('output', 2, { name: 'C', datatype: 'FP32', shape: [1], data: new Float32Array([0.5]) });
  const s = stageTensor('output', 3, { name: 'S', datatype: 'BYTES', shape: [1], data: ['x'] });
  const { wire, transfer } = packStaged([[a, b], [c, s]]);
  assert.equal(wire[0]![0]!.b, shared.buffer, 'shared by reference');
  assert.equal(wire[0]![1]!.b, wire[1]![0]!.b, 'copies share one buffer');
  assert.equal(wire[1]![0]!.o % 8, 0, 'copies are aligned');
  assert.deepEqual(transfer, [wire[0]![1]!.b, s.bytes.buffer]);
  const back = toModelTensor(wire[1]![0]!);
  assert.ok(back.data instanceof Float32Array);
  assert.deepEqual([...back.data], [0.5]);
  const bytes = toModelTensor(wire[1]![1]!);
  assert.deepEqual((bytes.data as Uint8Array[]).map((e) => Buffer.from(e).toString()), ['x']);
});

test('OutputChecker holds responses to the configuration and the request', () => {
  const checker = new OutputChecker(
    [
      { name: 'OUT', datatype: 'FP32', dims: [-1, 2] },
      { name: 'AUX', datatype: 'INT32', dims: [1] },
    ],
    8,
  );
  const out = (shape: number[], n = shape.reduce((x, y) => x * y, 1)) => ({
    name: 'OUT',
    datatype: 'FP32',
    shape,
    data: new Float32Array(n),
  });
  const ok = checker.check(0, request(2, ['OUT']), {
    outputs: [out([2, 5, 2]), { name: 'AUX', datatype: 'INT32', shape: [2, 1], data: [1, 2] }],
    parameters: { note: 'x' },
  });
  assert.equal(ok.error, undefined);
  assert.deepEqual(ok.outputs!.map((t) => t.name), ['OUT'], 'only the requested outputs');
  assert.deepEqual(ok.parameters, { note: 'x' });

  const errors: [unknown, string[], RegExp][] = [
    [
      { outputs: [out([3, 5, 2])] },
      ['OUT'],
      new RegExp(
        String.raw`^execute\(\) response 4: output 'OUT' has shape \[3,5,2\], but the model configuration expects ` +
        String.raw`\[2,-1,2\] \(the request's batch size 2 first\)$`,
      ),
    ],
    [{ outputs: [out([2, 5])] }, ['OUT'], /has shape \[2,5\], but the model configuration expects \[2,-1,2\]/],
    [
      { outputs: [{ ...out([2, 1, 2]), datatype: 'FP64', data: new Float64Array(4) }] },
      ['OUT'],
      /output 'OUT' has datatype FP64, but the model configuration declares FP32/,
    ],
    [{ outputs: [out([2, 1, 2]), out([2, 1, 2])] }, ['OUT'], /output 'OUT' appears twice/],
    [{ outputs: [] }, ['AUX'], /requested output 'AUX' is missing/],
    [
      { outputs: [{ name: 'X', shape: [1], data: [1] }] },
      ['OUT'],
      /output 'X' is not an output in the model configuration \(outputs: 'OUT', 'AUX'\)/,
    ],
    [{ outputs: 'OUT' }, ['OUT'], /returned response 4 without an outputs array/],
    [undefined, ['OUT'], /execute\(\) returned undefined as response 4/],
    [{ outputs: [out([2, 1, 2])], parameters: { bad: null } }, ['OUT'], /parameter 'bad' is null/],
    [{ error: new Error('from an Error') }, ['OUT'], /^from an Error$/],
    [{ error: 'a string' }, ['OUT'], /^a string$/],
  ];
  for (const [response, requested, expected] of errors) {
    const r = checker.check(4, request(2, requested), response);
    assert.match(r.error ?? '(no error)', expected, JSON.stringify(response));
  }
});

test('errors are described with the first place in the model folder their stack names', () => {
  const dir = path.resolve('/models/m');
  const file = pathToFileURL(path.join(dir, '1', 'model.mjs')).href;
  const err = new TypeError('x is not a function');
  err.stack = `TypeError: x is not a function\n    at helper (node:internal/foo:1:2)\n ` +
    `   at Model.execute (${file}:12:5)\n    at other (${file}:20:1)`;
  assert.equal(describeError(err, dir), 'TypeError: x is not a function (at 1/model.mjs:12:5)');
  assert.equal(
    locationIn(`${path.join(dir, '1', 'model.mjs')}:5\n}\n^\n\nSyntaxError: Unexpected token '}'`, dir),
    '1/model.mjs:5',
  );
  assert.equal(locationIn('at somewhere (node:internal/x:1:1)', dir), undefined);
  assert.equal(describeError('plain string', dir), 'a non-error value was thrown: plain string');
  assert.equal(describeError({ message: 'error-like' }, dir), 'error-like');
});
