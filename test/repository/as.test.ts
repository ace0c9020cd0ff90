import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { parseAzureUrlParts } from '../../src/repository/as.js';
import { createModelSource } from '../../src/repository/index.js';
import { AZURITE_KEY, startAzurite, type AzuriteServer } from '../helpers/azurite.js';
import { freePort } from '../helpers/processes.js';
import {
  failingRepositoryLeavesOthersServing,
  explicitModeDownloadsOnlyLoadedModels,
  pollSeesChangedObjects,
  serveInferAndRestartFromCache,
  sourceError,
  type CloudStore,
} from './cloud-scenarios.js';

test('as URLs parse as Triton parses them', () => {
  assert.deepEqual(parseAzureUrlParts('as://acct/models/path/to/repo'), {
    account: 'acct',
    container: 'models',
    prefix: 'path/to/repo',
  });
  assert.deepEqual(parseAzureUrlParts('as://acct/models'), { account: 'acct', container: 'models', prefix: '' });
  assert.deepEqual(parseAzureUrlParts('as://acct.blob.core.windows.net/c/p/'), {
    account: 'acct',
    container: 'c',
    prefix: 'p',
  });
  for (const url of ['as://acct', 'as://acct/', 'as:///container/x']) {
    assert.throws(() => createModelSource(url), (err: { code?: string; message: string }) => {
      assert.equal(err.code, 'NRD_REPOSITORY_URL');
      assert.ok(err.message.includes(`'${url}'`), err.message);
      assert.match(err.message, /as:\/\/account\/container\[\/path\]/);
      return true;
    });
  }
});

describe('against Azurite', () => {
  let azurite: AzuriteServer;
  let store: CloudStore;
  const container = 'nereid-models';

  before(async () => {
    azurite = await startAzurite();
    await azurite.createContainer(container);
    store = {
      url: (prefix) => `as://devstoreaccount1/${container}/${prefix}`,
      uploadDir: async (dir, prefix) => {
        await azurite.uploadDir(dir, container, prefix);
      },
      put: (key, body) => azurite.put(container, key, body),
      env: { AZURE_STORAGE_CONNECTION_STRING: azurite.connectionString },
    };
  });
  after(async () => {
    await azurite?.stop();
  });

  test('a server on as://account/container/path answers an inference, ' +
    'and a restart with a warm cache downloads nothing', async () => {
    await serveInferAndRestartFromCache(store, 'serve');
  });

  test('poll mode loads a version added to the container, downloading only the new blob', async () => {
    await pollSeesChangedObjects(store, 'poll');
  });

  test('explicit mode lists the store without downloading, and downloads a model when it is loaded', async () => {
    await explicitModeDownloadsOnlyLoadedModels(store, 'explicit');
  });

  test('a missing container is one clear error and the local repository keeps serving', async () => {
    const url = 'as://devstoreaccount1/no-such-container/models';
    await failingRepositoryLeavesOthersServing(store, url, /container 'no-such-container' does not exist/);
  });

  test('a wrong account key is named as such', async () => {
    const wrong = AZURITE_KEY.replace(/^Eby8/, 'AAAA');
    const err = await sourceError(store.url('serve'), {
      AZURE_STORAGE_CONNECTION_STRING: azurite.connectionStringWithKey(wrong),
    });
    assert.equal(err.code, 'NRD_REPOSITORY_UNAVAILABLE');
    assert.match(err.message, /the credentials were rejected|access to container 'nereid-models' is denied/);
  });

  test('an unreachable blob endpoint is named with the cause', async () => {
    const port = await freePort();
    const cs = azurite.connectionString.replace(/127\.0\.0\.1:\d+/, `127.0.0.1:${port}`);
    const err = await sourceError(store.url('serve'), { AZURE_STORAGE_CONNECTION_STRING: cs });
    assert.equal(err.code, 'NRD_REPOSITORY_UNAVAILABLE');
    assert.match(
      err.message,
      new RegExp(`cannot connect to http://127.0.0.1:${port}/devstoreaccount1 \\(connection refused\\)`),
    );
  });
});
