/**
 * How a batcher decides when to send: the `batching_policy` and
 * `target_p99_ms` model parameters (docs/batching.md), and the delay tuner
 * that meets a p99 target.
 */
import { Errors } from '../errors.js';

/** adaptive: send as soon as waiting cannot make the batch larger; fixed: Triton's rule, wait the delay. */
export type BatchingPolicy = 'adaptive' | 'fixed';

export interface BatchingSettings {
  readonly policy: BatchingPolicy;
  /** target_p99_ms, when set. */
  readonly targetP99Ms: number | undefined;
}

/** Checks a batching_policy value; `where` names the parameter in the error. */
export function parseBatchingPolicy(raw: string, where: string): BatchingPolicy {
  const v = raw.trim();
  if (v === 'adaptive' || v === 'fixed') return v;
  throw Errors.config(`${where} must be 'adaptive' or 'fixed', got '${raw}'`);
}

/**
 * The server-wide batching_policy from `--backend-config`: the model's
 * backend's own setting, else `default,batching_policy=...`, else a global
 * `batching_policy=...`. Throws naming the flag for a bad value.
 */
export function serverBatchingPolicy(
  backendConfig: Readonly<Record<string, Readonly<Record<string, string>>>>,
  backend: string,
): BatchingPolicy | undefined {
  for (const group of [backend, 'default', '']) {
    const raw = backendConfig[group]?.['batching_policy'];
    if (raw === undefined) continue;
    const flag = group === '' ? '--backend-config=batching_policy' : `--backend-config=${group},batching_policy`;
    return parseBatchingPolicy(raw, flag);
  }
  return undefined;
}

/**
 * The batching settings of a model: its own `parameters` entries, else the
 * server-wide default, else adaptive. Throws a configuration error naming
 * the parameter for a bad value.
 */
export function batchingSettings(
  modelName: string,
  parameters: Readonly<Record<string, { stringValue: string } | undefined>>,
  serverDefault: BatchingPolicy | undefined,
): BatchingSettings {
  const own = parameters['batching_policy']?.stringValue;
  const policy =
    own !== undefined
      ? parseBatchingPolicy(own, `model '${modelName}': parameter 'batching_policy'`)
      : (serverDefault ?? 'adaptive');
  const rawTarget = parameters['target_p99_ms']?.stringValue;
  let targetP99Ms: number | undefined;
  if (rawTarget !== undefined) {
    const t = rawTarget.trim() === '' ? NaN : Number(rawTarget);
    if (!Number.isFinite(t) || t <= 0) {
      throw Errors.config(
        `model '${modelName}': parameter 'target_p99_ms' must be a positive number of milliseconds, got '${rawTarget}'`,
      );
    }
    targetP99Ms = t;
  }
  return { policy, targetP99Ms };
}

/** A window closes after this many latencies, or after WINDOW_NS with at least MIN_SAMPLES. */
const WINDOW_SAMPLES = 1000;
const MIN_SAMPLES = 100;
const WINDOW_NS = 1e9;
/** Below this share of the target the delay grows again. */
const HEADROOM = 0.8;
/** The delay grows by this share of the configured one at a time. */
const GROWTH = 1 / 8;

/**
 * Picks the queue delay, between 0 and the configured one, that meets a p99
 * target at the current load: a longer delay makes larger batches (more
 * throughput), so it keeps the longest that meets the target. Each window of
 * latencies halves the delay when its p99 is over the target and grows it by
 * an eighth of the configured delay when the p99 is well under. A target that
 * even no delay misses is reported once (`unmet`) and the configured delay
 * comes back, until the p99 there meets the target again.
 */
export class DelayTuner {
  /** The delay in effect, ns. */
  delayNs: number;
  /** The target is out of reach at this load; the configured delay is in effect. */
  unmet = false;
  /** The p99 of the last closed window, ns (0: none yet). */
  lastP99Ns = 0;
  private readonly samples = new Float64Array(WINDOW_SAMPLES);
  private count = 0;
  private windowStart: bigint | undefined;
  private reported = false;

  constructor(
    private readonly maxDelayNs: number,
    private readonly targetNs: number,
    /** Told once, the first time the target cannot be met. */
    private readonly onUnmet: (p99Ns: number) => void,
  ) {
    this.delayNs = maxDelayNs;
  }

  /** A request's time in the batcher (queued and executing), finished at `nowNs`. */
  observe(latencyNs: number, nowNs: bigint): void {
    if (this.windowStart === undefined) this.windowStart = nowNs;
    this.samples[this.count++] = latencyNs;
    if (this.count < WINDOW_SAMPLES && (this.count < MIN_SAMPLES || Number(nowNs - this.windowStart) < WINDOW_NS))
      return;
    const sorted = this.samples.subarray(0, this.count).sort();
    const p99 = sorted[Math.ceil(this.count * 0.99) - 1]!;
    this.count = 0;
    this.windowStart = nowNs;
    this.lastP99Ns = p99;
    this.adjust(p99);
  }

  private adjust(p99: number): void {
    if (this.unmet) {
      if (p99 <= this.targetNs) this.unmet = false;
      return;
    }
    if (p99 > this.targetNs) {
      if (this.delayNs > 0) {
        const half = Math.floor(this.delayNs / 2);
        this.delayNs = half < 1000 ? 0 : half;
        return;
      }
      this.unmet = true;
      this.delayNs = this.maxDelayNs;
      if (!this.reported) {
        this.reported = true;
        this.onUnmet(p99);
      }
      return;
    }
    if (p99 < this.targetNs * HEADROOM && this.delayNs < this.maxDelayNs) {
      this.delayNs = Math.min(this.maxDelayNs, this.delayNs + Math.max(1000, Math.round(this.maxDelayNs * GROWTH)));
    }
  }
}
