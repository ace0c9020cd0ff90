/** The paging benchmarks' models (bench/paging.ts writes them, bench/paging-memory.ts reuses them). */
import path from 'node:path';
import { benchModelsDir } from './models.js';

/**
 * 4.7 M weights (19 MB of file): onnxruntime holds about 40 MB for it once it serves. 256→1792→1792→16 held
 * 28-32 MiB once main-thread sessions stopped copying the weights, below the paging bench's 40 MB a model.
 */
export const LAYERS = [256, 2048, 2048, 16];

/** Where they are written; the shape is in the name, so models of an earlier shape are not reused. */
export function pagingModelsDir(): string {
  return path.join(benchModelsDir(), `paging-${LAYERS.join('x')}`);
}
