import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { Server } from '../../../src/core/server.js';
import { typedView } from '../../../src/tensor/tensor.js';
import { TempRepository, int32Tensor } from '../../helpers/repository.js';
import { PYTHON, fixtureDir, missingPythonModule } from './helpers.js';

const noNumpy = missingPythonModule('numpy');
const noTorch = missingPythonModule('torch');

const a = Array.from({ length: 16 }, (_, i) => i);
const b = Array.from({ length: 16 }, () => 3);

function pythonModel(repo: TempRepository, name: string, fixture: string, config: string): void {
  repo.file(name, '1/model.py', readFileSync(`${fixtureDir(fixture)}/model.py`));
  repo.config(name, config);
}

test('a python model calls an ONNX model through BLS inside a real server; ' +
  'broken python models stay UNAVAILABLE', { skip: noNumpy }, async (t) => {
  const repo = new TempRepository().addSub('simple');
  pythonModel(
    repo,
    'bls_add_sub',
    'bls_add_sub',
    `name: "bls_add_sub"
backend: "python"
max_batch_size: 8
input [ { name: "INPUT0" data_type: TYPE_INT32 dims: [ 16 ] }, { name: "INPUT1" data_type: TYPE_INT32 dims: [ 16 ] } ]
output [
  { name: "OUTPUT0" data_type: TYPE_INT32 dims: [ 16 ] },
  { name: "OUTPUT1" data_type: TYPE_INT32 dims: [ 16 ] },
  { name: "OUTPUT2" data_type: TYPE_INT32 dims: [ 16 ] }
]
parameters: { key: "TARGET_MODEL" value: { string_value: "simple" } }
instance_group [ { kind: KIND_CPU count: 1 } ]
`,
  );
  pythonModel(repo, 'broken', 'syntax_error', 'name: "broken"\nbackend: "python"\n');
  t.after(() => repo.cleanup());

  const server = new Server({
    modelRepositories: [repo.dir],
    exitOnError: false,
    backendConfig: { python: { 'python-executable': PYTHON } },
  });
  await server.start();
  t.after(() => server.stop());

  const r = await server.infer({
    model: 'bls_add_sub',
    id: 'bls-1',
    inputs: [int32Tensor('INPUT0', a), int32Tensor('INPUT1', b)],
  });
  assert.equal(r.modelName, 'bls_add_sub');
  assert.equal(r.id, 'bls-1');
  const byName = new Map(r.outputs.map((o) => [o.name, Array.from(typedView(o), Number)]));
  assert.deepEqual(byName.get('OUTPUT0'), a.map((x) => x + 3));
  assert.deepEqual(byName.get('OUTPUT1'), a.map((x) => x - 3));
  assert.deepEqual(byName.get('OUTPUT2'), a.map((x) => (x + 3) * 2));

  const index = await server.repositoryIndex();
  const broken = index.find((e) => e.name === 'broken');
  assert.equal(broken?.state, 'UNAVAILABLE');
  assert.match(broken?.reason ?? '', /SyntaxError/);
  assert.equal(index.find((e) => e.name === 'bls_add_sub')?.state, 'READY');
});

test('a TorchScript model with platform pytorch_libtorch serves concurrent requests ' +
  'through a real server with dynamic batching', { skip: noTorch }, async (t) => {
  const repo = new TempRepository();
  t.after(() => repo.cleanup());
  const versionDir = join(repo.dir, 'torch_add', '1');
  mkdirSync(versionDir, { recursive: true });
  execFileSync(PYTHON, [
    '-c',
    `
import sys, torch
class AddSub(torch.nn.Module):
    def forward(self, a, b):
        return a + b, a - b
example = (torch.zeros(1, 16, dtype=torch.int32), torch.zeros(1, 16, dtype=torch.int32))
torch.jit.trace(AddSub(), example).save(sys.argv[1])
`,
    join(versionDir, 'model.pt'),
  ]);
  repo.config(
    'torch_add',
    `name: "torch_add"
platform: "pytorch_libtorch"
max_batch_size: 8
input [ { name: "INPUT__0" data_type: TYPE_INT32 dims: [ 16 ] }, { name: "INPUT__1" data_type: TYPE_INT32 dims: [ 16 ]
  } ]
output [ { name: "OUTPUT__0" data_type: TYPE_INT32 dims: [ 16 ] },
  { name: "OUTPUT__1" data_type: TYPE_INT32 dims: [ 16 ] } ]
dynamic_batching { max_queue_delay_microseconds: 20000 }
instance_group [ { kind: KIND_CPU count: 1 } ]
`,
  );
  const server = new Server({
    modelRepositories: [repo.dir],
    backendConfig: { pytorch: { 'python-executable': PYTHON } },
  });
  await server.start();
  t.after(() => server.stop());

  const results = await Promise.all(
    [0, 1, 2, 3].map((k) =>
      server.infer({
        model: 'torch_add',
        inputs: [int32Tensor('INPUT__0', a.map((x) => x + k)), int32Tensor('INPUT__1', b)],
      }),
    ),
  );
  results.forEach((r, k) => {
    assert.deepEqual(Array.from(typedView(r.outputs[0]!), Number), a.map((x) => x + k + 3));
    assert.deepEqual(Array.from(typedView(r.outputs[1]!), Number), a.map((x) => x + k - 3));
  });
});
