/**
 * Per-window accumulation of completed requests: exact latencies (kept so
 * percentiles use perf_analyzer's rank rule) and the client library timing
 * sums behind "Avg HTTP time" (send / response wait / receive).
 */

export class WindowRecorder {
  private latencies: Float64Array;
  /** Completed requests recorded in this window. */
  count = 0;
  /** Requests that a request-rate schedule issued late. */
  delayed = 0;
  sumSendNs = 0;
  sumReceiveNs = 0;
  sumRequestNs = 0;

  constructor(initialCapacity = 1024) {
    this.latencies = new Float64Array(initialCapacity);
  }

  record(startNs: number, endNs: number, sendNs: number, receiveNs: number, delayed: boolean): void {
    if (this.count === this.latencies.length) {
      const grown = new Float64Array(this.latencies.length * 2);
      grown.set(this.latencies);
      this.latencies = grown;
    }
    const latency = endNs - startNs;
    this.latencies[this.count++] = latency;
    this.sumRequestNs += latency;
    this.sumSendNs += sendNs;
    this.sumReceiveNs += receiveNs;
    if (delayed) this.delayed++;
  }

  /** The recorded latencies (ns), in completion order. A view: do not keep it past the next record(). */
  latencyView(): Float64Array {
    return this.latencies.subarray(0, this.count);
  }
}
