/**
 * Triton's onnxruntime auto-complete: fills inputs, outputs and
 * max_batch_size from the .onnx file when config.pbtxt leaves them out.
 *
 * - Nothing happens when the configuration already lists inputs and outputs.
 * - The model can batch iff every input and output has a dynamic first dim.
 *   Then max_batch_size 0 becomes `default-max-batch-size` (backend config,
 *   default 4), and with max_batch_size > 1 and no scheduler, dynamic
 *   batching is switched on.
 * - Filled dims leave out the batch dim; a tensor left with no dims gets
 *   dims [1] (and `reshape { shape: [] }` when batching).
 * - A non-zero max_batch_size on a model that cannot batch is an error.
 */
import { clone, create } from '@bufbuild/protobuf';
import {
  ModelConfigSchema,
  ModelDynamicBatchingSchema,
  ModelInputSchema,
  ModelOutputSchema,
  ModelTensorReshapeSchema,
  type ModelConfig,
  type ModelTensorReshape,
} from '../../gen/model_config_pb.js';
import { Errors } from '../../errors.js';
import type { OnnxModelInfo, OnnxTensorInfo } from '../../onnx/model-info.js';
import { configEnumOf } from '../../tensor/datatype.js';

export const DEFAULT_MAX_BATCH_SIZE = 4;

/** `default-max-batch-size` from the backend config (negative values count as 0). */
export function defaultMaxBatchSize(backendConfig: Readonly<Record<string, string>>): number {
  const raw = backendConfig['default-max-batch-size'];
  if (raw === undefined) return DEFAULT_MAX_BATCH_SIZE;
  const n = Number(raw);
  if (!Number.isInteger(n))
    throw Errors.config(`backend config 'default-max-batch-size' must be an integer, got '${raw}'`);
  return Math.max(n, 0);
}

/** Whether auto-complete has anything to do for this configuration. */
export function needsAutoComplete(config: ModelConfig): boolean {
  const inputCount = config.input.length + config.batchInput.length;
  return inputCount === 0 || config.output.length === 0;
}

/** The configuration completed from the model's signature (a new object; `config` is not changed). */
export function autoCompleteFromModel(
  modelName: string,
  config: ModelConfig,
  info: OnnxModelInfo,
  backendConfig: Readonly<Record<string, string>>,
): ModelConfig {
  if (!needsAutoComplete(config)) return config;
  const out = clone(ModelConfigSchema, config);
  const inputCount = config.input.length + config.batchInput.length;

  const canBatch = [...info.inputs, ...info.outputs].every((t) => t.dims.length > 0 && t.dims[0] === -1);
  if (canBatch) {
    if (out.maxBatchSize === 0) out.maxBatchSize = defaultMaxBatchSize(backendConfig);
    if (out.maxBatchSize > 1 && out.schedulingChoice.case === undefined) {
      out.schedulingChoice = { case: 'dynamicBatching', value: create(ModelDynamicBatchingSchema, {}) };
    }
  } else if (out.maxBatchSize !== 0) {
    throw Errors.config(
      `autofill failed for model '${modelName}': model does not ` +
      `support batching while non-zero max_batch_size is specified`,
    );
  }

  const batching = out.maxBatchSize > 0;
  if (inputCount === 0) {
    out.input = info.inputs.map((t) => {
      const { dims, reshape } = configDims(t, batching);
      return create(ModelInputSchema, { name: t.name, dataType: dataTypeOf(modelName, 'input', t), dims, reshape });
    });
  }
  if (config.output.length === 0) {
    out.output = info.outputs.map((t) => {
      const { dims, reshape } = configDims(t, batching);
      return create(ModelOutputSchema, { name: t.name, dataType: dataTypeOf(modelName, 'output', t), dims, reshape });
    });
  }
  return out;
}

function dataTypeOf(modelName: string, io: string, t: OnnxTensorInfo): number {
  if (t.datatype === undefined) {
    throw Errors.config(
      `autofill failed for model '${modelName}': ${io} '${t.name}' ` +
      `has ONNX type ${t.onnxType}, which has no Triton data type`,
    );
  }
  return configEnumOf(t.datatype);
}

function configDims(t: OnnxTensorInfo, batching: boolean): { dims: bigint[]; reshape: ModelTensorReshape | undefined } {
  const dims = (batching ? t.dims.slice(1) : t.dims).map((d) => BigInt(d));
  if (dims.length > 0) return { dims, reshape: undefined };
  // A scalar (per batch item): config dims cannot be empty, so [1], and with
  // batching a reshape tells the backend the model wants no dims at all.
  return { dims: [1n], reshape: batching ? create(ModelTensorReshapeSchema, { shape: [] }) : undefined };
}
