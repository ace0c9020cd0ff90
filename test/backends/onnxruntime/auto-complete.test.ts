import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { create } from '@bufbuild/protobuf';
import { DataType, ModelSequenceBatchingSchema, type ModelConfig } from '../../../src/gen/model_config_pb.js';
import { NereidError } from '../../../src/errors.js';
import { createOnnxRuntimeBackend } from '../../../src/backends/onnxruntime/index.js';
import { OnnxModelBuilder, buildAddSubModel, buildMlp } from '../../helpers/onnx-builder.js';
import { TempDir, autoCompleteContext, config, writeModel } from './fixtures.js';

const backend = createOnnxRuntimeBackend();
let tmp: TempDir;
let mlpDir: string;
let fixedDir: string;
let scalarDir: string;
let scalarNoBatchDir: string;

before(async () => {
  tmp = await TempDir.create();
  mlpDir = await writeModel(tmp.path, 'mlp', buildMlp([10, 8, 1], 1, { inputName: 'x', outputName: 'y' }).builder);
  // First dims fixed at 16: this model cannot batch.
  fixedDir = await writeModel(tmp.path, 'fixed', buildAddSubModel('INT32', 16, null));
  const scalar = new OnnxModelBuilder();
  scalar.input('x', 'FP64', ['batch']).output('y', 'FP64', ['batch']).node('Identity', ['x'], ['y']);
  scalarDir = await writeModel(tmp.path, 'scalar', scalar);
  const scalarNoBatch = new OnnxModelBuilder();
  scalarNoBatch.input('x', 'INT64', []).output('y', 'INT64', []).node('Identity', ['x'], ['y']);
  scalarNoBatchDir = await writeModel(tmp.path, 'scalar_nb', scalarNoBatch);
});

after(async () => {
  await tmp.remove();
});

function complete(dir: string, cfg: ModelConfig, backendConfig: Record<string, string> = {}): Promise<ModelConfig> {
  return backend.autoCompleteConfig!(autoCompleteContext(dir, cfg, backendConfig));
}

function io(list: ModelConfig['input'] | ModelConfig['output']) {
  return list.map((t) => ({
    name: t.name,
    dataType: t.dataType,
    dims: t.dims.map(Number),
    reshape: t.reshape?.shape.map(Number),
  }));
}

test('a batchable model with no config gets inputs, outputs, max_batch_size 4 and dynamic batching', async () => {
  const c = await complete(mlpDir, config({ name: 'mlp' }));
  assert.equal(c.maxBatchSize, 4);
  assert.equal(c.schedulingChoice.case, 'dynamicBatching');
  assert.deepEqual(io(c.input), [{ name: 'x', dataType: DataType.TYPE_FP32, dims: [10], reshape: undefined }]);
  assert.deepEqual(io(c.output), [{ name: 'y', dataType: DataType.TYPE_FP32, dims: [1], reshape: undefined }]);
});

test('default-max-batch-size from the backend config sets max_batch_size', async () => {
  const c = await complete(mlpDir, config({ name: 'mlp' }), { 'default-max-batch-size': '16' });
  assert.equal(c.maxBatchSize, 16);
});

test('a configured max_batch_size is kept, and 1 does not add dynamic batching', async () => {
  const c = await complete(mlpDir, config({ name: 'mlp', maxBatchSize: 1 }));
  assert.equal(c.maxBatchSize, 1);
  assert.equal(c.schedulingChoice.case, undefined);
});

test('default-max-batch-size 0 leaves batching off', async () => {
  const c = await complete(mlpDir, config({ name: 'mlp' }), { 'default-max-batch-size': '0' });
  assert.equal(c.maxBatchSize, 0);
  assert.equal(c.schedulingChoice.case, undefined);
  assert.deepEqual(io(c.input)[0]!.dims, [-1, 10]);
});

test('an existing scheduler is not replaced by dynamic batching', async () => {
  const c = await complete(
    mlpDir,
    config({
      name: 'mlp',
      schedulingChoice: { case: 'sequenceBatching', value: create(ModelSequenceBatchingSchema, {}) },
    }),
  );
  assert.equal(c.maxBatchSize, 4);
  assert.equal(c.schedulingChoice.case, 'sequenceBatching');
});

test('a model that cannot batch keeps max_batch_size 0 and gets its full dims', async () => {
  const c = await complete(fixedDir, config({ name: 'fixed' }));
  assert.equal(c.maxBatchSize, 0);
  assert.equal(c.schedulingChoice.case, undefined);
  assert.deepEqual(io(c.input).map((t) => [t.name, t.dataType, t.dims]), [
    ['INPUT0', DataType.TYPE_INT32, [16]],
    ['INPUT1', DataType.TYPE_INT32, [16]],
  ]);
  assert.deepEqual(io(c.output).map((t) => t.name), ['OUTPUT0', 'OUTPUT1']);
});

test('a non-zero max_batch_size on a model that cannot batch is an error', async () => {
  await assert.rejects(
    complete(fixedDir, config({ name: 'fixed', maxBatchSize: 8 })),
    (e: unknown) =>
      e instanceof NereidError &&
      e.errorClass === 'INVALID_ARG' &&
      e.message ===
        "autofill failed for model 'fixed': model does not support batching while non-zero max_batch_size is specified",
  );
});

test('a per-item scalar becomes dims [1] with an empty reshape when batching', async () => {
  const c = await complete(scalarDir, config({ name: 'scalar' }));
  assert.equal(c.maxBatchSize, 4);
  assert.deepEqual(io(c.input), [{ name: 'x', dataType: DataType.TYPE_FP64, dims: [1], reshape: [] }]);
  assert.deepEqual(io(c.output), [{ name: 'y', dataType: DataType.TYPE_FP64, dims: [1], reshape: [] }]);
});

test('a scalar in a model that cannot batch becomes dims [1] without reshape', async () => {
  const c = await complete(scalarNoBatchDir, config({ name: 'scalar_nb' }));
  assert.equal(c.maxBatchSize, 0);
  assert.deepEqual(io(c.input), [{ name: 'x', dataType: DataType.TYPE_INT64, dims: [1], reshape: undefined }]);
});

test('nothing changes when inputs and outputs are both given', async () => {
  const given = config({
    name: 'mlp',
    input: [{ name: 'x', dataType: DataType.TYPE_FP32, dims: [10n] }],
    output: [{ name: 'y', dataType: DataType.TYPE_FP32, dims: [1n] }],
  });
  const c = await complete(mlpDir, given);
  assert.equal(c, given);
  assert.equal(c.maxBatchSize, 0);
});

test('given inputs are kept and only the missing outputs are filled', async () => {
  const c = await complete(
    mlpDir,
    config({ name: 'mlp', maxBatchSize: 2, input: [{ name: 'x', dataType: DataType.TYPE_FP32, dims: [10n] }] }),
  );
  assert.equal(c.maxBatchSize, 2);
  assert.deepEqual(io(c.input), [{ name: 'x', dataType: DataType.TYPE_FP32, dims: [10], reshape: undefined }]);
  assert.deepEqual(io(c.output), [{ name: 'y', dataType: DataType.TYPE_FP32, dims: [1], reshape: undefined }]);
});

test('the input config object is not modified', async () => {
  const original = config({ name: 'mlp' });
  await complete(mlpDir, original);
  assert.equal(original.input.length, 0);
  assert.equal(original.maxBatchSize, 0);
});

test('auto-complete on a missing model file names the file', async () => {
  await assert.rejects(
    backend.autoCompleteConfig!(autoCompleteContext(mlpDir, config({ name: 'mlp' }), {}, 7)),
    (e: unknown) =>
      e instanceof NereidError && e.code === 'NRD_LOAD_FAILED' && /'7\/model\.onnx' not found/.test(e.message),
  );
});
