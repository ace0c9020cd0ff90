/**
 * Loaded into the server under test with `node --import` by bench/hostile.ts:
 * writes the process's own memory figures (V8 heap, external, ArrayBuffers)
 * to the file named by NEREID_BENCH_MEMORY_FILE every half second, so the
 * bench can tell JavaScript memory from native memory without touching the
 * server's code. With --expose-gc it collects garbage first.
 */
import { writeFileSync } from 'node:fs';

const file = process.env.NEREID_BENCH_MEMORY_FILE;
if (file !== undefined && file !== '') {
  const gc = (globalThis as { gc?: () => void }).gc;
  const timer = setInterval(() => {
    gc?.();
    const m = process.memoryUsage();
    writeFileSync(file, JSON.stringify({ at: Date.now(), ...m }));
  }, 500);
  timer.unref();
}
