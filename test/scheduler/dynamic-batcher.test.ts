import { test } from 'node:test';
import assert from 'node:assert/strict';
import { Harness, policy, request, tensor, tick, until } from './batching-fixtures.js';
import { SPREAD_MIN_REQUESTS } from '../../src/scheduler/dynamic-batcher.js';

const LONG_DELAY = 60_000_000n; // 60 s: never reached in a test; batches leave on size alone

test('sends the largest reachable preferred batch size at once', async () => {
  const h = new Harness({ preferredBatchSize: [2, 4], maxQueueDelayMicroseconds: LONG_DELAY });
  const [inst] = h.instances;
  h.submit(request('big', 4)); // a preferred size on its own: goes at once
  for (let i = 1; i <= 6; i++) h.submit(request(`r${i}`));
  assert.deepEqual(inst!.batches, [['big']]);
  assert.equal(h.batcher.pendingCount, 6);
  inst!.finishOne();
  await inst!.untilBatches(2);
  assert.deepEqual(inst!.batches[1], ['r1', 'r2', 'r3', 'r4']);
  inst!.finishOne();
  await inst!.untilBatches(3);
  assert.deepEqual(inst!.batches[2], ['r5', 'r6']);
  inst!.finishOne();
  await h.batcher.drain();
  assert.equal(h.stats.executionCount, 3);
  assert.equal(h.stats.inferenceCount, 10);
});

test('with a queue delay a batch below a preferred size waits, and arrivals complete it', async () => {
  const h = new Harness({ preferredBatchSize: [3], maxQueueDelayMicroseconds: LONG_DELAY });
  const [inst] = h.instances;
  h.submit(request('a'));
  h.submit(request('b'));
  await tick();
  assert.equal(inst!.batches.length, 0, 'waits for the delay or a preferred size');
  h.submit(request('c'));
  assert.deepEqual(inst!.batches, [['a', 'b', 'c']]);
  inst!.finishOne();
  await h.batcher.drain();
});

test('without a queue delay whatever is queued goes, up to max_batch_size', async () => {
  const h = new Harness({}, { maxBatchSize: 4 });
  const [inst] = h.instances;
  h.submit(request('r0')); // runs alone: nothing else queued
  for (let i = 1; i <= 6; i++) h.submit(request(`r${i}`));
  inst!.finishOne();
  await inst!.untilBatches(2);
  assert.deepEqual(inst!.batches[1], ['r1', 'r2', 'r3', 'r4']);
  inst!.finishOne();
  await inst!.untilBatches(3);
  assert.deepEqual(inst!.batches[2], ['r5', 'r6']);
  inst!.finishOne();
  await h.batcher.drain();
  assert.deepEqual(inst!.batches[0], ['r0']);
});

test('a queue delay sends a partial batch once the oldest request has waited it (sub-millisecond)', async () => {
  const h = new Harness({ preferredBatchSize: [8], maxQueueDelayMicroseconds: 300n });
  const [inst] = h.instances;
  h.submit(request('a'));
  h.submit(request('b'));
  await inst!.untilBatches(1);
  // Neither request reaches the preferred size 8: the batch leaves only on the delay.
  const obtained = h.batcher.obtainedDelay;
  assert.ok(obtained.count >= 1);
  assert.ok(obtained.maxNs >= 300_000, `left after ${obtained.maxNs} ns, before the configured 300 µs`);
  inst!.finishOne();
  if (inst!.batches.flat().length < 2) {
    // A loaded machine may let the delay expire between the two submits.
    await inst!.untilBatches(2);
    inst!.finishOne();
  }
  await h.batcher.drain();
  assert.deepEqual(inst!.batches.flat(), ['a', 'b']);
});

test('requests with a batch dimension above 1 count their full size', async () => {
  const h = new Harness({}, { maxBatchSize: 8 });
  const [inst] = h.instances;
  h.submit(request('r0', 2));
  h.submit(request('r1', 3));
  h.submit(request('r2', 3));
  h.submit(request('r3', 3));
  inst!.finishOne();
  await inst!.untilBatches(2);
  assert.deepEqual(inst!.batches[1], ['r1', 'r2'], '3 + 3 fits in 8, a third 3 does not');
  inst!.finishOne();
  await inst!.untilBatches(3);
  inst!.finishOne();
  await h.batcher.drain();
  assert.deepEqual(inst!.batches[2], ['r3']);
  const json = h.stats.toJSON();
  assert.equal(json.inference_count, 11);
  assert.equal(json.execution_count, 3);
  assert.deepEqual(
    json.batch_stats.map((b) => b.batch_size),
    [2, 3, 6],
  );
});

test('requests whose non-batch shapes differ are never merged', async () => {
  const h = new Harness({});
  const [inst] = h.instances;
  h.submit(request('busy'));
  h.submit(request('a', 1, [4]));
  h.submit(request('b', 1, [4]));
  h.submit(request('c', 1, [5]));
  h.submit(request('d', 1, [4]));
  for (let n = 2; n <= 4; n++) {
    inst!.finishOne();
    await inst!.untilBatches(n);
  }
  inst!.finishOne();
  await h.batcher.drain();
  assert.deepEqual(inst!.batches.slice(1), [['a', 'b'], ['c'], ['d']]);
});

test('ragged inputs merge despite different shapes', async () => {
  const h = new Harness({}, { ragged: ['INPUT0'] });
  const [inst] = h.instances;
  h.submit(request('busy'));
  h.submit(request('a', 1, [4]));
  h.submit(request('b', 1, [5]));
  h.submit(request('c', 1, [6]));
  inst!.finishOne();
  await inst!.untilBatches(2);
  inst!.finishOne();
  await h.batcher.drain();
  assert.deepEqual(inst!.batches[1], ['a', 'b', 'c']);
});

test('requests with different sets of inputs are never merged', async () => {
  const h = new Harness({});
  const [inst] = h.instances;
  h.submit(request('busy'));
  h.submit(request('a'));
  h.submit(request('b', 1, [4], [tensor('OPTIONAL', [1, 2])]));
  h.submit(request('c', 1, [4], [tensor('OPTIONAL', [1, 2])]));
  for (let n = 2; n <= 3; n++) {
    inst!.finishOne();
    await inst!.untilBatches(n);
  }
  inst!.finishOne();
  await h.batcher.drain();
  assert.deepEqual(inst!.batches.slice(1), [['a'], ['b', 'c']]);
});

test('batches go to whichever instance is free', async () => {
  const h = new Harness({}, { maxBatchSize: 2, instances: 2 });
  const [x, y] = h.instances;
  h.submit(request('r1'));
  h.submit(request('r2'));
  assert.equal(x!.running + y!.running, 2);
  h.submit(request('r3'));
  h.submit(request('r4'));
  y!.finishOne();
  await y!.untilBatches(2);
  assert.deepEqual(y!.batches[1], ['r3', 'r4']);
  x!.finishOne();
  y!.finishOne();
  await h.batcher.drain();
  assert.equal(x!.batches.length, 1);
});

test('preserve_ordering releases responses in request order across instances', async () => {
  for (const preserve of [true, false]) {
    const h = new Harness({ preserveOrdering: preserve }, { maxBatchSize: 1, instances: 2 });
    const [x, y] = h.instances;
    h.submit(request('first'));
    h.submit(request('second'));
    assert.deepEqual([x!.batches, y!.batches], [[['first']], [['second']]]);
    y!.finishOne();
    await tick();
    await tick();
    assert.deepEqual(h.order, preserve ? [] : ['second'], `preserve_ordering=${preserve}`);
    x!.finishOne();
    await h.batcher.drain();
    assert.deepEqual(h.order, preserve ? ['first', 'second'] : ['second', 'first']);
    assert.equal(h.stats.success.count, 2);
    assert.equal(h.stats.executionCount, 2);
  }
});

test('lower priority levels are served first, FIFO within a ' +
  'level; 0 or out of range means the default level', async () => {
  const h = new Harness({ priorityLevels: 2n, defaultPriorityLevel: 2n }, { maxBatchSize: 1 });
  const [inst] = h.instances;
  h.submit(request('busy'));
  h.submit(request('p2a'), { priority: 2 });
  h.submit(request('p2b'), { priority: 2 });
  h.submit(request('p1'), { priority: 1 });
  h.submit(request('p0'), { priority: 0 });
  h.submit(request('p9'), { priority: 9 });
  h.submit(request('p1b'), { priority: 1 });
  for (let n = 2; n <= 7; n++) {
    inst!.finishOne();
    await inst!.untilBatches(n);
  }
  inst!.finishOne();
  await h.batcher.drain();
  assert.deepEqual(inst!.batches.flat(), ['busy', 'p1', 'p1b', 'p2a', 'p2b', 'p0', 'p9']);
});

test('a full level rejects at once with Triton\'s message, counted as REJECTED', async () => {
  const h = new Harness(
    {
      priorityLevels: 2n,
      defaultPriorityLevel: 2n,
      priorityQueuePolicy: { '1': policy({ maxQueueSize: 1 }) },
    },
    { maxBatchSize: 1 },
  );
  const [inst] = h.instances;
  h.submit(request('busy'));
  h.submit(request('a'), { priority: 1 });
  h.submit(request('b'), { priority: 1 });
  h.submit(request('c'), { priority: 2 });
  h.submit(request('d'), { priority: 2 });
  const b = await h.outcome('b');
  assert.equal(b.error?.code, 'NRD_QUEUE_FULL');
  assert.equal(b.error?.errorClass, 'UNAVAILABLE');
  assert.equal(b.error?.httpStatus, 503);
  assert.equal(b.error?.message, '[request id: b] Exceeds maximum queue size');
  assert.equal(h.stats.failures.REJECTED, 1);
  assert.equal(h.batcher.pendingCount, 3, 'level 2 has the default (unbounded) policy');
  for (let n = 2; n <= 4; n++) {
    inst!.finishOne();
    await inst!.untilBatches(n);
  }
  inst!.finishOne();
  await h.batcher.drain();
  assert.deepEqual(inst!.batches.flat(), ['busy', 'a', 'c', 'd']);
});

test('a request that times out in the queue is rejected with UNAVAILABLE "Request timeout expired"', async () => {
  // 'busy' sits in a level without a timeout, so that a slow machine cannot expire it before it starts.
  const h = new Harness(
    { priorityLevels: 2n, defaultPriorityLevel: 1n, priorityQueuePolicy: { '2': policy({ timeoutUs: 1000 }) } },
    { maxBatchSize: 1 },
  );
  const [inst] = h.instances;
  h.submit(request('busy'));
  h.submit(request('late'), { priority: 2 });
  const late = await h.outcome('late'); // the instance stays busy: only the timeout can answer it
  assert.equal(late.error?.message, 'Request timeout expired');
  assert.equal(late.error?.errorClass, 'UNAVAILABLE');
  assert.equal(h.stats.failures.REJECTED, 1);
  assert.equal(h.batcher.pendingCount, 0);
  inst!.finishOne();
  await h.batcher.drain();
  assert.deepEqual(inst!.batches, [['busy']]);
  assert.equal(h.stats.fail.count, 1);
  assert.equal(h.stats.success.count, 1);
});

test('a request timeout is honoured only when overriding is allowed and it is shorter than the default', async () => {
  const h = new Harness(
    {
      priorityLevels: 3n,
      defaultPriorityLevel: 1n,
      priorityQueuePolicy: {
        '1': policy({ timeoutUs: 60_000_000, allowOverride: true }),
        '2': policy({ timeoutUs: 60_000_000, allowOverride: false }),
        '3': policy({ timeoutUs: 0, allowOverride: true }),
      },
    },
    { maxBatchSize: 1 },
  );
  const [inst] = h.instances;
  h.submit(request('busy'));
  const overridden = h.submit(request('short'), { priority: 1, timeoutUs: 1000 });
  const notAllowed = h.submit(request('not-allowed'), { priority: 2, timeoutUs: 1000 });
  const noDefault = h.submit(request('no-default'), { priority: 3, timeoutUs: 1000 });
  const longer = h.submit(request('longer'), { priority: 1, timeoutUs: 120_000_000 });
  assert.equal(overridden.deadlineNs - overridden.enqueueNs, 1_000_000n);
  assert.equal(notAllowed.deadlineNs - notAllowed.enqueueNs, 60_000_000_000n);
  assert.equal(noDefault.deadlineNs, 0n, 'a zero default cannot be overridden');
  assert.equal(longer.deadlineNs - longer.enqueueNs, 60_000_000_000n, 'a request timeout can only shorten');
  const short = await h.outcome('short');
  assert.equal(short.error?.message, 'Request timeout expired');
  for (let n = 2; n <= 4; n++) {
    inst!.finishOne();
    await inst!.untilBatches(n);
  }
  inst!.finishOne();
  await h.batcher.drain();
  assert.deepEqual(inst!.batches.flat(), ['busy', 'longer', 'not-allowed', 'no-default']);
});

test('DELAY moves an expired request behind the unexpired ones of its level', async () => {
  const h = new Harness(
    { defaultQueuePolicy: policy({ action: 'DELAY', timeoutUs: 60_000_000, allowOverride: true }) },
    { maxBatchSize: 1 },
  );
  const [inst] = h.instances;
  h.submit(request('busy'));
  const expiring = h.submit(request('expiring'), { timeoutUs: 1000 });
  h.submit(request('fresh1'));
  h.submit(request('fresh2'));
  await until(expiring.deadlineNs);
  await tick();
  assert.equal(h.outcomes.length, 0, 'DELAY does not fail the request');
  for (let n = 2; n <= 4; n++) {
    inst!.finishOne();
    await inst!.untilBatches(n);
  }
  inst!.finishOne();
  await h.batcher.drain();
  assert.deepEqual(inst!.batches.flat(), ['busy', 'fresh1', 'fresh2', 'expiring']);
  assert.equal(h.stats.success.count, 4);
});

test('a request aborted while queued fails CANCELLED at once and never runs', async () => {
  const h = new Harness({}, { maxBatchSize: 4 });
  const [inst] = h.instances;
  h.submit(request('busy'));
  const ac = new AbortController();
  h.submit(request('a'));
  h.submit(request('gone'), { signal: ac.signal });
  h.submit(request('b'));
  assert.equal(h.batcher.pendingCount, 3);
  ac.abort();
  const gone = await h.outcome('gone');
  assert.equal(gone.error?.code, 'NRD_CANCELLED');
  assert.equal(gone.error?.errorClass, 'CANCELLED');
  assert.equal(h.stats.failures.CANCELED, 1);
  assert.equal(h.batcher.pendingCount, 2);
  inst!.finishOne();
  await inst!.untilBatches(2);
  inst!.finishOne();
  await h.batcher.drain();
  assert.deepEqual(inst!.batches[1], ['a', 'b']);
});

test('an already aborted request is cancelled without queueing', async () => {
  const h = new Harness({});
  const ac = new AbortController();
  ac.abort();
  h.submit(request('x'), { signal: ac.signal });
  assert.equal((await h.outcome('x')).error?.code, 'NRD_CANCELLED');
  assert.equal(h.batcher.pendingCount, 0);
  assert.equal(h.instances[0]!.batches.length, 0);
});

test('many cancelled requests do not accumulate in the queue', async () => {
  const h = new Harness({}, { maxBatchSize: 1 });
  const [inst] = h.instances;
  h.submit(request('busy'));
  for (let i = 0; i < 1000; i++) {
    const ac = new AbortController();
    h.submit(request(`c${i}`), { signal: ac.signal });
    ac.abort();
  }
  h.submit(request('last'));
  assert.equal(h.batcher.pendingCount, 1);
  const level = (h.batcher as unknown as { queue: { levels: { waiting: { length: number } }[] } }).queue.levels[0]!;
  assert.ok(level.waiting.length < 200, `queue holds ${level.waiting.length} entries`);
  inst!.finishOne();
  await inst!.untilBatches(2);
  inst!.finishOne();
  await h.batcher.drain();
  assert.deepEqual(inst!.batches[1], ['last']);
  assert.equal(h.stats.failures.CANCELED, 1000);
});

test('statistics add up: one success per request, queue + compute within the request time', async () => {
  const h = new Harness({ preferredBatchSize: [2, 4] }, { instances: 2 });
  const [x, y] = h.instances;
  for (let i = 0; i < 10; i++) h.submit(request(`r${i}`, 1 + (i % 2)));
  while (h.outcomes.length < 10) {
    for (const inst of [x!, y!]) if (inst.running > 0) inst.finishOne();
    await tick();
  }
  await h.batcher.drain();
  const json = h.stats.toJSON();
  const s = json.inference_stats;
  assert.equal(s.success.count, 10);
  assert.equal(s.queue.count, 10);
  assert.equal(s.compute_infer.count, 10);
  assert.equal(json.inference_count, 15);
  assert.equal(
    json.execution_count,
    json.batch_stats.reduce((n, b) => n + b.compute_infer.count, 0),
  );
  assert.equal(
    json.batch_stats.reduce((n, b) => n + b.batch_size * b.compute_infer.count, 0),
    json.inference_count,
  );
  assert.ok(s.queue.ns + s.compute_input.ns + s.compute_infer.ns + s.compute_output.ns <= s.success.ns);
});

test('arrivals in one event-loop turn form one batch when coalescing, with no queue delay', async () => {
  const h = new Harness({}, { instances: 2, coalesce: true });
  for (const id of ['c0', 'c1', 'c2', 'c3', 'c4']) h.submit(request(id));
  const [first, second] = h.instances;
  assert.equal(first!.batches.length + second!.batches.length, 0, 'nothing is sent before the turn ends');
  await first!.untilBatches(1);
  assert.deepEqual(first!.batches[0], ['c0', 'c1', 'c2', 'c3', 'c4']);
  assert.equal(second!.batches.length, 0, 'the second instance stays free for the next arrivals');
  h.submit(request('c5'));
  await second!.untilBatches(1);
  assert.deepEqual(second!.batches[0], ['c5']);
  first!.finishOne();
  second!.finishOne();
  await h.batcher.drain();
  assert.equal(h.stats.toJSON().inference_count, 6);
});

test('an instance that takes two executions gets a second batch while it runs the first, and no third', async () => {
  const h = new Harness({}, { maxBatchSize: 4, instances: 2, depth: 2, coalesce: true });
  const [a, b] = h.instances;
  for (let i = 0; i < 18; i++) h.submit(request(`r${i}`));
  await tick();
  // Four slots (two per instance), each given a full batch at the end of the turn; two requests wait.
  assert.equal(a!.running, 2);
  assert.equal(b!.running, 2);
  assert.equal(h.batcher.pendingCount, 2);
  assert.deepEqual(a!.batches, [
    ['r0', 'r1', 'r2', 'r3'],
    ['r8', 'r9', 'r10', 'r11'],
  ]);
  assert.deepEqual(b!.batches, [
    ['r4', 'r5', 'r6', 'r7'],
    ['r12', 'r13', 'r14', 'r15'],
  ]);
  a!.finishOne();
  await a!.untilBatches(3);
  assert.deepEqual(a!.batches[2], ['r16', 'r17']);
  while (a!.running + b!.running > 0) {
    if (a!.running > 0) a!.finishOne();
    if (b!.running > 0) b!.finishOne();
    await tick();
  }
  await h.batcher.drain();
  assert.equal(h.outcomes.length, 18);
  assert.equal(h.stats.toJSON().execution_count, 5);
});

test('full: true only when every level a request could map to is bounded and full', async () => {
  const single = new Harness({ defaultQueuePolicy: policy({ maxQueueSize: 1 }) }, { maxBatchSize: 1 });
  assert.equal(single.batcher.full, false);
  single.submit(request('busy'));
  await single.instances[0]!.untilBatches(1);
  assert.equal(single.batcher.full, false, 'the running request is not queued');
  single.submit(request('queued'));
  assert.equal(single.batcher.full, true);
  single.instances[0]!.finishOne();
  await single.instances[0]!.untilBatches(2);
  assert.equal(single.batcher.full, false);
  single.instances[0]!.finishOne();
  await single.batcher.drain();

  const two = new Harness(
    {
      priorityLevels: 2n,
      defaultPriorityLevel: 2n,
      priorityQueuePolicy: { '1': policy({ maxQueueSize: 1 }), '2': policy({ maxQueueSize: 1 }) },
    },
    { maxBatchSize: 1 },
  );
  two.submit(request('busy'));
  await two.instances[0]!.untilBatches(1);
  two.submit(request('a'), { priority: 1 });
  assert.equal(two.batcher.full, false, 'level 2 still has room');
  two.submit(request('b'), { priority: 2 });
  assert.equal(two.batcher.full, true);
  for (let n = 2; n <= 3; n++) {
    two.instances[0]!.finishOne();
    await two.instances[0]!.untilBatches(n);
  }
  two.instances[0]!.finishOne();
  await two.batcher.drain();
});

test('a bounded queue counts the batch waiting inside a busy instance until it starts', async () => {
  const h = new Harness({ defaultQueuePolicy: policy({ maxQueueSize: 3 }) }, { maxBatchSize: 2, depth: 2 });
  const [inst] = h.instances;
  h.submit(request('r0')); // runs
  h.submit(request('r1')); // waits inside the instance, behind r0
  assert.deepEqual(inst!.batches, [['r0'], ['r1']]);
  h.submit(request('r2'));
  assert.equal(h.batcher.full, false);
  h.submit(request('r3'));
  // Two queued and one waiting inside the instance: the bound of 3 is reached.
  assert.equal(h.batcher.pendingCount, 2);
  assert.equal(h.batcher.full, true);
  h.submit(request('r4'));
  const refused = await h.outcome('r4');
  assert.match(refused.error?.message ?? '', /Exceeds maximum queue size/);

  // r0 ends, r1 starts: r2 and r3 become the waiting batch, one place is free again.
  inst!.finishOne();
  await inst!.untilBatches(3);
  assert.deepEqual(inst!.batches[2], ['r2', 'r3']);
  assert.equal(h.batcher.pendingCount, 0);
  assert.equal(h.batcher.full, false);
  h.submit(request('r5'));
  assert.equal(h.batcher.full, true);
  h.submit(request('r6'));
  assert.match((await h.outcome('r6')).error?.message ?? '', /Exceeds maximum queue size/);

  while (inst!.running > 0) {
    inst!.finishOne();
    await tick();
  }
  await h.batcher.drain();
  const ok = h.outcomes.filter((o) => o.error === undefined).map((o) => o.id);
  assert.deepEqual(ok, ['r0', 'r1', 'r2', 'r3', 'r5']);
  // Everything released: a fresh request is queued or run, not refused.
  assert.equal(h.batcher.full, false);
});

test('an unbounded queue gives a busy instance its waiting batch as before', async () => {
  const h = new Harness({}, { maxBatchSize: 2, depth: 2 });
  const [inst] = h.instances;
  for (let i = 0; i < 6; i++) h.submit(request(`r${i}`));
  assert.deepEqual(inst!.batches, [['r0'], ['r1']]);
  assert.equal(h.batcher.pendingCount, 4);
  assert.equal(h.batcher.full, false);
  while (h.outcomes.length < 6) {
    inst!.finishOne();
    await tick();
  }
  await h.batcher.drain();
  assert.deepEqual(h.order, ['r0', 'r1', 'r2', 'r3', 'r4', 'r5']);
});

test('when coalescing, a whole batch already queued goes to a free ' +
  'instance at once, not at the end of the turn', async () => {
  const h = new Harness({}, { maxBatchSize: 4, coalesce: true });
  const [inst] = h.instances;
  for (const id of ['r0', 'r1', 'r2']) h.submit(request(id));
  assert.equal(inst!.batches.length, 0, 'a partial batch waits for the turn to end');
  h.submit(request('r3'));
  assert.deepEqual(inst!.batches, [['r0', 'r1', 'r2', 'r3']], 'the fourth request completes a batch: it goes now');
  for (const id of ['r4', 'r5', 'r6', 'r7']) h.submit(request(id));
  assert.equal(inst!.batches.length, 1, 'no instance is free: the next batch waits');
  inst!.finishOne();
  await inst!.untilBatches(2);
  assert.deepEqual(inst!.batches[1], ['r4', 'r5', 'r6', 'r7']);
  inst!.finishOne();
  await h.batcher.drain();
  assert.deepEqual(h.order, ['r0', 'r1', 'r2', 'r3', 'r4', 'r5', 'r6', 'r7']);
});

test('collectFinished asks only the instances with executions in flight', async () => {
  const h = new Harness({}, { maxBatchSize: 2, instances: 2 });
  const [a, b] = h.instances;
  h.batcher.collectFinished();
  assert.deepEqual([a!.collected, b!.collected], [0, 0], 'idle instances have nothing to collect');
  h.submit(request('r0'));
  await a!.untilBatches(1);
  h.batcher.collectFinished();
  assert.deepEqual([a!.collected, b!.collected], [1, 0]);
  a!.finishOne();
  await h.batcher.drain();
  h.batcher.collectFinished();
  assert.deepEqual([a!.collected, b!.collected], [1, 0]);
});

/** Submits `n` requests r0.. in one turn and lets the batcher form its batches at the end of it. */
async function queueInOneTurn(h: Harness, n: number): Promise<void> {
  for (let i = 0; i < n; i++) h.submit(request(`r${i}`));
  await tick();
}

function ids(from: number, to: number): string[] {
  return Array.from({ length: to - from }, (_, i) => `r${from + i}`);
}

test('an idle instance that asks for it gets what is queued in two ' +
  'halves, running and waiting; one batch when it does not', async () => {
  const spread = new Harness({}, { maxBatchSize: 64, depth: 2, coalesce: true, spread: true });
  await queueInOneTurn(spread, 32);
  const [a] = spread.instances;
  assert.deepEqual(a!.batches, [ids(0, 16), ids(16, 32)]);
  assert.ok(a!.spreadAsked > 0);
  while (spread.outcomes.length < 32) {
    if (a!.running > 0) a!.finishOne();
    await tick();
  }
  assert.deepEqual(spread.order, ids(0, 32), 'answered in arrival order');
  assert.equal(spread.stats.executionCount, 2);

  const whole = new Harness({}, { maxBatchSize: 64, depth: 2, coalesce: true, spread: false });
  await queueInOneTurn(whole, 32);
  const [b] = whole.instances;
  assert.deepEqual(b!.batches, [ids(0, 32)]);
  b!.finishOne();
  await whole.batcher.drain();
});

test('a spread leaves no batch under SPREAD_MIN_REQUESTS: fewer than twice that go whole', async () => {
  const h = new Harness({}, { maxBatchSize: 64, depth: 2, coalesce: true, spread: true });
  await queueInOneTurn(h, 2 * SPREAD_MIN_REQUESTS - 1);
  const [a] = h.instances;
  assert.deepEqual(a!.batches, [ids(0, 2 * SPREAD_MIN_REQUESTS - 1)]);
  a!.finishOne();
  await h.batcher.drain();
});

test('a batch of a preferred size the configuration chose goes whole, spread or not', async () => {
  const h = new Harness({ preferredBatchSize: [32] }, { maxBatchSize: 64, depth: 2, coalesce: true, spread: true });
  await queueInOneTurn(h, 32);
  const [a] = h.instances;
  assert.deepEqual(a!.batches, [ids(0, 32)]);
  a!.finishOne();
  await h.batcher.drain();
});

test('a busy instance is never asked to spread: its free slot takes what is queued', async () => {
  const h = new Harness({}, { maxBatchSize: 64, depth: 2, coalesce: true, spread: true });
  h.submit(request('first'));
  await tick();
  const [a] = h.instances;
  assert.deepEqual(a!.batches, [['first']]);
  const asked = a!.spreadAsked;
  await queueInOneTurn(h, 20);
  assert.deepEqual(a!.batches[1], ids(0, 20), 'the waiting slot gets all of it');
  assert.equal(a!.spreadAsked, asked, 'one free slot: nothing to spread over');
  while (h.outcomes.length < 21) {
    if (a!.running > 0) a!.finishOne();
    await tick();
  }
});

test('an instance with more batch slots gets several waiting batches ' +
  'under an unbounded queue, one under a bounded one', async () => {
  const h = new Harness({}, { maxBatchSize: 4, depth: 8, batchSlots: 4 });
  const [a] = h.instances;
  for (let i = 0; i < 6; i++) h.submit(request(`r${i}`));
  // Without coalescing each arrival finds a free slot until the four are taken.
  assert.deepEqual(a!.batches, [['r0'], ['r1'], ['r2'], ['r3']]);
  assert.equal(h.batcher.pendingCount, 2);
  while (h.outcomes.length < 6) {
    if (a!.running > 0) a!.finishOne();
    await tick();
  }
  assert.deepEqual(h.order, ids(0, 6));

  const bounded = new Harness(
    { defaultQueuePolicy: policy({ maxQueueSize: 10 }) },
    { maxBatchSize: 4, depth: 8, batchSlots: 4 },
  );
  const [b] = bounded.instances;
  for (let i = 0; i < 6; i++) bounded.submit(request(`r${i}`));
  assert.deepEqual(b!.batches, [['r0'], ['r1']], 'a bounded queue counts one waiting batch per instance');
  while (bounded.outcomes.length < 6) {
    if (b!.running > 0) b!.finishOne();
    await tick();
  }
});
