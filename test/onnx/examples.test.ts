import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import {
  buildExampleModels,
  defaultExamplesDir,
  EXAMPLE_MODELS,
  EXAMPLE_TEXT_FILES,
} from '../../scripts/build-examples.js';
import { createOnnxRuntimeBackend } from '../../src/backends/onnxruntime/index.js';
import { parseModelConfig } from '../../src/config/index.js';
import type { ModelConfig } from '../../src/gen/model_config_pb.js';
import { bytesOf, makeTensor, type Tensor } from '../../src/tensor/tensor.js';
import {
  RecordingTimer,
  TempDir,
  autoCompleteContext,
  config,
  instanceContext,
  modelContext,
  request,
} from '../backends/onnxruntime/fixtures.js';

const backend = createOnnxRuntimeBackend();
const examples = defaultExamplesDir();
let tmp: TempDir;

before(async () => {
  tmp = await TempDir.create();
  await buildExampleModels(tmp.path);
});

after(async () => {
  await tmp.remove();
});

async function committedConfig(name: string): Promise<ModelConfig> {
  const file = join(examples, name, 'config.pbtxt');
  return parseModelConfig(await readFile(file, 'utf8'), file);
}

/**
 * Loads version `version` of an example (models from the temp build, config from the repository) and runs one request.
 */
async function run(
  name: string,
  inputs: Tensor[],
  outputs: string[],
  version = 1,
  cfg?: ModelConfig,
): Promise<readonly Tensor[]> {
  const ctx = modelContext(join(tmp.path, name), cfg ?? (await committedConfig(name)), { version });
  const model = await backend.loadModel(ctx);
  const inst = await model.createInstance(instanceContext(ctx));
  try {
    const [r] = await inst.execute([request('x', inputs, outputs, inputs[0]!.shape[0])], new RecordingTimer());
    assert.ok(r && !r.error, r?.error?.message);
    return r.outputs!;
  } finally {
    await inst.close();
    await model.close();
  }
}

const f32 = (t: Tensor) => [...new Float32Array(t.data.slice().buffer)];

test('building the examples twice writes nothing the second time', async () => {
  const again = await buildExampleModels(tmp.path);
  assert.equal(again.written.length, 0);
  assert.equal(again.unchanged.length, EXAMPLE_MODELS.length + EXAMPLE_TEXT_FILES.length);
});

test('fraud_detector: the committed config matches the model and answers probabilities', async () => {
  const cfg = await committedConfig('fraud_detector');
  assert.equal(cfg.maxBatchSize, 64);
  const x = Float32Array.from({ length: 3 * 10 }, (_, i) => Math.sin(i));
  const [p] = await run(
    'fraud_detector',
    [makeTensor('input_features', 'FP32', [3, 10], bytesOf(x))],
    ['fraud_probability'],
  );
  assert.deepEqual(p!.shape, [3, 1]);
  for (const v of f32(p!)) assert.ok(v > 0 && v < 1, `probability ${v}`);
});

test('simple: INT32 sum and difference', async () => {
  const a = Int32Array.from({ length: 16 }, (_, i) => i);
  const b = Int32Array.from({ length: 16 }, () => 2);
  const [o0, o1] = await run(
    'simple',
    [makeTensor('INPUT0', 'INT32', [1, 16], bytesOf(a)), makeTensor('INPUT1', 'INT32', [1, 16], bytesOf(b))],
    ['OUTPUT0', 'OUTPUT1'],
  );
  assert.deepEqual([...new Int32Array(o0!.data.slice().buffer)], [...a].map((v) => v + 2));
  assert.deepEqual([...new Int32Array(o1!.data.slice().buffer)], [...a].map((v) => v - 2));
});

test('simple_versioned: version 1 adds, version 2 multiplies', async () => {
  const cfg = await committedConfig('simple_versioned');
  assert.equal(cfg.versionPolicy?.policyChoice.case, 'all');
  const ins = () => [
    makeTensor('INPUT0', 'FP32', [1, 4], bytesOf(Float32Array.from([1, 2, 3, 4]))),
    makeTensor('INPUT1', 'FP32', [1, 4], bytesOf(Float32Array.from([3, 3, 3, 3]))),
  ];
  const [v1] = await run('simple_versioned', ins(), ['OUTPUT0'], 1);
  const [v2] = await run('simple_versioned', ins(), ['OUTPUT0'], 2);
  assert.deepEqual(f32(v1!), [4, 5, 6, 7]);
  assert.deepEqual(f32(v2!), [3, 6, 9, 12]);
});

test('image_classifier: ten probabilities that sum to one, with a ten-line label file', async () => {
  const labels = (await readFile(join(examples, 'image_classifier', 'labels.txt'), 'utf8')).trim().split('\n');
  assert.equal(labels.length, 10);
  const cfg = await committedConfig('image_classifier');
  assert.equal(cfg.output[0]!.labelFilename, 'labels.txt');
  const img = Float32Array.from({ length: 2 * 3 * 8 * 8 }, (_, i) => (i % 7) / 7);
  const [p] = await run(
    'image_classifier',
    [makeTensor('image', 'FP32', [2, 3, 8, 8], bytesOf(img))],
    ['probabilities'],
  );
  assert.deepEqual(p!.shape, [2, 10]);
  const v = f32(p!);
  for (const row of [v.slice(0, 10), v.slice(10)]) assert.ok(Math.abs(row.reduce((a, b) => a + b, 0) - 1) < 1e-5);
});

test('autocomplete_mlp: no config.pbtxt, and auto-complete derives a batching config that loads', async () => {
  await assert.rejects(readFile(join(examples, 'autocomplete_mlp', 'config.pbtxt')));
  const completed = await backend.autoCompleteConfig!(
    autoCompleteContext(join(tmp.path, 'autocomplete_mlp'), config({ name: 'autocomplete_mlp' })),
  );
  assert.equal(completed.maxBatchSize, 4);
  assert.equal(completed.schedulingChoice.case, 'dynamicBatching');
  assert.deepEqual(completed.input.map((t) => [t.name, t.dims.map(Number)]), [['x', [4]]]);
  assert.deepEqual(completed.output.map((t) => [t.name, t.dims.map(Number)]), [['scores', [2]]]);
  const [s] = await run(
    'autocomplete_mlp',
    [makeTensor('x', 'FP32', [2, 4], bytesOf(new Float32Array(8).fill(0.5)))],
    ['scores'],
    1,
    completed,
  );
  assert.deepEqual(s!.shape, [2, 2]);
});
