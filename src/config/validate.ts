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
    c.fail(
      'runtime',
      `runtime "${config.runtime}" must name a library inside the backend directory, not a path out of it`,
    );
  }
  if (config.maxBatchSize < 0) {
    c.fail(
      'max_batch_size',
      `'max_batch_size' must be non-negative value for ${config.name} ` +
      `(got ${config.maxBatchSize}; 0 means no batching)`,
    );
  }
  validateVersionPolicy(c);

  const scheduling = config.schedulingChoice;
  if (scheduling.case === 'dynamicBatching') validateDynamicBatching(c, scheduling.value);
  if (scheduling.case === 'sequenceBatching') validateSequenceBatching(c, scheduling.value);
  if (scheduling.case === 'ensembleScheduling') {
    validateEnsemble(c, scheduling.value);
  } else if (config.platform === Platform.ensemble) {
    c.fail('platform', `ensemble scheduling must be set for ensemble ${config.name} whose platform is ensemble`);
  }

  if (config.modelTransactionPolicy?.decoupled && config.responseCache?.enable) {
    c.fail(
      'response_cache.enable',
      `Response Cache does not currently support model ${config.name} with ` +
      `'decoupled' transaction policy. Please disable the response cache.`,
    );
  }
  validateModelMetrics(c);
  validateFileReferences(c);
  if (scheduling.case !== 'ensembleScheduling') validateInstanceGroups(c, opts);
  if (opts.checkIO !== false) validateIO(c);
}

function validateIdentity(c: ConfigChecker): void {
  const { config } = c;
  if (config.name === '') c.fail('name', "model configuration must specify 'name'");
  if (config.backend === '') {
    if (config.platform === '') {
      c.fail(
        'backend',
        `must specify 'platform' or 'backend' for '${config.name}' (no ` +
        `"backend" is set and none could be inferred from the model files)`,
      );
    }
    if (config.platform !== Platform.ensemble) {
      c.fail(
        'platform',
        `unexpected platform type '${config.platform}' for ${config.name} ` +
        `(a platform Nereid does not know, and no "backend" is set)`,
      );
    }
  } else if (config.platform === Platform.ensemble) {
    c.fail(
      'backend',
      `Ensemble model '${config.name}' must have platform type 'ensemble' ` +
      `and empty backend type (backend is "${config.backend}")`,
    );
  }
  const platforms = BACKEND_PLATFORMS[config.backend];
  if (platforms !== undefined && !platforms.includes(config.platform)) {
    c.fail(
      config.platform === '' ? 'backend' : 'platform',
      `unexpected 'platform' and 'backend' pair, got:${config.platform}, ${config.backend} ` +
      `(backend "${config.backend}" goes with ${platforms.map((p) => `"${p}"`).join(' or ')})`,
    );
  }
}

function validateVersionPolicy(c: ConfigChecker): void {
  const policy = c.config.versionPolicy;
  if (policy === undefined) {
    c.fail(
      'version_policy',
      `must specify 'version policy' for ${c.config.name} (normalisation sets latest { num_versions: 1 })`,
    );
  }
  if (policy.policyChoice.case === 'specific') {
    policy.policyChoice.value.versions.forEach((v, i) => {
      if (v < 0n)
        c.fail(`version_policy.specific.versions[${i}]`, `version_policy: versions must be 0 or more, got ${v}`);
    });
  }
}

function validateModelMetrics(c: ConfigChecker): void {
  const metrics = c.config.modelMetrics;
  if (metrics === undefined) return;
  metrics.metricControl.forEach((mc, i) => {
    const path = `model_metrics.metric_control[${i}]`;
    if (mc.metricIdentifier === undefined)
      c.fail(path, `metric control must specify 'metric_identifier' (model_metrics.metric_control ${i})`);
    if (mc.metricIdentifier.family === '') {
      c.fail(
        `${path}.metric_identifier`,
        `metric identifier must specify non-empty 'family' (model_metrics.metric_control ${i})`,
      );
    }
    if (mc.metricOptions.case !== 'histogramOptions') {
      c.fail(path, `metric control must specify 'histogram_options' (model_metrics.metric_control ${i})`);
    }
    if (mc.metricOptions.value.buckets.length === 0) {
      c.fail(
        `${path}.histogram_options`,
        `histogram options must specify non-empty 'buckets' (model_metrics.metric_control ${i})`,
      );
    }
  });
}

function validateInstanceGroups(c: ConfigChecker, opts: ValidateOptions): void {
  const { config } = c;
  if (config.instanceGroup.length === 0) {
    c.fail('instance_group', `must specify one or more 'instance group's for ${config.name} (normalisation adds one)`);
  }
  config.instanceGroup.forEach((group, i) => {
    const path = `instance_group[${i}]`;
    const triton = `instance group ${group.name} of model ${config.name}`;
    switch (group.kind) {
      case Kind.MODEL:
      case Kind.CPU:
        if (group.gpus.length > 0) {
          c.fail(
            `${path}.gpus`,
            `${triton} has kind ${enumName(ModelInstanceGroup_KindSchema, group.kind)} ` +
            `but specifies one or more GPUs (gpus may only be listed for KIND_GPU)`,
          );
        }
        break;
      case Kind.GPU: {
        if (group.gpus.length === 0) {
          c.fail(
            `${path}.kind`,
            opts.gpuCount === 0 || opts.gpuCount === undefined
              ? `${triton} has kind KIND_GPU but no GPUs are available (use KIND_CPU)`
              : `${triton} has kind KIND_GPU but specifies no GPUs`,
          );
        }
        if (opts.gpuCount !== undefined) {
          const count = opts.gpuCount;
          group.gpus.forEach((id, j) => {
            if (id < 0 || id >= count) {
              const seen =
                count === 0 ? 'none (the server sees no GPUs)' : Array.from({ length: count }, (_, k) => k).join(', ');
              c.fail(
                `${path}.gpus[${j}]`,
                `${triton} specifies invalid or unsupported gpu id ${id}. GPUs with at ` +
                `least the minimum required CUDA compute compatibility are: ${seen}`,
              );
            }
          });
        }
        break;
      }
      case Kind.AUTO:
        c.fail(`${path}.kind`, `${triton} has unexpected kind KIND_AUTO (normalise the config before validating it)`);
      default:
        c.fail(`${path}.kind`, `${triton} has unexpected kind ${group.kind}`);
    }
    if (group.count < 1) c.fail(`${path}.count`, `${triton}: count must be at least 1, got ${group.count}`);
    if (group.profile.length > 0) {
      if (config.platform !== Platform.tensorrtPlan) {
        c.fail(
          `${path}.profile`,
          `${triton} and platform ${config.platform} specifies ` +
          `profile field which is only supported for TensorRT models`,
        );
      }
      group.profile.forEach((p, j) => {
        if (!/^\d+$/.test(p)) {
          c.fail(
            `${path}.profile[${j}]`,
            `${triton} and platform ${config.platform} specifies invalid profile ${p}. The ` +
            `field should contain the string representation of a non-negative integer.`,
          );
        }
      });
    }
  });
}
