import { test } from 'node:test';
import assert from 'node:assert/strict';
import vm from 'node:vm';
import { MemoryReclaimer, fullCollection, memoryReducingCollection } from '../../src/frontends/memory-reclaim.js';

const MiB = 1024 * 1024;

function reclaimer(busy: () => boolean = () => false): { r: MemoryReclaimer; runs: () => number } {
  let n = 0;
  const r = new MemoryReclaimer({ thresholdBytes: 10 * MiB, quietMs: 1000, settleMs: 0, collect: () => n++, busy });
  return { r, runs: () => n };
}

test('bodies under the threshold never cause a collection', (t) => {
  t.mock.timers.enable({ apis: ['setTimeout', 'Date'] });
  const { r, runs } = reclaimer();
  r.note(9 * MiB);
  t.mock.timers.tick(60_000);
  assert.equal(runs(), 0);
});

test('a burst over the threshold is followed by one collection, once no body has come for the quiet time', (t) => {
  t.mock.timers.enable({ apis: ['setTimeout', 'Date'] });
  const { r, runs } = reclaimer();
  for (let i = 0; i < 20; i++) {
    r.note(MiB);
    t.mock.timers.tick(500); // bodies keep coming: the collection waits
  }
  assert.equal(runs(), 0);
  t.mock.timers.tick(1000);
  assert.equal(runs(), 1);
  t.mock.timers.tick(60_000);
  assert.equal(runs(), 1, 'one collection per burst');
  r.note(11 * MiB);
  t.mock.timers.tick(1000);
  assert.equal(runs(), 2, 'the count starts again after a collection');
});

test('a quiet time during which the event loop was busy (parsing what came) does not count', (t) => {
  t.mock.timers.enable({ apis: ['setTimeout', 'Date'] });
  let busy = true;
  const { r, runs } = reclaimer(() => busy);
  r.note(20 * MiB);
  t.mock.timers.tick(5000);
  assert.equal(runs(), 0);
  busy = false;
  t.mock.timers.tick(1000);
  assert.equal(runs(), 1);
});

test('a second collection follows the first once the server has stayed quiet for the settle time', (t) => {
  t.mock.timers.enable({ apis: ['setTimeout', 'Date'] });
  let n = 0;
  const r = new MemoryReclaimer({
    thresholdBytes: 10 * MiB,
    quietMs: 1000,
    settleMs: 6000,
    collect: () => n++,
    busy: () => false,
  });
  r.note(20 * MiB);
  t.mock.timers.tick(1000);
  assert.equal(n, 1);
  t.mock.timers.tick(5999);
  assert.equal(n, 1);
  t.mock.timers.tick(1);
  assert.equal(n, 2, 'the settle collection');
  t.mock.timers.tick(60_000);
  assert.equal(n, 2, 'no more without new bodies');
});

test('the second collection is skipped when a body or a busy loop came during the settle time', (t) => {
  t.mock.timers.enable({ apis: ['setTimeout', 'Date'] });
  let n = 0;
  let busy = false;
  const r = new MemoryReclaimer({
    thresholdBytes: 10 * MiB,
    quietMs: 1000,
    settleMs: 6000,
    collect: () => n++,
    busy: () => busy,
  });
  r.note(20 * MiB);
  t.mock.timers.tick(1000);
  assert.equal(n, 1);
  t.mock.timers.tick(3000);
  r.note(1024); // under the threshold: only marks traffic
  t.mock.timers.tick(3000); // the settle time after the first collection ends here
  assert.equal(n, 1, 'a body came: no settle collection');
  t.mock.timers.tick(60_000);
  assert.equal(n, 1);
  r.note(20 * MiB);
  t.mock.timers.tick(1000);
  assert.equal(n, 2);
  busy = true;
  t.mock.timers.tick(6000);
  assert.equal(n, 2, 'the loop was busy: no settle collection');
});

test('stop cancels a waiting collection', (t) => {
  t.mock.timers.enable({ apis: ['setTimeout', 'Date'] });
  const { r, runs } = reclaimer();
  r.note(20 * MiB);
  r.stop();
  t.mock.timers.tick(10_000);
  assert.equal(runs(), 0);
  let n = 0;
  const settling = new MemoryReclaimer({
    thresholdBytes: 10 * MiB,
    quietMs: 1000,
    settleMs: 6000,
    collect: () => n++,
    busy: () => false,
  });
  settling.note(20 * MiB);
  t.mock.timers.tick(1000);
  settling.stop();
  t.mock.timers.tick(10_000);
  assert.equal(n, 1, 'stop cancels the settle collection too');
});

test('the full collection frees unreachable buffers and leaves gc unexposed to new contexts', async () => {
  const collect = fullCollection();
  assert.equal(typeof collect, 'function');
  // A WeakRef's target is held until the current job ends, so the buffer is made,
  // and let go of, in a job of its own before the collection runs.
  const ref = ((): WeakRef<ArrayBuffer> => {
    const garbage = Buffer.alloc(64 * MiB, 1);
    assert.ok(garbage.byteLength === 64 * MiB && process.memoryUsage().arrayBuffers >= 64 * MiB);
    return new WeakRef(garbage.buffer);
  })();
  await new Promise((resolve) => setImmediate(resolve));
  const before = process.memoryUsage().arrayBuffers;
  collect!();
  assert.equal(ref.deref(), undefined, 'the buffer survived the collection');
  // V8 may free the backing store on a background thread after the collection
  // returns, so its accounting is read until it drops (bounded, not timed).
  let after = process.memoryUsage().arrayBuffers;
  for (let i = 0; i < 100 && before - after < 60 * MiB; i++) {
    await new Promise((resolve) => setTimeout(resolve, 20));
    after = process.memoryUsage().arrayBuffers;
  }
  assert.ok(before - after >= 60 * MiB, `arrayBuffers ${before} -> ${after}`);
  assert.equal(vm.runInNewContext('typeof gc'), 'undefined');
});

test('the second collection is the settle one when given apart from the first', (t) => {
  t.mock.timers.enable({ apis: ['setTimeout', 'Date'] });
  const runs: string[] = [];
  const r = new MemoryReclaimer({
    thresholdBytes: 10 * MiB,
    quietMs: 1000,
    settleMs: 6000,
    collect: () => runs.push('full'),
    settleCollect: () => runs.push('reducing'),
    busy: () => false,
  });
  r.note(11 * MiB);
  t.mock.timers.tick(1000);
  t.mock.timers.tick(6000);
  assert.deepEqual(runs, ['full', 'reducing']);
});

test('the memory-reducing collection runs on this engine and frees unreachable buffers', async () => {
  const collect = memoryReducingCollection();
  assert.equal(typeof collect, 'function');
  const ref = ((): WeakRef<ArrayBuffer> => new WeakRef(Buffer.alloc(8 * MiB, 1).buffer))();
  await new Promise((resolve) => setImmediate(resolve));
  collect!();
  assert.equal(ref.deref(), undefined, 'the buffer survived the collection');
  assert.equal(vm.runInNewContext('typeof gc'), 'undefined');
});
