import { readFile } from 'node:fs/promises';
import { basename, join } from 'node:path';
import { create } from '@bufbuild/protobuf';
import { ModelConfigSchema, type ModelConfig } from '../gen/model_config_pb.js';
import { ConfigError } from './errors.js';
import { parseModelConfigWithPositions } from './parse.js';
import type { ConfigPositions } from './positions.js';

export const CONFIG_FILE_NAME = 'config.pbtxt';
/** Folder of alternative configs picked by `--model-config-name`. */
export const CONFIG_FOLDER_NAME = 'configs';

export interface ReadModelConfigOptions {
  /** `--model-config-name`: use `configs/<name>.pbtxt` when it exists. */
  modelConfigName?: string;
  /**
   * The model's name in display paths; by default the folder's own name (cached and override copies name theirs
   * otherwise).
   */
  modelName?: string;
}

export interface ModelConfigSource {
  config: ModelConfig;
  /** Display path relative to the repository, e.g. `resnet/config.pbtxt`; absent when there is no file. */
  file?: string;
  /** Absolute path of the file that was read. */
  path?: string;
  positions?: ConfigPositions;
}

/**
 * Reads a model's config.pbtxt (or `configs/<name>.pbtxt`). A model with no
 * config file gets an empty config, for auto-complete to fill in.
 */
export async function readModelConfig(modelDir: string, opts: ReadModelConfigOptions = {}): Promise<ModelConfigSource> {
  const model = opts.modelName ?? basename(modelDir);
  const candidates: Array<{ path: string; file: string }> = [];
  if (opts.modelConfigName) {
    const name = `${opts.modelConfigName}.pbtxt`;
    candidates.push({ path: join(modelDir, CONFIG_FOLDER_NAME, name), file: `${model}/${CONFIG_FOLDER_NAME}/${name}` });
  }
  candidates.push({ path: join(modelDir, CONFIG_FILE_NAME), file: `${model}/${CONFIG_FILE_NAME}` });

  for (const candidate of candidates) {
    let text: string;
    try {
      text = await readFile(candidate.path, 'utf8');
    } catch (err) {
      const code = (err as NodeJS.ErrnoException).code;
      if (code === 'ENOENT') continue;
      const why = code === 'EISDIR' ? 'it is a directory, not a file' : (err as Error).message;
      throw new ConfigError(`cannot read the model configuration: ${why}`, { file: candidate.file });
    }
    // Editors on Windows may save a byte-order mark; it is not part of the text format.
    if (text.charCodeAt(0) === 0xfeff) text = text.slice(1);
    const { config, positions } = parseModelConfigWithPositions(text, candidate.file);
    return { config, file: candidate.file, path: candidate.path, positions };
  }
  return { config: create(ModelConfigSchema) };
}
