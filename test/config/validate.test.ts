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

function rejects(
  body: string,
  detail: RegExp,
  at?: [number, number],
  opts: ValidateOptions & { head?: string } = {},
): ConfigError {
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
    rejects('max_batch_size: -1\n', /^'max_batch_size' must be non-negative value for fraud_detector \(got -1/, [3, 1]);
  });

  it('platform must go with a known backend', () => {
    rejects(
      'platform: "pytorch_libtorch"\n',
      /^unexpected 'platform' and 'backend' pair, got:pytorch_libtorch, onnxruntime/,
      [3, 1],
      {
        head: 'name: "m"\nbackend: "onnxruntime"\n',
      },
    );
    check('platform: "libtorch"\n', { head: 'name: "m"\nbackend: "pytorch"\n' });
  });

  it('a backend is required unless the model is an ensemble', () => {
    rejects('', /^must specify 'platform' or 'backend' for 'm'/, undefined, { head: 'name: "m"\n' });
    rejects('', /^unexpected platform type 'tensorflow_magic' for m/, [2, 1], {
      head: 'name: "m"\nplatform: "tensorflow_magic"\n',
    });
  });

  it('an ensemble has no backend', () => {
    rejects('', /^Ensemble model 'm' must have platform type 'ensemble' and empty backend type/, [2, 1], {
      head: 'name: "m"\nbackend: "python"\nplatform: "ensemble"\n',
    });
  });

  it('runtime must not lead out of the backend directory', () => {
    rejects(
      'runtime: "../dummy_runtime/libtriton_identity.so"\n',
      /runtime "\.\.\/dummy_runtime\/libtriton_identity\.so" must name a library inside the backend directory/,
      [3, 1],
    );
    check('runtime: "model.py"\n');
  });

  it('without a file the message names the model', () => {
    const config = create(ModelConfigSchema, { name: 'm', backend: 'python', maxBatchSize: -3 });
    normalizeModelConfig(config, { defaultCpuInstanceCount: 1, gpuCount: 0 });
    assert.throws(() => validateModelConfig(config), (err: unknown) => {
      assert.ok(err instanceof ConfigError);
      assert.equal(err.file, undefined);
      assert.match(err.message, /^model 'm': 'max_batch_size' must be non-negative value for m/);
      return true;
    });
  });
});

describe('validateModelConfig: inputs and outputs', () => {
  it('dims must be positive or -1, pointing at the bad dim', () => {
    const err = rejects(
      'max_batch_size: 8\ninput {\n  name: "input_features"\n  data_type: TYPE_FP32\n  dims: [ 4, 0 ]\n}\n',
      new RegExp(
        String.raw`^model input 'input_features' dimension must be integer >= 1, or -1 to indicate a variable-size ` +
        String.raw`dimension for fraud_detector \(got 0\)$`,
      ),
      [7, 14],
    );
    assert.equal(err.field, 'input[0].dims[1]');
    assert.equal(
      err.message,
      `${FILE}:7:14: model input 'input_features' dimension must be integer >= ` +
      `1, or -1 to indicate a variable-size dimension for fraud_detector (got 0)`,
    );
  });

  it('dims must not be empty', () => {
    rejects(
      'input { name: "x", data_type: TYPE_FP32 }\n',
      /^model input 'x' must specify 'dims' for fraud_detector/,
      [3, 1],
    );
  });

  it('data_type must be set', () => {
    rejects(
      'input { name: "x", dims: [ 1 ] }\n',
      /^model input 'x' must specify 'data_type' for fraud_detector/,
      [3, 1],
    );
  });

  it('an unknown data_type number is rejected', () => {
    rejects('output { name: "y", data_type: 99, dims: [ 1 ] }\n', /data_type 99 is not a known data type/, [3, 21]);
  });

  it('input names are unique', () => {
    rejects(
      'input { name: "x", data_type: TYPE_FP32, dims: [ 1 ] ' +
      '}\ninput { name: "x", data_type: TYPE_FP32, dims: [ 1 ] }\n',
      /input "x" is declared twice/,
      [4, 9],
    );
  });

  it('output names are unique', () => {
    rejects(
      'output { name: "y", data_type: TYPE_FP32, dims: [ 1 ] ' +
      '}\noutput { name: "y", data_type: TYPE_FP32, dims: [ 1 ] }\n',
      /output "y" is declared twice/,
    );
  });

  it('names must be set', () => {
    rejects(
      'output { data_type: TYPE_FP32, dims: [ 1 ] }\n',
      /^model output must specify 'name' for fraud_detector/,
      [3, 1],
    );
  });

  it('reshape must hold as many elements as dims', () => {
    rejects(
      'input { name: "x", data_type: TYPE_FP32, dims: [ 6 ], reshape: { shape: [ 2, 2 ] } }\n',
      new RegExp(
        String.raw`^model input 'x' has different size for dims and reshape for fraud_detector \(dims \[6\] and ` +
        String.raw`reshape \[2, 2\] do not hold the same number of elements\)`,
      ),
      [3, 55],
    );
  });

  it('reshape runs between -1 dims must match', () => {
    check('input { name: "x", data_type: TYPE_FP32, dims: [ 2, 4, -1, 6 ], reshape: { shape: [ 8, -1, 1, 6 ] } }\n');
    rejects(
      'input { name: "x", data_type: TYPE_FP32, dims: [ 2, 4, -1, 6 ], reshape: { shape: [ 4, -1, 2, 6 ] } }\n',
      /has different size for dims and reshape for fraud_detector/,
    );
    rejects(
      'input { name: "x", data_type: TYPE_FP32, dims: [ -1, -1 ], reshape: { shape: [ -1 ] } }\n',
      /has different number of variable-size dimensions for dims and reshape for fraud_detector/,
    );
  });

  it('an empty reshape needs a batching model', () => {
    check('max_batch_size: 4\ninput { name: "x", data_type: TYPE_FP32, dims: [ 1 ], reshape: { shape: [ ] } }\n');
    rejects(
      'input { name: "x", data_type: TYPE_FP32, dims: [ 1 ], reshape: { shape: [ ] } }\n',
      new RegExp(
        String.raw`^model input 'x' cannot have empty reshape for non-batching model as scalar tensors are not ` +
        String.raw`supported for fraud_detector`,
      ),
    );
  });

  it('reshape dims must be positive or -1', () => {
    rejects(
      'input { name: "x", data_type: TYPE_FP32, dims: [ 1 ], reshape: { shape: [ 0 ] } }\n',
      new RegExp(
        String.raw`^model input 'x' reshape dimensions must be integer >= 1, or -1 to indicate a variable-size ` +
        String.raw`dimension for fraud_detector \(got 0\)`,
      ),
      [3, 75],
    );
  });

  it('NHWC/NCHW need three dims', () => {
    rejects(
      'input { name: "x", data_type: TYPE_FP32, format: FORMAT_NHWC, dims: [ 4, 4 ] }\n',
      /^model input NHWC\/NCHW require 3 dims for fraud_detector/,
      [3, 42],
    );
  });

  it('shape tensors are TensorRT only', () => {
    rejects(
      'input { name: "x", data_type: TYPE_INT32, dims: [ 2 ], is_shape_tensor: true }\n',
      /^shape tensors are only supported for TensorRT platform for fraud_detector/,
    );
  });

  it('batch inputs name a real source input and use INT32 or FP32', () => {
    rejects(
      `${IO}batch_input { kind: BATCH_ELEMENT_COUNT, target_name: "n", data_type: TYPE_INT32, source_input: "z" }\n`,
      /^unknown source input name 'z' for fraud_detector/,
    );
    rejects(
      `${IO}batch_input { kind: BATCH_ELEMENT_COUNT, target_name: "n", data_type: TYPE_INT64, source_input: "x" }\n`,
      /^batch input data type must be TYPE_INT32 or TYPE_FP32 for fraud_detector/,
    );
    rejects(
      `${IO}batch_output { target_name: "q", source_input: "x" }\n`,
      /^unknown target output name 'q' for fraud_detector/,
    );
  });

  it('checkIO: false skips input/output rules', () => {
    check('input { name: "x" }\n', { checkIO: false });
  });
});

describe('validateModelConfig: instance groups', () => {
  it('KIND_GPU with no GPUs present', () => {
    rejects(
      'instance_group { kind: KIND_GPU }\n',
      /^instance group fraud_detector_0 of model fraud_detector has kind KIND_GPU but no GPUs are available/,
      [3, 18],
      { gpuCount: 0 },
    );
  });

  it('KIND_GPU gets every GPU when none are listed, and listed ids must exist', () => {
    check('instance_group { kind: KIND_GPU }\n', { gpuCount: 2 });
    rejects(
      'instance_group { kind: KIND_GPU, gpus: [ 0, 3 ] }\n',
      new RegExp(
        String.raw`^instance group fraud_detector_0 of model fraud_detector specifies invalid or unsupported gpu id ` +
        String.raw`3\. GPUs with at least the minimum required CUDA compute compatibility are: 0, 1$`,
      ),
      [3, 45],
      { gpuCount: 2 },
    );
  });

  it('gpus listed only for KIND_GPU', () => {
    rejects(
      'instance_group { kind: KIND_CPU, gpus: [ 0 ] }\n',
      /^instance group fraud_detector_0 of model fraud_detector has kind KIND_CPU but specifies one or more GPUs/,
      [3, 34],
    );
    rejects('instance_group { kind: KIND_MODEL, gpus: [ 0 ] }\n', /has kind KIND_MODEL but specifies one or more GPUs/);
  });

  it('KIND_AUTO with an absent gpu falls back to CPU, then gpus are not allowed', () => {
    rejects('instance_group { gpus: [ 5 ] }\n', /has kind KIND_CPU but specifies one or more GPUs/, undefined, {
      gpuCount: 1,
    });
  });

  it('an unknown kind number is rejected', () => {
    rejects('instance_group { kind: 7 }\n', /has unexpected kind 7/, [3, 18]);
  });

  it('count must be at least 1', () => {
    const config = create(ModelConfigSchema, { name: 'm', backend: 'python' });
    normalizeModelConfig(config, { defaultCpuInstanceCount: 1, gpuCount: 0 });
    config.instanceGroup = [
      create(ModelInstanceGroupSchema, { name: 'g', kind: ModelInstanceGroup_Kind.CPU, count: 0 }),
    ];
    assert.throws(() => validateModelConfig(config), /instance group g of model m: count must be at least 1, got 0/);
  });

  it('profile is TensorRT only', () => {
    rejects(
      'instance_group { kind: KIND_CPU, profile: [ "0" ] }\n',
      /specifies profile field which is only supported for TensorRT models/,
    );
  });
});

describe('validateModelConfig: dynamic batching', () => {
  it('preferred_batch_size must be positive', () => {
    rejects(
      `${IO}dynamic_batching { preferred_batch_size: [ 4, 0 ] }\n`,
      /^dynamic batching preferred size must be positive for fraud_detector \(got 0\)/,
      [6, 47],
    );
  });

  it('preferred_batch_size must not exceed max_batch_size', () => {
    rejects(
      `${IO}dynamic_batching { preferred_batch_size: [ 16 ] }\n`,
      new RegExp(
        String.raw`^dynamic batching preferred size must be <= max batch size for fraud_detector ` +
        String.raw`\(preferred_batch_size 16, max_batch_size 8\)`,
      ),
      [6, 44],
    );
  });

  it('default priority level must be within the levels', () => {
    rejects(
      `${IO}dynamic_batching { priority_levels: 2 default_priority_level: 3 }\n`,
      new RegExp(
        String.raw`^default priority level must be in range \[1, 2\] for fraud_detector ` +
        String.raw`\(dynamic_batching\.default_priority_level is 3\)`,
      ),
      [6, 39],
    );
    rejects(
      `${IO}dynamic_batching { priority_levels: 2 }\n`,
      /^default priority level must be in range \[1, 2\] for fraud_detector/,
    );
  });

  it('queue policy keys must be within the levels', () => {
    rejects(
      `${IO}dynamic_batching {\n  priority_levels: 2\n  default_priority_level: ` +
      `1\n  priority_queue_policy { key: 5 value: { } }\n}\n`,
      new RegExp(
        String.raw`^priority queue policy must have priority level in range \[1, 2\] for fraud_detector ` +
        String.raw`\(dynamic_batching\.priority_queue_policy has level 5\)`,
      ),
      [9, 3],
    );
  });

  it('preserve_ordering allows one priority level', () => {
    rejects(
      `${IO}dynamic_batching { preserve_ordering: true priority_levels: 2 default_priority_level: 1 }\n`,
      /^Only one priority level is allowed when 'preserve_ordering' is true for fraud_detector/,
    );
  });

  it('preserve_ordering forbids a DELAY policy with a timeout', () => {
    rejects(
      `${IO}dynamic_batching {\n  preserve_ordering: true\n  default_queue_policy ` +
      `{ timeout_action: DELAY default_timeout_microseconds: 100 }\n}\n`,
      /^Queue policy can not have DELAY as timeout action when 'preserve_ordering' is true for fraud_detector/,
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
    rejects(
      `${IO}${controls}response_cache { enable: true }\n`,
      /^Response Cache does not currently support model fraud_detector with sequence batching scheduler/,
      [12, 18],
    );
  });

  it('boolean controls need exactly two values', () => {
    rejects(
      `${IO}sequence_batching { control_input { name: "S" control { ` +
      `kind: CONTROL_SEQUENCE_START fp32_false_true: [ 1 ] } } }\n`,
      new RegExp(
        String.raw`^sequence batching control 'fp32_false_true' must have exactly 2 entries for ` +
        String.raw`CONTROL_SEQUENCE_START for fraud_detector`,
      ),
    );
    rejects(
      `${IO}sequence_batching { control_input { name: "S" control { kind: CONTROL_SEQUENCE_END } } }\n`,
      new RegExp(
        String.raw`^sequence batching must specify either 'int32_false_true', 'fp32_false_true' or 'bool_false_true' ` +
        String.raw`for CONTROL_SEQUENCE_END for fraud_detector`,
      ),
    );
  });

  it('correlation id control takes an integer or string type', () => {
    rejects(
      `${IO}sequence_batching { control_input { name: "C" control { ` +
      `kind: CONTROL_SEQUENCE_CORRID data_type: TYPE_FP32 } } }\n`,
      new RegExp(
        String.raw`^unexpected data type for control CONTROL_SEQUENCE_CORRID for fraud_detector\. Allowed data types ` +
        String.raw`are TYPE_UINT64, TYPE_INT64, TYPE_UINT32, TYPE_INT32 and TYPE_STRING`,
      ),
    );
  });

  it('one tensor per control and one control per tensor', () => {
    rejects(
      `${IO}sequence_batching { control_input [ { name: "A" control { kind: ` +
      `CONTROL_SEQUENCE_START bool_false_true: [ false, true ] } }, { name: "A" } ] }\n`,
      /^sequence batching control tensor 'A' is specified for multiple control kinds for fraud_detector/,
    );
  });

  it('oldest preferred batch sizes are checked against max_batch_size', () => {
    rejects(
      `${IO}sequence_batching { oldest { preferred_batch_size: [ 9 ] } }\n`,
      /^sequence batching preferred batch size must be <= max batch size for fraud_detector/,
    );
  });

  it('direct minimum slot utilisation is between 0 and 1', () => {
    rejects(
      `${IO}sequence_batching { direct { minimum_slot_utilization: 1.5 } }\n`,
      /^sequence batching minimum slot utilization must be in range \(0\.0, 1\.0\] for fraud_detector \(got 1\.5\)/,
    );
  });
});

describe('validateModelConfig: file references stay inside the model folder', () => {
  it('label_filename may not climb out', () => {
    rejects(
      'output { name: "y", data_type: TYPE_FP32, dims: [ 1 ], label_filename: "../../etc/passwd" }\n',
      /output "y": label_filename "\.\.\/\.\.\/etc\/passwd" must be a path inside the model's folder/,
      [3, 56],
    );
    rejects(
      'output { name: "y", data_type: TYPE_FP32, dims: [ 1 ], label_filename: "/etc/passwd" }\n',
      /must be a path inside/,
    );
    check('output { name: "y", data_type: TYPE_FP32, dims: [ 1 ], label_filename: "labels/./classes.txt" }\n');
  });

  it('default_model_filename, warmup files and initial state files too', () => {
    rejects(
      'default_model_filename: "../other/model.onnx"\n',
      /default_model_filename "\.\.\/other\/model\.onnx" must be a path inside the model's version folder/,
      [3, 1],
    );
    rejects(
      `${IO}model_warmup { name: "w" batch_size: 1 inputs { key: "x" value: { ` +
      `data_type: TYPE_FP32 dims: [ 4 ] input_data_file: "../x.bin" } } }\n`,
      /model_warmup "w": input_data_file "\.\.\/x\.bin" must be a path inside the model's warmup folder/,
    );
    rejects(
      `${IO}sequence_batching { state { input_name: "s" output_name: "t" data_type: TYPE_FP32 dims: ` +
      `[ 1 ] initial_state { name: "i" data_type: TYPE_FP32 dims: [ 1 ] data_file: "..\\\\x" } } }\n`,
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
    { model_name: "pre", model_version: -1, input_map { key: "in", value: "RAW" },
      output_map { key: "out", value: "MID" } },
    { model_name: "net", model_version: -1, input_map { key: "in", value: "MID" },
      output_map { key: "out", value: "OUT" } }
  ]
}
`;

  it('accepts a connected ensemble', () => {
    check(ensemble, { head: ENS_HEAD });
  });

  it('an ensemble needs steps', () => {
    rejects('ensemble_scheduling { }\n', /must specify 'step' for ensemble 'pipeline'/, [3, 1], { head: ENS_HEAD });
  });

  it('platform ensemble needs ensemble_scheduling', () => {
    rejects('', /^ensemble scheduling must be set for ensemble pipeline whose platform is ensemble/, [2, 1], {
      head: ENS_HEAD,
    });
  });

  it('an ensemble output nothing writes is reported with the broken link', () => {
    const broken = ensemble.replace(
      'output_map { key: "out", value: "MID" }',
      'output_map { key: "out", value: "OTHER" }',
    );
    rejects(
      broken,
      new RegExp(
        String.raw`output 'OUT' for ensemble 'pipeline' is not written: at least one of its depending tensors, ` +
        String.raw`'MID', is not connected`,
      ),
      undefined,
      { head: ENS_HEAD },
    );
  });

  it('an unused ensemble input is reported', () => {
    rejects(
      ensemble.replace('name: "RAW"', 'name: "RAW2"'),
      /ensemble input 'RAW2' for ensemble pipeline' is not used/,
      [4, 1],
      { head: ENS_HEAD },
    );
  });

  it('a tensor that leads nowhere is reported where it is mapped', () => {
    const dangling = ensemble.replace(
      'output_map { key: "out", value: "MID" } },',
      'output_map [ { key: "out", value: "MID" }, { key: "extra", value: "SPARE" } ] },',
    );
    rejects(dangling, /ensemble tensor 'SPARE' is unused in ensemble 'pipeline'/, [9, 50], { head: ENS_HEAD });
  });

  it('an ensemble must not have instance groups', () => {
    rejects(
      `${ensemble}instance_group { kind: KIND_CPU }\n`,
      /instance group should not be specified for ensemble 'pipeline'/,
      undefined,
      { head: ENS_HEAD },
    );
  });

  it('decoupled models cannot use the response cache', () => {
    rejects(
      `${IO}model_transaction_policy { decoupled: true }\nresponse_cache { enable: true }\n`,
      /^Response Cache does not currently support model fraud_detector with 'decoupled' transaction policy/,
      [7, 18],
    );
  });

  it('specific versions are not negative', () => {
    rejects('version_policy { specific { versions: [ 1, -2 ] } }\n', /versions must be 0 or more, got -2/, [3, 44]);
  });

  it('model metrics need a family and buckets', () => {
    rejects(
      `${IO}model_metrics { metric_control { metric_identifier { family: "nv_inference_request_duration" } } }\n`,
      /metric control must specify 'histogram_options' \(model_metrics.metric_control 0\)/,
    );
    rejects(
      `${IO}model_metrics { metric_control { metric_identifier { family: "f" } histogram_options { } } }\n`,
      /histogram options must specify non-empty 'buckets' \(model_metrics.metric_control 0\)/,
    );
  });
});
