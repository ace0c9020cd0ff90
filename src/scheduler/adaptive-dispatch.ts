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
/** Runs in the estimate of a batch's own cost (batchCost), exponentially weighted. */
const RUN_SAMPLES = 32;
/** Return times kept (answer to the next arrival while answered clients are out). */
const RETURN_SAMPLES = 16;

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
  /**
   * Requests answered that no arrival has matched yet: in a closed loop, the
   * clients out with an answer, who come back. Forgotten after a period.
   */
  private awaited = 0;
  private lastAnswer = -Infinity;
  /** How long after an answer the arrivals that matched it came, ns, in a ring. */
  private readonly returns = new Float64Array(RETURN_SAMPLES);
  private returnCount = 0;
  private returnNext = 0;
  /** Runs of batches sent to an idle instance, exponentially weighted: E[n], E[t], E[n²], E[nt] (ns). */
  private runs = 0;
  private meanN = 0;
  private meanT = 0;
  private meanNN = 0;
  private meanNT = 0;

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
    // Nobody came for a whole period: the load is light again, whatever the batches were, and the
    // high-water mark and return times are of a loop that has ended (a new one's first request would go alone).
    if (this.arrivalCount > 0 && t - this.arrivals[this.newest]! >= CONCURRENCY_PERIOD_NS) {
      this.expected = 1;
      this.periodMax = 0;
      this.previousMax = 0;
      this.awaited = 0;
      this.returnCount = 0;
      this.returnNext = 0;
    }
    if (this.awaited > 0) {
      if (t - this.lastAnswer >= CONCURRENCY_PERIOD_NS) {
        this.awaited = 0;
      } else {
        this.awaited -= 1;
        this.returns[this.returnNext] = t - this.lastAnswer;
        this.returnNext = (this.returnNext + 1) % RETURN_SAMPLES;
        if (this.returnCount < RETURN_SAMPLES) this.returnCount += 1;
      }
    }
    this.newest = (this.newest + 1) % RATE_SAMPLES;
    this.arrivals[this.newest] = t;
    if (this.arrivalCount < RATE_SAMPLES) this.arrivalCount += 1;
    this.observe(t, inSystem + answered);
  }

  /** A batch of `requests` left for an instance, for whatever reason. */
  sent(requests: number): void {
    this.expected += (requests - this.expected) * BATCH_WEIGHT;
  }

  /** `requests` were answered at `nowNs`: their clients, if they wait on us, come back. */
  answered(nowNs: bigint, requests: number): void {
    this.lastAnswer = Number(nowNs - this.origin);
    // No more are out than the most there were with us (a client that left is not counted for ever).
    this.awaited = Math.min(this.awaited + requests, Math.max(this.previousMax, this.periodMax));
  }

  /**
   * A batch of `requests` sent to an idle instance was answered `ns` after it
   * left: the run time and the hand-over both ways.
   */
  ran(requests: number, ns: number): void {
    const w = this.runs < RUN_SAMPLES ? 1 / ++this.runs : 1 / RUN_SAMPLES;
    this.meanN += (requests - this.meanN) * w;
    this.meanT += (ns - this.meanT) * w;
    this.meanNN += (requests * requests - this.meanNN) * w;
    this.meanNT += (requests * ns - this.meanNT) * w;
  }

  /**
   * What a batch costs whatever its size, ns: the intercept of its run time
   * against its size (a line through the recent runs); 0 until their sizes
   * have varied enough to tell.
   */
  get batchCost(): number {
    if (this.runs === 0) return 0;
    const variance = this.meanNN - this.meanN * this.meanN;
    if (variance < 0.25) return 0;
    const slope = (this.meanNT - this.meanN * this.meanT) / variance;
    return Math.min(this.meanT, Math.max(0, this.meanT - slope * this.meanN));
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
    const back = this.returning(now, deadlineNs);
    if (back !== 0n) return back;
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
   * Clients just answered are on their way back in time to join: the instant
   * until which to wait for them (at most `deadlineNs`), or 0n. The last to
   * come back of a closed loop are its slowest, so they are expected by the
   * longest recent return time after the last answer (and given a quarter
   * more). Waiting is worth it when that idles the instance for less than a
   * batch's own cost (batchCost), which one batch instead of two saves: a
   * wave that the rate's prediction would send in parts goes whole
   * (docs/batching.md).
   */
  returning(now: number, deadlineNs: bigint): bigint {
    if (this.awaited === 0 || this.returnCount < 2) return 0n;
    let back = 0;
    for (let i = 0; i < this.returnCount; i++) back = Math.max(back, this.returns[i]!);
    const deadline = Number(deadlineNs - this.origin);
    const until = this.lastAnswer + back * 1.25;
    if (this.lastAnswer + back > deadline || back > this.batchCost || now >= until) return 0n;
    return until >= deadline ? deadlineNs : this.origin + BigInt(Math.ceil(until));
  }

  /** Clients answered and not back yet (closed loops; see returning). */
  get out(): number {
    return this.awaited;
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
