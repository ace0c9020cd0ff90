/**
 * Reads what a server needs to know about an .onnx file without running it:
 * the graph's inputs and outputs with their types and shapes. Auto-complete
 * builds a configuration from this; loading checks a configuration against it.
 */
import { readFile } from 'node:fs/promises';
import { fromBinary } from '@bufbuild/protobuf';
import { ModelProtoSchema, type ValueInfoProto } from '../gen/onnx_pb.js';
import type { Datatype } from '../tensor/datatype.js';
import { datatypeFromOnnx, onnxElemTypeName } from './datatypes.js';

export interface OnnxTensorInfo {
  readonly name: string;
  /** Protocol datatype; undefined when the ONNX type has no Triton twin or the value is not a tensor. */
  readonly datatype: Datatype | undefined;
  /** What the model declares, for messages: e.g. "FLOAT", "COMPLEX64", "sequence". */
  readonly onnxType: string;
  /** -1 for symbolic or unknown dimensions. [] for a scalar. */
  readonly dims: readonly number[];
  /** False when the model declares no shape at all (rank unknown). */
  readonly hasShape: boolean;
}

export interface OnnxModelInfo {
  readonly irVersion: number;
  /** domain ('' = ai.onnx) -> opset version. */
  readonly opsets: Readonly<Record<string, number>>;
  readonly producerName: string;
  /** Graph inputs a caller must feed (initializers excluded, as onnxruntime reports them). */
  readonly inputs: readonly OnnxTensorInfo[];
  /** Graph inputs that have an initializer: a request may override them. */
  readonly overridableInitializers: readonly OnnxTensorInfo[];
  readonly outputs: readonly OnnxTensorInfo[];
}

/** Thrown when the bytes are not an ONNX model. */
export class OnnxParseError extends Error {
  override readonly name = 'OnnxParseError';
}

export async function readOnnxModelInfo(path: string): Promise<OnnxModelInfo> {
  return parseOnnxModelInfo(await readFile(path), path);
}

export function parseOnnxModelInfo(bytes: Uint8Array, source = 'model'): OnnxModelInfo {
  let model;
  try {
    model = fromBinary(ModelProtoSchema, bytes, { readUnknownFields: false });
  } catch (err) {
    throw new OnnxParseError(`${source} is not a valid ONNX model: ${err instanceof Error ? err.message : String(err)}`);
  }
  const graph = model.graph;
  // Random bytes sometimes decode as a protobuf message; a model must at least
  // name its IR version and have a graph with outputs.
  if (model.irVersion <= 0n || !graph || graph.output.length === 0) {
    throw new OnnxParseError(`${source} is not a valid ONNX model: no ${model.irVersion <= 0n ? 'ir_version' : 'graph outputs'}`);
  }
  const initializerNames = new Set(graph.initializer.map((t) => t.name));
  const inputs: OnnxTensorInfo[] = [];
  const overridable: OnnxTensorInfo[] = [];
  for (const vi of graph.input) {
    (initializerNames.has(vi.name) ? overridable : inputs).push(tensorInfo(vi));
  }
  const opsets: Record<string, number> = {};
  for (const o of model.opsetImport) opsets[o.domain] = Number(o.version);
  return {
    irVersion: Number(model.irVersion),
    opsets,
    producerName: model.producerName,
    inputs,
    overridableInitializers: overridable,
    outputs: graph.output.map(tensorInfo),
  };
}

function tensorInfo(vi: ValueInfoProto): OnnxTensorInfo {
  const t = vi.type?.value;
  if (t?.case !== 'tensorType') {
    return { name: vi.name, datatype: undefined, onnxType: t?.case?.replace(/Type$/, '') ?? 'undefined', dims: [], hasShape: false };
  }
  const shape = t.value.shape;
  const dims = shape ? shape.dim.map((d) => (d.value.case === 'dimValue' && d.value.value >= 0n ? Number(d.value.value) : -1)) : [];
  return {
    name: vi.name,
    datatype: datatypeFromOnnx(t.value.elemType),
    onnxType: onnxElemTypeName(t.value.elemType),
    dims,
    hasShape: shape !== undefined,
  };
}
