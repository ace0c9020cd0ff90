/**
 * Load-time overrides (the repository extension's load parameters): a
 * `config` JSON replacing config.pbtxt, and `file:<path>` contents that make
 * up the model folder. As in Triton, a load with file overrides does not read
 * the repository at all: its model folder is a fresh temporary folder holding
 * exactly the given files, kept while a version loaded from it exists, and it
 * needs a `config`.
 */
import { mkdir, mkdtemp, rm, stat, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { modelConfigFromJson } from '../config/index.js';
import { Errors } from '../errors.js';

export const FILE_PREFIX = 'file:';

/** Checks a model name the way Triton does before a load. */
export function validateModelName(name: string): void {
  const trimmed = name.trim();
  if (trimmed === '') throw Errors.invalidModelName('Model name cannot be empty. Please enter a valid name to deploy.');
  if (trimmed === '..' || trimmed.includes('/')) {
    throw Errors.invalidModelName(
      `invalid model name '${name}', model name must not contain path traversal characters`,
    );
  }
}

/** Parses the config override early, so a bad one fails the request before anything changes. */
export function checkConfigOverride(model: string, config: string): void {
  try {
    modelConfigFromJson(config);
  } catch (err) {
    throw Errors.pollFailed(model, `Invalid config override: ${(err as Error).message}`);
  }
}

export interface OverrideFolder {
  readonly dir: string;
  remove(): Promise<void>;
}

/**
 * Writes the `file:` overrides into a new temporary folder. Every path must
 * stay inside it; an error names the parameter at fault.
 */
export async function writeOverrideFolder(
  model: string,
  files: Readonly<Record<string, Uint8Array>>,
): Promise<OverrideFolder> {
  const safe = model.replace(/[^A-Za-z0-9_.-]/g, '_').slice(0, 64);
  const dir = await mkdtemp(path.join(tmpdir(), `nereid-override-${safe}-`));
  const remove = () => rm(dir, { recursive: true, force: true });
  try {
    for (const key of Object.keys(files).sort()) {
      const relative = key.slice(FILE_PREFIX.length);
      const target = path.resolve(dir, relative);
      if (relative === '' || !target.startsWith(dir + path.sep)) {
        throw Errors.pollFailed(
          model,
          `Invalid file parameter '${key}' with normalized path '${target}' must stay within model directory.`,
        );
      }
      const parent = path.dirname(target);
      const existing = await stat(parent).catch(() => undefined);
      if (existing && !existing.isDirectory()) {
        throw Errors.pollFailed(model, `Invalid file parameter '${key}', directory has been created as a file`);
      }
      try {
        await mkdir(parent, { recursive: true });
        await writeFile(target, files[key]!);
      } catch (err) {
        throw Errors.pollFailed(
          model,
          `Invalid file parameter '${key}': ${(err as NodeJS.ErrnoException).code ?? (err as Error).message}`,
        );
      }
    }
  } catch (err) {
    await remove();
    throw err;
  }
  return { dir, remove };
}
