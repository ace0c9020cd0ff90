import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { create } from '@bufbuild/protobuf';
import {
  normalizeModelConfig,
  parseModelConfig,
  SEQUENCE_IDLE_DEFAULT_MICROSECONDS,
  type NormalizeOptions,
} from '../../src/config/index.js';
import { ModelConfigSchema, ModelInstanceGroup_Kind as Kind } from '../../src/gen/model_config_pb.js';

const CPU_ONLY: NormalizeOptions = { defaultCpuInstanceCount: 2, gpuCount: 0 };

function normalized(text: string, opts: NormalizeOptions = CPU_ONLY) {
  return normalizeModelConfig(parseModelConfig(text, 'm/config.pbtxt'), opts);
}

describe('normalizeModelConfig', () => {
  it('defaults the version policy to latest 1', () => {
    const config = normalized('name: "m"\nbackend: "python"\n');
    assert.equal(config.versionPolicy?.policyChoice.case, 'latest');
    assert.equal(config.versionPolicy?.policyChoice.value?.$typeName, 'inference.ModelVersionPolicy.Latest');
    assert.equal((config.versionPolicy?.policyChoice.value as { numVersions: number }).numVersions, 1);
  });

  it('keeps an explicit policy, including an empty one (which means all versions)', () => {
    assert.equal(normalized('name: "m"\nversion_policy { all { } }\n').versionPolicy?.policyChoice.case, 'all');
    assert.equal(normalized('name: "m"\nversion_policy { }\n').versionPolicy?.policyChoice.case, undefined);
  });

  it('adds one instance group named after the model when none is given', () => {
    const config = normalized('name: "m"\nbackend: "python"\n');
    assert.equal(config.instanceGroup.length, 1);
    const g = config.instanceGroup[0]!;
    assert.deepEqual([g.name, g.kind, g.count, g.gpus], ['m', Kind.CPU, 2, []]);
  });

  it('names unnamed groups <model>_<index>', () => {
    const config = normalized('name: "m"\ninstance_group [ { name: "a" }, { kind: KIND_CPU } ]\n');
    assert.deepEqual(
      config.instanceGroup.map((g) => g.name),
      ['a', 'm_1'],
    );
  });

  it('KIND_AUTO becomes GPU with GPUs present, CPU without', () => {
    assert.equal(
      normalized('name: "m"\n', { defaultCpuInstanceCount: 1, gpuCount: 2 }).instanceGroup[0]!.kind,
      Kind.GPU,
    );
    assert.equal(normalized('name: "m"\n').instanceGroup[0]!.kind, Kind.CPU);
  });

  it('KIND_AUTO listing a missing GPU becomes CPU', () => {
    const g = normalized('name: "m"\ninstance_group { gpus: [ 0, 4 ] }\n', { defaultCpuInstanceCount: 1, gpuCount: 2 })
      .instanceGroup[0]!;
    assert.equal(g.kind, Kind.CPU);
  });

  it('KIND_GPU with no gpus gets every visible GPU', () => {
    const g = normalized('name: "m"\ninstance_group { kind: KIND_GPU count: 3 }\n', {
      defaultCpuInstanceCount: 1,
      gpuCount: 2,
    }).instanceGroup[0]!;
    assert.deepEqual([g.count, g.gpus], [3, [0, 1]]);
  });

  it('an unset CPU count takes defaultCpuInstanceCount; GPU groups default to 1', () => {
    assert.equal(
      normalized('name: "m"\nbackend: "onnxruntime"\n', { defaultCpuInstanceCount: 2, gpuCount: 0 }).instanceGroup[0]!
        .count,
      2,
    );
    assert.equal(
      normalized('name: "m"\nbackend: "python"\n', { defaultCpuInstanceCount: 1, gpuCount: 0 }).instanceGroup[0]!.count,
      1,
    );
    assert.equal(
      normalized('name: "m"\ninstance_group { count: 5 }\n', { defaultCpuInstanceCount: 2, gpuCount: 0 })
        .instanceGroup[0]!.count,
      5,
    );
    assert.equal(
      normalized('name: "m"\ninstance_group { count: -3 }\n', { defaultCpuInstanceCount: 2, gpuCount: 0 })
        .instanceGroup[0]!.count,
      2,
    );
    assert.equal(normalized('name: "m"\n', { defaultCpuInstanceCount: 2, gpuCount: 1 }).instanceGroup[0]!.count, 1);
  });

  it('fills preferred_batch_size with max_batch_size when empty', () => {
    const db = normalized('name: "m"\nmax_batch_size: 8\ndynamic_batching { }\n').schedulingChoice;
    assert.ok(db.case === 'dynamicBatching');
    assert.deepEqual(db.value.preferredBatchSize, [8]);
    const kept = normalized(
      'name: "m"\nmax_batch_size: 8\ndynamic_batching { preferred_batch_size: [ 2, 4 ] }\n',
    ).schedulingChoice;
    assert.ok(kept.case === 'dynamicBatching');
    assert.deepEqual(kept.value.preferredBatchSize, [2, 4]);
    const noBatch = normalized('name: "m"\ndynamic_batching { }\n').schedulingChoice;
    assert.ok(noBatch.case === 'dynamicBatching');
    assert.deepEqual(noBatch.value.preferredBatchSize, []);
  });

  it('defaults sequence idle time to 1,000,000 µs and fills the oldest strategy batch size', () => {
    const seq = normalized('name: "m"\nmax_batch_size: 4\nsequence_batching { oldest { } }\n').schedulingChoice;
    assert.equal(seq.case, 'sequenceBatching');
    assert.equal(seq.value?.maxSequenceIdleMicroseconds, SEQUENCE_IDLE_DEFAULT_MICROSECONDS);
    assert.equal(SEQUENCE_IDLE_DEFAULT_MICROSECONDS, 1_000_000n);
    assert.equal(seq.value?.strategyChoice.case, 'oldest');
    assert.deepEqual(seq.value?.strategyChoice.value?.preferredBatchSize, [4]);
    const kept = normalized('name: "m"\nsequence_batching { max_sequence_idle_microseconds: 5 }\n').schedulingChoice;
    assert.ok(kept.case === 'sequenceBatching');
    assert.equal(kept.value.maxSequenceIdleMicroseconds, 5n);
  });

  it('turns pinned memory on for non-ensembles only', () => {
    const config = normalized('name: "m"\n');
    assert.equal(config.optimization?.inputPinnedMemory?.enable, true);
    assert.equal(config.optimization?.outputPinnedMemory?.enable, true);
    const explicit = normalized('name: "m"\noptimization { input_pinned_memory { enable: false } }\n');
    assert.equal(explicit.optimization?.inputPinnedMemory?.enable, false);
    assert.equal(explicit.optimization?.outputPinnedMemory?.enable, true);
    const ensemble = normalized('name: "e"\nplatform: "ensemble"\nensemble_scheduling { }\n');
    assert.equal(ensemble.optimization, undefined);
    assert.equal(ensemble.instanceGroup.length, 0);
  });

  it('is idempotent', () => {
    const config = create(ModelConfigSchema, { name: 'm', backend: 'onnxruntime', maxBatchSize: 4 });
    normalizeModelConfig(config, CPU_ONLY);
    const once = structuredClone(config);
    normalizeModelConfig(config, CPU_ONLY);
    assert.deepEqual(config, once);
  });
});
