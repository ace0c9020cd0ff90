/** Building blocks for onnxruntime backend tests: temp model folders, contexts, requests. */
import { after, before } from 'node:test';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { create, type MessageInitShape } from '@bufbuild/protobuf';
import type {
  AutoCompleteContext,
  BackendInstance,
  BackendModel,
  BackendRequest,
  ExecutionTimer,
  InstanceContext,
  ModelContext,
} from '../../../src/backends/backend.js';
import { ModelConfigSchema, type ModelConfig } from '../../../src/gen/model_config_pb.js';
import { silentLogger } from '../../../src/logger.js';
import type { OnnxModelBuilder } from '../../helpers/onnx-builder.js';
import type { Tensor } from '../../../src/tensor/tensor.js';

export const stubServer = {
  infer: async (): Promise<never> => {
    throw new Error('BLS is not available in these tests');
  },
};

export class TempDir {
  private constructor(readonly path: string) {}
  static async create(): Promise<TempDir> {
    return new TempDir(await mkdtemp(join(tmpdir(), 'nereid-ort-')));
  }
  remove(): Promise<void> {
    return rm(this.path, { recursive: true, force: true });
  }
}

/**
 * A test file's scratch folder and the models it loads: the folder is made
 * before the file's tests, and every model kept is closed (instance first)
 * and the folder removed after them.
 */
export function suiteModels(): { readonly dir: string; keep(model: BackendModel, instance: BackendInstance): void } {
  let tmp: TempDir | undefined;
  const open: { model: BackendModel; instance: BackendInstance }[] = [];
  before(async () => {
    tmp = await TempDir.create();
  });
  after(async () => {
    for (const o of open) {
      await o.instance.close();
      await o.model.close();
    }
    await tmp?.remove();
  });
  return {
    get dir(): string {
      if (tmp === undefined) throw new Error('suiteModels().dir is read before the tests start');
      return tmp.path;
    },
    keep(model, instance) {
      open.push({ model, instance });
    },
  };
}

export function config(init: MessageInitShape<typeof ModelConfigSchema>): ModelConfig {
  return create(ModelConfigSchema, init);
}

/** Writes `<root>/<name>/<version>/<filename>` and returns the model folder. */
export async function writeModel(
  root: string,
  name: string,
  builder: OnnxModelBuilder,
  version = 1,
  filename = 'model.onnx',
): Promise<string> {
  const modelDir = join(root, name);
  await builder.save(join(modelDir, String(version), filename));
  return modelDir;
}

export function modelContext(
  modelDir: string,
  cfg: ModelConfig,
  options: { version?: number; backendConfig?: Record<string, string> } = {},
): ModelContext {
  const version = options.version ?? 1;
  return {
    modelName: cfg.name || 'model',
    version,
    modelDir,
    versionDir: join(modelDir, String(version)),
    config: cfg,
    backendConfig: options.backendConfig ?? {},
    logger: silentLogger,
    server: stubServer,
  };
}

export function instanceContext(
  ctx: ModelContext,
  kind: 'CPU' | 'GPU' = 'CPU',
  index = 0,
  deviceId = 0,
): InstanceContext {
  return { ...ctx, instanceName: `${ctx.modelName}_0_${index}`, kind, deviceId };
}

export function autoCompleteContext(
  modelDir: string,
  cfg: ModelConfig,
  backendConfig: Record<string, string> = {},
  version: number | undefined = 1,
): AutoCompleteContext {
  return {
    modelName: cfg.name || 'model',
    modelDir,
    versionDir: version === undefined ? undefined : join(modelDir, String(version)),
    config: cfg,
    backendConfig,
    logger: silentLogger,
  };
}

export class RecordingTimer implements ExecutionTimer {
  inputs = 0;
  infers = 0;
  waits: number[] = [];
  inputAt: bigint[] = [];
  inferAt: bigint[] = [];
  inputDone(atNs?: bigint): void {
    this.inputs++;
    this.inputAt.push(atNs ?? process.hrtime.bigint());
  }
  inferDone(atNs?: bigint): void {
    this.infers++;
    this.inferAt.push(atNs ?? process.hrtime.bigint());
  }
  waited(ns: number): void {
    this.waits.push(ns);
  }
}

export function request(id: string, inputs: Tensor[], requestedOutputs: string[], batchSize = 1): BackendRequest {
  return { id, inputs, requestedOutputs, parameters: {}, batchSize, correlationId: 0n, flags: 0 };
}
