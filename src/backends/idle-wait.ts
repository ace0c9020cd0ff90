/**
 * How a backend's own thread (an onnxruntime session thread, a JavaScript
 * model's worker) waits for its next work once it has none, in steps each
 * cheaper for the thread and dearer for the next run:
 *
 * 1. Spin: under light load (the last work came with nothing else in flight)
 *    it busy-waits for `spin_wait_microseconds`, and work that comes meanwhile
 *    starts at once. Waking a sleeping thread costs tens of microseconds on a
 *    virtual machine, more than a small model's run. But a spinning thread
 *    holds a core the event loop or a local client may need to produce that
 *    work, so it spins only while most recent light-load idle gaps (from going
 *    idle to the next work being handed over) were within the spin; under
 *    load it never does.
 * 2. Doze, where the main thread notifies a shared word when it hands work
 *    over (the onnxruntime ring's tail; a cheaper wake-up than a message):
 *    timed waits of DOZE_STEP_MS for DOZE_MICROS (a step that runs out finds
 *    the work anyway), then one wait of LONG_DOZE_MS, which costs the thread
 *    nothing. The JavaScript worker has no such word and goes to step 3.
 * 3. Sleep in its event loop until the main thread posts it a message.
 *
 * An idle thread thus costs a little CPU for about 2 ms after its last run,
 * and none after that.
 */

/** The spin of step 1 (µs) unless configured; 0 with less than two cores (cpu-budget.ts defaultSpinMicros). */
export const DEFAULT_SPIN_WAIT_MICROS = 300;
const DOZE_MICROS = 2000;
const DOZE_STEP_MS = 0.1;
/**
 * After the short doze steps, one wait of this long (ms) before the thread
 * sleeps: for closed loops whose batch takes the event loop a few
 * milliseconds to answer and refill, which found the thread asleep after most
 * runs, and a notification costs the main thread far less than the message
 * that wakes a sleeping thread.
 */
const LONG_DOZE_MS = 50;

/** hrtime in ns as a number, the same monotonic clock on every thread: what threads stamp hand-overs with. */
export function nowNs(): number {
  const t = process.hrtime();
  return t[0] * 1e9 + t[1];
}

/** The spin of one thread (step 1), learning from the gaps whether it pays. */
export class IdleWait {
  /** Moving share of light-load idle gaps within the spin. */
  private hitRate = 1;
  /** hrtime ns when the thread went idle under light load; 0 when not idle. */
  private idleSinceNs = 0;

  constructor(readonly spinMicros: number) {}

  /** Work handed over at `atNs` (hrtime ns): counts whether the spin would have caught it. */
  arrived(atNs: number): void {
    if (this.idleSinceNs === 0) return;
    const hit = atNs - this.idleSinceNs <= this.spinMicros * 1000 ? 1 : 0;
    this.hitRate = this.hitRate * 0.9 + hit * 0.1;
    this.idleSinceNs = 0;
  }

  /** Work whose hand-over time is unknown: the gap before it is not counted. */
  forget(): void {
    this.idleSinceNs = 0;
  }

  /** The thread ran out of work (`light`: the last came with nothing else in flight); true when it should spin. */
  idle(light: boolean): boolean {
    if (light) this.idleSinceNs = nowNs();
    return this.spinMicros > 0 && light && this.hitRate >= 0.5;
  }

  /** Busy-waits until `poll()` is true or the spin runs out; true when work came. */
  spin(poll: () => boolean): boolean {
    const end = performance.now() + this.spinMicros / 1000;
    do {
      if (poll()) return true;
    } while (performance.now() < end);
    return false;
  }
}

/** Step 2: waits while `word[index]` is `value`; true when it changed (the main thread notified). */
export function doze(word: Int32Array, index: number, value: number): boolean {
  const end = performance.now() + DOZE_MICROS / 1000;
  do {
    if (Atomics.wait(word, index, value, DOZE_STEP_MS) !== 'timed-out') return true;
  } while (performance.now() < end);
  return Atomics.wait(word, index, value, LONG_DOZE_MS) !== 'timed-out';
}
