import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { ConfigError, parseModelConfig, parseModelConfigWithPositions } from '../../src/config/index.js';
import { DataType, ModelInstanceGroup_Kind } from '../../src/gen/model_config_pb.js';

const FILE = 'fraud_detector/config.pbtxt';

/** Parses `text` expecting a ConfigError; returns it. */
function parseError(text: string): ConfigError {
  try {
    parseModelConfig(text, FILE);
  } catch (err) {
    assert.ok(err instanceof ConfigError, `expected ConfigError, got ${String(err)}`);
    return err;
  }
  assert.fail('expected the text to be rejected');
}

function assertAt(err: ConfigError, line: number, column: number, detail: RegExp): void {
  assert.equal(err.code, 'NRD_CONFIG');
  assert.equal(err.errorClass, 'INVALID_ARG');
  assert.equal(err.httpStatus, 400);
  assert.equal(err.file, FILE);
  assert.deepEqual([err.line, err.column], [line, column], err.message);
  assert.match(err.detail, detail);
  assert.ok(err.message.startsWith(`${FILE}:${line}:${column}: `), err.message);
}

const FULL = `# A fraud model
name: "fraud_detector"
backend: "onnxruntime"
max_batch_size: 16
input [
  {
    name: "input_features"
    data_type: TYPE_FP32
    dims: [ 30 ]
  },
  {
    name: "mask"
    data_type: TYPE_BOOL
    dims: [ -1, 4 ]
    reshape: { shape: [ -1, 2, 2 ] }
  }
]
output {
  name: "score"
  data_type: TYPE_FP32
  dims: [ 1 ]
}
instance_group [ { kind: KIND_CPU, count: 2 } ]
dynamic_batching {
  preferred_batch_size: [ 4, 8 ]
  max_queue_delay_microseconds: 100
  priority_levels: 2
  default_priority_level: 1
  priority_queue_policy {
    key: 2
    value: { timeout_action: DELAY, default_timeout_microseconds: 5000 }
  }
}
parameters { key: "threads" value: { string_value: "4" } }
version_policy: < specific: < versions: [1, 3] > >
`;

describe('parseModelConfig', () => {
  it('reads a full config into the generated message', () => {
    const config = parseModelConfig(FULL, FILE);
    assert.equal(config.name, 'fraud_detector');
    assert.equal(config.maxBatchSize, 16);
    assert.equal(config.input.length, 2);
    assert.equal(config.input[0]!.dataType, DataType.TYPE_FP32);
    assert.deepEqual(config.input[1]!.dims, [-1n, 4n]);
    assert.deepEqual(config.input[1]!.reshape?.shape, [-1n, 2n, 2n]);
    assert.equal(config.instanceGroup[0]!.kind, ModelInstanceGroup_Kind.CPU);
    assert.equal(config.schedulingChoice.case, 'dynamicBatching');
    assert.equal(config.parameters['threads']?.stringValue, '4');
    assert.equal(config.versionPolicy?.policyChoice.case, 'specific');
  });

  it('maps field paths to the line and column where they were written', () => {
    const { positions } = parseModelConfigWithPositions(FULL, FILE);
    assert.deepEqual(positions.get('name'), { line: 2, column: 1 });
    assert.deepEqual(positions.get('input[0]'), { line: 6, column: 3 });
    assert.deepEqual(positions.get('input[0].dims'), { line: 9, column: 5 });
    assert.deepEqual(positions.get('input[1].dims[1]'), { line: 14, column: 17 });
    assert.deepEqual(positions.get('input[1].reshape.shape[2]'), { line: 15, column: 32 });
    assert.deepEqual(positions.get('output[0].name'), { line: 19, column: 3 });
    assert.deepEqual(positions.get('instance_group[0].count'), { line: 23, column: 36 });
    assert.deepEqual(positions.get('dynamic_batching.preferred_batch_size[1]'), { line: 25, column: 30 });
    assert.deepEqual(positions.get('dynamic_batching.priority_queue_policy[2]'), { line: 29, column: 3 });
    assert.deepEqual(positions.get('dynamic_batching.priority_queue_policy[2].timeout_action'), {
      line: 31,
      column: 14,
    });
    assert.deepEqual(positions.get('parameters[threads].string_value'), { line: 34, column: 38 });
    assert.deepEqual(positions.get('version_policy.specific.versions[1]'), { line: 35, column: 45 });
  });

  it('accepts comments, separators, <> blocks, repeated scalars and enum numbers', () => {
    const config = parseModelConfig(
      'name: "m"; max_batch_size: 0x10, # sixteen\ninput < name: \'a\' data_type: 11 dims: 1 dims: 2 >',
      FILE,
    );
    assert.equal(config.maxBatchSize, 16);
    assert.deepEqual(config.input[0]!.dims, [1n, 2n]);
    assert.equal(config.input[0]!.dataType, DataType.TYPE_FP32);
  });

  it('treats an empty file as an empty config', () => {
    const config = parseModelConfig('# nothing here\n', FILE);
    assert.equal(config.name, '');
    assert.equal(config.input.length, 0);
  });
});

describe('parse errors carry file:line:column and plain words', () => {
  it('missing colon before a scalar', () => {
    const err = parseError('name: "m"\nmax_batch_size 8\n');
    assertAt(err, 2, 16, /expected ":" after "max_batch_size", got 8/);
    assert.equal(err.field, 'max_batch_size');
  });

  it('block never closed points at its opening brace', () => {
    const err = parseError('name: "m"\ninput {\n  name: "x"\n  dims: [ 1 ]\n');
    assertAt(err, 2, 7, /"input" opened here is never closed: a "}" is missing/);
  });

  it('closing brace with nothing open', () => {
    assertAt(parseError('name: "m"\n}\n'), 2, 1, /unexpected "}": there is no open block/);
  });

  it('unterminated string', () => {
    assertAt(parseError('name: "m\nbackend: "python"\n'), 1, 7, /string is not closed/);
  });

  it('missing comma in a list', () => {
    const err = parseError('input {\n  dims: [ 3, 224 224 ]\n}\n');
    assertAt(err, 2, 18, /expected "," or "]" in the list of "dims", got 224/);
  });

  it('malformed number', () => {
    assertAt(parseError('max_batch_size: 8x\n'), 1, 17, /"8x" is not a valid number/);
  });

  it('unexpected character', () => {
    assertAt(parseError('name: "m"\n@\n'), 2, 1, /unexpected character "@"/);
  });

  it('unknown top-level field with a suggestion', () => {
    const err = parseError('name: "m"\nmax_batch: 8\n');
    assertAt(err, 2, 1, /unknown field "max_batch" in ModelConfig \(did you mean "max_batch_size"\?\)/);
    assert.equal(err.field, 'max_batch');
  });

  it('unknown nested field', () => {
    const err = parseError('input {\n  name: "x"\n  dim: [ 1 ]\n}\n');
    assertAt(err, 3, 3, /unknown field "dim" in ModelInput \(did you mean "dims"\?\)/);
    assert.equal(err.field, 'input[0].dim');
  });

  it('a top-level field inside a block hints at a missing brace', () => {
    const err = parseError('input {\n  name: "x"\n  dims: [ 1 ]\nmax_batch_size: 4\n');
    assertAt(err, 4, 1, /belongs at the top level: is a "}" missing/);
  });

  it('string where an integer is expected', () => {
    const err = parseError('max_batch_size: "8"\n');
    assertAt(err, 1, 17, /"max_batch_size" expects an integer, got the string "8"/);
  });

  it('fraction where an integer is expected', () => {
    const err = parseError('input { dims: [ 1.5 ] }\n');
    assertAt(err, 1, 17, /"dims" expects a whole number, got 1\.5/);
    assert.equal(err.field, 'input[0].dims[0]');
  });

  it('number where a string is expected', () => {
    assertAt(parseError('name: 42\n'), 1, 7, /"name" expects a string in quotes, got 42/);
  });

  it('bad bool', () => {
    assertAt(parseError('input { optional: yes }\n'), 1, 19, /"optional" expects true or false, got yes/);
  });

  it('integer out of range', () => {
    assertAt(
      parseError('max_batch_size: 3000000000\n'),
      1,
      17,
      /must be between -2147483648 and 2147483647, got 3000000000/,
    );
  });

  it('negative value for an unsigned field', () => {
    const err = parseError('dynamic_batching {\n  max_queue_delay_microseconds: -5\n}\n');
    assertAt(err, 2, 33, /"max_queue_delay_microseconds" cannot be negative/);
  });

  it('bad enum name lists the valid ones', () => {
    const err = parseError('input {\n  name: "x"\n  data_type: TYPE_FLOAT32\n}\n');
    assertAt(
      err,
      3,
      14,
      new RegExp(
        String.raw`TYPE_FLOAT32 is not a valid value for "data_type" \(did you mean TYPE_FP32\?\); expected one of ` +
        String.raw`TYPE_INVALID, TYPE_BOOL,.*TYPE_BF16$`,
      ),
    );
    assert.equal(err.field, 'input[0].data_type');
  });

  it('misspelt enum name gets a suggestion', () => {
    assertAt(
      parseError('input { data_type: TYPE_IN32 }\n'),
      1,
      20,
      /TYPE_IN32 is not a valid value for "data_type" \(did you mean TYPE_INT32\?\)/,
    );
  });

  it('enum name in the wrong case', () => {
    const err = parseError('instance_group { kind: kind_gpu }\n');
    assertAt(err, 1, 24, /names are case-sensitive: did you mean KIND_GPU\?/);
  });

  it('quoted enum name', () => {
    assertAt(
      parseError('input { data_type: "TYPE_FP32" }\n'),
      1,
      20,
      /written without quotes, got the string "TYPE_FP32"/,
    );
  });

  it('field set twice', () => {
    assertAt(
      parseError('max_batch_size: 1\nmax_batch_size: 2\n'),
      2,
      1,
      /"max_batch_size" is set more than once \(first at line 1\)/,
    );
  });

  it('two schedulers at once', () => {
    const err = parseError('dynamic_batching { }\nsequence_batching { }\n');
    assertAt(err, 2, 1, /"sequence_batching" cannot be used together with "dynamic_batching" \(line 1\)/);
  });

  it('message field given a scalar', () => {
    assertAt(parseError('dynamic_batching: 5\n'), 1, 19, /expected "\{" to start "dynamic_batching", got 5/);
  });

  it('bad map entry', () => {
    assertAt(
      parseError('parameters { name: "a" }\n'),
      1,
      14,
      /expected "key" or "value" in an entry of "parameters", got name/,
    );
  });
});
