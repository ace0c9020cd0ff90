/**
 * The checks every response of a JavaScript model passes before it leaves
 * the worker thread: its outputs are outputs of the configuration, with the
 * configured datatype and a shape the configured dims allow (the request's
 * batch size first when the model batches), and every requested output is
 * there. A response that fails gets an error naming the output and what is
 * wrong; the other responses of the batch are unaffected.
 */
import type { ParameterValue } from '../backend.js';
import { shapeToString } from '../../tensor/datatype.js';
import type { OutputSpec, WireRequest } from './protocol.js';
import { type StagedTensor, TensorError, stageTensor } from './tensors.js';

export type CheckedResponse =
  | {
      readonly outputs: readonly StagedTensor[];
      readonly parameters?: Record<string, ParameterValue>;
      readonly error?: undefined;
    }
  | { readonly error: string; readonly outputs?: undefined };

function shapeFits(shape: readonly number[], expected: readonly number[]): boolean {
  if (shape.length !== expected.length) return false;
  for (let i = 0; i < shape.length; i++) if (expected[i] !== -1 && expected[i] !== shape[i]) return false;
  return true;
}

/** The text of an `{ error }` a model returned: a string, or an Error's message. */
export function errorText(error: unknown): string {
  if (typeof error === 'string') return error;
  if (error instanceof Error) return error.message;
  if (error !== null && typeof error === 'object' && typeof (error as { message?: unknown }).message === 'string') {
    return (error as { message: string }).message;
  }
  return String(error);
}

function checkParameters(value: unknown): Record<string, ParameterValue> {
  if (value === null || typeof value !== 'object' || Array.isArray(value)) {
    throw new TensorError(
      `parameters must be an object of strings, numbers and booleans, not ${JSON.stringify(value)}`,
    );
  }
  const out: Record<string, ParameterValue> = {};
  for (const [k, v] of Object.entries(value)) {
    if (typeof v !== 'string' && typeof v !== 'number' && typeof v !== 'boolean' && typeof v !== 'bigint') {
      throw new TensorError(
        `parameter '${k}' is ${v === null ? 'null' : typeof v}; parameters are strings, numbers or booleans`,
      );
    }
    out[k] = v;
  }
  return out;
}

export class OutputChecker {
  private readonly specs = new Map<string, OutputSpec>();

  constructor(
    outputs: readonly OutputSpec[],
    private readonly maxBatchSize: number,
  ) {
    for (const o of outputs) this.specs.set(o.name, o);
  }

  /** One response of execute() for `request` (`index` in the batch, for messages). */
  check(index: number, request: WireRequest, response: unknown): CheckedResponse {
    const where = `response ${index}`;
    if (response === null || typeof response !== 'object') {
      return {
        error: `execute() returned ${response === null ? 'null' : typeof response} ` +
          `as ${where}; each response is { outputs: [...] } or { error: 'message' }`,
      };
    }
    const r = response as { outputs?: unknown; error?: unknown; parameters?: unknown };
    if (r.error !== undefined && r.error !== null) return { error: errorText(r.error) };
    if (!Array.isArray(r.outputs)) {
      return {
        error: `execute() returned ${where} without an outputs array; ` +
          `each response is { outputs: [...] } or { error: 'message' }`,
      };
    }
    try {
      const byName = new Map<string, StagedTensor>();
      for (let k = 0; k < r.outputs.length; k++) {
        const value = r.outputs[k] as { name?: unknown } | null | undefined;
        const name = value && typeof value === 'object' ? value.name : undefined;
        const spec = typeof name === 'string' ? this.specs.get(name) : undefined;
        if (typeof name === 'string' && !spec) {
          throw new TensorError(
            `output '${name}' is not an output in the model configuration ` +
            `(outputs: ${[...this.specs.keys()].map((n) => `'${n}'`).join(', ')})`,
          );
        }
        const t = stageTensor('output', k, value, spec?.datatype);
        if (t.datatype !== spec!.datatype) {
          throw new TensorError(
            `output '${t.name}' has datatype ${t.datatype}, but the model configuration declares ${spec!.datatype}`,
          );
        }
        const expected = this.maxBatchSize > 0 ? [request.batchSize, ...spec!.dims] : spec!.dims;
        if (!shapeFits(t.shape, expected)) {
          throw new TensorError(
            `output '${t.name}' has shape ${shapeToString(t.shape)}, but ` +
            `the model configuration expects ${shapeToString(expected)}` +
              (this.maxBatchSize > 0 ? ` (the request's batch size ${request.batchSize} first)` : ''),
          );
        }
        if (byName.has(t.name)) throw new TensorError(`output '${t.name}' appears twice`);
        byName.set(t.name, t);
      }
      const outputs: StagedTensor[] = [];
      for (const name of request.requestedOutputs) {
        const t = byName.get(name);
        if (!t) throw new TensorError(`requested output '${name}' is missing`);
        outputs.push(t);
      }
      if (r.parameters !== undefined) return { outputs, parameters: checkParameters(r.parameters) };
      return { outputs };
    } catch (err) {
      if (err instanceof TensorError) return { error: `execute() ${where}: ${err.message}` };
      throw err;
    }
  }
}
