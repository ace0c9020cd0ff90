/**
 * The onnxruntime backend (platform "onnxruntime_onnx"): runs .onnx models
 * with onnxruntime-node, one session per instance, each on its own thread.
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
import { SessionClient } from './session-client.js';
import { buildSessionOptions, spinWaitMicros } from './session-options.js';
import { validateConfigAgainstModel } from './validate.js';

export interface OnnxRuntimeBackendOptions {
  /** How to tell whether the CUDA execution provider is installed (tests replace it). */
  readonly cudaProbe?: CudaProbe;
}

export function createOnnxRuntimeBackend(options: OnnxRuntimeBackendOptions = {}): Backend {
  const cudaProbe = options.cudaProbe ?? probeCuda;
  return {
    name: 'onnxruntime',
    defaultCpuInstanceCount: 2,
    autoCompleteConfig: (ctx) => autoComplete(ctx),
    loadModel: (ctx) => loadModel(ctx, cudaProbe),
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

async function readModel(modelName: string, modelDir: string, versionDir: string, config: ModelConfig): Promise<OnnxModelInfo & { path: string }> {
  const file = await resolveModelFile(versionDir, config);
  if ('missing' in file) {
    throw Errors.loadFailed(modelName, `model file '${relative(modelDir, file.missing)}' not found`);
  }
  try {
    return { ...(await readOnnxModelInfo(file.path)), path: file.path };
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

async function loadModel(ctx: ModelContext, cudaProbe: CudaProbe): Promise<BackendModel> {
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
  return new OnnxRuntimeModel(info.path, new ModelPlan(ctx.modelName, ctx.config, [...info.inputs, ...info.overridableInitializers], info.outputs), cudaProbe);
}

class OnnxRuntimeModel implements BackendModel {
  private readonly instances = new Set<OnnxRuntimeInstance>();

  constructor(
    private readonly modelPath: string,
    private readonly plan: ModelPlan,
    private readonly cudaProbe: CudaProbe,
  ) {}

  async createInstance(ctx: InstanceContext): Promise<BackendInstance> {
    const kind = ctx.kind === 'GPU' ? 'GPU' : 'CPU';
    if (kind === 'GPU') {
      const cuda = this.cudaProbe();
      if (!cuda.available) throw cudaError(ctx.modelName, `instance '${ctx.instanceName}'`, cuda.reason);
    }
    const options = buildSessionOptions(ctx.modelName, ctx.config, ctx.backendConfig, { kind, deviceId: ctx.deviceId });
    let client: SessionClient;
    try {
      client = await SessionClient.start(this.modelPath, options, spinWaitMicros(ctx.modelName, ctx.config, ctx.backendConfig));
    } catch (err) {
      throw Errors.loadFailed(ctx.modelName, `instance '${ctx.instanceName}': onnxruntime could not create a session: ${(err as Error).message}`);
    }
    const instance = new OnnxRuntimeInstance(client, this.plan);
    this.instances.add(instance);
    ctx.logger.info({ model: ctx.modelName, instance: ctx.instanceName, kind, device: ctx.deviceId }, 'onnxruntime session created');
    return instance;
  }

  async close(): Promise<void> {
    // Instances are closed by their owner; this only catches any left over.
    await Promise.all([...this.instances].map((i) => i.close()));
    this.instances.clear();
  }
}
