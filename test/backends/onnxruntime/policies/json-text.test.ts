/**
 * JSON output text formatted on the session thread (json-text.ts): an
 * identity model per datatype, run on the thread, with the requests'
 * jsonOutputs hint. The text must be exactly what encodeJsonTensorData
 * writes for each request's own values.
 */
import { availableParallelism } from 'node:os';
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { create } from '@bufbuild/protobuf';
import { DataType, ModelParameterSchema } from '../../../../src/gen/model_config_pb.js';
import { createOnnxRuntimeBackend } from '../../../../src/backends/onnxruntime/index.js';
import {
  JsonTextPolicy,
  LARGE_TEXT_ELEMENTS,
  SHARE_DOWN,
  SHARE_UP,
  SPARE_CORES,
  SPARE_MIN,
  THREAD_FULL,
  THREAD_ROOM,
  WINDOW_NS,
  forceJsonTextShare,
  spareCores,
} from '../../../../src/backends/onnxruntime/policies/json-text.js';
import {
  SLICE_FORMAT,
  SLICE_IF_LARGE,
  SLICE_SKIP,
  sliceWord,
} from '../../../../src/backends/onnxruntime/thread/worker-protocol.js';
import { ModelPlan } from '../../../../src/backends/onnxruntime/plan.js';
import type { BackendInstance, BackendRequest, BackendResponse } from '../../../../src/backends/backend.js';
import { buildIdentityModel } from '../../../helpers/onnx-builder.js';
import { configEnumOf, type Datatype } from '../../../../src/tensor/datatype.js';
import { encodeJsonTensorData } from '../../../../src/tensor/json-codec.js';
import { bytesOf, makeTensor, type Tensor } from '../../../../src/tensor/tensor.js';
import type { JsonOutputHint } from '../../../../src/types/api.js';
import { HARD_VALUES, rotatedValues, valuesBytes } from '../../../helpers/json-values.js';
import {
  RecordingTimer,
  config,
  instanceContext,
  modelContext,
  request,
  suiteModels,
  writeModel,
} from '../fixtures.js';

const backend = createOnnxRuntimeBackend();
const suite = suiteModels();

const ALL_TYPES = Object.keys(HARD_VALUES) as Datatype[];

/** A hint that wants JSON for every output but those named. */
function wantsAllBut(...binary: string[]): JsonOutputHint {
  return { wantsJson: (name) => !binary.includes(name) };
}

const inputName = (dt: Datatype) => `IN_${dt}`;
const outputName = (i: number) => `OUTPUT${i}`;

/**
 * The identity models: every datatype (its string input and output make
 * each run a cloned message), and the numeric ones alone (runs through the
 * shared arena).
 */
const MODELS = [
  { label: 'cloned run', name: 'identity_all', types: ALL_TYPES },
  { label: 'arena run', name: 'identity_numeric', types: ALL_TYPES.filter((dt) => dt !== 'BYTES') },
];

const instances = new Map<string, BackendInstance>();

/** One identity model with an input per datatype, [batch, n]; runs always on the session thread. */
async function identityInstance(name: string, TYPES: readonly Datatype[]): Promise<BackendInstance> {
  const known = instances.get(name);
  if (known) return known;
  const builder = buildIdentityModel(TYPES.map((dt) => ({ name: inputName(dt), datatype: dt, shape: ['batch', 'n'] })));
  const modelDir = await writeModel(suite.dir, name, builder);
  const cfg = config({
    name,
    maxBatchSize: 8,
    input: TYPES.map((dt) => ({ name: inputName(dt), dataType: configEnumOf(dt), dims: [-1n] })),
    output: TYPES.map((dt, i) => ({ name: outputName(i), dataType: configEnumOf(dt), dims: [-1n] })),
  });
  cfg.parameters['inline_execution'] = create(ModelParameterSchema, { stringValue: 'off' });
  const ctx = modelContext(modelDir, cfg);
  const model = await backend.loadModel(ctx);
  const instance = await model.createInstance(instanceContext(ctx));
  suite.keep(model, instance);
  instances.set(name, instance);
  return instance;
}

/** Request k of a batch: `rows` rows, each row the values rotated by k. */
function identityRequest(
  TYPES: readonly Datatype[],
  k: number,
  rows: number,
  hint: JsonOutputHint | undefined,
): BackendRequest {
  const inputs = TYPES.map((dt) => {
    const values = Array.from({ length: rows }, () => rotatedValues(dt, k)).flat();
    return makeTensor(inputName(dt), dt, [rows, HARD_VALUES[dt]!.length], valuesBytes(dt, values));
  });
  const r = request(
    `r${k}`,
    inputs,
    TYPES.map((_, i) => outputName(i)),
    rows,
  );
  return hint === undefined ? r : { ...r, jsonOutputs: hint };
}

function ok(r: BackendResponse | undefined): readonly Tensor[] {
  assert.ok(r, 'missing response');
  if (r.error) assert.fail(`unexpected error response: ${r.error.message}`);
  return r.outputs!;
}

/** What the frontend would write for request k's output of `dt`. */
function expectedText(dt: Datatype, k: number, rows: number): string {
  const values = Array.from({ length: rows }, () => rotatedValues(dt, k)).flat();
  return encodeJsonTensorData('x', dt, valuesBytes(dt, values), values.length);
}

const FORMATTED: ReadonlySet<Datatype> = new Set(ALL_TYPES.filter((dt) => dt !== 'BYTES' && dt !== 'FP16'));

for (const { label, name, types: TYPES } of MODELS) {

  test(`with the thread taking every text, a batch comes back with each request's ` +
    `own JSON text for every numeric and BOOL output [${label}]`, async (t) => {
    t.after(forceJsonTextShare(1));
    const inst = await identityInstance(name, TYPES);
    const rows = [1, 2, 1];
    const requests = rows.map((n, k) => identityRequest(TYPES, k, n, wantsAllBut()));
    const responses = await inst.execute(requests, new RecordingTimer());
    for (let k = 0; k < rows.length; k++) {
      const outputs = ok(responses[k]);
      TYPES.forEach((dt, i) => {
        const out = outputs[i]!;
        assert.equal(out.name, outputName(i));
        assert.deepEqual(out.shape, [rows[k], HARD_VALUES[dt]!.length]);
        if (!FORMATTED.has(dt)) {
          assert.equal(out.jsonData, undefined, `${dt} text is left to the frontend`);
          return;
        }
        assert.equal(out.jsonData, expectedText(dt, k, rows[k]!), `request ${k}, ${dt}`);
        // The bytes are still there, and the text is what they encode to.
        assert.equal(out.jsonData, encodeJsonTensorData(out.name, dt, out.data, rows[k]! * HARD_VALUES[dt]!.length));
      });
    }
  });

  test(`requests of a batch that want an output as binary data ` +
    `get no text for it, the others do [${label}]`, async (t) => {
    t.after(forceJsonTextShare(1));
    const inst = await identityInstance(name, TYPES);
    const fp32 = outputName(TYPES.indexOf('FP32'));
    const int64 = outputName(TYPES.indexOf('INT64'));
    const requests = [
      identityRequest(TYPES, 0, 1, wantsAllBut(fp32)),
      identityRequest(TYPES, 1, 1, undefined),
      identityRequest(TYPES, 2, 2, wantsAllBut(int64)),
    ];
    const [a, b, c] = (await inst.execute(requests, new RecordingTimer())).map(ok);
    const at = (outs: readonly Tensor[], name: string) => outs.find((o) => o.name === name)!;
    assert.equal(at(a!, fp32).jsonData, undefined);
    assert.equal(at(a!, int64).jsonData, expectedText('INT64', 0, 1));
    for (const o of b!) assert.equal(o.jsonData, undefined, `${o.name}: the request gave no hint`);
    assert.equal(at(c!, fp32).jsonData, expectedText('FP32', 2, 2));
    assert.equal(at(c!, int64).jsonData, undefined);
  });

  test(`with the thread taking no texts, small outputs are left to the frontend [${label}]`, async (t) => {
    t.after(forceJsonTextShare(0));
    const inst = await identityInstance(name, TYPES);
    const [r] = await inst.execute([identityRequest(TYPES, 0, 1, wantsAllBut())], new RecordingTimer());
    for (const o of ok(r)) assert.equal(o.jsonData, undefined, o.name);
  });
}

test('a large output is formatted on the thread even when its share of texts is none', async (t) => {
  t.after(forceJsonTextShare(0));
  const builder = buildIdentityModel([{ name: 'INPUT0', datatype: 'FP32', shape: ['n'] }]);
  const modelDir = await writeModel(suite.dir, 'identity_large', builder);
  const cfg = config({
    name: 'identity_large',
    maxBatchSize: 0,
    input: [{ name: 'INPUT0', dataType: DataType.TYPE_FP32, dims: [-1n] }],
    output: [{ name: 'OUTPUT0', dataType: DataType.TYPE_FP32, dims: [-1n] }],
  });
  cfg.parameters['inline_execution'] = create(ModelParameterSchema, { stringValue: 'off' });
  const ctx = modelContext(modelDir, cfg);
  const model = await backend.loadModel(ctx);
  const inst = await model.createInstance(instanceContext(ctx));
  suite.keep(model, inst);
  const run = async (n: number): Promise<Tensor> => {
    const values = Float32Array.from({ length: n }, (_, i) => (i % 7 === 0 ? i : i / 3));
    const [r] = await inst.execute(
      [
        {
          ...request('big', [makeTensor('INPUT0', 'FP32', [n], bytesOf(values))], ['OUTPUT0']),
          jsonOutputs: wantsAllBut(),
        },
      ],
      new RecordingTimer(),
    );
    return ok(r)[0]!;
  };
  const small = await run(LARGE_TEXT_ELEMENTS - 1);
  assert.equal(small.jsonData, undefined);
  // The first large run finds the arena too small for the text (and reports what it needs); the next one has room.
  await run(LARGE_TEXT_ELEMENTS);
  const large = await run(LARGE_TEXT_ELEMENTS);
  assert.equal(large.jsonData, encodeJsonTensorData('OUTPUT0', 'FP32', large.data, LARGE_TEXT_ELEMENTS));
  assert.ok(large.jsonData.includes('7.0,'), 'integral values keep their ".0"');
});

function policyFor(): JsonTextPolicy {
  return new JsonTextPolicy(
    new ModelPlan(
      'm',
      config({
        name: 'm',
        maxBatchSize: 8,
        input: [{ name: 'IN', dataType: DataType.TYPE_FP32, dims: [4n] }],
        output: [
          { name: 'F', dataType: DataType.TYPE_FP32, dims: [4n] },
          { name: 'S', dataType: DataType.TYPE_STRING, dims: [4n] },
        ],
      }),
      [],
    ),
  );
}

function hinted(batch: number, hint?: JsonOutputHint): BackendRequest {
  const r = request('r', [], ['F', 'S'], batch);
  return hint === undefined ? r : { ...r, jsonOutputs: hint };
}

test('JsonTextPolicy.textPlan: nothing without a hint or a numeric JSON ' +
  'output; each request\'s rows and whether the thread formats them', () => {
  const policy = policyFor();
  assert.equal(policy.textPlan([hinted(1)], ['F', 'S']), undefined);
  assert.equal(policy.textPlan([hinted(1, wantsAllBut('F'))], ['F', 'S']), undefined, 'BYTES text is never asked for');
  policy.share = 1;
  const all = policy.textPlan([hinted(2, wantsAllBut()), hinted(1), hinted(3, wantsAllBut('S'))], ['F', 'S'])!;
  assert.equal(all.requests.length, 1);
  assert.equal(all.requests[0]!.fetch, 0);
  assert.equal(all.requests[0]!.byRows, true);
  assert.deepEqual(all.requests[0]!.slices, [
    sliceWord(2, SLICE_FORMAT),
    sliceWord(1, SLICE_SKIP),
    sliceWord(3, SLICE_FORMAT),
  ]);
  assert.equal(all.largeElements, LARGE_TEXT_ELEMENTS);
  policy.share = 0;
  assert.deepEqual(
    policy.textPlan([hinted(2, wantsAllBut())], ['F'])!.requests[0]!.slices,
    [sliceWord(2, SLICE_IF_LARGE)],
    'only a large text goes to the thread',
  );
  // A share of one half sends every other request's text to the thread.
  policy.share = 0.5;
  const half = policy
    .textPlan(
      [1, 1, 1, 1].map((n) => hinted(n, wantsAllBut())),
      ['F'],
    )!
    .requests[0]!.slices.map((w) => w & 3);
  assert.deepEqual(half.sort(), [SLICE_FORMAT, SLICE_FORMAT, SLICE_IF_LARGE, SLICE_IF_LARGE]);
});

function near(actual: number, expected: number, what: string): void {
  assert.ok(Math.abs(actual - expected) < 1e-9, `${what}: ${actual}, expected ${expected}`);
}

test('JsonTextPolicy.balance: the share grows while the thread has room and a ' +
  'core is idle, and shrinks when the thread is full or no core is idle', () => {
  const policy = policyFor();
  policy.balance(THREAD_ROOM - 0.05, SPARE_CORES);
  near(policy.share, SHARE_UP, 'one step up');
  policy.balance(0.1, SPARE_CORES - 0.01);
  near(policy.share, SHARE_UP, 'held: too little idle to grow');
  for (let i = 0; i < 20; i++) policy.balance(0.1, 1);
  assert.equal(policy.share, 1);
  policy.balance((THREAD_ROOM + THREAD_FULL) / 2, 1);
  assert.equal(policy.share, 1, 'held: the thread is near its limit');
  policy.balance(THREAD_FULL + 0.05, 1);
  near(policy.share, 1 - SHARE_DOWN, 'the thread is full');
  policy.balance(0.1, SPARE_MIN / 2);
  near(policy.share, 1 - 2 * SHARE_DOWN, 'every core is busy');
  for (let i = 0; i < 40; i++) policy.balance(1, 1);
  assert.equal(policy.share, 0);
});

test('spareCores: read once a window, never negative, never more than the machine has', () => {
  const first = spareCores(1e15);
  assert.equal(spareCores(1e15 + 1), first, 'the same window gives the same reading');
  let x = 0;
  for (let i = 0; i < 2e6; i++) x += Math.sqrt(i);
  assert.ok(x > 0);
  const later = spareCores(1e15 + 2 * WINDOW_NS);
  assert.ok(later >= 0 && later <= availableParallelism(), `${later}`);
});

test('JsonTextPolicy.recordRun: the thread\'s busy share is read from its timestamps once a window', () => {
  const policy = policyFor();
  const ms = 1e6;
  // Busy 2 ms of every 10; the window closes with the fourth run, 32 ms after the first.
  let at = 1000 * ms;
  for (let i = 0; i < 3; i++, at += 10 * ms) policy.recordRun(at, at + 2 * ms, at + 2 * ms);
  assert.equal(policy.threadBusy, 0, 'no window has closed yet');
  policy.recordRun(at, at + 2 * ms, at + 2 * ms);
  near(policy.threadBusy, 8 / 32, 'busy share');
  // Back to back for a whole window. (The first window's step depended on the machine's idle
  // cores, read for real; a full thread steps down whatever they are.)
  policy.share = SHARE_DOWN;
  at += 2 * ms;
  const start = at;
  while (at - start <= WINDOW_NS) {
    policy.recordRun(at, at + 5 * ms, at + 5 * ms);
    at += 5 * ms;
  }
  assert.equal(policy.threadBusy, 1);
  assert.equal(policy.share, 0, 'a full thread takes none');
  // Timestamps the thread did not set are ignored.
  policy.recordRun(0, 0, at + WINDOW_NS);
  assert.equal(policy.threadBusy, 1);
});
