/**
 * Turns one model folder into loaded versions: configuration (parse,
 * auto-complete, defaults, validation), backend, instances and scheduler.
 * A failure of the configuration fails the model; a failure of one version
 * leaves that version UNAVAILABLE with its reason.
 */
import { readFile } from 'node:fs/promises';
import path from 'node:path';
import type { Logger } from 'pino';
import type { Backend, InferenceCaller, InstanceContext } from '../backends/backend.js';
import { getBackend, knownBackends } from '../backends/registry.js';
import {
  type ConfigPositions,
  completeBackendFields,
  modelConfigFromJson,
  normalizeModelConfig,
  readModelConfig,
  validateModelConfig,
} from '../config/index.js';
import { type ModelConfig, ModelInstanceGroup_Kind } from '../gen/model_config_pb.js';
import { listVersions, missingVersionMessage, selectVersionsDetailed } from '../repository/index.js';
import { Errors, NereidError } from '../errors.js';
import { DefaultScheduler } from '../scheduler/default-scheduler.js';
import { DynamicBatcher } from '../scheduler/dynamic-batcher.js';
import { SequenceBatcher, type StateSpec, loadStateSpecs } from '../scheduler/sequence-batcher/index.js';
import { ModelInstance, type Scheduler } from '../scheduler/scheduler.js';
import { type BatchingSettings, batchingSettings, serverBatchingPolicy } from '../scheduler/batching-policy.js';
import { ModelSignature } from './request.js';
import { ModelVersion, type VersionStateListener } from './model-version.js';
import { createEnsembleVersion, isEnsembleConfig } from './ensembles.js';
import { prepareWarmup, runWarmup } from './warmup.js';

export interface LoaderOptions {
  autoComplete: boolean;
  modelConfigName: string | undefined;
  backendConfig: Record<string, Record<string, string>>;
  gpuCount: number;
  logger: Logger;
  server: InferenceCaller;
  /** Extra attempts for a version that fails to load (--model-load-retry-count). Default 0. */
  retryCount?: number;
  /** Hears every state change of the versions this loader creates. */
  onVersionState?: VersionStateListener;
  /** Hears of memory a loaded version took after its load (ModelContext.memoryGrew); set under a memory budget. */
  onMemoryGrew?: (v: ModelVersion, bytes: number) => void;
}

export interface LoadedModel {
  config: ModelConfig;
  versions: Map<number, ModelVersion>;
}

function backendConfigFor(options: LoaderOptions, backend: string): Record<string, string> {
  return { ...(options.backendConfig[''] ?? {}), ...(options.backendConfig[backend] ?? {}) };
}

/** Reads, completes and validates a model's configuration. Throws with a clear reason. */
export async function resolveModelConfig(
  name: string,
  modelDir: string,
  options: LoaderOptions,
  configOverride?: string,
): Promise<{ config: ModelConfig; backend: Backend | undefined; available: number[]; where: ConfigWhere }> {
  let config: ModelConfig;
  let file: string | undefined;
  let positions: ConfigPositions | undefined;
  if (configOverride !== undefined) {
    config = modelConfigFromJson(configOverride);
  } else {
    const read = await readModelConfig(modelDir, { modelConfigName: options.modelConfigName, modelName: name });
    config = read.config;
    file = read.file;
    positions = read.positions;
  }
  const available = await listVersions(modelDir);
  await completeBackendFields(config, name, modelDir, available.map(String), { file, positions });
  const backendName = config.backend;
  const where = { file, positions };
  if (isEnsembleConfig(config)) {
    // No backend: the step models do the work (checked against them once they serve). As in Triton,
    // with auto-complete on the ensemble's own inputs and outputs are checked after that (checkEnsembleSteps).
    normalizeModelConfig(config, { defaultCpuInstanceCount: 1, gpuCount: options.gpuCount });
    validateModelConfig(config, file, positions, { gpuCount: options.gpuCount, checkIO: !options.autoComplete });
    return { config, backend: undefined, available, where };
  }
  if (!backendName) {
    throw Errors.config(
      `model '${name}': no backend or platform is set in ` +
      `${file ?? 'its configuration'} and none could be inferred from the model files`,
    );
  }
  const backendPromise = getBackend(backendName);
  if (!backendPromise) {
    // As Triton does, report what is wrong with the configuration before saying the backend is missing.
    normalizeModelConfig(config, { defaultCpuInstanceCount: 1, gpuCount: options.gpuCount });
    validateModelConfig(config, file, positions, { gpuCount: options.gpuCount });
    throw Errors.config(
      `unable to find backend library for backend '${backendName}', ` +
      `try specifying runtime on the model configuration. ` +
        `(model '${name}'; the backends available here: ${knownBackends().join(', ')})`,
    );
  }
  let backend: Backend;
  try {
    backend = await backendPromise;
  } catch (err) {
    throw Errors.backendUnavailable(`backend '${backendName}' could not be loaded: ${(err as Error).message}`);
  }
  if (options.autoComplete && backend.autoCompleteConfig) {
    const highest = available.length > 0 ? Math.max(...available) : undefined;
    config = await backend.autoCompleteConfig({
      modelName: name,
      modelDir,
      versionDir: highest === undefined ? undefined : path.join(modelDir, String(highest)),
      config,
      backendConfig: backendConfigFor(options, backendName),
      logger: options.logger,
    });
  }
  normalizeModelConfig(config, {
    defaultCpuInstanceCount: backend.defaultCpuInstanceCount ?? 1,
    gpuCount: options.gpuCount,
  });
  validateModelConfig(config, file, positions, { gpuCount: options.gpuCount });
  // batching_policy and target_p99_ms: a bad value fails here, so `nereid validate` reports it too.
  batchingSettings(name, config.parameters, serverBatchingPolicy(options.backendConfig, backend.name));
  if (config.modelTransactionPolicy?.decoupled && !backend.supportsDecoupled) {
    throw Errors.config(
      `model '${name}': the ${backend.name} backend does not support models with the ` +
      `decoupled transaction policy (model_transaction_policy { decoupled: true })`,
    );
  }
  return { config, backend, available, where };
}

async function readLabels(modelDir: string, config: ModelConfig): Promise<Map<string, string[]>> {
  const labels = new Map<string, string[]>();
  for (const output of config.output) {
    if (!output.labelFilename) continue;
    const file = path.join(modelDir, output.labelFilename);
    let text: string;
    try {
      text = await readFile(file, 'utf8');
    } catch {
      throw Errors.config(`output '${output.name}': label_filename '${output.labelFilename}' cannot be read`);
    }
    const lines = text.split(/\r?\n/);
    if (lines.length > 0 && lines[lines.length - 1] === '') lines.pop();
    labels.set(output.name, lines);
  }
  return labels;
}

/**
 * The model's batching_policy and target_p99_ms (docs/batching.md); throws
 * naming the parameter for a bad value, and warns where the model's
 * scheduler has no use for them.
 */
function resolveBatching(v: ModelVersion, backend: string, options: LoaderOptions, logger: Logger): BatchingSettings {
  const config = v.config;
  const serverDefault = serverBatchingPolicy(options.backendConfig, backend);
  const settings = batchingSettings(v.modelName, config.parameters, serverDefault);
  const choice = config.schedulingChoice;
  const dynamic = choice.case === 'dynamicBatching' && config.maxBatchSize > 0;
  const oldest = choice.case === 'sequenceBatching' && choice.value.strategyChoice.case === 'oldest';
  const own = ['batching_policy', 'target_p99_ms'].filter((k) => config.parameters[k] !== undefined);
  if (own.includes('batching_policy') && !dynamic && !oldest) {
    logger.warn(
      { model: v.modelName },
      "parameter 'batching_policy' has no effect: the model has neither dynamic_batching nor " +
      "sequence_batching's oldest strategy",
    );
  }
  if (own.includes('target_p99_ms') && !dynamic) {
    logger.warn({ model: v.modelName }, "parameter 'target_p99_ms' has no effect: the model has no dynamic_batching");
  }
  return settings;
}

function makeScheduler(
  v: ModelVersion,
  instances: ModelInstance[],
  states: StateSpec[],
  batching: BatchingSettings,
  logger: Logger,
): Scheduler {
  const active = instances.filter((i) => !i.passive);
  const choice = v.config.schedulingChoice;
  if (choice.case === 'sequenceBatching') {
    return new SequenceBatcher(v.modelName, active, v.stats, {
      maxBatchSize: v.config.maxBatchSize,
      batching: choice.value,
      states,
      logger,
      policy: batching.policy,
    });
  }
  if (choice.case === 'dynamicBatching' && v.config.maxBatchSize > 0) {
    const ragged = new Set(v.config.input.filter((i) => i.allowRaggedBatch).map((i) => i.name));
    return new DynamicBatcher(v.modelName, active, v.stats, {
      maxBatchSize: v.config.maxBatchSize,
      batching: choice.value,
      raggedInputs: ragged,
      coalesceArrivals: true,
      policy: batching.policy,
      targetP99Ms: batching.targetP99Ms,
      logger,
    });
  }
  return new DefaultScheduler(v.modelName, active, v.stats);
}

interface PlannedInstance {
  name: string;
  kind: 'CPU' | 'GPU' | 'MODEL';
  deviceId: number;
  passive: boolean;
}

function planInstances(config: ModelConfig): PlannedInstance[] {
  const planned: PlannedInstance[] = [];
  for (const group of config.instanceGroup) {
    const kind =
      group.kind === ModelInstanceGroup_Kind.GPU
        ? 'GPU'
        : group.kind === ModelInstanceGroup_Kind.MODEL
          ? 'MODEL'
          : 'CPU';
    const devices = kind === 'GPU' ? (group.gpus.length > 0 ? group.gpus : [0]) : [0];
    for (const deviceId of devices) {
      for (let i = 0; i < group.count; i++) {
        const suffix = kind === 'GPU' && devices.length > 1 ? `_${deviceId}` : '';
        planned.push({ name: `${group.name}_${i}${suffix}`, kind, deviceId, passive: group.passive });
      }
    }
  }
  return planned;
}

/** Loads one version; on failure the version is UNAVAILABLE with the reason. Never throws. */
async function loadVersion(
  v: ModelVersion,
  backend: Backend,
  modelDir: string,
  labels: Map<string, string[]>,
  options: LoaderOptions,
): Promise<void> {
  const started = process.hrtime.bigint();
  const logger = options.logger.child({ model: v.modelName, version: v.version });
  const versionDir = path.join(modelDir, String(v.version));
  const baseCtx = {
    modelName: v.modelName,
    version: v.version,
    modelDir,
    versionDir,
    config: v.config,
    backendConfig: backendConfigFor(options, backend.name),
    logger,
    server: options.server,
    memoryGrew: options.onMemoryGrew === undefined ? undefined : (bytes: number) => options.onMemoryGrew!(v, bytes),
  };
  try {
    v.signature = new ModelSignature(v.modelName, v.config);
    v.labels = labels;
    const batching = resolveBatching(v, backend.name, options, logger);
    v.backendModel = await backend.loadModel(baseCtx);
    const planned = planInstances(v.config);
    const instances = await Promise.all(
      planned.map(async (p) => {
        const ctx: InstanceContext = { ...baseCtx, instanceName: p.name, kind: p.kind, deviceId: p.deviceId };
        return new ModelInstance(p.name, await v.backendModel!.createInstance(ctx), p.passive);
      }),
    );
    v.instances = instances;
    v.scheduler = makeScheduler(v, instances, await loadStateSpecs(v.config, modelDir), batching, logger);
    await warmUp(v, modelDir, logger);
    v.loadDurationSecs = Number(process.hrtime.bigint() - started) / 1e9;
    v.setState('READY', '');
    logger.info({ instances: instances.length, seconds: v.loadDurationSecs }, 'model version ready');
  } catch (err) {
    const reason = err instanceof Error ? err.message : String(err);
    try {
      await v.close();
    } catch (closeErr) {
      logger.warn({ err: closeErr }, 'cleanup after a failed load failed');
    }
    v.setState('UNAVAILABLE', reason);
    logger.error({ reason }, 'model version failed to load');
  }
}

/** Runs the configured warm-up samples on every instance; the version is not READY before this ends. */
async function warmUp(v: ModelVersion, modelDir: string, logger: Logger): Promise<void> {
  if (v.config.modelWarmup.length === 0) return;
  const samples = await prepareWarmup(v.modelName, modelDir, v.config);
  if (samples.length === 0) return;
  const started = process.hrtime.bigint();
  // Warm-up executions count in the statistics (as Triton); metrics attach later and still see them.
  v.stats.holdEvents();
  try {
    await runWarmup(v.modelName, v.config.maxBatchSize > 0, v.instances, samples, v.stats, logger);
  } finally {
    v.stats.releaseEvents();
  }
  v.warmupDurationSecs = Number(process.hrtime.bigint() - started) / 1e9;
  logger.info(
    { samples: samples.map((s) => s.name), instances: v.instances.length, seconds: v.warmupDurationSecs },
    'model version warmed up',
  );
}

/**
 * What loading one version would fail with, or undefined: the checks
 * loadVersion makes in the same order (the backend's checks of the model
 * files, sequence state files, warm-up samples), without loading the model or
 * starting instances.
 */
export async function checkVersion(
  prepared: PreparedModel,
  version: number,
  options: LoaderOptions,
): Promise<string | undefined> {
  const { name, config, backend, modelDir } = prepared;
  if (backend === undefined) return undefined;
  try {
    new ModelSignature(name, config);
    await backend.checkModel?.({
      modelName: name,
      version,
      modelDir,
      versionDir: path.join(modelDir, String(version)),
      config,
      backendConfig: backendConfigFor(options, backend.name),
      logger: options.logger.child({ model: name, version }),
      server: options.server,
    });
    await loadStateSpecs(config, modelDir);
    if (config.modelWarmup.length > 0) await prepareWarmup(name, modelDir, config);
    return undefined;
  } catch (err) {
    return err instanceof Error ? err.message : String(err);
  }
}

/** Loads one version, trying again up to `retryCount` more times when it fails. */
async function loadVersionWithRetries(
  v: ModelVersion,
  backend: Backend,
  modelDir: string,
  labels: Map<string, string[]>,
  options: LoaderOptions,
): Promise<void> {
  const attempts = 1 + Math.max(0, options.retryCount ?? 0);
  for (let attempt = 1; attempt <= attempts; attempt++) {
    if (attempt > 1) {
      options.logger.info({ model: v.modelName, version: v.version, attempt }, 'retrying the load of a model version');
      v.setState('LOADING', '');
    }
    await loadVersion(v, backend, modelDir, labels, options);
    if (v.state === 'READY') return;
  }
}

/** Where a configuration was read from, for error positions in checks made later. */
export interface ConfigWhere {
  file?: string | undefined;
  positions?: ConfigPositions | undefined;
}

/** A model whose configuration is resolved and whose versions are chosen, not loaded yet. */
export interface PreparedModel {
  name: string;
  modelDir: string;
  config: ModelConfig;
  where: ConfigWhere;
  /** undefined for an ensemble. */
  backend: Backend | undefined;
  /** Versions the policy selects, ascending. */
  selected: number[];
  /** Versions a `specific` policy names that have no folder. */
  missing: number[];
  labels: Map<string, string[]>;
}

/** First phase of a load: configuration, backend and version choice. Throws when the model as a whole cannot load. */
export async function prepareModel(
  name: string,
  modelDir: string,
  options: LoaderOptions,
  configOverride?: string,
): Promise<PreparedModel> {
  const { config, backend, available, where } = await resolveModelConfig(name, modelDir, options, configOverride);
  const { versions: selected, missing } = selectVersionsDetailed(config.versionPolicy, available);
  if (selected.length === 0 && missing.length === 0) {
    throw Errors.config(
      `model '${name}': no version folder to serve (found ${available.length === 0 ? 'none' : available.join(', ')})`,
    );
  }
  const labels = await readLabels(modelDir, config);
  return { name, modelDir, config, where, backend, selected, missing, labels };
}

/** Second phase: builds every selected version (each READY or UNAVAILABLE with its reason). Never throws. */
export async function loadPreparedVersions(prepared: PreparedModel, options: LoaderOptions): Promise<LoadedModel> {
  const { name, config, backend, modelDir, labels } = prepared;
  const versions = new Map<number, ModelVersion>();
  const make = (n: number): ModelVersion => {
    const v = new ModelVersion(name, n, config);
    v.directory = modelDir;
    v.stateListener = options.onVersionState;
    return v;
  };
  for (const n of prepared.selected) versions.set(n, make(n));
  if (backend === undefined) for (const v of versions.values()) createEnsembleVersion(v, options.server);
  else
    await Promise.all([...versions.values()].map((v) => loadVersionWithRetries(v, backend, modelDir, labels, options)));
  for (const n of prepared.missing) {
    const v = make(n);
    v.setState('UNAVAILABLE', missingVersionMessage(name, n));
    versions.set(n, v);
  }
  return { config, versions };
}

/** Loads every version the policy selects. Throws (with the reason) when the model as a whole cannot load. */
export async function loadModel(
  name: string,
  modelDir: string,
  options: LoaderOptions,
  configOverride?: string,
): Promise<LoadedModel> {
  return loadPreparedVersions(await prepareModel(name, modelDir, options, configOverride), options);
}

export function describeLoadError(err: unknown): string {
  if (err instanceof NereidError) return err.message;
  return err instanceof Error ? err.message : String(err);
}
