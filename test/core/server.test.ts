import { test } from 'node:test';
import assert from 'node:assert/strict';
import { Server } from '../../src/core/server.js';
import { NereidError } from '../../src/errors.js';
import { typedView } from '../../src/tensor/tensor.js';
import { TempRepository, int32Tensor } from '../helpers/repository.js';

const a = Array.from({ length: 16 }, (_, i) => i);
const b = Array.from({ length: 16 }, () => 3);

function addSubRequest(model: string, version?: string) {
  return { model, version, inputs: [int32Tensor('INPUT0', a), int32Tensor('INPUT1', b)] };
}

async function expectError(
  p: Promise<unknown> | (() => unknown),
  code: string,
  errorClass?: string,
): Promise<NereidError> {
  try {
    await (typeof p === 'function' ? p() : p);
  } catch (err) {
    assert.ok(err instanceof NereidError, `expected NereidError, got ${String(err)}`);
    assert.equal(err.code, code, err.message);
    if (errorClass) assert.equal(err.errorClass, errorClass);
    return err;
  }
  assert.fail(`expected error ${code}`);
}

test('a good model serves while a broken config and a corrupt ' +
  'ONNX file stay UNAVAILABLE with their reasons', async (t) => {
  const repo = new TempRepository()
    .addSub('good')
    .config(
      'broken_config',
      'name: "broken_config"\nplatform: "onnxruntime_onnx"\nmax_batch_size: 4\ninput [ { name: "x" ' +
      'data_type: TYPE_FP32 dims: [ 0 ] } ]\noutput [ { name: "y" data_type: TYPE_FP32 dims: [ 1 ] } ]\n',
    )
    .file('broken_config', '1/model.onnx', 'not used')
    .addSub('corrupt')
    .file('corrupt', '1/model.onnx', 'this is not an onnx file');
  t.after(() => repo.cleanup());
  const server = new Server({ modelRepositories: [repo.dir], exitOnError: false });
  await server.start();
  t.after(() => server.stop());

  const r = await server.infer({ ...addSubRequest('good'), id: 'req-1' });
  assert.equal(r.modelName, 'good');
  assert.equal(r.modelVersion, '1');
  assert.equal(r.id, 'req-1');
  assert.deepEqual(Array.from(typedView(r.outputs[0]!) as Int32Array), a.map((x) => x + 3));
  assert.deepEqual(Array.from(typedView(r.outputs[1]!) as Int32Array), a.map((x) => x - 3));

  const index = await server.repositoryIndex();
  const byName = new Map(index.map((e) => [e.name, e]));
  assert.equal(byName.get('good')!.state, 'READY');
  assert.equal(byName.get('broken_config')!.state, 'UNAVAILABLE');
  assert.match(byName.get('broken_config')!.reason!, /model input 'x' dimension must be integer >= 1/);
  assert.equal(byName.get('corrupt')!.state, 'UNAVAILABLE');
  assert.ok(byName.get('corrupt')!.reason!.length > 0);

  assert.equal(server.isLive(), true);
  assert.equal(server.isReady(), false, 'strict readiness: a failed model makes the server not ready');
  await expectError(server.infer(addSubRequest('broken_config')), 'NRD_MODEL_NO_VERSIONS', 'NOT_FOUND');
  await expectError(server.infer(addSubRequest('nope')), 'NRD_MODEL_NOT_FOUND', 'NOT_FOUND');
  // still serving after every failure
  assert.equal((await server.infer(addSubRequest('good'))).outputs.length, 2);
});

test('exit-on-error makes start() fail naming the model', async (t) => {
  const repo = new TempRepository().addSub('good').addSub('corrupt').file('corrupt', '1/model.onnx', 'garbage');
  t.after(() => repo.cleanup());
  const server = new Server({ modelRepositories: [repo.dir] });
  const err = await expectError(server.start(), 'NRD_INTERNAL');
  assert.match(err.message, /failed to load all models.*'corrupt'/);
});

test('non-strict readiness only needs the server live', async (t) => {
  const repo = new TempRepository().addSub('good').addSub('corrupt').file('corrupt', '1/model.onnx', 'garbage');
  t.after(() => repo.cleanup());
  const server = new Server({ modelRepositories: [repo.dir], exitOnError: false, strictReadiness: false });
  await server.start();
  t.after(() => server.stop());
  assert.equal(server.isReady(), true);
});

test('version policy: latest 2 serves the two highest; requests pick the highest READY by default', async (t) => {
  const repo = new TempRepository().addSub(
    'multi',
    [1, 2, 3],
    `platform: "onnxruntime_onnx"
max_batch_size: 8
version_policy: { latest: { num_versions: 2 } }
input [ { name: "INPUT0" data_type: TYPE_INT32 dims: [ 16 ] }, { name: "INPUT1" data_type: TYPE_INT32 dims: [ 16 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_INT32 dims: [ 16 ] }, { name: "OUTPUT1" data_type: TYPE_INT32 dims: [ 16 ]
  } ]
instance_group [ { kind: KIND_CPU count: 1 } ]
`,
  );
  t.after(() => repo.cleanup());
  const server = new Server({ modelRepositories: [repo.dir] });
  await server.start();
  t.after(() => server.stop());
  assert.deepEqual(server.modelMetadata('multi').versions, ['2', '3']);
  assert.deepEqual(server.modelMetadata('multi', '2').versions, ['2']);
  assert.equal((await server.infer(addSubRequest('multi'))).modelVersion, '3');
  assert.equal((await server.infer(addSubRequest('multi', '2'))).modelVersion, '2');
  await expectError(server.infer(addSubRequest('multi', '1')), 'NRD_MODEL_VERSION_NOT_FOUND', 'NOT_FOUND');
  await expectError(server.infer(addSubRequest('multi', 'x')), 'NRD_INVALID_MODEL_VERSION', 'INVALID_ARG');
  const meta = server.modelMetadata('multi');
  assert.equal(meta.platform, 'onnxruntime_onnx');
  assert.deepEqual(meta.inputs[0], { name: 'INPUT0', datatype: 'INT32', shape: [-1, 16] });
});

test('explicit mode: load, reload with no gap for in-flight requests, unload', async (t) => {
  const repo = new TempRepository().addSub('m1').addSub('m2');
  t.after(() => repo.cleanup());
  const server = new Server({ modelRepositories: [repo.dir], modelControlMode: 'explicit', loadModels: ['m1'] });
  await server.start();
  t.after(() => server.stop());
  const names = (await server.repositoryIndex()).map((e) => `${e.name}:${e.state ?? '-'}`);
  assert.deepEqual(names, ['m1:READY', 'm2:-']);
  await expectError(server.infer(addSubRequest('m2')), 'NRD_MODEL_NO_VERSIONS');
  await server.loadModel('m2');
  assert.equal((await server.infer(addSubRequest('m2'))).modelName, 'm2');

  // Reload with a new config while requests are in flight: every request succeeds.
  const inflight = Array.from({ length: 40 }, () => server.infer(addSubRequest('m1')));
  const override = JSON.stringify({
    platform: 'onnxruntime_onnx',
    max_batch_size: 8,
    input: [
      { name: 'INPUT0', data_type: 'TYPE_INT32', dims: [16] },
      { name: 'INPUT1', data_type: 'TYPE_INT32', dims: [16] },
    ],
    output: [
      { name: 'OUTPUT0', data_type: 'TYPE_INT32', dims: [16] },
      { name: 'OUTPUT1', data_type: 'TYPE_INT32', dims: [16] },
    ],
    instance_group: [{ kind: 'KIND_CPU', count: 2 }],
  });
  const reload = server.loadModel('m1', { config: override });
  const more = Array.from({ length: 40 }, () => server.infer(addSubRequest('m1')));
  const results = await Promise.allSettled([...inflight, reload, ...more]);
  assert.deepEqual(results.filter((r) => r.status === 'rejected'), []);
  assert.equal(server.modelConfig('m1').instanceGroup[0]!.count, 2);

  await server.unloadModel('m1');
  await expectError(server.infer(addSubRequest('m1')), 'NRD_MODEL_NO_VERSIONS');
  const idx = await server.repositoryIndex();
  assert.equal(idx.find((e) => e.name === 'm1')!.state, 'UNAVAILABLE');
  await server.unloadModel('never-heard-of-it'); // a no-op, as Triton
  const err = await expectError(server.loadModel('never-heard-of-it'), 'NRD_INTERNAL');
  assert.match(err.message, /failed to poll from model repository/);
});

test('a failed reload keeps the previous version serving', async (t) => {
  const repo = new TempRepository().addSub('m');
  t.after(() => repo.cleanup());
  const server = new Server({ modelRepositories: [repo.dir], modelControlMode: 'explicit', loadModels: ['*'] });
  await server.start();
  t.after(() => server.stop());
  repo.file('m', '1/model.onnx', 'corrupted on disk');
  const err = await expectError(server.loadModel('m'), 'NRD_LOAD_FAILED', 'INVALID_ARG');
  assert.match(err.message, /load failed for model 'm'/);
  assert.equal((await server.infer(addSubRequest('m'))).modelName, 'm');
});

test('load and unload are refused outside explicit mode', async (t) => {
  const repo = new TempRepository().addSub('m');
  t.after(() => repo.cleanup());
  const server = new Server({ modelRepositories: [repo.dir] });
  await server.start();
  t.after(() => server.stop());
  const err = await expectError(server.loadModel('m'), 'NRD_CONTROL_MODE', 'UNAVAILABLE');
  assert.match(err.message, /not allowed if polling is enabled/);
  await expectError(server.unloadModel('m'), 'NRD_CONTROL_MODE', 'UNAVAILABLE');
});

test('stop() lets in-flight requests finish and refuses new ones', async (t) => {
  const repo = new TempRepository().addSub('m');
  t.after(() => repo.cleanup());
  const server = new Server({ modelRepositories: [repo.dir] });
  await server.start();
  const inflight = Array.from({ length: 20 }, () => server.infer(addSubRequest('m')));
  const stopping = server.stop();
  await expectError(server.infer(addSubRequest('m')), 'NRD_SERVER_STOPPING', 'UNAVAILABLE');
  const results = await Promise.allSettled(inflight);
  await stopping;
  assert.deepEqual(results.filter((r) => r.status === 'rejected'), []);
  assert.equal(server.isLive(), false);
});

test('statistics count requests, executions and add up', async (t) => {
  const repo = new TempRepository().addSub('m');
  t.after(() => repo.cleanup());
  const server = new Server({ modelRepositories: [repo.dir] });
  await server.start();
  t.after(() => server.stop());
  for (let i = 0; i < 5; i++) await server.infer(addSubRequest('m'));
  await expectError(server.infer({ model: 'm', inputs: [int32Tensor('INPUT0', a)] }), 'NRD_INPUT_COUNT');
  const [s] = server.modelStatistics('m');
  assert.equal(s!.name, 'm');
  assert.equal(s!.version, '1');
  assert.equal(s!.inference_count, 5);
  assert.equal(s!.execution_count, 5);
  assert.equal(s!.inference_stats.success.count, 5);
  const st = s!.inference_stats;
  assert.ok(st.queue.ns + st.compute_input.ns + st.compute_infer.ns + st.compute_output.ns <= st.success.ns);
  assert.ok(s!.last_inference > 0);
  assert.throws(() => server.modelStatistics('nope'), /requested model 'nope' is not available/);
  assert.throws(() => server.modelStatistics('m', '9'), /requested model version is not available for model 'm'/);
});

test('poll mode picks up a model added to the repository', async (t) => {
  const repo = new TempRepository().addSub('first');
  t.after(() => repo.cleanup());
  const server = new Server({ modelRepositories: [repo.dir], modelControlMode: 'poll', repositoryPollSecs: 1 });
  await server.start();
  t.after(() => server.stop());
  repo.addSub('second');
  let served = false;
  for (let i = 0; i < 100 && !served; i++) {
    await new Promise((r) => setTimeout(r, 100));
    served = (await server.repositoryIndex(true)).some((e) => e.name === 'second');
  }
  assert.ok(served, 'the new model became READY');
  assert.equal((await server.infer(addSubRequest('second'))).modelName, 'second');
});

test('a sequence-batching model loads and refuses a request without a correlation id', async (t) => {
  const io = `input [ { name: "INPUT0" data_type: TYPE_INT32 dims: [ 16 ] },
    { name: "INPUT1" data_type: TYPE_INT32 dims: [ 16 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_INT32 dims: [ 16 ] }, { name: "OUTPUT1" data_type: TYPE_INT32 dims: [ 16 ]
  } ]
`;
  const repo = new TempRepository()
    .addSub('good')
    .addSub('seq', [1], `platform: "onnxruntime_onnx"\nmax_batch_size: 8\n${io}sequence_batching { }\n`);
  t.after(() => repo.cleanup());
  const server = new Server({ modelRepositories: [repo.dir], exitOnError: false });
  await server.start();
  t.after(() => server.stop());
  const seq = (await server.repositoryIndex()).find((e) => e.name === 'seq')!;
  assert.equal(seq.state, 'READY');
  await assert.rejects(server.infer(addSubRequest('seq')), (e: { code: string; message: string }) => {
    assert.equal(e.code, 'NRD_SEQUENCE_NO_CORRELATION_ID');
    assert.equal(e.message, "inference request to model 'seq' must specify a non-zero or non-empty correlation ID");
    return true;
  });
  assert.equal((await server.infer(addSubRequest('good'))).modelName, 'good');
});

test('a signal shared by many requests (one gRPC stream) holds no listener once they are answered', async (t) => {
  const repo = new TempRepository().addSub('simple');
  t.after(() => repo.cleanup());
  const server = new Server({ modelRepositories: [repo.dir] });
  await server.start();
  t.after(() => server.stop());
  let listeners = 0;
  const signal = {
    aborted: false,
    addEventListener: () => void (listeners += 1),
    removeEventListener: () => void (listeners -= 1),
  };
  await Promise.all(Array.from({ length: 20 }, () => server.infer({ ...addSubRequest('simple'), signal })));
  assert.equal(listeners, 0);
});
