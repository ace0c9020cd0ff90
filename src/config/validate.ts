/**
 * validateModelConfig: the checks Triton makes before a model loads
 * (ValidateModelConfig, ValidateInstanceGroup, ValidateModelIOConfig), with
 * messages that name the field and, when the text is known, its line.
 * Run it on a completed and normalised config.
 */
import {
  ModelInstanceGroup_Kind as Kind,
  ModelInstanceGroup_KindSchema,
  type ModelConfig,
} from '../gen/model_config_pb.js';
import { Backend, Platform } from './backend-fields.js';
import type { ConfigPositions } from './positions.js';
import { ConfigChecker, enumName } from './validate-context.js';
import { validateEnsemble } from './validate-ensemble.js';
import { validateFileReferences } from './validate-files.js';
import { validateIO } from './validate-io.js';
import { validateDynamicBatching, validateSequenceBatching } from './validate-scheduling.js';

export interface ValidateOptions {
  /** GPUs the server sees; when given, listed gpu ids are checked against it. */
  gpuCount?: number;
  /** Check inputs/outputs (default true). Turn off before a backend has auto-completed them. */
  checkIO?: boolean;
}

/** Platform each known backend must be paired with. Unknown (custom) backends take any platform. */
const BACKEND_PLATFORMS: Readonly<Record<string, readonly string[]>> = {
  [Backend.tensorflow]: [Platform.tensorflowGraphdef, Platform.tensorflowSavedmodel],
  [Backend.tensorrt]: [Platform.tensorrtPlan],
  [Backend.onnxruntime]: [Platform.onnxruntimeOnnx],
  [Backend.pytorch]: [Platform.pytorchLibtorch, Platform.libtorch, Platform.torchAoti],
};

export function validateModelConfig(
  config: ModelConfig,
  file?: string,
  positions?: ConfigPositions,
  opts: ValidateOptions = {},
): void {
  const c = new ConfigChecker(config, file, positions);
  validateIdentity(c);

  // A runtime names a library inside the backend folder; it must not lead out of it.
  if (config.runtime !== '' && (config.runtime.startsWith('/') || config.runtime.split(/[\\/]/).includes('..'))) {
    c.fail('runtime', `runtime "${config.runtime}" must name a library inside the backend directory, not a path out of it`);
  }
  if (config.maxBatchSize < 0) {
    c.fail('max_batch_size', `max_batch_size must be 0 (no batching) or positive, got ${config.maxBatchSize}`);
  }
  validateVersionPolicy(c);

  const scheduling = config.schedulingChoice;
  if (scheduling.case === 'dynamicBatching') validateDynamicBatching(c, scheduling.value);
  if (scheduling.case === 'sequenceBatching') validateSequenceBatching(c, scheduling.value);
  if (scheduling.case === 'ensembleScheduling') {
    validateEnsemble(c, scheduling.value);
  } else if (config.platform === Platform.ensemble) {
    c.fail('platform', `platform "ensemble" needs an "ensemble_scheduling" section`);
  }

  if (config.modelTransactionPolicy?.decoupled && config.responseCache?.enable) {
    c.fail('response_cache.enable', 'response_cache cannot be enabled for a decoupled model (model_transaction_policy.decoupled)');
  }
  validateModelMetrics(c);
  validateFileReferences(c);
  if (scheduling.case !== 'ensembleScheduling') validateInstanceGroups(c, opts);
  if (opts.checkIO !== false) validateIO(c);
}

function validateIdentity(c: ConfigChecker): void {
  const { config } = c;
  if (config.name === '') c.fail('name', 'the configuration must set "name"');
  if (config.backend === '') {
    if (config.platform === '') {
      c.fail('backend', 'no "backend" is set and none could be inferred from the model files: set "backend"');
    }
    if (config.platform !== Platform.ensemble) {
      c.fail('platform', `platform "${config.platform}" is not one Nereid knows, and no "backend" is set`);
    }
  } else if (config.platform === Platform.ensemble) {
    c.fail('backend', `an ensemble has platform "ensemble" and no backend, but backend is "${config.backend}"`);
  }
  const platforms = BACKEND_PLATFORMS[config.backend];
  if (platforms !== undefined && !platforms.includes(config.platform)) {
    c.fail(
      config.platform === '' ? 'backend' : 'platform',
      `platform "${config.platform}" does not go with backend "${config.backend}" (expected ${platforms.map((p) => `"${p}"`).join(' or ')})`,
    );
  }
}

function validateVersionPolicy(c: ConfigChecker): void {
  const policy = c.config.versionPolicy;
  if (policy === undefined) c.fail('version_policy', '"version_policy" must be set (normalisation sets latest { num_versions: 1 })');
  if (policy.policyChoice.case === 'specific') {
    policy.policyChoice.value.versions.forEach((v, i) => {
      if (v < 0n) c.fail(`version_policy.specific.versions[${i}]`, `version_policy: versions must be 0 or more, got ${v}`);
    });
  }
}

function validateModelMetrics(c: ConfigChecker): void {
  const metrics = c.config.modelMetrics;
  if (metrics === undefined) return;
  metrics.metricControl.forEach((mc, i) => {
    const path = `model_metrics.metric_control[${i}]`;
    if (mc.metricIdentifier === undefined) c.fail(path, `model_metrics: metric_control ${i} must set "metric_identifier"`);
    if (mc.metricIdentifier.family === '') {
      c.fail(`${path}.metric_identifier`, `model_metrics: metric_control ${i} must set a non-empty metric_identifier.family`);
    }
    if (mc.metricOptions.case !== 'histogramOptions') {
      c.fail(path, `model_metrics: metric_control ${i} must set "histogram_options"`);
    }
    if (mc.metricOptions.value.buckets.length === 0) {
      c.fail(`${path}.histogram_options`, `model_metrics: histogram_options of metric_control ${i} must list "buckets"`);
    }
  });
}

function validateInstanceGroups(c: ConfigChecker, opts: ValidateOptions): void {
  const { config } = c;
  if (config.instanceGroup.length === 0) {
    c.fail('instance_group', 'at least one instance_group is needed (normalisation adds one)');
  }
  config.instanceGroup.forEach((group, i) => {
    const path = `instance_group[${i}]`;
    const subject = `instance_group "${group.name}"`;
    switch (group.kind) {
      case Kind.MODEL:
      case Kind.CPU:
        if (group.gpus.length > 0) {
          c.fail(`${path}.gpus`, `${subject}: gpus may only be listed for KIND_GPU, but kind is ${enumName(ModelInstanceGroup_KindSchema, group.kind)}`);
        }
        break;
      case Kind.GPU: {
        if (group.gpus.length === 0) {
          c.fail(
            `${path}.kind`,
            opts.gpuCount === 0 || opts.gpuCount === undefined
              ? `${subject}: kind is KIND_GPU but no GPUs are available (use KIND_CPU)`
              : `${subject}: kind is KIND_GPU but no gpus are listed`,
          );
        }
        if (opts.gpuCount !== undefined) {
          const count = opts.gpuCount;
          group.gpus.forEach((id, j) => {
            if (id < 0 || id >= count) {
              const seen = count === 0 ? 'no GPUs' : count === 1 ? 'GPU 0' : `GPUs 0..${count - 1}`;
              c.fail(`${path}.gpus[${j}]`, `${subject}: GPU ${id} is not available (the server sees ${seen})`);
            }
          });
        }
        break;
      }
      case Kind.AUTO:
        c.fail(`${path}.kind`, `${subject}: kind KIND_AUTO was not resolved (normalise the config before validating it)`);
      default:
        c.fail(`${path}.kind`, `${subject}: kind ${group.kind} is not a known instance group kind`);
    }
    if (group.count < 1) c.fail(`${path}.count`, `${subject}: count must be at least 1, got ${group.count}`);
    if (group.profile.length > 0) {
      if (config.platform !== Platform.tensorrtPlan) {
        c.fail(`${path}.profile`, `${subject}: "profile" is only supported for TensorRT models`);
      }
      group.profile.forEach((p, j) => {
        if (!/^\d+$/.test(p)) {
          c.fail(`${path}.profile[${j}]`, `${subject}: profile "${p}" must be a non-negative integer in a string`);
        }
      });
    }
  });
}
