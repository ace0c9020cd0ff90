/**
 * Checks an inference request against the model's configuration and turns
 * it into what a backend receives. Messages follow Triton's wording (clients
 * and QA scripts match on them), prefixed with the request id.
 */
import type { ModelConfig, ModelInput, ModelOutput } from '../gen/model_config_pb.js';
import type { BackendRequest, ParameterValue, ResponseSender } from '../backends/backend.js';
import { Errors, NereidError } from '../errors.js';
import { datatypeFromConfigEnum, datatypeInfo, elementCount, shapeToString } from '../tensor/datatype.js';
import { type Tensor, decodeBytesElements, retagTensor, tensorByteLength } from '../tensor/tensor.js';
import type { InferRequest, RequestedOutput } from '../types/api.js';

/** The per-model facts the hot path needs, computed once at load. */
export class ModelSignature {
  readonly inputs = new Map<
    string,
    { config: ModelInput; datatype: string; dims: number[]; reshape: number[] | undefined }
  >();
  readonly outputs = new Map<
    string,
    { config: ModelOutput; datatype: string; dims: number[]; reshape: number[] | undefined }
  >();
  readonly outputNames: string[];
  readonly requiredInputs: string[];
  readonly maxBatchSize: number;

  constructor(
    readonly modelName: string,
    config: ModelConfig,
  ) {
    this.maxBatchSize = config.maxBatchSize;
    for (const input of config.input) {
      this.inputs.set(input.name, {
        config: input,
        datatype: datatypeFromConfigEnum(input.dataType) ?? 'INVALID',
        dims: input.dims.map(Number),
        reshape: input.reshape ? input.reshape.shape.map(Number) : undefined,
      });
    }
    for (const output of config.output) {
      this.outputs.set(output.name, {
        config: output,
        datatype: datatypeFromConfigEnum(output.dataType) ?? 'INVALID',
        dims: output.dims.map(Number),
        reshape: output.reshape ? output.reshape.shape.map(Number) : undefined,
      });
    }
    this.outputNames = config.output.map((o) => o.name);
    this.requiredInputs = config.input.filter((i) => !i.optional).map((i) => i.name);
  }
}

export interface PreparedRequest {
  readonly backendRequest: BackendRequest;
  readonly requestedOutputs: readonly RequestedOutput[] | undefined;
  readonly priority: number;
  readonly timeoutUs: number;
}

function prefix(id: string | undefined): string {
  return `[request id: ${id ? id : '<id_unknown>'}] `;
}

function withPrefix(err: NereidError, id: string | undefined): NereidError {
  return new NereidError(err.code, err.errorClass, prefix(id) + err.message);
}

/** Applies a reshape: -1 in the target takes what is left of the element count. */
function reshapeTo(target: readonly number[], count: number): number[] {
  const known = target.reduce((p, d) => (d === -1 ? p : p * d), 1);
  return target.map((d) => (d === -1 ? (known === 0 ? 0 : count / known) : d));
}

function dimsMatch(expected: readonly number[], got: readonly number[]): boolean {
  if (expected.length !== got.length) return false;
  for (let i = 0; i < expected.length; i++) {
    const e = expected[i]!;
    if (e !== -1 && e !== got[i]) return false;
  }
  return true;
}

const NON_NEGATIVE_INT = /^\d+$/;

function intParam(name: string, value: ParameterValue, id: string | undefined): number {
  if (typeof value === 'bigint') {
    if (value < 0n)
      throw withPrefix(Errors.badParameter(`parameter '${name}' must be a non-negative integer, got ${value}`), id);
    return Number(value);
  }
  if (typeof value === 'number' && Number.isInteger(value) && value >= 0) return value;
  if (typeof value === 'string' && NON_NEGATIVE_INT.test(value)) return Number(value);
  throw withPrefix(
    Errors.badParameter(`parameter '${name}' must be a non-negative integer, got ${JSON.stringify(String(value))}`),
    id,
  );
}

/** Validates `request` for the model and builds the backend's view of it (`sender`: decoupled models). */
export function prepareRequest(sig: ModelSignature, request: InferRequest, sender?: ResponseSender): PreparedRequest {
  const id = request.id;
  const model = sig.modelName;
  const inputs = request.inputs;
  const batching = sig.maxBatchSize > 0;
  const seen = new Set<string>();
  let batchSize = batching ? -1 : 1;
  const backendInputs: Tensor[] = new Array(inputs.length);

  for (let i = 0; i < inputs.length; i++) {
    const t = inputs[i]!;
    if (seen.has(t.name)) throw withPrefix(Errors.duplicateInput(t.name, model), id);
    seen.add(t.name);
    const spec = sig.inputs.get(t.name);
    if (!spec) throw withPrefix(Errors.unknownInput(t.name, model), id);
    if (t.datatype !== spec.datatype)
      throw withPrefix(Errors.inputDatatype(t.name, model, spec.datatype, t.datatype), id);
    let shape = t.shape;
    if (batching) {
      if (shape.length === 0) {
        throw withPrefix(
          Errors.inputShape(t.name, model, shapeToString([-1, ...spec.dims]), shapeToString(shape)),
          id,
        );
      }
      const b = shape[0]!;
      if (batchSize === -1) batchSize = b;
      else if (b !== batchSize) throw withPrefix(Errors.batchSizeMismatch(model), id);
      if (b > sig.maxBatchSize) throw withPrefix(Errors.batchSizeTooLarge(sig.maxBatchSize, model), id);
    }
    const itemShape = batching ? shape.slice(1) : shape;
    if (!dimsMatch(spec.dims, itemShape)) {
      const full = batching ? [-1, ...spec.dims] : spec.dims;
      const note = batching
        ? ' NOTE: Setting a non-zero max_batch_size in the model config requires a batch dimension to be prepended ' +
          'to each input shape. If you want to specify the full shape including the batch dim in your input dims ' +
          'config, try setting max_batch_size to zero. See the ' +
          'model configuration docs for more info on max_batch_size.'
        : '';
      const err = Errors.inputShape(t.name, model, shapeToString(full), shapeToString(shape));
      throw withPrefix(new NereidError(err.code, err.errorClass, err.message + note), id);
    }
    const count = elementCount(shape);
    const size = datatypeInfo(t.datatype).byteSize;
    if (size > 0) {
      const bytes = tensorByteLength(t);
      if (bytes !== count * size) {
        throw withPrefix(Errors.inputByteSize(t.name, model, count * size, bytes), id);
      }
    } else {
      let elements: number;
      try {
        elements = decodeBytesElements(t.data, t.name).length;
      } catch (e) {
        throw withPrefix(Errors.bytesEncoding(`${(e as Error).message} for model '${model}'`), id);
      }
      if (elements !== count) throw withPrefix(Errors.bytesElementCount(t.name, count, elements), id);
    }
    if (spec.reshape) {
      const item = reshapeTo(spec.reshape, elementCount(itemShape));
      shape = batching ? [shape[0]!, ...item] : item;
      backendInputs[i] = retagTensor(t, t.name, shape);
    } else {
      backendInputs[i] = t;
    }
  }

  if (seen.size < sig.requiredInputs.length || sig.requiredInputs.some((n) => !seen.has(n))) {
    const missing = sig.requiredInputs.filter((n) => !seen.has(n));
    const expected =
      sig.requiredInputs.length === sig.inputs.size
        ? String(sig.inputs.size)
        : `between ${sig.requiredInputs.length} and ${sig.inputs.size}`;
    throw withPrefix(
      Errors.inputCount(
        expected,
        seen.size,
        model,
        `Got input(s) [${[...seen].map((n) => `'${n}'`).join(', ')}], but missing required input(s) ` +
        `[${missing.map((n) => `'${n}'`).join(', ')}]. Please provide all required input(s).`,
      ),
      id,
    );
  }

  let requestedNames: string[];
  const outs = request.outputs;
  if (outs && outs.length > 0) {
    requestedNames = new Array(outs.length);
    const seenOut = new Set<string>();
    for (let i = 0; i < outs.length; i++) {
      const name = outs[i]!.name;
      if (seenOut.has(name)) throw withPrefix(Errors.duplicateOutput(name), id);
      seenOut.add(name);
      if (!sig.outputs.has(name)) throw withPrefix(Errors.unknownOutput(name, model), id);
      const k = outs[i]!.classification;
      if (k !== undefined && (!Number.isInteger(k) || k < 1)) {
        throw withPrefix(
          Errors.badParameter(`classification count for output '${name}' must be a positive integer, got ${k}`),
          id,
        );
      }
      requestedNames[i] = name;
    }
  } else {
    requestedNames = sig.outputNames;
  }

  const params = request.parameters ?? {};
  let priority = 0;
  let timeoutUs = 0;
  let correlationId: bigint | string = 0n;
  let flags = 0;
  if (request.parameters) {
    if (params.priority !== undefined) priority = intParam('priority', params.priority, id);
    if (params.timeout !== undefined) timeoutUs = intParam('timeout', params.timeout, id);
    const seq = params.sequence_id;
    if (seq !== undefined) {
      // A string id stays a string, digits or not (Triton: its CORRID control must then be TYPE_STRING).
      if (typeof seq === 'string') correlationId = seq;
      else if (typeof seq === 'bigint') {
        intParam('sequence_id', seq, id); // rejects a negative id
        correlationId = seq; // exact beyond 2^53
      } else correlationId = BigInt(intParam('sequence_id', seq, id));
    }
    for (const [key, bit] of [
      ['sequence_start', 1],
      ['sequence_end', 2],
    ] as const) {
      const v = params[key];
      if (v === undefined) continue;
      if (typeof v !== 'boolean') throw withPrefix(Errors.badParameter(`parameter '${key}' must be a boolean`), id);
      if (v) {
        if (correlationId === 0n || correlationId === '') {
          throw withPrefix(
            Errors.badParameter(`parameter '${key}' requires a non-zero or non-empty 'sequence_id'`),
            id,
          );
        }
        flags |= bit;
      }
    }
  }

  return {
    backendRequest: {
      id: id ?? '',
      inputs: backendInputs,
      requestedOutputs: requestedNames,
      parameters: params,
      batchSize: batching ? Math.max(batchSize, 0) : 1,
      correlationId,
      flags,
      responseSender: sender,
      signal: request.signal,
      jsonOutputs: request.jsonOutputs,
      embeddingText: request.embeddingText,
      trace: request.trace,
    },
    requestedOutputs: outs && outs.length > 0 ? outs : undefined,
    priority,
    timeoutUs,
  };
}
