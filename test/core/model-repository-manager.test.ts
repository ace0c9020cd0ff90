import { test } from 'node:test';
import assert from 'node:assert/strict';
import { appendFileSync } from 'node:fs';
import path from 'node:path';
import { ModelRepositoryManager, type VersionStateChange } from '../../src/core/model-repository-manager.js';
import type { ModelDependency } from '../../src/core/model-dependencies.js';
import type { ModelConfig } from '../../src/gen/model_config_pb.js';
import { NereidError } from '../../src/errors.js';
import { silentLogger } from '../../src/logger.js';
import { Server } from '../../src/core/server.js';
import type { ModelControlMode } from '../../src/types/api.js';
import { TempRepository, int32Tensor } from '../helpers/repository.js';

const a = Array.from({ length: 16 }, (_, i) => i);

function request(model: string) {
  return { model, inputs: [int32Tensor('INPUT0', a), int32Tensor('INPUT1', a)] };
}

/** A test-only dependency notion: parameters { key: "depends_on" value: { string_value: "x,y:2" } }. */
function dependsOnParameter(config: ModelConfig): ModelDependency[] {
  const text = config.parameters['depends_on']?.stringValue ?? '';
  return text
    .split(',')
    .filter((s) => s !== '')
    .map((s) => {
      const [model, version] = s.split(':');
      return { model: model!, version: version === undefined ? -1 : Number(version) };
    });
}

function addSubConfig(name: string, extra = ''): string {
  return `name: "${name}"
platform: "onnxruntime_onnx"
max_batch_size: 8
input [ { name: "INPUT0" data_type: TYPE_INT32 dims: [ 16 ] }, { name: "INPUT1" data_type: TYPE_INT32 dims: [ 16 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_INT32 dims: [ 16 ] }, { name: "OUTPUT1" data_type: TYPE_INT32 dims: [ 16 ]
  } ]
instance_group [ { kind: KIND_CPU count: 1 } ]
${extra}`;
}

function dependsOn(list: string): string {
  return `parameters { key: "depends_on" value: { string_value: "${list}" } }\n`;
}

function manager(
  repo: TempRepository,
  mode: ModelControlMode,
  extra: Partial<ConstructorParameters<typeof ModelRepositoryManager>[0]> = {},
) {
  return new ModelRepositoryManager({
    repositories: [repo.dir],
    controlMode: mode,
    logger: silentLogger,
    pollSecs: 0,
    dependencies: dependsOnParameter,
    loader: {
      autoComplete: true,
      modelConfigName: undefined,
      backendConfig: {},
      gpuCount: 0,
      logger: silentLogger,
      server: { infer: () => Promise.reject(new Error('not used')) } as never,
    },
    ...extra,
  });
}

function states(m: ModelRepositoryManager, model: string): string[] {
  const e = m.entry(model);
  return e ? [...e.versions.values()].map((v) => `${v.version}:${v.state}${v.reason ? `(${v.reason})` : ''}`) : [];
}

async function rejects(p: Promise<unknown>, code: string, pattern: RegExp): Promise<void> {
  await assert.rejects(p, (err: unknown) => {
    assert.ok(err instanceof NereidError, String(err));
    assert.equal(err.code, code, err.message);
    assert.match(err.message, pattern);
    return true;
  });
}

test('state changes are announced in order: LOADING then READY ' +
  'on load, UNLOADING then UNAVAILABLE on unload', async (t) => {
  const repo = new TempRepository().addSub('m');
  t.after(() => repo.cleanup());
  const m = manager(repo, 'explicit');
  const seen: VersionStateChange[] = [];
  m.on('stateChange', (c) => seen.push(c));
  await m.start([]);
  t.after(() => m.stop(1000));
  await m.load('m');
  await m.unload('m');
  assert.deepEqual(
    seen.map((c) => `${c.model}/${c.version} ${c.previous}->${c.state}${c.reason ? ` (${c.reason})` : ''}`),
    ['m/1 LOADING->READY', 'm/1 READY->UNLOADING', 'm/1 UNLOADING->UNAVAILABLE (unloaded)'],
  );
});

test('explicit mode: loading a model loads its dependencies first; ' +
  'unloading a dependency takes the dependent down', async (t) => {
  const repo = new TempRepository()
    .addSub('top', [1], addSubConfig('top', dependsOn('mid')))
    .addSub('mid', [1], addSubConfig('mid', dependsOn('leaf')))
    .addSub('leaf')
    .addSub('other');
  t.after(() => repo.cleanup());
  const m = manager(repo, 'explicit');
  const order: string[] = [];
  m.on('versionReady', (v) => order.push(v.modelName));
  await m.start([]);
  t.after(() => m.stop(1000));

  await m.load('top');
  assert.deepEqual(order, ['leaf', 'mid', 'top'], 'dependencies become READY before their dependents');
  assert.deepEqual(states(m, 'other'), [], 'an unrelated model is not loaded');
  assert.equal(m.entry('top')!.explicit, true);
  assert.equal(m.entry('leaf')!.explicit, false, 'loaded only as a dependency');
  assert.deepEqual(m.dependentsOf('leaf').map((e) => e.name), ['mid']);

  // Unloading a dependency on purpose takes every model above it down, with Triton's 'unloaded'.
  await m.unload('leaf');
  assert.deepEqual(states(m, 'mid'), ['1:UNAVAILABLE(unloaded)']);
  assert.deepEqual(states(m, 'top'), ['1:UNAVAILABLE(unloaded)']);
  assert.equal(m.allReady(), true, 'models down because of an unload do not count against readiness');

  // Loading it again brings the dependents back.
  await m.load('leaf');
  assert.deepEqual(states(m, 'mid'), ['1:READY']);
  assert.deepEqual(states(m, 'top'), ['1:READY']);
});

test('unload_dependents unloads the dependencies loaded only for ' +
  'the model, and keeps those loaded on request', async (t) => {
  const repo = new TempRepository()
    .addSub('ens', [1], addSubConfig('ens', dependsOn('a,b')))
    .addSub('a')
    .addSub('b');
  t.after(() => repo.cleanup());
  const m = manager(repo, 'explicit');
  await m.start(['b']);
  t.after(() => m.stop(1000));
  await m.load('ens');
  await m.unload('ens');
  assert.deepEqual(states(m, 'a'), ['1:READY'], 'without unload_dependents the dependencies stay');
  await m.load('ens');
  await m.unload('ens', { unloadDependents: true });
  assert.deepEqual(states(m, 'a'), ['1:UNAVAILABLE(unloaded)'], 'loaded only for ens: unloaded with it');
  assert.deepEqual(states(m, 'b'), ['1:READY'], 'loaded on request: kept');
});

test('dependency errors use Triton texts: missing model, required version, circular dependency', async (t) => {
  const repo = new TempRepository()
    .addSub('needs_ghost', [1], addSubConfig('needs_ghost', dependsOn('ghost,a')))
    .addSub('needs_v2', [1], addSubConfig('needs_v2', dependsOn('a:2')))
    .addSub('c1', [1], addSubConfig('c1', dependsOn('c2')))
    .addSub('c2', [1], addSubConfig('c2', dependsOn('c1')))
    .addSub('a');
  t.after(() => repo.cleanup());
  const m = manager(repo, 'explicit');
  await m.start([]);
  t.after(() => m.stop(1000));
  await rejects(
    m.load('needs_ghost'),
    'NRD_LOAD_FAILED',
    new RegExp(
      String.raw`^load failed for model 'needs_ghost': ensemble needs_ghost contains models that are not available ` +
      String.raw`or ambiguous: ghost$`,
    ),
  );
  await rejects(
    m.load('needs_v2'),
    'NRD_LOAD_FAILED',
    /ensemble 'needs_v2' depends on 'a' whose required version 2 is not loaded\./,
  );
  await rejects(m.load('c1'), 'NRD_LOAD_FAILED', /circular dependency between ensembles: c1 -> \.\.\. -> c2 -> c1/);
  await m.load('a');
  assert.deepEqual(states(m, 'a'), ['1:READY'], 'other models keep loading');
});

test('none mode: a dependent whose dependency fails to load is UNAVAILABLE naming it', async (t) => {
  const repo = new TempRepository()
    .addSub('ens', [1], addSubConfig('ens', dependsOn('broken')))
    .addSub('broken')
    .file('broken', '1/model.onnx', 'not an onnx file')
    .addSub('fine');
  t.after(() => repo.cleanup());
  const m = manager(repo, 'none');
  const failures = await m.start();
  t.after(() => m.stop(1000));
  assert.equal(failures.length, 2);
  const index = await m.index();
  const ens = index.find((e) => e.name === 'ens')!;
  assert.equal(ens.state, 'UNAVAILABLE');
  assert.match(
    ens.reason!,
    /^ensemble 'ens' depends on 'broken' which has no loaded version\. Model 'broken' loading failed with error: /,
  );
  assert.deepEqual(states(m, 'fine'), ['1:READY']);
});

test('--model-load-thread-count bounds how many models build at once', async (t) => {
  const repo = new TempRepository();
  for (let i = 0; i < 6; i++) repo.addSub(`m${i}`);
  t.after(() => repo.cleanup());
  for (const limit of [1, 2]) {
    const m = manager(repo, 'none', { loadThreadCount: limit });
    let most = 0;
    // Count the work running inside the load slots.
    const original = m['slots'].run.bind(m['slots']);
    let active = 0;
    m['slots'].run = async <T>(fn: () => Promise<T>) =>
      original(async () => {
        active += 1;
        most = Math.max(most, active);
        try {
          return await fn();
        } finally {
          active -= 1;
        }
      });
    assert.deepEqual(await m.start(), []);
    await m.stop(1000);
    assert.ok(most <= limit, `at most ${limit} at once, saw ${most}`);
    assert.ok(most >= 1);
  }
  assert.throws(
    () => manager(repo, 'none', { loadThreadCount: 0 }),
    /--model-load-thread-count must be at least 1, got 0/,
  );
});

test('poll mode: a folder still being written is not loaded until it stays unchanged for a poll period', async (t) => {
  const repo = new TempRepository().addSub('first');
  t.after(() => repo.cleanup());
  const m = manager(repo, 'poll');
  await m.start();
  t.after(() => m.stop(1000));

  // A copy in progress: config first, the model file growing between polls.
  repo.config('late', addSubConfig('late'));
  repo.file('late', '1/model.onnx', '');
  await m.pollNow();
  assert.deepEqual(states(m, 'late'), [], 'first sight: waits for the files to settle');
  const full = new TempRepository().addSub('x');
  t.after(() => full.cleanup());
  const { readFileSync } = await import('node:fs');
  const bytes = readFileSync(path.join(full.dir, 'x', '1', 'model.onnx'));
  appendFileSync(path.join(repo.dir, 'late', '1', 'model.onnx'), bytes.subarray(0, 10));
  await m.pollNow();
  assert.deepEqual(states(m, 'late'), [], 'still changing: not loaded');
  appendFileSync(path.join(repo.dir, 'late', '1', 'model.onnx'), bytes.subarray(10));
  await m.pollNow();
  assert.deepEqual(states(m, 'late'), [], 'changed again: not loaded');
  await m.pollNow();
  assert.deepEqual(states(m, 'late'), ['1:READY'], 'unchanged over a poll period: loaded, whole');
});

test('poll mode keeps polling after a failed load and loads the model once it is fixed', async (t) => {
  const repo = new TempRepository().addSub('ok');
  t.after(() => repo.cleanup());
  const m = manager(repo, 'poll');
  await m.start();
  t.after(() => m.stop(1000));
  repo.addSub('bad').file('bad', '1/model.onnx', 'garbage');
  await m.pollNow();
  await m.pollNow();
  assert.equal(states(m, 'bad')[0]?.split('(')[0], '1:UNAVAILABLE');
  await m.pollNow();
  repo.addSub('bad');
  await m.pollNow();
  await m.pollNow();
  assert.deepEqual(states(m, 'bad'), ['1:READY']);
  assert.deepEqual(states(m, 'ok'), ['1:READY']);
});

test('poll mode swaps a changed model under a steady load of requests without a failed request', async (t) => {
  const repo = new TempRepository().addSub('m');
  t.after(() => repo.cleanup());
  const server = new Server({ modelRepositories: [repo.dir], modelControlMode: 'poll', repositoryPollSecs: 0 });
  await server.start();
  t.after(() => server.stop());
  let stop = false;
  let ok = 0;
  const failures: unknown[] = [];
  const versionsSeen = new Set<string>();
  const client = async () => {
    while (!stop) {
      try {
        const r = await server.infer(request('m'));
        versionsSeen.add(r.modelVersion);
        ok += 1;
      } catch (err) {
        failures.push(err);
      }
    }
  };
  const clients = Array.from({ length: 8 }, client);
  // Change the model twice: a new config (2 instances), then a new version folder.
  repo.addSub('m', [1], addSubConfig('m').replace('count: 1', 'count: 2'));
  await server.repository.pollNow();
  await server.repository.pollNow();
  assert.equal(server.modelConfig('m').instanceGroup[0]!.count, 2);
  repo.addSub('m', [1, 2], addSubConfig('m').replace('count: 1', 'count: 2'));
  await server.repository.pollNow();
  await server.repository.pollNow();
  const settle = ok;
  while (ok < settle + 20) await new Promise((r) => setImmediate(r));
  stop = true;
  await Promise.all(clients);
  assert.deepEqual(failures, []);
  assert.ok(versionsSeen.has('1') && versionsSeen.has('2'), `served ${[...versionsSeen].join(',')}`);
});

test('--model-load-retry-count: a version that fails once loads on ' +
  'the retry, and without retries stays UNAVAILABLE', async (t) => {
  const { PYTHON } = await import('../backends/python/helpers.js');
  const { mkdtempSync, readFileSync, rmSync } = await import('node:fs');
  const { tmpdir } = await import('node:os');
  const counters = mkdtempSync(path.join(tmpdir(), 'nereid-attempts-'));
  t.after(() => rmSync(counters, { recursive: true, force: true }));
  // Fails its first initialize, then succeeds; every attempt is counted in a file.
  const modelPy = (counter: string) => `import os
COUNTER = ${JSON.stringify(counter)}

class TritonPythonModel:
    def initialize(self, args):
        n = int(open(COUNTER).read()) if os.path.exists(COUNTER) else 0
        open(COUNTER, "w").write(str(n + 1))
        if n == 0:
            raise RuntimeError("first attempt fails on purpose")

    def execute(self, requests):
        return []
`;
  const cfg = (name: string) => `name: "${name}"
backend: "python"
max_batch_size: 0
input [ { name: "IN" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
instance_group [ { kind: KIND_CPU count: 1 } ]
`;
  for (const [retries, expected, attempts] of [
    [1, '1:READY', '2'],
    [0, '1:UNAVAILABLE', '1'],
  ] as const) {
    const counter = path.join(counters, `attempts_${retries}`);
    const repo = new TempRepository().config('flaky', cfg('flaky')).file('flaky', '1/model.py', modelPy(counter));
    t.after(() => repo.cleanup());
    const m = new ModelRepositoryManager({
      repositories: [repo.dir],
      controlMode: 'none',
      logger: silentLogger,
      loader: {
        autoComplete: true,
        modelConfigName: undefined,
        backendConfig: { python: { 'python-executable': PYTHON } },
        gpuCount: 0,
        logger: silentLogger,
        server: { infer: () => Promise.reject(new Error('not used')) } as never,
        retryCount: retries,
      },
    });
    await m.start();
    t.after(() => m.stop(1000));
    assert.equal(states(m, 'flaky')[0]!.split('(')[0], expected, `retry count ${retries}`);
    assert.equal(readFileSync(counter, 'utf8'), attempts);
  }
  const empty = new TempRepository();
  t.after(() => empty.cleanup());
  const base = manager(empty, 'none');
  assert.throws(
    () => manager(empty, 'none', { loader: { ...base['loader'], retryCount: -1 } }),
    /--model-load-retry-count must be 0 or more, got -1/,
  );
});

test('stop() during a load lets it finish, then closes what it built', async (t) => {
  const repo = new TempRepository().addSub('m');
  t.after(() => repo.cleanup());
  const m = manager(repo, 'explicit');
  await m.start([]);
  const built: import('../../src/core/model-version.js').ModelVersion[] = [];
  m.on('stateChange', (c) => {
    if (c.state === 'READY') built.push(c.source);
  });
  const loading = m.load('m');
  // The load reads the repository first (file system calls on libuv's pool, slow on a loaded
  // machine): wait for it to get under way however long that takes, without a fixed turn count.
  const deadline = Date.now() + 60_000;
  while (!m.entry('m')?.busy && Date.now() < deadline) await new Promise((r) => setImmediate(r));
  assert.ok(m.entry('m')!.busy, 'the load is under way');
  await m.stop(1000);
  await loading;
  assert.equal(built.length, 1);
  assert.equal(built[0]!.instances.length, 0, 'the version built during stop() is closed');
});
