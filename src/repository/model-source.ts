/**
 * Where model folders come from. A source lists the models of one
 * repository and makes a model's folder available on local disk; the local
 * source simply points at it. Cloud sources (s3://, gs://, as://) would copy
 * the folder down and clean up on release.
 */
import { readdir, stat } from 'node:fs/promises';
import { join, resolve } from 'node:path';
import { Errors } from '../errors.js';

export interface LocalModelDir {
  /** Absolute path of the model folder on this machine. */
  readonly dir: string;
  /** Frees any local copy; a no-op for local repositories. */
  release(): Promise<void>;
}

export interface ModelSource {
  /** The repository as the user wrote it (a path or URL). */
  readonly location: string;
  /** Names of the model folders in the repository, sorted. */
  listModelNames(): Promise<string[]>;
  /** Makes the model's folder available locally. */
  materialize(modelName: string): Promise<LocalModelDir>;
}

export class LocalModelSource implements ModelSource {
  readonly root: string;

  constructor(readonly location: string) {
    this.root = resolve(location);
  }

  async listModelNames(): Promise<string[]> {
    let entries;
    try {
      entries = await readdir(this.root, { withFileTypes: true });
    } catch (err) {
      throw Errors.internal(`failed to read model repository '${this.location}': ${(err as Error).message}`);
    }
    const names: string[] = [];
    for (const entry of entries) {
      // Hidden folders (.git, .ipynb_checkpoints) are never models.
      if (entry.name.startsWith('.')) continue;
      if (entry.isDirectory() || (entry.isSymbolicLink() && (await isDirectory(join(this.root, entry.name))))) {
        names.push(entry.name);
      }
    }
    return names.sort();
  }

  async materialize(modelName: string): Promise<LocalModelDir> {
    const dir = join(this.root, modelName);
    if (!(await isDirectory(dir))) {
      throw Errors.internal(`model folder '${modelName}' is not in repository '${this.location}'`);
    }
    return { dir, release: async () => {} };
  }
}

const REMOTE_SCHEMES = ['s3://', 'gs://', 'as://'];

/** The source for a `--model-repository` value. */
export function createModelSource(repository: string): ModelSource {
  const remote = REMOTE_SCHEMES.find((scheme) => repository.startsWith(scheme));
  if (remote !== undefined) {
    throw Errors.unsupported(`model repositories at ${remote} are not supported yet: '${repository}'`);
  }
  return new LocalModelSource(repository);
}

export async function isDirectory(path: string): Promise<boolean> {
  try {
    return (await stat(path)).isDirectory();
  } catch {
    return false;
  }
}
