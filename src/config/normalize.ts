/**
 * Triton's defaults for what a config leaves out (core NormalizeModelConfig
 * and NormalizeInstanceGroup). Safe to run more than once: run it after the
 * backend's own auto-complete too, as Triton does.
 */
import { create } from '@bufbuild/protobuf';
import {
  ModelInstanceGroup_Kind,
  ModelInstanceGroupSchema,
  ModelOptimizationPolicy_PinnedMemoryBufferSchema,
  ModelOptimizationPolicySchema,
  ModelVersionPolicy_LatestSchema,
  ModelVersionPolicySchema,
  type ModelConfig,
} from '../gen/model_config_pb.js';

/** Sequence slots are released after this much idle time unless the config says otherwise. */
export const SEQUENCE_IDLE_DEFAULT_MICROSECONDS = 1_000_000n;
/** Triton's default instance count for KIND_CPU groups of onnxruntime and tensorflow models. */
export const TRITON_DEFAULT_CPU_INSTANCE_COUNT = 2;

export interface NormalizeOptions {
  /**
   * Instance count for a KIND_CPU group with no count. Triton uses 2 for the
   * backends that run well with several CPU instances (onnxruntime,
   * tensorflow) and 1 for the rest; pass the serving backend's preference.
   */
  defaultCpuInstanceCount: number;
  /** GPUs visible to the server (ids 0..gpuCount-1). */
  gpuCount: number;
}

export function normalizeModelConfig(config: ModelConfig, opts: NormalizeOptions): ModelConfig {
  // Only an absent policy is defaulted: `version_policy {}` means every version, as in Triton.
  if (config.versionPolicy === undefined) {
    config.versionPolicy = create(ModelVersionPolicySchema, {
      policyChoice: { case: 'latest', value: create(ModelVersionPolicy_LatestSchema, { numVersions: 1 }) },
    });
  }

  const scheduling = config.schedulingChoice;
  if (scheduling.case === 'dynamicBatching') {
    if (scheduling.value.preferredBatchSize.length === 0 && config.maxBatchSize > 0) {
      scheduling.value.preferredBatchSize.push(config.maxBatchSize);
    }
  } else if (scheduling.case === 'sequenceBatching') {
    const seq = scheduling.value;
    if (seq.maxSequenceIdleMicroseconds === 0n) seq.maxSequenceIdleMicroseconds = SEQUENCE_IDLE_DEFAULT_MICROSECONDS;
    if (
      seq.strategyChoice.case === 'oldest' &&
      seq.strategyChoice.value.preferredBatchSize.length === 0 &&
      config.maxBatchSize > 0
    ) {
      seq.strategyChoice.value.preferredBatchSize.push(config.maxBatchSize);
    }
  }

  // Ensembles have neither instances nor buffers of their own.
  if (scheduling.case !== 'ensembleScheduling') {
    config.optimization ??= create(ModelOptimizationPolicySchema);
    config.optimization.inputPinnedMemory ??= create(ModelOptimizationPolicy_PinnedMemoryBufferSchema, {
      enable: true,
    });
    config.optimization.outputPinnedMemory ??= create(ModelOptimizationPolicy_PinnedMemoryBufferSchema, {
      enable: true,
    });
    normalizeInstanceGroups(config, opts);
  }
  return config;
}

/** Names, kinds, counts and GPUs for every instance group; one group when none is given. */
export function normalizeInstanceGroups(config: ModelConfig, opts: NormalizeOptions): ModelConfig {
  if (config.schedulingChoice.case === 'ensembleScheduling') return config;
  if (config.instanceGroup.length === 0) {
    config.instanceGroup.push(create(ModelInstanceGroupSchema, { name: config.name }));
  }
  const gpuPresent = (id: number) => Number.isInteger(id) && id >= 0 && id < opts.gpuCount;
  config.instanceGroup.forEach((group, index) => {
    if (group.name === '') group.name = `${config.name}_${index}`;
    if (group.kind === ModelInstanceGroup_Kind.AUTO) {
      group.kind =
        opts.gpuCount > 0 && group.gpus.every(gpuPresent) ? ModelInstanceGroup_Kind.GPU : ModelInstanceGroup_Kind.CPU;
    }
    if (group.count < 1) {
      group.count = group.kind === ModelInstanceGroup_Kind.CPU ? Math.max(1, opts.defaultCpuInstanceCount) : 1;
    }
    if (group.kind === ModelInstanceGroup_Kind.GPU && group.gpus.length === 0) {
      for (let id = 0; id < opts.gpuCount; id++) group.gpus.push(id);
    }
  });
  return config;
}
