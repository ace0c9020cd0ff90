import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import {
  ConfigError,
  findEnsembleCycle,
  parseModelConfigWithPositions,
  validateEnsembleModels,
} from '../../src/config/index.js';
import type { ModelConfig } from '../../src/gen/model_config_pb.js';

const FILE = 'pipeline/config.pbtxt';

function cfg(text: string): ModelConfig {
  return parseModelConfigWithPositions(text, 'x/config.pbtxt').config;
}

const MODELS: Record<string, ModelConfig> = {
  tokenize: cfg(`name: "tokenize"
backend: "python"
max_batch_size: 8
input [ { name: "TEXT", data_type: TYPE_STRING, dims: [ 1 ] } ]
output [ { name: "IDS", data_type: TYPE_INT64, dims: [ -1 ] } ]`),
  classify: cfg(`name: "classify"
backend: "onnxruntime"
max_batch_size: 8
input [ { name: "input_ids", data_type: TYPE_INT64, dims: [ 16 ] },
        { name: "mask", data_type: TYPE_INT64, dims: [ 16 ], optional: true } ]
output [ { name: "logits", data_type: TYPE_FP32, dims: [ 2 ] } ]`),
  small: cfg(`name: "small"
backend: "onnxruntime"
max_batch_size: 2
input [ { name: "input_ids", data_type: TYPE_INT64, dims: [ 16 ] } ]
output [ { name: "logits", data_type: TYPE_FP32, dims: [ 2 ] } ]`),
  stream: cfg(`name: "stream"
backend: "python"
max_batch_size: 8
model_transaction_policy { decoupled: true }
input [ { name: "TEXT", data_type: TYPE_STRING, dims: [ 1 ] } ]
output [ { name: "IDS", data_type: TYPE_INT64, dims: [ -1 ] } ]`),
  join: cfg(`name: "join"
backend: "python"
max_batch_size: 8
input [ { name: "A", data_type: TYPE_INT64, dims: [ -1 ] }, { name: "B", data_type: TYPE_INT64, dims: [ -1 ] } ]
output [ { name: "OUT", data_type: TYPE_INT64, dims: [ -1 ] } ]`),
};

const lookup = (name: string) => MODELS[name];

function ensemble(
  steps: string,
  io = 'input [ { name: "TEXT", data_type: TYPE_STRING, dims: [ 1 ] } ' +
    ']\noutput [ { name: "LOGITS", data_type: TYPE_FP32, dims: [ 2 ] } ]',
) {
  const text = `name: "pipeline"\nplatform: "ensemble"\nmax_batch_size: ` +
    `8\n${io}\nensemble_scheduling {\n  step [\n${steps}\n  ]\n}\n`;
  return parseModelConfigWithPositions(text, FILE);
}

const TOKENIZE =
  '    { model_name: "tokenize", model_version: -1, input_map { key: ' +
  '"TEXT" value: "TEXT" }, output_map { key: "IDS" value: "ids" } }';
const CLASSIFY =
  '    { model_name: "classify", model_version: -1, input_map { key: ' +
  '"input_ids" value: "ids" }, output_map { key: "logits" value: "LOGITS" } }';

function rejects(parsed: ReturnType<typeof ensemble>, detail: RegExp, line?: number): void {
  assert.throws(
    () => validateEnsembleModels(parsed.config, lookup, { file: FILE, positions: parsed.positions }),
    (err: unknown) => {
      assert.ok(err instanceof ConfigError);
      assert.match(err.detail, detail);
      if (line !== undefined) assert.equal(err.line, line, err.message);
      return true;
    },
  );
}

describe('validateEnsembleModels', () => {
  it('accepts a consistent pipeline (variable dims match fixed ones; optional inputs may be left out)', () => {
    const parsed = ensemble(`${TOKENIZE},\n${CLASSIFY}`);
    const before = parsed.config.modelTransactionPolicy;
    assert.equal(before, undefined);
    assert.deepEqual(validateEnsembleModels(parsed.config, lookup), { decoupled: false });
    // Recorded like Triton, so the JSON form shows model_transaction_policy { decoupled: false }.
    assert.equal(parsed.config.modelTransactionPolicy?.decoupled, false);
  });

  it('reports step models that are not available, in Triton\'s words', () => {
    rejects(
      ensemble(TOKENIZE.replace('"tokenize", model_version: -1', '"tokenise", model_version: 3')),
      /ensemble pipeline contains models that are not available or ambiguous: tokenise$/,
      8,
    );
  });

  it('a map must name a real input or output of the step model', () => {
    rejects(
      ensemble(`${TOKENIZE},\n${CLASSIFY.replace('key: "input_ids"', 'key: "ids_in"')}`),
      /in ensemble pipeline, ensemble tensor ids is mapping to non-existing input ids_in in model classify/,
      9,
    );
    rejects(
      ensemble(`${TOKENIZE},\n${CLASSIFY.replace('key: "logits"', 'key: "probs"')}`),
      /in ensemble pipeline, ensemble tensor LOGITS is mapped from non-existing output probs in model classify/,
      9,
    );
  });

  it('every required input of a step must be fed', () => {
    const classifyTwoInputs = CLASSIFY.replace('key: "input_ids" value: "ids"', 'key: "mask" value: "ids"');
    rejects(
      ensemble(`${TOKENIZE},\n${classifyTwoInputs}`),
      /in ensemble pipeline, input input_ids in model classify is not mapped to any ensemble tensors/,
    );
  });

  it('a tensor keeps one data type', () => {
    const io =
      'input [ { name: "TEXT", data_type: TYPE_FP32, dims: [ 1 ] } ' +
      ']\noutput [ { name: "LOGITS", data_type: TYPE_FP32, dims: [ 2 ] } ]';
    rejects(
      ensemble(`${TOKENIZE},\n${CLASSIFY}`, io),
      new RegExp(
        String.raw`in ensemble pipeline, ensemble tensor TEXT: inconsistent data type: TYPE_FP32 is inferred from ` +
        String.raw`model pipeline while TYPE_STRING is inferred from model tokenize`,
      ),
      8,
    );
  });

  it('a tensor keeps a compatible shape', () => {
    const io =
      'input [ { name: "TEXT", data_type: TYPE_STRING, dims: [ 1 ] } ' +
      ']\noutput [ { name: "LOGITS", data_type: TYPE_FP32, dims: [ 3 ] } ]';
    rejects(
      ensemble(`${TOKENIZE},\n${CLASSIFY}`, io),
      new RegExp(
        String.raw`in ensemble pipeline, ensemble tensor LOGITS: inconsistent shape: \[-1,3\] is inferred from model ` +
        String.raw`pipeline while \[-1,2\] is inferred from model classify`,
      ),
      9,
    );
  });

  it('a step model must take batches as large as the ensemble', () => {
    rejects(
      ensemble(`${TOKENIZE},\n${CLASSIFY.replace('"classify"', '"small"')}`),
      new RegExp(
        String.raw`ensemble pipeline allows maximum batch size 8, but it contains model small which only allows ` +
        String.raw`maximum batch size to be 2`,
      ),
      9,
    );
  });

  it('a decoupled step makes the ensemble decoupled', () => {
    const parsed = ensemble(`${TOKENIZE.replace('"tokenize"', '"stream"')},\n${CLASSIFY}`);
    assert.deepEqual(validateEnsembleModels(parsed.config, lookup), { decoupled: true });
    assert.equal(parsed.config.modelTransactionPolicy?.decoupled, true);
  });

  it('a step may not join outputs of different decoupled models', () => {
    const steps = [
      '    { model_name: "stream", input_map { key: "TEXT" value: "TEXT" }, output_map { key: "IDS" value: "a" } }',
      '    { model_name: "tokenize", input_map { key: "TEXT" value: "TEXT" }, output_map { key: "IDS" value: "b" } }',
      '    { model_name: "join", input_map [ { key: "A" value: "a" }, { ' +
      'key: "B" value: "b" } ], output_map { key: "OUT" value: "ids" } }',
      CLASSIFY,
    ].join(',\n');
    rejects(
      ensemble(steps),
      /in ensemble pipeline, step of model 'join' receives inputs originated from different decoupled models/,
    );
  });
});

describe('findEnsembleCycle', () => {
  const e = (name: string, ...steps: string[]) =>
    cfg(
      `name: "${name}"\nplatform: "ensemble"\nensemble_scheduling { ` +
      `${steps.map((s) => `step { model_name: "${s}" }`).join(' ')} }`,
    );

  it('finds a loop through other ensembles', () => {
    const configs: Record<string, ModelConfig> = {
      a: e('a', 'tokenize', 'b'),
      b: e('b', 'c'),
      c: e('c', 'a'),
      tokenize: MODELS['tokenize']!,
    };
    assert.deepEqual(findEnsembleCycle('a', (n) => configs[n]), ['a', 'b', 'c', 'a']);
  });

  it('finds an ensemble that calls itself', () => {
    const configs: Record<string, ModelConfig> = { self: e('self', 'self') };
    assert.deepEqual(findEnsembleCycle('self', (n) => configs[n]), ['self', 'self']);
  });

  it('a diamond is not a loop', () => {
    const configs: Record<string, ModelConfig> = {
      top: e('top', 'l', 'r'),
      l: e('l', 'tokenize'),
      r: e('r', 'tokenize'),
      tokenize: MODELS['tokenize']!,
    };
    assert.equal(findEnsembleCycle('top', (n) => configs[n]), undefined);
  });
});
