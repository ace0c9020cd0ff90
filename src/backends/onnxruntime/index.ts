/**
 * The onnxruntime backend (platform "onnxruntime_onnx"): runs .onnx models
 * with onnxruntime-node, one session per instance, on session threads (small
 * models share a pool of them; see thread/session-pool.ts).
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
import {
  INLINE_MAX_MODEL_BYTES,
  InlinePolicy,
  InlineSession,
  PAGED_INLINE_MAX_MODEL_BYTES,
  inlineMode,
  type InlineMode,
} from './policies/inline.js';
import { OnnxRuntimeInstance } from './instance.js';
import { resolveModelFile } from './model-file.js';
import { ModelPlan } from './plan.js';
import type { SessionClient } from './thread/session-client.js';
import {
  DEFAULT_INTRA_OP_THREADS,
  buildSessionOptions,
  inlineIntraOpThreads,
  machineIntraOpThreads,
  sessionPoolSettings,
  sessionThreadChoice,
  spinWaitMicros,
  wideInlineOptions,
} from './session-options.js';
import { SessionThreadPool } from './thread/session-pool.js';
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
    checkModel: async (ctx) => {
      await checkModel(ctx, cudaProbe);
    },
  };
}

async function autoComplete(ctx: AutoCompleteContext): Promise<ModelConfig> {
  if (!needsAutoComplete(ctx.config)) {
    ctx.logger.info(
      { model: ctx.modelName },
      `skipping model configuration auto-complete for '${ctx.modelName}': inputs and outputs already specified`,
    );
    return ctx.config;
  }
  // Without a version folder there is nothing to read; loading reports the missing version.
  if (ctx.versionDir === undefined) return ctx.config;
  const info = await readModel(ctx.modelName, ctx.modelDir, ctx.versionDir, ctx.config);
  const completed = autoCompleteFromModel(ctx.modelName, ctx.config, info, ctx.backendConfig);
  if (ctx.config.maxBatchSize === 0 && completed.maxBatchSize > 0) {
    ctx.logger.warn(
      { model: ctx.modelName },
      `autofilled max_batch_size to ${completed.maxBatchSize} for model '${ctx.modelName}' ` +
      `since batching is supported but no max_batch_size is specified in model configuration`,
    );
  }
  return completed;
}

async function readModel(
  modelName: string,
  modelDir: string,
  versionDir: string,
  config: ModelConfig,
): Promise<OnnxModelInfo & { path: string; bytes: number }> {
  const file = await resolveModelFile(versionDir, config);
  if ('missing' in file) {
    throw Errors.loadFailed(modelName, `model file '${relative(modelDir, file.missing)}' not found`);
  }
  try {
    return { ...(await readOnnxModelInfo(file.path)), path: file.path, bytes: file.bytes };
  } catch (err) {
    if (err instanceof OnnxParseError) {
      throw Errors.loadFailed(
        modelName,
        err.message.replace(file.path, `model file '${relative(modelDir, file.path)}'`),
      );
    }
    throw Errors.loadFailed(
      modelName,
      `cannot read model file '${relative(modelDir, file.path)}': ${(err as Error).message}`,
    );
  }
}

function cudaError(modelName: string, where: string, reason: string): Error {
  return Errors.loadFailed(
    modelName,
    `${where}: KIND_GPU requested but the CUDA execution provider is not available: ${reason}`,
  );
}

let nextModelId = 1;

/** What loading checks before it creates anything: GPUs, the model file against the configuration, the parameters. */
async function checkModel(ctx: ModelContext, cudaProbe: CudaProbe) {
  for (const g of ctx.config.instanceGroup) {
    if (g.kind === ModelInstanceGroup_Kind.GPU) {
      const cuda = cudaProbe();
      if (!cuda.available) throw cudaError(ctx.modelName, `instance group '${g.name || ctx.modelName}'`, cuda.reason);
    }
  }
  const accelerators = ctx.config.optimization?.executionAccelerators;
  for (const a of [
    ...(accelerators?.gpuExecutionAccelerator ?? []),
    ...(accelerators?.cpuExecutionAccelerator ?? []),
  ]) {
    ctx.logger.warn(
      { model: ctx.modelName },
      `execution accelerator '${a.name}' is not available in the onnxruntime backend and is ignored`,
    );
  }
  const info = await readModel(ctx.modelName, ctx.modelDir, ctx.versionDir, ctx.config);
  validateConfigAgainstModel(ctx.modelName, ctx.config, info);
  const choice = sessionThreadChoice(ctx.modelName, ctx.config);
  const mayShare = choice === 'shared' || (choice === 'auto' && info.bytes <= SHARED_THREAD_MAX_MODEL_BYTES);
  // Sessions on threads of their own share out the machine's CPU; pooled ones keep one intra-op thread.
  const defaultIntra = mayShare ? DEFAULT_INTRA_OP_THREADS : machineIntraOpThreads(ctx.config);
  // Bad parameter values fail the load here rather than at the first instance.
  const cpuOptions = buildSessionOptions(
    ctx.modelName,
    ctx.config,
    ctx.backendConfig,
    { kind: 'CPU', deviceId: 0 },
    defaultIntra,
  );
  spinWaitMicros(ctx.modelName, ctx.config, ctx.backendConfig);
  const mode = inlineMode(ctx.modelName, ctx.config, ctx.backendConfig);
  return { info, mayShare, defaultIntra, cpuOptions, mode };
}

async function loadModel(ctx: ModelContext, cudaProbe: CudaProbe, pool: SessionThreadPool): Promise<BackendModel> {
  const { info, mayShare, defaultIntra, cpuOptions, mode } = await checkModel(ctx, cudaProbe);
  const inline = inlinePolicy(ctx, mode, info, cpuOptions);
  return new OnnxRuntimeModel(
    info.path,
    new ModelPlan(ctx.modelName, ctx.config, [...info.inputs, ...info.overridableInitializers], info.outputs),
    cudaProbe,
    pool,
    mayShare,
    inline,
    defaultIntra,
  );
}

/**
 * The model's inline execution (see policies/inline.ts), or undefined when its runs
 * always go to the session threads. Mode 'on' creates the main-thread
 * session now, and fails the load where it cannot apply.
 */
function inlinePolicy(
  ctx: ModelContext,
  mode: InlineMode,
  info: OnnxModelInfo & { path: string; bytes: number },
  options: ReturnType<typeof buildSessionOptions>,
): InlinePolicy | undefined {
  if (mode === 'off') return undefined;
  const refuse = (why: string): undefined => {
    if (mode === 'on')
      throw Errors.config(`model '${ctx.modelName}': parameter 'inline_execution' is 'on', but ${why}`);
    return undefined;
  };
  for (const g of ctx.config.instanceGroup) {
    if (g.kind === ModelInstanceGroup_Kind.GPU)
      return refuse(`instance group '${g.name || ctx.modelName}' is KIND_GPU (inline runs use the CPU)`);
  }
  // Node 24's Float16Array makes onnxruntime-node read float16 data as empty (see thread/session-worker.ts);
  // the session threads hide it, the main thread cannot.
  if ('Float16Array' in globalThis) {
    for (const t of [...info.inputs, ...info.overridableInitializers, ...info.outputs]) {
      if (t.datatype === 'FP16')
        return refuse(`'${t.name}' is FP16, which onnxruntime-node cannot take on the main thread under this Node.js`);
    }
  }
  const wideThreads = inlineIntraOpThreads(ctx.modelName, ctx.config, ctx.backendConfig);
  // memoryGrew is set under a memory budget only.
  const maxBytes = ctx.memoryGrew === undefined ? INLINE_MAX_MODEL_BYTES : PAGED_INLINE_MAX_MODEL_BYTES;
  if (mode === 'auto' && info.bytes > maxBytes) return undefined;
  const log = ctx.logger;
  // The wide session splits long runs while requests come one at a time (auto only; see policies/inline.ts).
  const spinMicros = spinWaitMicros(ctx.modelName, ctx.config, ctx.backendConfig);
  const wide =
    mode === 'auto' && wideThreads > 1 && options.intraOpNumThreads === 1
      ? wideInlineOptions(options, ctx.config, wideThreads, spinMicros)
      : undefined;
  // A main-thread session is made on first use, after the load was measured: its memory is reported as it is made.
  const measured = (make: () => InlineSession) => (): InlineSession => {
    if (ctx.memoryGrew === undefined) return make();
    const before = process.memoryUsage.rss();
    const session = make();
    ctx.memoryGrew(Math.max(0, process.memoryUsage.rss() - before));
    return session;
  };
  const policy = new InlinePolicy(
    mode,
    measured(() => new InlineSession(info.path, options)),
    // An internal decision, logged at verbose: nothing for an operator to act on.
    (session, predictedNs, boundNs, isWide) =>
      log.debug(
        { model: ctx.modelName },
        isWide
          ? `model '${ctx.modelName}': while requests come one at a time, runs of about ` +
            `${Math.round(predictedNs / 1000)} µs on one thread now run on the event loop with ${wideThreads} ` +
            `intra-op threads (main-thread session created in ${session.createMs.toFixed(1)} ms)`
          : `model '${ctx.modelName}': runs of about ${Math.round(predictedNs / 1000)} µs now run on the event loop ` +
            `while they stay within ${Math.round(boundNs / 1000)} µs ` +
            `(main-thread session created in ${session.createMs.toFixed(1)} ms)`,
      ),
    (err, isWide) =>
      log.warn(
        { model: ctx.modelName },
        isWide
          ? `model '${ctx.modelName}': inline runs keep one intra-op thread (the ` +
            `${wideThreads}-thread main-thread session could not be created): ${err.message}`
          : `model '${ctx.modelName}': runs stay on the session threads: ${err.message}`,
      ),
    undefined,
    wide === undefined
      ? undefined
      : { create: measured(() => new InlineSession(info.path, wide)), threads: wideThreads, spinMicros },
  );
  if (mode === 'on') {
    try {
      policy.createNow();
    } catch (err) {
      throw Errors.loadFailed(
        ctx.modelName,
        `onnxruntime could not create the main-thread session (inline_execution 'on'): ${(err as Error).message}`,
      );
    }
  }
  return policy;
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
    /** Where each run of a CPU instance goes (see policies/inline.ts); undefined: always its thread. */
    private readonly inline: InlinePolicy | undefined,
    /** Intra-op threads unless configured. */
    private readonly defaultIntra: number,
  ) {}

  async createInstance(ctx: InstanceContext): Promise<BackendInstance> {
    const kind = ctx.kind === 'GPU' ? 'GPU' : 'CPU';
    if (kind === 'GPU') {
      const cuda = this.cudaProbe();
      if (!cuda.available) throw cudaError(ctx.modelName, `instance '${ctx.instanceName}'`, cuda.reason);
    }
    const options = buildSessionOptions(
      ctx.modelName,
      ctx.config,
      ctx.backendConfig,
      { kind, deviceId: ctx.deviceId },
      this.defaultIntra,
    );
    // A session with intra-op threads of its own, or in parallel mode, keeps its thread busy for longer: it gets a
    // thread of its own.
    const shared =
      this.mayShare &&
      kind === 'CPU' &&
      options.intraOpNumThreads === 1 &&
      (options.interOpNumThreads ?? 1) <= 1 &&
      options.executionMode !== 'parallel';
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
      throw Errors.loadFailed(
        ctx.modelName,
        `instance '${ctx.instanceName}': onnxruntime could not create a session: ${(err as Error).message}`,
      );
    }
    // Inline runs use the CPU; a GPU instance's runs always go to its thread.
    const instance = new OnnxRuntimeInstance(client, this.plan, kind === 'CPU' ? this.inline : undefined);
    this.instances.add(instance);
    ctx.logger.info(
      {
        model: ctx.modelName,
        instance: ctx.instanceName,
        kind,
        device: ctx.deviceId,
        thread: client.currentThread?.number,
        sharedThread: shared,
      },
      'onnxruntime session created',
    );
    return instance;
  }

  async close(): Promise<void> {
    // Instances are closed by their owner; this only catches any left over.
    await Promise.all([...this.instances].map((i) => i.close()));
    this.instances.clear();
    this.inline?.close();
  }
}
