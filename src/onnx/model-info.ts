/**
 * Reads what a server needs to know about an .onnx file without running it:
 * the graph's inputs and outputs with their types and shapes. Auto-complete
 * builds a configuration from this; loading checks a configuration against it.
 */
import { open, type FileHandle } from 'node:fs/promises';
import { fromBinary } from '@bufbuild/protobuf';
import {
  ModelProtoSchema,
  OperatorSetIdProtoSchema,
  ValueInfoProtoSchema,
  type ValueInfoProto,
} from '../gen/onnx_pb.js';
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

/**
 * Reads a model file's signature without reading the whole file: the
 * weights (initializer data) are skipped over, so a multi-gigabyte model is
 * described from a few kilobytes of reads.
 */
export async function readOnnxModelInfo(path: string): Promise<OnnxModelInfo> {
  const fh = await open(path, 'r');
  try {
    const size = (await fh.stat()).size;
    return await scanModel(new FileReader(fh, size), path);
  } finally {
    await fh.close();
  }
}

/** The signature of a model held in memory. */
export function parseOnnxModelInfo(bytes: Uint8Array, source = 'model'): OnnxModelInfo {
  let model;
  try {
    model = fromBinary(ModelProtoSchema, bytes, { readUnknownFields: false });
  } catch (err) {
    throw new OnnxParseError(
      `${source} is not a valid ONNX model: ${err instanceof Error ? err.message : String(err)}`,
    );
  }
  const graph = model.graph;
  // Random bytes sometimes decode as a protobuf message; a model must at least
  // name its IR version and have a graph with outputs.
  if (model.irVersion <= 0n || !graph || graph.output.length === 0) {
    throw new OnnxParseError(
      `${source} is not a valid ONNX model: no ${model.irVersion <= 0n ? 'ir_version' : 'graph outputs'}`,
    );
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
    return {
      name: vi.name,
      datatype: undefined,
      onnxType: t?.case?.replace(/Type$/, '') ?? 'undefined',
      dims: [],
      hasShape: false,
    };
  }
  const shape = t.value.shape;
  const dims = shape
    ? shape.dim.map((d) => (d.value.case === 'dimValue' && d.value.value >= 0n ? Number(d.value.value) : -1))
    : [];
  return {
    name: vi.name,
    datatype: datatypeFromOnnx(t.value.elemType),
    onnxType: onnxElemTypeName(t.value.elemType),
    dims,
    hasShape: shape !== undefined,
  };
}

// ---------------------------------------------------------------------------
// Scanning a file: protobuf wire format, read piecewise.

const WIRE_VARINT = 0;
const WIRE_I64 = 1;
const WIRE_LEN = 2;
const WIRE_I32 = 5;

/** Field numbers used below (onnx.proto). */
const MODEL_IR_VERSION = 1;
const MODEL_PRODUCER_NAME = 2;
const MODEL_GRAPH = 7;
const MODEL_OPSET_IMPORT = 8;
const GRAPH_INITIALIZER = 5;
const GRAPH_INPUT = 11;
const GRAPH_OUTPUT = 12;
const TENSOR_NAME = 8;

/** A forward reader over a file with a read-ahead window; skipping past the window costs no read. */
class FileReader {
  private window = Buffer.alloc(0);
  private windowStart = 0;
  pos = 0;

  constructor(
    private readonly fh: FileHandle,
    readonly size: number,
  ) {}

  private async ensure(n: number): Promise<void> {
    if (this.pos >= this.windowStart && this.pos + n <= this.windowStart + this.window.length) return;
    if (this.pos + n > this.size)
      throw new Error(`truncated at byte ${this.pos} (need ${n} bytes, file has ${this.size})`);
    const want = Math.min(Math.max(n, 64 * 1024), this.size - this.pos);
    const buf = Buffer.allocUnsafe(want);
    const { bytesRead } = await this.fh.read(buf, 0, want, this.pos);
    if (bytesRead < n) throw new Error(`short read at byte ${this.pos}`);
    this.window = buf.subarray(0, bytesRead);
    this.windowStart = this.pos;
  }

  async varint(): Promise<bigint> {
    await this.ensure(Math.min(10, this.size - this.pos) || 1);
    let result = 0n;
    let shift = 0n;
    for (let i = 0; i < 10; i++) {
      const byte = this.window[this.pos - this.windowStart + i];
      if (byte === undefined) break;
      result |= BigInt(byte & 0x7f) << shift;
      if ((byte & 0x80) === 0) {
        this.pos += i + 1;
        return result;
      }
      shift += 7n;
    }
    throw new Error(`bad varint at byte ${this.pos}`);
  }

  async bytes(n: number): Promise<Uint8Array> {
    await this.ensure(n);
    const start = this.pos - this.windowStart;
    this.pos += n;
    return this.window.subarray(start, start + n);
  }

  skip(n: number): void {
    if (this.pos + n > this.size)
      throw new Error(`field of ${n} bytes at byte ${this.pos} runs past the end of the file`);
    this.pos += n;
  }
}

interface Tag {
  readonly field: number;
  readonly wire: number;
}

async function readTag(r: FileReader): Promise<Tag> {
  const tag = Number(await r.varint());
  const field = tag >>> 3;
  const wire = tag & 7;
  if (field === 0) throw new Error(`invalid field number 0 at byte ${r.pos}`);
  return { field, wire };
}

async function lengthOf(r: FileReader): Promise<number> {
  const n = Number(await r.varint());
  if (n > r.size - r.pos) throw new Error(`field of ${n} bytes at byte ${r.pos} runs past the end of the file`);
  return n;
}

async function skipField(r: FileReader, wire: number): Promise<void> {
  switch (wire) {
    case WIRE_VARINT:
      await r.varint();
      return;
    case WIRE_I64:
      r.skip(8);
      return;
    case WIRE_LEN:
      r.skip(await lengthOf(r));
      return;
    case WIRE_I32:
      r.skip(4);
      return;
    default:
      throw new Error(`unsupported wire type ${wire} at byte ${r.pos}`);
  }
}

/** The name of the TensorProto spanning [r.pos, end); leaves r at end. */
async function scanTensorName(r: FileReader, end: number): Promise<string> {
  let name = '';
  while (r.pos < end) {
    const { field, wire } = await readTag(r);
    if (field === TENSOR_NAME && wire === WIRE_LEN)
      name = Buffer.from(await r.bytes(await lengthOf(r))).toString('utf8');
    else await skipField(r, wire);
  }
  if (r.pos !== end) throw new Error(`initializer overruns its length at byte ${r.pos}`);
  return name;
}

async function scanModel(r: FileReader, source: string): Promise<OnnxModelInfo> {
  let irVersion = 0n;
  let producerName = '';
  const opsets: Record<string, number> = {};
  const initializerNames = new Set<string>();
  const graphInputs: ValueInfoProto[] = [];
  const graphOutputs: ValueInfoProto[] = [];
  let sawGraph = false;
  try {
    while (r.pos < r.size) {
      const { field, wire } = await readTag(r);
      if (field === MODEL_IR_VERSION && wire === WIRE_VARINT) {
        irVersion = await r.varint();
      } else if (field === MODEL_PRODUCER_NAME && wire === WIRE_LEN) {
        producerName = Buffer.from(await r.bytes(await lengthOf(r))).toString('utf8');
      } else if (field === MODEL_OPSET_IMPORT && wire === WIRE_LEN) {
        const o = fromBinary(OperatorSetIdProtoSchema, await r.bytes(await lengthOf(r)));
        opsets[o.domain] = Number(o.version);
      } else if (field === MODEL_GRAPH && wire === WIRE_LEN) {
        sawGraph = true;
        const graphLength = await lengthOf(r);
        const end = r.pos + graphLength;
        while (r.pos < end) {
          const g = await readTag(r);
          if (g.field === GRAPH_INITIALIZER && g.wire === WIRE_LEN) {
            const tensorLength = await lengthOf(r);
            initializerNames.add(await scanTensorName(r, r.pos + tensorLength));
          } else if ((g.field === GRAPH_INPUT || g.field === GRAPH_OUTPUT) && g.wire === WIRE_LEN) {
            const vi = fromBinary(ValueInfoProtoSchema, await r.bytes(await lengthOf(r)));
            (g.field === GRAPH_INPUT ? graphInputs : graphOutputs).push(vi);
          } else {
            await skipField(r, g.wire);
          }
        }
        if (r.pos !== end) throw new Error(`graph overruns its length at byte ${r.pos}`);
      } else {
        await skipField(r, wire);
      }
    }
  } catch (err) {
    throw new OnnxParseError(
      `${source} is not a valid ONNX model: ${err instanceof Error ? err.message : String(err)}`,
    );
  }
  if (irVersion <= 0n || !sawGraph || graphOutputs.length === 0) {
    throw new OnnxParseError(
      `${source} is not a valid ONNX model: no ${irVersion <= 0n ? 'ir_version' : 'graph outputs'}`,
    );
  }
  const inputs: OnnxTensorInfo[] = [];
  const overridable: OnnxTensorInfo[] = [];
  for (const vi of graphInputs) (initializerNames.has(vi.name) ? overridable : inputs).push(tensorInfo(vi));
  return {
    irVersion: Number(irVersion),
    opsets,
    producerName,
    inputs,
    overridableInitializers: overridable,
    outputs: graphOutputs.map(tensorInfo),
  };
}
