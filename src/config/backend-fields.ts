/**
 * Server-side auto-complete of `name`, `platform`, `backend` and
 * `default_model_filename`, from what is set and what files the model has.
 * Follows the order of Triton core's AutoCompleteBackendFields so the same
 * repository yields the same completed config.
 */
import { readdir, stat } from 'node:fs/promises';
import { join } from 'node:path';
import type { ModelConfig } from '../gen/model_config_pb.js';
import { ConfigError } from './errors.js';
import { lookupPosition, type ConfigPositions } from './positions.js';

export const Platform = {
  tensorflowGraphdef: 'tensorflow_graphdef',
  tensorflowSavedmodel: 'tensorflow_savedmodel',
  tensorrtPlan: 'tensorrt_plan',
  onnxruntimeOnnx: 'onnxruntime_onnx',
  pytorchLibtorch: 'pytorch_libtorch',
  /** Older spelling Triton still accepts for TorchScript models. */
  libtorch: 'libtorch',
  torchAoti: 'torch_aoti',
  ensemble: 'ensemble',
} as const;

export const Backend = {
  tensorflow: 'tensorflow',
  tensorrt: 'tensorrt',
  onnxruntime: 'onnxruntime',
  openvino: 'openvino',
  pytorch: 'pytorch',
  python: 'python',
} as const;

export const DefaultFilename = {
  tensorflowGraphdef: 'model.graphdef',
  tensorflowSavedmodel: 'model.savedmodel',
  tensorrtPlan: 'model.plan',
  onnx: 'model.onnx',
  openvino: 'model.xml',
  torchscript: 'model.pt',
  torchAoti: 'model.pt2',
  python: 'model.py',
} as const;

export interface BackendFieldsContext {
  file?: string;
  positions?: ConfigPositions;
}

/**
 * Fills name/platform/backend/default_model_filename in place and returns
 * the config. `versionDirNames` are the model's subfolders; the first in
 * byte order is the one probed for model files, as Triton does.
 */
export async function completeBackendFields(
  config: ModelConfig,
  modelName: string,
  modelDir: string,
  versionDirNames: readonly string[],
  where: BackendFieldsContext = {},
): Promise<ModelConfig> {
  if (config.name === '') {
    config.name = modelName;
  } else if (config.name !== modelName) {
    const pos = lookupPosition(where.positions, 'name');
    throw new ConfigError(
      `name "${config.name}" does not match the model's directory "` +
      `${modelName}": the directory name must equal the model name`,
      { file: where.file, line: pos?.line, column: pos?.column, field: 'name', model: modelName },
    );
  }

  const probeDir = [...versionDirNames].sort()[0];
  const probe = new VersionDirProbe(probeDir === undefined ? undefined : join(modelDir, probeDir));
  const nothingSet = () => config.platform === '' && config.defaultModelFilename === '';

  // TensorFlow (deprecated upstream, kept so such repositories complete the same way).
  if (config.platform === '' && (config.backend === '' || config.backend === Backend.tensorflow)) {
    if (config.defaultModelFilename === DefaultFilename.tensorflowSavedmodel) {
      config.platform = Platform.tensorflowSavedmodel;
    } else if (config.defaultModelFilename === DefaultFilename.tensorflowGraphdef) {
      config.platform = Platform.tensorflowGraphdef;
    } else if (config.defaultModelFilename === '' && probe.exists) {
      if ((await probe.kind(DefaultFilename.tensorflowSavedmodel)) === 'dir') {
        config.platform = Platform.tensorflowSavedmodel;
      }
      if ((await probe.kind(DefaultFilename.tensorflowGraphdef)) === 'file') {
        config.platform = Platform.tensorflowGraphdef;
      }
    }
  }
  if (config.platform === Platform.tensorflowSavedmodel || config.platform === Platform.tensorflowGraphdef) {
    if (config.backend === '') config.backend = Backend.tensorflow;
    if (config.defaultModelFilename === '') {
      config.defaultModelFilename =
        config.platform === Platform.tensorflowSavedmodel
          ? DefaultFilename.tensorflowSavedmodel
          : DefaultFilename.tensorflowGraphdef;
    }
    return config;
  }

  // TensorRT
  if (config.backend === '') {
    if (config.platform === Platform.tensorrtPlan || config.defaultModelFilename === DefaultFilename.tensorrtPlan) {
      config.backend = Backend.tensorrt;
    } else if (nothingSet() && (await probe.kind(DefaultFilename.tensorrtPlan)) === 'file') {
      config.backend = Backend.tensorrt;
    }
  }
  if (config.backend === Backend.tensorrt) {
    if (config.platform === '') config.platform = Platform.tensorrtPlan;
    if (config.defaultModelFilename === '') config.defaultModelFilename = DefaultFilename.tensorrtPlan;
    return config;
  }

  // ONNX Runtime: model.onnx may be a file or a folder (large models with external data).
  if (config.backend === '') {
    if (config.platform === Platform.onnxruntimeOnnx || config.defaultModelFilename === DefaultFilename.onnx) {
      config.backend = Backend.onnxruntime;
    } else if (nothingSet() && (await probe.kind(DefaultFilename.onnx)) !== undefined) {
      config.backend = Backend.onnxruntime;
    }
  }
  if (config.backend === Backend.onnxruntime) {
    if (config.platform === '') config.platform = Platform.onnxruntimeOnnx;
    if (config.defaultModelFilename === '') config.defaultModelFilename = DefaultFilename.onnx;
    return config;
  }

  // OpenVINO
  if (config.backend === '') {
    if (config.defaultModelFilename === DefaultFilename.openvino) {
      config.backend = Backend.openvino;
    } else if (nothingSet() && (await probe.kind(DefaultFilename.openvino)) !== undefined) {
      config.backend = Backend.openvino;
    }
  }
  if (config.backend === Backend.openvino) {
    if (config.defaultModelFilename === '') config.defaultModelFilename = DefaultFilename.openvino;
    return config;
  }

  // PyTorch (TorchScript, or AOT Inductor packages)
  if (config.backend === '') {
    if (
      config.platform === Platform.pytorchLibtorch ||
      config.platform === Platform.libtorch ||
      config.defaultModelFilename === DefaultFilename.torchscript
    ) {
      config.backend = Backend.pytorch;
    } else if (config.platform === Platform.torchAoti || config.defaultModelFilename === DefaultFilename.torchAoti) {
      config.backend = Backend.pytorch;
    } else if (nothingSet()) {
      if ((await probe.kind(DefaultFilename.torchscript)) === 'file') {
        config.backend = Backend.pytorch;
        config.platform = Platform.pytorchLibtorch;
      } else if ((await probe.kind(DefaultFilename.torchAoti)) === 'file') {
        config.backend = Backend.pytorch;
        config.platform = Platform.torchAoti;
      }
    }
  }
  if (config.backend === Backend.pytorch) {
    if (config.platform === '') {
      config.platform = Platform.pytorchLibtorch;
      if (config.defaultModelFilename === '') config.defaultModelFilename = DefaultFilename.torchscript;
    } else if (config.platform === Platform.torchAoti && config.defaultModelFilename === '') {
      config.defaultModelFilename = DefaultFilename.torchAoti;
    } else if (config.defaultModelFilename === '') {
      config.defaultModelFilename = DefaultFilename.torchscript;
    }
    return config;
  }

  // Python: backend only, no platform.
  if (config.backend === '') {
    if (config.defaultModelFilename === DefaultFilename.python) {
      config.backend = Backend.python;
    } else if (nothingSet() && (await probe.kind(DefaultFilename.python)) !== undefined) {
      config.backend = Backend.python;
    }
  }
  if (config.backend === Backend.python) {
    if (config.defaultModelFilename === '') config.defaultModelFilename = DefaultFilename.python;
    return config;
  }

  // A custom backend named by the folder: `model.<backend>` (only when nothing at all is set).
  if (config.backend === '' && nothingSet()) {
    const dot = modelName.indexOf('.');
    if (dot < 0) {
      throw new ConfigError(
        `cannot tell which backend serves model '${modelName}': set "backend" (or "platform") in its config.pbtxt, ` +
          `or put model.onnx, model.pt or model.py in a version folder`,
        { file: where.file, model: modelName, field: 'backend' },
      );
    }
    const backend = modelName.slice(dot + 1);
    config.backend = backend;
    config.defaultModelFilename = `model.${backend}`;
  }
  return config;
}

/** Looks into one version folder, listing it once. */
class VersionDirProbe {
  private names: Promise<Set<string>> | undefined;

  constructor(private readonly dir: string | undefined) {}

  get exists(): boolean {
    return this.dir !== undefined;
  }

  /** 'file', 'dir', or undefined when the entry is absent. */
  async kind(name: string): Promise<'file' | 'dir' | undefined> {
    if (this.dir === undefined) return undefined;
    this.names ??= readdir(this.dir).then(
      (entries) => new Set(entries),
      () => new Set<string>(),
    );
    if (!(await this.names).has(name)) return undefined;
    try {
      return (await stat(join(this.dir, name))).isDirectory() ? 'dir' : 'file';
    } catch {
      return undefined;
    }
  }
}
