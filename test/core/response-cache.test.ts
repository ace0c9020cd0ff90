/**
 * The response cache inside a served repository: hits answered without
 * reaching the scheduler, LRU eviction within --cache-config's size,
 * sequence requests bypassing it, and the statistics (HTTP JSON, gRPC) and
 * nv_cache_* metrics that report it.
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, mkdirSync } from 'node:fs';
import path from 'node:path';
import { Server } from '../../src/core/server.js';
import type { RunningServer } from '../../src/cli/serve.js';
import { typedView } from '../../src/tensor/tensor.js';
import { serveInProcess } from '../helpers/in-process-server.js';
import { TempRepository, int32Tensor } from '../helpers/repository.js';
import { call, json } from '../frontends/http/helpers.js';
import { startHarness, unary, type Harness } from '../frontends/grpc/helpers.js';
import { sample } from '../metrics/exposition.js';

const CONFIG = (name: string, cache: boolean) => `name: "${name}"
platform: "onnxruntime_onnx"
max_batch_size: 8
input [ { name: "INPUT0" data_type: TYPE_INT32 dims: [ 16 ] }, { name: "INPUT1" data_type: TYPE_INT32 dims: [ 16 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_INT32 dims: [ 16 ] }, { name: "OUTPUT1" data_type: TYPE_INT32 dims: [ 16 ]
  } ]
instance_group [ { kind: KIND_CPU count: 1 } ]
${cache ? 'response_cache { enable: true }' : ''}
`;

function body(a: number, id: string): string {
  return JSON.stringify({
    id,
    inputs: [
      { name: 'INPUT0', datatype: 'INT32', shape: [1, 16], data: new Array(16).fill(a) },
      { name: 'INPUT1', datatype: 'INT32', shape: [1, 16], data: new Array(16).fill(1) },
    ],
  });
}

interface Stats {
  execution_count: number;
  inference_count: number;
  inference_stats: Record<string, { count: number; ns: number }>;
}

describe('the response cache in a served repository', () => {
  let repo: TempRepository;
  let running: RunningServer;
  let grpc: Harness;
  const infer = (model: string, a: number, id = 'r') =>
    call(running.ports.http!, 'POST', `/v2/models/${model}/infer`, { body: body(a, id) });
  const stats = async (model: string): Promise<Stats> =>
    (json(await call(running.ports.http!, 'GET', `/v2/models/${model}/stats`)) as { model_stats: Stats[] })
      .model_stats[0]!;

  before(async () => {
    repo = new TempRepository()
      .addSub('cached', [1], CONFIG('cached', true))
      .addSub('plain', [1], CONFIG('plain', false));
    // Two entries of this model fit, a third evicts the least recently used.
    running = await serveInProcess(repo.dir, ['--cache-config=local,size=1400']);
    grpc = await startHarness(running.server);
  });
  after(async () => {
    await grpc.close();
    await running.shutdown();
    repo.cleanup();
  });

  test('a hit answers the request without running the model; statistics count hits and misses', async () => {
    const first = await infer('cached', 5, 'one');
    assert.equal(first.status, 200);
    const hit = await infer('cached', 5, 'two');
    assert.equal(hit.status, 200);
    const doc = json(hit) as { id: string; outputs: Array<{ name: string; data: number[] }> };
    assert.equal(doc.id, 'two', 'a hit carries its own request id');
    assert.deepEqual(doc.outputs.find((o) => o.name === 'OUTPUT0')!.data, new Array(16).fill(6));
    assert.deepEqual(doc.outputs.find((o) => o.name === 'OUTPUT1')!.data, new Array(16).fill(4));
    const s = await stats('cached');
    assert.equal(s.execution_count, 1, 'the hit never reached the scheduler');
    assert.equal(s.inference_count, 1);
    assert.equal(s.inference_stats['success']!.count, 2);
    assert.equal(s.inference_stats['cache_hit']!.count, 1);
    assert.ok(s.inference_stats['cache_hit']!.ns > 0);
    assert.equal(s.inference_stats['cache_miss']!.count, 1);
    assert.ok(s.inference_stats['cache_miss']!.ns > 0);
    assert.equal(s.inference_stats['compute_infer']!.count, 1);

    const g = await unary<{
      modelStats: Array<{ inferenceStats: { cacheHit: { count: bigint }; cacheMiss: { count: bigint } } }>;
    }>(grpc.client, 'ModelStatistics', { name: 'cached', version: '' });
    assert.equal(Number(g.modelStats[0]!.inferenceStats.cacheHit.count), 1);
    assert.equal(Number(g.modelStats[0]!.inferenceStats.cacheMiss.count), 1);
  });

  test('least recently used entries are evicted within the size', async () => {
    const before = (await stats('cached')).execution_count;
    await infer('cached', 7); // miss: {5, 7}
    await infer('cached', 5); // hit, 5 is now the most recent
    await infer('cached', 9); // miss: evicts 7 -> {5, 9}
    await infer('cached', 5); // hit
    await infer('cached', 7); // miss again
    const s = await stats('cached');
    assert.equal(s.execution_count - before, 3);
    assert.equal(s.inference_stats['cache_hit']!.count, 3);
    assert.equal(running.server.responseCache!.entryCount, 2);
    assert.equal(running.server.responseCache!.counters.evictions, 2);
  });

  test('models without response_cache and requests of a sequence are never cached', async () => {
    await infer('plain', 1);
    await infer('plain', 1);
    const p = await stats('plain');
    assert.equal(p.execution_count, 2);
    assert.equal(p.inference_stats['cache_hit']!.count, 0);
    assert.equal(p.inference_stats['cache_miss']!.count, 0);

    const before = await stats('cached');
    const seq = { sequence_id: 42 };
    for (let i = 0; i < 2; i++) {
      await running.server.infer({
        model: 'cached',
        inputs: [int32Tensor('INPUT0', new Array(16).fill(5)), int32Tensor('INPUT1', new Array(16).fill(1))],
        parameters: seq,
      });
    }
    const after = await stats('cached');
    assert.equal(after.execution_count - before.execution_count, 2);
    assert.equal(after.inference_stats['cache_hit']!.count, before.inference_stats['cache_hit']!.count);
  });

  test('the in-process API hits the same cache; outputs are the cached bytes', async () => {
    const r = await running.server.infer({
      model: 'cached',
      id: 'inproc',
      inputs: [int32Tensor('INPUT0', new Array(16).fill(5)), int32Tensor('INPUT1', new Array(16).fill(1))],
      outputs: [{ name: 'OUTPUT1' }],
    });
    assert.equal(r.outputs.length, 1);
    assert.deepEqual([...typedView(r.outputs[0]!)], new Array(16).fill(4));
  });

  test('nv_cache_* metrics: per model for cached models only, and the cache-wide gauges', async () => {
    const text = (await call(running.ports.metrics!, 'GET', '/metrics')).body.toString();
    const labels = { model: 'cached', version: '1' };
    const s = await stats('cached');
    assert.equal(sample(text, 'nv_cache_num_hits_per_model', labels), s.inference_stats['cache_hit']!.count);
    assert.equal(sample(text, 'nv_cache_num_misses_per_model', labels), s.inference_stats['cache_miss']!.count);
    assert.ok(sample(text, 'nv_cache_hit_duration_per_model', labels)! >= 0);
    assert.ok(sample(text, 'nv_cache_miss_duration_per_model', labels)! >= 0);
    assert.throws(() => sample(text, 'nv_cache_num_hits_per_model', { model: 'plain', version: '1' }), /found 0/);
    const c = running.server.responseCache!.counters;
    assert.equal(sample(text, 'nv_cache_num_entries', {}), running.server.responseCache!.entryCount);
    assert.equal(sample(text, 'nv_cache_num_evictions', {}), c.evictions);
    assert.ok(c.evictions >= 2);
    assert.equal(sample(text, 'nv_cache_num_hits', {}), c.hits);
    assert.equal(sample(text, 'nv_cache_num_misses', {}), c.misses);
    assert.equal(sample(text, 'nv_cache_num_lookups', {}), c.hits + c.misses);
    const util = sample(text, 'nv_cache_util', {})!;
    assert.ok(util > 0.5 && util <= 1, `utilization ${util}`);
    assert.ok(sample(text, 'nv_cache_lookup_duration', {})! >= 0);
    assert.ok(sample(text, 'nv_cache_insertion_duration', {})! >= 0);
    // success counts hits, inference_count does not
    assert.equal(sample(text, 'nv_inference_request_success', labels), s.inference_stats['success']!.count);
    assert.equal(sample(text, 'nv_inference_count', labels), s.inference_count);
  });
});

test('an ensemble and its steps may cache: a repeated ensemble request is a ' +
  'hit at the ensemble, a repeated step input a hit at the step', async (t) => {
  const repo = new TempRepository().addSub('step', [1], CONFIG('step', true));
  const io = (n: string) => `{ name: "${n}" data_type: TYPE_INT32 dims: [ 16 ] }`;
  repo.config(
    'pipeline',
    `name: "pipeline"
platform: "ensemble"
max_batch_size: 8
input [ ${io('A')}, ${io('B')} ]
output [ ${io('SUM')}, ${io('DIFF')} ]
ensemble_scheduling { step [ { model_name: "step" model_version: -1 input_map { key: "INPUT0" value: "A" }
  input_map { key: "INPUT1" value: "B" } output_map { key: "OUTPUT0" value: "SUM" }
    output_map { key: "OUTPUT1" value: "DIFF" } } ] }
response_cache { enable: true }
`,
  );
  mkdirSync(`${repo.dir}/pipeline/1`, { recursive: true });
  t.after(() => repo.cleanup());
  const server = new Server({ modelRepositories: [repo.dir], cacheConfig: { local: { size: String(1 << 20) } } });
  await server.start();
  t.after(() => server.stop());
  const a = new Array(16).fill(3);
  const b = new Array(16).fill(1);
  const viaEnsemble = () => server.infer({ model: 'pipeline', inputs: [int32Tensor('A', a), int32Tensor('B', b)] });
  const first = await viaEnsemble();
  assert.deepEqual([...typedView(first.outputs.find((o) => o.name === 'SUM')!)], new Array(16).fill(4));
  const again = await viaEnsemble();
  assert.deepEqual([...typedView(again.outputs.find((o) => o.name === 'DIFF')!)], new Array(16).fill(2));
  const [ens] = server.modelStatistics('pipeline');
  assert.equal(ens!.inference_stats.cache_hit.count, 1);
  assert.equal(ens!.inference_stats.cache_miss.count, 1);
  // The step saw one request (the ensemble's hit never reached it), then a direct call with the same inputs hits the
  // step's cache.
  await server.infer({ model: 'step', inputs: [int32Tensor('INPUT0', a), int32Tensor('INPUT1', b)] });
  const [step] = server.modelStatistics('step');
  assert.equal(step!.execution_count, 1);
  assert.equal(step!.inference_stats.cache_miss.count, 1);
  assert.equal(step!.inference_stats.cache_hit.count, 1);
});

test('replayCacheHit: true for the version and entry that answered, false for ' +
  'another version, an entry stored anew, or no ticket of ours', async (t) => {
  const repo = new TempRepository().addSub(
    'cached',
    [1, 2],
    CONFIG('cached', true).replace('instance_group', 'version_policy: { all: {} }\ninstance_group'),
  );
  t.after(() => repo.cleanup());
  // Room for two entries of this model.
  const server = new Server({ modelRepositories: [repo.dir], cacheConfig: { local: { size: '1400' } } });
  await server.start();
  t.after(() => server.stop());
  const request = (a: number, version?: string) => ({
    model: 'cached',
    version,
    inputs: [int32Tensor('INPUT0', new Array(16).fill(a)), int32Tensor('INPUT1', new Array(16).fill(1))],
  });
  assert.equal((await server.infer(request(1, '1'))).cacheHit, undefined, 'a miss has no ticket');
  const ticket = (await server.infer(request(1, '1'))).cacheHit!;
  assert.equal(ticket.kind, 'cache-hit');
  assert.ok(ticket.heldBytes > 16 * 4 * 2, 'it holds the key, which holds the input bytes');
  const [before] = server.modelStatistics('cached', '1');
  const lookups = server.responseCache!.counters.lookups;
  assert.equal(server.replayCacheHit(ticket, 'cached', '1'), true);
  const [after] = server.modelStatistics('cached', '1');
  assert.equal(after!.inference_stats.cache_hit.count - before!.inference_stats.cache_hit.count, 1);
  assert.equal(after!.inference_stats.success.count - before!.inference_stats.success.count, 1);
  assert.equal(server.responseCache!.counters.lookups - lookups, 1);

  assert.equal(server.replayCacheHit(ticket, 'cached', '2'), false, 'version 2 answers that URL');
  assert.equal(server.replayCacheHit(ticket, 'cached'), false, 'the highest version answers a request without one');
  assert.equal(server.replayCacheHit(ticket, 'other'), false);
  assert.equal(server.replayCacheHit({ kind: 'cache-hit', heldBytes: 0 }, 'cached', '1'), false);
  assert.equal(server.responseCache!.counters.lookups - lookups, 1, 'a refused replay counts nothing');

  // Evicted, then stored again by the next miss: the old ticket names an entry that is gone.
  await server.infer(request(2, '1'));
  await server.infer(request(3, '1'));
  assert.equal((await server.infer(request(1, '1'))).cacheHit, undefined, 'evicted');
  assert.equal(server.replayCacheHit(ticket, 'cached', '1'), false);
  const fresh = (await server.infer(request(1, '1'))).cacheHit!;
  assert.equal(server.replayCacheHit(fresh, 'cached', '1'), true);
});

describe('the response cache across a reload', () => {
  // OUT = IN * FACTOR; an input of 99 holds its execute for a while, so the old
  // version is still draining when the reloaded one starts answering.
  // The model writes the marker file once it holds the slow request, so the test reloads only then.
  const source = (factor: number) => `
import { writeFileSync } from 'node:fs';
export default class {
  async execute(requests) {
    if (requests.some((r) => r.inputs[0].data[0] === 99)) {
      writeFileSync(${JSON.stringify(marker)}, '');
      await new Promise((r) => setTimeout(r, 1500));
    }
    return requests.map((r) => ({
      outputs: [
        { name: 'OUT', datatype: 'INT32', shape: r.inputs[0].shape, data: r.inputs[0].data.map((v) => v * ${factor}) },
      ],
    }));
  }
}
`;
  const config = `name: "m"
backend: "javascript"
max_batch_size: 0
input [ { name: "IN" data_type: TYPE_INT32 dims: [ 2 ] } ]
output [ { name: "OUT" data_type: TYPE_INT32 dims: [ 2 ] } ]
instance_group [ { kind: KIND_CPU count: 1 } ]
response_cache { enable: true }
`;
  let repo: TempRepository;
  let running: RunningServer;
  let marker = '';
  const infer = (a: number) =>
    call(running.ports.http!, 'POST', '/v2/models/m/infer', {
      body: JSON.stringify({ inputs: [{ name: 'IN', datatype: 'INT32', shape: [2], data: [a, a] }] }),
    });
  const out = (reply: Awaited<ReturnType<typeof infer>>) => {
    assert.equal(reply.status, 200, reply.body.toString());
    return (json(reply) as { outputs: Array<{ data: number[] }> }).outputs[0]!.data;
  };

  before(async () => {
    repo = new TempRepository();
    marker = path.join(repo.dir, 'slow-request-taken');
    repo.config('m', config);
    repo.file('m', '1/model.mjs', source(10));
    running = await serveInProcess(repo.dir, [
      '--model-control-mode=explicit',
      '--load-model=m',
      '--cache-config=local,size=65536',
    ]);
  });
  after(async () => {
    await running.shutdown();
    repo.cleanup();
  });

  test("a reloaded version never answers from the entries the " +
    "old one stored, even while the old one drains", async () => {
    assert.deepEqual(out(await infer(1)), [10, 10]);
    assert.deepEqual(out(await infer(1)), [10, 10], 'a hit on the first version');
    const slow = infer(99);
    for (let i = 0; i < 3000 && !existsSync(marker); i++) await new Promise((r) => setTimeout(r, 10));
    assert.ok(existsSync(marker), 'the old version took the slow request');
    repo.file('m', '1/model.mjs', source(20));
    const load = await call(running.ports.http!, 'POST', '/v2/repository/models/m/load', { body: '{}' });
    assert.equal(load.status, 200, load.body.toString());
    assert.deepEqual(out(await infer(1)), [20, 20], 'the reloaded version runs the request itself');
    assert.deepEqual(out(await infer(1)), [20, 20], 'and then hits its own entry');
    assert.deepEqual(out(await slow), [990, 990], 'the request in flight finished on the old version');
    assert.deepEqual(
      out(await infer(99)),
      [1980, 1980],
      "what the old version stored while draining is not the new one's answer",
    );
    assert.deepEqual(out(await infer(1)), [20, 20]);
  });
});
