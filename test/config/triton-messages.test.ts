/**
 * Config errors carry Triton's own sentence for the same check (the texts its
 * qa/L0_model_config suite greps the log for), after our file:line:col, so a
 * script written against Triton's log finds the same line in ours.
 */
import assert from 'node:assert/strict';
import { after, describe, it } from 'node:test';
import {
  ConfigError,
  normalizeModelConfig,
  parseModelConfigWithPositions,
  validateModelConfig,
} from '../../src/config/index.js';
import { resolveModelConfig } from '../../src/core/model-loader.js';
import { silentLogger } from '../../src/logger.js';
import { TempRepository } from '../helpers/repository.js';

const IO = `input [ { name: "input" data_type: TYPE_FP32 dims: [ 6 ] } ]
output [ { name: "output" data_type: TYPE_FP32 dims: [ 6 ] } ]
`;

/** [config body after name/platform, Triton's sentence]. `m` is the model name throughout. */
const CASES: Array<[string, string, string]> = [
  ['negative max_batch_size', `max_batch_size: -2\n${IO}`, "'max_batch_size' must be non-negative value for m"],
  ['missing data_type', 'input [ { name: "input" dims: [ 1 ] } ]\n', "model input 'input' must specify 'data_type'"],
  [
    'zero input dim',
    'input [ { name: "input" data_type: TYPE_FP32 dims: [ 0 ] } ]\n',
    "model input 'input' dimension must be integer >= 1, or -1 to indicate a variable-size dimension for m",
  ],
  [
    'zero output dim',
    'output [ { name: "output" data_type: TYPE_FP32 dims: [ 2, 0 ] } ]\n',
    "model output 'output' dimension must be integer >= 1, or -1 to indicate a variable-size dimension for m",
  ],
  [
    'zero reshape dim',
    'input [ { name: "input" data_type: TYPE_FP32 dims: [ 1 ] reshape: { shape: [ 0 ] } } ]\n',
    "model input 'input' reshape dimensions must be integer >= 1, or -1 to indicate a variable-size dimension for m",
  ],
  [
    'reshape element count',
    'output [ { name: "output" data_type: TYPE_FP32 dims: [ 6 ] reshape: { shape: [ 4 ] } } ]\n',
    "model output 'output' has different size for dims and reshape for m",
  ],
  [
    'reshape variable runs',
    'input [ { name: "input" data_type: TYPE_FP32 dims: [ 2, -1 ] reshape: { shape: [ 2, -1, -1 ] } } ]\n',
    "model input 'input' has different number of variable-size dimensions for dims and reshape for m",
  ],
  [
    'empty reshape without batching',
    'input [ { name: "input" data_type: TYPE_FP32 dims: [ 1 ] reshape: { shape: [ ] } } ]\n',
    "model input 'input' cannot have empty reshape for non-batching model as scalar tensors are not supported for m",
  ],
  [
    'default priority level',
    `max_batch_size: 4\n${IO}dynamic_batching { priority_levels: 3 default_priority_level: 0 }\n`,
    'default priority level must be in range [1, 3] for m',
  ],
  [
    'queue policy level',
    `max_batch_size: 4\n${IO}dynamic_batching { priority_levels: 3 ` +
    `default_priority_level: 1 priority_queue_policy { key: 4 value { } } }\n`,
    'priority queue policy must have priority level in range [1, 3] for m',
  ],
  [
    'preserve_ordering levels',
    `max_batch_size: 4\n${IO}dynamic_batching { preserve_ordering: ` +
    `true priority_levels: 3 default_priority_level: 1 }\n`,
    "Only one priority level is allowed when 'preserve_ordering' is true for m",
  ],
  [
    'preserve_ordering DELAY',
    `max_batch_size: 4\n${IO}dynamic_batching { preserve_ordering: true ` +
    `default_queue_policy { timeout_action: DELAY default_timeout_microseconds: 10 } }\n`,
    "Queue policy can not have DELAY as timeout action when 'preserve_ordering' is true for m",
  ],
  [
    'KIND_CPU with gpus',
    `${IO}instance_group [ { kind: KIND_CPU gpus: [ 0 ] } ]\n`,
    'instance group m_0 of model m has kind KIND_CPU but specifies one or more GPU',
  ],
  [
    'absent gpu id',
    `${IO}instance_group [ { kind: KIND_GPU gpus: [ 42 ] } ]\n`,
    'instance group m_0 of model m specifies invalid or unsupported gpu id ' +
    '42. GPUs with at least the minimum required CUDA compute compatibility',
  ],
  [
    'batch input sources',
    `max_batch_size: 4\n${IO}batch_input [ { kind: BATCH_ELEMENT_COUNT target_name: ` +
    `"n" data_type: TYPE_FP32 source_input: [ "input", "input" ] } ]\n`,
    "batch input kind 'BATCH_ELEMENT_COUNT' expects 1 source input, got 2",
  ],
  [
    'batch input unknown source',
    `max_batch_size: 4\n${IO}batch_input [ { kind: BATCH_ELEMENT_COUNT ` +
    `target_name: "n" data_type: TYPE_FP32 source_input: "UNKNOWN_INPUT" } ]\n`,
    "unknown source input name 'UNKNOWN_INPUT'",
  ],
  [
    'batch output unknown target',
    `max_batch_size: 4\n${IO}batch_output [ { kind: BATCH_SCATTER_WITH_INPUT_SHAPE ` +
    `target_name: "UNKNOWN_OUTPUT" source_input: "input" } ]\n`,
    "unknown target output name 'UNKNOWN_OUTPUT'",
  ],
  [
    'batch output target twice',
    `max_batch_size: 4\n${IO}batch_output [ { kind: BATCH_SCATTER_WITH_INPUT_SHAPE ` +
    `target_name: [ "output", "output" ] source_input: "input" } ]\n`,
    "target output name 'output' can only be specified once",
  ],
  [
    'sequence control kind twice',
    `max_batch_size: 4\n${IO}sequence_batching { control_input [ { name: "A" control [ { kind: CONTROL_SEQUENCE_END ` +
    `int32_false_true: [ 0, 1 ] } ] }, { name: "B" control [ { kind: ` +
    `CONTROL_SEQUENCE_END int32_false_true: [ 0, 1 ] } ] } ] }\n`,
    'sequence batching specifies multiple CONTROL_SEQUENCE_END tensors for m',
  ],
  [
    'sequence tensor twice',
    `max_batch_size: 4\n${IO}sequence_batching { control_input [ { name: "START" control [ { kind: ` +
    `CONTROL_SEQUENCE_START int32_false_true: [ 0, 1 ] } ] }, { name: "START" ` +
    `control [ { kind: CONTROL_SEQUENCE_READY int32_false_true: [ 0, 1 ] } ] } ] }\n`,
    "sequence batching control tensor 'START' is specified for multiple control kinds for m",
  ],
  [
    'sequence control without values',
    `max_batch_size: 4\n${IO}sequence_batching { control_input [ { ` +
    `name: "R" control [ { kind: CONTROL_SEQUENCE_READY } ] } ] }\n`,
    "sequence batching must specify either 'int32_false_true', " +
    "'fp32_false_true' or 'bool_false_true' for CONTROL_SEQUENCE_READY for m",
  ],
  [
    'ensemble scheduling on a non-ensemble',
    `${IO}ensemble_scheduling { step [ { model_name: "x" model_version: -1 input_map ` +
    `{ key: "a" value: "input" } output_map { key: "b" value: "output" } } ] }\n`,
    "ensemble scheduling cannot be set for model 'm' whose platform is not ensemble",
  ],
];

describe("config errors carry Triton's sentence", () => {
  for (const [what, body, sentence] of CASES) {
    it(what, () => {
      const file = 'm/config.pbtxt';
      const { config, positions } = parseModelConfigWithPositions(
        `name: "m"\nbackend: "onnxruntime"\nplatform: "onnxruntime_onnx"\n${body}`,
        file,
      );
      normalizeModelConfig(config, { defaultCpuInstanceCount: 1, gpuCount: 0 });
      assert.throws(
        () => validateModelConfig(config, file, positions, { gpuCount: 0 }),
        (err: unknown) => {
          assert.ok(err instanceof ConfigError, String(err));
          assert.ok(err.message.includes(sentence), `${err.message}\n  does not contain Triton's\n${sentence}`);
          assert.match(err.message, /^m\/config\.pbtxt:\d+:\d+: /, 'the file:line:col stays in front');
          assert.ok(err.field, 'the field path at fault is kept');
          return true;
        },
      );
    });
  }
});

describe('a model for a backend Nereid lacks', () => {
  const repo = new TempRepository();
  after(() => repo.cleanup());
  const options = {
    autoComplete: false,
    modelConfigName: undefined,
    backendConfig: {},
    gpuCount: 0,
    logger: silentLogger,
    server: { infer: () => Promise.reject(new Error('not used')) },
  };

  it('gets the configuration errors first (as Triton gives them for tensorrt_plan)', async () => {
    repo.config(
      'plan_bad',
      `name: "plan_bad"\nplatform: "tensorrt_plan"\ninput [ { name: "input" data_type: TYPE_FP32 dims: [ 0 ] } ]\n`,
    );
    repo.file('plan_bad', '1/model.plan', 'not a plan');
    await assert.rejects(resolveModelConfig('plan_bad', `${repo.dir}/plan_bad`, options), (err: Error) => {
      assert.match(
        err.message,
        /model input 'input' dimension must be integer >= 1, or -1 to indicate a variable-size dimension for plan_bad/,
      );
      return true;
    });
  });

  it("then Triton's 'unable to find backend library' when the config is valid", async () => {
    repo.config('plan_ok', `name: "plan_ok"\nplatform: "tensorrt_plan"\n${IO}`);
    repo.file('plan_ok', '1/model.plan', 'not a plan');
    await assert.rejects(resolveModelConfig('plan_ok', `${repo.dir}/plan_ok`, options), (err: Error) => {
      assert.match(
        err.message,
        /unable to find backend library for backend 'tensorrt', try specifying runtime on the model configuration/,
      );
      return true;
    });
  });
});
