import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { OnnxModelBuilder, buildMlp } from '../helpers/onnx-builder.js';
import { OnnxParseError, parseOnnxModelInfo, readOnnxModelInfo } from '../../src/onnx/model-info.js';

test('model-info reads names, datatypes and dims with -1 for symbolic and unknown dims', () => {
  const b = new OnnxModelBuilder({ opset: 14 });
  b.input('a', 'FP16', ['batch', 3, null]).input('b', 'BYTES', [2]).input('c', 'BOOL', []);
  b.output('y', 'INT64', ['batch', 7]);
  b.node('Identity', ['a'], ['y']);
  const info = parseOnnxModelInfo(b.toBytes());
  assert.equal(info.irVersion, 8);
  assert.deepEqual(info.opsets, { '': 14 });
  assert.deepEqual(
    info.inputs.map((t) => [t.name, t.datatype, t.dims]),
    [
      ['a', 'FP16', [-1, 3, -1]],
      ['b', 'BYTES', [2]],
      ['c', 'BOOL', []],
    ],
  );
  assert.deepEqual(
    info.outputs.map((t) => [t.name, t.datatype, t.dims, t.onnxType]),
    [['y', 'INT64', [-1, 7], 'INT64']],
  );
});

test('a graph input that has an initializer is reported as overridable, not as an input', () => {
  const b = new OnnxModelBuilder();
  b.input('x', 'FP32', [2]).input('bias', 'FP32', [2]).output('y', 'FP32', [2]);
  b.initializer('bias', 'FP32', [2], Float32Array.from([1, 2]));
  b.node('Add', ['x', 'bias'], ['y']);
  const info = parseOnnxModelInfo(b.toBytes());
  assert.deepEqual(info.inputs.map((t) => t.name), ['x']);
  assert.deepEqual(info.overridableInitializers.map((t) => t.name), ['bias']);
});

test('model-info reads a file from disk', async () => {
  const dir = await mkdtemp(join(tmpdir(), 'nereid-info-'));
  try {
    const path = join(dir, 'm.onnx');
    await buildMlp([10, 4, 1], 1, { inputName: 'input_features', outputName: 'p' }).builder.save(path);
    const info = await readOnnxModelInfo(path);
    assert.deepEqual(info.inputs.map((t) => [t.name, t.datatype, t.dims]), [['input_features', 'FP32', [-1, 10]]]);
    assert.deepEqual(info.outputs.map((t) => [t.name, t.datatype, t.dims]), [['p', 'FP32', [-1, 1]]]);
    assert.equal(info.producerName, 'nereid');
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
});

test('bytes that are not an ONNX model give OnnxParseError', async () => {
  assert.throws(
    () => parseOnnxModelInfo(new Uint8Array(0), 'empty.onnx'),
    (e: unknown) => e instanceof OnnxParseError && /empty\.onnx is not a valid ONNX model/.test(e.message),
  );
  assert.throws(
    () => parseOnnxModelInfo(Buffer.from('this is certainly not a protobuf message'), 'text.onnx'),
    OnnxParseError,
  );
  const truncated = buildMlp([10, 4, 1], 1).builder.toBytes().subarray(0, 100);
  assert.throws(() => parseOnnxModelInfo(truncated, 'cut.onnx'), OnnxParseError);
});

test('reading a file (weights skipped) gives the same signature as parsing the whole model', async () => {
  const dir = await mkdtemp(join(tmpdir(), 'nereid-info-'));
  try {
    const overridable = new OnnxModelBuilder({ opset: 17 });
    overridable.input('x', 'FP32', ['n', 2]).input('bias', 'FP32', [2]).output('y', 'FP32', ['n', 2]);
    overridable.initializer('bias', 'FP32', [2], Float32Array.from([1, 2]));
    overridable.node('Add', ['x', 'bias'], ['y']);
    const models = [buildMlp([300, 500, 7], 3).builder, overridable, buildMlp([4, 2], 1).builder];
    for (const [i, b] of models.entries()) {
      const path = join(dir, `m${i}.onnx`);
      await b.save(path);
      assert.deepEqual(await readOnnxModelInfo(path), parseOnnxModelInfo(b.toBytes()), `model ${i}`);
    }
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
});

test('a file that is not an ONNX model gives OnnxParseError naming the file', async () => {
  const dir = await mkdtemp(join(tmpdir(), 'nereid-info-'));
  try {
    const whole = buildMlp([64, 32, 1], 1).builder.toBytes();
    const cases: Record<string, Uint8Array> = {
      'empty.onnx': new Uint8Array(0),
      'text.onnx': Buffer.from('this is certainly not a protobuf message'),
      'cut.onnx': whole.subarray(0, whole.length - 700),
    };
    for (const [name, bytes] of Object.entries(cases)) {
      const path = join(dir, name);
      await writeFile(path, bytes);
      await assert.rejects(
        readOnnxModelInfo(path),
        (e: unknown) => e instanceof OnnxParseError && e.message.startsWith(`${path} is not a valid ONNX model`),
        name,
      );
    }
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
});
