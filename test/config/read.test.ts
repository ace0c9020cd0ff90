import assert from 'node:assert/strict';
import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { ConfigError, readModelConfig } from '../../src/config/index.js';

let repo: string;

async function modelDir(name: string, files: Record<string, string>): Promise<string> {
  const dir = join(repo, name);
  await mkdir(dir, { recursive: true });
  for (const [path, text] of Object.entries(files)) {
    await mkdir(join(dir, path, '..'), { recursive: true });
    await writeFile(join(dir, path), text);
  }
  return dir;
}

describe('readModelConfig', () => {
  before(async () => {
    repo = await mkdtemp(join(tmpdir(), 'nereid-read-config-'));
  });
  after(async () => {
    await rm(repo, { recursive: true, force: true });
  });

  it('reads config.pbtxt with positions and a repository-relative file name', async () => {
    const dir = await modelDir('plain', { 'config.pbtxt': 'name: "plain"\nmax_batch_size: 4\n' });
    const read = await readModelConfig(dir);
    assert.equal(read.config.maxBatchSize, 4);
    assert.equal(read.file, 'plain/config.pbtxt');
    assert.equal(read.path, join(dir, 'config.pbtxt'));
    assert.deepEqual(read.positions?.get('max_batch_size'), { line: 2, column: 1 });
  });

  it('prefers configs/<name>.pbtxt when --model-config-name is set and the file exists', async () => {
    const dir = await modelDir('custom', {
      'config.pbtxt': 'max_batch_size: 4\n',
      'configs/h100.pbtxt': 'max_batch_size: 64\n',
    });
    const picked = await readModelConfig(dir, { modelConfigName: 'h100' });
    assert.equal(picked.config.maxBatchSize, 64);
    assert.equal(picked.file, 'custom/configs/h100.pbtxt');
    const fallback = await readModelConfig(dir, { modelConfigName: 'a100' });
    assert.equal(fallback.config.maxBatchSize, 4);
    assert.equal(fallback.file, 'custom/config.pbtxt');
  });

  it('ignores a byte-order mark and CRLF line ends', async () => {
    const dir = await modelDir('windows', { 'config.pbtxt': '\ufeffname: "windows"\r\nmax_batch_size: 2\r\n' });
    const read = await readModelConfig(dir);
    assert.equal(read.config.maxBatchSize, 2);
    assert.deepEqual(read.positions?.get('max_batch_size'), { line: 2, column: 1 });
  });

  it('gives an empty config when there is no file', async () => {
    const dir = await modelDir('bare', { '1/model.py': '' });
    const read = await readModelConfig(dir);
    assert.equal(read.file, undefined);
    assert.equal(read.config.name, '');
    assert.equal(read.config.input.length, 0);
  });

  it('reports a broken file by its repository-relative name, line and column', async () => {
    const dir = await modelDir('fraud_detector', {
      'config.pbtxt': 'name: "fraud_detector"\ninput {\n  name: "input_features"\n  data_type: TYPE_FLOAT\n}\n',
    });
    await assert.rejects(readModelConfig(dir), (err: unknown) => {
      assert.ok(err instanceof ConfigError);
      assert.match(err.message, /^fraud_detector\/config\.pbtxt:4:14: TYPE_FLOAT is not a valid value for "data_type"/);
      return true;
    });
  });

  it('reports a config.pbtxt that is a folder', async () => {
    const dir = await modelDir('odd', {});
    await mkdir(join(dir, 'config.pbtxt'));
    await assert.rejects(
      readModelConfig(dir),
      /odd\/config\.pbtxt: cannot read the model configuration: it is a directory/,
    );
  });
});
