/**
 * Latencies since the last look, as a log-scale histogram with four buckets
 * per power of two (about 19 % wide): adding one costs a few integer
 * operations, memory is fixed, and `take()` gives the window's quantiles.
 * The dashboard reads one per model version each second.
 */

const SUB = 4;
/** 2^40 ns is about 18 minutes: anything longer lands in the last bucket. */
const BUCKETS = 40 * SUB;

export interface LatencySummary {
  count: number;
  /** Quantiles in microseconds (0 when count is 0). */
  p50Us: number;
  p99Us: number;
}

export class LatencyWindow {
  private readonly counts = new Uint32Array(BUCKETS);
  private total = 0;

  add(ns: number): void {
    const v = ns < 1 ? 1 : ns;
    const exp = Math.floor(Math.log2(v));
    const frac = Math.floor((v / 2 ** exp - 1) * SUB);
    const i = Math.min(BUCKETS - 1, exp * SUB + frac);
    this.counts[i]! += 1;
    this.total += 1;
  }

  /** The window's count and quantiles (each a bucket's upper edge), then an empty window. */
  take(): LatencySummary {
    const count = this.total;
    if (count === 0) return { count: 0, p50Us: 0, p99Us: 0 };
    const p50Us = this.quantile(0.5);
    const p99Us = this.quantile(0.99);
    this.counts.fill(0);
    this.total = 0;
    return { count, p50Us, p99Us };
  }

  private quantile(q: number): number {
    const rank = Math.ceil(q * this.total);
    let seen = 0;
    for (let i = 0; i < BUCKETS; i++) {
      seen += this.counts[i]!;
      if (seen >= rank) {
        const exp = Math.floor(i / SUB);
        const upperNs = 2 ** exp * (1 + ((i % SUB) + 1) / SUB);
        return Math.round(upperNs / 1000);
      }
    }
    return 0;
  }
}
