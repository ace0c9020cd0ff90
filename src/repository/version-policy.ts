/** Which version folders a model's version_policy serves. */
import type { ModelVersionPolicy } from '../gen/model_config_pb.js';

export interface VersionSelection {
  /** Versions to load, ascending. */
  versions: number[];
  /** Versions named by a `specific` policy that have no folder. */
  missing: number[];
}

/**
 * latest { num_versions: n } (n = 1 when no policy is set) serves the n
 * highest; all (or an empty policy) serves every version; specific serves
 * the listed versions that exist.
 */
export function selectVersions(policy: ModelVersionPolicy | undefined, available: readonly number[]): number[] {
  return selectVersionsDetailed(policy, available).versions;
}

export function selectVersionsDetailed(
  policy: ModelVersionPolicy | undefined,
  available: readonly number[],
): VersionSelection {
  const sorted = [...new Set(available)].sort((a, b) => a - b);
  const choice = policy?.policyChoice;
  if (choice === undefined) return { versions: sorted.slice(-1), missing: [] };
  switch (choice.case) {
    case 'latest': {
      const n = choice.value.numVersions;
      return { versions: n === 0 ? [] : sorted.slice(-n), missing: [] };
    }
    case 'specific': {
      const present = new Set(sorted);
      const wanted = [...new Set(choice.value.versions.map(Number))].sort((a, b) => a - b);
      return {
        versions: wanted.filter((v) => present.has(v)),
        missing: wanted.filter((v) => !present.has(v)),
      };
    }
    default:
      return { versions: sorted, missing: [] };
  }
}

/** Triton's log text for a specific version with no folder. */
export function missingVersionMessage(modelName: string, version: number): string {
  return `version ${version} is specified for model '${modelName}', but the version directory is not present`;
}
