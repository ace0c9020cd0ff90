/**
 * The behaviours every cloud scheme must show, run against its real server:
 * a full serve answering an inference, reuse of the download cache across a
 * restart, change detection in poll mode, explicit mode downloading only the
 * models it loads, and a failing repository that leaves the other
 * repositories serving.
 */
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { recordingLogger } from '../helpers/recording-logger.js';
import { Server } from '../../src/core/server.js';
import { createModelSource } from '../../src/repository/index.js';
import { typedView } from '../../src/tensor/tensor.js';
import { TempRepository, int32Tensor } from '../helpers/repository.js';
import { buildAddSubModel } from '../helpers/onnx-builder.js';

export interface CloudStore {
  /** The repository URL for a key prefix (`prefix` has no slashes at either end). */
  url(prefix: string): string;
  uploadDir(localDir: string, prefix: string): Promise<void>;
  put(key: string, body: Uint8Array | string): Promise<void>;
  /** Environment the source reads its credentials and endpoint from. */
  env: NodeJS.ProcessEnv;
}

const a = Array.from({ length: 16 }, (_, i) => i);
const b = Array.from({ length: 16 }, () => 3);

export function addSubRequest(model: string) {
  return { model, inputs: [int32Tensor('INPUT0', a), int32Tensor('INPUT1', b)] };
}

export { recordingLogger };

function downloads(records: Array<Record<string, unknown>>): Array<Record<string, unknown>> {
  return records.filter((r) => typeof r.msg === 'string' && r.msg.startsWith('downloaded model'));
}

/** Sets process.env entries for the duration of `fn` (the server reads process.env). */
async function withEnv<T>(env: NodeJS.ProcessEnv, fn: () => Promise<T>): Promise<T> {
  const saved = new Map<string, string | undefined>();
  for (const [k, v] of Object.entries(env)) {
    saved.set(k, process.env[k]);
    if (v === undefined) delete process.env[k];
    else process.env[k] = v;
  }
  try {
    return await fn();
  } finally {
    for (const [k, v] of saved) {
      if (v === undefined) delete process.env[k];
      else process.env[k] = v;
    }
  }
}

export async function serveInferAndRestartFromCache(store: CloudStore, prefix: string): Promise<void> {
  const repo = new TempRepository().addSub('simple').addSub('other', [1, 2]);
  const cacheDir = mkdtempSync(path.join(tmpdir(), 'nereid-cache-'));
  try {
    await store.uploadDir(repo.dir, prefix);
    await withEnv(store.env, async () => {
      const first = recordingLogger();
      const server = new Server({
        modelRepositories: [store.url(prefix)],
        modelCacheDir: cacheDir,
        logger: first.logger,
      });
      await server.start();
      try {
        const r = await server.infer(addSubRequest('simple'));
        assert.deepEqual(Array.from(typedView(r.outputs[0]!) as Int32Array), a.map((x) => x + 3));
        assert.deepEqual(Array.from(typedView(r.outputs[1]!) as Int32Array), a.map((x) => x - 3));
        const other = await server.infer(addSubRequest('other'));
        assert.equal(other.modelVersion, '2');
      } finally {
        await server.stop();
      }
      const got = downloads(first.records);
      assert.deepEqual(got.map((r) => r.model).sort(), ['other', 'simple'], 'each model was downloaded once');
      // simple: config + 1 version file; other: config + 2 version files
      assert.equal(got.reduce((n, r) => n + Number(r.files), 0), 5);

      const second = recordingLogger();
      const again = new Server({
        modelRepositories: [store.url(prefix)],
        modelCacheDir: cacheDir,
        logger: second.logger,
      });
      await again.start();
      try {
        const r = await again.infer(addSubRequest('simple'));
        assert.equal(r.outputs.length, 2);
      } finally {
        await again.stop();
      }
      assert.deepEqual(downloads(second.records), [], 'a restart with a warm cache downloads nothing');
      assert.ok(second.records.some((r) => r.msg === 'model found in the download cache'));
    });
  } finally {
    repo.cleanup();
    rmSync(cacheDir, { recursive: true, force: true });
  }
}

/**
 * Explicit mode lists the store without downloading: only the start-up model
 * and the one loaded later are copied; the index still names every model.
 */
export async function explicitModeDownloadsOnlyLoadedModels(store: CloudStore, prefix: string): Promise<void> {
  const repo = new TempRepository().addSub('first').addSub('second').addSub('never', [1, 2]);
  const cacheDir = mkdtempSync(path.join(tmpdir(), 'nereid-cache-'));
  try {
    await store.uploadDir(repo.dir, prefix);
    await withEnv(store.env, async () => {
      const log = recordingLogger();
      const server = new Server({
        modelRepositories: [store.url(prefix)],
        modelCacheDir: cacheDir,
        modelControlMode: 'explicit',
        loadModels: ['first'],
        logger: log.logger,
      });
      await server.start();
      try {
        assert.deepEqual(
          downloads(log.records).map((r) => r.model),
          ['first'],
          'only the start-up model is downloaded',
        );
        const index = new Map((await server.repositoryIndex()).map((e) => [e.name, e.state]));
        assert.deepEqual(
          [...index.keys()].sort(),
          ['first', 'never', 'second'],
          'the index lists every model of the store',
        );
        assert.equal(index.get('first'), 'READY');
        assert.notEqual(index.get('second'), 'READY');
        assert.equal((await server.infer(addSubRequest('first'))).outputs.length, 2);

        await server.loadModel('second');
        assert.deepEqual(
          downloads(log.records).map((r) => r.model),
          ['first', 'second'],
          'a load downloads that model alone',
        );
        const r = await server.infer(addSubRequest('second'));
        assert.deepEqual(Array.from(typedView(r.outputs[0]!) as Int32Array), a.map((x) => x + 3));

        // A reload of an unchanged model downloads nothing new; a model not in the store is Triton's error.
        await server.loadModel('first');
        assert.equal(downloads(log.records).filter((d) => d.model === 'first').length, 1);
        await assert.rejects(
          server.loadModel('absent'),
          /failed to load 'absent', failed to poll from model repository/,
        );
        assert.ok(!downloads(log.records).some((d) => d.model === 'never'), "'never' is never downloaded");
      } finally {
        await server.stop();
      }
    });
  } finally {
    repo.cleanup();
    rmSync(cacheDir, { recursive: true, force: true });
  }
}

export async function pollSeesChangedObjects(store: CloudStore, prefix: string): Promise<void> {
  const repo = new TempRepository().addSub('simple');
  const cacheDir = mkdtempSync(path.join(tmpdir(), 'nereid-cache-'));
  try {
    await store.uploadDir(repo.dir, prefix);
    const source = createModelSource(store.url(prefix), { cacheDir, env: store.env });
    const before = await source.fingerprint('simple');
    assert.equal(await source.fingerprint('simple'), before, 'unchanged objects keep the fingerprint');
    await withEnv(store.env, async () => {
      const log = recordingLogger();
      const server = new Server({
        modelRepositories: [store.url(prefix)],
        modelCacheDir: cacheDir,
        modelControlMode: 'poll',
        repositoryPollSecs: 1,
        logger: log.logger,
      });
      await server.start();
      try {
        assert.equal((await server.infer(addSubRequest('simple'))).modelVersion, '1');
        // A new version folder appears in the store; the poll must load it.
        await store.put(`${prefix}/simple/2/model.onnx`, buildAddSubModel('INT32', 16).toBytes());
        await source.listModelNames();
        assert.notEqual(await source.fingerprint('simple'), before, 'a new object changes the fingerprint');
        const deadline = Date.now() + 30_000;
        for (;;) {
          const r = await server.infer(addSubRequest('simple'));
          if (r.modelVersion === '2') break;
          if (Date.now() > deadline) assert.fail('poll mode did not load version 2 from the store');
          await new Promise((res) => setTimeout(res, 200));
        }
        const fetched = downloads(log.records).filter((r) => r.model === 'simple');
        assert.equal(fetched.length, 2);
        assert.equal(fetched[1]!.files, 1, 'only the new object is downloaded; the others are reused');
        assert.equal(fetched[1]!.reused, 2);
      } finally {
        await server.stop();
      }
    });
    await source.close();
  } finally {
    repo.cleanup();
    rmSync(cacheDir, { recursive: true, force: true });
  }
}

/** A failing cloud repository beside a good local one: the local models serve, the error names the URL. */
export async function failingRepositoryLeavesOthersServing(
  store: CloudStore,
  badUrl: string,
  cause: RegExp,
): Promise<void> {
  const local = new TempRepository().addSub('local_model');
  const cacheDir = mkdtempSync(path.join(tmpdir(), 'nereid-cache-'));
  try {
    await withEnv(store.env, async () => {
      const strict = new Server({ modelRepositories: [local.dir, badUrl], modelCacheDir: cacheDir });
      await assert.rejects(strict.start(), (err: Error) => {
        assert.ok(err.message.includes(badUrl), err.message);
        assert.match(err.message, cause);
        return true;
      });
      const server = new Server({
        modelRepositories: [local.dir, badUrl],
        modelCacheDir: cacheDir,
        exitOnError: false,
      });
      await server.start();
      try {
        assert.equal((await server.infer(addSubRequest('local_model'))).outputs.length, 2);
      } finally {
        await server.stop();
      }
    });
  } finally {
    local.cleanup();
    rmSync(cacheDir, { recursive: true, force: true });
  }
}

/** The error a source gives for a repository it cannot read. */
export async function sourceError(url: string, env: NodeJS.ProcessEnv): Promise<{ code: string; message: string }> {
  const cacheDir = mkdtempSync(path.join(tmpdir(), 'nereid-cache-'));
  const source = createModelSource(url, { env, cacheDir });
  try {
    await source.listModelNames();
  } catch (err) {
    return err as { code: string; message: string };
  } finally {
    await source.close();
    rmSync(cacheDir, { recursive: true, force: true });
  }
  assert.fail(`listing ${url} succeeded`);
}
