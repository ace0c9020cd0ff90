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
    c.fail(
      'ensemble_scheduling',
      `ensemble scheduling cannot be set for model '${model}' whose ` +
      `platform is not ensemble (platform is "${config.platform}")`,
    );
  }
  if (config.instanceGroup.length !== 0)
    c.fail('instance_group', `instance group should not be specified for ensemble '${model}'`);
  if (config.optimization !== undefined)
    c.fail('optimization', `optimization should not be specified for ensemble '${model}'`);
  if (config.modelWarmup.length !== 0)
    c.fail('model_warmup', `model_warmup can not be specified for ensemble '${model}'`);
  if (ens.step.length === 0) c.fail('ensemble_scheduling', `must specify 'step' for ensemble '${model}'`);

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
    if (step.modelName === '') c.fail(path, `must specify 'model_name' in step ${i} of ensemble '${model}'`);
    const inputs = Object.entries(step.inputMap);
    const outputs = Object.entries(step.outputMap);
    if (inputs.length === 0) c.fail(path, `must specify 'input_map' in step ${i} of ensemble '${model}'`);
    if (outputs.length === 0) c.fail(path, `must specify 'output_map' in step ${i} of ensemble '${model}'`);
    const written: TensorNode[] = [];
    for (const [stepTensor, ensembleTensor] of outputs) {
      const existing = tensors.get(ensembleTensor);
      if (existing?.isOutput) {
        c.fail(
          `${path}.output_map[${stepTensor}]`,
          `ensemble tensor '${ensembleTensor}' can appear in an output map only once for ensemble '${model}' step ${i}`,
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
    // Triton's text, stray quote included: clients and QA scripts match on it.
    if (n === undefined) c.fail(`input[${i}]`, `ensemble input '${io.name}' for ensemble ${model}' is not used`);
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
    if (n === undefined) c.fail(`output[${i}]`, `ensemble output '${io.name}' for ensemble ${model}' is not used`);
    if (!n.ready) {
      const missing = firstUnreadySource(n);
      const why =
        missing !== undefined && missing !== n
          ? `: at least one of its depending tensors, '${missing.name}', is not connected`
          : '';
      c.fail(`output[${i}]`, `output '${io.name}' for ensemble '${model}' is not written${why}`);
    }
    outputs.add(io.name);
  });
  for (const n of tensors.values()) {
    if (outputs.has(n.name)) continue;
    if (!n.ready || n.to.length === 0) {
      c.fail(n.path, `ensemble tensor '${n.name}' is unused in ensemble '${model}'`);
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
