/**
 * Rules for ensembles: every step is complete, and data flows from the
 * ensemble inputs through the steps to every ensemble output with no tensor
 * left dangling (Triton ValidateEnsembleSchedulingConfig).
 */
import type { ModelEnsembling } from '../gen/model_config_pb.js';
import { Platform } from './backend-fields.js';
import type { ConfigChecker } from './validate-context.js';

interface TensorNode {
  readonly name: string;
  /** Where the tensor is first named, for error positions. */
  readonly path: string;
  /** Written by some step. */
  isOutput: boolean;
  ready: boolean;
  /** Tensors this one is computed from (inputs of the step that writes it). */
  readonly from: TensorNode[];
  /** Tensors computed from this one. */
  readonly to: TensorNode[];
}

export function validateEnsemble(c: ConfigChecker, ens: ModelEnsembling): void {
  const { config } = c;
  const model = config.name;
  if (config.platform !== Platform.ensemble) {
    c.fail('ensemble_scheduling', `ensemble scheduling cannot be set for model '${model}' whose platform is not ensemble (platform is "${config.platform}")`);
  }
  if (config.instanceGroup.length !== 0) c.fail('instance_group', `ensemble '${model}' must not have instance_group`);
  if (config.optimization !== undefined) c.fail('optimization', `ensemble '${model}' must not have optimization`);
  if (config.modelWarmup.length !== 0) c.fail('model_warmup', `ensemble '${model}' must not have model_warmup`);
  if (ens.step.length === 0) c.fail('ensemble_scheduling', `ensemble '${model}' must have at least one "step"`);

  const tensors = new Map<string, TensorNode>();
  const node = (name: string, path: string): TensorNode => {
    let n = tensors.get(name);
    if (n === undefined) {
      n = { name, path, isOutput: false, ready: false, from: [], to: [] };
      tensors.set(name, n);
    }
    return n;
  };

  ens.step.forEach((step, i) => {
    const path = `ensemble_scheduling.step[${i}]`;
    if (step.modelName === '') c.fail(path, `ensemble '${model}' step ${i}: "model_name" must be set`);
    const inputs = Object.entries(step.inputMap);
    const outputs = Object.entries(step.outputMap);
    if (inputs.length === 0) c.fail(path, `ensemble '${model}' step ${i}: "input_map" must not be empty`);
    if (outputs.length === 0) c.fail(path, `ensemble '${model}' step ${i}: "output_map" must not be empty`);
    const written: TensorNode[] = [];
    for (const [stepTensor, ensembleTensor] of outputs) {
      const existing = tensors.get(ensembleTensor);
      if (existing?.isOutput) {
        c.fail(
          `${path}.output_map[${stepTensor}]`,
          `ensemble '${model}' step ${i}: ensemble tensor "${ensembleTensor}" is written by more than one step`,
        );
      }
      const n = node(ensembleTensor, `${path}.output_map[${stepTensor}]`);
      n.isOutput = true;
      written.push(n);
    }
    for (const [stepTensor, ensembleTensor] of inputs) {
      const n = node(ensembleTensor, `${path}.input_map[${stepTensor}]`);
      for (const w of written) {
        w.from.push(n);
        n.to.push(w);
      }
    }
  });

  // Walk forward from the ensemble inputs; a tensor is ready once all it depends on is.
  const queue: TensorNode[] = [];
  config.input.forEach((io, i) => {
    const n = tensors.get(io.name);
    if (n === undefined) c.fail(`input[${i}]`, `ensemble '${model}': input "${io.name}" is not used by any step`);
    n.ready = true;
    queue.push(n);
  });
  for (let k = 0; k < queue.length; k++) {
    for (const next of queue[k]!.to) {
      if (next.ready) continue;
      if (next.from.every((p) => p.ready)) {
        next.ready = true;
        queue.push(next);
      }
    }
  }

  const outputs = new Set<string>();
  config.output.forEach((io, i) => {
    const n = tensors.get(io.name);
    if (n === undefined) c.fail(`output[${i}]`, `ensemble '${model}': output "${io.name}" is not produced by any step`);
    if (!n.ready) {
      const missing = firstUnreadySource(n);
      const why = missing !== undefined && missing !== n ? `: it depends on "${missing.name}", which nothing provides` : '';
      c.fail(`output[${i}]`, `ensemble '${model}': output "${io.name}" is never written${why}`);
    }
    outputs.add(io.name);
  });
  for (const n of tensors.values()) {
    if (outputs.has(n.name)) continue;
    if (!n.ready || n.to.length === 0) {
      c.fail(n.path, `ensemble '${model}': tensor "${n.name}" is not used (it is not connected from the inputs to an output)`);
    }
  }
}

/** Follows not-ready dependencies back to where the chain breaks. */
function firstUnreadySource(start: TensorNode): TensorNode | undefined {
  const seen = new Set<string>();
  let last: TensorNode | undefined = start;
  let current: TensorNode | undefined = start;
  while (current !== undefined) {
    const prev: TensorNode | undefined = current.from.find((p) => !p.ready && !seen.has(p.name));
    if (prev === undefined) break;
    seen.add(prev.name);
    last = prev;
    current = prev;
  }
  return last;
}
