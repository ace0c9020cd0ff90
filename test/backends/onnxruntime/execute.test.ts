import { test } from 'node:test';
import assert from 'node:assert/strict';
import { create } from '@bufbuild/protobuf';
import {
  DataType,
  ModelParameterSchema,
  ModelSequenceBatching_Control_Kind,
} from '../../../src/gen/model_config_pb.js';
import { NereidError } from '../../../src/errors.js';
import { createOnnxRuntimeBackend } from '../../../src/backends/onnxruntime/index.js';
import type { OnnxRuntimeInstance } from '../../../src/backends/onnxruntime/instance.js';
import type { BackendInstance, BackendResponse } from '../../../src/backends/backend.js';
import {
  OnnxModelBuilder,
  buildAddSubModel,
  buildIdentityModel,
  buildMlp,
  mlpForward,
  seededRandom,
} from '../../helpers/onnx-builder.js';
import { DATATYPES, configEnumOf, type Datatype } from '../../../src/tensor/datatype.js';
import {
  bytesOf,
  decodeBytesElements,
  encodeBytesElements,
  makeTensor,
  type Tensor,
} from '../../../src/tensor/tensor.js';
import { RecordingTimer, config, instanceContext, modelContext, request, suiteModels, writeModel } from './fixtures.js';
import { runOverlap } from '../../../src/backends/onnxruntime/policies/inline.js';
import { inlineIntraOpThreads } from '../../../src/backends/onnxruntime/session-options.js';

const backend = createOnnxRuntimeBackend();
const suite = suiteModels();

async function load(
  mode: 'off' | 'on' | 'auto',
  name: string,
  builder: OnnxModelBuilder,
  cfgInit: Parameters<typeof config>[0],
  /** Loaded as under a memory budget (the core hears of memory the model takes after its load). */
  paged = false,
) {
  const dirName = `${name}_${mode}`;
  const modelDir = await writeModel(suite.dir, dirName, builder);
  const cfg = config({ name, ...cfgInit });
  cfg.parameters['inline_execution'] = create(ModelParameterSchema, { stringValue: mode });
  const ctx = { ...modelContext(modelDir, cfg), ...(paged ? { memoryGrew: () => undefined } : {}) };
  const model = await backend.loadModel(ctx);
  const instance = await model.createInstance(instanceContext(ctx));
  suite.keep(model, instance);
  return instance;
}

function ok(r: BackendResponse | undefined): readonly Tensor[] {
  assert.ok(r, 'missing response');
  if (r.error) assert.fail(`unexpected error response: ${r.error.message}`);
  return r.outputs!;
}

function f32(t: Tensor): number[] {
  return [...new Float32Array(t.data.slice().buffer)];
}

function i32(t: Tensor): number[] {
  return [...new Int32Array(t.data.slice().buffer)];
}

test('a closed instance reports not ready', async () => {
  const modelDir = await writeModel(suite.dir, 'closing', buildAddSubModel('FP32', 2));
  const ctx = modelContext(
    modelDir,
    config({
      name: 'closing',
      maxBatchSize: 2,
      input: [
        { name: 'INPUT0', dataType: DataType.TYPE_FP32, dims: [2n] },
        { name: 'INPUT1', dataType: DataType.TYPE_FP32, dims: [2n] },
      ],
      output: [{ name: 'OUTPUT0', dataType: DataType.TYPE_FP32, dims: [2n] }],
    }),
  );
  const model = await backend.loadModel(ctx);
  const inst = await model.createInstance(instanceContext(ctx));
  assert.equal(await inst.isReady!(), true);
  await inst.close();
  assert.equal(await inst.isReady!(), false);
  await model.close();
});

/**
 * Every test in this loop runs with the runs on the session thread (off) and
 * on the event loop (on): the results, the timer and the errors must agree.
 */
for (const mode of ['off', 'on'] as const) {
  test(`a single request runs and the timer sees both stages [inline_execution ${mode}]`, async () => {
    const inst = await load(mode, 'simple', buildAddSubModel('INT32', 16), {
      maxBatchSize: 8,
      input: [
        { name: 'INPUT0', dataType: DataType.TYPE_INT32, dims: [16n] },
        { name: 'INPUT1', dataType: DataType.TYPE_INT32, dims: [16n] },
      ],
      output: [
        { name: 'OUTPUT0', dataType: DataType.TYPE_INT32, dims: [16n] },
        { name: 'OUTPUT1', dataType: DataType.TYPE_INT32, dims: [16n] },
      ],
    });
    const a = Int32Array.from({ length: 16 }, (_, i) => i);
    const b = Int32Array.from({ length: 16 }, () => 1);
    const timer = new RecordingTimer();
    const [res] = await inst.execute(
      [
        request(
          'r1',
          [makeTensor('INPUT0', 'INT32', [1, 16], bytesOf(a)), makeTensor('INPUT1', 'INT32', [1, 16], bytesOf(b))],
          ['OUTPUT0', 'OUTPUT1'],
        ),
      ],
      timer,
    );
    const [o0, o1] = ok(res);
    assert.equal(o0!.name, 'OUTPUT0');
    assert.deepEqual(o0!.shape, [1, 16]);
    assert.equal(o0!.datatype, 'INT32');
    assert.deepEqual(i32(o0!), [...a].map((x) => x + 1));
    assert.deepEqual(i32(o1!), [...a].map((x) => x - 1));
    assert.equal(timer.inputs, 1);
    assert.equal(timer.infers, 1);
    // The caller's input bytes are untouched (copied, never transferred away).
    assert.equal(a.length, 16);
    assert.equal(a[3], 3);
  });

  test(`several requests run as one batch and each gets its own rows as ` +
    `views of one output buffer [inline_execution ${mode}]`, async () => {
    const { builder, weights } = buildMlp([10, 32, 1], 5, {
      inputName: 'input_features',
      outputName: 'fraud_probability',
      outputActivation: 'sigmoid',
    });
    const inst = await load(mode, 'mlp_batch', builder, {
      maxBatchSize: 64,
      input: [{ name: 'input_features', dataType: DataType.TYPE_FP32, dims: [10n] }],
      output: [{ name: 'fraud_probability', dataType: DataType.TYPE_FP32, dims: [1n] }],
    });
    const rand = seededRandom(11);
    const sizes = [1, 3, 2];
    const inputs = sizes.map((bs) => Float32Array.from({ length: bs * 10 }, () => rand() * 2 - 1));
    const timer = new RecordingTimer();
    const responses = await inst.execute(
      sizes.map((bs, i) =>
        request(
          `r${i}`,
          [makeTensor('input_features', 'FP32', [bs, 10], bytesOf(inputs[i]!))],
          ['fraud_probability'],
          bs,
        ),
      ),
      timer,
    );
    assert.equal(responses.length, 3);
    const buffers = new Set<ArrayBufferLike>();
    responses.forEach((r, i) => {
      const [out] = ok(r);
      assert.deepEqual(out!.shape, [sizes[i], 1]);
      const expected = mlpForward(weights, inputs[i]!, sizes[i]!);
      f32(out!).forEach((v, k) =>
        assert.ok(Math.abs(v - expected[k]!) < 1e-5, `request ${i} row ${k}: ${v} vs ${expected[k]}`),
      );
      buffers.add(out!.data.buffer);
    });
    assert.equal(buffers.size, 1, 'outputs should be slices of the batch output, not copies');
    assert.equal(timer.inputs, 1);
    assert.equal(timer.infers, 1);
  });

  test(`only the requested outputs are returned, in the order requested [inline_execution ${mode}]`, async () => {
    const inst = await load(mode, 'simple_subset', buildAddSubModel('FP32', 4), {
      maxBatchSize: 4,
      input: [
        { name: 'INPUT0', dataType: DataType.TYPE_FP32, dims: [4n] },
        { name: 'INPUT1', dataType: DataType.TYPE_FP32, dims: [4n] },
      ],
      output: [
        { name: 'OUTPUT0', dataType: DataType.TYPE_FP32, dims: [4n] },
        { name: 'OUTPUT1', dataType: DataType.TYPE_FP32, dims: [4n] },
      ],
    });
    const x = bytesOf(Float32Array.from([1, 2, 3, 4]));
    const y = bytesOf(Float32Array.from([4, 3, 2, 1]));
    const ins = (): Tensor[] => [makeTensor('INPUT0', 'FP32', [1, 4], x), makeTensor('INPUT1', 'FP32', [1, 4], y)];
    const [r1, r2] = await inst.execute(
      [request('a', ins(), ['OUTPUT1']), request('b', ins(), ['OUTPUT1', 'OUTPUT0'])],
      new RecordingTimer(),
    );
    assert.deepEqual(ok(r1).map((t) => t.name), ['OUTPUT1']);
    assert.deepEqual(f32(ok(r1)[0]!), [-3, -1, 1, 3]);
    assert.deepEqual(ok(r2).map((t) => t.name), ['OUTPUT1', 'OUTPUT0']);
    assert.deepEqual(f32(ok(r2)[1]!), [5, 5, 5, 5]);
  });

  /** Two elements of every datatype, as raw bytes. */
  function sample(dt: Datatype, seed: number): Uint8Array {
    switch (dt) {
      case 'BYTES':
        return encodeBytesElements([`s${seed}`, 'ünïcødé ✓']);
      case 'BOOL':
        return Uint8Array.from([1, 0]);
      case 'FP16':
        return bytesOf(Uint16Array.from([0x3c00, 0xc000 + seed])); // 1.0, -2.x
      case 'FP32':
        return bytesOf(Float32Array.from([1.5, -seed]));
      case 'FP64':
        return bytesOf(Float64Array.from([Math.PI, -seed]));
      case 'INT64':
        return bytesOf(BigInt64Array.from([-(2n ** 40n), BigInt(seed)]));
      case 'UINT64':
        return bytesOf(BigUint64Array.from([2n ** 63n, BigInt(seed)]));
      default: {
        const out = new Uint8Array(2 * (DATATYPES.find((d) => d.name === dt)!.byteSize));
        for (let i = 0; i < out.length; i++) out[i] = (i * 37 + seed * 11 + 200) & 0xff;
        return out;
      }
    }
  }

  // Under Node 24 (Float16Array) FP16 models cannot run inline: a test below checks they are refused.
  const IDENTITY_TYPES = DATATYPES.map((d) => d.name).filter(
    (d) => d !== 'BF16' && !(d === 'FP16' && mode === 'on' && 'Float16Array' in globalThis),
  );

  test(`every datatype travels through Identity unchanged, batched ` +
    `across requests [inline_execution ${mode}]`, async () => {
    const specs = IDENTITY_TYPES.map((dt) => ({ name: `IN_${dt}`, datatype: dt, shape: ['batch', 2] }));
    const inst = await load(mode, 'identity_all', buildIdentityModel(specs), {
      maxBatchSize: 4,
      input: specs.map((s) => ({ name: s.name, dataType: configEnumOf(s.datatype), dims: [2n] })),
      output: specs.map((s, i) => ({ name: `OUTPUT${i}`, dataType: configEnumOf(s.datatype), dims: [2n] })),
    });
    const outputs = specs.map((_, i) => `OUTPUT${i}`);
    const reqs = [1, 2].map((seed) =>
      request(
        `r${seed}`,
        specs.map((s) => makeTensor(s.name, s.datatype, [1, 2], sample(s.datatype, seed))),
        outputs,
      ),
    );
    const responses = await inst.execute(reqs, new RecordingTimer());
    responses.forEach((r, k) => {
      const outs = ok(r);
      specs.forEach((s, i) => {
        const t = outs[i]!;
        assert.equal(t.datatype, s.datatype, `${s.datatype} datatype`);
        assert.deepEqual(t.shape, [1, 2], `${s.datatype} shape`);
        if (s.datatype === 'BYTES') {
          assert.deepEqual(
            decodeBytesElements(t.data).map((e) => Buffer.from(e).toString()),
            [`s${k + 1}`, 'ünïcødé ✓'],
          );
        } else {
          assert.deepEqual(Buffer.from(t.data), Buffer.from(sample(s.datatype, k + 1)), `${s.datatype} bytes`);
        }
      });
    });
  });

  test(`a model without batching runs requests one by one [inline_execution ${mode}]`, async () => {
    const inst = await load(mode, 'nobatch', buildAddSubModel('INT32', 3, null), {
      maxBatchSize: 0,
      input: [
        { name: 'INPUT0', dataType: DataType.TYPE_INT32, dims: [3n] },
        { name: 'INPUT1', dataType: DataType.TYPE_INT32, dims: [3n] },
      ],
      output: [{ name: 'OUTPUT0', dataType: DataType.TYPE_INT32, dims: [3n] }],
    });
    const mk = (v: number) =>
      request(
        `r${v}`,
        [
          makeTensor('INPUT0', 'INT32', [3], bytesOf(Int32Array.from([v, v, v]))),
          makeTensor('INPUT1', 'INT32', [3], bytesOf(Int32Array.from([1, 2, 3]))),
        ],
        ['OUTPUT0'],
      );
    const timer = new RecordingTimer();
    const [a, b] = await inst.execute([mk(10), mk(20)], timer);
    assert.deepEqual(ok(a)[0]!.shape, [3]);
    assert.deepEqual(i32(ok(a)[0]!), [11, 12, 13]);
    assert.deepEqual(i32(ok(b)[0]!), [21, 22, 23]);
    assert.equal(timer.inputs, 1);
    assert.equal(timer.infers, 1);
  });

  test(`requests whose shapes differ are not merged, and each still ` +
    `gets its result [inline_execution ${mode}]`, async () => {
    const b = new OnnxModelBuilder();
    b.input('x', 'FP32', ['batch', 'len']).output('y', 'FP32', ['batch', 'len']);
    b.node('Relu', ['x'], ['y']);
    const inst = await load(mode, 'ragged', b, {
      maxBatchSize: 8,
      input: [{ name: 'x', dataType: DataType.TYPE_FP32, dims: [-1n] }],
      output: [{ name: 'y', dataType: DataType.TYPE_FP32, dims: [-1n] }],
    });
    const [r1, r2] = await inst.execute(
      [
        request('a', [makeTensor('x', 'FP32', [1, 2], bytesOf(Float32Array.from([-1, 2])))], ['y']),
        request('b', [makeTensor('x', 'FP32', [1, 3], bytesOf(Float32Array.from([3, -4, 5])))], ['y']),
      ],
      new RecordingTimer(),
    );
    assert.deepEqual(ok(r1)[0]!.shape, [1, 2]);
    assert.deepEqual(f32(ok(r1)[0]!), [0, 2]);
    assert.deepEqual(ok(r2)[0]!.shape, [1, 3]);
    assert.deepEqual(f32(ok(r2)[0]!), [3, 0, 5]);
  });

  test(`reshape: dims [1] with reshape [] feeds the model [batch] ` +
    `and answers [batch, 1] [inline_execution ${mode}]`, async () => {
    const b = new OnnxModelBuilder();
    b.input('x', 'FP32', ['batch']).output('y', 'FP32', ['batch']);
    b.node('Neg', ['x'], ['y']);
    const inst = await load(mode, 'scalar', b, {
      maxBatchSize: 4,
      input: [{ name: 'x', dataType: DataType.TYPE_FP32, dims: [1n], reshape: { shape: [] } }],
      output: [{ name: 'y', dataType: DataType.TYPE_FP32, dims: [1n], reshape: { shape: [] } }],
    });
    const [r1, r2] = await inst.execute(
      [
        request('a', [makeTensor('x', 'FP32', [2, 1], bytesOf(Float32Array.from([1, 2])))], ['y'], 2),
        request('b', [makeTensor('x', 'FP32', [1, 1], bytesOf(Float32Array.from([3])))], ['y'], 1),
      ],
      new RecordingTimer(),
    );
    assert.deepEqual(ok(r1)[0]!.shape, [2, 1]);
    assert.deepEqual(f32(ok(r1)[0]!), [-1, -2]);
    assert.deepEqual(ok(r2)[0]!.shape, [1, 1]);
    assert.deepEqual(f32(ok(r2)[0]!), [-3]);
  });

  test(`a run onnxruntime refuses makes execute reject with a model ` +
    `execution error [inline_execution ${mode}]`, async () => {
    const b = new OnnxModelBuilder();
    b.input('A', 'FP32', ['batch', 'n']).input('B', 'FP32', ['batch', 'm']).output('C', 'FP32', ['batch', 'k']);
    b.node('Add', ['A', 'B'], ['C']);
    const inst = await load(mode, 'badrun', b, {
      maxBatchSize: 4,
      input: [
        { name: 'A', dataType: DataType.TYPE_FP32, dims: [-1n] },
        { name: 'B', dataType: DataType.TYPE_FP32, dims: [-1n] },
      ],
      output: [{ name: 'C', dataType: DataType.TYPE_FP32, dims: [-1n] }],
    });
    const bad = [
      makeTensor('A', 'FP32', [1, 3], bytesOf(new Float32Array(3))),
      makeTensor('B', 'FP32', [1, 2], bytesOf(new Float32Array(2))),
    ];
    await assert.rejects(
      inst.execute([request('x', bad, ['C'])], new RecordingTimer()),
      (e: unknown) =>
        e instanceof NereidError && e.code === 'NRD_MODEL_EXECUTION' && /model 'badrun' failed/.test(e.message),
    );
    // The instance survives a failed run.
    const good = [
      makeTensor('A', 'FP32', [1, 2], bytesOf(new Float32Array(2).fill(1))),
      makeTensor('B', 'FP32', [1, 2], bytesOf(new Float32Array(2).fill(2))),
    ];
    const [r] = await inst.execute([request('y', good, ['C'])], new RecordingTimer());
    assert.deepEqual(f32(ok(r)[0]!), [3, 3]);
    assert.equal(await inst.isReady!(), true);
  });

  test(`model inputs outside the config (sequence control inputs) pass ` +
    `through to the model [inline_execution ${mode}]`, async () => {
    const b = new OnnxModelBuilder();
    b.input('x', 'INT32', ['batch', 2]).input('START', 'INT32', ['batch', 1]).output('y', 'INT32', ['batch', 2]);
    b.node('Add', ['x', 'START'], ['y']);
    const inst = await load(mode, 'sequence', b, {
      maxBatchSize: 2,
      input: [{ name: 'x', dataType: DataType.TYPE_INT32, dims: [2n] }],
      output: [{ name: 'y', dataType: DataType.TYPE_INT32, dims: [2n] }],
      schedulingChoice: {
        case: 'sequenceBatching',
        value: {
          controlInput: [
            {
              name: 'START',
              control: [{ kind: ModelSequenceBatching_Control_Kind.CONTROL_SEQUENCE_START, int32FalseTrue: [0, 1] }],
            },
          ],
        },
      },
    });
    const [r] = await inst.execute(
      [
        request(
          's',
          [
            makeTensor('x', 'INT32', [1, 2], bytesOf(Int32Array.from([5, 6]))),
            makeTensor('START', 'INT32', [1, 1], bytesOf(Int32Array.from([1]))),
          ],
          ['y'],
        ),
      ],
      new RecordingTimer(),
    );
    assert.deepEqual(i32(ok(r)[0]!), [6, 7]);
  });

}

test('the event loop keeps turning while a session runs (the session is on its own thread)', async () => {
  // Big enough that a run takes far longer than one event-loop turn.
  const { builder } = buildMlp([512, 2048, 2048, 256], 3);
  const inst = await load('auto', 'busy', builder, {
    maxBatchSize: 64,
    input: [{ name: 'input', dataType: DataType.TYPE_FP32, dims: [512n] }],
    output: [{ name: 'output', dataType: DataType.TYPE_FP32, dims: [256n] }],
  });
  const x = bytesOf(new Float32Array(64 * 512).fill(0.5));
  // Count event-loop turns until the run settles. A run on the main thread
  // would block the loop for its whole duration: at most a turn or two.
  let turns = 0;
  let settled = false;
  const spin = (): void => {
    if (settled) return;
    turns++;
    setImmediate(spin);
  };
  setImmediate(spin);
  const [r] = await inst.execute(
    [request('big', [makeTensor('input', 'FP32', [64, 512], x)], ['output'], 64)],
    new RecordingTimer(),
  );
  settled = true;
  assert.deepEqual(ok(r)[0]!.shape, [64, 256]);
  assert.ok(turns >= 10, `only ${turns} event-loop turns during the run: it blocked the loop`);
});

/** The instance's count of runs made on the event loop. */
function inlineRuns(inst: BackendInstance): number {
  return (inst as OnnxRuntimeInstance).inlineRuns;
}

function tinyRequest(i: number) {
  return request(
    `t${i}`,
    [
      makeTensor('INPUT0', 'FP32', [1, 4], bytesOf(Float32Array.from([i, 1, 2, 3]))),
      makeTensor('INPUT1', 'FP32', [1, 4], bytesOf(Float32Array.from([1, 1, 1, 1]))),
    ],
    ['OUTPUT0'],
  );
}

const tinyConfig = {
  maxBatchSize: 8,
  input: [
    { name: 'INPUT0', dataType: DataType.TYPE_FP32, dims: [4n] },
    { name: 'INPUT1', dataType: DataType.TYPE_FP32, dims: [4n] },
  ],
  output: [{ name: 'OUTPUT0', dataType: DataType.TYPE_FP32, dims: [4n] }],
};

test('inline_execution on: every run is made on the event loop, timed in both stages', async () => {
  const inst = await load('on', 'tiny_on', buildAddSubModel('FP32', 4), tinyConfig);
  for (let i = 0; i < 5; i++) {
    let turned = false;
    const t = setImmediate(() => (turned = true));
    const timer = new RecordingTimer();
    const pending = inst.execute([tinyRequest(i)], timer);
    // The run is over before execute returns: no event-loop turn, and the timer already has both stages.
    assert.equal(timer.infers, 1);
    const [r] = await pending;
    clearImmediate(t);
    assert.equal(turned, false);
    assert.deepEqual(f32(ok(r)[0]!), [i + 1, 2, 3, 4]);
    assert.ok(timer.inputAt[0]! <= timer.inferAt[0]!);
  }
  assert.equal(inlineRuns(inst), 5);
});

test('inline_execution off: no run is made on the event loop', async () => {
  const inst = await load('off', 'tiny_off', buildAddSubModel('FP32', 4), tinyConfig);
  for (let i = 0; i < 30; i++) await inst.execute([tinyRequest(i)], new RecordingTimer());
  assert.equal(inlineRuns(inst), 0);
});

test('inline_execution auto: a small model moves to the event loop ' +
  'once its runs are timed shorter than the crossing', async () => {
  // Runs one after another: once SEQUENTIAL_RUNS of them were on the thread, requests count as one at a time.
  const inst = await load('auto', 'tiny_auto', buildAddSubModel('FP32', 4), tinyConfig);
  for (let i = 0; i < 300; i++) {
    const [r] = await inst.execute([tinyRequest(i)], new RecordingTimer());
    assert.deepEqual(f32(ok(r)[0]!), [i + 1, 2, 3, 4]);
  }
  // The first runs are timed on the thread; a run of a 4-element Add takes
  // microseconds, a crossing tens of them.
  const n = inlineRuns(inst);
  assert.ok(n > 150, `only ${n} of 300 runs were made on the event loop`);
  assert.ok(n < 300, 'the first runs must be timed on the session thread');
});

test('inline_execution auto: a run longer than the crossing never runs on the event loop', async () => {
  const { builder } = buildMlp([512, 2048, 2048, 256], 3);
  const inst = await load('auto', 'busy_auto', builder, {
    maxBatchSize: 64,
    input: [{ name: 'input', dataType: DataType.TYPE_FP32, dims: [512n] }],
    output: [{ name: 'output', dataType: DataType.TYPE_FP32, dims: [256n] }],
  });
  const x = bytesOf(new Float32Array(64 * 512).fill(0.5));
  // Past MIN_SAMPLES the runs are predicted, and each prediction is far above MAX_INLINE_NS, and
  // above LIGHT_INLINE_NS, the bound while requests come one at a time (as here): 64 x 6 M multiply-adds.
  for (let i = 0; i < 12; i++) {
    const [r] = await inst.execute(
      [request('big', [makeTensor('input', 'FP32', [64, 512], x)], ['output'], 64)],
      new RecordingTimer(),
    );
    assert.deepEqual(ok(r)[0]!.shape, [64, 256]);
    assert.equal(inlineRuns(inst), 0, `run ${i} was made on the event loop`);
  }
});

test('every instance feeds the reading of whether requests come one at a time: ' +
  'runs in a row count, a run while another is in flight ends it', async () => {
  const inst = await load('off', 'overlap_off', buildAddSubModel('FP32', 4), tinyConfig);
  // Two at once: the second is handed over while the first is on the thread.
  await Promise.all([
    inst.execute([tinyRequest(1)], new RecordingTimer()),
    inst.execute([tinyRequest(2)], new RecordingTimer()),
  ]);
  assert.equal(runOverlap.quietRuns, 0);
  assert.equal(runOverlap.oneAtATime, false);
  for (let i = 0; i < 5; i++) await inst.execute([tinyRequest(i)], new RecordingTimer());
  assert.equal(runOverlap.quietRuns, 5);
  // A run that fails on the thread (an input missing) is no longer in flight either: the next one finds none before it.
  await assert.rejects(
    inst.execute(
      [request('bad', [makeTensor('INPUT0', 'FP32', [1, 4], bytesOf(new Float32Array(4)))], ['OUTPUT0'])],
      new RecordingTimer(),
    ),
  );
  await inst.execute([tinyRequest(9)], new RecordingTimer());
  assert.equal(runOverlap.quietRuns, 7);
});

test('inline_execution auto: with variable dims, a request far ' +
  'bigger than those timed goes to the thread', async () => {
  const b = new OnnxModelBuilder();
  b.input('x', 'FP32', ['batch', 'len']).output('y', 'FP32', ['batch', 'len']);
  b.node('Relu', ['x'], ['y']);
  const inst = await load('auto', 'ragged_auto', b, {
    maxBatchSize: 8,
    input: [{ name: 'x', dataType: DataType.TYPE_FP32, dims: [-1n] }],
    output: [{ name: 'y', dataType: DataType.TYPE_FP32, dims: [-1n] }],
  });
  const small = makeTensor('x', 'FP32', [1, 4], bytesOf(Float32Array.from([-1, 2, -3, 4])));
  for (let i = 0; i < 200; i++) await inst.execute([request(`s${i}`, [small], ['y'])], new RecordingTimer());
  const before = inlineRuns(inst);
  assert.ok(before > 0, 'the small runs never moved to the event loop');
  // The same batch size of one, with a million times the elements.
  const big = new Float32Array(4 * 1024 * 1024).fill(-1);
  big[7] = 3;
  const [r] = await inst.execute(
    [request('big', [makeTensor('x', 'FP32', [1, big.length], bytesOf(big))], ['y'])],
    new RecordingTimer(),
  );
  assert.equal(inlineRuns(inst), before, 'the big run was made on the event loop');
  const out = new Float32Array(ok(r)[0]!.data.slice().buffer);
  assert.equal(out[7], 3);
  assert.equal(out[8], 0);
});

test('under a memory budget, auto makes no main-thread session (a copy of the weights) ' +
  'for a model over 1 MiB', async () => {
  const wide = (inst: BackendInstance): number => (inst as OnnxRuntimeInstance).inlineWideThreads;
  // 256 -> 1024 -> 256: 2 MiB of weights, within the 16 MiB that auto considers without a budget.
  const cfg = {
    maxBatchSize: 8,
    input: [{ name: 'input', dataType: DataType.TYPE_FP32, dims: [256n] }],
    output: [{ name: 'output', dataType: DataType.TYPE_FP32, dims: [256n] }],
  };
  const expected = inlineIntraOpThreads('mid', config({}), {});
  assert.equal(wide(await load('auto', 'mid_free', buildMlp([256, 1024, 256], 4).builder, cfg)), expected);
  assert.equal(wide(await load('auto', 'mid_paged', buildMlp([256, 1024, 256], 4).builder, cfg, true)), 1);
  // A tiny model keeps its inline runs under a budget: its copy costs next to nothing.
  assert.equal(wide(await load('auto', 'tiny_paged', buildAddSubModel('FP32', 4), tinyConfig, true)), expected);
  // The model's own inline_execution wins.
  const on = await load('on', 'mid_paged', buildMlp([256, 1024, 256], 4).builder, cfg, true);
  const [r] = await on.execute([request('r', [makeTensor('input', 'FP32', [1, 256], bytesOf(new Float32Array(256)))],
    ['output'])], new RecordingTimer());
  ok(r);
  assert.equal(inlineRuns(on), 1);
});

test('the wide main-thread session: the model gets one with the configured threads under ' +
  'auto; none with its own intra_op_thread_count, under on, or when set to 1', async () => {
  const wide = (inst: BackendInstance): number => (inst as OnnxRuntimeInstance).inlineWideThreads;
  const withParams = (p: Record<string, string>) => ({
    ...tinyConfig,
    parameters: Object.fromEntries(
      Object.entries(p).map(([k, v]) => [k, create(ModelParameterSchema, { stringValue: v })]),
    ),
  });
  assert.equal(
    wide(await load('auto', 'wide_default', buildAddSubModel('FP32', 4), tinyConfig)),
    inlineIntraOpThreads('wide_default', config({}), {}),
  );
  assert.equal(
    wide(
      await load('auto', 'wide_three', buildAddSubModel('FP32', 4), withParams({ inline_intra_op_thread_count: '3' })),
    ),
    3,
  );
  assert.equal(
    wide(
      await load('auto', 'wide_one', buildAddSubModel('FP32', 4), withParams({ inline_intra_op_thread_count: '1' })),
    ),
    1,
  );
  assert.equal(
    wide(await load('auto', 'wide_own_intra', buildAddSubModel('FP32', 4), withParams({ intra_op_thread_count: '2' }))),
    1,
  );
  assert.equal(
    wide(await load('on', 'wide_on', buildAddSubModel('FP32', 4), withParams({ inline_intra_op_thread_count: '2' }))),
    1,
  );
  await assert.rejects(
    load('auto', 'wide_bad', buildAddSubModel('FP32', 4), withParams({ inline_intra_op_thread_count: '0' })),
    /model 'wide_bad': parameter 'inline_intra_op_thread_count' must be between 1 and 256, got 0/,
  );
});
