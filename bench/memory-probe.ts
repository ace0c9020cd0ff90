/**
 * Loaded into the server under test with `node --import` by bench/hostile.ts:
 * writes the process's own memory figures (V8 heap, external, ArrayBuffers)
 * to the file named by NEREID_BENCH_MEMORY_FILE every half second, so the
 * bench can tell JavaScript memory from native memory without touching the
 * server's code. Worker threads inherit the option and load the probe too:
 * each writes its own isolate's heap to the file with `.thread-ID` appended,
 * so the main thread's figures are not overwritten by a worker's.
 *
 * When the bench creates the file with `.collect` appended, the main thread
 * runs one full garbage collection (and deletes the file): the bench asks for
 * it before reading the start, so that the start holds no garbage. With
 * --expose-gc every reading collects first.
 */
import { existsSync, rmSync, writeFileSync } from 'node:fs';
import v8 from 'node:v8';
import vm from 'node:vm';
import { isMainThread, threadId } from 'node:worker_threads';

/** V8's collector, exposed only long enough to take a reference to it. */
function collector(): (() => void) | undefined {
  const own = (globalThis as { gc?: () => void }).gc;
  if (own !== undefined) return own;
  try {
    v8.setFlagsFromString('--expose-gc');
    return vm.runInNewContext('gc') as () => void;
  } finally {
    v8.setFlagsFromString('--no-expose-gc');
  }
}

const file = process.env.NEREID_BENCH_MEMORY_FILE;
if (file !== undefined && file !== '') {
  const always = (globalThis as { gc?: () => void }).gc;
  const onRequest = isMainThread ? collector() : undefined;
  const target = isMainThread ? file : `${file}.thread-${threadId}`;
  const timer = setInterval(() => {
    always?.();
    if (onRequest !== undefined && existsSync(`${file}.collect`)) {
      rmSync(`${file}.collect`, { force: true });
      onRequest();
    }
    // A worker's process.memoryUsage() reports the process's RSS but its own isolate's heap.
    const m = process.memoryUsage();
    const newSpace = v8.getHeapSpaceStatistics().find((s) => s.space_name === 'new_space');
    writeFileSync(target, JSON.stringify({ at: Date.now(), ...m, newSpace: newSpace?.space_size ?? 0 }));
  }, 500);
  timer.unref();
}
