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
  noLoadedVersion: (model: string, dep: string) =>
    `ensemble '${model}' depends on '${dep}' which has no loaded version.`,
  versionNotLoaded: (model: string, dep: string, version: number) =>
    `ensemble '${model}' depends on '${dep}' whose required version ${version} is not loaded.`,
  circular: (chain: readonly string[]) =>
    `circular dependency between ensembles: ${chain[0]} -> ... ` +
    `-> ${chain[chain.length - 2]} -> ${chain[chain.length - 1]}`,
};

/** The reason a version that was unloaded on request carries (not a failure). */
export const UNLOADED = 'unloaded';

/** A version as the dependency checks and the repository index see it. */
export interface VersionStatus {
  readonly version: number;
  readonly state: string;
  readonly reason: string;
}

/** Where a model stands once its load was tried: a model-wide error, else its versions. */
export interface LoadStatus {
  readonly error: string;
  readonly versions: Iterable<VersionStatus>;
}

/** Why a model with these versions does not fully serve, in the repository index's words. */
export function versionFailures(versions: readonly VersionStatus[]): string {
  return versions.map((v) => `version ${v.version} is at ${v.state} state: ${v.reason};`).join('');
}

/**
 * The first problem with a model's dependencies once their loads were tried
 * (Triton's texts), or undefined when each serves what is required.
 */
export function dependencyProblem(
  model: string,
  deps: readonly ModelDependency[],
  statusOf: (name: string) => LoadStatus,
): string | undefined {
  for (const d of deps) {
    const dep = statusOf(d.model);
    if (dep.error) return DependencyErrors.invalid(model, d.model, dep.error);
    const versions = [...dep.versions];
    const ready = versions.filter((v) => v.state === 'READY');
    if (ready.length === 0) {
      const why = versions.map((v) => v.reason).filter((r) => r !== '' && r !== UNLOADED);
      const base = DependencyErrors.noLoadedVersion(model, d.model);
      return why.length > 0 ? `${base} Model '${d.model}' loading failed with error: ${why.join('; ')}` : base;
    }
    if (d.version !== -1 && !ready.some((v) => v.version === d.version)) {
      return DependencyErrors.versionNotLoaded(model, d.model, d.version);
    }
  }
  return undefined;
}
