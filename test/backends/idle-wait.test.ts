/** The wait policy of the backends' own threads (src/backends/idle-wait.ts). */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { IdleWait, doze, nowNs } from '../../src/backends/idle-wait.js';

/** An arrival long after the thread went idle: beyond any spin. */
const late = (): number => nowNs() + 10e9;

test('a thread spins only under light load, and never with a spin of 0', () => {
  assert.equal(new IdleWait(300).idle(true), true);
  assert.equal(new IdleWait(300).idle(false), false);
  assert.equal(new IdleWait(0).idle(true), false);
});

test('gaps longer than the spin turn spinning off; gaps within it turn it back on', () => {
  const w = new IdleWait(300);
  let misses = 0;
  while (w.idle(true)) {
    w.arrived(late());
    misses++;
  }
  assert.ok(misses > 1, 'one late arrival does not stop the spin');
  let hits = 0;
  while (!w.idle(true)) {
    w.arrived(nowNs() - 10e9);
    hits++;
  }
  assert.ok(hits > 0);
});

test('an arrival after forget() or without a light-load idle start is not counted', () => {
  const forgotten = new IdleWait(300);
  const heavy = new IdleWait(300);
  for (let i = 0; i < 20; i++) {
    forgotten.idle(true);
    forgotten.forget();
    forgotten.arrived(late());
    heavy.idle(false);
    heavy.arrived(late());
  }
  assert.equal(forgotten.idle(true), true);
  assert.equal(heavy.idle(true), true);
});

test('spin() returns as soon as the poll finds work, and false when the spin runs out', () => {
  let polls = 0;
  assert.equal(new IdleWait(1_000_000).spin(() => ++polls === 3), true);
  assert.equal(polls, 3);
  assert.equal(new IdleWait(1).spin(() => false), false);
});

test('doze() returns true at once when the word already changed, false when it never does', () => {
  const word = new Int32Array(new SharedArrayBuffer(8));
  word[1] = 5;
  assert.equal(doze(word, 1, 4), true);
  assert.equal(doze(word, 1, 5), false);
});
