import { test } from 'node:test';
import assert from 'node:assert/strict';
import { classify } from '../../src/core/classification.js';
import { bytesOf, decodeBytesElements } from '../../src/tensor/tensor.js';

const texts = (data: Uint8Array) => decodeBytesElements(data).map((b) => Buffer.from(b).toString());

test('top-K per batch item, highest first, with labels', () => {
  const scores = new Float32Array([0.1, 0.7, 0.2, 0.9, 0.05, 0.05]);
  const out = classify(
    { name: 'P', datatype: 'FP32', shape: [2, 3], data: bytesOf(scores) },
    2,
    true,
    ['cat', 'dog', 'eel'],
    'm',
  );
  assert.equal(out.datatype, 'BYTES');
  assert.deepEqual(out.shape, [2, 2]);
  const s = texts(out.data);
  assert.equal(s[0], `${Math.fround(0.7).toFixed(6)}:1:dog`);
  assert.equal(s[1], `${Math.fround(0.2).toFixed(6)}:2:eel`);
  assert.equal(s[2], `${Math.fround(0.9).toFixed(6)}:0:cat`);
});

test('K larger than the class count is capped; integers print as integers; no labels', () => {
  const out = classify(
    { name: 'P', datatype: 'INT32', shape: [3], data: bytesOf(new Int32Array([4, 9, 1])) },
    10,
    false,
    undefined,
    'm',
  );
  assert.deepEqual(out.shape, [3]);
  assert.deepEqual(texts(out.data), ['9:1', '4:0', '1:2']);
});
