/** Time as the measurement code sees it; tests pass a manual clock. */
import { setTimeout as delay } from 'node:timers/promises';

export interface Clock {
  /** Monotonic time in nanoseconds (a float; only differences matter). */
  nowNs(): number;
  sleep(ms: number): Promise<void>;
}

export const systemClock: Clock = {
  nowNs: () => performance.now() * 1e6,
  sleep: (ms: number) => delay(ms),
};
