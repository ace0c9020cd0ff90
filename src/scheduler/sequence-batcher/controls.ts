/**
 * The tensors the sequence batcher adds to each request of a sequence:
 * control inputs (START, END, READY as int32/fp32/bool false/true values,
 * CORRID as the correlation id in the configured type) and the implicit
 * state inputs. The configuration has been validated when this runs.
 */
import { readFile } from 'node:fs/promises';
import path from 'node:path';
import {
  type ModelConfig,
  type ModelSequenceBatching,
  type ModelSequenceBatching_Control,
  ModelSequenceBatching_Control_Kind as Kind,
} from '../../gen/model_config_pb.js';
import { Errors } from '../../errors.js';
import { type Datatype, datatypeFromConfigEnum, datatypeInfo, elementCount } from '../../tensor/datatype.js';
import { type Tensor, encodeBytesElements } from '../../tensor/tensor.js';

/** A boolean control: the tensor name and its false/true values as bytes. */
interface BoolControl {
  readonly name: string;
  readonly datatype: Datatype;
  readonly falseBytes: Uint8Array;
  readonly trueBytes: Uint8Array;
}

function boolControl(name: string, c: ModelSequenceBatching_Control): BoolControl {
  if (c.int32FalseTrue.length === 2) {
    const v = new Int32Array(c.int32FalseTrue);
    return {
      name,
      datatype: 'INT32',
      falseBytes: new Uint8Array(v.buffer, 0, 4),
      trueBytes: new Uint8Array(v.buffer, 4, 4),
    };
  }
  if (c.fp32FalseTrue.length === 2) {
    const v = new Float32Array(c.fp32FalseTrue);
    return {
      name,
      datatype: 'FP32',
      falseBytes: new Uint8Array(v.buffer, 0, 4),
      trueBytes: new Uint8Array(v.buffer, 4, 4),
    };
  }
  const [f, t] = c.boolFalseTrue;
  return { name, datatype: 'BOOL', falseBytes: Uint8Array.of(f ? 1 : 0), trueBytes: Uint8Array.of(t ? 1 : 0) };
}

/** The correlation id of a request: a uint64 or a string. */
export type CorrelationId = bigint | string;

export function correlationIdText(id: CorrelationId): string {
  return typeof id === 'bigint' ? id.toString() : id;
}

export class SequenceControls {
  readonly start: BoolControl | undefined;
  readonly end: BoolControl | undefined;
  readonly ready: BoolControl | undefined;
  readonly corrid: { readonly name: string; readonly datatype: Datatype } | undefined;
  /** Control tensors have a batch dimension when the model batches. */
  private readonly shape: readonly number[];

  get batchShape(): readonly number[] {
    return this.shape;
  }

  constructor(seq: ModelSequenceBatching, batching: boolean) {
    let start: BoolControl | undefined;
    let end: BoolControl | undefined;
    let ready: BoolControl | undefined;
    let corrid: SequenceControls['corrid'];
    for (const input of seq.controlInput) {
      for (const c of input.control) {
        if (c.kind === Kind.CONTROL_SEQUENCE_START) start = boolControl(input.name, c);
        else if (c.kind === Kind.CONTROL_SEQUENCE_END) end = boolControl(input.name, c);
        else if (c.kind === Kind.CONTROL_SEQUENCE_READY) ready = boolControl(input.name, c);
        else if (c.kind === Kind.CONTROL_SEQUENCE_CORRID) {
          corrid = { name: input.name, datatype: datatypeFromConfigEnum(c.dataType) ?? 'UINT64' };
        }
      }
    }
    this.start = start;
    this.end = end;
    this.ready = ready;
    this.corrid = corrid;
    this.shape = batching ? [1, 1] : [1];
  }

  /**
   * Checks the request's correlation id against the CORRID control's type
   * (Triton: a string id needs a TYPE_STRING control, a number id an integer one).
   */
  checkCorrelationId(id: CorrelationId, modelName: string, requestId: string): void {
    const c = this.corrid;
    if (c === undefined) return;
    const isString = typeof id === 'string';
    if (isString === (c.datatype === 'BYTES')) return;
    const prefix = `[request id: ${requestId === '' ? '<id_unknown>' : requestId}] `;
    throw Errors.sequenceCorrelationIdType(
      `${prefix}sequence batching control '${c.name}' data-type is '` +
      `${isString ? 'BYTES' : 'UINT64'}', but model '${modelName}' expects '${c.datatype}'`,
    );
  }

  /** The control tensors of one request. */
  tensors(flags: number, id: CorrelationId): Tensor[] {
    const out: Tensor[] = [];
    const shape = this.shape;
    if (this.start) out.push(boolTensor(this.start, (flags & 1) !== 0, shape));
    if (this.end) out.push(boolTensor(this.end, (flags & 2) !== 0, shape));
    if (this.ready) out.push(boolTensor(this.ready, true, shape));
    if (this.corrid)
      out.push({
        name: this.corrid.name,
        datatype: this.corrid.datatype,
        shape,
        data: corridBytes(this.corrid.datatype, id),
      });
    return out;
  }
}

/**
 * The control tensors of a padding request (direct strategy: a slot with no
 * request in this batch): START and END false, READY false, CORRID 0.
 */
export function paddingControls(controls: SequenceControls): Tensor[] {
  const out: Tensor[] = [];
  const shape = controls.batchShape;
  if (controls.start) out.push(boolTensor(controls.start, false, shape));
  if (controls.end) out.push(boolTensor(controls.end, false, shape));
  if (controls.ready) out.push(boolTensor(controls.ready, false, shape));
  if (controls.corrid)
    out.push({
      name: controls.corrid.name,
      datatype: controls.corrid.datatype,
      shape,
      data: corridBytes(controls.corrid.datatype, 0n),
    });
  return out;
}

function boolTensor(c: BoolControl, value: boolean, shape: readonly number[]): Tensor {
  return { name: c.name, datatype: c.datatype, shape, data: value ? c.trueBytes : c.falseBytes };
}

function corridBytes(datatype: Datatype, id: CorrelationId): Uint8Array {
  if (datatype === 'BYTES') return encodeBytesElements([correlationIdText(id)]);
  const n = typeof id === 'bigint' ? id : 0n;
  const buf = new Uint8Array(datatypeInfo(datatype).byteSize);
  const view = new DataView(buf.buffer);
  switch (datatype) {
    case 'INT32':
      view.setInt32(0, Number(BigInt.asIntN(32, n)), true);
      break;
    case 'UINT32':
      view.setUint32(0, Number(BigInt.asUintN(32, n)), true);
      break;
    case 'INT64':
      view.setBigInt64(0, BigInt.asIntN(64, n), true);
      break;
    default:
      view.setBigUint64(0, BigInt.asUintN(64, n), true);
  }
  return buf;
}

/** One implicit state: the input fed from the last value of the output. */
export interface StateSpec {
  readonly inputName: string;
  readonly outputName: string;
  readonly datatype: Datatype;
  /** The state a sequence starts with (zeros, or the initial_state data). */
  readonly initial: Tensor;
}

/** Reads the implicit states of a configuration, with their initial values. */
export async function loadStateSpecs(config: ModelConfig, modelDir: string): Promise<StateSpec[]> {
  if (config.schedulingChoice.case !== 'sequenceBatching') return [];
  const batching = config.maxBatchSize > 0;
  const specs: StateSpec[] = [];
  for (const s of config.schedulingChoice.value.state) {
    const datatype = datatypeFromConfigEnum(s.dataType);
    if (datatype === undefined)
      throw Errors.config(`model '${config.name}': state '${s.inputName}' has no valid data_type`);
    const init = s.initialState[0];
    const dims = (init ? init.dims : s.dims).map((d) => (d < 0n ? 0 : Number(d)));
    const shape = batching ? [1, ...dims] : dims;
    const count = elementCount(dims);
    let data: Uint8Array;
    if (init?.stateData.case === 'dataFile') {
      const file = path.join(modelDir, 'initial_state', init.stateData.value);
      let bytes: Buffer;
      try {
        bytes = await readFile(file);
      } catch {
        throw Errors.config(
          `model '${config.name}': initial_state data_file '` +
          `${init.stateData.value}' of state '${s.inputName}' cannot be read`,
        );
      }
      if (datatype === 'BYTES') {
        data = bytes;
      } else {
        const need = count * datatypeInfo(datatype).byteSize;
        if (bytes.byteLength < need) {
          throw Errors.config(
            `initial_state setting expects ${need} bytes, but the data provided ` +
            `from ${init.stateData.value} only has ${bytes.byteLength} bytes.`,
          );
        }
        data = new Uint8Array(bytes.subarray(0, need));
      }
    } else if (datatype === 'BYTES') {
      // Zero strings: each element is an empty string.
      data = encodeBytesElements(Array.from({ length: count }, () => ''));
    } else {
      data = new Uint8Array(count * datatypeInfo(datatype).byteSize);
    }
    specs.push({
      inputName: s.inputName,
      outputName: s.outputName,
      datatype,
      initial: { name: s.inputName, datatype, shape, data },
    });
  }
  return specs;
}
