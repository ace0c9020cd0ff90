/**
 * The onnxruntime backend (platform "onnxruntime_onnx"): runs .onnx models
 * with onnxruntime-node, one session per instance, on session threads (small
 * models share a pool of them; see session-pool.ts).
 */
import { relative } from 'node:path';
import type {
  AutoCompleteContext,
  Backend,
  BackendInstance,
  BackendModel,
  InstanceContext,
  ModelContext,
} from '../../backends/backend.js';
import type { ModelConfig } from '../../gen/model_config_pb.js';
import { ModelInstanceGroup_Kind } from '../../gen/model_config_pb.js';
import { Errors } from '../../errors.js';
import { OnnxParseError, readOnnxModelInfo, type OnnxModelInfo } from '../../onnx/model-info.js';
import { autoCompleteFromModel, needsAutoComplete } from './auto-complete.js';
import { probeCuda, type CudaProbe } from './cuda.js';
import { OnnxRuntimeInstance } from './instance.js';
import { resolveModelFile } from './model-file.js';
import { ModelPlan } from './plan.js';
import type { SessionClient } from './session-client.js';
import { buildSessionOptions, sessionPoolSettings, sessionThreadChoice, spinWaitMicros } from './session-options.js';
import { SessionThreadPool } from './session-pool.js';
import { validateConfigAgainstModel } from './validate.js';

export interface OnnxRuntimeBackendOptions {
  /** How to tell whether the CUDA execution provider is installed (tests replace it). */
  readonly cudaProbe?: CudaProbe;
}

/**
 * Models whose file is at most this big may share a pool thread: creating
 * their session, which holds up the other sessions on the thread, takes a
 * few milliseconds.
 */
export const SHARED_THREAD_MAX_MODEL_BYTES = 16 * 1024 * 1024;

export function createOnnxRuntimeBackend(options: OnnxRuntimeBackendOptions = {}): Backend {
  const cudaProbe = options.cudaProbe ?? probeCuda;
  // One pool per set of settings (a process normally has one: they come from the server's backend config).
  const pools = new Map<string, SessionThreadPool>();
  const poolFor = (ctx: ModelContext): SessionThreadPool => {
    const settings = sessionPoolSettings(ctx.backendConfig);
    const key = `${settings.threads}/${settings.stallMs}`;
    let pool = pools.get(key);
    if (pool === undefined) {
      pool = new SessionThreadPool(settings);
      pools.set(key, pool);
    }
    return pool;
  };
  return {
    name: 'onnxruntime',
    defaultCpuInstanceCount: 2,
    autoCompleteConfig: (ctx) => autoComplete(ctx),
    loadModel: (ctx) => loadModel(ctx, cudaProbe, poolFor(ctx)),
  };
}

async function autoComplete(ctx: AutoCompleteContext): Promise<ModelConfig> {
  if (!needsAutoComplete(ctx.config)) {
    ctx.logger.info({ model: ctx.modelName }, `skipping model configuration auto-complete for '${ctx.modelName}': inputs and outputs already specified`);
    return ctx.config;
  }
  // Without a version folder there is nothing to read; loading reports the missing version.
  if (ctx.versionDir === undefined) return ctx.config;
  const info = await readModel(ctx.modelName, ctx.modelDir, ctx.versionDir, ctx.config);
  const completed = autoCompleteFromModel(ctx.modelName, ctx.config, info, ctx.backendConfig);
  if (ctx.config.maxBatchSize === 0 && completed.maxBatchSize > 0) {
    ctx.logger.warn(
      { model: ctx.modelName },
      `autofilled max_batch_size to ${completed.maxBatchSize} for model '${ctx.modelName}' since batching is supported but no max_batch_size is specified in model configuration`,
    );
  }
  return completed;
}

async function readModel(modelName: string, modelDir: string, versionDir: string, config: ModelConfig): Promise<OnnxModelInfo & { path: string; bytes: number }> {
  const file = await resolveModelFile(versionDir, config);
  if ('missing' in file) {
    throw Errors.loadFailed(modelName, `model file '${relative(modelDir, file.missing)}' not found`);
  }
  try {
    return { ...(await readOnnxModelInfo(file.path)), path: file.path, bytes: file.bytes };
  } catch (err) {
    if (err instanceof OnnxParseError) {
      throw Errors.loadFailed(modelName, err.message.replace(file.path, `model file '${relative(modelDir, file.path)}'`));
    }
    throw Errors.loadFailed(modelName, `cannot read model file '${relative(modelDir, file.path)}': ${(err as Error).message}`);
  }
}

function cudaError(modelName: string, where: string, reason: string): Error {
  return Errors.loadFailed(modelName, `${where}: KIND_GPU requested but the CUDA execution provider is not available: ${reason}`);
}

let nextModelId = 1;

async function loadModel(ctx: ModelContext, cudaProbe: CudaProbe, pool: SessionThreadPool): Promise<BackendModel> {
  for (const g of ctx.config.instanceGroup) {
    if (g.kind === ModelInstanceGroup_Kind.GPU) {
      const cuda = cudaProbe();
      if (!cuda.available) throw cudaError(ctx.modelName, `instance group '${g.name || ctx.modelName}'`, cuda.reason);
    }
  }
  const accelerators = ctx.config.optimization?.executionAccelerators;
  for (const a of [...(accelerators?.gpuExecutionAccelerator ?? []), ...(accelerators?.cpuExecutionAccelerator ?? [])]) {
    ctx.logger.warn({ model: ctx.modelName }, `execution accelerator '${a.name}' is not available in the onnxruntime backend and is ignored`);
  }
  const info = await readModel(ctx.modelName, ctx.modelDir, ctx.versionDir, ctx.config);
  validateConfigAgainstModel(ctx.modelName, ctx.config, info);
  // Bad parameter values fail the load here rather than at the first instance.
  buildSessionOptions(ctx.modelName, ctx.config, ctx.backendConfig, { kind: 'CPU', deviceId: 0 });
  spinWaitMicros(ctx.modelName, ctx.config, ctx.backendConfig);
  const choice = sessionThreadChoice(ctx.modelName, ctx.config);
  return new OnnxRuntimeModel(
    info.path,
    new ModelPlan(ctx.modelName, ctx.config, [...info.inputs, ...info.overridableInitializers], info.outputs),
    cudaProbe,
    pool,
    choice === 'shared' || (choice === 'auto' && info.bytes <= SHARED_THREAD_MAX_MODEL_BYTES),
  );
}

class OnnxRuntimeModel implements BackendModel {
  private readonly instances = new Set<OnnxRuntimeInstance>();
  /** Keeps this version's instances on different threads. */
  private readonly affinityKey = `onnx-model-${nextModelId++}`;

  constructor(
    private readonly modelPath: string,
    private readonly plan: ModelPlan,
    private readonly cudaProbe: CudaProbe,
    private readonly pool: SessionThreadPool,
    /** Small enough (or configured) to share a pool thread. */
    private readonly mayShare: boolean,
  ) {}

  async createInstance(ctx: InstanceContext): Promise<BackendInstance> {
    const kind = ctx.kind === 'GPU' ? 'GPU' : 'CPU';
    if (kind === 'GPU') {
      const cuda = this.cudaProbe();
      if (!cuda.available) throw cudaError(ctx.modelName, `instance '${ctx.instanceName}'`, cuda.reason);
    }
    const options = buildSessionOptions(ctx.modelName, ctx.config, ctx.backendConfig, { kind, deviceId: ctx.deviceId });
    // A session with intra-op threads of its own, or in parallel mode, keeps its thread busy for longer: it gets a thread of its own.
    const shared = this.mayShare && kind === 'CPU' && options.intraOpNumThreads === 1 && (options.interOpNumThreads ?? 1) <= 1 && options.executionMode !== 'parallel';
    let client: SessionClient;
    try {
      client = await this.pool.open({
        modelPath: this.modelPath,
        options,
        spinMicros: spinWaitMicros(ctx.modelName, ctx.config, ctx.backendConfig),
        label: `model '${ctx.modelName}' instance '${ctx.instanceName}'`,
        affinityKey: this.affinityKey,
        shared,
        logger: ctx.logger,
      });
    } catch (err) {
      throw Errors.loadFailed(ctx.modelName, `instance '${ctx.instanceName}': onnxruntime could not create a session: ${(err as Error).message}`);
    }
    const instance = new OnnxRuntimeInstance(client, this.plan);
    this.instances.add(instance);
    ctx.logger.info({ model: ctx.modelName, instance: ctx.instanceName, kind, device: ctx.deviceId, thread: client.currentThread?.number, sharedThread: shared }, 'onnxruntime session created');
    return instance;
  }

  async close(): Promise<void> {
    // Instances are closed by their owner; this only catches any left over.
    await Promise.all([...this.instances].map((i) => i.close()));
    this.instances.clear();
  }
}
