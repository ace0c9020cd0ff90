import { test } from 'node:test';
import assert from 'node:assert/strict';
import { NereidError } from '../../../src/errors.js';
import {
  DEFAULT_INLINE_INTRA_OP_THREADS,
  buildSessionOptions,
  inlineIntraOpThreads,
  machineIntraOpThreads,
  spinWaitMicros,
  wideInlineOptions,
} from '../../../src/backends/onnxruntime/session-options.js';
import { DEFAULT_SPIN_WAIT_MICROS } from '../../../src/backends/idle-wait.js';
import { ModelInstanceGroup_Kind } from '../../../src/gen/model_config_pb.js';
import { config } from './fixtures.js';

const cpu = { kind: 'CPU' as const, deviceId: 0 };
const params = (p: Record<string, string>) =>
  Object.fromEntries(Object.entries(p).map(([k, v]) => [k, { stringValue: v }]));

test('defaults: one intra-op thread, spinning off, all graph optimizations, sequential, CPU', () => {
  const o = buildSessionOptions('m', config({}), {}, cpu);
  assert.equal(o.intraOpNumThreads, 1);
  assert.equal(o.interOpNumThreads, undefined);
  assert.equal(o.graphOptimizationLevel, 'all');
  assert.equal(o.executionMode, 'sequential');
  assert.deepEqual(o.executionProviders, ['cpu']);
  assert.deepEqual(o.extra, { 'session.intra_op.allow_spinning': '0' });
});

test("Triton's ORT parameters map onto session options", () => {
  const o = buildSessionOptions(
    'm',
    config({
      parameters: params({
        intra_op_thread_count: '3',
        inter_op_thread_count: '2',
        execution_mode: '1',
        enable_mem_arena: '0',
        enable_mem_pattern: '1',
        'session.intra_op.allow_spinning': '1',
        'session.use_device_allocator_for_initializers': '1',
      }),
    }),
    {},
    cpu,
  );
  assert.equal(o.intraOpNumThreads, 3);
  assert.equal(o.interOpNumThreads, 2);
  assert.equal(o.executionMode, 'parallel');
  assert.equal(o.enableCpuMemArena, false);
  assert.equal(o.enableMemPattern, true);
  assert.deepEqual(o.extra, {
    'session.intra_op.allow_spinning': '1',
    'session.use_device_allocator_for_initializers': '1',
  });
});

test('intra_op_thread_count 0 leaves the choice to onnxruntime; the backend config sets the default', () => {
  assert.equal(
    buildSessionOptions('m', config({ parameters: params({ intra_op_thread_count: '0' }) }), {}, cpu).intraOpNumThreads,
    undefined,
  );
  assert.equal(buildSessionOptions('m', config({}), { intra_op_thread_count: '2' }, cpu).intraOpNumThreads, 2);
  assert.equal(
    buildSessionOptions(
      'm',
      config({ parameters: params({ intra_op_thread_count: '4' }) }),
      { intra_op_thread_count: '2' },
      cpu,
    ).intraOpNumThreads,
    4,
  );
});

test('optimization.graph.level maps like Triton: -1 basic, 1 extended, 2 disabled, else all', () => {
  const level = (l: number) =>
    buildSessionOptions('m', config({ optimization: { graph: { level: l } } }), {}, cpu).graphOptimizationLevel;
  assert.equal(level(-1), 'basic');
  assert.equal(level(1), 'extended');
  assert.equal(level(2), 'disabled');
  assert.equal(level(0), 'all');
  assert.equal(level(5), 'all');
});

test('GPU placement asks for the CUDA provider on the instance device', () => {
  const o = buildSessionOptions('m', config({}), {}, { kind: 'GPU', deviceId: 3 });
  assert.deepEqual(o.executionProviders, [{ name: 'cuda', deviceId: 3 }, 'cpu']);
});

test('bad values are configuration errors naming the parameter', () => {
  const bad = (p: Record<string, string>) => () => buildSessionOptions('m', config({ parameters: params(p) }), {}, cpu);
  assert.throws(
    bad({ execution_mode: '2' }),
    (e: unknown) =>
      e instanceof NereidError && e.code === 'NRD_CONFIG' && /execution_mode are 0 or 1 but got 2/.test(e.message),
  );
  assert.throws(
    bad({ intra_op_thread_count: 'many' }),
    /parameter 'intra_op_thread_count' must be an integer, got 'many'/,
  );
  assert.throws(bad({ inter_op_thread_count: '-1' }), /'inter_op_thread_count' must be >= 0/);
});

test('spin_wait_microseconds: the model parameter wins over the backend config, which wins over the default', () => {
  assert.equal(spinWaitMicros('m', config({}), {}), DEFAULT_SPIN_WAIT_MICROS);
  assert.equal(spinWaitMicros('m', config({}), { spin_wait_microseconds: '0' }), 0);
  assert.equal(
    spinWaitMicros('m', config({ parameters: params({ spin_wait_microseconds: '250' }) }), {
      spin_wait_microseconds: '0',
    }),
    250,
  );
  for (const bad of ['-1', 'fast', '2000000']) {
    assert.throws(
      () => spinWaitMicros('m', config({ parameters: params({ spin_wait_microseconds: bad }) }), {}),
      (err: unknown) =>
        err instanceof NereidError &&
        err.message.includes("'spin_wait_microseconds'") &&
        err.message.includes("model 'm'"),
    );
  }
});

test('machineIntraOpThreads shares the CPU budget out among the KIND_CPU instances, at least one each', () => {
  const groups = (...gs: Array<{ kind: ModelInstanceGroup_Kind; count: number; passive?: boolean }>) =>
    config({ instanceGroup: gs });
  const CPU = ModelInstanceGroup_Kind.CPU;
  assert.equal(machineIntraOpThreads(groups({ kind: CPU, count: 1 }), 8), 8);
  assert.equal(machineIntraOpThreads(groups({ kind: CPU, count: 2 }), 8), 4);
  assert.equal(machineIntraOpThreads(groups({ kind: CPU, count: 2 }, { kind: CPU, count: 1 }), 8), 2);
  // Passive instances take no requests; GPU instances run elsewhere.
  assert.equal(
    machineIntraOpThreads(
      groups(
        { kind: CPU, count: 1 },
        { kind: CPU, count: 3, passive: true },
        { kind: ModelInstanceGroup_Kind.GPU, count: 1 },
      ),
      8,
    ),
    8,
  );
  // A 1.5-core cgroup quota and two instances: one each.
  assert.equal(machineIntraOpThreads(groups({ kind: CPU, count: 2 }), 1.5), 1);
  assert.equal(machineIntraOpThreads(groups({ kind: CPU, count: 1 }), 2.5), 2);
});

test('buildSessionOptions: the default intra-op count applies only ' +
  'where neither the model nor the backend config names one', () => {
  assert.equal(buildSessionOptions('m', config({}), {}, cpu, 6).intraOpNumThreads, 6);
  assert.equal(buildSessionOptions('m', config({}), { intra_op_thread_count: '2' }, cpu, 6).intraOpNumThreads, 2);
  assert.equal(
    buildSessionOptions('m', config({ parameters: params({ intra_op_thread_count: '3' }) }), {}, cpu, 6)
      .intraOpNumThreads,
    3,
  );
});

test('inlineIntraOpThreads: 2 with two cores or more to the process, 1 (no wide session) ' +
  'under that; the parameter wins; an intra_op_thread_count of its own means none', () => {
  assert.equal(DEFAULT_INLINE_INTRA_OP_THREADS, 2);
  assert.equal(inlineIntraOpThreads('m', config({}), {}, 16), 2);
  assert.equal(inlineIntraOpThreads('m', config({}), {}, 2), 2);
  assert.equal(inlineIntraOpThreads('m', config({}), {}, 1.5), 1, 'a quota of one and a half cores');
  assert.equal(inlineIntraOpThreads('m', config({}), {}, 1), 1);
  assert.equal(inlineIntraOpThreads('m', config({}), { inline_intra_op_thread_count: '4' }, 16), 4);
  assert.equal(
    inlineIntraOpThreads(
      'm',
      config({ parameters: params({ inline_intra_op_thread_count: '3' }) }),
      { inline_intra_op_thread_count: '4' },
      16,
    ),
    3,
  );
  assert.equal(
    inlineIntraOpThreads('m', config({ parameters: params({ inline_intra_op_thread_count: '1' }) }), {}, 16),
    1,
  );
  assert.equal(inlineIntraOpThreads('m', config({ parameters: params({ intra_op_thread_count: '2' }) }), {}, 16), 1);
  assert.equal(inlineIntraOpThreads('m', config({}), { intra_op_thread_count: '0' }, 16), 1);
  assert.equal(
    inlineIntraOpThreads(
      'm',
      config({ parameters: params({ intra_op_thread_count: '2', inline_intra_op_thread_count: '2' }) }),
      {},
      16,
    ),
    2,
  );
  for (const bad of ['0', '-1', '257', 'two', '']) {
    assert.throws(
      () => inlineIntraOpThreads('m', config({ parameters: params({ inline_intra_op_thread_count: bad }) }), {}, 16),
      (e: unknown) =>
        e instanceof NereidError &&
        e.message.includes("model 'm'") &&
        e.message.includes('inline_intra_op_thread_count'),
      `'${bad}' accepted`,
    );
  }
});

test("wideInlineOptions: the model's options with the wide thread count, spinning on for the helpers' " +
  "wait after a run, or stopped at each run's end; the model's own session.* entries win", () => {
  const base = buildSessionOptions('m', config({}), {}, cpu);
  const o = wideInlineOptions(base, config({}), 2, 300);
  assert.equal(o.intraOpNumThreads, 2);
  assert.deepEqual(o.extra, {
    'session.intra_op.allow_spinning': '1',
    'session.intra_op.spin_duration_us': '300',
    'session.force_spinning_stop': '0',
  });
  assert.equal(o.graphOptimizationLevel, base.graphOptimizationLevel);
  assert.deepEqual(o.executionProviders, base.executionProviders);
  assert.equal(base.intraOpNumThreads, 1, 'the one-thread options are left as they were');
  assert.deepEqual(base.extra, { 'session.intra_op.allow_spinning': '0' });
  assert.deepEqual(wideInlineOptions(base, config({}), 3, 0).extra, {
    'session.intra_op.allow_spinning': '1',
    'session.force_spinning_stop': '1',
  });
  const own = config({
    parameters: params({ 'session.intra_op.spin_duration_us': '50', 'session.intra_op.allow_spinning': '0' }),
  });
  const mine = wideInlineOptions(buildSessionOptions('m', own, {}, cpu), own, 2, 300);
  assert.deepEqual(mine.extra, {
    'session.intra_op.allow_spinning': '0',
    'session.intra_op.spin_duration_us': '50',
    'session.force_spinning_stop': '0',
  });
});
