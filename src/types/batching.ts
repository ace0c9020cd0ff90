/** What a batching scheduler reports to the metrics: the delay it holds batches for, and why batches left. */

/**
 * Why a batch left the queue: `full` (max_batch_size reached, or the next
 * request cannot join), `preferred` (a preferred_batch_size reached),
 * `adaptive` (waiting could not make it larger), `delay` (its oldest request
 * waited the queue delay, or there is none).
 */
export type DispatchReason = 'full' | 'preferred' | 'adaptive' | 'delay';

export const DISPATCH_REASONS: readonly DispatchReason[] = ['full', 'preferred', 'adaptive', 'delay'];

export interface BatchingReport {
  /** The longest a batch waits for more requests now, ns: max_queue_delay_microseconds, or what target_p99_ms chose. */
  readonly delayNs: number;
  /** Batches sent, by reason, indexed as DISPATCH_REASONS. */
  readonly dispatched: readonly number[];
}
