/**
 * What the load tool needs to know about a model, read from its metadata and
 * configuration JSON (the same fields perf_analyzer's model parser reads).
 */
import { type Datatype, isDatatype } from '../../tensor/datatype.js';
import { PerfError } from './errors.js';

export interface ModelTensorInfo {
  readonly name: string;
  readonly datatype: Datatype;
  /** Shape of one batch element (no batch dimension); -1 for dims that --shape did not fill. */
  readonly shape: readonly number[];
  /** The shape the model declares for one batch element (-1 for variable dims). */
  readonly declaredShape: readonly number[];
  readonly isShapeTensor: boolean;
  readonly optional: boolean;
}

export type SchedulerType = 'none' | 'dynamic' | 'sequence' | 'ensemble' | 'ensemble_sequence';

export interface ComposingModel {
  readonly name: string;
  /** '' when the step says -1 (latest). */
  readonly version: string;
}

export interface ModelInfo {
  readonly name: string;
  /** As given with -x ('' for latest). */
  readonly version: string;
  readonly maxBatchSize: number;
  readonly decoupled: boolean;
  readonly responseCacheEnabled: boolean;
  readonly schedulerType: SchedulerType;
  /** Inputs sorted by name, as perf_analyzer orders them. */
  readonly inputs: readonly ModelTensorInfo[];
  readonly outputs: readonly ModelTensorInfo[];
  readonly composingModels: readonly ComposingModel[];
}

type Json = Record<string, unknown>;

function asObject(v: unknown): Json | undefined {
  return v !== null && typeof v === 'object' && !Array.isArray(v) ? (v as Json) : undefined;
}

/** perf_analyzer accepts numbers or numeric strings (int64 fields may come as strings). */
function asInt(v: unknown, what: string): number {
  if (typeof v === 'number' && Number.isInteger(v)) return v;
  if (typeof v === 'string' && /^-?\d+$/.test(v)) return Number.parseInt(v, 10);
  throw new PerfError('failed to create model parser', `${what} is not an integer: ${JSON.stringify(v)}`);
}

function tensorList(
  list: unknown,
  maxBatchSize: number,
  what: 'inputs' | 'outputs',
): Array<{ name: string; datatype: Datatype; shape: number[] }> {
  if (list === undefined) return [];
  if (!Array.isArray(list)) throw new PerfError('failed to create model parser', `metadata '${what}' is not an array`);
  return list.map((entry) => {
    const t = asObject(entry);
    if (!t || typeof t['name'] !== 'string' || typeof t['datatype'] !== 'string' || !Array.isArray(t['shape'])) {
      throw new PerfError('failed to create model parser', `metadata '${what}' has a malformed entry`);
    }
    const name = t['name'];
    const datatype = t['datatype'];
    if (!isDatatype(datatype)) {
      throw new PerfError('failed to create model parser', `tensor '${name}' has unsupported datatype '${datatype}'`);
    }
    const dims = (t['shape'] as unknown[]).map((d) => asInt(d, `shape of '${name}'`));
    // The metadata shape carries the batch dimension first when the model batches.
    return { name, datatype, shape: maxBatchSize > 0 ? dims.slice(1) : dims };
  });
}

/**
 * Builds ModelInfo from the metadata and config JSON documents. `shapes` are
 * the --shape values: they fill variable (-1) dims; one naming an input the
 * model does not have is an error.
 */
export function parseModel(
  metadata: unknown,
  config: unknown,
  version: string,
  shapes: ReadonlyMap<string, readonly number[]>,
): ModelInfo {
  const md = asObject(metadata);
  const cfg = asObject(config);
  if (!md || typeof md['name'] !== 'string')
    throw new PerfError('failed to get model metadata', 'response has no model name');
  if (!cfg) throw new PerfError('failed to get model config', 'response is not a JSON object');
  const name = md['name'];

  const maxBatchSize = cfg['max_batch_size'] === undefined ? 0 : asInt(cfg['max_batch_size'], 'max_batch_size');
  const txn = asObject(cfg['model_transaction_policy']);
  const decoupled = txn?.['decoupled'] === true;
  const cache = asObject(cfg['response_cache']);
  const responseCacheEnabled = cache?.['enable'] === true;

  let schedulerType: SchedulerType = 'none';
  const composingModels: ComposingModel[] = [];
  if (cfg['platform'] === 'ensemble') {
    schedulerType = 'ensemble';
    const steps = asObject(cfg['ensemble_scheduling'])?.['step'];
    if (Array.isArray(steps)) {
      for (const s of steps) {
        const step = asObject(s);
        if (!step || typeof step['model_name'] !== 'string') continue;
        const v = step['model_version'] === undefined ? -1 : asInt(step['model_version'], 'model_version');
        if (!composingModels.some((c) => c.name === step['model_name'])) {
          composingModels.push({ name: step['model_name'], version: v === -1 ? '' : String(v) });
        }
      }
    }
  } else if (cfg['sequence_batching'] !== undefined) {
    schedulerType = 'sequence';
  } else if (cfg['dynamic_batching'] !== undefined) {
    schedulerType = 'dynamic';
  }

  const configInputs = new Map<string, Json>();
  if (Array.isArray(cfg['input'])) {
    for (const i of cfg['input']) {
      const inp = asObject(i);
      if (inp && typeof inp['name'] === 'string') configInputs.set(inp['name'], inp);
    }
  }

  const metaInputs = tensorList(md['inputs'], maxBatchSize, 'inputs');
  for (const shapeName of shapes.keys()) {
    if (!metaInputs.some((i) => i.name === shapeName)) {
      const known = metaInputs.map((i) => i.name).join(', ') || '(none)';
      throw new PerfError(
        'failed to create model parser',
        `--shape names input '${shapeName}', but model '${name}' has no such input (inputs: ${known})`,
      );
    }
  }
  const inputs: ModelTensorInfo[] = metaInputs.map((t) => {
    const user = shapes.get(t.name);
    let shape = t.shape;
    if (user && t.shape.includes(-1)) shape = [...user];
    const ci = configInputs.get(t.name);
    return {
      name: t.name,
      datatype: t.datatype,
      shape,
      declaredShape: t.shape,
      isShapeTensor: ci?.['is_shape_tensor'] === true,
      optional: ci?.['optional'] === true,
    };
  });
  inputs.sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));

  const outputs: ModelTensorInfo[] = tensorList(md['outputs'], maxBatchSize, 'outputs').map((t) => ({
    ...t,
    declaredShape: t.shape,
    isShapeTensor: false,
    optional: false,
  }));
  outputs.sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));

  return {
    name,
    version,
    maxBatchSize,
    decoupled,
    responseCacheEnabled,
    schedulerType,
    inputs,
    outputs,
    composingModels,
  };
}
