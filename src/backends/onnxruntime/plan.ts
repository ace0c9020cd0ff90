/**
 * What an instance needs to know per configured tensor, worked out once at
 * load: onnxruntime's type name and how shapes map between the client's view
 * (config dims) and the model's (reshape).
 */
import type { ModelConfig, ModelInput, ModelOutput } from '../../gen/model_config_pb.js';
import { datatypeFromConfigEnum, type Datatype } from '../../tensor/datatype.js';
import type { OrtTensorType } from './worker-protocol.js';

const ORT_TYPES: Record<Datatype, OrtTensorType | undefined> = {
  BOOL: 'bool',
  UINT8: 'uint8',
  UINT16: 'uint16',
  UINT32: 'uint32',
  UINT64: 'uint64',
  INT8: 'int8',
  INT16: 'int16',
  INT32: 'int32',
  INT64: 'int64',
  FP16: 'float16',
  FP32: 'float32',
  FP64: 'float64',
  BYTES: 'string',
  BF16: undefined,
};

export function ortTypeOf(dt: Datatype): OrtTensorType {
  const t = ORT_TYPES[dt];
  if (!t) throw new Error(`datatype ${dt} has no onnxruntime-node tensor type`);
  return t;
}

function sameShape(a: readonly number[], pattern: readonly number[]): boolean {
  if (a.length !== pattern.length) return false;
  for (let i = 0; i < a.length; i++) if (pattern[i] !== -1 && pattern[i] !== a[i]) return false;
  return true;
}

/**
 * Fills the -1 dims of `target` with the values `source` has where its own
 * pattern has -1, in order (Triton's rule for reshapes with variable dims).
 */
function mapVariableDims(source: readonly number[], sourcePattern: readonly number[], target: readonly number[]): number[] {
  const variable: number[] = [];
  for (let i = 0; i < sourcePattern.length; i++) if (sourcePattern[i] === -1) variable.push(source[i]!);
  let k = 0;
  return target.map((d) => (d === -1 ? (variable[k++] ?? -1) : d));
}

export class TensorPlan {
  readonly name: string;
  readonly datatype: Datatype;
  readonly ortType: OrtTensorType;
  /** Config dims, without the batch dim. */
  readonly dims: readonly number[];
  /** Config reshape (what the model sees), without the batch dim; undefined when none. */
  readonly reshape: readonly number[] | undefined;

  constructor(io: ModelInput | ModelOutput) {
    this.name = io.name;
    this.datatype = datatypeFromConfigEnum(io.dataType)!;
    this.ortType = ortTypeOf(this.datatype);
    this.dims = io.dims.map(Number);
    this.reshape = io.reshape ? io.reshape.shape.map(Number) : undefined;
  }

  /** Shape (without batch dim) as the model wants it, from the shape the client sent. */
  toModelShape(shape: readonly number[]): readonly number[] {
    const r = this.reshape;
    if (!r || sameShape(shape, r)) return shape;
    return mapVariableDims(shape, this.dims, r);
  }

  /** Shape (without batch dim) as the client expects it, from the shape the model produced. */
  toConfigShape(shape: readonly number[]): readonly number[] {
    const r = this.reshape;
    if (!r) return shape;
    return mapVariableDims(shape, r, this.dims);
  }
}

export class ModelPlan {
  readonly modelName: string;
  readonly maxBatchSize: number;
  readonly inputs: ReadonlyMap<string, TensorPlan>;
  /** In configuration order. */
  readonly outputs: readonly TensorPlan[];
  readonly outputsByName: ReadonlyMap<string, TensorPlan>;

  constructor(modelName: string, config: ModelConfig) {
    this.modelName = modelName;
    this.maxBatchSize = config.maxBatchSize;
    this.inputs = new Map(config.input.map((io) => [io.name, new TensorPlan(io)]));
    this.outputs = config.output.map((io) => new TensorPlan(io));
    this.outputsByName = new Map(this.outputs.map((p) => [p.name, p]));
  }
}
