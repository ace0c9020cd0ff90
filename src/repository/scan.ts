/** Listing models across repositories and version folders within a model. */
import { readdir } from 'node:fs/promises';
import { join } from 'node:path';
import type { Logger } from 'pino';
import { asNereidError } from '../errors.js';
import { silentLogger } from '../logger.js';
import {
  LocalModelSource,
  createModelSource,
  isDirectory,
  type ModelSource,
  type ModelSourceOptions,
} from './model-source.js';

export interface FoundModel {
  /** The repository it was found in, as given. */
  repository: string;
  /**
   * Absolute path of the model folder (for cloud repositories, its copy in
   * the download cache). `ModelSources.get(repository).fingerprint(name)`
   * tells cheaply whether the model changed since.
   */
  dir: string;
}

export interface DuplicateModel {
  /** Every repository holding a folder of this name; such a model is not loaded. */
  duplicate: string[];
}

/**
 * A model of a cloud repository that was listed but not copied (a listing
 * with `copy: false`): `ModelSources.get(repository).materialize(name)`
 * copies it when it is loaded.
 */
export interface ListedModel {
  repository: string;
  notCopied: true;
}

export type RepositoryEntry = FoundModel | DuplicateModel | ListedModel;

export function isNotCopied(entry: RepositoryEntry): entry is ListedModel {
  return 'notCopied' in entry;
}

export interface ListOptions {
  /**
   * Copy every model of a cloud repository into the download cache (the
   * default). Without, cloud models are only listed, from object listings
   * alone (explicit mode copies a model when it is loaded); local folders
   * are always found in place.
   */
  copy?: boolean;
}

/** A repository (or one model of it) that could not be listed or copied. */
export interface RepositoryFailure {
  repository: string;
  model?: string;
  message: string;
}

/**
 * The models of all repositories by name. `failures` names the repositories
 * that could not be read this time; a repository that was read before keeps
 * its previous models (a store that is briefly unreachable unloads nothing).
 */
export class RepositoryListing extends Map<string, RepositoryEntry> {
  readonly failures: RepositoryFailure[] = [];
}

/** Triton's reason text for a name found in more than one repository. */
export const DUPLICATE_MODEL_REASON = 'model appears in two or more repositories';

export function isDuplicate(entry: RepositoryEntry): entry is DuplicateModel {
  return 'duplicate' in entry;
}

/** Models copied from the stores at once. */
const MATERIALIZE_CONCURRENCY = 8;

/**
 * The sources of a server's repositories, kept across polls so that clients,
 * connections and the last good listing of each are reused.
 */
export class ModelSources {
  private readonly sources = new Map<string, ModelSource>();
  private readonly lastGood = new Map<string, Map<string, string>>();
  readonly logger: Logger;

  constructor(private readonly options: ModelSourceOptions = {}) {
    this.logger = options.logger ?? silentLogger;
  }

  /** The source of a repository; a malformed URL throws NRD_REPOSITORY_URL. */
  get(repository: string): ModelSource {
    let source = this.sources.get(repository);
    if (!source) {
      source = createModelSource(repository, this.options);
      this.sources.set(repository, source);
    }
    return source;
  }

  /** @internal the folders last listed for a repository. */
  previous(repository: string): Map<string, string> | undefined {
    return this.lastGood.get(repository);
  }

  /** @internal */
  remember(repository: string, dirs: Map<string, string>): void {
    this.lastGood.set(repository, dirs);
  }

  async close(): Promise<void> {
    const all = [...this.sources.values()];
    this.sources.clear();
    await Promise.all(all.map((s) => s.close().catch(() => undefined)));
  }
}

/** One entry per model folder name across all repositories, sorted by name. */
export async function listModels(
  repositories: readonly string[],
  sources: ModelSources = new ModelSources(),
  options: ListOptions = {},
): Promise<RepositoryListing> {
  const copy = options.copy ?? true;
  const listing = new RepositoryListing();
  const names = new Map<string, string[]>();
  const perRepository = new Map<
    string,
    { source: ModelSource; names: string[] } | { stale: Map<string, string>; source: ModelSource }
  >();
  for (const repository of repositories) {
    let source: ModelSource;
    try {
      source = sources.get(repository);
      const found = await source.listModelNames();
      perRepository.set(repository, { source, names: found });
      for (const name of found) names.set(name, [...(names.get(name) ?? []), repository]);
    } catch (err) {
      const message = asNereidError(err).message;
      listing.failures.push({ repository, message });
      const stale = sources.previous(repository);
      sources.logger.error(
        { repository, reason: message },
        stale ? 'model repository not readable; its models stay as they were' : 'model repository not readable',
      );
      if (stale) {
        perRepository.set(repository, { stale, source: sources.get(repository) });
        for (const name of stale.keys()) names.set(name, [...(names.get(name) ?? []), repository]);
      }
    }
  }
  const jobs: Array<{ name: string; repository: string; source: ModelSource; stale?: string }> = [];
  const notCopied = new Map<string, string>();
  for (const [name, where] of names) {
    if (where.length > 1) continue;
    const repository = where[0]!;
    const r = perRepository.get(repository)!;
    if (!copy && !(r.source instanceof LocalModelSource)) {
      notCopied.set(name, repository);
      continue;
    }
    jobs.push({ name, repository, source: r.source, stale: 'stale' in r ? r.stale.get(name) : undefined });
  }
  const dirs = new Map<string, string>();
  let next = 0;
  const worker = async (): Promise<void> => {
    while (next < jobs.length) {
      const job = jobs[next++]!;
      if (job.stale !== undefined) {
        dirs.set(job.name, job.stale);
        continue;
      }
      try {
        dirs.set(job.name, (await job.source.materialize(job.name)).dir);
      } catch (err) {
        const message = asNereidError(err).message;
        const before = sources.previous(job.repository)?.get(job.name);
        listing.failures.push({ repository: job.repository, model: job.name, message });
        sources.logger.error(
          { repository: job.repository, model: job.name, reason: message },
          'model could not be copied from its repository',
        );
        if (before !== undefined) dirs.set(job.name, before);
      }
    }
  };
  await Promise.all(Array.from({ length: Math.min(MATERIALIZE_CONCURRENCY, jobs.length) }, worker));
  const byRepository = new Map<string, Map<string, string>>();
  for (const job of jobs) {
    const dir = dirs.get(job.name);
    if (dir === undefined) continue;
    let m = byRepository.get(job.repository);
    if (!m) byRepository.set(job.repository, (m = new Map()));
    m.set(job.name, dir);
  }
  for (const [repository, r] of perRepository) {
    // A listing that copied nothing of a cloud repository leaves its last good copies as they were.
    if (!('stale' in r) && (copy || r.source instanceof LocalModelSource))
      sources.remember(repository, byRepository.get(repository) ?? new Map());
  }
  for (const name of [...names.keys()].sort()) {
    const where = names.get(name)!;
    if (where.length > 1) {
      listing.set(name, { duplicate: where });
      continue;
    }
    const dir = dirs.get(name);
    if (dir !== undefined) listing.set(name, { repository: where[0]!, dir });
    else if (notCopied.has(name)) listing.set(name, { repository: where[0]!, notCopied: true });
  }
  return listing;
}

/** Folders that hold other things than versions. */
const NON_VERSION_FOLDERS = new Set(['configs', 'warmup', 'initial_state']);

/**
 * Version numbers of a model folder, ascending. Version folders are decimal
 * digits; a name longer than one character starting with '0' (`01`) is
 * ignored, as Triton does, but `0` is version 0.
 */
export async function listVersions(modelDir: string): Promise<number[]> {
  let entries;
  try {
    entries = await readdir(modelDir, { withFileTypes: true });
  } catch {
    return [];
  }
  const versions: number[] = [];
  for (const entry of entries) {
    const name = entry.name;
    if (NON_VERSION_FOLDERS.has(name) || !/^\d+$/.test(name)) continue;
    if (name.length > 1 && name.startsWith('0')) continue;
    const isDir = entry.isDirectory() || (entry.isSymbolicLink() && (await isDirectory(join(modelDir, name))));
    if (!isDir) continue;
    const version = Number(name);
    if (Number.isSafeInteger(version)) versions.push(version);
  }
  return versions.sort((a, b) => a - b);
}

/** Names of every subfolder of a model folder (what auto-complete probes), sorted. */
export async function listSubfolders(modelDir: string): Promise<string[]> {
  let entries;
  try {
    entries = await readdir(modelDir, { withFileTypes: true });
  } catch {
    return [];
  }
  const names: string[] = [];
  for (const entry of entries) {
    if (entry.isDirectory() || (entry.isSymbolicLink() && (await isDirectory(join(modelDir, entry.name))))) {
      names.push(entry.name);
    }
  }
  return names.sort();
}
