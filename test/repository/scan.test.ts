import assert from 'node:assert/strict';
import { mkdir, mkdtemp, rm, symlink, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import {
  LocalModelSource,
  ModelSources,
  createModelSource,
  isDuplicate,
  listModels,
  listSubfolders,
  listVersions,
} from '../../src/repository/index.js';

let root: string;

async function dirs(base: string, names: string[]): Promise<void> {
  for (const name of names) await mkdir(join(base, name), { recursive: true });
}

describe('listVersions', () => {
  before(async () => {
    root = await mkdtemp(join(tmpdir(), 'nereid-scan-'));
  });
  after(async () => {
    await rm(root, { recursive: true, force: true });
  });

  it('keeps numeric folders, ignores leading zeros but not "0", and ignores other names', async () => {
    const model = join(root, 'versions');
    await dirs(model, ['0', '1', '2', '10', '01', '007', 'abc', '3a', 'configs', 'warmup', 'initial_state', '-1']);
    await writeFile(join(model, '5'), 'a file, not a version');
    await writeFile(join(model, 'config.pbtxt'), '');
    assert.deepEqual(await listVersions(model), [0, 1, 2, 10]);
  });

  it('follows symlinked version folders', async () => {
    const model = join(root, 'linked');
    await dirs(model, ['1']);
    await symlink(join(model, '1'), join(model, '4'));
    assert.deepEqual(await listVersions(model), [1, 4]);
  });

  it('a missing model folder has no versions', async () => {
    assert.deepEqual(await listVersions(join(root, 'nope')), []);
  });

  it('lists every subfolder for auto-complete', async () => {
    const model = join(root, 'subs');
    await dirs(model, ['2', '1', 'configs']);
    assert.deepEqual(await listSubfolders(model), ['1', '2', 'configs']);
  });
});

describe('listModels', () => {
  let a: string;
  let b: string;
  before(async () => {
    root = await mkdtemp(join(tmpdir(), 'nereid-repos-'));
    a = join(root, 'repo_a');
    b = join(root, 'repo_b');
    await dirs(a, ['resnet', 'bert', '.ipynb_checkpoints']);
    await dirs(b, ['bert', 'gpt']);
    await writeFile(join(a, 'README.md'), 'not a model');
    await symlink(join(b, 'gpt'), join(a, 'gpt_link'));
  });
  after(async () => {
    await rm(root, { recursive: true, force: true });
  });

  it('finds one folder per model across repositories, sorted by name', async () => {
    const models = await listModels([a, b]);
    assert.deepEqual([...models.keys()], ['bert', 'gpt', 'gpt_link', 'resnet']);
    assert.deepEqual(models.get('resnet'), { repository: a, dir: join(a, 'resnet') });
    assert.deepEqual(models.get('gpt'), { repository: b, dir: join(b, 'gpt') });
    assert.deepEqual(models.get('gpt_link'), { repository: a, dir: join(a, 'gpt_link') });
  });

  it('flags a name found in two repositories', async () => {
    const models = await listModels([a, b]);
    const bert = models.get('bert')!;
    assert.ok(isDuplicate(bert));
    assert.deepEqual(bert, { duplicate: [a, b] });
    assert.ok(!isDuplicate(models.get('resnet')!));
  });

  it('a single repository has no duplicates', async () => {
    const models = await listModels([b]);
    assert.ok([...models.values()].every((m) => !isDuplicate(m)));
  });

  it('reports a repository that does not exist and still lists the others', async () => {
    const missing = join(root, 'missing');
    const models = await listModels([missing, b]);
    assert.ok(models.size > 0);
    assert.equal(models.failures.length, 1);
    assert.equal(models.failures[0]!.repository, missing);
    assert.match(models.failures[0]!.message, /failed to read model repository/);
  });

  it('a repository that becomes unreadable keeps its earlier models', async () => {
    const base = await mkdtemp(join(tmpdir(), 'nereid-stale-'));
    try {
      await dirs(base, ['kept']);
      const sources = new ModelSources();
      assert.deepEqual([...(await listModels([base], sources)).keys()], ['kept']);
      await rm(base, { recursive: true, force: true });
      const again = await listModels([base], sources);
      assert.deepEqual([...again.keys()], ['kept']);
      assert.equal(again.failures.length, 1);
    } finally {
      await rm(base, { recursive: true, force: true });
    }
  });
});

describe('ModelSource', () => {
  it('a local path materialises in place; its fingerprint follows its files', async () => {
    const base = await mkdtemp(join(tmpdir(), 'nereid-source-'));
    try {
      await dirs(base, ['m']);
      const source = createModelSource(base);
      assert.ok(source instanceof LocalModelSource);
      const local = await source.materialize('m');
      assert.equal(local.dir, join(base, 'm'));
      await local.release();
      await assert.rejects(source.materialize('absent'), /not in repository/);
      const before = await source.fingerprint('m');
      assert.equal(await source.fingerprint('m'), before);
      await writeFile(join(base, 'm', 'config.pbtxt'), 'name: "m"');
      assert.notEqual(await source.fingerprint('m'), before);
      assert.ok(!(createModelSource('s3://bucket/models') instanceof LocalModelSource));
    } finally {
      await rm(base, { recursive: true, force: true });
    }
  });
});
