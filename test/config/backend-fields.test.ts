import assert from 'node:assert/strict';
import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { create } from '@bufbuild/protobuf';
import { ConfigError, completeBackendFields, parseModelConfigWithPositions } from '../../src/config/index.js';
import { ModelConfigSchema, type ModelConfig } from '../../src/gen/model_config_pb.js';

let root: string;

/** Makes <root>/<model>/<version>/<file> entries; a name ending in '/' is a folder. */
async function model(name: string, files: Record<string, string[]>): Promise<string> {
  const dir = join(root, name);
  await mkdir(dir, { recursive: true });
  for (const [version, entries] of Object.entries(files)) {
    await mkdir(join(dir, version), { recursive: true });
    for (const entry of entries) {
      if (entry.endsWith('/')) await mkdir(join(dir, version, entry), { recursive: true });
      else await writeFile(join(dir, version, entry), 'x');
    }
  }
  return dir;
}

async function complete(
  name: string,
  dir: string,
  init: { platform?: string; backend?: string } = {},
  versions?: string[],
): Promise<ModelConfig> {
  const config = create(ModelConfigSchema, init);
  return completeBackendFields(config, name, dir, versions ?? ['1']);
}

describe('completeBackendFields', () => {
  before(async () => {
    root = await mkdtemp(join(tmpdir(), 'nereid-backend-fields-'));
  });
  after(async () => {
    await rm(root, { recursive: true, force: true });
  });

  it('fills the name from the folder', async () => {
    const dir = await model('named', { '1': ['model.py'] });
    assert.equal((await complete('named', dir)).name, 'named');
  });

  it('rejects a config name that differs from the folder, at the name line', async () => {
    const dir = await model('folder_name', { '1': ['model.py'] });
    const file = 'folder_name/config.pbtxt';
    const { config, positions } = parseModelConfigWithPositions('backend: "python"\nname: "other"\n', file);
    await assert.rejects(
      completeBackendFields(config, 'folder_name', dir, ['1'], { file, positions }),
      (err: unknown) => {
        assert.ok(err instanceof ConfigError);
        assert.equal(
          err.message,
          `${file}:2:1: name "other" does not match the model's directory ` +
          `"folder_name": the directory name must equal the model name`,
        );
        return true;
      },
    );
  });

  it('probes model.onnx (file) for onnxruntime', async () => {
    const dir = await model('onnx_file', { '1': ['model.onnx'] });
    const c = await complete('onnx_file', dir);
    assert.deepEqual(
      [c.platform, c.backend, c.defaultModelFilename],
      ['onnxruntime_onnx', 'onnxruntime', 'model.onnx'],
    );
  });

  it('probes model.onnx as a folder too', async () => {
    const dir = await model('onnx_dir', { '1': ['model.onnx/'] });
    assert.equal((await complete('onnx_dir', dir)).backend, 'onnxruntime');
  });

  it('pairs platform onnxruntime_onnx with backend onnxruntime and back', async () => {
    const dir = await model('onnx_pair', { '1': [] });
    const a = await complete('onnx_pair', dir, { platform: 'onnxruntime_onnx' });
    assert.deepEqual([a.backend, a.defaultModelFilename], ['onnxruntime', 'model.onnx']);
    const b = await complete('onnx_pair', dir, { backend: 'onnxruntime' });
    assert.equal(b.platform, 'onnxruntime_onnx');
  });

  it('probes model.pt for pytorch and pairs libtorch platforms with it', async () => {
    const dir = await model('torch', { '1': ['model.pt'] });
    const c = await complete('torch', dir);
    assert.deepEqual([c.platform, c.backend, c.defaultModelFilename], ['pytorch_libtorch', 'pytorch', 'model.pt']);
    const alias = await complete('torch', dir, { platform: 'libtorch' });
    assert.deepEqual([alias.platform, alias.backend], ['libtorch', 'pytorch']);
    const byBackend = await complete('torch', dir, { backend: 'pytorch' });
    assert.deepEqual([byBackend.platform, byBackend.defaultModelFilename], ['pytorch_libtorch', 'model.pt']);
  });

  it('a model.pt folder is not a TorchScript file', async () => {
    const dir = await model('torch_dir.custom', { '1': ['model.pt/'] });
    const c = await complete('torch_dir.custom', dir);
    assert.equal(c.backend, 'custom');
  });

  it('probes model.py for python, which gets no platform', async () => {
    const dir = await model('py', { '1': ['model.py'] });
    const c = await complete('py', dir);
    assert.deepEqual([c.platform, c.backend, c.defaultModelFilename], ['', 'python', 'model.py']);
  });

  it('leaves an ensemble alone', async () => {
    const dir = await model('ens', {});
    const c = await complete('ens', dir, { platform: 'ensemble' }, []);
    assert.deepEqual([c.platform, c.backend, c.defaultModelFilename], ['ensemble', '', '']);
  });

  it('probes the first version folder in name order', async () => {
    const dir = await model('two_versions', { '1': ['model.py'], '2': ['model.onnx'] });
    assert.equal((await complete('two_versions', dir, {}, ['2', '1'])).backend, 'python');
  });

  it('takes a custom backend from a model.<backend> folder name', async () => {
    const dir = await model('thing.identity', { '1': [] });
    const c = await complete('thing.identity', dir);
    assert.deepEqual([c.backend, c.defaultModelFilename], ['identity', 'model.identity']);
  });

  it('explains when no backend can be found', async () => {
    const dir = await model('mystery', { '1': ['weights.bin'] });
    await assert.rejects(complete('mystery', dir), /cannot tell which backend serves model 'mystery'/);
  });

  it('does not override an explicit backend', async () => {
    const dir = await model('explicit', { '1': ['model.onnx'] });
    const c = await complete('explicit', dir, { backend: 'python' });
    assert.deepEqual([c.backend, c.platform, c.defaultModelFilename], ['python', '', 'model.py']);
  });
});
