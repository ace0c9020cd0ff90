/**
 * Limits failed key checks per client address: after `limit` failures
 * within a minute an address is refused (429 / RESOURCE_EXHAUSTED) until
 * the oldest of them is a minute old, so guessing keys costs a minute per
 * `limit` guesses. A sliding window over each address's last `limit`
 * failure times; the table of addresses is bounded.
 */

export const FAILURE_WINDOW_MS = 60_000;
/** Addresses remembered at most; when full, those with no failure in the window go first, then the oldest. */
const MAX_ADDRESSES = 10_000;

export class FailureLimiter {
  /** Per address, its last failure times (ms), oldest first, at most `limit` of them. */
  private readonly failures = new Map<string, number[]>();

  constructor(
    /** Failures a minute an address may have before it is refused; 0 means no limit. */
    readonly limit: number,
    private readonly now: () => number = Date.now,
  ) {}

  /** Seconds `address` must wait before a key is checked for it again; 0 when it need not. */
  retryAfterSecs(address: string): number {
    if (this.limit <= 0 || this.failures.size === 0) return 0;
    const wait = this.limitedUntil(address) - this.now();
    return wait <= 0 ? 0 : Math.ceil(wait / 1000);
  }

  /** When (ms since the epoch) `address` may be checked again, once it has reached the limit; else 0. */
  limitedUntil(address: string): number {
    const times = this.failures.get(address);
    if (times === undefined || times.length < this.limit || this.limit <= 0) return 0;
    return times[0]! + FAILURE_WINDOW_MS;
  }

  /** The addresses refused now, with when each may be checked again. */
  limited(): Array<[address: string, untilMs: number]> {
    const now = this.now();
    const out: Array<[string, number]> = [];
    for (const address of this.failures.keys()) {
      const until = this.limitedUntil(address);
      if (until > now) out.push([address, until]);
    }
    return out;
  }

  /** Counts a failed check from `address`; true when this failure makes it reach the limit. */
  record(address: string): boolean {
    if (this.limit <= 0) return false;
    let times = this.failures.get(address);
    if (times === undefined) {
      if (this.failures.size >= MAX_ADDRESSES) this.evict();
      times = [];
      this.failures.set(address, times);
    }
    times.push(this.now());
    if (times.length > this.limit) times.shift();
    return times.length === this.limit && this.retryAfterSecs(address) > 0;
  }

  /** Addresses remembered (for tests and the bound). */
  get size(): number {
    return this.failures.size;
  }

  private evict(): void {
    const cutoff = this.now() - FAILURE_WINDOW_MS;
    for (const [address, times] of this.failures) {
      if (times[times.length - 1]! <= cutoff) this.failures.delete(address);
    }
    // Still full: forget the addresses seen first (a Map iterates in insertion order).
    let excess = this.failures.size - Math.floor(MAX_ADDRESSES * 0.9);
    for (const address of this.failures.keys()) {
      if (excess-- <= 0) break;
      this.failures.delete(address);
    }
  }
}
