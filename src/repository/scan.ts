/** Listing models across repositories and version folders within a model. */
import { readdir } from 'node:fs/promises';
import { join } from 'node:path';
import { createModelSource, isDirectory } from './model-source.js';

export interface FoundModel {
  /** The repository it was found in, as given. */
  repository: string;
  /** Absolute path of the model folder. */
  dir: string;
}

export interface DuplicateModel {
  /** Every repository holding a folder of this name; such a model is not loaded. */
  duplicate: string[];
}

export type RepositoryEntry = FoundModel | DuplicateModel;

/** Triton's reason text for a name found in more than one repository. */
export const DUPLICATE_MODEL_REASON = 'model appears in two or more repositories';

export function isDuplicate(entry: RepositoryEntry): entry is DuplicateModel {
  return 'duplicate' in entry;
}

/** One entry per model folder name across all repositories, sorted by name. */
export async function listModels(repositories: readonly string[]): Promise<Map<string, RepositoryEntry>> {
  const seen = new Map<string, { first: FoundModel; repositories: string[] }>();
  for (const repository of repositories) {
    const source = createModelSource(repository);
    for (const name of await source.listModelNames()) {
      const existing = seen.get(name);
      if (existing !== undefined) {
        existing.repositories.push(repository);
      } else {
        const { dir } = await source.materialize(name);
        seen.set(name, { first: { repository, dir }, repositories: [repository] });
      }
    }
  }
  const models = new Map<string, RepositoryEntry>();
  for (const name of [...seen.keys()].sort()) {
    const found = seen.get(name)!;
    models.set(name, found.repositories.length > 1 ? { duplicate: found.repositories } : found.first);
  }
  return models;
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
