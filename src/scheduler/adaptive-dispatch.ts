/**
 * The adaptive half of batch dispatch, as a pure unit: given the arrivals it
 * was told of and the time it is given, it says whether a batch that Triton's
 * rule would hold for its queue delay should go now, because waiting cannot
 * make it larger. The rule and its reasons: docs/batching.md.
 */

/** Arrival instants kept for the rate estimate. */
const RATE_SAMPLES = 32;
/** Arrivals older than this say nothing about the rate. */
const RATE_WINDOW_NS = 1e9;
/** How long one period of the in-system high-water mark lasts. */
export const CONCURRENCY_PERIOD_NS = 10e6;
/**
 * The rate's prediction may send a batch early only while the batches have
 * been smaller than this (expectedBatch): at higher load the delay is what
 * fills them, and a pause inside a closed loop's wave would split it.
 */
export const SMALL_BATCH = 4;
/** Weight of the newest batch in expectedBatch. */
const BATCH_WEIGHT = 1 / 8;

export class AdaptiveDispatch {
  /** Arrival instants, ns after `origin`, in a ring. */
  private readonly arrivals = new Float64Array(RATE_SAMPLES);
  private arrivalCount = 0;
  private newest = -1;
  private readonly origin: bigint;
  /** Most requests in the system seen in the current period, and in the period before it. */
  private periodStart = 0;
  private periodMax = 0;
  private previousMax = 0;
  private readonly gaps = new Float64Array(RATE_SAMPLES - 1);
  /** Recent batch sizes (requests), exponentially weighted; 1 after a period without arrivals. */
  private expected = 1;

  constructor(originNs: bigint) {
    this.origin = originNs;
  }

  /**
   * A request arrived at `nowNs`; `inSystem` counts the requests queued or
   * executing, it included. `answered` counts those answered earlier in the
   * same event-loop turn: their clients cannot have sent again yet, so they
   * count towards the high-water mark (a batch that ran and was answered
   * within the turn would otherwise hide them, and the mark could never
   * grow past the batches sent at it).
   */
  arrived(nowNs: bigint, inSystem: number, answered = 0): void {
    const t = Number(nowNs - this.origin);
    // Nobody came for a whole period: the load is light again, whatever the batches were.
    if (this.arrivalCount > 0 && t - this.arrivals[this.newest]! >= CONCURRENCY_PERIOD_NS) this.expected = 1;
    this.newest = (this.newest + 1) % RATE_SAMPLES;
    this.arrivals[this.newest] = t;
    if (this.arrivalCount < RATE_SAMPLES) this.arrivalCount += 1;
    this.observe(t, inSystem + answered);
  }

  /** A batch of `requests` left for an instance, for whatever reason. */
  sent(requests: number): void {
    this.expected += (requests - this.expected) * BATCH_WEIGHT;
  }

  /** The recent batches' size, exponentially weighted (1 at the start and after a quiet period). */
  get expectedBatch(): number {
    return this.expected;
  }

  /**
   * For a batch that would otherwise wait until `deadlineNs`, on an idle
   * instance with nothing else queued: 0n to send it now, or the instant to
   * ask again (at most `deadlineNs`, when the delay runs out anyway).
   * `inSystem` counts the requests queued or executing.
   */
  decide(nowNs: bigint, deadlineNs: bigint, inSystem: number): bigint {
    const now = Number(nowNs - this.origin);
    this.observe(now, inSystem);
    if (this.allHere(inSystem)) return 0n;
    // High load: wait as configured (a closed loop's full wave still goes at once, above).
    if (this.expected >= SMALL_BATCH) return deadlineNs;
    const deadline = Number(deadlineNs - this.origin);
    const gap = this.typicalGap(now);
    const last = this.arrivalCount > 0 ? this.arrivals[this.newest]! : now;
    // The next arrival, predicted: one typical gap away, and not sooner than the quiet so far suggests.
    if (now + Math.max(gap, now - last) >= deadline) return 0n;
    // Ask again when either estimate reaches past the deadline.
    const again = Math.min(deadline - gap, (last + deadline) / 2, deadline);
    return this.origin + BigInt(Math.ceil(again));
  }

  /**
   * A closed loop: as many requests are with us (`inSystem`, queued or
   * executing) as the most there were in the last period, and no more came
   * since; their clients wait on our answer, so nobody else is coming.
   */
  allHere(inSystem: number): boolean {
    return this.previousMax > 0 && inSystem >= this.previousMax && this.periodMax <= this.previousMax;
  }

  /**
   * The median gap between the recent arrivals, ns; Infinity with fewer than
   * two in the window. The median, not the mean: a closed loop's arrivals
   * come in waves, and the long gap between two waves says nothing about
   * when the next request of this wave comes.
   */
  typicalGap(now: number): number {
    let n = 0;
    let later = 0;
    for (let k = 0; k < this.arrivalCount; k++) {
      const t = this.arrivals[(this.newest - k + RATE_SAMPLES) % RATE_SAMPLES]!;
      if (now - t > RATE_WINDOW_NS) break;
      if (k > 0) this.gaps[n - 1] = later - t;
      later = t;
      n += 1;
    }
    if (n < 2) return Infinity;
    const gaps = this.gaps.subarray(0, n - 1).sort();
    const m = gaps.length >> 1;
    return gaps.length % 2 === 1 ? gaps[m]! : (gaps[m - 1]! + gaps[m]!) / 2;
  }

  private observe(now: number, inSystem: number): void {
    if (now - this.periodStart >= CONCURRENCY_PERIOD_NS) {
      this.previousMax = this.periodMax;
      this.periodMax = 0;
      this.periodStart = now;
    }
    if (inSystem > this.periodMax) this.periodMax = inSystem;
  }
}
