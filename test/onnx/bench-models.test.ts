import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { readFile, stat } from 'node:fs/promises';
import { join } from 'node:path';
import { buildBenchModels, type BenchModel } from '../../bench/models.js';
import { createOnnxRuntimeBackend } from '../../src/backends/onnxruntime/index.js';
import { parseModelConfig } from '../../src/config/index.js';
import { readOnnxModelInfo } from '../../src/onnx/model-info.js';
import { bytesOf, makeTensor } from '../../src/tensor/tensor.js';
import { RecordingTimer, TempDir, instanceContext, modelContext, request } from '../backends/onnxruntime/fixtures.js';

let tmp: TempDir;
let models: BenchModel[];

before(async () => {
  tmp = await TempDir.create();
  models = await buildBenchModels(tmp.path);
});

after(async () => {
  await tmp.remove();
});

test('the bench builds a tiny and a medium MLP with the advertised shapes', async () => {
  assert.deepEqual(models.map((m) => m.layers), [[10, 64, 64, 1], [512, 1024, 1024, 768]]);
  for (const m of models) {
    const info = await readOnnxModelInfo(m.onnxFile);
    assert.deepEqual(info.inputs.map((t) => [t.name, t.datatype, t.dims]), [[m.inputName, 'FP32', [-1, m.inputSize]]]);
    assert.deepEqual(
      info.outputs.map((t) => [t.name, t.datatype, t.dims]),
      [[m.outputName, 'FP32', [-1, m.outputSize]]],
    );
  }
});

test('each bench repository serves the model with and without dynamic batching', async () => {
  for (const m of models) {
    const plain = parseModelConfig(await readFile(join(m.repository, m.plainName, 'config.pbtxt'), 'utf8'), 'plain');
    const batched = parseModelConfig(
      await readFile(join(m.repository, m.batchedName, 'config.pbtxt'), 'utf8'),
      'batched',
    );
    assert.equal(plain.schedulingChoice.case, undefined);
    assert.equal(batched.schedulingChoice.case, 'dynamicBatching');
    assert.equal(plain.maxBatchSize, m.maxBatchSize);
  }
});

test('the tiny bench model loads with its config and answers', async () => {
  const m = models[0]!;
  const dir = join(m.repository, m.batchedName);
  const cfg = parseModelConfig(await readFile(join(dir, 'config.pbtxt'), 'utf8'), 'cfg');
  const backend = createOnnxRuntimeBackend();
  const ctx = modelContext(dir, cfg);
  const model = await backend.loadModel(ctx);
  const inst = await model.createInstance(instanceContext(ctx));
  try {
    const [r] = await inst.execute(
      [request('a', [makeTensor('input', 'FP32', [2, 10], bytesOf(new Float32Array(20).fill(0.25)))], ['output'], 2)],
      new RecordingTimer(),
    );
    assert.deepEqual(r?.outputs?.[0]?.shape, [2, 1]);
  } finally {
    await inst.close();
    await model.close();
  }
});

test('rebuilding leaves unchanged files alone', async () => {
  const file = models[1]!.onnxFile;
  const before = (await stat(file)).mtimeMs;
  await buildBenchModels(tmp.path);
  assert.equal((await stat(file)).mtimeMs, before);
});
