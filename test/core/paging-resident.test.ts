/**
 * The resident-memory check a load passes before it starts under a memory
 * budget (docs/paging.md#what-the-process-keeps): against this process's
 * real resident memory, with idle models that unloading does not shrink
 * (they hold nothing here), so only the check's own decisions are seen.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import path from 'node:path';
import type { ModelEntry } from '../../src/core/model-entry.js';
import type { LoadedModel, PreparedModel } from '../../src/core/model-loader.js';
import type { ModelVersion } from '../../src/core/model-version.js';
import { ModelPager } from '../../src/core/model-pager.js';
import { recordingLogger } from '../helpers/recording-logger.js';
import { TempRepository } from '../helpers/repository.js';

const MiB = 2 ** 20;

/** What the pager reads of a serving, idle model with no versions. */
function idleModel(name: string): ModelEntry {
  return {
    name,
    serving: true,
    busy: undefined,
    override: undefined,
    config: undefined,
    versions: new Map(),
    loadingDependencies: [],
    dependsOn: () => false,
  } as unknown as ModelEntry;
}

interface Check {
  untilResidentFits(bytes: number, protect: ReadonlySet<string>, deadline: number): Promise<void>;
}

function setup(budgetBytes: number) {
  const models = ['hot', 'warm', 'cold'].map(idleModel);
  const evicted: string[] = [];
  const { logger, records } = recordingLogger();
  const pager = new ModelPager(
    { budgetBytes },
    {
      entries: () => models.filter((m) => !evicted.includes(m.name)),
      evict: (e) => {
        evicted.push(e.name);
        return Promise.resolve();
      },
      logger,
    },
  );
  for (const [name, uses] of [['hot', 30], ['warm', 10], ['cold', 1]] as const) {
    for (let i = 0; i < uses; i++) pager.recordUse(name);
  }
  // The base is the process as it is now (as when the frontends start with no model loaded).
  pager.frontendsStarted(0);
  return { check: pager as unknown as Check, evicted, records, pager };
}

test('a load that fits in the resident memory starts at once and unloads nothing', async () => {
  const { check, evicted, records } = setup(512 * MiB);
  await check.untilResidentFits(16 * MiB, new Set(), Date.now() + 5000);
  assert.deepEqual(evicted, []);
  assert.equal(records.filter((r) => r.msg === 'resident memory checked before a load').length, 0);
});

test('a load the resident memory has no room for unloads idle models coldest first, then goes ahead', async () => {
  const { check, evicted, records, pager } = setup(64 * MiB);
  // More than the whole budget above the base: no unload makes room here (these models hold nothing), so each
  // idle model but the protected one goes, each after its memory was found not to come back, and the load starts.
  await check.untilResidentFits(128 * MiB, new Set(['hot']), Date.now() + 5000);
  assert.deepEqual(evicted, ['cold', 'warm']);
  assert.deepEqual([...pager.evictions], [
    ['cold', 1],
    ['warm', 1],
  ]);
  const checked = records.filter((r) => r.msg === 'resident memory checked before a load');
  assert.equal(checked.length, 1);
  assert.equal(checked[0]!.unloaded, 2);
  // Each unload's log line says which path chose it, the how-manyth for this load, at which request, and the
  // loaded models coldest first with their scores (docs/paging.md#which-model-goes).
  const unloads = records.filter((r) => r.msg === 'unloading the least frequently used idle model to make room');
  assert.deepEqual(
    unloads.map((r) => [r.model, r.stage, r.path, r.nth, r.request]),
    [
      ['cold', 'before', 'resident', 0, 41],
      ['warm', 'before', 'resident', 1, 41],
    ],
  );
  assert.equal(unloads[0]!.loaded, 'cold:1.00 warm:9.98');
  assert.equal(unloads[1]!.loaded, 'warm:9.98');
});

test('past the load wait the check lets the load start without unloading', async () => {
  const { check, evicted } = setup(64 * MiB);
  await check.untilResidentFits(128 * MiB, new Set(), Date.now() - 1);
  assert.deepEqual(evicted, []);
});

/** A model of `backend` with one version whose files are `files` bytes, as the pager reads a prepared model. */
function prepared(repo: TempRepository, name: string, backend: string, files: number): PreparedModel {
  repo.file(name, '1/model.bin', new Uint8Array(files));
  return {
    name,
    modelDir: path.join(repo.dir, name),
    config: { instanceGroup: [{ count: 1 }] },
    backend: { name: backend },
    selected: [1],
  } as unknown as PreparedModel;
}

/** A load that keeps `bytes` of written memory for as long as the test runs: the process grows by about as much. */
function loadHolding(name: string, bytes: number, kept: Buffer[]): () => Promise<LoadedModel> {
  return () => {
    kept.push(Buffer.alloc(bytes, 1));
    const version = {
      modelName: name,
      version: 1,
      state: 'READY',
      instances: [],
      touch: () => undefined,
      close: () => Promise.resolve(),
      setState: () => undefined,
    } as unknown as ModelVersion;
    return Promise.resolve({ versions: new Map([[1, version]]) } as unknown as LoadedModel);
  };
}

test("a backend's first load, which took its one-time costs, stands for a like-sized model only alone", async (t) => {
  const repo = new TempRepository();
  t.after(() => repo.cleanup());
  const { logger, records } = recordingLogger();
  const host = { entries: () => [], evict: () => Promise.resolve(), logger };
  const pager = new ModelPager({ budgetBytes: 4 * 2 ** 30 }, host);
  pager.frontendsStarted(0);
  const kept: Buffer[] = [];
  const load = async (name: string, backend: string, bytes: number) => {
    const model = prepared(repo, name, backend, MiB);
    await pager.load({ name } as ModelEntry, model, new Set(), loadHolding(name, bytes, kept));
    const measured = records.filter((r) => r.msg === 'model memory measured' && r.model === name);
    assert.equal(measured.length, 1);
    return measured[0]! as { bytes: number; likeSized: number };
  };
  // The first model of a backend holds its own 24 MiB and the backend's one-time costs (64 MiB here).
  const first = await load('first', 'onnxruntime', 88 * MiB);
  assert.equal(first.likeSized, 0);
  // Of its size only the first is known: it is what a model of that size may take.
  const second = await load('second', 'onnxruntime', 24 * MiB);
  assert.equal(second.likeSized, first.bytes);
  assert.ok(first.bytes > second.bytes + 32 * MiB, JSON.stringify({ first, second }));
  // Once another is known, the first's one-time costs are not asked for again by a model that does not carry them.
  const third = await load('third', 'onnxruntime', 24 * MiB);
  assert.equal(third.likeSized, second.bytes);
  // Another backend's first load is its own: its one-time costs, and another kind of model.
  const js = await load('js', 'javascript', 8 * MiB);
  assert.equal(js.likeSized, 0);
  const fourth = await load('fourth', 'onnxruntime', 24 * MiB);
  assert.equal(fourth.likeSized, Math.max(second.bytes, third.bytes));
});
