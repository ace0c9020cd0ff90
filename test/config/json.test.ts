import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { create, equals } from '@bufbuild/protobuf';
import {
  ConfigError,
  modelConfigFromJson,
  modelConfigToJson,
  normalizeModelConfig,
  parseModelConfig,
} from '../../src/config/index.js';
import { DataType, ModelConfigSchema, ModelInstanceGroup_Kind } from '../../src/gen/model_config_pb.js';

const SIMPLE = `name: "simple"
platform: "onnxruntime_onnx"
backend: "onnxruntime"
default_model_filename: "model.onnx"
max_batch_size: 8
input [ { name: "INPUT0", data_type: TYPE_INT32, dims: [ 16 ] } ]
output [ { name: "OUTPUT0", data_type: TYPE_INT32, dims: [ 16 ] } ]
`;

const FULL = `name: "full"
backend: "python"
max_batch_size: 8
version_policy { specific { versions: [ 1, 3 ] } }
input [
  { name: "x", data_type: TYPE_FP32, format: FORMAT_NCHW, dims: [ 3, -1, -1 ], allow_ragged_batch: true },
  { name: "y", data_type: TYPE_STRING, dims: [ 1 ], reshape: { shape: [ ] }, optional: true }
]
output [ { name: "z", data_type: TYPE_FP16, dims: [ -1, 10 ], label_filename: "labels.txt" } ]
batch_input [ { kind: BATCH_ACCUMULATED_ELEMENT_COUNT, target_name: "acc", data_type: TYPE_FP32, source_input: "x" } ]
sequence_batching {
  max_sequence_idle_microseconds: 5000000
  direct { max_queue_delay_microseconds: 100, minimum_slot_utilization: 0.1 }
  control_input [ { name: "START", control [ { kind: CONTROL_SEQUENCE_START, fp32_false_true: [ 0, 1 ] } ] } ]
  state [ { input_name: "s_in", output_name: "s_out", data_type: TYPE_INT32, dims: [ 2 ],
            initial_state [ { name: "init", data_type: TYPE_INT32, dims: [ 2 ], zero_data: true } ] } ]
}
instance_group [ { name: "g", kind: KIND_GPU, count: 2, gpus: [ 0 ], secondary_devices [ { kind: KIND_NVDLA,
  device_id: 7 } ],
                   rate_limiter { resources [ { name: "R", count: 3 } ], priority: 2 } } ]
cc_model_filenames { key: "7.5" value: "model_75.onnx" }
metric_tags { key: "team" value: "fraud" }
parameters { key: "EXECUTION_ENV_PATH" value: { string_value: "/env.tar.gz" } }
model_warmup [ { name: "w", batch_size: 2, count: 1, inputs { key: "x" value: { data_type: TYPE_FP32, dims: [ 3, 4,
  4 ], random_data: true } } } ]
model_transaction_policy { decoupled: false }
response_cache { enable: false }
optimization { cuda { graphs: true, graph_spec [ { batch_size: 4, input { key: "x" value: { dim: [ 3, 4, 4 ] } } } ] } }
model_metrics { metric_control [ { metric_identifier { family: "nv_inference_request_duration" },
  histogram_options { buckets: [ 0.5, 1, 2.5 ] } } ] }
`;

describe('modelConfigToJson', () => {
  it('prints every field with Triton names, defaults included, in declaration order', () => {
    const config = parseModelConfig(SIMPLE, 'simple/config.pbtxt');
    normalizeModelConfig(config, { defaultCpuInstanceCount: 2, gpuCount: 0 });
    const json = modelConfigToJson(config);
    assert.deepEqual(json, {
      name: 'simple',
      platform: 'onnxruntime_onnx',
      backend: 'onnxruntime',
      runtime: '',
      version_policy: { latest: { num_versions: 1 } },
      max_batch_size: 8,
      input: [
        {
          name: 'INPUT0',
          data_type: 'TYPE_INT32',
          format: 'FORMAT_NONE',
          dims: [16],
          is_shape_tensor: false,
          allow_ragged_batch: false,
          optional: false,
          is_non_linear_format_io: false,
        },
      ],
      output: [
        {
          name: 'OUTPUT0',
          data_type: 'TYPE_INT32',
          dims: [16],
          label_filename: '',
          is_shape_tensor: false,
          is_non_linear_format_io: false,
        },
      ],
      batch_input: [],
      batch_output: [],
      optimization: {
        priority: 'PRIORITY_DEFAULT',
        input_pinned_memory: { enable: true },
        output_pinned_memory: { enable: true },
        gather_kernel_buffer_threshold: 0,
        eager_batching: false,
      },
      instance_group: [
        {
          name: 'simple',
          kind: 'KIND_CPU',
          count: 2,
          gpus: [],
          secondary_devices: [],
          profile: [],
          passive: false,
          host_policy: '',
        },
      ],
      default_model_filename: 'model.onnx',
      cc_model_filenames: {},
      metric_tags: {},
      parameters: {},
      model_warmup: [],
    });
    assert.deepEqual(Object.keys(json).slice(0, 6), [
      'name',
      'platform',
      'backend',
      'runtime',
      'version_policy',
      'max_batch_size',
    ]);
  });

  it('prints 64-bit integers as JSON numbers', () => {
    // eslint-disable-next-line @typescript-eslint/no-explicit-any -- walks the printed JSON document freely
    const json = modelConfigToJson(parseModelConfig(FULL, 'full/config.pbtxt')) as any;
    assert.deepEqual(json.input[0].dims, [3, -1, -1]);
    assert.deepEqual(json.input[1].reshape, { shape: [] });
    assert.deepEqual(json.version_policy.specific.versions, [1, 3]);
    assert.equal(json.sequence_batching.max_sequence_idle_microseconds, 5000000);
    assert.equal(json.sequence_batching.direct.max_queue_delay_microseconds, 100);
    assert.deepEqual(json.sequence_batching.state[0].initial_state[0].dims, [2]);
    assert.equal(json.instance_group[0].secondary_devices[0].device_id, 7);
    assert.deepEqual(json.model_warmup[0].inputs.x.dims, [3, 4, 4]);
    assert.deepEqual(json.optimization.cuda.graph_spec[0].input.x.dim, [3, 4, 4]);
    const text = JSON.stringify(json);
    assert.doesNotMatch(text, /"-?\d+"/, 'no number is printed as a string');
  });

  it('prints enums by name, float32 values in short form, and oneof members only when set', () => {
    // eslint-disable-next-line @typescript-eslint/no-explicit-any -- walks the printed JSON document freely
    const json = modelConfigToJson(parseModelConfig(FULL, 'full/config.pbtxt')) as any;
    assert.equal(json.input[0].format, 'FORMAT_NCHW');
    assert.equal(json.instance_group[0].kind, 'KIND_GPU');
    assert.equal(json.instance_group[0].secondary_devices[0].kind, 'KIND_NVDLA');
    assert.equal(json.batch_input[0].kind, 'BATCH_ACCUMULATED_ELEMENT_COUNT');
    assert.equal(json.sequence_batching.direct.minimum_slot_utilization, 0.1);
    assert.deepEqual(json.sequence_batching.control_input[0].control[0].fp32_false_true, [0, 1]);
    assert.ok(!('dynamic_batching' in json));
    assert.ok(!('ensemble_scheduling' in json));
    assert.ok(!('oldest' in json.sequence_batching));
    assert.equal(json.sequence_batching.state[0].initial_state[0].zero_data, true);
    assert.ok(!('data_file' in json.sequence_batching.state[0].initial_state[0]));
    assert.equal(json.model_warmup[0].inputs.x.random_data, true);
    assert.ok(!('zero_data' in json.model_warmup[0].inputs.x));
    // perf_analyzer reads these booleans without checking they exist.
    assert.equal(json.model_transaction_policy.decoupled, false);
    assert.equal(json.response_cache.enable, false);
    assert.deepEqual(json.model_metrics.metric_control[0].histogram_options.buckets, [0.5, 1, 2.5]);
  });

  it('leaves out message fields that are not set', () => {
    const json = modelConfigToJson(parseModelConfig('name: "m"\n', 'm/config.pbtxt'));
    for (const key of [
      'version_policy',
      'optimization',
      'model_transaction_policy',
      'response_cache',
      'model_metrics',
    ]) {
      assert.ok(!(key in json), key);
    }
    assert.equal(json['max_batch_size'], 0);
  });

  it('round-trips a full config through JSON', () => {
    const config = parseModelConfig(FULL, 'full/config.pbtxt');
    normalizeModelConfig(config, { defaultCpuInstanceCount: 2, gpuCount: 1 });
    const text = JSON.stringify(modelConfigToJson(config));
    const back = modelConfigFromJson(text);
    assert.ok(equals(ModelConfigSchema, back, config), 'parsed JSON equals the original message');
    assert.deepEqual(modelConfigToJson(back), JSON.parse(text));
  });
});

describe('modelConfigFromJson', () => {
  it('accepts proto names, lowerCamel names, numeric strings and enum names in any case', () => {
    const config = modelConfigFromJson(
      JSON.stringify({
        name: 'm',
        maxBatchSize: '4',
        input: [{ name: 'x', data_type: 'type_fp32', dims: ['3', 4] }],
        instance_group: [{ kind: 'kind_gpu', gpus: [0] }],
        dynamic_batching: {
          max_queue_delay_microseconds: '100',
          priority_queue_policy: { '1': { timeout_action: 'delay' } },
        },
      }),
    );
    assert.equal(config.maxBatchSize, 4);
    assert.equal(config.input[0]!.dataType, DataType.TYPE_FP32);
    assert.deepEqual(config.input[0]!.dims, [3n, 4n]);
    assert.equal(config.instanceGroup[0]!.kind, ModelInstanceGroup_Kind.GPU);
    assert.ok(config.schedulingChoice.case === 'dynamicBatching');
    assert.equal(config.schedulingChoice.value.maxQueueDelayMicroseconds, 100n);
    assert.equal(config.schedulingChoice.value.priorityQueuePolicy['1']?.timeoutAction, 1);
  });

  it('rejects unknown fields', () => {
    assert.throws(
      () => modelConfigFromJson('{"name":"m","max_batch":4}'),
      (err: unknown) => err instanceof ConfigError && err.code === 'NRD_CONFIG' && /max_batch/.test(err.message),
    );
  });

  it('rejects text that is not JSON, or not an object', () => {
    assert.throws(() => modelConfigFromJson('{name: m}'), /not valid JSON/);
    assert.throws(() => modelConfigFromJson('[1]'), /must be an object/);
  });

  it('rejects a wrong value type', () => {
    assert.throws(() => modelConfigFromJson('{"max_batch_size":"lots"}'), (err: unknown) => err instanceof ConfigError);
  });

  it('an empty object is an empty config', () => {
    assert.ok(equals(ModelConfigSchema, modelConfigFromJson('{}'), create(ModelConfigSchema)));
  });
});
