/**
 * ensemble_scheduling { max_inflight_requests }: a bound on the requests one
 * step of an ensemble has in flight at once, shared by every request to the
 * ensemble, so a fast early step cannot pile work up in front of a slow later
 * one (backpressure). As in Triton core's StepInflightRequestLimiter, a step
 * holds its slot from the moment it is sent until its model's final response;
 * a step whose request is cancelled while waiting is not held back, and a
 * step that waited 300 s goes anyway (Triton's guard against a deadlock).
 */
import type { CancellationSignal } from '../types/cancellation.js';

/** Triton's kMutexTimeoutSeconds. */
export const STEP_WAIT_LIMIT_MS = 300_000;

class Waiter {
  timer: NodeJS.Timeout | undefined;
  constructor(
    readonly limiter: StepLimiter,
    readonly signal: CancellationSignal | undefined,
    readonly start: () => void,
  ) {}

  /** The request was cancelled while it waited: it goes at once. */
  handleEvent(): void {
    this.limiter.grant(this);
  }
}

export class StepLimiter {
  private inFlight = 0;
  private readonly waiting: Waiter[] = [];

  /** `max` 0: no bound. */
  constructor(readonly max: number) {}

  get active(): number {
    return this.inFlight;
  }

  get queued(): number {
    return this.waiting.length;
  }

  /**
   * Calls `start` once the step may be sent: at once while fewer than `max`
   * are in flight, else when one of them ends. Every call of `start` must be
   * matched by one release().
   */
  acquire(signal: CancellationSignal | undefined, start: () => void): void {
    if (this.max === 0 || (this.inFlight < this.max && this.waiting.length === 0) || signal?.aborted) {
      this.inFlight += 1;
      start();
      return;
    }
    const w = new Waiter(this, signal, start);
    this.waiting.push(w);
    signal?.addEventListener('abort', w);
    w.timer = setTimeout(() => this.grant(w), STEP_WAIT_LIMIT_MS);
    w.timer.unref();
  }

  release(): void {
    if (this.inFlight === 0) return;
    this.inFlight -= 1;
    const next = this.waiting[0];
    if (next !== undefined && this.inFlight < this.max) this.grant(next);
  }

  /** Takes `w` off the queue and starts it (over the bound when it was cancelled or waited too long, as Triton). */
  grant(w: Waiter): void {
    const i = this.waiting.indexOf(w);
    if (i === -1) return;
    this.waiting.splice(i, 1);
    clearTimeout(w.timer);
    w.signal?.removeEventListener('abort', w);
    this.inFlight += 1;
    w.start();
  }
}
