/**
 * What an instance needs to know per configured tensor, worked out once at
 * load: onnxruntime's type name and how shapes map between the client's view
 * (config dims) and the model's (reshape).
 */
import type { ModelConfig, ModelInput, ModelOutput } from '../../gen/model_config_pb.js';
import type { OnnxTensorInfo } from '../../onnx/model-info.js';
import { datatypeFromConfigEnum, type Datatype } from '../../tensor/datatype.js';
import type { OrtTensorType } from './thread/worker-protocol.js';

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
function mapVariableDims(
  source: readonly number[],
  sourcePattern: readonly number[],
  target: readonly number[],
): number[] {
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

  constructor(name: string, datatype: Datatype, dims: readonly number[], reshape: readonly number[] | undefined) {
    this.name = name;
    this.datatype = datatype;
    this.ortType = ortTypeOf(datatype);
    this.dims = dims;
    this.reshape = reshape;
  }

  static fromConfig(io: ModelInput | ModelOutput): TensorPlan {
    return new TensorPlan(
      io.name,
      datatypeFromConfigEnum(io.dataType)!,
      io.dims.map(Number),
      io.reshape ? io.reshape.shape.map(Number) : undefined,
    );
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
  /** In configuration order, then the implicit-state outputs of a sequence model. */
  readonly outputs: readonly TensorPlan[];
  readonly outputsByName: ReadonlyMap<string, TensorPlan>;
  /**
   * Model inputs the configuration does not list (sequence control and state
   * inputs): requests may carry them, and they pass through unshaped.
   */
  private readonly extraInputs: Map<string, TensorPlan>;

  constructor(
    modelName: string,
    config: ModelConfig,
    modelInputs: readonly OnnxTensorInfo[],
    modelOutputs: readonly OnnxTensorInfo[] = [],
  ) {
    this.modelName = modelName;
    this.maxBatchSize = config.maxBatchSize;
    this.inputs = new Map(config.input.map((io) => [io.name, TensorPlan.fromConfig(io)]));
    const outputs = config.output.map((io) => TensorPlan.fromConfig(io));
    // The sequence batcher asks for state outputs the configuration does not list.
    const stateOutputs =
      config.schedulingChoice.case === 'sequenceBatching'
        ? new Set(config.schedulingChoice.value.state.map((s) => s.outputName))
        : new Set<string>();
    for (const t of modelOutputs) {
      if (stateOutputs.has(t.name) && !outputs.some((p) => p.name === t.name) && t.datatype !== undefined) {
        outputs.push(new TensorPlan(t.name, t.datatype, t.dims.slice(config.maxBatchSize > 0 ? 1 : 0), undefined));
      }
    }
    this.outputs = outputs;
    this.outputsByName = new Map(this.outputs.map((p) => [p.name, p]));
    this.extraInputs = new Map();
    for (const t of modelInputs) {
      if (!this.inputs.has(t.name) && t.datatype !== undefined && t.datatype !== 'BF16') {
        this.extraInputs.set(t.name, new TensorPlan(t.name, t.datatype, t.dims, undefined));
      }
    }
  }

  /** The plan for a request input: a configured input or another input of the model. */
  input(name: string): TensorPlan | undefined {
    return this.inputs.get(name) ?? this.extraInputs.get(name);
  }
}
