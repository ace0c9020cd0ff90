import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { chmodSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createPythonBackend, type PythonInstance } from '../../../src/backends/python/index.js';
import type { BackendInstance, BackendModel, InferenceCaller } from '../../../src/backends/backend.js';
import { NereidError } from '../../../src/errors.js';
import { DataType } from '../../../src/gen/model_config_pb.js';
import { modelConfigToJson } from '../../../src/config/index.js';
import { decodeBytesElements, encodeBytesElements, type Tensor } from '../../../src/tensor/tensor.js';
import type { Datatype } from '../../../src/tensor/datatype.js';
import {
  PYTHON,
  TestTimer,
  missingPythonModule,
  asF32,
  f32,
  fixtureDir,
  instanceContext,
  modelConfig,
  modelContext,
  request,
  ok,
  tensor,
} from './helpers.js';

const backend = createPythonBackend();
const skip = missingPythonModule('numpy');

interface Loaded {
  model: BackendModel;
  instance: BackendInstance;
}

const open: Loaded[] = [];

async function load(
  name: string,
  config = modelConfig({ name, backend: 'python' }),
  extra: { backendConfig?: Record<string, string>; server?: InferenceCaller; modelDir?: string } = {},
): Promise<Loaded> {
  const dir = extra.modelDir ?? fixtureDir(name);
  const ctx = modelContext({ name, modelDir: dir, config, backendConfig: extra.backendConfig, server: extra.server });
  const model = await backend.loadModel(ctx);
  try {
    const instance = await model.createInstance(instanceContext(ctx));
    const loaded = { model, instance };
    open.push(loaded);
    return loaded;
  } catch (err) {
    await model.close();
    throw err;
  }
}

async function unload(l: Loaded): Promise<void> {
  const i = open.indexOf(l);
  if (i >= 0) open.splice(i, 1);
  await l.instance.close();
  await l.model.close();
}

after(async () => {
  for (const l of open.splice(0)) {
    await l.instance.close();
    await l.model.close();
  }
});

const addSubConfig = (name: string) =>
  modelConfig({
    name,
    backend: 'python',
    maxBatchSize: 8,
    input: [
      { name: 'INPUT0', dataType: DataType.TYPE_FP32, dims: [4n] },
      { name: 'INPUT1', dataType: DataType.TYPE_FP32, dims: [4n] },
    ],
    output: [
      { name: 'OUTPUT0', dataType: DataType.TYPE_FP32, dims: [4n] },
      { name: 'OUTPUT1', dataType: DataType.TYPE_FP32, dims: [4n] },
    ],
  });

function ioConfig(name: string, inputs: Array<[string, DataType]>, outputs: Array<[string, DataType]>) {
  return modelConfig({
    name,
    backend: 'python',
    input: inputs.map(([n, dataType]) => ({ name: n, dataType, dims: [-1n] })),
    output: outputs.map(([n, dataType]) => ({ name: n, dataType, dims: [-1n] })),
  });
}

async function expectLoadFailure(name: string, pattern: RegExp, config?: ReturnType<typeof modelConfig>) {
  await assert.rejects(load(name, config), (err: unknown) => {
    assert.ok(err instanceof NereidError, `expected a NereidError, got ${String(err)}`);
    assert.equal(err.code, 'NRD_LOAD_FAILED');
    assert.match(err.message, new RegExp(`'${name}'`));
    assert.match(err.message, pattern);
    return true;
  });
}

describe('python backend: identity over every data type', { skip }, () => {
  const cases: Array<[Datatype, DataType, ArrayBufferView]> = [
    ['BOOL', DataType.TYPE_BOOL, new Uint8Array([1, 0, 1])],
    ['UINT8', DataType.TYPE_UINT8, new Uint8Array([0, 7, 255])],
    ['UINT16', DataType.TYPE_UINT16, new Uint16Array([0, 7, 65535])],
    ['UINT32', DataType.TYPE_UINT32, new Uint32Array([0, 7, 4294967295])],
    ['UINT64', DataType.TYPE_UINT64, new BigUint64Array([0n, 7n, 18446744073709551615n])],
    ['INT8', DataType.TYPE_INT8, new Int8Array([-128, 0, 127])],
    ['INT16', DataType.TYPE_INT16, new Int16Array([-32768, 1, 32767])],
    ['INT32', DataType.TYPE_INT32, new Int32Array([-2147483648, 1, 2147483647])],
    ['INT64', DataType.TYPE_INT64, new BigInt64Array([-9223372036854775808n, 1n, 9223372036854775807n])],
    ['FP16', DataType.TYPE_FP16, new Uint16Array([0x3c00, 0xc000, 0x7bff])],
    ['FP32', DataType.TYPE_FP32, new Float32Array([1.5, -2.25, 3.4e38])],
    ['FP64', DataType.TYPE_FP64, new Float64Array([1e-300, -2.5, Math.PI])],
  ];
  let loaded: Loaded;
  before(async () => {
    const inputs: Array<[string, DataType]> = cases.map(([, e], i) => [`INPUT${i}`, e]);
    inputs.push([`INPUT${cases.length}`, DataType.TYPE_STRING]);
    const outputs: Array<[string, DataType]> = inputs.map(([n, e]) => [n.replace('INPUT', 'OUTPUT'), e]);
    loaded = await load('identity', ioConfig('identity', inputs, outputs));
  });

  test('returns each tensor unchanged, with its data type and shape', async () => {
    const inputs: Tensor[] = cases.map(([dt, , data], i) => tensor(`INPUT${i}`, dt, [3], data));
    const strings = [Buffer.from('hello'), Buffer.alloc(0), Buffer.from([0, 255, 0, 10]), Buffer.from('ünïcødé')];
    inputs.push({ name: `INPUT${cases.length}`, datatype: 'BYTES', shape: [2, 2], data: encodeBytesElements(strings) });
    const timer = new TestTimer();
    const [res] = await loaded.instance.execute([request(inputs)], timer);
    const outs = ok(res);
    assert.equal(outs.length, inputs.length);
    for (let i = 0; i < inputs.length; i++) {
      const out: Tensor | undefined = outs.find((o) => o.name === `OUTPUT${i}`);
      assert.ok(out, `OUTPUT${i} missing`);
      assert.equal(out.datatype, inputs[i]!.datatype);
      assert.deepEqual(out.shape, inputs[i]!.shape);
      assert.deepEqual(Buffer.from(out.data), Buffer.from(inputs[i]!.data), `OUTPUT${i} (${out.datatype}) differs`);
    }
    const bytesOut = outs.find((o) => o.datatype === 'BYTES')!;
    assert.deepEqual(decodeBytesElements(bytesOut.data).map((b) => Buffer.from(b)), strings);
    assert.equal(timer.inputs, 1);
    assert.equal(timer.infers, 1);
  });

  test('returns only the requested outputs, in the requested order', async () => {
    const inputs = [
      tensor('INPUT4', 'UINT64', [1], new BigUint64Array([5n])),
      tensor('INPUT10', 'FP32', [1], new Float32Array([2])),
    ];
    const [res] = await loaded.instance.execute(
      [request(inputs, { outputs: ['OUTPUT10', 'OUTPUT4'] })],
      new TestTimer(),
    );
    assert.deepEqual(ok(res).map((o) => o.name), ['OUTPUT10', 'OUTPUT4']);
  });

  test('passes large tensors through', async () => {
    const big = new Float32Array(512 * 1024).map((_, i) => i);
    const [res] = await loaded.instance.execute(
      [request([tensor('INPUT10', 'FP32', [big.length], big)])],
      new TestTimer(),
    );
    assert.deepEqual(Buffer.from(ok(res)[0]!.data), Buffer.from(big.buffer));
  });
});

describe('python backend: add_sub', { skip }, () => {
  test('computes sum and difference for each request of a batch', async () => {
    const l = await load('add_sub', addSubConfig('add_sub'));
    const r1 = request([f32('INPUT0', [1, 4], [1, 2, 3, 4]), f32('INPUT1', [1, 4], [10, 20, 30, 40])]);
    const r2 = request(
      [f32('INPUT0', [2, 4], [1, 1, 1, 1, 2, 2, 2, 2]), f32('INPUT1', [2, 4], [0, 1, 2, 3, 0, 1, 2, 3])],
      {
        outputs: ['OUTPUT1'],
        batchSize: 2,
      },
    );
    const [a, b] = await l.instance.execute([r1, r2], new TestTimer());
    assert.deepEqual(ok(a).map((o) => o.name), ['OUTPUT0', 'OUTPUT1']);
    assert.deepEqual(asF32(ok(a)[0]!), [11, 22, 33, 44]);
    assert.deepEqual(asF32(ok(a)[1]!), [-9, -18, -27, -36]);
    assert.deepEqual(ok(b).map((o) => o.name), ['OUTPUT1']);
    assert.deepEqual(ok(b)[0]!.shape, [2, 4]);
    assert.deepEqual(asF32(ok(b)[0]!), [1, 0, -1, -2, 2, 1, 0, -1]);
    assert.equal(await l.instance.isReady!(), true);
    await unload(l);
  });

  test('async def execute works', async () => {
    const l = await load('async_add_sub', addSubConfig('async_add_sub'));
    const reqs = [0, 1, 2].map((k) =>
      request([f32('INPUT0', [1, 4], [k, k, k, k]), f32('INPUT1', [1, 4], [1, 2, 3, 4])]),
    );
    const res = await l.instance.execute(reqs, new TestTimer());
    assert.equal(res.length, 3);
    for (let k = 0; k < 3; k++) {
      assert.deepEqual(asF32(ok(res[k])[0]!), [k + 1, k + 2, k + 3, k + 4]);
      assert.deepEqual(asF32(ok(res[k])[1]!), [k - 1, k - 2, k - 3, k - 4]);
    }
    await unload(l);
  });
});

describe('python backend: initialize args, request metadata, logging', { skip }, () => {
  test('initialize receives Triton args and requests expose their metadata', async () => {
    const config = ioConfig('init_args', [['INPUT0', DataType.TYPE_FP32]], [['OUTPUT0', DataType.TYPE_STRING]]);
    const l = await load('init_args', config);
    const [res] = await l.instance.execute(
      [
        request([f32('INPUT0', [1], [1])], {
          id: 'req-42',
          parameters: { alpha: 'x', beta: 3, gamma: true },
          correlationId: 77n,
          flags: 1,
          outputs: ['OUTPUT0'],
        }),
      ],
      new TestTimer(),
    );
    const [json] = decodeBytesElements(ok(res)[0]!.data);
    const info = JSON.parse(Buffer.from(json!).toString('utf8'));
    assert.deepEqual(Object.keys(info.args).sort(), [
      'model_config',
      'model_instance_device_id',
      'model_instance_kind',
      'model_instance_name',
      'model_name',
      'model_repository',
      'model_version',
    ]);
    assert.equal(info.args.model_name, 'init_args');
    assert.equal(info.args.model_instance_kind, 'CPU');
    assert.equal(info.args.model_instance_name, 'init_args_0');
    assert.equal(info.args.model_instance_device_id, '0');
    assert.equal(info.args.model_version, '1');
    assert.equal(info.args.model_repository, fixtureDir('init_args'));
    // The same JSON the model configuration endpoint serves: Triton's field order, 64-bit integers as numbers.
    assert.equal(info.args.model_config, JSON.stringify(modelConfigToJson(config)));
    const cfg = JSON.parse(info.args.model_config);
    assert.deepEqual(Object.keys(cfg).slice(0, 5), ['name', 'platform', 'backend', 'runtime', 'max_batch_size']);
    assert.equal(cfg.name, 'init_args');
    assert.equal(cfg.max_batch_size, 0);
    assert.equal(cfg.input[0].data_type, 'TYPE_FP32');
    assert.deepEqual(cfg.input[0].dims, [-1]);
    assert.equal(info.request_id, 'req-42');
    assert.equal(info.correlation_id, 77);
    assert.equal(info.flags, 1);
    assert.deepEqual(JSON.parse(info.parameters), { alpha: 'x', beta: 3, gamma: true });
    assert.deepEqual(info.requested, ['OUTPUT0']);
    await unload(l);
  });
});

describe('python backend: broken models fail cleanly', { skip }, () => {
  test('a syntax error fails the load with the SyntaxError line', async () => {
    await expectLoadFailure('syntax_error', /SyntaxError/);
  });
  test('a missing TritonPythonModel class fails the load', async () => {
    await expectLoadFailure('no_class', /does not define class TritonPythonModel/);
  });
  test('initialize() raising fails the load with the exception line', async () => {
    await expectLoadFailure('init_raises', /ValueError: initialize exploded on purpose/);
  });
  test('a missing model.py fails the load', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'nereid-py-'));
    try {
      await assert.rejects(
        backend.loadModel(modelContext({ name: 'nothing', modelDir: dir, config: modelConfig({ name: 'nothing' }) })),
        /model\.py/,
      );
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  test('execute() raising fails the batch with the exception line and the model name', async () => {
    const l = await load('execute_raises');
    await assert.rejects(l.instance.execute([request([f32('INPUT0', [1], [1])])], new TestTimer()), (err: Error) => {
      assert.match(err.message, /'execute_raises'/);
      assert.match(err.message, /RuntimeError: execute exploded on purpose/);
      return true;
    });
    // the process survives a model exception
    await assert.rejects(l.instance.execute([request([f32('INPUT0', [1], [1])])], new TestTimer()), /exploded/);
    assert.equal((l.instance as PythonInstance).restartCount, 0);
    await unload(l);
  });

  test('the wrong number of responses fails the batch', async () => {
    const l = await load('wrong_count');
    await assert.rejects(
      l.instance.execute([request([]), request([])], new TestTimer()),
      /'wrong_count'.*returned 3 responses for 2 requests/,
    );
    await unload(l);
  });

  test('responses of the wrong type fail the batch', async () => {
    const l = await load('wrong_type');
    await assert.rejects(l.instance.execute([request([])], new TestTimer()), /'wrong_type'.*int at position 0/);
    await unload(l);
  });

  test('an output that is not in the configuration is an error response naming model and output', async () => {
    const l = await load(
      'extra_output',
      ioConfig('extra_output', [['INPUT0', DataType.TYPE_FP32]], [['OUTPUT0', DataType.TYPE_FP32]]),
    );
    const [res] = await l.instance.execute([request([f32('INPUT0', [1], [1])])], new TestTimer());
    assert.ok(res!.error);
    assert.match(res!.error.message, /'extra_output'/);
    assert.match(res!.error.message, /NOT_IN_CONFIG/);
    await unload(l);
  });

  test('a TritonError response keeps its message and code', async () => {
    const l = await load('error_response');
    const [res] = await l.instance.execute([request([])], new TestTimer());
    assert.ok(res!.error);
    assert.equal(res!.error.message, 'the model refuses this input');
    assert.equal(res!.error.errorClass, 'INVALID_ARG');
    // Its own code: NRD_MODEL_EXECUTION stays INTERNAL.
    assert.equal(res!.error.code, 'NRD_MODEL_REPORTED_INVALID_ARG');
    await unload(l);
  });

  test('a process killed mid-request fails that request, restarts, and serves again', async () => {
    const config = ioConfig('slow', [['INPUT0', DataType.TYPE_FP32]], [['OUTPUT0', DataType.TYPE_FP32]]);
    const l = await load('slow', config);
    const inst = l.instance as PythonInstance;
    const pid = inst.pid;
    assert.ok(pid);
    const pending = inst.execute([request([f32('INPUT0', [1], [30])])], new TestTimer());
    setTimeout(() => process.kill(pid, 'SIGKILL'), 200);
    await assert.rejects(pending, (err: Error) => {
      assert.match(err.message, /'slow'/);
      assert.match(err.message, /SIGKILL/);
      return true;
    });
    const [res] = await inst.execute([request([f32('INPUT0', [1], [0])])], new TestTimer());
    assert.deepEqual(asF32(ok(res)[0]!), [0]);
    assert.equal(inst.restartCount, 1);
    assert.notEqual(inst.pid, pid);
    await unload(l);
  });
});

describe('python backend: unloading during a restart', { skip }, () => {
  test('a request waiting for a restart fails when the instance is closed', async () => {
    const config = ioConfig('slow', [['INPUT0', DataType.TYPE_FP32]], [['OUTPUT0', DataType.TYPE_FP32]]);
    const l = await load('slow', config);
    const inst = l.instance as PythonInstance;
    process.kill(inst.pid!, 'SIGKILL');
    for (let i = 0; i < 600 && inst.pid !== undefined; i++) await new Promise((r) => setTimeout(r, 20));
    assert.equal(inst.pid, undefined);
    const waiting = inst.execute([request([f32('INPUT0', [1], [0])])], new TestTimer());
    await unload(l);
    await assert.rejects(waiting, /'slow'.*unloaded/);
  });
});

describe('python backend: interpreters', { skip }, () => {
  let dir: string;
  before(() => {
    dir = mkdtempSync(join(tmpdir(), 'nereid-pyenv-'));
  });
  after(() => rmSync(dir, { recursive: true, force: true }));

  /** A fake environment whose python3 cannot import `blocked`. */
  function fakeEnv(root: string, blocked: string): void {
    mkdirSync(join(root, 'bin'), { recursive: true });
    mkdirSync(join(root, 'block'), { recursive: true });
    writeFileSync(join(root, 'block', `${blocked}.py`), `raise ImportError("No module named '${blocked}'")\n`);
    const script = `#!/bin/sh\nPYTHONPATH="${join(root, 'block')}" exec ${PYTHON} "$@"\n`;
    writeFileSync(join(root, 'bin', 'python3'), script);
    chmodSync(join(root, 'bin', 'python3'), 0o755);
  }

  test('EXECUTION_ENV_PATH with $$TRITON_MODEL_DIRECTORY selects the ' +
    'environment; missing numpy names what to install', async () => {
    const modelDir = join(dir, 'm1');
    mkdirSync(modelDir, { recursive: true });
    writeFileSync(
      join(modelDir, 'model.py'),
      'class TritonPythonModel:\n    def execute(self, r):\n        return []\n',
    );
    fakeEnv(join(modelDir, 'env'), 'numpy');
    const config = modelConfig({
      name: 'm1',
      backend: 'python',
      parameters: { EXECUTION_ENV_PATH: { stringValue: '$$TRITON_MODEL_DIRECTORY/env' } },
    });
    await assert.rejects(load('m1', config, { modelDir }), (err: Error) => {
      assert.match(err.message, /numpy is not importable/);
      assert.match(err.message, /install python3-numpy \(Debian\) or pip install numpy/);
      return true;
    });
  });

  test('a missing EXECUTION_ENV_PATH fails the load naming the parameter', async () => {
    const config = modelConfig({
      name: 'add_sub',
      parameters: { EXECUTION_ENV_PATH: { stringValue: '/no/such/env' } },
    });
    await expectLoadFailure('add_sub', /EXECUTION_ENV_PATH '\/no\/such\/env' does not exist/, config);
  });

  test('a missing configured interpreter falls back to one that has numpy', async () => {
    const loaded = await load('add_sub', addSubConfig('add_sub'), {
      backendConfig: { 'python-executable': join(dir, 'no-python') },
    });
    await unload(loaded);
  });
});

describe('python backend: BLS', { skip }, () => {
  const doubler: InferenceCaller = {
    async infer(req) {
      if (req.model !== 'doubler')
        throw new NereidError(
          'NRD_MODEL_NOT_FOUND',
          'NOT_FOUND',
          `Request for unknown model: '${req.model}' is not found`,
        );
      const x = asF32(req.inputs[0]!);
      return {
        modelName: 'doubler',
        modelVersion: '1',
        id: req.id ?? '',
        outputs: [f32('OUTPUT0', [...req.inputs[0]!.shape], x.map((v) => v * 2))],
      };
    },
  };
  const cfg = (name: string, target: string) =>
    modelConfig({
      name,
      backend: 'python',
      input: [{ name: 'INPUT0', dataType: DataType.TYPE_FP32, dims: [-1n] }],
      output: [{ name: 'OUTPUT0', dataType: DataType.TYPE_FP32, dims: [-1n] }],
      parameters: { TARGET_MODEL: { stringValue: target } },
    });

  test('exec() calls another model through the server', async () => {
    const l = await load('bls_caller', cfg('bls_caller', 'doubler'), { server: doubler });
    const [res] = await l.instance.execute([request([f32('INPUT0', [3], [1, 2, 3])])], new TestTimer());
    assert.deepEqual(asF32(ok(res)[0]!), [2, 4, 6]);
    await unload(l);
  });

  test('a BLS error comes back as a response error, not an exception', async () => {
    const l = await load('bls_caller', cfg('bls_caller', 'missing'), { server: doubler });
    const [res] = await l.instance.execute([request([f32('INPUT0', [1], [1])])], new TestTimer());
    assert.ok(res!.error);
    assert.match(res!.error.message, /BLS failed: Request for unknown model: 'missing'/);
    await unload(l);
  });

  test('async_exec() calls run concurrently inside async execute', async () => {
    let inFlight = 0;
    let maxInFlight = 0;
    const slowDoubler: InferenceCaller = {
      async infer(req) {
        inFlight++;
        maxInFlight = Math.max(maxInFlight, inFlight);
        await new Promise((r) => setTimeout(r, 20));
        inFlight--;
        return doubler.infer(req);
      },
    };
    const l = await load('bls_async_caller', cfg('bls_async_caller', 'doubler'), { server: slowDoubler });
    const reqs = [1, 2, 3].map((k) => request([f32('INPUT0', [1], [k])]));
    const res = await l.instance.execute(reqs, new TestTimer());
    assert.deepEqual(res.map((r) => asF32(ok(r)[0]!)[0]), [2, 4, 6]);
    assert.equal(maxInFlight, 3);
    await unload(l);
  });
});

describe('python backend: auto_complete_config', { skip }, () => {
  test('the model fills inputs, outputs, max_batch_size and dynamic batching', async () => {
    const completed = await backend.autoCompleteConfig!({
      modelName: 'auto_complete',
      modelDir: fixtureDir('auto_complete'),
      versionDir: fixtureDir('auto_complete'),
      config: modelConfig({ name: 'auto_complete', backend: 'python' }),
      backendConfig: { 'python-executable': PYTHON },
      logger: (await import('../../../src/logger.js')).silentLogger,
    });
    assert.equal(completed.maxBatchSize, 8);
    assert.deepEqual(completed.input.map((i) => [i.name, i.dataType, i.dims]), [['INPUT0', DataType.TYPE_FP32, [4n]]]);
    assert.deepEqual(
      completed.output.map((o) => [o.name, o.dataType, o.dims]),
      [['OUTPUT0', DataType.TYPE_FP32, [4n]]],
    );
    assert.equal(completed.schedulingChoice.case, 'dynamicBatching');
    assert.equal(completed.backend, 'python');
  });

  test('a model without the hook leaves the configuration as it was', async () => {
    const config = addSubConfig('add_sub');
    const completed = await backend.autoCompleteConfig!({
      modelName: 'add_sub',
      modelDir: fixtureDir('add_sub'),
      versionDir: fixtureDir('add_sub'),
      config,
      backendConfig: { 'python-executable': PYTHON },
      logger: (await import('../../../src/logger.js')).silentLogger,
    });
    assert.equal(completed, config);
  });
});
