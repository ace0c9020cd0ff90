/**
 * V8's garbage collections on demand, for code that knows memory just became
 * garbage: the frontends after a burst of large bodies (frontends/memory-reclaim.ts),
 * the model pager before it unloads a model for room (model-pager.ts).
 */
import v8 from 'node:v8';
import vm from 'node:vm';

export type Collect = () => void;

let collector: Collect | null | undefined;

/**
 * A full garbage collection: the process's own `gc` when Node runs with
 * --expose-gc, else V8's, exposed just long enough to take a reference to it
 * (so that worker threads started later, running model code, do not see it).
 * Undefined when the engine offers none.
 */
export function fullCollection(): Collect | undefined {
  if (collector === undefined) {
    const own = (globalThis as { gc?: unknown }).gc;
    if (typeof own === 'function') {
      collector = own as Collect;
    } else {
      try {
        v8.setFlagsFromString('--expose-gc');
        const gc = vm.runInNewContext('gc') as unknown;
        collector = typeof gc === 'function' ? (gc as Collect) : null;
      } catch {
        collector = null;
      } finally {
        v8.setFlagsFromString('--no-expose-gc');
      }
    }
  }
  return collector ?? undefined;
}

/**
 * A collection that also gives back what V8 keeps for reuse: since Node 24
 * (V8 13) the young generation grows to 128 MiB under a burst and, once shrunk,
 * keeps its pages resident in a pool that only a memory-reducing collection
 * (V8's last resort, what a low-memory notification runs) empties.
 */
export function memoryReducingCollection(): Collect | undefined {
  const gc = fullCollection() as ((options?: { type: string; execution: string; flavor: string }) => void) | undefined;
  if (gc === undefined) return undefined;
  return () => {
    gc(); // what Node 20's engine, which runs the option below as less than a full collection, needs
    gc({ type: 'major', execution: 'sync', flavor: 'last-resort' });
  };
}
