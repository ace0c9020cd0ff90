/**
 * Where model folders come from. A source lists the models of one
 * repository, tells cheaply whether a model's files changed, and makes a
 * model's folder available on local disk. The local source points at the
 * folder; the cloud sources (s3://, gs://, as://) copy it into a cache.
 */
import { readdir, stat } from 'node:fs/promises';
import { join, resolve } from 'node:path';
import type { Logger } from 'pino';
import { Errors } from '../errors.js';
import { fingerprintDir } from './change-detection.js';
import { silentLogger } from '../logger.js';
import { remoteScheme, createRemoteModelSource } from './remote-source.js';

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
  /**
   * A value that changes whenever a file of the model is added, removed or
   * rewritten. Cheap: it reads listings and file metadata, never contents,
   * and downloads nothing.
   */
  fingerprint(modelName: string): Promise<string>;
  /** Makes the model's folder available locally. */
  materialize(modelName: string): Promise<LocalModelDir>;
  /** Releases clients and connections. */
  close(): Promise<void>;
}

export interface ModelSourceOptions {
  /**
   * Folder for local copies of cloud models (`--model-cache-dir`). Defaults to
   * NEREID_MODEL_CACHE_DIR, then the scheme's TRITON_*_MOUNT_DIRECTORY, then
   * `nereid-model-cache` under the OS temp folder.
   */
  cacheDir?: string;
  logger?: Logger;
  /** Environment to read credentials and endpoints from (default process.env). */
  env?: NodeJS.ProcessEnv;
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

  async fingerprint(modelName: string): Promise<string> {
    return fingerprintDir(join(this.root, modelName));
  }

  async materialize(modelName: string): Promise<LocalModelDir> {
    const dir = join(this.root, modelName);
    if (!(await isDirectory(dir))) {
      throw Errors.internal(`model folder '${modelName}' is not in repository '${this.location}'`);
    }
    return { dir, release: async () => {} };
  }

  async close(): Promise<void> {}
}

/** True for `s3://`, `gs://` and `as://` locations. */
export function isRemoteRepository(repository: string): boolean {
  return remoteScheme(repository) !== undefined;
}

/**
 * The source for a `--model-repository` value. A malformed cloud URL throws
 * NRD_REPOSITORY_URL here; an unreachable store fails on first use.
 */
export function createModelSource(repository: string, options: ModelSourceOptions = {}): ModelSource {
  if (isRemoteRepository(repository)) {
    return createRemoteModelSource(repository, {
      cacheDir: options.cacheDir,
      logger: options.logger ?? silentLogger,
      env: options.env ?? process.env,
    });
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
