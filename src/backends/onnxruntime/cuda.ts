/**
 * Whether onnxruntime-node can run on a GPU here. Its CUDA execution
 * provider is a separate library that npm installs only on request, so the
 * check looks for that library beside the native binding instead of letting
 * session creation fail with a loader error.
 */
import { existsSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';

export interface CudaAvailability {
  readonly available: boolean;
  /** Why not, when not available. */
  readonly reason: string;
}

export type CudaProbe = () => CudaAvailability;

let cached: CudaAvailability | undefined;

export const probeCuda: CudaProbe = () => {
  cached ??= detect();
  return cached;
};

function detect(): CudaAvailability {
  if (process.platform !== 'linux' && process.platform !== 'win32') {
    return { available: false, reason: `onnxruntime-node has no CUDA build for ${process.platform}` };
  }
  let pkgDir: string;
  try {
    const require = createRequire(import.meta.url);
    pkgDir = dirname(dirname(require.resolve('onnxruntime-node')));
  } catch {
    return { available: false, reason: 'onnxruntime-node is not installed' };
  }
  const lib = process.platform === 'win32' ? 'onnxruntime_providers_cuda.dll' : 'libonnxruntime_providers_cuda.so';
  const binDir = join(pkgDir, 'bin', 'napi-v6', process.platform, process.arch);
  if (!existsSync(join(binDir, lib))) {
    return {
      available: false,
      reason: `${lib} is not installed beside onnxruntime-node (install it ` +
        `with ONNXRUNTIME_NODE_INSTALL=cuda12 on a machine with CUDA 12)`,
    };
  }
  return { available: true, reason: '' };
}
