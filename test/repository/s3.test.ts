import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { ListObjectsV2Command } from '@aws-sdk/client-s3';
import { S3Store, parseS3Url, parseS3UrlParts } from '../../src/repository/s3.js';
import { createModelSource } from '../../src/repository/index.js';
import { radosGatewayUnavailable, startRadosGateway, type RadosGateway } from '../helpers/ceph.js';
import { freePort } from '../helpers/processes.js';
import { pagedModelComesFromTheCache } from './paged-cloud.js';
import {
  failingRepositoryLeavesOthersServing,
  explicitModeDownloadsOnlyLoadedModels,
  pollSeesChangedObjects,
  serveInferAndRestartFromCache,
  sourceError,
  type CloudStore,
} from './cloud-scenarios.js';

test('s3 URLs parse as Triton parses them', () => {
  assert.deepEqual(parseS3UrlParts('s3://bucket/path/to/repo'), { bucket: 'bucket', prefix: 'path/to/repo' });
  assert.deepEqual(parseS3UrlParts('s3://bucket'), { bucket: 'bucket', prefix: '' });
  assert.deepEqual(parseS3UrlParts('s3://bucket//a///b/'), { bucket: 'bucket', prefix: 'a/b' });
  assert.deepEqual(parseS3UrlParts('s3://localhost:9000/models/repo'), {
    bucket: 'models',
    prefix: 'repo',
    endpoint: 'http://localhost:9000',
  });
  assert.deepEqual(parseS3UrlParts('s3://10.0.0.5:443/bucket'), {
    bucket: 'bucket',
    prefix: '',
    endpoint: 'http://10.0.0.5:443',
  });
  assert.deepEqual(parseS3UrlParts('s3://https://minio.example.com:9000/b-1/x_y/z.v'), {
    bucket: 'b-1',
    prefix: 'x_y/z.v',
    endpoint: 'https://minio.example.com:9000',
  });
  assert.deepEqual(parseS3UrlParts('s3://http://h:1/bk'), { bucket: 'bk', prefix: '', endpoint: 'http://h:1' });
});

test('malformed s3 URLs are refused with the URL and what is wrong', () => {
  for (const [url, why] of [
    ['s3://', /no bucket name/],
    ['s3:////', /no bucket name/],
    ['s3://https://host/bucket', /host:port/],
    ['s3://host:9000/Bucket/path', /neither a bucket name nor host:port/],
    ['s3://host:9000/bucket/with space', /neither a bucket name nor host:port/],
  ] as const) {
    assert.throws(
      () => createModelSource(url),
      (err: { code?: string; message: string }) => {
        assert.equal(err.code, 'NRD_REPOSITORY_URL');
        assert.ok(err.message.includes(`'${url}'`), err.message);
        assert.match(err.message, why);
        return true;
      },
    );
  }
});

describe('against Ceph radosgw', { skip: radosGatewayUnavailable() }, () => {
  let rgw: RadosGateway;
  let store: CloudStore;
  const bucket = 'nereid-models';

  before(async () => {
    rgw = await startRadosGateway();
    await rgw.createBucket(bucket);
    store = {
      url: (prefix) => `s3://${rgw.hostPort}/${bucket}/${prefix}`,
      uploadDir: async (dir, prefix) => {
        await rgw.uploadDir(dir, bucket, prefix);
      },
      put: (key, body) => rgw.put(bucket, key, body),
      env: { AWS_ACCESS_KEY_ID: rgw.accessKey, AWS_SECRET_ACCESS_KEY: rgw.secretKey, AWS_REGION: 'us-east-1' },
    };
  });
  after(async () => {
    await rgw?.stop();
  });

  test('a server on s3://host:port/bucket/path answers an inference, ' +
    'and a restart with a warm cache downloads nothing', async () => {
    await serveInferAndRestartFromCache(store, 'serve');
  });

  test('under a memory budget, a model unloaded for room and requested again downloads nothing the second time; ' +
    'the store sees no GET for it', async () => {
    await pagedModelComesFromTheCache(rgw, bucket, store.env);
  });

  test('poll mode loads a version added to the bucket, downloading only the new object', async () => {
    await pollSeesChangedObjects(store, 'poll');
  });

  test('explicit mode lists the store without downloading, and downloads a model when it is loaded', async () => {
    await explicitModeDownloadsOnlyLoadedModels(store, 'explicit');
  });

  test('a store named by host:port gets objects by direct signed GETs, escaped keys included; ' +
    'an object that changed is asked again through the SDK, whose error names it', async () => {
    const contents: Record<string, string> = {
      'm/config.pbtxt': 'name: "m"',
      'm/1/a b+c(1)!*.txt': 'reserved characters',
      "m/1/it's ünïcode ☃.bin": 'non-ASCII and a quote',
      'm/2/~tilde_dash-dot.x': 'unreserved characters',
    };
    for (const [key, body] of Object.entries(contents)) await rgw.put(bucket, `direct/${key}`, body);
    const dir = mkdtempSync(path.join(tmpdir(), 'nereid-direct-'));
    const s3 = await parseS3Url(store.url('direct'), store.env).open();
    try {
      assert.ok(s3 instanceof S3Store);
      const objects = await s3.list('m/');
      assert.deepEqual(objects.map((o) => o.path).sort(), Object.keys(contents).sort());
      for (const [i, object] of objects.entries()) {
        const file = path.join(dir, String(i));
        assert.equal(await s3.download(object, file), object.size);
        assert.equal(readFileSync(file, 'utf8'), contents[object.path]);
      }
      assert.deepEqual(s3.gets, { direct: objects.length, sdk: 0 });
      assert.equal(s3.usesSdk, false, 'keys and region given: no SDK client is made for direct requests');

      // The listed version is gone: the direct GET is refused (412) and the SDK's GetObject says why.
      const listed = objects.find((o) => o.path === 'm/config.pbtxt')!;
      await rgw.put(bucket, 'direct/m/config.pbtxt', 'name: "m" # changed');
      const err = await s3.download(listed, path.join(dir, 'stale')).then(
        () => assert.fail('a download of a replaced version succeeded'),
        (e: unknown) => e,
      );
      assert.match(s3.describeError(err), /an object changed while it was being downloaded \(PreconditionFailed\)/);
      // A refused object does not turn the direct GETs off.
      const current = (await s3.list('m/config.pbtxt'))[0]!;
      await s3.download(current, path.join(dir, 'current'));
      assert.equal(readFileSync(path.join(dir, 'current'), 'utf8'), 'name: "m" # changed');
      assert.deepEqual(s3.gets, { direct: objects.length + 1, sdk: 0 });
      assert.equal(s3.usesSdk, true, 'the refused GET was asked again through the SDK');
    } finally {
      await s3.close();
      rmSync(dir, { recursive: true, force: true });
    }
  });

  test('direct listings follow the pages and read as the SDK reads them; without a ' +
    'region in the environment the SDK client resolves it and signs', async () => {
    const keys = ['m/config.pbtxt', 'm/1/a.bin', 'm/1/b&c <d>.bin', 'm/2/e.bin', 'n/config.pbtxt'];
    for (const key of keys) await rgw.put(bucket, `paged/${key}`, key);
    const lean = await parseS3Url(store.url('paged'), store.env).open();
    const { AWS_REGION: _, ...noRegion } = store.env;
    const viaSdk = await parseS3Url(store.url('paged'), noRegion).open();
    try {
      assert.ok(lean instanceof S3Store && viaSdk instanceof S3Store);
      lean.listPageSize = 2;
      viaSdk.listPageSize = 2;
      const direct = await lean.list('');
      assert.deepEqual(direct.map((o) => o.path).sort(), [...keys].sort());
      assert.deepEqual(lean.listings, { direct: 3, sdk: 0 });
      assert.equal(lean.usesSdk, false);
      assert.deepEqual(await lean.list('m/1/'), direct.filter((o) => o.path.startsWith('m/1/')));
      const listed = await rgw.client.send(new ListObjectsV2Command({ Bucket: bucket, Prefix: 'paged/' }));
      assert.deepEqual(
        direct,
        (listed.Contents ?? []).map((o) => ({
          path: o.Key!.slice('paged/'.length),
          size: o.Size,
          version: o.ETag!.replace(/"/g, ''),
        })),
        "keys, sizes and ETags read as the SDK's ListObjectsV2 reads them",
      );
      const sdk = await viaSdk.list('');
      assert.ok(viaSdk.usesSdk);
      assert.deepEqual(viaSdk.listings, { direct: 3, sdk: 0 });
      assert.deepEqual(sdk, direct);
      // The SDK's signer and clock still sign the direct GETs of a store whose region it resolved.
      const dir = mkdtempSync(path.join(tmpdir(), 'nereid-paged-'));
      const object = sdk.find((o) => o.path === 'm/1/b&c <d>.bin')!;
      assert.equal(await viaSdk.download(object, path.join(dir, 'x')), object.size);
      assert.deepEqual(viaSdk.gets, { direct: 1, sdk: 0 });
      rmSync(dir, { recursive: true, force: true });
    } finally {
      await lean.close();
      await viaSdk.close();
    }
  });

  test('a missing bucket is one clear error and the local repository keeps serving', async () => {
    const url = `s3://${rgw.hostPort}/no-such-bucket/models`;
    await failingRepositoryLeavesOthersServing(store, url, /bucket 'no-such-bucket' does not exist/);
    const err = await sourceError(url, store.env);
    assert.equal(err.code, 'NRD_REPOSITORY_UNAVAILABLE');
  });

  test('wrong credentials are named as such', async () => {
    const wrongSecret = await sourceError(store.url('serve'), { ...store.env, AWS_SECRET_ACCESS_KEY: 'wrong' });
    assert.equal(wrongSecret.code, 'NRD_REPOSITORY_UNAVAILABLE');
    assert.match(wrongSecret.message, /credentials were rejected \(SignatureDoesNotMatch\)/);
    const unknownKey = await sourceError(store.url('serve'), { ...store.env, AWS_ACCESS_KEY_ID: 'NOSUCHKEY' });
    assert.match(unknownKey.message, /credentials were rejected \(InvalidAccessKeyId\)/);
  });

  test("Triton's credential file (TRITON_CLOUD_CREDENTIAL_PATH) picks the longest matching prefix", async () => {
    const dir = mkdtempSync(path.join(tmpdir(), 'nereid-cred-'));
    const file = path.join(dir, 'cloud_credential.json');
    const url = store.url('serve');
    writeFileSync(
      file,
      JSON.stringify({
        s3: {
          '': { key_id: 'NOSUCHKEY', secret_key: 'wrong' },
          [`s3://${rgw.hostPort}/${bucket}`]: { key_id: rgw.accessKey, secret_key: rgw.secretKey, region: 'us-east-1' },
        },
      }),
    );
    const env = { TRITON_CLOUD_CREDENTIAL_PATH: file, AWS_ACCESS_KEY_ID: 'NOSUCHKEY', AWS_SECRET_ACCESS_KEY: 'wrong' };
    await rgw.put(bucket, 'creds/m/config.pbtxt', 'name: "m"');
    const source = createModelSource(url.replace('/serve', '/creds'), { env, cacheDir: dir });
    assert.deepEqual(await source.listModelNames(), ['m']);
    await source.close();
    const fallback = await sourceError(`s3://${rgw.hostPort}/other-bucket/x`, env);
    assert.match(fallback.message, /credentials were rejected/);
    writeFileSync(file, '{ not json');
    const broken = await sourceError(url, env);
    assert.match(broken.message, /cannot read the credential file TRITON_CLOUD_CREDENTIAL_PATH/);
    rmSync(dir, { recursive: true, force: true });
  });

  test('an unreachable endpoint is named with the cause', async () => {
    const port = await freePort();
    const err = await sourceError(`s3://127.0.0.1:${port}/${bucket}/serve`, store.env);
    assert.equal(err.code, 'NRD_REPOSITORY_UNAVAILABLE');
    assert.ok(err.message.includes(`s3://127.0.0.1:${port}/${bucket}/serve`), err.message);
    assert.match(err.message, new RegExp(`cannot connect to http://127.0.0.1:${port} \\(connection refused\\)`));
  });
});
