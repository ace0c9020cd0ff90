/** Rules for inputs, outputs and ragged-batch inputs/outputs (Triton ValidateModelIOConfig). */
import {
  BatchInput_KindSchema,
  BatchOutput_Kind,
  BatchOutput_KindSchema,
  DataType,
  DataTypeSchema,
  ModelInput_Format,
  type ModelInput,
  type ModelOutput,
} from '../gen/model_config_pb.js';
import { Platform } from './backend-fields.js';
import { ConfigChecker, enumName, formatDims, isKnownEnum } from './validate-context.js';

const WILDCARD = -1n;

export function validateIO(c: ConfigChecker): void {
  const { config } = c;
  checkUniqueNames(c, 'input', config.input);
  checkUniqueNames(c, 'output', config.output);
  config.input.forEach((io, i) => {
    const path = `input[${i}]`;
    checkShape(c, 'input', path, io);
    const subject = `input "${io.name}"`;
    if ((io.format === ModelInput_Format.NHWC || io.format === ModelInput_Format.NCHW) && io.dims.length !== 3) {
      c.fail(
        `${path}.format`,
        `model input NHWC/NCHW require 3 dims for ${c.config.name} (${subject} has dims ${formatDims(io.dims)})`,
      );
    }
    checkTensorRTOnly(c, path, subject, io);
  });
  config.output.forEach((io, i) => {
    const path = `output[${i}]`;
    checkShape(c, 'output', path, io);
    checkTensorRTOnly(c, path, `output "${io.name}"`, io);
  });
  checkBatchIO(c);
}

function checkUniqueNames(c: ConfigChecker, kind: string, ios: readonly { name: string }[]): void {
  const first = new Map<string, number>();
  ios.forEach((io, i) => {
    if (io.name === '') return;
    const earlier = first.get(io.name);
    if (earlier !== undefined) {
      c.fail(`${kind}[${i}].name`, `${kind} "${io.name}" is declared twice (${kind} entries ${earlier} and ${i})`);
    }
    first.set(io.name, i);
  });
}

/**
 * Each message leads with Triton's own sentence for the same check (so a grep
 * written for Triton's log finds ours), then says what exactly is wrong.
 */
function checkShape(c: ConfigChecker, kind: string, path: string, io: ModelInput | ModelOutput): void {
  const model = c.config.name;
  if (io.name === '')
    c.fail(path, `model ${kind} must specify 'name' for ${model} (${kind} entry ${path.slice(kind.length)} has none)`);
  const triton = `model ${kind} '${io.name}'`;
  if (io.dataType === DataType.TYPE_INVALID)
    c.fail(`${path}.data_type`, `${triton} must specify 'data_type' for ${model}`);
  if (!isKnownEnum(DataTypeSchema, io.dataType)) {
    c.fail(`${path}.data_type`, `${triton} data_type ${io.dataType} is not a known data type for ${model}`);
  }
  if (io.dims.length === 0) {
    c.fail(path, `${triton} must specify 'dims' for ${model} (use [ 1 ] for a single value)`);
  }
  if (io.reshape !== undefined && io.reshape.shape.length === 0 && c.config.maxBatchSize === 0) {
    c.fail(
      `${path}.reshape`,
      `${triton} cannot have empty reshape for non-batching model as scalar tensors ` +
      `are not supported for ${model} (an empty reshape needs max_batch_size > 0)`,
    );
  }
  const dimRule = 'must be integer >= 1, or -1 to indicate a variable-size dimension';
  io.dims.forEach((d, j) => {
    if (d < 1n && d !== WILDCARD)
      c.fail(`${path}.dims[${j}]`, `${triton} dimension ${dimRule} for ${model} (got ${d})`);
  });
  if (io.reshape === undefined) return;
  const shape = io.reshape.shape;
  shape.forEach((d, j) => {
    if (d < 1n && d !== WILDCARD) {
      c.fail(`${path}.reshape.shape[${j}]`, `${triton} reshape dimensions ${dimRule} for ${model} (got ${d})`);
    }
  });
  const dimsCount = elementCount(io.dims);
  const reshapeCount = elementCount(shape);
  // An empty reshape (a scalar) is fine for dims holding exactly one element.
  const mismatch = `${triton} has different size for dims and reshape for ${model} (dims ` +
    `${formatDims(io.dims)} and reshape ${formatDims(shape)} do not hold the same number of elements)`;
  if (dimsCount !== reshapeCount && !(reshapeCount === 0n && dimsCount === 1n)) c.fail(`${path}.reshape`, mismatch);
  if (dimsCount === WILDCARD) {
    // Between -1s, each run of fixed dims must hold the same number of elements: [2, 4, -1, 6] → [8, -1, 1, 6].
    const a = runProducts(io.dims);
    const b = runProducts(shape);
    if (a.length !== b.length) {
      c.fail(
        `${path}.reshape`,
        `${triton} has different number of variable-size dimensions for dims and reshape ` +
        `for ${model} (dims ${formatDims(io.dims)}, reshape ${formatDims(shape)})`,
      );
    }
    if (a.some((v, k) => v !== b[k])) c.fail(`${path}.reshape`, mismatch);
  }
}

/** Element count; -1 when any dim is variable; 0 for an empty shape (as Triton counts it). */
function elementCount(dims: readonly bigint[]): bigint {
  if (dims.length === 0) return 0n;
  let n = 1n;
  for (const d of dims) {
    if (d === WILDCARD) return WILDCARD;
    n *= d;
  }
  return n;
}

function runProducts(dims: readonly bigint[]): bigint[] {
  const runs: bigint[] = [];
  let n = 1n;
  for (const d of dims) {
    if (d === WILDCARD) {
      runs.push(n);
      n = 1n;
    } else {
      n *= d;
    }
  }
  runs.push(n);
  return runs;
}

function checkTensorRTOnly(c: ConfigChecker, path: string, subject: string, io: ModelInput | ModelOutput): void {
  const trt = c.config.platform === Platform.tensorrtPlan;
  const model = c.config.name;
  if (io.isShapeTensor && !trt) {
    c.fail(
      `${path}.is_shape_tensor`,
      `shape tensors are only supported for TensorRT platform for ${model} (${subject} sets is_shape_tensor)`,
    );
  }
  if (io.isNonLinearFormatIo) {
    if (!trt) {
      c.fail(
        `${path}.is_non_linear_format_io`,
        `Non-linear IO format is only supported for the TensorRT ` +
        `platform for ${model} (${subject} sets is_non_linear_format_io)`,
      );
    }
    const kind = subject.startsWith('input') ? 'input' : 'output';
    if (io.dims.length !== 3)
      c.fail(`${path}.dims`, `Non-linear IO format ${kind} requires 3 dims for ${model} (${subject})`);
  }
}

function checkBatchIO(c: ConfigChecker): void {
  const { config } = c;
  const model = config.name;
  const inputs = new Set(config.input.map((io) => io.name));
  const outputs = new Set(config.output.map((io) => io.name));
  config.batchInput.forEach((bi, i) => {
    const path = `batch_input[${i}]`;
    const kind = enumName(BatchInput_KindSchema, bi.kind);
    if (!isKnownEnum(BatchInput_KindSchema, bi.kind))
      c.fail(`${path}.kind`, `unknown batch input kind '${kind}' for ${model} (batch_input ${i})`);
    if (bi.sourceInput.length !== 1) {
      c.fail(
        `${path}.source_input`,
        `batch input kind '${kind}' expects 1 source input, got ` +
        `${bi.sourceInput.length} for ${model} (batch_input ${i})`,
      );
    }
    if (bi.dataType !== DataType.TYPE_INT32 && bi.dataType !== DataType.TYPE_FP32) {
      c.fail(
        `${path}.data_type`,
        `batch input data type must be TYPE_INT32 or TYPE_FP32 for ${model} (batch_input ${i})`,
      );
    }
    bi.sourceInput.forEach((name, j) => {
      if (!inputs.has(name))
        c.fail(
          `${path}.source_input[${j}]`,
          `unknown source input name '${name}' for ${model} (batch_input ${i}: not a model input)`,
        );
    });
  });
  config.batchOutput.forEach((bo, i) => {
    const path = `batch_output[${i}]`;
    const kind = enumName(BatchOutput_KindSchema, bo.kind);
    if (bo.kind !== BatchOutput_Kind.BATCH_SCATTER_WITH_INPUT_SHAPE) {
      c.fail(`${path}.kind`, `unknown batch output kind '${kind}' for ${model} (batch_output ${i})`);
    }
    if (bo.sourceInput.length !== 1) {
      c.fail(
        `${path}.source_input`,
        `batch output kind '${kind}' expects 1 source input, got ` +
        `${bo.sourceInput.length} for ${model} (batch_output ${i})`,
      );
    }
    bo.sourceInput.forEach((name, j) => {
      if (!inputs.has(name))
        c.fail(
          `${path}.source_input[${j}]`,
          `unknown source input name '${name}' for ${model} (batch_output ${i}: not a model input)`,
        );
    });
    const targets = new Set<string>();
    bo.targetName.forEach((name, j) => {
      if (!outputs.has(name))
        c.fail(
          `${path}.target_name[${j}]`,
          `unknown target output name '${name}' for ${model} (batch_output ${i}: not a model output)`,
        );
      if (targets.has(name))
        c.fail(
          `${path}.target_name[${j}]`,
          `target output name '${name}' can only be specified once for ${model} (batch_output ${i})`,
        );
      targets.add(name);
    });
  });
}
