import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { join } from 'node:path';
import {
  DEFAULT_CROSSING_NS,
  LOOP_WINDOW_MS,
  eventLoopSaturated,
  InlinePolicy,
  InlineSession,
  LIGHT_INLINE_NS,
  MAX_INLINE_NS,
  MIN_INLINE_NS,
  MIN_SAMPLES,
  RunEstimates,
  RunOverlap,
  SEQUENTIAL_HOLD_MS,
  SEQUENTIAL_RUNS,
  inlineMode,
} from '../../../src/backends/onnxruntime/inline.js';
import { NereidError } from '../../../src/errors.js';
import { buildAddSubModel } from '../../../src/onnx/builder.js';
import { TempDir, config } from './fixtures.js';

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

test('inlineMode: auto by default; the model parameter wins over the backend config; a bad value names the model', () => {
  assert.equal(inlineMode('m', config({}), {}), 'auto');
  assert.equal(inlineMode('m', config({}), { inline_execution: 'off' }), 'off');
  assert.equal(inlineMode('m', config({ parameters: { inline_execution: { stringValue: ' On ' } } }), { inline_execution: 'off' }), 'on');
  assert.throws(
    () => inlineMode('m', config({ parameters: { inline_execution: { stringValue: '1' } } }), {}),
    (e: unknown) => e instanceof NereidError && e.message === "model 'm': parameter 'inline_execution' must be 'auto', 'on' or 'off', got '1'",
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

test('InlinePolicy auto: inline only for runs predicted within the threshold, with the thread idle; the session comes on first use', () => {
  let created = 0;
  const p = new InlinePolicy(
    'auto',
    () => {
      created++;
      return new InlineSession(modelFile, cpuOptions);
    },
    undefined,
    undefined,
    () => false,
    new RunOverlap(),
  );
  assert.equal(p.choose(1, true), undefined, 'nothing timed yet');
  for (let i = 0; i < MIN_SAMPLES; i++) p.recordRun(1, 5_000);
  assert.equal(created, 0);
  assert.equal(p.choose(1, false), undefined, 'the thread is busy: the run waits behind its runs');
  const s = p.choose(1, true);
  assert.ok(s instanceof InlineSession);
  assert.equal(created, 1);
  assert.equal(p.choose(1, true), s);
  // 64 items scaled from 5 µs each: 320 µs, more than the 60 µs default crossing.
  assert.equal(p.choose(64, true), undefined);
  // Runs that get long move the model back to the thread.
  for (let i = 0; i < 32; i++) p.recordRun(1, 2_000_000);
  assert.equal(p.choose(1, true), undefined);
  p.close();
  for (let i = 0; i < 32; i++) p.recordRun(1, 1_000);
  assert.equal(p.choose(1, true), undefined, 'closed');
  assert.equal(created, 1);
});

test('InlinePolicy auto: while the event loop is saturated a single request stays on the thread and a batch of several still goes inline', () => {
  let busy = false;
  const p = new InlinePolicy('auto', () => new InlineSession(modelFile, cpuOptions), undefined, undefined, () => busy, new RunOverlap());
  for (let i = 0; i < MIN_SAMPLES; i++) p.recordRun(1, 5_000);
  assert.ok(p.choose(1, true, 1) instanceof InlineSession, 'the loop has slack');
  busy = true;
  assert.equal(p.choose(1, true, 1), undefined, 'saturated: one request goes to the thread, which runs on another core');
  assert.ok(p.choose(1, true, 4) instanceof InlineSession, 'saturated: a batch of four shares the crossing it saves');
  busy = false;
  assert.ok(p.choose(1, true, 1) instanceof InlineSession);
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

test('RunOverlap: a run handed over while another is in flight, or a batch of several, ends the reading and restarts the count', () => {
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

test('InlinePolicy auto: while requests come one at a time, a single request goes inline when predicted within LIGHT_INLINE_NS, saturated loop or not', () => {
  const { overlap, oneByOne } = overlapOnClock();
  const p = new InlinePolicy('auto', () => new InlineSession(modelFile, cpuOptions), undefined, undefined, () => true, overlap);
  // 200 µs a run: above the 60 µs default crossing, within LIGHT_INLINE_NS.
  for (let i = 0; i < MIN_SAMPLES; i++) p.recordRun(1, 200_000);
  assert.ok(p.thresholdNs < 200_000);
  assert.equal(p.choose(1, true), undefined, 'not known to come one at a time: the threshold and the saturated loop rule apply');
  oneByOne(SEQUENTIAL_RUNS);
  const s = p.choose(1, true);
  assert.ok(s instanceof InlineSession, 'one at a time: nothing else for the loop to do while the run would be on the thread');
  assert.equal(p.choose(1, false), undefined, 'the thread still has runs in flight: the run waits behind them');
  // 64 items scaled from 200 µs each: far above LIGHT_INLINE_NS.
  assert.equal(p.choose(64, true), undefined);
  assert.ok(64 * 200_000 > LIGHT_INLINE_NS);
  // A batch of several requests shows they came together: the reading ends, and the batch's own prediction is over the threshold.
  for (let i = 0; i < MIN_SAMPLES; i++) p.recordRun(2, 300_000);
  assert.equal(p.choose(2, true, 2), undefined);
  assert.equal(overlap.oneAtATime, false);
  assert.equal(p.choose(1, true), undefined, 'the single request is back under the threshold rule');
  p.close();
});

test('InlinePolicy auto: a tiny model under a saturated loop goes inline while requests come one at a time, to the thread once they overlap', () => {
  const { overlap, oneByOne } = overlapOnClock();
  const p = new InlinePolicy('auto', () => new InlineSession(modelFile, cpuOptions), undefined, undefined, () => true, overlap);
  for (let i = 0; i < MIN_SAMPLES; i++) p.recordRun(1, 5_000);
  assert.equal(p.choose(1, true), undefined, 'saturated, and nothing known about the requests');
  oneByOne(SEQUENTIAL_RUNS);
  assert.ok(p.choose(1, true) instanceof InlineSession);
  overlap.started();
  overlap.started();
  assert.equal(p.choose(1, true), undefined, 'runs overlapped on the threads: the loop has other requests to serve');
  p.close();
});

test('eventLoopSaturated: a loop blocked for a whole window reads as saturated, an idle one does not', async () => {
  const spin = (ms: number): void => {
    const end = performance.now() + ms;
    while (performance.now() < end);
  };
  eventLoopSaturated(); // starts a window if one is due
  await new Promise((r) => setTimeout(r, LOOP_WINDOW_MS * 3));
  eventLoopSaturated(); // the window that was mostly idle closes here
  spin(LOOP_WINDOW_MS * 3);
  assert.equal(eventLoopSaturated(), true);
  await new Promise((r) => setTimeout(r, LOOP_WINDOW_MS * 3));
  assert.equal(eventLoopSaturated(), false);
});

test('InlinePolicy: a session that cannot be created leaves the runs on the thread and says why', () => {
  const failures: string[] = [];
  const p = new InlinePolicy(
    'auto',
    () => new InlineSession(join(tmp.path, 'missing.onnx'), cpuOptions),
    undefined,
    (err) => failures.push(err.message),
    () => false,
    new RunOverlap(),
  );
  for (let i = 0; i < MIN_SAMPLES; i++) p.recordRun(1, 1_000);
  assert.equal(p.choose(1, true), undefined);
  assert.equal(p.choose(1, true), undefined);
  assert.equal(failures.length, 1);
  assert.match(failures[0]!, /missing\.onnx|No such file|Load model/i);
});

test('InlineSession: runs synchronously and returns onnxruntime tensors', () => {
  const s = new InlineSession(modelFile, cpuOptions);
  const T = s.Tensor;
  const out = s.run(
    { INPUT0: new T('float32', Float32Array.from([1, 2, 3, 4]), [1, 4]), INPUT1: new T('float32', Float32Array.from([1, 1, 1, 1]), [1, 4]) },
    ['OUTPUT1'],
  );
  assert.deepEqual([...(out['OUTPUT1']!.data as Float32Array)], [0, 1, 2, 3]);
  assert.deepEqual(out['OUTPUT1']!.dims, [1, 4]);
  assert.equal(out['OUTPUT0'], undefined);
  assert.ok(s.createMs >= 0);
  s.release();
});
