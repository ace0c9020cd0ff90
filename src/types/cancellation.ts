/**
 * Request cancellation. The core only needs `aborted` and abort listeners,
 * so it takes any signal with those members: an AbortSignal works, and so
 * does `Cancellation`, which frontends create per request because an
 * AbortController costs more per request than the rest of the HTTP path
 * (measured: a third of the frontend's throughput).
 */

export type AbortListener = (() => void) | { handleEvent(): void };

export interface CancellationSignal {
  readonly aborted: boolean;
  addEventListener(type: 'abort', listener: AbortListener, options?: { once?: boolean }): void;
  removeEventListener(type: 'abort', listener: AbortListener): void;
}

/** A cancellation signal with fixed fields and no event machinery. Listeners run once, on abort(). */
export class Cancellation implements CancellationSignal {
  aborted = false;
  private listeners: AbortListener[] | undefined;

  addEventListener(_type: 'abort', listener: AbortListener): void {
    if (this.aborted) return; // as AbortSignal: listeners added after the abort are not called
    if (this.listeners === undefined) this.listeners = [listener];
    else this.listeners.push(listener);
  }

  removeEventListener(_type: 'abort', listener: AbortListener): void {
    const ls = this.listeners;
    if (ls === undefined) return;
    const i = ls.indexOf(listener);
    if (i !== -1) ls.splice(i, 1);
  }

  abort(): void {
    if (this.aborted) return;
    this.aborted = true;
    const ls = this.listeners;
    this.listeners = undefined;
    if (ls === undefined) return;
    for (const l of ls) {
      if (typeof l === 'function') l();
      else l.handleEvent();
    }
  }
}
