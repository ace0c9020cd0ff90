import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { join } from 'node:path';
import {
  DEFAULT_CROSSING_NS,
  InlinePolicy,
  InlineSession,
  LIGHT_INLINE_NS,
  MAX_INLINE_NS,
  MIN_INLINE_NS,
  ASLEEP_INLINE_RUNS,
  MIN_SAMPLES,
  RunEstimates,
  RunOverlap,
  SEQUENTIAL_HOLD_MS,
  SEQUENTIAL_RUNS,
  WIDE_MIN_NS,
  WIDE_RETIME_AFTER,
  WIDE_WARMUP_RUNS,
  inlineMode,
} from '../../../../src/backends/onnxruntime/policies/inline.js';
import { wideInlineOptions } from '../../../../src/backends/onnxruntime/session-options.js';
import { NereidError } from '../../../../src/errors.js';
import { buildAddSubModel } from '../../../helpers/onnx-builder.js';
import { TempDir, config } from '../fixtures.js';

let tmp: TempDir;
let modelFile: string;

before(async () => {
  tmp = await TempDir.create();
  modelFile = join(tmp.path, 'addsub.onnx');
  await buildAddSubModel('FP32', 4).save(modelFile);
});

after(async () => {
  await tmp.remove();
});

const cpuOptions = { executionProviders: ['cpu'], intraOpNumThreads: 1, logSeverityLevel: 4 as const };

test('inlineMode: auto by default; the model parameter wins ' +
  'over the backend config; a bad value names the model', () => {
  assert.equal(inlineMode('m', config({}), {}), 'auto');
  assert.equal(inlineMode('m', config({}), { inline_execution: 'off' }), 'off');
  assert.equal(
    inlineMode('m', config({ parameters: { inline_execution: { stringValue: ' On ' } } }), { inline_execution: 'off' }),
    'on',
  );
  assert.throws(
    () => inlineMode('m', config({ parameters: { inline_execution: { stringValue: '1' } } }), {}),
    (e: unknown) =>
      e instanceof NereidError &&
      e.message === "model 'm': parameter 'inline_execution' must be 'auto', 'on' or 'off', got '1'",
  );
});

test('RunEstimates: no prediction before enough runs, then the 90th percentile of the class', () => {
  const r = new RunEstimates();
  for (let i = 0; i < MIN_SAMPLES - 1; i++) r.record(1, 10_000);
  assert.equal(r.predict(1), undefined);
  r.record(1, 10_000);
  assert.equal(r.predict(1), 10_000);
  // One slow run in 32 does not move the 90th percentile; many do.
  for (let i = 0; i < 31; i++) r.record(1, 10_000);
  r.record(1, 900_000);
  assert.equal(r.predict(1), 10_000);
  for (let i = 0; i < 8; i++) r.record(1, 900_000);
  assert.equal(r.predict(1), 900_000);
});

test('RunEstimates: a batch size not timed yet is bounded by a bigger class, or scaled up from a smaller one', () => {
  const r = new RunEstimates();
  for (let i = 0; i < MIN_SAMPLES; i++) r.record(2, 20_000);
  // 32 items, never timed: 20 µs for 2 items scaled to 32.
  assert.equal(r.predict(32), 320_000);
  for (let i = 0; i < MIN_SAMPLES; i++) r.record(40, 50_000);
  // 32 items: at most what 40 took.
  assert.equal(r.predict(32), 50_000);
  // 1 item: at most what 2 took.
  assert.equal(r.predict(1), 20_000);
});

test('InlinePolicy: the threshold is the measured crossing, within its bounds', () => {
  const p = new InlinePolicy('auto', () => new InlineSession(modelFile, cpuOptions));
  assert.equal(p.thresholdNs, DEFAULT_CROSSING_NS);
  p.recordCrossing(1_000);
  assert.equal(p.thresholdNs, MIN_INLINE_NS);
  for (let i = 0; i < 100; i++) p.recordCrossing(50_000_000);
  assert.equal(p.thresholdNs, MAX_INLINE_NS);
  p.close();
});

test('InlinePolicy auto: inline only for runs predicted within the ' +
  'threshold, with the thread idle; the session comes on first use', () => {
  let created = 0;
  const { overlap, oneByOne } = overlapOnClock();
  const p = new InlinePolicy(
    'auto',
    () => {
      created++;
      return new InlineSession(modelFile, cpuOptions);
    },
    undefined,
    undefined,
    overlap,
  );
  oneByOne(SEQUENTIAL_RUNS);
  assert.equal(p.choose(1, true), undefined, 'nothing timed yet');
  for (let i = 0; i < MIN_SAMPLES; i++) p.recordRun(1, 5_000);
  assert.equal(created, 0);
  assert.equal(p.choose(1, false), undefined, 'the thread is busy: the run waits behind its runs');
  const s = p.choose(1, true);
  assert.ok(s instanceof InlineSession);
  assert.equal(created, 1);
  assert.equal(p.choose(1, true), s);
  // A batch of 64 items scaled from 5 µs each: 320 µs, more than the 60 µs default crossing.
  assert.equal(p.choose(64, true, 2), undefined);
  // Runs that get long move the model back to the thread.
  for (let i = 0; i < 32; i++) p.recordRun(1, 2_000_000);
  assert.equal(p.choose(1, true), undefined);
  p.close();
  for (let i = 0; i < 32; i++) p.recordRun(1, 1_000);
  assert.equal(p.choose(1, true), undefined, 'closed');
  assert.equal(created, 1);
});

test('InlinePolicy auto: while requests are not known to come one at a time a single request ' +
  'stays on the thread and a batch of several still goes inline', () => {
  const { overlap, oneByOne } = overlapOnClock();
  const p = new InlinePolicy(
    'auto',
    () => new InlineSession(modelFile, cpuOptions),
    undefined,
    undefined,
    overlap,
  );
  for (let i = 0; i < MIN_SAMPLES; i++) p.recordRun(1, 5_000);
  assert.equal(
    p.choose(1, true, 1),
    undefined,
    'other requests may wait: one request goes to the thread, which runs on another core',
  );
  assert.ok(p.choose(1, true, 4) instanceof InlineSession, 'a batch of four shares the crossing it saves');
  oneByOne(SEQUENTIAL_RUNS);
  assert.ok(p.choose(1, true, 1) instanceof InlineSession, 'one at a time: nothing else for the loop to do');
  p.close();
});

test('InlinePolicy auto: with requests not one at a time a single request goes inline ' +
  'while the thread sleeps, a few in a row, then one goes to wake it', () => {
  const p = new InlinePolicy(
    'auto',
    () => new InlineSession(modelFile, cpuOptions),
    undefined,
    undefined,
    new RunOverlap(),
  );
  for (let i = 0; i < MIN_SAMPLES; i++) p.recordRun(1, 5_000);
  assert.equal(p.choose(1, true, 1, false), undefined, 'an awake thread takes the run');
  for (let round = 0; round < 2; round++) {
    for (let i = 0; i < ASLEEP_INLINE_RUNS; i++)
      assert.ok(p.choose(1, true, 1, true) instanceof InlineSession, `asleep: run ${i} inline`);
    assert.equal(p.choose(1, true, 1, true), undefined, 'then one goes to the thread and wakes it');
  }
  for (let i = 0; i < 3; i++) assert.ok(p.choose(1, true, 1, true) instanceof InlineSession);
  assert.equal(p.choose(1, true, 1, false), undefined, 'awake again: the thread takes it, and the count starts afresh');
  for (let i = 0; i < ASLEEP_INLINE_RUNS; i++) assert.ok(p.choose(1, true, 1, true) instanceof InlineSession);
  p.recordRun(1, 10_000_000);
  for (let i = 0; i < MIN_SAMPLES; i++) p.recordRun(1, 10_000_000);
  assert.equal(p.choose(1, true, 1, true), undefined, 'a run predicted beyond the threshold never goes inline');
  p.close();
});

/** A RunOverlap on a clock the test moves, and a helper that hands it `n` runs one after another. */
function overlapOnClock(): { overlap: RunOverlap; clock: { ms: number }; oneByOne: (n: number) => void } {
  const clock = { ms: 1_000 };
  const overlap = new RunOverlap(() => clock.ms);
  const oneByOne = (n: number): void => {
    for (let i = 0; i < n; i++) {
      overlap.started();
      overlap.ended();
    }
  };
  return { overlap, clock, oneByOne };
}

test('RunOverlap: runs handed over one after another make requests count as one at a time, for a while', () => {
  const { overlap, clock, oneByOne } = overlapOnClock();
  assert.equal(overlap.oneAtATime, false, 'nothing seen yet');
  oneByOne(SEQUENTIAL_RUNS - 1);
  assert.equal(overlap.oneAtATime, false, 'one run short');
  oneByOne(1);
  assert.equal(overlap.oneAtATime, true);
  clock.ms += SEQUENTIAL_HOLD_MS - 1;
  assert.equal(overlap.oneAtATime, true, 'still within the hold');
  clock.ms += 1;
  assert.equal(overlap.oneAtATime, false, 'the reading lapses: inline runs cannot renew it');
  // Renewing takes a full count again: the first run after the lapse is not enough.
  oneByOne(1);
  assert.equal(overlap.oneAtATime, false);
  oneByOne(SEQUENTIAL_RUNS - 1);
  assert.equal(overlap.oneAtATime, true);
});

test('RunOverlap: a run handed over while another is in flight, or a ' +
  'batch of several, ends the reading and restarts the count', () => {
  const { overlap, oneByOne } = overlapOnClock();
  oneByOne(SEQUENTIAL_RUNS);
  assert.equal(overlap.oneAtATime, true);
  overlap.started();
  overlap.started(); // the first is still in flight
  assert.equal(overlap.oneAtATime, false);
  assert.equal(overlap.quietRuns, 0);
  overlap.ended();
  overlap.ended();
  oneByOne(SEQUENTIAL_RUNS - 1);
  assert.equal(overlap.oneAtATime, false, 'the count restarted at the overlap');
  assert.equal(overlap.quietRuns, SEQUENTIAL_RUNS - 1);
  overlap.overlapped();
  assert.equal(overlap.quietRuns, 0);
  // A run that ended (or failed) is no longer in flight; more ends than starts do not go below none.
  overlap.ended();
  oneByOne(SEQUENTIAL_RUNS);
  assert.equal(overlap.oneAtATime, true);
});

test('InlinePolicy auto: while requests come one at a time, a single request goes ' +
  'inline when predicted within LIGHT_INLINE_NS', () => {
  const { overlap, oneByOne } = overlapOnClock();
  const p = new InlinePolicy(
    'auto',
    () => new InlineSession(modelFile, cpuOptions),
    undefined,
    undefined,
    overlap,
  );
  // 200 µs a run: above the 60 µs default crossing, within LIGHT_INLINE_NS.
  for (let i = 0; i < MIN_SAMPLES; i++) p.recordRun(1, 200_000);
  assert.ok(p.thresholdNs < 200_000);
  assert.equal(
    p.choose(1, true),
    undefined,
    'not known to come one at a time: the single-request rule applies',
  );
  oneByOne(SEQUENTIAL_RUNS);
  const s = p.choose(1, true);
  assert.ok(
    s instanceof InlineSession,
    'one at a time: nothing else for the loop to do while the run would be on the thread',
  );
  assert.equal(p.choose(1, false), undefined, 'the thread still has runs in flight: the run waits behind them');
  // 64 items scaled from 200 µs each: far above LIGHT_INLINE_NS.
  assert.equal(p.choose(64, true), undefined);
  assert.ok(64 * 200_000 > LIGHT_INLINE_NS);
  // A batch of several requests shows they came together: the reading ends, and the batch's own prediction is over the
  // threshold.
  for (let i = 0; i < MIN_SAMPLES; i++) p.recordRun(2, 300_000);
  assert.equal(p.choose(2, true, 2), undefined);
  assert.equal(overlap.oneAtATime, false);
  assert.equal(p.choose(1, true), undefined, 'the single request is back under the threshold rule');
  p.close();
});

test('InlinePolicy auto: a tiny model goes inline ' +
  'while requests come one at a time, to the thread once they overlap', () => {
  const { overlap, oneByOne } = overlapOnClock();
  const p = new InlinePolicy(
    'auto',
    () => new InlineSession(modelFile, cpuOptions),
    undefined,
    undefined,
    overlap,
  );
  for (let i = 0; i < MIN_SAMPLES; i++) p.recordRun(1, 5_000);
  assert.equal(p.choose(1, true), undefined, 'nothing known about the requests');
  oneByOne(SEQUENTIAL_RUNS);
  assert.ok(p.choose(1, true) instanceof InlineSession);
  overlap.started();
  overlap.started();
  assert.equal(p.choose(1, true), undefined, 'runs overlapped on the threads: the loop has other requests to serve');
  p.close();
});

test('InlinePolicy: a session that cannot be created leaves the runs on the thread and says why', () => {
  const failures: string[] = [];
  const { overlap, oneByOne } = overlapOnClock();
  const p = new InlinePolicy(
    'auto',
    () => new InlineSession(join(tmp.path, 'missing.onnx'), cpuOptions),
    undefined,
    (err) => failures.push(err.message),
    overlap,
  );
  for (let i = 0; i < MIN_SAMPLES; i++) p.recordRun(1, 1_000);
  oneByOne(SEQUENTIAL_RUNS);
  assert.equal(p.choose(1, true), undefined);
  assert.equal(p.choose(1, true), undefined);
  assert.equal(failures.length, 1);
  assert.match(failures[0]!, /missing\.onnx|No such file|Load model/i);
});

test('InlineSession: runs synchronously and returns onnxruntime tensors', () => {
  const s = new InlineSession(modelFile, cpuOptions);
  const T = s.Tensor;
  const out = s.run(
    {
      INPUT0: new T('float32', Float32Array.from([1, 2, 3, 4]), [1, 4]),
      INPUT1: new T('float32', Float32Array.from([1, 1, 1, 1]), [1, 4]),
    },
    ['OUTPUT1'],
  );
  assert.deepEqual([...(out['OUTPUT1']!.data as Float32Array)], [0, 1, 2, 3]);
  assert.deepEqual(out['OUTPUT1']!.dims, [1, 4]);
  assert.equal(out['OUTPUT0'], undefined);
  assert.ok(s.createMs >= 0);
  s.release();
});

/**
 * A policy with a wide session (2 threads, helpers waiting 300 µs) on a clock of its own, its requests one at a time.
 */
function widePolicy(): {
  p: InlinePolicy;
  overlap: RunOverlap;
  oneByOne: (n: number) => void;
  clock: { ns: number };
  created: boolean[];
} {
  const { overlap, oneByOne } = overlapOnClock();
  const clock = { ns: 1e12 };
  const created: boolean[] = [];
  const p = new InlinePolicy(
    'auto',
    () => new InlineSession(modelFile, cpuOptions),
    (_s, _predicted, _bound, wide) => created.push(wide),
    undefined,
    overlap,
    {
      create: () => new InlineSession(modelFile, wideInlineOptions(cpuOptions, config({}), 2, 300)),
      threads: 2,
      spinMicros: 300,
      clockNs: () => clock.ns,
    },
  );
  return { p, overlap, oneByOne, clock, created };
}

test('InlinePolicy auto: while requests come one at a time, a run predicted at WIDE_MIN_NS or more ' +
  'goes to the wide session; shorter runs, and all under load, keep the one-thread session', () => {
  const { p, overlap, oneByOne, created } = widePolicy();
  assert.equal(p.wideThreads, 2);
  // Size 1: 200 µs a run on one thread; size 2: 50 µs.
  for (let i = 0; i < MIN_SAMPLES; i++) {
    p.recordRun(1, 200_000);
    p.recordRun(2, 50_000);
  }
  assert.ok(200_000 >= WIDE_MIN_NS && 50_000 < WIDE_MIN_NS);
  assert.equal(p.choose(1, true), undefined, 'not known to come one at a time: 200 µs is over the threshold');
  oneByOne(SEQUENTIAL_RUNS);
  const wide = p.choose(1, true)!;
  assert.ok(wide instanceof InlineSession);
  assert.equal(p.isWide(wide), true);
  const narrow = p.choose(2, true)!;
  assert.ok(narrow instanceof InlineSession);
  assert.equal(p.isWide(narrow), false, 'a 50 µs run gains less than a helper costs');
  assert.notEqual(narrow, wide);
  assert.deepEqual(created, [true, false], 'each session is created on first use, and says which it is');
  assert.equal(p.choose(1, false), undefined, 'the thread has runs in flight: the run waits behind them');
  // Two requests in one run: they came together, and the 50 µs run keeps the one-thread session.
  const batch = p.choose(2, true, 2)!;
  assert.equal(p.isWide(batch), false);
  assert.equal(overlap.oneAtATime, false);
  assert.equal(p.choose(1, true), undefined, 'under load the 200 µs run is back on the thread');
  p.close();
});

test('InlinePolicy auto: the wide session\'s runs are timed apart, after its first ones; a figure beyond ' +
  'LIGHT_INLINE_NS, or no better than one thread, sends runs back ' +
  'to the one-thread session until it is made afresh', () => {
  const { p, oneByOne } = widePolicy();
  for (let i = 0; i < MIN_SAMPLES; i++) p.recordRun(1, 200_000);
  oneByOne(SEQUENTIAL_RUNS);
  const wide = p.choose(1, true)!;
  assert.equal(p.isWide(wide), true);
  for (let i = 0; i < WIDE_WARMUP_RUNS; i++) p.recordRun(1, 50_000_000, wide);
  assert.equal(p.wideTimes.predict(1), undefined, 'the first runs are not timed');
  for (let i = 0; i < MIN_SAMPLES; i++) p.recordRun(1, 120_000, wide);
  assert.equal(p.wideTimes.predict(1), 120_000);
  assert.equal(p.times.predict(1), 200_000, "the one-thread figure keeps the one-thread runs' time");
  // The wide runs turn long (a busy machine): the next runs keep the one-thread session.
  for (let i = 0; i < 32; i++) p.recordRun(1, LIGHT_INLINE_NS * 2, wide);
  let refused = 0;
  while (refused < WIDE_RETIME_AFTER) {
    const s = p.choose(1, true)!;
    assert.equal(p.isWide(s), false, `run ${refused} went to the wide session`);
    refused++;
  }
  assert.equal(p.wideTimes.predict(1), undefined, 'the figure is made afresh');
  assert.equal(p.isWide(p.choose(1, true)!), true);
  // Within the bound but no faster than one thread (its helper finds no free core): the one-thread session again.
  for (let i = 0; i < 32; i++) p.recordRun(1, 210_000, wide);
  assert.equal(p.isWide(p.choose(1, true)!), false);
  for (let i = 0; i < 32; i++) p.recordRun(1, 150_000);
  assert.equal(p.isWide(p.choose(1, true)!), false, 'the one-thread runs are now faster still');
  p.close();
});

test('InlinePolicy auto: runs further apart than the helpers wait keep ' +
  'the one-thread session, until most gaps are within it again', () => {
  const { p, oneByOne, clock } = widePolicy();
  for (let i = 0; i < MIN_SAMPLES; i++) p.recordRun(1, 200_000);
  oneByOne(SEQUENTIAL_RUNS);
  const run = (gapNs: number): boolean => {
    clock.ns += gapNs;
    const s = p.choose(1, true)!;
    assert.ok(s instanceof InlineSession);
    p.recordRun(1, 150_000, s);
    return p.isWide(s);
  };
  assert.equal(run(0), true, 'no gap seen yet');
  for (let i = 0; i < 5; i++) assert.equal(run(100_000), true, '100 µs gaps: within the 300 µs wait');
  const sides: boolean[] = [];
  for (let i = 0; i < 12; i++) sides.push(run(5_000_000));
  assert.equal(sides.at(-1), false, 'requests 5 ms apart: the helpers would spin for nothing');
  assert.ok(p.gapHitRate < 0.5);
  const back: boolean[] = [];
  for (let i = 0; i < 12; i++) back.push(run(100_000));
  assert.equal(back.at(-1), true);
  assert.ok(back.indexOf(true) > 0, 'the share comes back over a few gaps, not at once');
  p.close();
});

test('InlineSession: a wide session (two intra-op threads, a ' +
  'bounded spin) computes what the one-thread session does', () => {
  const narrow = new InlineSession(modelFile, cpuOptions);
  const wide = new InlineSession(modelFile, wideInlineOptions(cpuOptions, config({}), 2, 300));
  const T = narrow.Tensor;
  const feeds = {
    INPUT0: new T('float32', Float32Array.from([1, 2, 3, 4]), [1, 4]),
    INPUT1: new T('float32', Float32Array.from([4, 3, 2, 1]), [1, 4]),
  };
  for (const s of [narrow, wide]) {
    const out = s.run(feeds, ['OUTPUT0', 'OUTPUT1']);
    assert.deepEqual([...(out['OUTPUT0']!.data as Float32Array)], [5, 5, 5, 5]);
    assert.deepEqual([...(out['OUTPUT1']!.data as Float32Array)], [-3, -1, 1, 3]);
  }
  narrow.release();
  wide.release();
});
