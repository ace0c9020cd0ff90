/**
 * Interop: a model exported by PyTorch's ONNX exporter (not by our builder)
 * is read by model-info, auto-completed and served by the onnxruntime
 * backend, and answers what PyTorch answers.
 */
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { createOnnxRuntimeBackend } from '../../src/backends/onnxruntime/index.js';
import { parseOnnxModelInfo, readOnnxModelInfo } from '../../src/onnx/model-info.js';
import { bytesOf, makeTensor } from '../../src/tensor/tensor.js';
import {
  RecordingTimer,
  TempDir,
  autoCompleteContext,
  config,
  instanceContext,
  modelContext,
  request,
} from '../backends/onnxruntime/fixtures.js';

const PYTHON = process.env.NEREID_TEST_PYTHON ?? '/usr/bin/python3';

const EXPORT = `
import sys, numpy as np, torch
out, keep = sys.argv[1], sys.argv[2] == '1'
torch.manual_seed(0)
m = torch.nn.Sequential(torch.nn.Linear(6, 5), torch.nn.ReLU(), torch.nn.Linear(5, 2), torch.nn.Sigmoid()).eval()
torch.onnx.export(m, torch.zeros(1, 6), out + '/1/model.onnx', input_names=['INPUT__0'], output_names=['OUTPUT__0'],
                  dynamic_axes={'INPUT__0': {0: 'batch'}, 'OUTPUT__0': {0: 'batch'}}, opset_version=13,
                  keep_initializers_as_inputs=keep)
x = torch.linspace(-2, 2, 18).reshape(3, 6)
x.numpy().astype(np.float32).tofile(out + '/x.bin')
with torch.no_grad():
    m(x).numpy().astype(np.float32).tofile(out + '/y.bin')
`;

const floats = (b: Buffer): Float32Array => new Float32Array(Uint8Array.from(b).buffer);

let tmp: TempDir;
let available = true;

before(async () => {
  tmp = await TempDir.create();
  try {
    for (const keep of ['0', '1']) {
      const dir = join(tmp.path, `torch_${keep}`);
      execFileSync('mkdir', ['-p', join(dir, '1')]);
      execFileSync(PYTHON, ['-c', EXPORT, dir, keep], { stdio: 'pipe' });
    }
  } catch {
    available = false;
  }
});

after(async () => {
  await tmp.remove();
});

test('a PyTorch-exported model is read, auto-completed and served with PyTorch results', async (t) => {
  if (!available || !existsSync(join(tmp.path, 'torch_0', '1', 'model.onnx'))) {
    t.skip(`PyTorch ONNX export not available with ${PYTHON}`);
    return;
  }
  for (const keep of ['0', '1']) {
    const dir = join(tmp.path, `torch_${keep}`);
    const file = join(dir, '1', 'model.onnx');
    const info = await readOnnxModelInfo(file);
    assert.deepEqual(info, parseOnnxModelInfo(await readFile(file)));
    assert.equal(info.producerName, 'pytorch');
    assert.deepEqual(info.inputs.map((i) => [i.name, i.datatype, i.dims]), [['INPUT__0', 'FP32', [-1, 6]]]);
    // With initializers kept as graph inputs they are overridable, not inputs.
    assert.equal(info.overridableInitializers.length, keep === '1' ? 4 : 0);

    const backend = createOnnxRuntimeBackend();
    const cfg = await backend.autoCompleteConfig!(autoCompleteContext(dir, config({ name: `torch_${keep}` })));
    assert.equal(cfg.maxBatchSize, 4);
    const ctx = modelContext(dir, cfg);
    const model = await backend.loadModel(ctx);
    const inst = await model.createInstance(instanceContext(ctx));
    try {
      const x = floats(await readFile(join(dir, 'x.bin')));
      const expected = floats(await readFile(join(dir, 'y.bin')));
      const [r] = await inst.execute(
        [request('t', [makeTensor('INPUT__0', 'FP32', [3, 6], bytesOf(x))], ['OUTPUT__0'], 3)],
        new RecordingTimer(),
      );
      const y = new Float32Array(r!.outputs![0]!.data.slice().buffer);
      assert.deepEqual(r!.outputs![0]!.shape, [3, 2]);
      y.forEach((v, i) => assert.ok(Math.abs(v - expected[i]!) < 1e-5, `${v} vs ${expected[i]}`));
    } finally {
      await inst.close();
      await model.close();
    }
  }
});
