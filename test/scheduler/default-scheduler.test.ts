import { test } from 'node:test';
import assert from 'node:assert/strict';
import type { BackendInstance, BackendRequest, BackendResponse } from '../../src/backends/backend.js';
import { ModelVersionStatistics } from '../../src/types/statistics.js';
import { DefaultScheduler } from '../../src/scheduler/default-scheduler.js';
import { ScheduledRequest } from '../../src/scheduler/scheduled-request.js';
import { ModelInstance } from '../../src/scheduler/scheduler.js';
import { Fifo } from '../../src/scheduler/fifo.js';
import { Errors } from '../../src/errors.js';

/** An instance that holds each execution until the test releases it. */
class GatedInstance implements BackendInstance {
  readonly seen: string[][] = [];
  private gates: Array<() => void> = [];
  constructor(private readonly fail = false) {}
  execute(requests: readonly BackendRequest[]): Promise<BackendResponse[]> {
    this.seen.push(requests.map((r) => r.id));
    return new Promise((resolve, reject) => {
      this.gates.push(() => (this.fail ? reject(new Error('boom')) : resolve(requests.map(() => ({ outputs: [] })))));
    });
  }
  releaseOne(): void {
    this.gates.shift()?.();
  }
  get waiting(): number {
    return this.gates.length;
  }
  async close(): Promise<void> {}
}

function request(id: string): BackendRequest {
  return { id, inputs: [], requestedOutputs: [], parameters: {}, batchSize: 1, correlationId: 0n, flags: 0 };
}

const tick = () => new Promise((r) => setImmediate(r));

test('fifo keeps order through growth and removal', () => {
  const q = new Fifo<number>(2);
  for (let i = 0; i < 10; i++) q.push(i);
  assert.equal(q.shift(), 0);
  assert.deepEqual(q.removeWhere((x) => x % 2 === 0), [2, 4, 6, 8]);
  assert.deepEqual([q.shift(), q.shift(), q.length], [1, 3, 3]);
});

test('requests run one at a time per instance, in arrival order, concurrently across instances', async () => {
  const a = new GatedInstance();
  const b = new GatedInstance();
  const stats = new ModelVersionStatistics('m', '1');
  const s = new DefaultScheduler('m', [new ModelInstance('a', a), new ModelInstance('b', b)], stats);
  const done: string[] = [];
  for (const id of ['r1', 'r2', 'r3', 'r4']) {
    s.enqueue(new ScheduledRequest(request(id), 0, 0, stats, () => done.push(id), undefined));
  }
  assert.equal(a.waiting + b.waiting, 2, 'both instances busy');
  assert.equal(s.pendingCount, 2);
  assert.equal(s.executingCount, 2);
  b.releaseOne();
  await tick();
  a.releaseOne();
  await tick();
  a.releaseOne();
  b.releaseOne();
  await tick();
  await s.drain();
  assert.equal(done.length, 4);
  assert.deepEqual([...a.seen, ...b.seen].flat().sort(), ['r1', 'r2', 'r3', 'r4']);
  // r3 went to the first instance that freed up (b), r4 to the next (a).
  assert.deepEqual(b.seen.flat(), ['r1', 'r3']);
  const json = stats.toJSON();
  assert.equal(json.inference_stats.success.count, 4);
  assert.equal(json.execution_count, 4);
  assert.equal(json.inference_count, 4);
  assert.equal(json.batch_stats[0]!.batch_size, 1);
  assert.equal(json.batch_stats[0]!.compute_infer.count, 4);
});

test('a failing execution fails its request as BACKEND and the next request still runs', async () => {
  const bad = new GatedInstance(true);
  const stats = new ModelVersionStatistics('m', '1');
  const s = new DefaultScheduler('m', [new ModelInstance('a', bad)], stats);
  const errors: string[] = [];
  s.enqueue(new ScheduledRequest(request('x'), 0, 0, stats, (_r, e) => e && errors.push(e.message), undefined));
  s.enqueue(new ScheduledRequest(request('y'), 0, 0, stats, (_r, e) => e && errors.push(e.message), undefined));
  bad.releaseOne();
  await tick();
  bad.releaseOne();
  await s.drain();
  assert.equal(errors.length, 2);
  assert.match(errors[0]!, /model 'm' failed: boom/);
  assert.equal(stats.failures.BACKEND, 2);
  assert.equal(stats.toJSON().inference_stats.fail.count, 2);
});

test('a request cancelled while queued is skipped', async () => {
  const inst = new GatedInstance();
  const stats = new ModelVersionStatistics('m', '1');
  const s = new DefaultScheduler('m', [new ModelInstance('a', inst)], stats);
  const results: string[] = [];
  s.enqueue(new ScheduledRequest(request('first'), 0, 0, stats, () => results.push('first'), undefined));
  const queued = new ScheduledRequest(
    request('second'),
    0,
    0,
    stats,
    (_r, e) => results.push(e ? `second:${e.code}` : 'second'),
    undefined,
  );
  s.enqueue(queued);
  queued.fail(Errors.cancelled('inference request'), 'CANCELED');
  inst.releaseOne();
  await s.drain();
  assert.deepEqual(results, ['second:NRD_CANCELLED', 'first']);
  assert.deepEqual(inst.seen, [['first']]);
  assert.equal(stats.failures.CANCELED, 1);
});

/** A gated instance that takes two executions at once, and reports a wait inside it. */
class DeepInstance extends GatedInstance {
  readonly scheduling = { maxInFlight: 2 };
}

test('an instance that takes two executions is given the next request ' +
  'while it runs one; starts stay in arrival order', async () => {
  const a = new DeepInstance();
  const b = new DeepInstance();
  const stats = new ModelVersionStatistics('m', '1');
  const s = new DefaultScheduler('m', [new ModelInstance('a', a), new ModelInstance('b', b)], stats);
  const done: string[] = [];
  for (const id of ['r1', 'r2', 'r3', 'r4', 'r5', 'r6']) {
    s.enqueue(new ScheduledRequest(request(id), 0, 0, stats, () => done.push(id), undefined));
  }
  // Idle instances first (one request each), then the second slot of each; the rest queue.
  assert.equal(a.waiting, 2);
  assert.equal(b.waiting, 2);
  assert.equal(s.executingCount, 4);
  assert.equal(s.pendingCount, 2);
  assert.deepEqual([...a.seen.flat(), ...b.seen.flat()].sort(), ['r1', 'r2', 'r3', 'r4']);
  a.releaseOne();
  await tick();
  // The freed slot takes the oldest queued request.
  assert.deepEqual(a.seen.flat().at(-1), 'r5');
  assert.equal(s.pendingCount, 1);
  while (a.waiting + b.waiting > 0) {
    a.releaseOne();
    b.releaseOne();
    await tick();
  }
  await s.drain();
  assert.deepEqual(done.sort(), ['r1', 'r2', 'r3', 'r4', 'r5', 'r6']);
  assert.equal(stats.toJSON().execution_count, 6);
});

test('a wait the backend reports inside an execution counts as queue time, not compute_input', async () => {
  const waitNs = 50_000_000;
  const instance: BackendInstance = {
    async execute(requests, timer) {
      const start = process.hrtime.bigint();
      // Inputs handed over 51 ms after the start, 50 ms of which were spent waiting for the framework.
      timer.waited(waitNs);
      timer.inputDone(start + 51_000_000n);
      timer.inferDone(start + 52_000_000n);
      return requests.map(() => ({ outputs: [] }));
    },
    async close() {},
  };
  const stats = new ModelVersionStatistics('m', '1');
  const s = new DefaultScheduler('m', [new ModelInstance('a', instance)], stats);
  const item = new ScheduledRequest(request('r1'), 0, 0, stats, () => {}, undefined);
  s.enqueue(item);
  await s.drain();
  const st = stats.toJSON().inference_stats;
  assert.equal(st.success.count, 1);
  assert.ok(st.queue.ns >= waitNs, `queue ${st.queue.ns} includes the 50 ms wait`);
  // compute_input is the 1 ms left, plus however long the process took to call execute().
  assert.ok(
    st.compute_input.ns >= 1_000_000 && st.compute_input.ns < waitNs,
    `compute_input ${st.compute_input.ns} excludes the wait`,
  );
  assert.equal(st.compute_infer.ns, 1_000_000);
});
