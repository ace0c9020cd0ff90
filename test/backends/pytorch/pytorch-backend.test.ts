import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { chmodSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createPyTorchBackend, type PyTorchInstance } from '../../../src/backends/pytorch/index.js';
import type { BackendInstance, BackendModel } from '../../../src/backends/backend.js';
import { NereidError } from '../../../src/errors.js';
import { DataType, type ModelConfig } from '../../../src/gen/model_config_pb.js';
import {
  PYTHON,
  TestTimer,
  missingPythonModule,
  asF32,
  f32,
  instanceContext,
  modelConfig,
  modelContext,
  ok,
  request,
} from '../python/helpers.js';

const backend = createPyTorchBackend();
const skip = missingPythonModule('torch');

/** Traces a small two-input, two-output module with torch.jit.trace and records torch's own outputs. */
const TRACE = `
import sys, torch
out = sys.argv[1]
torch.manual_seed(0)
class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 3)
    def forward(self, x, y):
        return torch.relu(self.lin(x)) + 0.5, x * y
net = Net().eval()
x = torch.randn(3, 4)
y = torch.randn(3, 4)
traced = torch.jit.trace(net, (x, y))
traced.save(out + "/model.pt")
with torch.no_grad():
    o0, o1 = net(x, y)
for name, t in (("x", x), ("y", y), ("o0", o0), ("o1", o1)):
    t.contiguous().numpy().tofile(out + "/" + name + ".bin")
`;

let dir: string;
const open: Array<{ model: BackendModel; instance: BackendInstance }> = [];

function floats(name: string): number[] {
  const b = readFileSync(join(dir, `${name}.bin`));
  return Array.from(new Float32Array(b.buffer, b.byteOffset, b.byteLength / 4));
}

function close(values: number[], expected: number[], tol = 1e-5): void {
  assert.equal(values.length, expected.length);
  for (let i = 0; i < values.length; i++) {
    assert.ok(Math.abs(values[i]! - expected[i]!) <= tol, `element ${i}: ${values[i]} vs ${expected[i]}`);
  }
}

function config(
  inputs: string[],
  outputs: Array<[string, DataType]>,
  extra: Partial<{ maxBatchSize: number }> = {},
): ModelConfig {
  return modelConfig({
    name: 'net',
    platform: 'pytorch_libtorch',
    backend: 'pytorch',
    maxBatchSize: extra.maxBatchSize ?? 8,
    input: inputs.map((name) => ({ name, dataType: DataType.TYPE_FP32, dims: [4n] })),
    output: outputs.map(([name, dataType], i) => ({ name, dataType, dims: [i === 0 ? 3n : 4n] })),
  });
}

async function load(cfg: ModelConfig, backendConfig?: Record<string, string>, modelDir = dir) {
  const ctx = modelContext({ name: cfg.name, modelDir, config: cfg, backendConfig });
  const model = await backend.loadModel(ctx);
  const instance = await model.createInstance(instanceContext(ctx));
  open.push({ model, instance });
  return instance as PyTorchInstance;
}

before(() => {
  if (skip) return;
  dir = mkdtempSync(join(tmpdir(), 'nereid-torch-'));
  execFileSync(PYTHON, ['-c', TRACE, dir], { stdio: 'inherit' });
});

after(async () => {
  for (const l of open.splice(0)) {
    await l.instance.close();
    await l.model.close();
  }
  if (dir) rmSync(dir, { recursive: true, force: true });
});

const standardOutputs: Array<[string, DataType]> = [
  ['OUTPUT__0', DataType.TYPE_FP32],
  ['OUTPUT__1', DataType.TYPE_FP32],
];

describe('pytorch backend: TorchScript model traced by torch.jit.trace', { skip }, () => {
  let inst: PyTorchInstance;
  before(async () => {
    inst = await load(config(['INPUT__0', 'INPUT__1'], standardOutputs));
  });

  test('INPUT__n / OUTPUT__n names give positions; outputs match torch', async () => {
    const [res] = await inst.execute(
      [request([f32('INPUT__0', [3, 4], floats('x')), f32('INPUT__1', [3, 4], floats('y'))], { batchSize: 3 })],
      new TestTimer(),
    );
    const outs = ok(res);
    assert.deepEqual(outs.map((o) => [o.name, o.shape]), [
      ['OUTPUT__0', [3, 3]],
      ['OUTPUT__1', [3, 4]],
    ]);
    close(asF32(outs[0]!), floats('o0'));
    close(asF32(outs[1]!), floats('o1'));
  });

  test('requests of a batch are joined and their outputs split back', async () => {
    const x = floats('x');
    const y = floats('y');
    const r1 = request([f32('INPUT__0', [1, 4], x.slice(0, 4)), f32('INPUT__1', [1, 4], y.slice(0, 4))], {
      batchSize: 1,
    });
    const r2 = request([f32('INPUT__0', [2, 4], x.slice(4)), f32('INPUT__1', [2, 4], y.slice(4))], {
      batchSize: 2,
      outputs: ['OUTPUT__1'],
    });
    const [a, b] = await inst.execute([r1, r2], new TestTimer());
    const o0 = floats('o0');
    const o1 = floats('o1');
    assert.deepEqual(ok(a).map((o) => o.shape), [[1, 3], [1, 4]]);
    close(asF32(ok(a)[0]!), o0.slice(0, 3));
    close(asF32(ok(a)[1]!), o1.slice(0, 4));
    assert.deepEqual(ok(b).map((o) => [o.name, o.shape]), [['OUTPUT__1', [2, 4]]]);
    close(asF32(ok(b)[0]!), o1.slice(4));
  });

  test('a model without a batch dimension runs requests one by one', async () => {
    const l = await load(config(['INPUT__0', 'INPUT__1'], standardOutputs, { maxBatchSize: 0 }));
    const x = floats('x');
    const y = floats('y');
    const reqs = [0, 1].map((r) =>
      request([f32('INPUT__0', [1, 4], x.slice(r * 4, r * 4 + 4)), f32('INPUT__1', [1, 4], y.slice(r * 4, r * 4 + 4))]),
    );
    const res = await l.execute(reqs, new TestTimer());
    close(asF32(ok(res[1])[1]!), floats('o1').slice(4, 8));
  });
});

describe('pytorch backend: naming conventions', { skip }, () => {
  test("inputs named after forward()'s arguments are passed by name, whatever their order", async () => {
    const inst = await load(config(['y', 'x'], standardOutputs));
    const [res] = await inst.execute(
      [request([f32('y', [3, 4], floats('y')), f32('x', [3, 4], floats('x'))], { batchSize: 3 })],
      new TestTimer(),
    );
    close(asF32(ok(res)[0]!), floats('o0'));
  });

  test('other names follow the configuration order', async () => {
    const inst = await load(config(['A', 'B'], [['P', DataType.TYPE_FP32], ['Q', DataType.TYPE_FP32]]));
    const [res] = await inst.execute(
      [request([f32('B', [3, 4], floats('y')), f32('A', [3, 4], floats('x'))], { batchSize: 3 })],
      new TestTimer(),
    );
    close(asF32(ok(res)[0]!), floats('o0'));
    close(asF32(ok(res)[1]!), floats('o1'));
  });

  test('OUTPUT__1 alone picks the second result', async () => {
    const cfg = config(['INPUT__0', 'INPUT__1'], [['OUTPUT__1', DataType.TYPE_FP32]]);
    cfg.output[0]!.dims = [4n];
    const inst = await load(cfg);
    const [res] = await inst.execute(
      [request([f32('INPUT__0', [3, 4], floats('x')), f32('INPUT__1', [3, 4], floats('y'))], { batchSize: 3 })],
      new TestTimer(),
    );
    close(asF32(ok(res)[0]!), floats('o1'));
  });
});

describe('pytorch backend: failures', { skip }, () => {
  async function expectLoadFailure(
    cfg: ModelConfig,
    pattern: RegExp,
    backendConfig?: Record<string, string>,
    modelDir = dir,
  ) {
    await assert.rejects(load(cfg, backendConfig, modelDir), (err: unknown) => {
      assert.ok(err instanceof NereidError, String(err));
      assert.equal(err.code, 'NRD_LOAD_FAILED');
      assert.match(err.message, /'net'/);
      assert.match(err.message, pattern);
      return true;
    });
  }

  test('an input count that differs from forward() fails the load', async () => {
    await expectLoadFailure(config(['INPUT__0'], standardOutputs), /configuration expects 1 inputs, model provides 2/);
  });

  test('a model.pt that is not TorchScript fails the load with torch\'s reason', async () => {
    const bad = mkdtempSync(join(tmpdir(), 'nereid-torch-bad-'));
    try {
      writeFileSync(join(bad, 'model.pt'), 'this is not a TorchScript archive');
      await expectLoadFailure(
        config(['INPUT__0', 'INPUT__1'], standardOutputs),
        /RuntimeError: .*(zip|archive)/i,
        undefined,
        bad,
      );
    } finally {
      rmSync(bad, { recursive: true, force: true });
    }
  });

  test('an interpreter without torch names what to install', async () => {
    const env = join(dir, 'no-torch-env');
    mkdirSync(join(env, 'bin'), { recursive: true });
    mkdirSync(join(env, 'block'), { recursive: true });
    writeFileSync(join(env, 'block', 'torch.py'), 'raise ImportError("No module named \'torch\'")\n');
    writeFileSync(join(env, 'bin', 'python3'), `#!/bin/sh\nPYTHONPATH="${join(env, 'block')}" exec ${PYTHON} "$@"\n`);
    chmodSync(join(env, 'bin', 'python3'), 0o755);
    await expectLoadFailure(
      config(['INPUT__0', 'INPUT__1'], standardOutputs),
      /torch is not importable.*install python3-torch \(Debian\) or pip install torch/,
      { 'python-executable': join(env, 'bin', 'python3') },
    );
  });

  test('an output whose type differs from the configuration fails the batch', async () => {
    const inst = await load(
      config(
        ['INPUT__0', 'INPUT__1'],
        [
          ['OUTPUT__0', DataType.TYPE_INT32],
          ['OUTPUT__1', DataType.TYPE_FP32],
        ],
      ),
    );
    await assert.rejects(
      inst.execute(
        [request([f32('INPUT__0', [1, 4], [1, 2, 3, 4]), f32('INPUT__1', [1, 4], [1, 2, 3, 4])])],
        new TestTimer(),
      ),
      /'net'.*unexpected datatype TYPE_FP32 for inference output 'OUTPUT__0', expecting TYPE_INT32/,
    );
  });

  test('a killed process restarts by itself and serves again', async () => {
    const inst = await load(config(['INPUT__0', 'INPUT__1'], standardOutputs));
    const pid = inst.pid!;
    process.kill(pid, 'SIGKILL');
    // the instance notices the exit and restarts by itself, without a request
    for (let i = 0; i < 600 && inst.restartCount === 0; i++) await new Promise((r) => setTimeout(r, 100));
    assert.equal(inst.restartCount, 1);
    assert.notEqual(inst.pid, pid);
    const [res] = await inst.execute(
      [request([f32('INPUT__0', [1, 4], [1, 2, 3, 4]), f32('INPUT__1', [1, 4], [1, 1, 1, 1])])],
      new TestTimer(),
    );
    assert.deepEqual(asF32(ok(res)[1]!), [1, 2, 3, 4]);
    assert.equal(inst.restartCount, 1);
  });
});
