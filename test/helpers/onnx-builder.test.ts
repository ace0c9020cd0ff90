import { test } from 'node:test';
import assert from 'node:assert/strict';
import * as ort from 'onnxruntime-node';
import { OnnxModelBuilder, buildAddSubModel, buildMlp, mlpForward, seededRandom } from './onnx-builder.js';

function closeTo(actual: ArrayLike<number>, expected: ArrayLike<number>, tol = 1e-5): void {
  assert.equal(actual.length, expected.length);
  for (let i = 0; i < actual.length; i++) {
    assert.ok(
      Math.abs(actual[i]! - expected[i]!) <= tol * Math.max(1, Math.abs(expected[i]!)),
      `element ${i}: ${actual[i]} vs ${expected[i]}`,
    );
  }
}

test('an MLP built by buildMlp computes in onnxruntime what plain TypeScript computes', async () => {
  const { builder, weights } = buildMlp([10, 64, 64, 1], 7, { outputActivation: 'sigmoid' });
  const session = await ort.InferenceSession.create(builder.toBytes());
  const rand = seededRandom(99);
  const x = Float32Array.from({ length: 5 * 10 }, () => rand() * 4 - 2);
  const out = await session.run({ input: new ort.Tensor('float32', x, [5, 10]) });
  assert.deepEqual(out.output!.dims, [5, 1]);
  closeTo(out.output!.data as Float32Array, mlpForward(weights, x, 5));
  await session.release();
});

test('buildMlp is deterministic for a seed and differs between seeds', () => {
  const a = buildMlp([4, 3, 2], 1).builder.toBytes();
  const b = buildMlp([4, 3, 2], 1).builder.toBytes();
  const c = buildMlp([4, 3, 2], 2).builder.toBytes();
  assert.deepEqual(a, b);
  assert.notDeepEqual(a, c);
});

test('a linear MLP without output activation matches the reference', async () => {
  const { builder, weights } = buildMlp([8, 16, 3], 3, { inputName: 'x', outputName: 'y' });
  const session = await ort.InferenceSession.create(builder.toBytes());
  const x = Float32Array.from({ length: 2 * 8 }, (_, i) => Math.cos(i));
  const out = await session.run({ x: new ort.Tensor('float32', x, [2, 8]) });
  closeTo(out.y!.data as Float32Array, mlpForward(weights, x, 2));
  await session.release();
});

test('the add/sub model adds and subtracts INT32', async () => {
  const session = await ort.InferenceSession.create(buildAddSubModel('INT32', 4).toBytes());
  const a = Int32Array.from([1, 2, 3, 4]);
  const b = Int32Array.from([10, 20, 30, 40]);
  const out = await session.run({
    INPUT0: new ort.Tensor('int32', a, [1, 4]),
    INPUT1: new ort.Tensor('int32', b, [1, 4]),
  });
  assert.deepEqual([...(out.OUTPUT0!.data as Int32Array)], [11, 22, 33, 44]);
  assert.deepEqual([...(out.OUTPUT1!.data as Int32Array)], [-9, -18, -27, -36]);
  await session.release();
});

test('attributes of each kind reach onnxruntime (Gemm alpha/transB, Cast to)', async () => {
  const b = new OnnxModelBuilder();
  b.input('x', 'FP32', ['n', 2]).output('y', 'INT64', ['n', 3]);
  // w is [3, 2] and used transposed: y = cast(2 * x @ w^T + c)
  b.initializer('w', 'FP32', [3, 2], Float32Array.from([1, 0, 0, 1, 1, 1]));
  b.initializer('c', 'FP32', [3], Float32Array.from([0.5, 0.5, 0.5]));
  b.node('Gemm', ['x', 'w', 'c'], ['g'], { alpha: { f: 2 }, transB: { i: 1 } });
  b.node('Cast', ['g'], ['y'], { to: { i: 7 } });
  const session = await ort.InferenceSession.create(b.toBytes());
  const out = await session.run({ x: new ort.Tensor('float32', Float32Array.from([1, 2, 3, 4]), [2, 2]) });
  assert.deepEqual([...(out.y!.data as BigInt64Array)].map(Number), [2, 4, 6, 6, 8, 14]);
  await session.release();
});

test('string initializers and a Concat over BYTES work', async () => {
  const b = new OnnxModelBuilder();
  b.input('s', 'BYTES', [1]).output('out', 'BYTES', [2]);
  b.initializer('suffix', 'BYTES', [1], ['world']);
  b.node('Concat', ['s', 'suffix'], ['out'], { axis: { i: 0 } });
  const session = await ort.InferenceSession.create(b.toBytes());
  const out = await session.run({ s: new ort.Tensor('string', ['hello'], [1]) });
  assert.deepEqual(out.out!.data, ['hello', 'world']);
  await session.release();
});

test('an initializer whose size does not match its dims is refused', () => {
  const b = new OnnxModelBuilder();
  assert.throws(() => b.initializer('w', 'FP32', [2, 2], new Float32Array(3)), /3 values given for dims \[2,2\]/);
});
