/**
 * The time a batcher decides by: now, and wake-ups at an instant. The server
 * uses hrtime; tests drive a batcher in simulated time with their own clock.
 */
import { performance } from 'node:perf_hooks';

/** A wake-up at an instant; re-arming for an earlier one moves it, for a later one does nothing. */
export interface Wake {
  arm(atNs: bigint): void;
  cancel(): void;
}

export interface BatcherClock {
  now(): bigint;
  /** A wake-up that calls `fire` when its armed instant is reached. */
  wake(fire: () => void): Wake;
}

/**
 * Which iteration of the event loop this is (libuv's loop count): callbacks
 * with the same number ran in one turn, between two polls of the sockets.
 * Reading it costs a few tens of nanoseconds; an immediate queued to mark a
 * turn's end costs about a microsecond and a half of the loop's time.
 */
export function eventLoopTurn(): number {
  return performance.nodeTiming.uvMetricsInfo.loopCount;
}

/** Node's largest timer delay; longer waits re-arm. */
const MAX_TIMER_MS = 2 ** 31 - 1;
/** Below this much time left a wake-up polls hrtime on each event-loop turn instead of sleeping. */
const POLL_BELOW_NS = 1_500_000;

/**
 * Wakes at an hrtime instant. Node timers are millisecond grained (a
 * setTimeout of 0.1 ms fires after 1 ms or more), so the last stretch is
 * polled against hrtime once per event-loop turn (setImmediate): a
 * sub-millisecond delay is met within a turn, and the polling only runs while
 * a batch is waiting. See docs/batching.md, "The batcher's own cost".
 */
export class HrtimeWake implements Wake {
  private atNs = 0n;
  private timer: NodeJS.Timeout | undefined;
  private immediate: NodeJS.Immediate | undefined;
  private readonly tick: () => void;

  constructor(private readonly fire: () => void) {
    this.tick = this.onTick.bind(this);
  }

  arm(atNs: bigint): void {
    if (this.atNs !== 0n && this.atNs <= atNs) return;
    this.cancel();
    this.atNs = atNs;
    this.onTick();
  }

  cancel(): void {
    this.atNs = 0n;
    if (this.timer) clearTimeout(this.timer);
    if (this.immediate) clearImmediate(this.immediate);
    this.timer = undefined;
    this.immediate = undefined;
  }

  private onTick(): void {
    this.timer = undefined;
    this.immediate = undefined;
    if (this.atNs === 0n) return;
    const remainingNs = Number(this.atNs - process.hrtime.bigint());
    if (remainingNs <= 0) {
      this.atNs = 0n;
      this.fire();
    } else if (remainingNs > POLL_BELOW_NS) {
      // Sleep to within about a millisecond of the instant, then poll.
      this.timer = setTimeout(this.tick, Math.min(Math.floor(remainingNs / 1e6) - 1, MAX_TIMER_MS));
    } else {
      this.immediate = setImmediate(this.tick);
    }
  }
}

export const hrtimeClock: BatcherClock = {
  now: () => process.hrtime.bigint(),
  wake: (fire) => new HrtimeWake(fire),
};
