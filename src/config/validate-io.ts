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
      c.fail(`${path}.format`, `${subject}: format NHWC/NCHW needs exactly 3 dims, got ${formatDims(io.dims)}`);
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

function checkShape(c: ConfigChecker, kind: string, path: string, io: ModelInput | ModelOutput): void {
  if (io.name === '') c.fail(path, `${kind} ${path.slice(kind.length)}: "name" must be set`);
  const subject = `${kind} "${io.name}"`;
  if (io.dataType === DataType.TYPE_INVALID) c.fail(`${path}.data_type`, `${subject}: "data_type" must be set`);
  if (!isKnownEnum(DataTypeSchema, io.dataType)) {
    c.fail(`${path}.data_type`, `${subject}: data_type ${io.dataType} is not a known data type`);
  }
  if (io.dims.length === 0) {
    c.fail(path, `${subject}: "dims" must be set and not empty (use [ 1 ] for a single value)`);
  }
  if (io.reshape !== undefined && io.reshape.shape.length === 0 && c.config.maxBatchSize === 0) {
    c.fail(
      `${path}.reshape`,
      `${subject}: an empty reshape needs max_batch_size > 0 (a model without a batch dimension cannot take scalars)`,
    );
  }
  io.dims.forEach((d, j) => {
    if (d < 1n && d !== WILDCARD) c.fail(`${path}.dims[${j}]`, `${subject}: dims must be positive or -1, got ${d}`);
  });
  if (io.reshape === undefined) return;
  const shape = io.reshape.shape;
  shape.forEach((d, j) => {
    if (d < 1n && d !== WILDCARD) {
      c.fail(`${path}.reshape.shape[${j}]`, `${subject}: reshape dims must be positive or -1, got ${d}`);
    }
  });
  const dimsCount = elementCount(io.dims);
  const reshapeCount = elementCount(shape);
  // An empty reshape (a scalar) is fine for dims holding exactly one element.
  const mismatch = `${subject}: dims ${formatDims(io.dims)} and reshape ${formatDims(shape)} do not hold the same number of elements`;
  if (dimsCount !== reshapeCount && !(reshapeCount === 0n && dimsCount === 1n)) c.fail(`${path}.reshape`, mismatch);
  if (dimsCount === WILDCARD) {
    // Between -1s, each run of fixed dims must hold the same number of elements: [2, 4, -1, 6] → [8, -1, 1, 6].
    const a = runProducts(io.dims);
    const b = runProducts(shape);
    if (a.length !== b.length) {
      c.fail(`${path}.reshape`, `${subject}: dims ${formatDims(io.dims)} and reshape ${formatDims(shape)} have a different number of -1 dims`);
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
  if (io.isShapeTensor && !trt) {
    c.fail(`${path}.is_shape_tensor`, `${subject}: is_shape_tensor is only supported for TensorRT models`);
  }
  if (io.isNonLinearFormatIo) {
    if (!trt) c.fail(`${path}.is_non_linear_format_io`, `${subject}: non-linear IO formats are only supported for TensorRT models`);
    if (io.dims.length !== 3) c.fail(`${path}.dims`, `${subject}: non-linear IO formats need exactly 3 dims`);
  }
}

function checkBatchIO(c: ConfigChecker): void {
  const { config } = c;
  const inputs = new Set(config.input.map((io) => io.name));
  const outputs = new Set(config.output.map((io) => io.name));
  config.batchInput.forEach((bi, i) => {
    const path = `batch_input[${i}]`;
    const kind = enumName(BatchInput_KindSchema, bi.kind);
    if (!isKnownEnum(BatchInput_KindSchema, bi.kind)) c.fail(`${path}.kind`, `batch_input ${i}: unknown kind ${bi.kind}`);
    if (bi.sourceInput.length !== 1) {
      c.fail(`${path}.source_input`, `batch_input ${i}: kind ${kind} needs exactly 1 source_input, got ${bi.sourceInput.length}`);
    }
    if (bi.dataType !== DataType.TYPE_INT32 && bi.dataType !== DataType.TYPE_FP32) {
      c.fail(`${path}.data_type`, `batch_input ${i}: data_type must be TYPE_INT32 or TYPE_FP32`);
    }
    bi.sourceInput.forEach((name, j) => {
      if (!inputs.has(name)) c.fail(`${path}.source_input[${j}]`, `batch_input ${i}: source_input "${name}" is not a model input`);
    });
  });
  config.batchOutput.forEach((bo, i) => {
    const path = `batch_output[${i}]`;
    if (bo.kind !== BatchOutput_Kind.BATCH_SCATTER_WITH_INPUT_SHAPE) {
      c.fail(`${path}.kind`, `batch_output ${i}: unknown kind ${enumName(BatchOutput_KindSchema, bo.kind)}`);
    }
    if (bo.sourceInput.length !== 1) {
      c.fail(
        `${path}.source_input`,
        `batch_output ${i}: kind BATCH_SCATTER_WITH_INPUT_SHAPE needs exactly 1 source_input, got ${bo.sourceInput.length}`,
      );
    }
    bo.sourceInput.forEach((name, j) => {
      if (!inputs.has(name)) c.fail(`${path}.source_input[${j}]`, `batch_output ${i}: source_input "${name}" is not a model input`);
    });
    const targets = new Set<string>();
    bo.targetName.forEach((name, j) => {
      if (!outputs.has(name)) c.fail(`${path}.target_name[${j}]`, `batch_output ${i}: target_name "${name}" is not a model output`);
      if (targets.has(name)) c.fail(`${path}.target_name[${j}]`, `batch_output ${i}: target_name "${name}" is listed twice`);
      targets.add(name);
    });
  });
}
