import { test } from 'node:test';
import assert from 'node:assert/strict';
import { Cancellation } from '../../src/types/cancellation.js';

test('abort runs function and handleEvent listeners once; removed and late listeners are not called', () => {
  const c = new Cancellation();
  const calls: string[] = [];
  const removed = () => calls.push('removed');
  c.addEventListener('abort', () => calls.push('fn'));
  c.addEventListener('abort', { handleEvent: () => calls.push('object') });
  c.addEventListener('abort', removed);
  c.removeEventListener('abort', removed);
  assert.equal(c.aborted, false);
  c.abort();
  c.abort();
  c.addEventListener('abort', () => calls.push('late'));
  assert.equal(c.aborted, true);
  assert.deepEqual(calls, ['fn', 'object']);
});
