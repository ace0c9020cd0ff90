import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdir, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { DataType, ModelInstanceGroup_Kind, type ModelConfig } from '../../../src/gen/model_config_pb.js';
import { NereidError } from '../../../src/errors.js';
import { createOnnxRuntimeBackend } from '../../../src/backends/onnxruntime/index.js';
import { probeCuda } from '../../../src/backends/onnxruntime/cuda.js';
import { OnnxModelBuilder, buildAddSubModel, buildMlp } from '../../helpers/onnx-builder.js';
import { bytesOf, makeTensor } from '../../../src/tensor/tensor.js';
import { RecordingTimer, TempDir, config, instanceContext, modelContext, request, writeModel } from './fixtures.js';

const backend = createOnnxRuntimeBackend();
let tmp: TempDir;
let mlpDir: string;

type ConfigInit = Parameters<typeof config>[0];
const mlpConfig = (over: object = {}): ModelConfig =>
  config({
    name: 'mlp',
    maxBatchSize: 8,
    input: [{ name: 'x', dataType: DataType.TYPE_FP32, dims: [10n] }],
    output: [{ name: 'y', dataType: DataType.TYPE_FP32, dims: [1n] }],
    ...over,
  } as ConfigInit);

before(async () => {
  tmp = await TempDir.create();
  mlpDir = await writeModel(tmp.path, 'mlp', buildMlp([10, 4, 1], 1, { inputName: 'x', outputName: 'y' }).builder);
});

after(async () => {
  await tmp.remove();
});

function loadError(pattern: RegExp) {
  return (e: unknown): boolean => {
    assert.ok(e instanceof NereidError, `expected NereidError, got ${String(e)}`);
    assert.equal(e.code, 'NRD_LOAD_FAILED');
    assert.match(e.message, pattern);
    return true;
  };
}

test('a matching configuration loads', async () => {
  const model = await backend.loadModel(modelContext(mlpDir, mlpConfig()));
  await model.close();
});

test('a datatype mismatch names the model, the input and both types', async () => {
  const cfg = mlpConfig({ input: [{ name: 'x', dataType: DataType.TYPE_INT32, dims: [10n] }] });
  await assert.rejects(
    backend.loadModel(modelContext(mlpDir, cfg)),
    loadError(/model 'mlp'.*configuration expects datatype TYPE_INT32 for input 'x', model provides TYPE_FP32/),
  );
});

test('an output datatype mismatch is reported for the output', async () => {
  const cfg = mlpConfig({ output: [{ name: 'y', dataType: DataType.TYPE_FP16, dims: [1n] }] });
  await assert.rejects(
    backend.loadModel(modelContext(mlpDir, cfg)),
    loadError(/TYPE_FP16 for output 'y', model provides TYPE_FP32/),
  );
});

test('an input name the model does not have is reported with the model inputs', async () => {
  const cfg = mlpConfig({ input: [{ name: 'features', dataType: DataType.TYPE_FP32, dims: [10n] }] });
  await assert.rejects(
    backend.loadModel(modelContext(mlpDir, cfg)),
    loadError(/input 'features', but the model has no such input \(model inputs: 'x'\)/),
  );
});

test('an output name the model does not have is reported', async () => {
  const cfg = mlpConfig({ output: [{ name: 'prob', dataType: DataType.TYPE_FP32, dims: [1n] }] });
  await assert.rejects(
    backend.loadModel(modelContext(mlpDir, cfg)),
    loadError(/output 'prob', but the model has no such output \(model outputs: 'y'\)/),
  );
});

test('an input count mismatch is reported', async () => {
  const cfg = mlpConfig({
    input: [
      { name: 'x', dataType: DataType.TYPE_FP32, dims: [10n] },
      { name: 'z', dataType: DataType.TYPE_FP32, dims: [10n] },
    ],
  });
  await assert.rejects(
    backend.loadModel(modelContext(mlpDir, cfg)),
    loadError(/configuration expects 2 inputs, model provides 1/),
  );
});

test('dims that differ from the model are reported with both shapes', async () => {
  const cfg = mlpConfig({ input: [{ name: 'x', dataType: DataType.TYPE_FP32, dims: [12n] }] });
  await assert.rejects(
    backend.loadModel(modelContext(mlpDir, cfg)),
    loadError(
      new RegExp(
        String.raw`input 'x': the model expects 2 dimensions \(shape \[-1,10\]\) but the model configuration ` +
        String.raw`specifies 2 dimensions .*\[-1,12\]`,
      ),
    ),
  );
});

test('max_batch_size 0 with dims that leave out the batch dim is a rank mismatch', async () => {
  const cfg = mlpConfig({ maxBatchSize: 0 });
  await assert.rejects(
    backend.loadModel(modelContext(mlpDir, cfg)),
    loadError(/the model expects 2 dimensions \(shape \[-1,10\]\) but the model configuration specifies 1 dimensions/),
  );
});

test('batching a model whose first dim is fixed is refused', async () => {
  const dir = await writeModel(tmp.path, 'fixed', buildAddSubModel('INT32', 16, null));
  const cfg = config({
    name: 'fixed',
    maxBatchSize: 4,
    input: [
      { name: 'INPUT0', dataType: DataType.TYPE_INT32, dims: [16n] },
      { name: 'INPUT1', dataType: DataType.TYPE_INT32, dims: [16n] },
    ],
    output: [{ name: 'OUTPUT0', dataType: DataType.TYPE_INT32, dims: [16n] }],
  });
  await assert.rejects(
    backend.loadModel(modelContext(dir, cfg)),
    loadError(/tensor 'INPUT0': for the model to support batching .* first dimension must be -1/),
  );
});

test('outputs must match exactly: a fixed config dim against a ' +
  'variable model dim is refused for outputs only', async () => {
  const relu = new OnnxModelBuilder();
  relu.input('x', 'FP32', ['batch', 'n']).output('y', 'FP32', ['batch', 'n']).node('Relu', ['x'], ['y']);
  const dir = await writeModel(tmp.path, 'dyn_out', relu);
  const cfg = (outDims: bigint[]) =>
    config({
      name: 'dyn_out',
      maxBatchSize: 4,
      input: [{ name: 'x', dataType: DataType.TYPE_FP32, dims: [4n] }],
      output: [{ name: 'y', dataType: DataType.TYPE_FP32, dims: outDims }],
    });
  await assert.rejects(
    backend.loadModel(modelContext(dir, cfg([4n]))),
    loadError(/output 'y': the model expects 2 dimensions \(shape \[-1,-1\]\)/),
  );
  const model = await backend.loadModel(modelContext(dir, cfg([-1n])));
  await model.close();
});

test('a corrupt model file fails the load with a clear message', async () => {
  const dir = join(tmp.path, 'corrupt');
  await mkdir(join(dir, '1'), { recursive: true });
  await writeFile(join(dir, '1', 'model.onnx'), Buffer.from('definitely not an onnx model, just some text'));
  await assert.rejects(
    backend.loadModel(modelContext(dir, mlpConfig({ name: 'corrupt' }))),
    loadError(/model file '1\/model\.onnx' is not a valid ONNX model/),
  );
});

test('a missing model file fails the load naming the file', async () => {
  const dir = join(tmp.path, 'empty');
  await mkdir(join(dir, '1'), { recursive: true });
  await assert.rejects(
    backend.loadModel(modelContext(dir, mlpConfig({ name: 'empty' }))),
    loadError(/model file '1\/model\.onnx' not found/),
  );
});

test('default_model_filename is honoured', async () => {
  const dir = await writeModel(
    tmp.path,
    'named',
    buildMlp([10, 4, 1], 1, { inputName: 'x', outputName: 'y' }).builder,
    1,
    'custom.onnx',
  );
  const ctx = modelContext(dir, mlpConfig({ name: 'named', defaultModelFilename: 'custom.onnx' }));
  const model = await backend.loadModel(ctx);
  const inst = await model.createInstance(instanceContext(ctx));
  const [r] = await inst.execute(
    [request('a', [makeTensor('x', 'FP32', [1, 10], bytesOf(new Float32Array(10)))], ['y'])],
    new RecordingTimer(),
  );
  assert.ok(r && !r.error);
  await inst.close();
  await model.close();
  await assert.rejects(
    backend.loadModel(modelContext(dir, mlpConfig({ name: 'named' }))),
    loadError(/'1\/model\.onnx' not found/),
  );
});

test('model.onnx may be a folder holding model.onnx', async () => {
  const dir = join(tmp.path, 'folder');
  await buildMlp([10, 4, 1], 1, { inputName: 'x', outputName: 'y' }).builder.save(
    join(dir, '1', 'model.onnx', 'model.onnx'),
  );
  const ctx = modelContext(dir, mlpConfig({ name: 'folder' }));
  const model = await backend.loadModel(ctx);
  const inst = await model.createInstance(instanceContext(ctx));
  assert.equal(await inst.isReady!(), true);
  await inst.close();
  await model.close();
});

const noCuda = () => ({ available: false, reason: 'no CUDA here (test)' });

test('KIND_GPU without the CUDA execution provider fails the load with a clear message', async () => {
  const gpuBackend = createOnnxRuntimeBackend({ cudaProbe: noCuda });
  const cfg = mlpConfig({
    instanceGroup: [{ name: 'mlp_gpu', kind: ModelInstanceGroup_Kind.GPU, count: 1, gpus: [0] }],
  });
  await assert.rejects(
    gpuBackend.loadModel(modelContext(mlpDir, cfg)),
    loadError(
      new RegExp(
        String.raw`instance group 'mlp_gpu': KIND_GPU requested but the CUDA execution provider is not available: no ` +
        String.raw`CUDA here \(test\)`,
      ),
    ),
  );
});

test('a GPU instance without the CUDA execution provider is refused at instance creation too', async () => {
  const gpuBackend = createOnnxRuntimeBackend({ cudaProbe: noCuda });
  const ctx = modelContext(mlpDir, mlpConfig());
  const model = await gpuBackend.loadModel(ctx);
  await assert.rejects(
    model.createInstance(instanceContext(ctx, 'GPU', 0, 1)),
    loadError(/instance 'mlp_0_0': KIND_GPU requested but the CUDA execution provider/),
  );
  await model.close();
});

test('the real CUDA probe agrees with what loading a KIND_GPU model does', async (t) => {
  const cuda = probeCuda();
  if (cuda.available) {
    t.skip('CUDA execution provider installed here');
    return;
  }
  assert.match(cuda.reason, /not installed|no CUDA build/);
  const cfg = mlpConfig({ instanceGroup: [{ kind: ModelInstanceGroup_Kind.GPU, count: 1 }] });
  await assert.rejects(
    backend.loadModel(modelContext(mlpDir, cfg)),
    loadError(/KIND_GPU requested but the CUDA execution provider is not available/),
  );
});

test('a bad ORT parameter value fails the load', async () => {
  const cfg = mlpConfig({ parameters: { execution_mode: { stringValue: '3' } } });
  await assert.rejects(
    backend.loadModel(modelContext(mlpDir, cfg)),
    (e: unknown) => e instanceof NereidError && /execution_mode are 0 or 1 but got 3/.test(e.message),
  );
});

test('inline_execution takes auto, on or off (any case); anything ' +
  'else fails the load naming the parameter', async () => {
  for (const v of ['auto', 'on', 'OFF']) {
    const model = await backend.loadModel(
      modelContext(mlpDir, mlpConfig({ parameters: { inline_execution: { stringValue: v } } })),
    );
    await model.close();
  }
  await assert.rejects(
    backend.loadModel(
      modelContext(mlpDir, mlpConfig({ parameters: { inline_execution: { stringValue: 'sometimes' } } })),
    ),
    (e: unknown) =>
      e instanceof NereidError &&
      /model 'mlp': parameter 'inline_execution' must be 'auto', 'on' or 'off', got 'sometimes'/.test(e.message),
  );
  // The backend config sets it for every model.
  await assert.rejects(
    backend.loadModel(modelContext(mlpDir, mlpConfig(), { backendConfig: { inline_execution: 'yes' } })),
    (e: unknown) => e instanceof NereidError && /'inline_execution' must be/.test(e.message),
  );
});

test('inline_execution on is refused for a KIND_GPU group (inline runs use the CPU)', async () => {
  const gpuBackend = createOnnxRuntimeBackend({ cudaProbe: () => ({ available: true, reason: '' }) });
  const cfg = mlpConfig({
    parameters: { inline_execution: { stringValue: 'on' } },
    instanceGroup: [{ name: 'mlp_gpu', kind: ModelInstanceGroup_Kind.GPU, count: 1, gpus: [0] }],
  });
  await assert.rejects(
    gpuBackend.loadModel(modelContext(mlpDir, cfg)),
    (e: unknown) =>
      e instanceof NereidError &&
      /parameter 'inline_execution' is 'on', but instance group 'mlp_gpu' is KIND_GPU/.test(e.message),
  );
});

test('inline_execution on with FP16 tensors: refused where Node.js ' +
  'has Float16Array, else the runs are exact', async () => {
  const b = new OnnxModelBuilder();
  b.input('h', 'FP16', ['batch', 2]).output('o', 'FP16', ['batch', 2]);
  b.node('Identity', ['h'], ['o']);
  const dir = await writeModel(tmp.path, 'half', b);
  const cfg = config({
    name: 'half',
    maxBatchSize: 2,
    input: [{ name: 'h', dataType: DataType.TYPE_FP16, dims: [2n] }],
    output: [{ name: 'o', dataType: DataType.TYPE_FP16, dims: [2n] }],
    parameters: { inline_execution: { stringValue: 'on' } },
  });
  const ctx = modelContext(dir, cfg);
  if ('Float16Array' in globalThis) {
    await assert.rejects(
      backend.loadModel(ctx),
      (e: unknown) => e instanceof NereidError && /'h' is FP16/.test(e.message),
    );
    return;
  }
  const model = await backend.loadModel(ctx);
  const inst = await model.createInstance(instanceContext(ctx));
  const half = bytesOf(Uint16Array.from([0x3c00, 0xc000]));
  const [r] = await inst.execute([request('h', [makeTensor('h', 'FP16', [1, 2], half)], ['o'])], new RecordingTimer());
  assert.deepEqual(Buffer.from(r!.outputs![0]!.data), Buffer.from(half));
  await inst.close();
  await model.close();
});
