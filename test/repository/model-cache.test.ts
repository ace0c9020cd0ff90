import { afterEach, beforeEach, test } from 'node:test';
import assert from 'node:assert/strict';
import {
  cpSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  readFileSync,
  readdirSync,
  rmSync,
  statSync,
  writeFileSync,
} from 'node:fs';
import { writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { ModelCache, objectsFingerprint, type Downloader } from '../../src/repository/model-cache.js';
import type { StoredObject } from '../../src/repository/object-store.js';
import { silentLogger } from '../../src/logger.js';

const URL = 's3://bucket/repo';

/** A store held in memory: key -> contents; the version is the contents' length and first byte. */
function storeOf(files: Record<string, string>): { objects: StoredObject[]; download: Downloader; fetched: string[] } {
  const fetched: string[] = [];
  const objects = Object.entries(files).map(([p, body]) => ({
    path: p,
    size: Buffer.byteLength(body),
    version: `v-${body}`,
  }));
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

/** The names in the repository's cache folder, sorted. */
function cacheEntries(cache: ModelCache): string[] {
  return readdirSync(cache.root).sort();
}

test('a copy has every file, nested folders and folder markers included, ' +
  'in a folder named after the model and its fingerprint', async () => {
  const cache = new ModelCache(dir, URL, silentLogger);
  const s = storeOf({
    'm/config.pbtxt': 'name: "m"',
    'm/1/model.onnx': 'onnx',
    'm/1/sub/deep/x.bin': 'xx',
    'm/2/': '',
  });
  const got = await cache.materialize('m', s.objects, s.download);
  assert.equal(got, path.join(cache.root, `m@${objectsFingerprint(s.objects)}`));
  assert.deepEqual(
    readdirSync(got).sort(),
    ['1', '2', 'config.pbtxt'],
    'the copy folder is the model folder, with nothing else in it',
  );
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
  const manifest = path.join(first.root, 'manifest.json');
  assert.equal(existsSync(manifest), false, 'the manifest waits until the copies settle');
  // Another process on the same cache, before the first wrote any manifest.
  const second = new ModelCache(dir, URL, silentLogger);
  assert.equal(await second.materialize('m', s.objects, noDownloads), got);
  await first.flush();
  const written = JSON.parse(readFileSync(manifest, 'utf8')) as {
    url: string;
    copies: Record<string, { objects: StoredObject[] }>;
  };
  assert.equal(written.url, URL);
  assert.deepEqual(Object.keys(written.copies), [path.basename(got)]);
  assert.deepEqual(written.copies[path.basename(got)]!.objects, s.objects);
  assert.deepEqual(
    cacheEntries(first),
    [path.basename(got), 'manifest.json'],
    'one manifest for the repository, no file per copy',
  );
});

test('copies of several models made by two processes all reach the one manifest', async () => {
  const a = new ModelCache(dir, URL, silentLogger);
  const b = new ModelCache(dir, URL, silentLogger);
  const sa = storeOf({ 'a/config.pbtxt': 'a', 'a/1/model.onnx': 'a1' });
  const sb = storeOf({ 'b@x/config.pbtxt': 'b', 'b@x/1/model.onnx': 'b1' });
  const da = await a.materialize('a', sa.objects, sa.download);
  const db = await b.materialize('b@x', sb.objects, sb.download);
  await a.flush();
  await b.flush();
  const written = JSON.parse(readFileSync(path.join(dir, path.basename(a.root), 'manifest.json'), 'utf8')) as {
    copies: Record<string, unknown>;
  };
  assert.deepEqual(Object.keys(written.copies).sort(), [path.basename(da), path.basename(db)].sort());
  // A model name with '@' in it is still told apart from its fingerprint: a restart reuses both.
  const restarted = new ModelCache(dir, URL, silentLogger);
  assert.equal(await restarted.materialize('b@x', sb.objects, noDownloads), db);
  assert.equal(await restarted.materialize('a', sa.objects, noDownloads), da);
});

test('a changed model takes its unchanged files from the previous ' +
  'copy, in the same process and after a restart', async () => {
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
  assert.deepEqual(cacheEntries(cache), []);
  const got = await cache.materialize('m', s.objects, s.download);
  assert.equal(readFileSync(path.join(got, '1', 'model.onnx'), 'utf8'), 'onnx');
  await cache.flush();
});

test('an object that arrives with another size than listed fails the ' +
  'copy, whether the file is measured or the count given', async () => {
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
  assert.deepEqual(cacheEntries(cache), dirs.slice(1).map((d) => path.basename(d)).sort());
  assert.equal(existsSync(dirs[0]!), false);
  assert.equal(readFileSync(path.join(dirs[3]!, '1', 'model.onnx'), 'utf8'), 'four');
  await cache.flush();
  const written = JSON.parse(readFileSync(path.join(cache.root, 'manifest.json'), 'utf8')) as {
    copies: Record<string, unknown>;
  };
  assert.deepEqual(
    Object.keys(written.copies).sort(),
    dirs
      .slice(1)
      .map((d) => path.basename(d))
      .sort(),
    'a removed copy leaves the manifest',
  );
});

test('a partial folder is never used: one left by a process ' +
  'gone is removed and the copy downloaded again', async () => {
  const first = new ModelCache(dir, URL, silentLogger);
  const s = storeOf({ 'm/config.pbtxt': 'c', 'm/1/model.onnx': 'onnx' });
  const got = await first.materialize('m', s.objects, s.download);
  await first.flush();
  // A crash mid-copy: the files sit in a partial folder of a process that no longer runs.
  const partial = path.join(first.root, '.partial-copy-999999999-0badc0de');
  cpSync(got, partial, { recursive: true });
  rmSync(got, { recursive: true });
  const restarted = new ModelCache(dir, URL, silentLogger);
  assert.equal(await restarted.materialize('m', s.objects, s.download), got);
  assert.deepEqual(s.fetched.sort(), ['m/1/model.onnx', 'm/1/model.onnx', 'm/config.pbtxt', 'm/config.pbtxt']);
  await restarted.flush();
  assert.deepEqual(cacheEntries(restarted), [path.basename(got), 'manifest.json']);
});

test('a copy removed from disk after the cache was listed is made again, not handed out', async () => {
  const first = new ModelCache(dir, URL, silentLogger);
  const s = storeOf({ 'm/config.pbtxt': 'c', 'm/1/model.onnx': 'onnx' });
  const other = storeOf({ 'n/config.pbtxt': 'n' });
  const got = await first.materialize('m', s.objects, s.download);
  const restarted = new ModelCache(dir, URL, silentLogger);
  await restarted.materialize('n', other.objects, other.download);
  rmSync(got, { recursive: true });
  assert.equal(await restarted.materialize('m', s.objects, s.download), got);
  assert.equal(readFileSync(path.join(got, '1', 'model.onnx'), 'utf8'), 'onnx');
  await first.flush();
  await restarted.flush();
});

test('folders that are no copies (an earlier layout, stray files) are left alone and never used', async () => {
  const cache = new ModelCache(dir, URL, silentLogger);
  const s = storeOf({ 'm/config.pbtxt': 'new', 'm/1/model.onnx': 'onnx' });
  const fingerprint = objectsFingerprint(s.objects);
  // The earlier layout: <model>/<fingerprint>/<model>/... with a manifest per copy.
  const old = path.join(dir, path.basename(cache.root), 'm', fingerprint, 'm');
  mkdirSync(path.join(old, '1'), { recursive: true });
  writeFileSync(path.join(old, 'config.pbtxt'), 'old');
  writeFileSync(path.join(dir, path.basename(cache.root), 'notes.txt'), 'x');
  const got = await cache.materialize('m', s.objects, s.download);
  assert.equal(readFileSync(path.join(got, 'config.pbtxt'), 'utf8'), 'new');
  assert.deepEqual(s.fetched.sort(), ['m/1/model.onnx', 'm/config.pbtxt']);
  assert.equal(readFileSync(path.join(old, 'config.pbtxt'), 'utf8'), 'old');
  await cache.flush();
});
