/**
 * What loading a repository's models would say, without loading them: the
 * core of `nereid validate`. Each model goes through the first phase of a
 * load (configuration, auto-complete, versions, labels: prepareModel), then,
 * per version, the checks loading makes before it starts anything
 * (checkVersion); an ensemble then gets the dependency checks and the checks
 * against its step models' completed configurations. The messages are the
 * ones a server gives for the same models in its repository index.
 */
import { findEnsembleCycle } from '../config/index.js';
import type { ModelConfig } from '../gen/model_config_pb.js';
import { missingVersionMessage } from '../repository/index.js';
import { Errors } from '../errors.js';
import { checkEnsembleSteps } from './ensembles.js';
import { DependencyErrors, type VersionStatus, dependencyProblem, ensembleDependencies } from './model-dependencies.js';
import {
  type LoaderOptions,
  type PreparedModel,
  checkVersion,
  describeLoadError,
  prepareModel,
} from './model-loader.js';

export interface ModelCheck {
  readonly name: string;
  /** The completed configuration, when it could be resolved. */
  readonly config: ModelConfig | undefined;
  /** Why the model would not load at all, as the repository index says it; '' when its versions would be tried. */
  readonly error: string;
  /** Each version loading would try, with the state and reason the repository index would show. */
  readonly versions: readonly VersionStatus[];
}

interface Checked {
  prepared: PreparedModel | undefined;
  error: string;
  versions: VersionStatus[];
}

/** Checks every model; `models` are the model folders of the repositories, by name. */
export async function checkModels(
  models: ReadonlyArray<{ readonly name: string; readonly dir: string }>,
  options: LoaderOptions,
): Promise<ModelCheck[]> {
  const results = new Map<string, Checked>();
  for (const { name, dir } of models) {
    let prepared: PreparedModel;
    try {
      prepared = await prepareModel(name, dir, options);
    } catch (err) {
      results.set(name, { prepared: undefined, error: describeLoadError(err), versions: [] });
      continue;
    }
    const versions: VersionStatus[] = [];
    for (const version of prepared.selected) {
      const reason = await checkVersion(prepared, version, options);
      versions.push({ version, state: reason === undefined ? 'READY' : 'UNAVAILABLE', reason: reason ?? '' });
    }
    for (const version of prepared.missing) {
      versions.push({ version, state: 'UNAVAILABLE', reason: missingVersionMessage(name, version) });
    }
    results.set(name, { prepared, error: '', versions });
  }

  // Ensembles, once what they depend on is known (dependencies first, as loading goes).
  const done = new Set<string>();
  const checkEnsemble = (name: string): void => {
    if (done.has(name)) return;
    done.add(name);
    const r = results.get(name)!;
    if (r.prepared === undefined || r.error !== '') return;
    const deps = ensembleDependencies(r.prepared.config);
    if (deps.length === 0) return;
    const fail = (message: string): void => {
      r.error = describeLoadError(Errors.config(message));
    };
    const missing = [...new Set(deps.map((d) => d.model))].filter((m) => !results.has(m));
    if (missing.length > 0) return fail(DependencyErrors.missing(name, missing));
    const cycle = findEnsembleCycle(name, (m) => results.get(m)?.prepared?.config);
    if (cycle !== undefined) return fail(DependencyErrors.circular(cycle));
    for (const d of deps) checkEnsemble(d.model);
    const problem = dependencyProblem(name, deps, (m) => results.get(m)!);
    if (problem !== undefined) return fail(problem);
    const serving = new Map(
      deps.map((d) => {
        const dep = results.get(d.model)!;
        const ready = dep.versions.filter((v) => v.state === 'READY');
        return [
          d.model,
          {
            versions: new Map(
              ready.map((v) => [
                v.version,
                { version: v.version, state: 'READY' as const, config: dep.prepared!.config },
              ]),
            ),
          },
        ];
      }),
    );
    try {
      checkEnsembleSteps(r.prepared.config, serving, r.prepared.where);
    } catch (err) {
      r.error = describeLoadError(err);
    }
  };
  for (const name of results.keys()) checkEnsemble(name);

  return [...results].map(([name, r]) => ({
    name,
    config: r.prepared?.config,
    error: r.error,
    versions: r.error ? [] : r.versions,
  }));
}
