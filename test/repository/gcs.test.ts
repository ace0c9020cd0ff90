import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { parseGcsUrlParts } from '../../src/repository/gcs.js';
import { createModelSource } from '../../src/repository/index.js';
import { startGcsEmulator, type GcsEmulator } from '../helpers/gcs-emulator.js';
import { freePort } from '../helpers/processes.js';
import {
  failingRepositoryLeavesOthersServing,
  explicitModeDownloadsOnlyLoadedModels,
  pollSeesChangedObjects,
  serveInferAndRestartFromCache,
  sourceError,
  type CloudStore,
} from './cloud-scenarios.js';

test('gs URLs parse as Triton parses them', () => {
  assert.deepEqual(parseGcsUrlParts('gs://bucket/path/to/repo'), { bucket: 'bucket', prefix: 'path/to/repo' });
  assert.deepEqual(parseGcsUrlParts('gs://bucket'), { bucket: 'bucket', prefix: '' });
  assert.deepEqual(parseGcsUrlParts('gs://bucket/a//b/'), { bucket: 'bucket', prefix: 'a/b' });
  for (const [url, why] of [
    ['gs://', /no bucket name/],
    ['gs:///path', /no bucket name/],
    ['gs://Bad_Bucket!/x', /not a bucket name/],
  ] as const) {
    assert.throws(() => createModelSource(url), (err: { code?: string; message: string }) => {
      assert.equal(err.code, 'NRD_REPOSITORY_URL');
      assert.ok(err.message.includes(`'${url}'`), err.message);
      assert.match(err.message, why);
      return true;
    });
  }
});

describe("against Google's storage emulator", () => {
  let gcs: GcsEmulator;
  let store: CloudStore;
  const bucket = 'nereid-models';

  before(async () => {
    gcs = await startGcsEmulator();
    await gcs.createBucket(bucket);
    store = {
      url: (prefix) => `gs://${bucket}/${prefix}`,
      uploadDir: async (dir, prefix) => {
        await gcs.uploadDir(dir, bucket, prefix);
      },
      put: (key, body) => gcs.put(bucket, key, body),
      env: { STORAGE_EMULATOR_HOST: gcs.host },
    };
  });
  after(async () => {
    await gcs?.stop();
  });

  test('a server on gs://bucket/path answers an inference, and a ' +
    'restart with a warm cache downloads nothing', async () => {
    await serveInferAndRestartFromCache(store, 'serve');
  });

  test('poll mode loads a version added to the bucket, downloading only the new object', async () => {
    await pollSeesChangedObjects(store, 'poll');
  });

  test('explicit mode lists the store without downloading, and downloads a model when it is loaded', async () => {
    await explicitModeDownloadsOnlyLoadedModels(store, 'explicit');
  });

  test('a missing bucket is one clear error and the local repository keeps serving', async () => {
    await failingRepositoryLeavesOthersServing(
      store,
      'gs://no-such-bucket/models',
      /bucket 'no-such-bucket' does not exist/,
    );
  });

  test('an unreachable endpoint is named with the cause', async () => {
    const port = await freePort();
    const err = await sourceError(store.url('serve'), { STORAGE_EMULATOR_HOST: `http://127.0.0.1:${port}` });
    assert.equal(err.code, 'NRD_REPOSITORY_UNAVAILABLE');
    assert.match(err.message, new RegExp(`cannot connect to http://127.0.0.1:${port} \\(connection refused\\)`));
    const bare = await sourceError(store.url('serve'), { STORAGE_EMULATOR_HOST: `127.0.0.1:${port}` });
    assert.match(bare.message, /STORAGE_EMULATOR_HOST='127.0.0.1:\d+' must start with http:\/\/ or https:\/\//);
  });
});
