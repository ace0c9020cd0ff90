/**
 * The decoupled success cases of Triton's model-config QA (python models
 * whose auto_complete_config sets, clears or leaves model_transaction_policy)
 * load, and `nereid validate` agrees with the server on every model,
 * including one a backend refuses.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { Server } from '../../src/core/server.js';
import { runValidate } from '../../src/cli/validate.js';
import { TempRepository } from '../helpers/repository.js';
import { PYTHON, missingPythonModule } from '../backends/python/helpers.js';

const noNumpy = missingPythonModule('numpy');

const IO = `input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] },
  { name: "INPUT1" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] }, { name: "OUTPUT1" data_type: TYPE_FP32 dims: [ 4 ] } ]
`;

function autoCompleteModel(policy: string): string {
  return `import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    @staticmethod
    def auto_complete_config(config):
        config.set_max_batch_size(4)
${policy ? `        config.set_model_transaction_policy(${policy})\n` : ''}        return config

    def execute(self, requests):
        return None
`;
}

async function validateOutput(args: string[]): Promise<{ code: number; text: string }> {
  const chunks: string[] = [];
  const code = await runValidate(args, (s) => chunks.push(s));
  return { code, text: chunks.join('') };
}

test('decoupled success cases load, and validate agrees with serve on every model', { skip: noNumpy }, async (t) => {
  const repo = new TempRepository();
  t.after(() => repo.cleanup());
  const cases: Record<string, string> = {
    model_transaction_policy: 'dict(decoupled=True)',
    model_transaction_policy_decoupled_false: 'dict(decoupled=False)',
    model_transaction_policy_no_op: '',
  };
  for (const [name, policy] of Object.entries(cases)) {
    repo.config(name, `backend: "python"\n${IO}`).file(name, '1/model.py', autoCompleteModel(policy));
  }
  repo.config('python_decoupled_in_config', `backend: "python"\nmodel_transaction_policy { decoupled: true }\n${IO}`);
  repo.file('python_decoupled_in_config', '1/model.py', autoCompleteModel(''));
  repo.addSub('onnx_decoupled', [1], `platform: "onnxruntime_onnx"
max_batch_size: 8
model_transaction_policy { decoupled: true }
input [ { name: "INPUT0" data_type: TYPE_INT32 dims: [ 16 ] }, { name: "INPUT1" data_type: TYPE_INT32 dims: [ 16 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_INT32 dims: [ 16 ] }, { name: "OUTPUT1" data_type: TYPE_INT32 dims: [ 16 ]
  } ]
`);

  const server = new Server({
    modelRepositories: [repo.dir],
    exitOnError: false,
    backendConfig: { python: { 'python-executable': PYTHON } },
  });
  await server.start();
  t.after(() => server.stop());
  const index = await server.repositoryIndex();
  const state = new Map(index.map((e) => [e.name, e]));
  for (const name of Object.keys(cases))
    assert.equal(state.get(name)?.state, 'READY', `${name}: ${state.get(name)?.reason}`);
  assert.equal(server.modelConfig('model_transaction_policy').modelTransactionPolicy?.decoupled, true);
  assert.equal(
    server.modelConfig('model_transaction_policy_decoupled_false').modelTransactionPolicy?.decoupled ?? false,
    false,
  );
  assert.equal(server.modelConfig('model_transaction_policy').maxBatchSize, 4);
  assert.equal(state.get('python_decoupled_in_config')?.state, 'READY');
  assert.equal(state.get('onnx_decoupled')?.state, 'UNAVAILABLE');
  assert.match(
    state.get('onnx_decoupled')!.reason!,
    /onnxruntime backend does not support models with the decoupled transaction policy/,
  );

  const { code, text } = await validateOutput([
    `--model-repository=${repo.dir}`,
    `--backend-config=python,python-executable=${PYTHON}`,
  ]);
  assert.equal(code, 1);
  for (const e of index) {
    const line = text
      .split('\n')
      .find((l) => l.includes(` ${e.name}`) && (l.startsWith('ok ') || l.startsWith('FAIL ')));
    assert.ok(line, `validate reports ${e.name}`);
    assert.equal(line.startsWith('ok '), e.state === 'READY', `validate and serve agree on ${e.name}: ${line}`);
  }
});

test("auto_complete_config may not change a decoupled setting the " +
  "configuration states (Triton's text)", { skip: noNumpy }, async (t) => {
  const repo = new TempRepository();
  t.after(() => repo.cleanup());
  repo.config('turns_on', `backend: "python"\nmodel_transaction_policy { decoupled: false }\n${IO}`);
  repo.file('turns_on', '1/model.py', autoCompleteModel('dict(decoupled=True)'));
  repo.config('turns_off', `backend: "python"\nmodel_transaction_policy { decoupled: true }\n${IO}`);
  repo.file('turns_off', '1/model.py', autoCompleteModel('dict(decoupled=False)'));
  repo.config('keeps', `backend: "python"\nmodel_transaction_policy { decoupled: false }\n${IO}`);
  repo.file('keeps', '1/model.py', autoCompleteModel('dict(decoupled=False)'));

  const server = new Server({
    modelRepositories: [repo.dir],
    exitOnError: false,
    backendConfig: { python: { 'python-executable': PYTHON } },
  });
  await server.start();
  t.after(() => server.stop());
  const state = new Map((await server.repositoryIndex()).map((e) => [e.name, e]));
  assert.equal(state.get('turns_on')?.state, 'UNAVAILABLE');
  assert.match(
    state.get('turns_on')!.reason!,
    new RegExp(
      String.raw`trying to change decoupled property in auto-complete-config for model 'turns_on', which is already ` +
      String.raw`set to 'False'\.`,
    ),
  );
  assert.equal(state.get('turns_off')?.state, 'UNAVAILABLE');
  assert.match(state.get('turns_off')!.reason!, /for model 'turns_off', which is already set to 'True'\./);
  assert.equal(state.get('keeps')?.state, 'READY', state.get('keeps')?.reason);
});
