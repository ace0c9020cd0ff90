/**
 * Where a version's ONNX file is: default_model_filename (or model.onnx), itself a file or a folder holding model.onnx.
 */
import { stat } from 'node:fs/promises';
import { join } from 'node:path';
import type { ModelConfig } from '../../gen/model_config_pb.js';

export const DEFAULT_ONNX_FILENAME = 'model.onnx';

/**
 * Absolute path of the ONNX file and its size, or a description of what is
 * missing. A model in a folder may keep its weights in external data files
 * beside it, so its size counts as unknown (Infinity).
 */
export async function resolveModelFile(
  versionDir: string,
  config: ModelConfig,
): Promise<{ path: string; bytes: number } | { missing: string }> {
  const name = config.defaultModelFilename || DEFAULT_ONNX_FILENAME;
  let path = join(versionDir, name);
  let s = await stat(path).catch(() => undefined);
  let inFolder = false;
  if (s?.isDirectory()) {
    path = join(path, DEFAULT_ONNX_FILENAME);
    s = await stat(path).catch(() => undefined);
    inFolder = true;
  }
  if (!s?.isFile()) return { missing: path };
  return { path, bytes: inFolder ? Number.POSITIVE_INFINITY : s.size };
}
