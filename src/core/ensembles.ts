/**
 * What loading an ensemble takes beyond what the model repository manager
 * does for any model with dependencies: an ensemble has no backend and no
 * instances, only the ensemble scheduler; and once its step models serve,
 * it is checked against their completed configurations (Triton's
 * ValidateEnsembleConfig, with Triton's texts).
 */
import type { InferenceCaller } from '../backends/backend.js';
import { type ConfigPositions, validateEnsembleModels, validateModelConfig } from '../config/index.js';
import type { ModelConfig } from '../gen/model_config_pb.js';
import { EnsembleScheduler } from '../scheduler/ensemble-scheduler.js';
import { ModelVersion } from './model-version.js';
import { ModelSignature } from './request.js';

export function isEnsembleConfig(config: ModelConfig): boolean {
  return config.schedulingChoice.case === 'ensembleScheduling' || config.platform === 'ensemble';
}

/** The part of the manager's model registry the checks read. */
interface ServingModel {
  readonly versions: ReadonlyMap<
    number,
    { readonly version: number; readonly state: string; readonly config: ModelConfig }
  >;
}

/** Builds one ensemble version: READY at once (its step models were loaded before it). */
export function createEnsembleVersion(v: ModelVersion, server: InferenceCaller): void {
  v.signature = new ModelSignature(v.modelName, v.config);
  v.scheduler = new EnsembleScheduler(v.modelName, v.config, v.stats, server);
  v.setState('READY', '');
}

/**
 * Checks an ensemble against the serving versions of its step models;
 * throws Triton's error for the first problem. Does nothing for other models.
 */
export function checkEnsembleSteps(
  config: ModelConfig,
  models: ReadonlyMap<string, ServingModel>,
  where: { file?: string | undefined; positions?: ConfigPositions | undefined } = {},
): void {
  if (config.schedulingChoice.case !== 'ensembleScheduling') return;
  // Marks the ensemble decoupled when a step is: its scheduler then streams.
  validateEnsembleModels(config, (model, version) => {
    const ready = [...(models.get(model)?.versions.values() ?? [])].filter((v) => v.state === 'READY');
    if (ready.length === 0) return undefined;
    if (version >= 0n) return ready.find((v) => BigInt(v.version) === version)?.config;
    return ready.reduce((a, b) => (b.version > a.version ? b : a)).config;
  }, where);
  // Then the whole configuration, inputs and outputs included, as Triton checks it when it creates the model.
  validateModelConfig(config, where.file, where.positions);
}
