/** Where a version's ONNX file is: default_model_filename (or model.onnx), itself a file or a folder holding model.onnx. */
import { stat } from 'node:fs/promises';
import { join } from 'node:path';
import type { ModelConfig } from '../../gen/model_config_pb.js';

export const DEFAULT_ONNX_FILENAME = 'model.onnx';

/** Absolute path of the ONNX file, or a description of what is missing. */
export async function resolveModelFile(versionDir: string, config: ModelConfig): Promise<{ path: string } | { missing: string }> {
  const name = config.defaultModelFilename || DEFAULT_ONNX_FILENAME;
  let path = join(versionDir, name);
  let s = await stat(path).catch(() => undefined);
  if (s?.isDirectory()) {
    path = join(path, DEFAULT_ONNX_FILENAME);
    s = await stat(path).catch(() => undefined);
  }
  if (!s?.isFile()) return { missing: path };
  return { path };
}
