import { test } from 'node:test';
import assert from 'node:assert/strict';
import { buildServeConfig, parseBackendConfig } from '../../src/cli/serve.js';
import { Server } from '../../src/core/server.js';

test('tritonserver defaults', () => {
  const c = buildServeConfig(['--model-repository=/models']);
  assert.deepEqual(c.server.modelRepositories, ['/models']);
  assert.equal(c.http.port, 8000);
  assert.equal(c.grpc.port, 8001);
  assert.equal(c.metrics.port, 8002);
  assert.equal(c.server.modelControlMode, 'none');
  assert.equal(c.server.strictReadiness, true);
  assert.equal(c.server.exitOnError, true);
  assert.equal(c.server.exitTimeoutSecs, 30);
  assert.equal(c.http.maxInputSize, 67108864);
});

test('booleans take true/false, on/off, 1/0; repeated repositories add up', () => {
  const c = buildServeConfig([
    '--model-repository',
    'a',
    '--model-store=b',
    '--strict-readiness=off',
    '--exit-on-error=0',
    '--allow-grpc=FALSE',
  ]);
  assert.deepEqual(c.server.modelRepositories, ['a', 'b']);
  assert.equal(c.server.strictReadiness, false);
  assert.equal(c.server.exitOnError, false);
  assert.equal(c.grpc.enabled, false);
});

test('--load-model outside explicit mode is a startup error', () => {
  // Triton's text, the same from the in-process Server.
  const triton = "Error: Use of '--load-model' requires setting '--model-control-mode=explicit' as well.";
  assert.throws(() => buildServeConfig(['--load-model=simple']), { message: triton });
  assert.throws(() => new Server({ modelRepositories: ['.'], loadModels: ['simple'] }), { message: triton });
  const c = buildServeConfig(['--model-control-mode=EXPLICIT', '--load-model=simple']);
  assert.deepEqual(c.server.loadModels, ['simple']);
});

test('port collisions, bad values and unknown flags are rejected with the flag named', () => {
  assert.throws(() => buildServeConfig(['--http-port=9000', '--grpc-port=9000']), /HTTP and gRPC ports are both 9000/);
  assert.throws(() => buildServeConfig(['--http-port=abc']), /--http-port' takes an integer/);
  assert.throws(() => buildServeConfig(['--no-such-flag=1']), /unrecognized flag '--no-such-flag'/);
  assert.throws(() => buildServeConfig(['--http-max-input-size=0']), /greater than 0/);
});

test('backend config: per backend and global', () => {
  assert.deepEqual(parseBackendConfig(['python,python-executable=/usr/bin/python3', 'default-max-batch-size=8']), {
    python: { 'python-executable': '/usr/bin/python3' },
    '': { 'default-max-batch-size': '8' },
  });
});

test('the deprecated strict-model-config disables auto-complete', () => {
  assert.equal(buildServeConfig(['--strict-model-config=true']).server.disableAutoCompleteConfig, true);
  assert.equal(buildServeConfig([]).server.disableAutoCompleteConfig, false);
});

test("--strict-model-config prints Triton's deprecation warnings", () => {
  const deprecated =
    "Warning: '--strict-model-config' has been deprecated! Please use '--disable-auto-complete-config' instead.";
  const overridden =
    "Warning: Overriding deprecated '--strict-model-config' from " +
    "False to True in favor of '--disable-auto-complete-config'!";
  const strict = buildServeConfig(['--strict-model-config=true']);
  assert.deepEqual(strict.warnings, [deprecated]);
  assert.equal(strict.server.disableAutoCompleteConfig, true);
  const both = buildServeConfig(['--disable-auto-complete-config', '--strict-model-config=false']);
  assert.deepEqual(both.warnings, [deprecated, overridden]);
  assert.equal(both.server.disableAutoCompleteConfig, true);
  assert.deepEqual(buildServeConfig(['--disable-auto-complete-config']).warnings, []);
});

test('--cache-config and the deprecated --response-cache-byte-size ' +
  'configure the local cache; bad values stop the start', () => {
  assert.deepEqual(buildServeConfig(['--cache-config=local,size=1048576']).server.cacheConfig, {
    local: { size: '1048576' },
  });
  const deprecated = buildServeConfig(['--response-cache-byte-size=4096']);
  assert.deepEqual(deprecated.server.cacheConfig, { local: { size: '4096' } });
  assert.match(
    deprecated.warnings.join('\n'),
    /'--response-cache-byte-size' has been deprecated!.*'--cache-config=local,size=4096'/,
  );
  assert.equal(buildServeConfig([]).server.cacheConfig, undefined);
  assert.throws(
    () => buildServeConfig(['--cache-config=local,size=1000', '--response-cache-byte-size=1000']),
    /Incompatible flags --response-cache-byte-size and --cache-config both provided/,
  );
  assert.throws(
    () => buildServeConfig(['--cache-config=local,size=big']),
    /size=big: the size must be a whole number of bytes/,
  );
  assert.throws(() => buildServeConfig(['--cache-config=local,size=8']), /could not hold a single response/);
  assert.throws(() => buildServeConfig(['--response-cache-byte-size=8']), /could not hold a single response/);
});

test('cloud repository URLs and --model-cache-dir reach the server options', () => {
  const c = buildServeConfig([
    '--model-repository=s3://bucket/models',
    '--model-repository=/local',
    '--model-cache-dir=/var/cache/nereid',
  ]);
  assert.deepEqual(c.server.modelRepositories, ['s3://bucket/models', '/local']);
  assert.equal(c.server.modelCacheDir, '/var/cache/nereid');
  assert.equal(buildServeConfig([]).server.modelCacheDir, undefined);
});

test('model control flags reach the server: poll period, load threads, load retries (Triton defaults 15, 4, 0)', () => {
  const d = buildServeConfig(['--model-control-mode=poll']);
  assert.equal(d.server.repositoryPollSecs, 15);
  assert.equal(d.server.modelLoadThreadCount, 4);
  assert.equal(d.server.modelLoadRetryCount, 0);
  const c = buildServeConfig([
    '--model-control-mode=poll',
    '--repository-poll-secs=2',
    '--model-load-thread-count=8',
    '--model-load-retry-count=3',
  ]);
  assert.equal(c.server.repositoryPollSecs, 2);
  assert.equal(c.server.modelLoadThreadCount, 8);
  assert.equal(c.server.modelLoadRetryCount, 3);
});
