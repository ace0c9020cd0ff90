/**
 * Load-time checks of a configuration against the ONNX model's signature,
 * following Triton's onnxruntime backend: input count, names, data types and
 * dims (with the batch dim when max_batch_size > 0). Inputs may leave model
 * dims open (-1 in the model accepts any configured size); outputs must match
 * exactly. Every message names the model, the tensor and what differs.
 */
import type { ModelConfig, ModelInput, ModelOutput } from '../../gen/model_config_pb.js';
import { Errors, type NereidError } from '../../errors.js';
import type { OnnxModelInfo, OnnxTensorInfo } from '../../onnx/model-info.js';
import { configNameOfEnum, datatypeFromConfigEnum, datatypeInfo, shapeToString } from '../../tensor/datatype.js';

/** Datatypes onnxruntime-node cannot hand to JavaScript. */
const UNSUPPORTED_IN_ORT_NODE = new Set(['BF16']);

/** Throws a load error when the configuration does not fit the model. */
export function validateConfigAgainstModel(modelName: string, config: ModelConfig, info: OnnxModelInfo): void {
  const fail = (why: string): NereidError => Errors.loadFailed(modelName, why);

  let expectedInputs = config.input.length + config.batchInput.length;
  if (config.schedulingChoice.case === 'sequenceBatching') {
    const seq = config.schedulingChoice.value;
    expectedInputs += seq.controlInput.length + seq.state.length;
  }
  if (info.inputs.length !== expectedInputs) {
    throw fail(
      `configuration expects ${expectedInputs} inputs, model provides ${info.inputs.length} (${namesOf(info.inputs)})`,
    );
  }

  const modelInputs = new Map<string, OnnxTensorInfo>();
  for (const t of info.inputs) modelInputs.set(t.name, t);
  for (const t of info.overridableInitializers) modelInputs.set(t.name, t);
  const modelOutputs = new Map<string, OnnxTensorInfo>(info.outputs.map((t) => [t.name, t]));
  const batching = config.maxBatchSize > 0;

  for (const io of config.input) {
    const t = modelInputs.get(io.name);
    if (!t)
      throw fail(
        `configuration expects input '${io.name}', but the model ` +
        `has no such input (model inputs: ${namesOf(info.inputs)})`,
      );
    if (io.optional && batching) {
      throw fail(`optional input '${io.name}' is not supported for models that support batching`);
    }
    checkDatatype(fail, 'input', io, t);
    checkDims(fail, modelName, 'input', io, t, config.maxBatchSize, false);
  }
  for (const io of config.output) {
    const t = modelOutputs.get(io.name);
    if (!t)
      throw fail(
        `configuration expects output '${io.name}', but the model has ` +
        `no such output (model outputs: ${namesOf(info.outputs)})`,
      );
    checkDatatype(fail, 'output', io, t);
    checkDims(fail, modelName, 'output', io, t, config.maxBatchSize, true);
  }
}

function namesOf(ts: readonly OnnxTensorInfo[]): string {
  return ts.length === 0 ? 'none' : ts.map((t) => `'${t.name}'`).join(', ');
}

function checkDatatype(
  fail: (why: string) => NereidError,
  io: string,
  cfg: ModelInput | ModelOutput,
  t: OnnxTensorInfo,
): void {
  const configType = configNameOfEnum(cfg.dataType);
  const dt = datatypeFromConfigEnum(cfg.dataType);
  if (dt === undefined) throw fail(`unsupported datatype ${configType} for ${io} '${cfg.name}'`);
  if (t.datatype === undefined) {
    throw fail(
      `configuration expects datatype ${configType} for ${io} '${cfg.name}', model provides ONNX type ${t.onnxType}`,
    );
  }
  if (t.datatype !== dt) {
    throw fail(
      `configuration expects datatype ${configType} for ${io} '` +
      `${cfg.name}', model provides ${datatypeInfo(t.datatype).configName}`,
    );
  }
  if (UNSUPPORTED_IN_ORT_NODE.has(dt)) {
    throw fail(
      `datatype ${configType} of ${io} '${cfg.name}' is not supported by ` +
      `the onnxruntime backend (onnxruntime-node has no ${dt} tensors)`,
    );
  }
}

function checkDims(
  fail: (why: string) => NereidError,
  modelName: string,
  io: string,
  cfg: ModelInput | ModelOutput,
  t: OnnxTensorInfo,
  maxBatchSize: number,
  exact: boolean,
): void {
  if (io === 'input' && (cfg as ModelInput).allowRaggedBatch) {
    if (t.dims.length !== 1 || t.dims[0] !== -1) {
      throw fail(
        `configuration expects model provides input with shape [-1] for ` +
        `ragged input '${cfg.name}', model provides ${shapeToString(t.dims)}`,
      );
    }
    return;
  }
  const dims = (cfg.reshape ? cfg.reshape.shape : cfg.dims).map(Number);
  const field = cfg.reshape ? 'reshape.shape' : 'dims';
  if (t.dims.length === 0) {
    // A scalar in the model: every configured dim must be 1 (dims [1] with reshape []).
    if (dims.some((d) => d !== 1)) {
      throw fail(
        `scalar tensor '${cfg.name}', should only provide 1 in the model configuration when the ` +
        `model doesn't support batching. Model configuration provided: ${shapeToString(dims)}`,
      );
    }
    return;
  }
  let full = dims;
  if (maxBatchSize > 0) {
    if (t.dims[0] !== -1) {
      throw fail(
        `model '${modelName}', tensor '${cfg.name}': for the model to support batching the shape should have at ` +
        `least 1 dimension and the first dimension must be -1; but ` +
        `shape expected by the model is ${shapeToString(t.dims)}`,
      );
    }
    full = [-1, ...dims];
  }
  let ok = t.dims.length === full.length;
  for (let i = 0; ok && i < full.length; i++) {
    const m = t.dims[i]!;
    if (exact || m !== -1) ok = m === full[i];
  }
  if (!ok) {
    const what =
      maxBatchSize > 0
        ? `${full.length} dimensions (an initial batch dimension because max_batch_size > 0 followed ` +
          `by the explicit tensor shape from ${field}, making complete shape ${shapeToString(full)})`
        : `${dims.length} dimensions (shape ${shapeToString(dims)} from ${field})`;
    throw fail(
      `model '${modelName}', ${io} '${cfg.name}': the model expects ${t.dims.length} dimensions ` +
      `(shape ${shapeToString(t.dims)}) but the model configuration specifies ${what}`,
    );
  }
}
