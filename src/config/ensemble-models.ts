/**
 * Checks an ensemble against the configs of the models its steps call
 * (Triton's ValidateEnsembleConfig): every step model is known, maps name
 * real tensors, every required input is fed, a tensor has one data type and
 * a compatible shape everywhere it appears, batch sizes fit, and no step
 * mixes responses from different decoupled models. Also works out whether
 * the ensemble itself is decoupled and records it in
 * model_transaction_policy.decoupled, as Triton does. Run it once the step
 * models are loaded.
 */
import { create } from '@bufbuild/protobuf';
import {
  DataTypeSchema,
  ModelTransactionPolicySchema,
  type DataType,
  type ModelConfig,
} from '../gen/model_config_pb.js';
import type { ConfigPositions } from './positions.js';
import { ConfigChecker, enumName } from './validate-context.js';

/** Completed config of a step's model and version (-1: latest), or undefined when it is not available. */
export type StepConfigLookup = (modelName: string, version: bigint) => ModelConfig | undefined;

export interface EnsembleModelsResult {
  /** True when any step model is decoupled: the ensemble then is too. */
  decoupled: boolean;
}

class TensorInfo {
  readonly prev: TensorInfo[] = [];
  readonly next: TensorInfo[] = [];
  decoupled = false;
  label = 0;
  visited = false;
  /** Outputs of one step share their decoupled label. */
  sibling: TensorInfo | undefined;

  constructor(
    readonly model: string,
    readonly dataType: DataType | undefined,
    readonly dims: readonly bigint[],
    readonly fullDims: readonly bigint[],
  ) {}

  static of(model: string, batching: boolean, dataType: DataType, dims: readonly bigint[]): TensorInfo {
    return new TensorInfo(model, dataType, dims, batching ? [-1n, ...dims] : dims);
  }

  static symbol(model: string): TensorInfo {
    return new TensorInfo(model, undefined, [], []);
  }
}

function sameDims(a: readonly bigint[], b: readonly bigint[]): boolean {
  return a.length === b.length && a.every((d, i) => d === b[i] || d === -1n || b[i] === -1n);
}

const showDims = (dims: readonly bigint[]) => `[${dims.join(',')}]`;

export function validateEnsembleModels(
  ensemble: ModelConfig,
  configOf: StepConfigLookup,
  where: { file?: string; positions?: ConfigPositions } = {},
): EnsembleModelsResult {
  const scheduling = ensemble.schedulingChoice;
  if (scheduling.case !== 'ensembleScheduling') return { decoupled: false };
  const c = new ConfigChecker(ensemble, where.file, where.positions);
  const name = ensemble.name;
  const steps = scheduling.value.step;

  const configs = steps.map((step) => configOf(step.modelName, step.modelVersion));
  const missing = [
    ...new Set(
      steps
        .filter((_, i) => configs[i] === undefined)
        .map((s) => s.modelName),
    ),
  ];
  if (missing.length > 0) {
    const at = steps.findIndex((_, i) => configs[i] === undefined);
    c.fail(
      `ensemble_scheduling.step[${at}].model_name`,
      `ensemble ${name} contains models that are not available or ambiguous: ${missing.join(', ')}`,
    );
  }

  const tensors = new Map<string, TensorInfo>();
  const batching = ensemble.maxBatchSize > 0;
  for (const io of ensemble.input) {
    tensors.set(io.name, TensorInfo.of(name, batching, io.dataType, io.reshape?.shape ?? io.dims));
  }
  const sink = TensorInfo.symbol(name);
  for (const io of ensemble.output) {
    const t = TensorInfo.of(name, batching, io.dataType, io.reshape?.shape ?? io.dims);
    tensors.set(io.name, t);
    sink.prev.push(t);
    t.next.push(sink);
  }

  const consistent = (path: string, tensorName: string, known: TensorInfo, seen: TensorInfo) => {
    const subject = `in ensemble ${name}, ensemble tensor ${tensorName}: `;
    if (known.dataType !== seen.dataType) {
      c.fail(
        path,
        `${subject}inconsistent data type: ${enumName(DataTypeSchema, known.dataType ?? 0)} is inferred from model ` +
        `${known.model} while ${enumName(DataTypeSchema, seen.dataType ?? 0)} is inferred from model ${seen.model}`,
      );
    }
    if (!sameDims(known.dims, seen.dims) && !sameDims(known.fullDims, seen.fullDims)) {
      c.fail(
        path,
        `${subject}inconsistent shape: ${showDims(known.fullDims)} is inferred from model ` +
        `${known.model} while ${showDims(seen.fullDims)} is inferred from model ${seen.model}`,
      );
    }
  };

  steps.forEach((step, i) => {
    const model = configs[i]!;
    const path = `ensemble_scheduling.step[${i}]`;
    const stepName = step.modelName;
    if (model.maxBatchSize !== 0 && model.maxBatchSize < ensemble.maxBatchSize) {
      c.fail(
        `${path}.model_name`,
        `ensemble ${name} allows maximum batch size ${ensemble.maxBatchSize}, but it contains ` +
        `model ${stepName} which only allows maximum batch size to be ${model.maxBatchSize}`,
      );
    }
    const stepBatching = model.maxBatchSize > 0;
    const inputNames = new Set(model.input.map((io) => io.name));
    for (const [stepTensor, ensembleTensor] of Object.entries(step.inputMap)) {
      if (!inputNames.has(stepTensor)) {
        c.fail(
          `${path}.input_map[${stepTensor}]`,
          `in ensemble ${name}, ensemble tensor ${ensembleTensor} is ` +
          `mapping to non-existing input ${stepTensor} in model ${stepName}`,
        );
      }
    }
    for (const io of model.input) {
      const mapped = Object.entries(step.inputMap).filter(([stepTensor]) => stepTensor === io.name);
      if (mapped.length === 0) {
        if (io.optional) continue;
        c.fail(
          `${path}.input_map`,
          `in ensemble ${name}, input ${io.name} in model ${stepName} is not mapped to any ensemble tensors`,
        );
      }
      const [, ensembleTensor] = mapped[0]!;
      const seen = TensorInfo.of(stepName, stepBatching, io.dataType, io.dims);
      const known = tensors.get(ensembleTensor);
      if (known !== undefined) consistent(`${path}.input_map[${io.name}]`, ensembleTensor, known, seen);
      else tensors.set(ensembleTensor, seen);
    }

    const outputNames = new Set(model.output.map((io) => io.name));
    const sibling = TensorInfo.symbol(stepName);
    for (const [stepTensor, ensembleTensor] of Object.entries(step.outputMap)) {
      if (!outputNames.has(stepTensor)) {
        c.fail(
          `${path}.output_map[${stepTensor}]`,
          `in ensemble ${name}, ensemble tensor ${ensembleTensor} is mapped ` +
          `from non-existing output ${stepTensor} in model ${stepName}`,
        );
      }
      const io = model.output.find((o) => o.name === stepTensor)!;
      const seen = TensorInfo.of(stepName, stepBatching, io.dataType, io.dims);
      let known = tensors.get(ensembleTensor);
      if (known !== undefined) consistent(`${path}.output_map[${stepTensor}]`, ensembleTensor, known, seen);
      else tensors.set(ensembleTensor, (known = seen));
      known.sibling = sibling;
    }

    const decoupled = model.modelTransactionPolicy?.decoupled ?? false;
    for (const ensembleTensor of Object.values(step.outputMap)) {
      const out = tensors.get(ensembleTensor)!;
      out.decoupled = decoupled;
      for (const source of Object.values(step.inputMap)) {
        const prev = tensors.get(source)!;
        out.prev.push(prev);
        prev.next.push(out);
      }
    }
  });

  // Walk the data flow, labelling each tensor with the decoupled step it descends from.
  let label = 0;
  const queue: TensorInfo[] = [];
  for (const io of ensemble.input) {
    const t = tensors.get(io.name)!;
    t.visited = true;
    queue.push(t);
  }
  for (let k = 0; k < queue.length; k++) {
    for (const next of queue[k]!.next) {
      if (next.visited || !next.prev.every((p) => p.visited)) continue;
      const first = next.prev[0]!.label;
      if (next.prev.some((p) => p.label !== first)) {
        c.fail(
          'ensemble_scheduling',
          `in ensemble ${name}, step of model '${next.model}' ` +
          `receives inputs originated from different decoupled models`,
        );
      }
      if (next.sibling !== undefined) {
        if (next.sibling.visited) {
          next.label = next.sibling.label;
        } else {
          next.label = next.decoupled ? ++label : first;
          next.sibling.label = next.label;
          next.sibling.visited = true;
        }
      } else {
        next.label = next.decoupled ? ++label : first;
      }
      next.visited = true;
      queue.push(next);
    }
  }
  const decoupled = label !== 0;
  ensemble.modelTransactionPolicy = create(ModelTransactionPolicySchema, { decoupled });
  return { decoupled };
}

/**
 * A chain of ensembles that leads back to `start` (`[a, b, a]`), or
 * undefined. `configOf` gives any model's config by name.
 */
export function findEnsembleCycle(
  start: string,
  configOf: (modelName: string) => ModelConfig | undefined,
): string[] | undefined {
  const onPath: string[] = [];
  const done = new Set<string>();
  const visit = (model: string): string[] | undefined => {
    const at = onPath.indexOf(model);
    if (at >= 0) return [...onPath.slice(at), model];
    if (done.has(model)) return undefined;
    const config = configOf(model);
    if (config?.schedulingChoice.case !== 'ensembleScheduling') return undefined;
    onPath.push(model);
    for (const step of config.schedulingChoice.value.step) {
      const cycle = visit(step.modelName);
      if (cycle !== undefined) return cycle;
    }
    onPath.pop();
    done.add(model);
    return undefined;
  };
  return visit(start);
}
