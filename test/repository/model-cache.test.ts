import { afterEach, beforeEach, test } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, mkdtempSync, readFileSync, readdirSync, rmSync, statSync } from 'node:fs';
import { writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { ModelCache, type Downloader } from '../../src/repository/model-cache.js';
import type { StoredObject } from '../../src/repository/object-store.js';
import { silentLogger } from '../../src/logger.js';

const URL = 's3://bucket/repo';

/** A store held in memory: key -> contents; the version is the contents' length and first byte. */
function storeOf(files: Record<string, string>): { objects: StoredObject[]; download: Downloader; fetched: string[] } {
  const fetched: string[] = [];
  const objects = Object.entries(files).map(([p, body]) => ({ path: p, size: Buffer.byteLength(body), version: `v-${body}` }));
  const download: Downloader = async (object, file) => {
    fetched.push(object.path);
    const body = files[object.path];
    if (body === undefined) throw new Error(`no object ${object.path}`);
    await writeFile(file, body);
  };
  return { objects, download, fetched };
}

const noDownloads: Downloader = async (object) => {
  throw new Error(`'${object.path}' was downloaded again`);
};

let dir: string;
beforeEach(() => {
  dir = mkdtempSync(path.join(tmpdir(), 'nereid-model-cache-test-'));
});
afterEach(() => rmSync(dir, { recursive: true, force: true }));

test('a copy has every file, nested folders and folder markers included, and its folder is named after the model', async () => {
  const cache = new ModelCache(dir, URL, silentLogger);
  const s = storeOf({ 'm/config.pbtxt': 'name: "m"', 'm/1/model.onnx': 'onnx', 'm/1/sub/deep/x.bin': 'xx', 'm/2/': '' });
  const got = await cache.materialize('m', s.objects, s.download);
  assert.equal(path.basename(got), 'm');
  assert.equal(readFileSync(path.join(got, 'config.pbtxt'), 'utf8'), 'name: "m"');
  assert.equal(readFileSync(path.join(got, '1', 'model.onnx'), 'utf8'), 'onnx');
  assert.equal(readFileSync(path.join(got, '1', 'sub', 'deep', 'x.bin'), 'utf8'), 'xx');
  assert.ok(statSync(path.join(got, '2')).isDirectory());
  assert.deepEqual(s.fetched.sort(), ['m/1/model.onnx', 'm/1/sub/deep/x.bin', 'm/config.pbtxt']);
  assert.deepEqual(cache.totals, { files: 3, bytes: 15, reused: 0 });
  await cache.flush();
});

test('a copy is complete before its manifest is written: a restart reuses it without downloading', async () => {
  const first = new ModelCache(dir, URL, silentLogger);
  const s = storeOf({ 'm/config.pbtxt': 'c', 'm/1/model.onnx': 'onnx' });
  const got = await first.materialize('m', s.objects, s.download);
  const manifest = path.join(path.dirname(got), 'manifest.json');
  assert.equal(existsSync(manifest), false, 'the manifest waits until the copies settle');
  // Another process on the same cache, before the first wrote any manifest.
  const second = new ModelCache(dir, URL, silentLogger);
  assert.equal(await second.materialize('m', s.objects, noDownloads), got);
  await first.flush();
  const written = JSON.parse(readFileSync(manifest, 'utf8')) as { url: string; model: string; objects: StoredObject[] };
  assert.equal(written.url, URL);
  assert.equal(written.model, 'm');
  assert.deepEqual(written.objects, s.objects);
});

test('a changed model takes its unchanged files from the previous copy, in the same process and after a restart', async () => {
  const cache = new ModelCache(dir, URL, silentLogger);
  const v1 = storeOf({ 'm/config.pbtxt': 'c', 'm/1/model.onnx': 'one' });
  const old = await cache.materialize('m', v1.objects, v1.download);
  // Same process, manifest not written yet: the copy's objects are known here.
  const v2 = storeOf({ 'm/config.pbtxt': 'c', 'm/1/model.onnx': 'two' });
  const second = await cache.materialize('m', v2.objects, v2.download);
  assert.notEqual(second, old);
  assert.deepEqual(v2.fetched, ['m/1/model.onnx']);
  assert.equal(readFileSync(path.join(second, '1', 'model.onnx'), 'utf8'), 'two');
  assert.equal(readFileSync(path.join(old, '1', 'model.onnx'), 'utf8'), 'one', 'the serving copy keeps its files');
  assert.equal(statSync(path.join(second, 'config.pbtxt')).ino, statSync(path.join(old, 'config.pbtxt')).ino);
  await cache.flush();
  // A restart: only the manifests on disk tell what the earlier copies hold.
  const restarted = new ModelCache(dir, URL, silentLogger);
  const v3 = storeOf({ 'm/config.pbtxt': 'c', 'm/1/model.onnx': 'three' });
  const third = await restarted.materialize('m', v3.objects, v3.download);
  assert.deepEqual(v3.fetched, ['m/1/model.onnx']);
  assert.equal(restarted.totals.reused, 1);
  assert.equal(readFileSync(path.join(third, 'config.pbtxt'), 'utf8'), 'c');
  await restarted.flush();
});

test('a failed download leaves no copy and no partial folder, and the next try downloads again', async () => {
  const cache = new ModelCache(dir, URL, silentLogger);
  const s = storeOf({ 'm/config.pbtxt': 'c', 'm/1/model.onnx': 'onnx' });
  await assert.rejects(
    cache.materialize('m', [...s.objects, { path: 'm/1/missing.bin', size: 3, version: 'x' }], s.download),
    /no object m\/1\/missing.bin/,
  );
  const modelRoot = path.join(cache.root, 'm');
  assert.deepEqual(readdirSync(modelRoot), []);
  const got = await cache.materialize('m', s.objects, s.download);
  assert.equal(readFileSync(path.join(got, '1', 'model.onnx'), 'utf8'), 'onnx');
  await cache.flush();
});

test('an object that arrives with another size than listed fails the copy, whether the file is measured or the count given', async () => {
  const cache = new ModelCache(dir, URL, silentLogger);
  const s = storeOf({ 'm/config.pbtxt': 'c' });
  const listed = [{ path: 'm/config.pbtxt', size: 5, version: 'v' }];
  await assert.rejects(cache.materialize('m', listed, s.download), /arrived with 1 bytes, the listing says 5/);
  const counting: Downloader = async (object, file) => {
    await s.download(object, file);
    return 1;
  };
  await assert.rejects(cache.materialize('m', listed, counting), /arrived with 1 bytes, the listing says 5/);
  // A count that matches the listing is taken as it is.
  const got = await cache.materialize('m', [{ path: 'm/config.pbtxt', size: 1, version: 'v' }], counting);
  assert.equal(readFileSync(path.join(got, 'config.pbtxt'), 'utf8'), 'c');
  assert.deepEqual(cache.totals, { files: 1, bytes: 1, reused: 0 });
  await cache.flush();
});

test('old copies beyond the last three are removed, with no partial or half-removed folder left', async () => {
  const cache = new ModelCache(dir, URL, silentLogger);
  const dirs: string[] = [];
  for (const body of ['one', 'two', 'three', 'four']) {
    const s = storeOf({ 'm/config.pbtxt': 'c', 'm/1/model.onnx': body });
    dirs.push(await cache.materialize('m', s.objects, s.download));
  }
  const left = readdirSync(path.join(cache.root, 'm')).sort();
  assert.deepEqual(left, dirs.slice(1).map((d) => path.basename(path.dirname(d))).sort());
  assert.equal(existsSync(dirs[0]!), false);
  assert.equal(readFileSync(path.join(dirs[3]!, '1', 'model.onnx'), 'utf8'), 'four');
  await cache.flush();
});
