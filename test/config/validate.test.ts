import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { create } from '@bufbuild/protobuf';
import {
  ConfigError,
  normalizeModelConfig,
  parseModelConfigWithPositions,
  validateModelConfig,
  type ValidateOptions,
} from '../../src/config/index.js';
import { ModelConfigSchema, ModelInstanceGroupSchema, ModelInstanceGroup_Kind } from '../../src/gen/model_config_pb.js';

const FILE = 'fraud_detector/config.pbtxt';
const HEAD = 'name: "fraud_detector"\nbackend: "python"\n';

/** Parses, normalises and validates HEAD + body, as a load would. */
function check(body: string, opts: ValidateOptions & { head?: string } = {}): void {
  const { config, positions } = parseModelConfigWithPositions((opts.head ?? HEAD) + body, FILE);
  normalizeModelConfig(config, { defaultCpuInstanceCount: 2, gpuCount: opts.gpuCount ?? 0 });
  validateModelConfig(config, FILE, positions, opts);
}

function rejects(body: string, detail: RegExp, at?: [number, number], opts: ValidateOptions & { head?: string } = {}): ConfigError {
  try {
    check(body, opts);
  } catch (err) {
    assert.ok(err instanceof ConfigError, `expected ConfigError, got ${String(err)}`);
    assert.equal(err.code, 'NRD_CONFIG');
    assert.equal(err.errorClass, 'INVALID_ARG');
    assert.match(err.detail, detail);
    if (at !== undefined) {
      assert.deepEqual([err.line, err.column], at, err.message);
      assert.ok(err.message.startsWith(`${FILE}:${at[0]}:${at[1]}: `), err.message);
    }
    return err;
  }
  assert.fail(`expected rejection matching ${detail}`);
}

const IO = `max_batch_size: 8
input [ { name: "x", data_type: TYPE_FP32, dims: [ 4 ] } ]
output [ { name: "y", data_type: TYPE_FP32, dims: [ 1 ] } ]
`;

describe('validateModelConfig: model identity', () => {
  it('accepts a plain config', () => {
    check(IO);
  });

  it('max_batch_size must not be negative', () => {
    rejects('max_batch_size: -1\n', /max_batch_size must be 0 \(no batching\) or positive, got -1/, [3, 1]);
  });

  it('platform must go with a known backend', () => {
    rejects('platform: "pytorch_libtorch"\n', /platform "pytorch_libtorch" does not go with backend "onnxruntime"/, [3, 1], {
      head: 'name: "m"\nbackend: "onnxruntime"\n',
    });
    check('platform: "libtorch"\n', { head: 'name: "m"\nbackend: "pytorch"\n' });
  });

  it('a backend is required unless the model is an ensemble', () => {
    rejects('', /no "backend" is set/, undefined, { head: 'name: "m"\n' });
    rejects('', /platform "tensorflow_magic" is not one Nereid knows/, [2, 1], { head: 'name: "m"\nplatform: "tensorflow_magic"\n' });
  });

  it('an ensemble has no backend', () => {
    rejects('', /an ensemble has platform "ensemble" and no backend/, [2, 1], {
      head: 'name: "m"\nbackend: "python"\nplatform: "ensemble"\n',
    });
  });

  it('runtime must not lead out of the backend directory', () => {
    rejects('runtime: "../dummy_runtime/libtriton_identity.so"\n', /runtime "\.\.\/dummy_runtime\/libtriton_identity\.so" must name a library inside the backend directory/, [3, 1]);
    check('runtime: "model.py"\n');
  });

  it('without a file the message names the model', () => {
    const config = create(ModelConfigSchema, { name: 'm', backend: 'python', maxBatchSize: -3 });
    normalizeModelConfig(config, { defaultCpuInstanceCount: 1, gpuCount: 0 });
    assert.throws(() => validateModelConfig(config), (err: unknown) => {
      assert.ok(err instanceof ConfigError);
      assert.equal(err.file, undefined);
      assert.match(err.message, /^model 'm': max_batch_size must be 0/);
      return true;
    });
  });
});

describe('validateModelConfig: inputs and outputs', () => {
  it('dims must be positive or -1, pointing at the bad dim', () => {
    const err = rejects(
      'max_batch_size: 8\ninput {\n  name: "input_features"\n  data_type: TYPE_FP32\n  dims: [ 4, 0 ]\n}\n',
      /^input "input_features": dims must be positive or -1, got 0$/,
      [7, 14],
    );
    assert.equal(err.field, 'input[0].dims[1]');
    assert.equal(err.message, `${FILE}:7:14: input "input_features": dims must be positive or -1, got 0`);
  });

  it('dims must not be empty', () => {
    rejects('input { name: "x", data_type: TYPE_FP32 }\n', /input "x": "dims" must be set and not empty/, [3, 1]);
  });

  it('data_type must be set', () => {
    rejects('input { name: "x", dims: [ 1 ] }\n', /input "x": "data_type" must be set/, [3, 1]);
  });

  it('an unknown data_type number is rejected', () => {
    rejects('output { name: "y", data_type: 99, dims: [ 1 ] }\n', /data_type 99 is not a known data type/, [3, 21]);
  });

  it('input names are unique', () => {
    rejects(
      'input { name: "x", data_type: TYPE_FP32, dims: [ 1 ] }\ninput { name: "x", data_type: TYPE_FP32, dims: [ 1 ] }\n',
      /input "x" is declared twice/,
      [4, 9],
    );
  });

  it('output names are unique', () => {
    rejects(
      'output { name: "y", data_type: TYPE_FP32, dims: [ 1 ] }\noutput { name: "y", data_type: TYPE_FP32, dims: [ 1 ] }\n',
      /output "y" is declared twice/,
    );
  });

  it('names must be set', () => {
    rejects('output { data_type: TYPE_FP32, dims: [ 1 ] }\n', /"name" must be set/, [3, 1]);
  });

  it('reshape must hold as many elements as dims', () => {
    rejects(
      'input { name: "x", data_type: TYPE_FP32, dims: [ 6 ], reshape: { shape: [ 2, 2 ] } }\n',
      /dims \[6\] and reshape \[2, 2\] do not hold the same number of elements/,
      [3, 55],
    );
  });

  it('reshape runs between -1 dims must match', () => {
    check('input { name: "x", data_type: TYPE_FP32, dims: [ 2, 4, -1, 6 ], reshape: { shape: [ 8, -1, 1, 6 ] } }\n');
    rejects(
      'input { name: "x", data_type: TYPE_FP32, dims: [ 2, 4, -1, 6 ], reshape: { shape: [ 4, -1, 2, 6 ] } }\n',
      /do not hold the same number of elements/,
    );
    rejects(
      'input { name: "x", data_type: TYPE_FP32, dims: [ -1, -1 ], reshape: { shape: [ -1 ] } }\n',
      /different number of -1 dims/,
    );
  });

  it('an empty reshape needs a batching model', () => {
    check('max_batch_size: 4\ninput { name: "x", data_type: TYPE_FP32, dims: [ 1 ], reshape: { shape: [ ] } }\n');
    rejects('input { name: "x", data_type: TYPE_FP32, dims: [ 1 ], reshape: { shape: [ ] } }\n', /an empty reshape needs max_batch_size > 0/);
  });

  it('reshape dims must be positive or -1', () => {
    rejects(
      'input { name: "x", data_type: TYPE_FP32, dims: [ 1 ], reshape: { shape: [ 0 ] } }\n',
      /reshape dims must be positive or -1, got 0/,
      [3, 75],
    );
  });

  it('NHWC/NCHW need three dims', () => {
    rejects('input { name: "x", data_type: TYPE_FP32, format: FORMAT_NHWC, dims: [ 4, 4 ] }\n', /format NHWC\/NCHW needs exactly 3 dims/, [3, 42]);
  });

  it('shape tensors are TensorRT only', () => {
    rejects('input { name: "x", data_type: TYPE_INT32, dims: [ 2 ], is_shape_tensor: true }\n', /is_shape_tensor is only supported for TensorRT/);
  });

  it('batch inputs name a real source input and use INT32 or FP32', () => {
    rejects(`${IO}batch_input { kind: BATCH_ELEMENT_COUNT, target_name: "n", data_type: TYPE_INT32, source_input: "z" }\n`, /source_input "z" is not a model input/);
    rejects(`${IO}batch_input { kind: BATCH_ELEMENT_COUNT, target_name: "n", data_type: TYPE_INT64, source_input: "x" }\n`, /data_type must be TYPE_INT32 or TYPE_FP32/);
    rejects(`${IO}batch_output { target_name: "q", source_input: "x" }\n`, /target_name "q" is not a model output/);
  });

  it('checkIO: false skips input/output rules', () => {
    check('input { name: "x" }\n', { checkIO: false });
  });
});

describe('validateModelConfig: instance groups', () => {
  it('KIND_GPU with no GPUs present', () => {
    rejects('instance_group { kind: KIND_GPU }\n', /kind is KIND_GPU but no GPUs are available/, [3, 18], { gpuCount: 0 });
  });

  it('KIND_GPU gets every GPU when none are listed, and listed ids must exist', () => {
    check('instance_group { kind: KIND_GPU }\n', { gpuCount: 2 });
    rejects('instance_group { kind: KIND_GPU, gpus: [ 0, 3 ] }\n', /GPU 3 is not available \(the server sees GPUs 0\.\.1\)/, [3, 45], { gpuCount: 2 });
  });

  it('gpus listed only for KIND_GPU', () => {
    rejects('instance_group { kind: KIND_CPU, gpus: [ 0 ] }\n', /gpus may only be listed for KIND_GPU, but kind is KIND_CPU/, [3, 34]);
    rejects('instance_group { kind: KIND_MODEL, gpus: [ 0 ] }\n', /but kind is KIND_MODEL/);
  });

  it('KIND_AUTO with an absent gpu falls back to CPU, then gpus are not allowed', () => {
    rejects('instance_group { gpus: [ 5 ] }\n', /gpus may only be listed for KIND_GPU, but kind is KIND_CPU/, undefined, { gpuCount: 1 });
  });

  it('an unknown kind number is rejected', () => {
    rejects('instance_group { kind: 7 }\n', /kind 7 is not a known instance group kind/, [3, 18]);
  });

  it('count must be at least 1', () => {
    const config = create(ModelConfigSchema, { name: 'm', backend: 'python' });
    normalizeModelConfig(config, { defaultCpuInstanceCount: 1, gpuCount: 0 });
    config.instanceGroup = [create(ModelInstanceGroupSchema, { name: 'g', kind: ModelInstanceGroup_Kind.CPU, count: 0 })];
    assert.throws(() => validateModelConfig(config), /instance_group "g": count must be at least 1, got 0/);
  });

  it('profile is TensorRT only', () => {
    rejects('instance_group { kind: KIND_CPU, profile: [ "0" ] }\n', /"profile" is only supported for TensorRT/);
  });
});

describe('validateModelConfig: dynamic batching', () => {
  it('preferred_batch_size must be positive', () => {
    rejects(`${IO}dynamic_batching { preferred_batch_size: [ 4, 0 ] }\n`, /preferred_batch_size must be positive, got 0/, [6, 47]);
  });

  it('preferred_batch_size must not exceed max_batch_size', () => {
    rejects(`${IO}dynamic_batching { preferred_batch_size: [ 16 ] }\n`, /preferred_batch_size 16 is larger than max_batch_size 8/, [6, 44]);
  });

  it('default priority level must be within the levels', () => {
    rejects(`${IO}dynamic_batching { priority_levels: 2 default_priority_level: 3 }\n`, /default_priority_level must be between 1 and 2 \(priority_levels\), got 3/, [6, 39]);
    rejects(`${IO}dynamic_batching { priority_levels: 2 }\n`, /default_priority_level must be between 1 and 2/);
  });

  it('queue policy keys must be within the levels', () => {
    rejects(
      `${IO}dynamic_batching {\n  priority_levels: 2\n  default_priority_level: 1\n  priority_queue_policy { key: 5 value: { } }\n}\n`,
      /priority_queue_policy for level 5 is outside the priority levels 1\.\.2/,
      [9, 3],
    );
  });

  it('preserve_ordering allows one priority level', () => {
    rejects(`${IO}dynamic_batching { preserve_ordering: true priority_levels: 2 default_priority_level: 1 }\n`, /preserve_ordering allows only one priority level/);
  });

  it('preserve_ordering forbids a DELAY policy with a timeout', () => {
    rejects(
      `${IO}dynamic_batching {\n  preserve_ordering: true\n  default_queue_policy { timeout_action: DELAY default_timeout_microseconds: 100 }\n}\n`,
      /cannot use timeout_action DELAY with a timeout/,
      [8, 26],
    );
    check(`${IO}dynamic_batching {\n  preserve_ordering: true\n  default_queue_policy { timeout_action: DELAY }\n}\n`);
  });
});

describe('validateModelConfig: sequence batching', () => {
  const controls = `sequence_batching {
  control_input [
    { name: "START", control [ { kind: CONTROL_SEQUENCE_START, int32_false_true: [ 0, 1 ] } ] },
    { name: "CORRID", control [ { kind: CONTROL_SEQUENCE_CORRID, data_type: TYPE_UINT64 } ] }
  ]
}
`;

  it('accepts well-formed controls', () => {
    check(IO + controls);
  });

  it('response cache is not allowed with sequence batching', () => {
    rejects(`${IO}${controls}response_cache { enable: true }\n`, /response_cache cannot be enabled for a model that uses sequence_batching/, [12, 18]);
  });

  it('boolean controls need exactly two values', () => {
    rejects(
      `${IO}sequence_batching { control_input { name: "S" control { kind: CONTROL_SEQUENCE_START fp32_false_true: [ 1 ] } } }\n`,
      /fp32_false_true of CONTROL_SEQUENCE_START control "S" needs exactly 2 values/,
    );
    rejects(
      `${IO}sequence_batching { control_input { name: "S" control { kind: CONTROL_SEQUENCE_END } } }\n`,
      /must give one of int32_false_true, fp32_false_true or bool_false_true/,
    );
  });

  it('correlation id control takes an integer or string type', () => {
    rejects(
      `${IO}sequence_batching { control_input { name: "C" control { kind: CONTROL_SEQUENCE_CORRID data_type: TYPE_FP32 } } }\n`,
      /must have data_type TYPE_UINT64, TYPE_INT64, TYPE_UINT32, TYPE_INT32 or TYPE_STRING/,
    );
  });

  it('one tensor per control and one control per tensor', () => {
    rejects(
      `${IO}sequence_batching { control_input [ { name: "A" control { kind: CONTROL_SEQUENCE_START bool_false_true: [ false, true ] } }, { name: "A" } ] }\n`,
      /control tensor "A" is listed more than once/,
    );
  });

  it('oldest preferred batch sizes are checked against max_batch_size', () => {
    rejects(`${IO}sequence_batching { oldest { preferred_batch_size: [ 9 ] } }\n`, /preferred_batch_size 9 is larger than max_batch_size 8/);
  });

  it('direct minimum slot utilisation is between 0 and 1', () => {
    rejects(`${IO}sequence_batching { direct { minimum_slot_utilization: 1.5 } }\n`, /minimum_slot_utilization must be between 0 and 1, got 1\.5/);
  });
});

describe('validateModelConfig: file references stay inside the model folder', () => {
  it('label_filename may not climb out', () => {
    rejects(
      'output { name: "y", data_type: TYPE_FP32, dims: [ 1 ], label_filename: "../../etc/passwd" }\n',
      /output "y": label_filename "\.\.\/\.\.\/etc\/passwd" must be a path inside the model's folder/,
      [3, 56],
    );
    rejects('output { name: "y", data_type: TYPE_FP32, dims: [ 1 ], label_filename: "/etc/passwd" }\n', /must be a path inside/);
    check('output { name: "y", data_type: TYPE_FP32, dims: [ 1 ], label_filename: "labels/./classes.txt" }\n');
  });

  it('default_model_filename, warmup files and initial state files too', () => {
    rejects('default_model_filename: "../other/model.onnx"\n', /default_model_filename "\.\.\/other\/model\.onnx" must be a path inside the model's version folder/, [3, 1]);
    rejects(
      `${IO}model_warmup { name: "w" batch_size: 1 inputs { key: "x" value: { data_type: TYPE_FP32 dims: [ 4 ] input_data_file: "../x.bin" } } }\n`,
      /model_warmup "w": input_data_file "\.\.\/x\.bin" must be a path inside the model's warmup folder/,
    );
    rejects(
      `${IO}sequence_batching { state { input_name: "s" output_name: "t" data_type: TYPE_FP32 dims: [ 1 ] initial_state { name: "i" data_type: TYPE_FP32 dims: [ 1 ] data_file: "..\\\\x" } } }\n`,
      /data_file "\.\.\\x" must be a path inside the model's initial_state folder/,
    );
    check('default_model_filename: "sub/model.onnx"\n');
  });
});

describe('validateModelConfig: ensembles and misc', () => {
  const ENS_HEAD = 'name: "pipeline"\nplatform: "ensemble"\n';
  const ensemble = `max_batch_size: 8
input { name: "RAW", data_type: TYPE_FP32, dims: [ 4 ] }
output { name: "OUT", data_type: TYPE_FP32, dims: [ 1 ] }
ensemble_scheduling {
  step [
    { model_name: "pre", model_version: -1, input_map { key: "in", value: "RAW" }, output_map { key: "out", value: "MID" } },
    { model_name: "net", model_version: -1, input_map { key: "in", value: "MID" }, output_map { key: "out", value: "OUT" } }
  ]
}
`;

  it('accepts a connected ensemble', () => {
    check(ensemble, { head: ENS_HEAD });
  });

  it('an ensemble needs steps', () => {
    rejects('ensemble_scheduling { }\n', /ensemble 'pipeline' must have at least one "step"/, [3, 1], { head: ENS_HEAD });
  });

  it('platform ensemble needs ensemble_scheduling', () => {
    rejects('', /platform "ensemble" needs an "ensemble_scheduling" section/, [2, 1], { head: ENS_HEAD });
  });

  it('an ensemble output nothing writes is reported with the broken link', () => {
    const broken = ensemble.replace('output_map { key: "out", value: "MID" }', 'output_map { key: "out", value: "OTHER" }');
    rejects(broken, /output "OUT" is never written: it depends on "MID", which nothing provides/, undefined, { head: ENS_HEAD });
  });

  it('an unused ensemble input is reported', () => {
    rejects(ensemble.replace('name: "RAW"', 'name: "RAW2"'), /input "RAW2" is not used by any step/, [4, 1], { head: ENS_HEAD });
  });

  it('a tensor that leads nowhere is reported where it is mapped', () => {
    const dangling = ensemble.replace(
      'output_map { key: "out", value: "MID" } },',
      'output_map [ { key: "out", value: "MID" }, { key: "extra", value: "SPARE" } ] },',
    );
    rejects(dangling, /tensor "SPARE" is not used/, [8, 127], { head: ENS_HEAD });
  });

  it('an ensemble must not have instance groups', () => {
    rejects(`${ensemble}instance_group { kind: KIND_CPU }\n`, /must not have instance_group/, undefined, { head: ENS_HEAD });
  });

  it('decoupled models cannot use the response cache', () => {
    rejects(`${IO}model_transaction_policy { decoupled: true }\nresponse_cache { enable: true }\n`, /response_cache cannot be enabled for a decoupled model/, [7, 18]);
  });

  it('specific versions are not negative', () => {
    rejects('version_policy { specific { versions: [ 1, -2 ] } }\n', /versions must be 0 or more, got -2/, [3, 44]);
  });

  it('model metrics need a family and buckets', () => {
    rejects(`${IO}model_metrics { metric_control { metric_identifier { family: "nv_inference_request_duration" } } }\n`, /must set "histogram_options"/);
    rejects(
      `${IO}model_metrics { metric_control { metric_identifier { family: "f" } histogram_options { } } }\n`,
      /must list "buckets"/,
    );
  });
});
