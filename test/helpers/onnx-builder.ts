/**
 * A small ONNX graph builder: enough to write the example, test and bench
 * models from TypeScript instead of committing binary fixtures.
 *
 *   const b = new OnnxModelBuilder();
 *   b.input('x', 'FP32', ['batch', 10]).output('y', 'FP32', ['batch', 1]);
 *   b.initializer('w', 'FP32', [10, 1], weights).node('MatMul', ['x', 'w'], ['y']);
 *   await b.save('model.onnx');
 */
import { mkdir, writeFile } from 'node:fs/promises';
import { dirname } from 'node:path';
import { create, toBinary } from '@bufbuild/protobuf';
import {
  AttributeProto_AttributeType,
  AttributeProtoSchema,
  GraphProtoSchema,
  ModelProtoSchema,
  NodeProtoSchema,
  OperatorSetIdProtoSchema,
  TensorProtoSchema,
  TensorShapeProto_DimensionSchema,
  TensorShapeProtoSchema,
  TypeProto_TensorSchema,
  TypeProtoSchema,
  ValueInfoProtoSchema,
  type AttributeProto,
  type ModelProto,
  type NodeProto,
  type TensorProto,
  type ValueInfoProto,
} from '../../src/gen/onnx_pb.js';
import type { Datatype, TypedArray } from '../../src/tensor/datatype.js';
import { OnnxElemType, onnxElemTypeOf } from '../../src/onnx/datatypes.js';
import { seededRandom } from './random.js';

export { seededRandom };

/** A dimension: a size, a symbolic name such as 'batch' (dynamic), or null (unknown). */
export type Dim = number | string | null;

/** Values a constant tensor can be built from: numbers as a typed array, strings for BYTES. */
export type TensorValues = TypedArray | readonly string[];

/** A node attribute; the key says which ONNX attribute kind it is. */
export type AttributeValue =
  | { readonly i: number | bigint }
  | { readonly f: number }
  | { readonly s: string }
  | { readonly ints: readonly (number | bigint)[] }
  | { readonly floats: readonly number[] }
  | { readonly strings: readonly string[] }
  | { readonly t: { datatype: Datatype; dims: readonly number[]; values: TensorValues } };

export interface OnnxModelBuilderOptions {
  /** Graph name. Default "nereid". */
  readonly name?: string;
  /** Default-domain opset. Default 13. */
  readonly opset?: number;
  /** Default 8 (ONNX 1.10+; every onnxruntime of the last years reads it). */
  readonly irVersion?: number;
}

export class OnnxModelBuilder {
  private readonly inputs: ValueInfoProto[] = [];
  private readonly outputs: ValueInfoProto[] = [];
  private readonly initializers: TensorProto[] = [];
  private readonly nodes: NodeProto[] = [];
  private readonly options: Required<OnnxModelBuilderOptions>;
  private nodeCount = 0;

  constructor(options: OnnxModelBuilderOptions = {}) {
    this.options = { name: options.name ?? 'nereid', opset: options.opset ?? 13, irVersion: options.irVersion ?? 8 };
  }

  input(name: string, datatype: Datatype, shape: readonly Dim[]): this {
    this.inputs.push(valueInfo(name, datatype, shape));
    return this;
  }

  output(name: string, datatype: Datatype, shape: readonly Dim[]): this {
    this.outputs.push(valueInfo(name, datatype, shape));
    return this;
  }

  /** A constant tensor the nodes can read by name. */
  initializer(name: string, datatype: Datatype, dims: readonly number[], values: TensorValues): this {
    this.initializers.push(tensorProto(name, datatype, dims, values));
    return this;
  }

  node(
    opType: string,
    inputs: readonly string[],
    outputs: readonly string[],
    attributes: Record<string, AttributeValue> = {},
  ): this {
    this.nodes.push(
      create(NodeProtoSchema, {
        name: `${opType.toLowerCase()}_${this.nodeCount++}`,
        opType,
        input: [...inputs],
        output: [...outputs],
        attribute: Object.entries(attributes).map(([n, v]) => attributeProto(n, v)),
      }),
    );
    return this;
  }

  toModelProto(): ModelProto {
    return create(ModelProtoSchema, {
      irVersion: BigInt(this.options.irVersion),
      producerName: 'nereid',
      producerVersion: '0.1.0',
      opsetImport: [create(OperatorSetIdProtoSchema, { domain: '', version: BigInt(this.options.opset) })],
      graph: create(GraphProtoSchema, {
        name: this.options.name,
        node: this.nodes,
        initializer: this.initializers,
        input: this.inputs,
        output: this.outputs,
      }),
    });
  }

  toBytes(): Uint8Array {
    return toBinary(ModelProtoSchema, this.toModelProto());
  }

  /** Writes the model file, creating its folder. */
  async save(path: string): Promise<void> {
    await mkdir(dirname(path), { recursive: true });
    await writeFile(path, this.toBytes());
  }
}

function valueInfo(name: string, datatype: Datatype, shape: readonly Dim[]): ValueInfoProto {
  const dim = shape.map((d) =>
    create(TensorShapeProto_DimensionSchema, {
      value:
        d === null
          ? { case: undefined }
          : typeof d === 'string'
            ? { case: 'dimParam', value: d }
            : { case: 'dimValue', value: BigInt(d) },
    }),
  );
  return create(ValueInfoProtoSchema, {
    name,
    type: create(TypeProtoSchema, {
      value: {
        case: 'tensorType',
        value: create(TypeProto_TensorSchema, {
          elemType: onnxElemTypeOf(datatype),
          shape: create(TensorShapeProtoSchema, { dim }),
        }),
      },
    }),
  });
}

function tensorProto(name: string, datatype: Datatype, dims: readonly number[], values: TensorValues): TensorProto {
  const count = dims.reduce((a, b) => a * b, 1);
  if (values.length !== count) {
    throw new Error(`tensor '${name}': ${values.length} values given for dims [${dims.join(',')}] (${count} elements)`);
  }
  const base = { name, dims: dims.map((d) => BigInt(d)), dataType: onnxElemTypeOf(datatype) };
  if (datatype === 'BYTES') {
    if (!isStringArray(values)) throw new Error(`tensor '${name}': BYTES values must be strings`);
    return create(TensorProtoSchema, { ...base, stringData: values.map((s) => Buffer.from(s, 'utf8')) });
  }
  if (isStringArray(values)) throw new Error(`tensor '${name}': ${datatype} values must be a typed array`);
  // raw_data is little-endian, which is every platform Node runs on.
  const raw = new Uint8Array(values.buffer, values.byteOffset, values.byteLength);
  return create(TensorProtoSchema, { ...base, rawData: raw });
}

function isStringArray(v: TensorValues): v is readonly string[] {
  return Array.isArray(v);
}

function attributeProto(name: string, v: AttributeValue): AttributeProto {
  const T = AttributeProto_AttributeType;
  if ('i' in v) return create(AttributeProtoSchema, { name, type: T.INT, i: BigInt(v.i) });
  if ('f' in v) return create(AttributeProtoSchema, { name, type: T.FLOAT, f: v.f });
  if ('s' in v) return create(AttributeProtoSchema, { name, type: T.STRING, s: Buffer.from(v.s, 'utf8') });
  if ('ints' in v) return create(AttributeProtoSchema, { name, type: T.INTS, ints: v.ints.map((x) => BigInt(x)) });
  if ('floats' in v) return create(AttributeProtoSchema, { name, type: T.FLOATS, floats: [...v.floats] });
  if ('strings' in v)
    return create(AttributeProtoSchema, {
      name,
      type: T.STRINGS,
      strings: v.strings.map((s) => Buffer.from(s, 'utf8')),
    });
  return create(AttributeProtoSchema, {
    name,
    type: T.TENSOR,
    t: tensorProto(name, v.t.datatype, v.t.dims, v.t.values),
  });
}

// ---------------------------------------------------------------------------
// Ready-made models

export interface MlpWeights {
  /** Layer sizes, input first. */
  readonly layers: readonly number[];
  /** weights[k]: row-major [layers[k], layers[k+1]]. */
  readonly weights: readonly Float32Array[];
  /** biases[k]: [layers[k+1]]. */
  readonly biases: readonly Float32Array[];
  readonly outputActivation: 'none' | 'sigmoid';
}

export interface MlpOptions {
  readonly inputName?: string;
  readonly outputName?: string;
  /** Activation after the last layer (hidden layers always use Relu). Default 'none'. */
  readonly outputActivation?: 'none' | 'sigmoid';
  /** Name of the symbolic batch dimension. Default 'batch'. */
  readonly batchDim?: string;
}

export interface BuiltMlp {
  readonly builder: OnnxModelBuilder;
  readonly weights: MlpWeights;
}

/**
 * A multi-layer perceptron FP32 [batch, layers[0]] -> [batch, layers.at(-1)]:
 * MatMul + Add per layer, Relu between layers. Weights are Glorot-uniform
 * from `seed`, so the same call always builds the same model.
 */
export function buildMlp(layers: readonly number[], seed: number, options: MlpOptions = {}): BuiltMlp {
  if (layers.length < 2) throw new Error('buildMlp needs at least an input and an output size');
  const inputName = options.inputName ?? 'input';
  const outputName = options.outputName ?? 'output';
  const batch = options.batchDim ?? 'batch';
  const outputActivation = options.outputActivation ?? 'none';
  const rand = seededRandom(seed);
  const b = new OnnxModelBuilder({ name: 'mlp' });
  b.input(inputName, 'FP32', [batch, layers[0]!]);
  b.output(outputName, 'FP32', [batch, layers.at(-1)!]);
  const weights: Float32Array[] = [];
  const biases: Float32Array[] = [];
  let current = inputName;
  const last = layers.length - 2;
  for (let k = 0; k <= last; k++) {
    const fanIn = layers[k]!;
    const fanOut = layers[k + 1]!;
    const limit = Math.sqrt(6 / (fanIn + fanOut));
    const w = new Float32Array(fanIn * fanOut);
    for (let i = 0; i < w.length; i++) w[i] = (rand() * 2 - 1) * limit;
    const bias = new Float32Array(fanOut);
    for (let i = 0; i < bias.length; i++) bias[i] = (rand() * 2 - 1) * 0.1;
    weights.push(w);
    biases.push(bias);
    b.initializer(`w${k}`, 'FP32', [fanIn, fanOut], w);
    b.initializer(`b${k}`, 'FP32', [fanOut], bias);
    const isLast = k === last;
    const sum = isLast && outputActivation === 'none' ? outputName : `sum${k}`;
    b.node('MatMul', [current, `w${k}`], [`mm${k}`]);
    b.node('Add', [`mm${k}`, `b${k}`], [sum]);
    if (!isLast) {
      b.node('Relu', [sum], [`h${k}`]);
      current = `h${k}`;
    } else if (outputActivation === 'sigmoid') {
      b.node('Sigmoid', [sum], [outputName]);
    }
  }
  return { builder: b, weights: { layers: [...layers], weights, biases, outputActivation } };
}

/** The MLP computed in plain TypeScript (float64 accumulation): the reference the tests compare against. */
export function mlpForward(mlp: MlpWeights, input: Float32Array, batch: number): Float32Array {
  let x: Float64Array = Float64Array.from(input);
  const last = mlp.layers.length - 2;
  for (let k = 0; k <= last; k++) {
    const n = mlp.layers[k]!;
    const m = mlp.layers[k + 1]!;
    const w = mlp.weights[k]!;
    const bias = mlp.biases[k]!;
    const y = new Float64Array(batch * m);
    for (let r = 0; r < batch; r++) {
      for (let j = 0; j < m; j++) {
        let acc = bias[j]!;
        for (let i = 0; i < n; i++) acc += x[r * n + i]! * w[i * m + j]!;
        if (k < last) acc = Math.max(0, acc);
        else if (mlp.outputActivation === 'sigmoid') acc = 1 / (1 + Math.exp(-acc));
        y[r * m + j] = acc;
      }
    }
    x = y;
  }
  return Float32Array.from(x);
}

export interface IdentitySpec {
  readonly name: string;
  readonly datatype: Datatype;
  readonly shape: readonly Dim[];
}

/**
 * One Identity node per tensor: input `<name>` -> output `<outputPrefix><i>`
 * (default "OUTPUT"). Handy for checking how a datatype travels.
 */
export function buildIdentityModel(tensors: readonly IdentitySpec[], outputPrefix = 'OUTPUT'): OnnxModelBuilder {
  const b = new OnnxModelBuilder({ name: 'identity' });
  tensors.forEach((t, i) => {
    b.input(t.name, t.datatype, t.shape);
    b.output(`${outputPrefix}${i}`, t.datatype, t.shape);
    b.node('Identity', [t.name], [`${outputPrefix}${i}`]);
  });
  return b;
}

/**
 * Triton's classic "simple" model: INPUT0, INPUT1 -> OUTPUT0 = INPUT0 + INPUT1,
 * OUTPUT1 = INPUT0 - INPUT1, all of `datatype` and shape [batch, size] (or
 * [size] when `batchDim` is null).
 */
export function buildAddSubModel(
  datatype: Datatype,
  size: number,
  batchDim: string | null = 'batch',
): OnnxModelBuilder {
  const shape: Dim[] = batchDim === null ? [size] : [batchDim, size];
  const b = new OnnxModelBuilder({ name: 'add_sub' });
  b.input('INPUT0', datatype, shape).input('INPUT1', datatype, shape);
  b.output('OUTPUT0', datatype, shape).output('OUTPUT1', datatype, shape);
  b.node('Add', ['INPUT0', 'INPUT1'], ['OUTPUT0']);
  b.node('Sub', ['INPUT0', 'INPUT1'], ['OUTPUT1']);
  return b;
}

/**
 * Triton's example "simple_sequence" (dyna = false) and "simple_dyna_sequence"
 * (dyna = true), INT32 [batch, 1] throughout:
 *   OUTPUT = (INPUT + START) * READY                       (simple_sequence)
 *   OUTPUT = (INPUT + START + int32(CORRID) * END) * READY  (simple_dyna_sequence, CORRID UINT64)
 * The sequence batcher feeds START / END / READY / CORRID; the model itself is stateless.
 */
export function buildSequenceControlModel(dyna: boolean): OnnxModelBuilder {
  const shape: Dim[] = ['batch', 1];
  const b = new OnnxModelBuilder({ name: dyna ? 'simple_dyna_sequence' : 'simple_sequence' });
  b.input('INPUT', 'INT32', shape).input('START', 'INT32', shape).input('READY', 'INT32', shape);
  if (dyna) b.input('END', 'INT32', shape).input('CORRID', 'UINT64', shape);
  b.output('OUTPUT', 'INT32', shape);
  b.node('Add', ['INPUT', 'START'], ['started']);
  let value = 'started';
  if (dyna) {
    b.node('Cast', ['CORRID'], ['corrid32'], { to: { i: OnnxElemType.INT32 } });
    b.node('Mul', ['corrid32', 'END'], ['at_end']);
    b.node('Add', ['started', 'at_end'], ['with_corrid']);
    value = 'with_corrid';
  }
  b.node('Mul', [value, 'READY'], ['OUTPUT']);
  return b;
}

/**
 * A stateful accumulator for implicit state: OUTPUT = STATE_OUT = STATE_IN + INPUT,
 * `datatype` [batch, size]. With the sequence batcher's `state { input_name: "STATE_IN"
 * output_name: "STATE_OUT" }` each sequence sums its inputs.
 */
export function buildAccumulatorModel(datatype: Datatype, size: number): OnnxModelBuilder {
  const shape: Dim[] = ['batch', size];
  const b = new OnnxModelBuilder({ name: 'accumulator' });
  b.input('INPUT', datatype, shape).input('STATE_IN', datatype, shape);
  b.output('OUTPUT', datatype, shape).output('STATE_OUT', datatype, shape);
  b.node('Add', ['STATE_IN', 'INPUT'], ['OUTPUT']);
  b.node('Identity', ['OUTPUT'], ['STATE_OUT']);
  return b;
}
