/**
 * Which models a model depends on. An ensemble depends on the models its
 * steps name; everything else depends on nothing. The model repository
 * manager loads dependencies before their dependents, serves a dependent only
 * while its dependencies serve, and reports problems with Triton's wording.
 */
import type { ModelConfig } from '../gen/model_config_pb.js';

export interface ModelDependency {
  /** The model depended on. */
  readonly model: string;
  /** A required version, or -1 for whichever version serves. */
  readonly version: number;
}

/** Finds the dependencies named by a completed configuration. */
export type DependencyResolver = (config: ModelConfig) => ModelDependency[];

/** The default: the composing models of an ensemble's steps, each named once. */
export function ensembleDependencies(config: ModelConfig): ModelDependency[] {
  if (config.schedulingChoice.case !== 'ensembleScheduling') return [];
  const seen = new Set<string>();
  const out: ModelDependency[] = [];
  for (const step of config.schedulingChoice.value.step) {
    const version = Number(step.modelVersion);
    const key = `${step.modelName}\u0000${version}`;
    if (step.modelName === '' || seen.has(key)) continue;
    seen.add(key);
    out.push({ model: step.modelName, version });
  }
  return out;
}

/** Triton's texts for dependency failures. */
export const DependencyErrors = {
  missing: (model: string, names: readonly string[]) =>
    `ensemble ${model} contains models that are not available or ambiguous: ${names.join(', ')}`,
  invalid: (model: string, dep: string, why: string) =>
    `ensemble '${model}' depends on '${dep}' which is not valid. Model '${dep}' failed with error: ${why}`,
  noLoadedVersion: (model: string, dep: string) => `ensemble '${model}' depends on '${dep}' which has no loaded version.`,
  versionNotLoaded: (model: string, dep: string, version: number) =>
    `ensemble '${model}' depends on '${dep}' whose required version ${version} is not loaded.`,
  circular: (chain: readonly string[]) =>
    `circular dependency between ensembles: ${chain[0]} -> ... -> ${chain[chain.length - 2]} -> ${chain[chain.length - 1]}`,
};
