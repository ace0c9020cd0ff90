/**
 * `nereid validate` agrees with `serve`: on a repository holding the
 * load-time failures the other tests load one by one (configuration,
 * ONNX files against their configuration, parameters, versions, labels,
 * warm-up, ensembles, Python auto-complete, JavaScript), every model that
 * validate passes loads, and for every model that does not, validate prints
 * the very reason the server's repository index gives.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdirSync } from 'node:fs';
import path from 'node:path';
import { Server } from '../../src/core/server.js';
import type { RepositoryIndexEntry } from '../../src/types/api.js';
import { runValidate } from '../../src/cli/validate.js';
import { silentLogger } from '../../src/logger.js';
import { buildAddSubModel } from '../helpers/onnx-builder.js';
import { TempRepository } from '../helpers/repository.js';
import { PYTHON, missingPythonModule } from '../backends/python/helpers.js';

const noNumpy = missingPythonModule('numpy');

const IO16 = (names: string[], type = 'TYPE_INT32') =>
  names.map((n) => `{ name: "${n}" data_type: ${type} dims: [ 16 ] }`).join(', ');

/** The add/sub ONNX model's configuration, with `edit` applied to its text. */
function addSubConfig(name: string, edit: (text: string) => string = (t) => t): string {
  return edit(`name: "${name}"
platform: "onnxruntime_onnx"
max_batch_size: 8
input [ ${IO16(['INPUT0', 'INPUT1'])} ]
output [ ${IO16(['OUTPUT0', 'OUTPUT1'])} ]
instance_group [ { kind: KIND_CPU count: 1 } ]
`);
}

function ensembleConfig(name: string, steps: string, extra = ''): string {
  return `name: "${name}"
platform: "ensemble"
max_batch_size: 8
input [ ${IO16(['A', 'B'])} ]
output [ ${IO16(['OUT0', 'OUT1'])} ]
${extra}
ensemble_scheduling { step [ ${steps} ] }
`;
}

const step = (model: string, version = -1, inputs = '{ key: "INPUT0" value: "A" }, { key: "INPUT1" value: "B" }') =>
  `{ model_name: "${model}" model_version: ${version} input_map [ ${inputs} ] ` +
  `output_map [ { key: "OUTPUT0" value: "OUT0" }, { key: "OUTPUT1" value: "OUT1" } ] }`;

function repository(): { repo: TempRepository; broken: string[] } {
  const repo = new TempRepository();
  const broken: string[] = [];
  const onnx = (name: string, edit?: (t: string) => string, bytes = buildAddSubModel('INT32', 16).toBytes()): void => {
    repo.config(name, addSubConfig(name, edit)).file(name, '1/model.onnx', bytes);
  };
  const bad = (name: string, define: () => void): void => {
    define();
    broken.push(name);
  };
  const ensemble = (name: string, config: string): void => {
    repo.config(name, config);
    mkdirSync(path.join(repo.dir, name, '1'), { recursive: true });
  };

  onnx('simple');
  ensemble('good', ensembleConfig('good', step('simple')));
  // The configuration against the ONNX file.
  bad('output_not_in_model', () => onnx('output_not_in_model', (t) => t.replace('"OUTPUT1"', '"OUTPUT2"')));
  bad('batching_fixed_dim', () => onnx('batching_fixed_dim', undefined, buildAddSubModel('INT32', 16, null).toBytes()));
  bad('wrong_input_type', () =>
    onnx('wrong_input_type', (t) =>
      t.replace('{ name: "INPUT0" data_type: TYPE_INT32', '{ name: "INPUT0" data_type: TYPE_FP32'),
    ),
  );
  bad('input_count', () =>
    onnx('input_count', (t) => t.replace(`input [ ${IO16(['INPUT0', 'INPUT1'])} ]`, `input [ ${IO16(['INPUT0'])} ]`)),
  );
  bad('corrupt_file', () => onnx('corrupt_file', undefined, new TextEncoder().encode('not an onnx file')));
  bad('no_model_file', () => {
    repo.config('no_model_file', addSubConfig('no_model_file'));
    mkdirSync(path.join(repo.dir, 'no_model_file', '1'), { recursive: true });
  });
  bad('kind_gpu', () => onnx('kind_gpu', (t) => t.replace('KIND_CPU', 'KIND_GPU')));
  bad('bad_execution_mode', () =>
    onnx('bad_execution_mode', (t) => `${t}parameters { key: "execution_mode" value: { string_value: "3" } }\n`),
  );
  bad('bad_inline', () =>
    onnx('bad_inline', (t) => `${t}parameters { key: "inline_execution" value: { string_value: "sometimes" } }\n`),
  );
  // The configuration itself.
  bad('zero_dims', () =>
    onnx('zero_dims', (t) =>
      t.replace(
        '{ name: "INPUT1" data_type: TYPE_INT32 dims: [ 16 ]',
        '{ name: "INPUT1" data_type: TYPE_INT32 dims: [ 0 ]',
      ),
    ),
  );
  bad('parse_error', () => onnx('parse_error', (t) => t.replace('max_batch_size: 8', 'max_batch_size: "eight"')));
  bad('name_mismatch', () => onnx('name_mismatch', (t) => t.replace('name: "name_mismatch"', 'name: "other"')));
  bad('unknown_backend', () =>
    repo
      .config('unknown_backend', 'backend: "tensorrt"\nplatform: "tensorrt_plan"\nmax_batch_size: 8\n')
      .file('unknown_backend', '1/model.plan', 'x'),
  );
  bad('missing_labels', () =>
    onnx('missing_labels', (t) =>
      t.replace(
        '{ name: "OUTPUT0" data_type: TYPE_INT32 dims: [ 16 ]',
        '{ name: "OUTPUT0" data_type: TYPE_INT32 dims: [ 16 ] label_filename: "labels.txt"',
      ),
    ),
  );
  bad('no_version_folder', () => repo.config('no_version_folder', addSubConfig('no_version_folder')));
  bad('missing_version', () =>
    onnx('missing_version', (t) => `${t}version_policy { specific { versions: [ 1, 2 ] } }\n`),
  );
  bad('warmup_file_missing', () =>
    onnx(
      'warmup_file_missing',
      (t) =>
        `${t}model_warmup [ { name: "w" batch_size: 1 inputs [ { key: "INPUT0" value: { data_type: TYPE_INT32 dims: ` +
        `[ 16 ] input_data_file: "nope" } }, { key: "INPUT1" value: { ` +
        `data_type: TYPE_INT32 dims: [ 16 ] zero_data: true } } ] } ]\n`,
    ),
  );
  // Ensembles.
  bad('unknown_step', () => ensemble('unknown_step', ensembleConfig('unknown_step', step('nope'))));
  bad('self_cycle', () => ensemble('self_cycle', ensembleConfig('self_cycle', step('self_cycle'))));
  bad('step_version', () => ensemble('step_version', ensembleConfig('step_version', step('simple', 2))));
  bad('step_failed', () => ensemble('step_failed', ensembleConfig('step_failed', step('corrupt_file'))));
  bad('step_invalid', () => ensemble('step_invalid', ensembleConfig('step_invalid', step('parse_error'))));
  bad('unmapped', () =>
    ensemble(
      'unmapped',
      ensembleConfig('unmapped', step('simple', -1, '{ key: "INPUT0" value: "A" }')).replace(
        `input [ ${IO16(['A', 'B'])} ]`,
        `input [ ${IO16(['A'])} ]`,
      ),
    ),
  );
  bad('no_step', () => ensemble('no_step', ensembleConfig('no_step', '')));
  bad('batch_too_big', () =>
    ensemble(
      'batch_too_big',
      ensembleConfig('batch_too_big', step('simple')).replace('max_batch_size: 8', 'max_batch_size: 16'),
    ),
  );
  bad('inconsistent_type', () =>
    ensemble('inconsistent_type', ensembleConfig('inconsistent_type', step('simple')).replace(`input ` +
      `[ ${IO16(['A', 'B'])} ]`, `input [ ${IO16(['A', 'B'], 'TYPE_FP32')} ]`)),
  );
  // JavaScript.
  bad('js_no_module', () => {
    repo.config('js_no_module', 'backend: "javascript"\n');
    mkdirSync(path.join(repo.dir, 'js_no_module', '1'), { recursive: true });
  });
  return { repo, broken };
}

async function validateLines(args: string[]): Promise<Map<string, string>> {
  const chunks: string[] = [];
  await runValidate(args, (s) => chunks.push(s));
  const lines = new Map<string, string>();
  for (const line of chunks.join('').split('\n')) {
    const m = /^(?:ok {3}|FAIL )([^ :]+)(?: \(version (\d+)\))?/.exec(line);
    if (m) lines.set(m[2] === undefined ? m[1]! : `${m[1]!}@${m[2]}`, line);
  }
  return lines;
}

/** Validate's line for one entry of the server's repository index says what the entry says. */
function sameAnswer(e: RepositoryIndexEntry, lines: ReadonlyMap<string, string>): void {
  if (e.state === 'READY') {
    const line = lines.get(`${e.name}@${e.version}`) ?? lines.get(e.name);
    assert.match(line ?? '', /^ok /, `serve loads ${e.name}, validate says: ${line}`);
  } else if (e.version === undefined) {
    assert.equal(lines.get(e.name), `FAIL ${e.name}: ${e.reason}`, `validate gives serve's reason for ${e.name}`);
  } else {
    assert.equal(
      lines.get(`${e.name}@${e.version}`),
      `FAIL ${e.name} (version ${e.version}): ${e.reason}`,
      `validate gives serve's reason for ${e.name}`,
    );
  }
}

async function agree(
  repo: TempRepository,
  broken: readonly string[],
  backendConfig: Record<string, Record<string, string>> = {},
  flags: string[] = [],
): Promise<void> {
  const server = new Server({ modelRepositories: [repo.dir], exitOnError: false, logger: silentLogger, backendConfig });
  await server.start();
  try {
    const index = await server.repositoryIndex();
    const lines = await validateLines([`--model-repository=${repo.dir}`, ...flags]);
    for (const e of index) sameAnswer(e, lines);
    for (const name of broken) {
      assert.ok(index.some((e) => e.name === name && e.state !== 'READY'), `${name} is a load failure`);
    }
    assert.equal(index.find((e) => e.name === 'simple')?.state, 'READY');
  } finally {
    await server.stop();
  }
}

test('validate gives the reason serve gives for every load-time failure, and ok for what loads', async (t) => {
  const { repo, broken } = repository();
  t.after(() => repo.cleanup());
  await agree(repo, broken);
});

test('validate and serve agree with auto-complete off', async (t) => {
  const { repo, broken } = repository();
  t.after(() => repo.cleanup());
  // Without auto-complete an ensemble's own inputs and outputs are checked before its steps, as Triton does.
  const server = new Server({
    modelRepositories: [repo.dir],
    exitOnError: false,
    logger: silentLogger,
    disableAutoCompleteConfig: true,
  });
  await server.start();
  const index = await server.repositoryIndex();
  await server.stop();
  const lines = await validateLines([`--model-repository=${repo.dir}`, '--disable-auto-complete-config']);
  for (const e of index) sameAnswer(e, lines);
  assert.ok(broken.length > 20);
});

test('Python auto_complete_config runs in validate as at load, with its errors', { skip: noNumpy }, async (t) => {
  const repo = new TempRepository();
  t.after(() => repo.cleanup());
  const model = (policy: string) => `import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    @staticmethod
    def auto_complete_config(config):
        config.set_model_transaction_policy(${policy})
        return config

    def execute(self, requests):
        return None
`;
  const io = `input [ { name: "IN" data_type: TYPE_FP32 dims: [ 4 ] } ` +
    `]\noutput [ { name: "OUT" data_type: TYPE_FP32 dims: [ 4 ] } ]\n`;
  repo
    .config('turns_on', `backend: "python"\nmodel_transaction_policy { decoupled: false }\n${io}`)
    .file('turns_on', '1/model.py', model('dict(decoupled=True)'));
  repo.config('fine', `backend: "python"\n${io}`).file('fine', '1/model.py', model('dict(decoupled=False)'));
  repo.config('no_model_py', `backend: "python"\n${io}`);
  mkdirSync(path.join(repo.dir, 'no_model_py', '1'), { recursive: true });
  repo.config('raises', `backend: "python"\n${io}`).file('raises', '1/model.py', model('dict(streaming=True)'));
  const server = new Server({
    modelRepositories: [repo.dir],
    exitOnError: false,
    logger: silentLogger,
    backendConfig: { python: { 'python-executable': PYTHON } },
  });
  await server.start();
  const index = await server.repositoryIndex();
  await server.stop();
  const lines = await validateLines([
    `--model-repository=${repo.dir}`,
    `--backend-config=python,python-executable=${PYTHON}`,
  ]);
  for (const e of index) sameAnswer(e, lines);
  assert.match(
    lines.get('turns_on') ?? '',
    /trying to change decoupled property in auto-complete-config for model 'turns_on'/,
  );
  assert.match(lines.get('raises') ?? '', /contains property other than 'decoupled'/);
  assert.match(lines.get('fine') ?? '', /^ok /);
});

test('validate prints the warnings loading gives, under their model', async (t) => {
  const repo = new TempRepository();
  t.after(() => repo.cleanup());
  repo
    .config(
      'metric_family',
      addSubConfig(
        'metric_family',
        (text) =>
          `${text}model_metrics { metric_control [ { ` +
          'metric_identifier { family: "nv_inference_request_duration_us" } ' +
          'histogram_options { buckets: [ 1, 2 ] } } ] }\n',
      ),
    )
    .file('metric_family', '1/model.onnx', buildAddSubModel('INT32', 16).toBytes());
  const chunks: string[] = [];
  const code = await runValidate([`--model-repository=${repo.dir}`], (s) => chunks.push(s));
  const text = chunks.join('');
  assert.equal(code, 0, text);
  assert.match(text, /ok {3}metric_family \(onnxruntime_onnx/);
  assert.match(
    text,
    new RegExp(
      "\nwarn metric_family: Metric family 'nv_inference_request_duration_us' in 'metric_identifier' " +
        'is not a customizable metric in Triton core\\.\n',
    ),
  );
});

test('with auto-complete off, a Python model without its interpreter fails validate as it fails serve', async (t) => {
  const repo = new TempRepository();
  t.after(() => repo.cleanup());
  const io =
    'input [ { name: "IN" data_type: TYPE_FP32 dims: [ 4 ] } ]\n' +
    'output [ { name: "OUT" data_type: TYPE_FP32 dims: [ 4 ] } ]\n';
  const envPath = 'parameters { key: "EXECUTION_ENV_PATH" value: { string_value: "$$TRITON_MODEL_DIRECTORY/env" } }\n';
  repo
    .config('no_env', `backend: "python"\n${io}${envPath}`)
    .file('no_env', '1/model.py', 'class TritonPythonModel:\n    def execute(self, requests):\n        return None\n');
  const server = new Server({
    modelRepositories: [repo.dir],
    exitOnError: false,
    logger: silentLogger,
    disableAutoCompleteConfig: true,
  });
  await server.start();
  const index = await server.repositoryIndex();
  await server.stop();
  const lines = await validateLines([`--model-repository=${repo.dir}`, '--disable-auto-complete-config']);
  const entry = index.find((e) => e.name === 'no_env')!;
  assert.equal(entry.state, 'UNAVAILABLE');
  assert.match(entry.reason ?? '', /EXECUTION_ENV_PATH '.*env' does not exist/);
  sameAnswer(entry, lines);
});
