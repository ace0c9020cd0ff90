import { test } from 'node:test';
import assert from 'node:assert/strict';
import { type StartWaiter, waitForStart } from '../../src/backends/start-timeout.js';

test('a start not reported in time fails with the given error, and what was started is stopped', async () => {
  let stopped = false;
  await assert.rejects(
    waitForStart(10, () => new Error('did not start within 10 ms'), () => (stopped = true), () => {}),
    /did not start within 10 ms/,
  );
  assert.equal(stopped, true);
});

test('a start reported in time settles as reported, and nothing is stopped', async () => {
  let stopped = false;
  let waiter: StartWaiter | undefined;
  const started = waitForStart(60_000, () => new Error('late'), () => (stopped = true), (w) => (waiter = w));
  waiter!.resolve();
  await started;
  const failed = waitForStart(60_000, () => new Error('late'), () => (stopped = true), (w) => (waiter = w));
  waiter!.reject(new Error('import failed'));
  await assert.rejects(failed, /import failed/);
  assert.equal(stopped, false);
});
