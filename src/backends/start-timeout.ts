/** Waiting, with a time limit, for a worker thread or a child process to say it has started. */

/** What the starting worker settles once: ready, or failed. */
export interface StartWaiter {
  resolve(): void;
  reject(err: Error): void;
}

/**
 * Settles when the waiter given to `install` is settled, or rejects with `timedOut()` after `ms` and then runs
 * `onTimeout` (to stop what was started).
 */
export function waitForStart(
  ms: number,
  timedOut: () => Error,
  onTimeout: () => void,
  install: (waiter: StartWaiter) => void,
): Promise<void> {
  return new Promise<void>((resolve, reject) => {
    const timer = setTimeout(() => {
      reject(timedOut());
      onTimeout();
    }, ms);
    install({
      resolve: () => {
        clearTimeout(timer);
        resolve();
      },
      reject: (e) => {
        clearTimeout(timer);
        reject(e);
      },
    });
  });
}
