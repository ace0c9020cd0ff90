/**
 * Inline execution: runs of a model that are shorter than the crossing to
 * its session thread run on the event loop instead, in a session the model
 * keeps on the main thread.
 *
 * onnxruntime-node's InferenceSession.run is a synchronous native call on
 * the calling thread (its promise only defers the call with setImmediate), so
 * a run on the main thread blocks the event loop for exactly its duration,
 * while onnxruntime's own intra-op threads (if any) help it. For a small
 * model (tens of microseconds) that is less than handing the run to the
 * session thread and being told it finished: the arena copy, the ring, the
 * wake-up of the thread and the message back through the event loop.
 *
 * The choice is the server's, per run, from measured run times:
 * - Every run is timed, on the session thread or inline. The times are kept
 *   per size class, a run's size being the input elements it carries (all
 *   inputs of all the batch's requests: with variable dims the batch size
 *   alone would not tell a long run from a short one), in classes 1, 2-3,
 *   4-7, ...; the last RUN_SAMPLES of each, and a run is predicted to take
 *   their 90th percentile (a bigger class's figure bounds a smaller run; a
 *   smaller class's figure, scaled by the size, bounds a bigger one).
 * - The crossing is timed on runs handed to an idle session thread: from
 *   handing the run over to holding its outputs, less the run itself.
 * - A run goes inline when its prediction is within the crossing (at least
 *   MIN_INLINE_NS, at most MAX_INLINE_NS, whatever the crossing measures)
 *   and the session thread has nothing in flight (runs stay in order). A
 *   run that turns out long moves the figure, and the next runs of that
 *   size go to the thread: no prediction exceeds MAX_INLINE_NS inline
 *   (LIGHT_INLINE_NS while requests come one at a time, below).
 * - A run of a single request stays on the thread: on the thread it runs on
 *   another core while the loop serves other requests, and costs the loop
 *   only the hand-over (inline, an unbatched model at concurrency 8 ran at
 *   half the rate; at concurrency 32 on a busy machine, whose loop never read
 *   as saturated, inline runs doubled the loop's CPU per request). A batch of
 *   several requests still goes inline: it shares the crossing it saves.
 * - Unless requests come one at a time (RunOverlap): the last SEQUENTIAL_RUNS
 *   runs handed to the session threads (of any model) each found none there
 *   before it, and no batch of several was made since, within
 *   SEQUENTIAL_HOLD_MS. Then there is no other request for the loop to serve
 *   while a run is on a thread, and the crossing is pure latency: the loop
 *   reads as busy only because the client sends the next request as soon as
 *   it has the answer (a client at concurrency 1 on a loaded machine kept
 *   the loop 95 % busy in a quarter of the windows, and those runs paid the
 *   crossing). A run of one request then goes inline whatever the loop's
 *   utilisation, when predicted within LIGHT_INLINE_NS (a model of a few
 *   hundred microseconds a run too, whose run is longer than the crossing).
 *   The reading comes only from runs on the threads (inline runs are made
 *   one after another whatever the load), so it lapses after
 *   SEQUENTIAL_HOLD_MS: the runs that need it go to the threads until
 *   SEQUENTIAL_RUNS more renew it, or one that overlaps another ends it
 *   (load that grows while it holds is seen within SEQUENTIAL_HOLD_MS).
 * - The main-thread session is created the first time a run would go inline
 *   (creating it blocks the event loop for as long, about a millisecond for a
 *   small model), and only for models of at most INLINE_MAX_MODEL_BYTES.
 * - While requests come one at a time, a run predicted at WIDE_MIN_NS or more
 *   (on one thread) goes to a second main-thread session with more intra-op
 *   threads (`inline_intra_op_thread_count`, see ../session-options.ts), when
 *   the model has one: onnxruntime splits its operators between the event
 *   loop's thread and helper threads. A helper that sleeps between runs is
 *   woken at the start of each, which on a virtual machine costs about what
 *   it saves, so the helpers busy-wait for the next run for the model's
 *   spin_wait_microseconds (onnxruntime's session.intra_op.spin_duration_us)
 *   and then sleep: like the session thread's wait, it holds a core for at
 *   most that long after a run, and never while idle. The wide session is
 *   used only while most gaps from the end of one inline run to the start of
 *   the next were within that wait (a moving share, as on the session
 *   thread), so that the waiting costs no more than the work it speeds up;
 *   otherwise runs keep the one-thread session, which never spins. With
 *   spin_wait_microseconds 0 the helpers spin only within a run
 *   (session.force_spinning_stop). A run shorter than WIDE_MIN_NS gains less
 *   than a helper costs, and under load the other cores belong to the
 *   session threads, so both keep the one-thread session. The wide session's
 *   runs are timed apart (they are shorter; its first WIDE_WARMUP_RUNS not at
 *   all); while its own figure is beyond LIGHT_INLINE_NS, or no better than
 *   the one-thread figure (on a machine whose other cores are busy, a helper
 *   that is not scheduled holds up the run), the runs keep the one-thread
 *   session, and after WIDE_RETIME_AFTER of them the figure is
 *   made afresh (a figure from a moment when the machine was busy would
 *   otherwise stand for ever).
 *
 * `inline_execution` (a model parameter, or for every model
 * `--backend-config=onnxruntime,inline_execution=...`): `auto` (default) as
 * above, `on` runs every run of the model's KIND_CPU instances inline (the
 * session is created at load), `off` never.
 */
import { createRequire } from 'node:module';
import { performance } from 'node:perf_hooks';
import type { InferenceSession, Tensor as OrtTensor } from 'onnxruntime-node';
import type { ModelConfig } from '../../../gen/model_config_pb.js';
import { Errors } from '../../../errors.js';
import { configParameter } from '../session-options.js';
import { nowNs } from '../thread/worker-protocol.js';

export type InlineMode = 'auto' | 'on' | 'off';

const MODES: readonly InlineMode[] = ['auto', 'on', 'off'];

/** The model's inline_execution setting. Throws a config error for a bad value. */
export function inlineMode(
  modelName: string,
  config: ModelConfig,
  backendConfig: Readonly<Record<string, string>>,
): InlineMode {
  const raw = configParameter(config, 'inline_execution') ?? backendConfig['inline_execution'];
  if (raw === undefined) return 'auto';
  const v = raw.trim().toLowerCase();
  if (!(MODES as readonly string[]).includes(v)) {
    throw Errors.config(
      `model '${modelName}': parameter 'inline_execution' must be 'auto', 'on' or 'off', got '${raw}'`,
    );
  }
  return v as InlineMode;
}

/** Runs predicted within this always qualify (a crossing never costs less). */
export const MIN_INLINE_NS = 20_000;
/** No run predicted longer than this goes inline, however slow the crossing. */
export const MAX_INLINE_NS = 500_000;
/**
 * Single runs in a row that go inline while the session thread sleeps (requests not known to come one at a time),
 * before one goes to wake it.
 */
export const ASLEEP_INLINE_RUNS = 8;
/** Runs handed to session threads one at a time, in a row, before requests count as coming one at a time. */
export const SEQUENTIAL_RUNS = 32;
/** How long that reading holds, ms (inline runs cannot renew it). */
export const SEQUENTIAL_HOLD_MS = 500;
/**
 * While requests come one at a time, runs predicted within this go inline (the loop has nothing else to do meanwhile).
 */
export const LIGHT_INLINE_NS = 1_000_000;

/**
 * Whether requests come one at a time, read from the runs handed to session
 * threads (see the file comment). One per process: the event loop is shared
 * by every model.
 */
export class RunOverlap {
  private inFlight = 0;
  /** Runs handed over in a row with none in flight before them. */
  private quiet = 0;
  /** Until when (clock ms) requests count as coming one at a time. */
  private until = Number.NEGATIVE_INFINITY;

  constructor(private readonly now: () => number = () => performance.now()) {}

  /** A run is handed to a session thread (call ended() when it is back, failed or not). */
  started(): void {
    if (this.inFlight > 0) this.overlapped();
    else if (++this.quiet >= SEQUENTIAL_RUNS) {
      this.quiet = 0;
      this.until = this.now() + SEQUENTIAL_HOLD_MS;
    }
    this.inFlight++;
  }

  ended(): void {
    if (this.inFlight > 0) this.inFlight--;
  }

  /** Requests were seen together (a run of several, or one handed over while another was in flight). */
  overlapped(): void {
    this.quiet = 0;
    this.until = Number.NEGATIVE_INFINITY;
  }

  /** Runs handed over in a row with none in flight before them, since the last overlap or renewal. */
  get quietRuns(): number {
    return this.quiet;
  }

  /** Whether requests come one at a time (read within the last SEQUENTIAL_HOLD_MS). */
  get oneAtATime(): boolean {
    return this.now() < this.until;
  }
}

/** The process's reading, fed by every onnxruntime instance. */
export const runOverlap = new RunOverlap();

/** Runs predicted at least this long on one thread go to the wide session while requests come one at a time. */
export const WIDE_MIN_NS = 100_000;

/** The wide session's first runs, slower while its memory is first touched, are not timed. */
export const WIDE_WARMUP_RUNS = 2;
/** After this many runs refused the wide session for its own figure, the figure is made afresh. */
export const WIDE_RETIME_AFTER = 64;

/** Until a crossing is measured. */
export const DEFAULT_CROSSING_NS = 60_000;
/** auto considers only model files up to this size (bigger ones take longer to create a session for, and to run). */
export const INLINE_MAX_MODEL_BYTES = 16 * 1024 * 1024;
/**
 * The same under a memory budget: each main-thread session holds its own copy of the weights, which
 * doubled or tripled what a paged model costs (docs/paging.md#what-a-model-costs-measured-not-guessed).
 */
export const PAGED_INLINE_MAX_MODEL_BYTES = 1024 * 1024;
/** Run times kept per batch-size class. */
export const RUN_SAMPLES = 32;
/** Runs timed in a class before its figure is trusted. */
export const MIN_SAMPLES = 8;
const CLASSES = 32;

function classOf(items: number): number {
  const c = 31 - Math.clz32(Math.max(1, items));
  return c < CLASSES ? c : CLASSES - 1;
}

/** The recent run times of one batch-size class. */
class RunClass {
  readonly samples = new Float64Array(RUN_SAMPLES);
  count = 0;
  /** Items of the largest batch timed in this class. */
  maxItems = 0;
  /** The 90th percentile of the samples; 0 until MIN_SAMPLES. */
  p90 = 0;
  private readonly sorted = new Float64Array(RUN_SAMPLES);

  add(ns: number, items: number): void {
    this.samples[this.count % RUN_SAMPLES] = ns;
    this.count++;
    if (items > this.maxItems) this.maxItems = items;
    const n = Math.min(this.count, RUN_SAMPLES);
    // Re-sorted while filling, then every 4th run, or at once when a run is longer than the figure.
    if (n < MIN_SAMPLES) return;
    if (n === RUN_SAMPLES && this.count % 4 !== 0 && ns <= this.p90) return;
    const s = this.sorted.subarray(0, n);
    s.set(this.samples.subarray(0, n));
    s.sort();
    this.p90 = s[Math.min(n - 1, Math.floor(n * 0.9))]!;
  }
}

/** Predicts a run's time from the runs timed so far. */
export class RunEstimates {
  private readonly classes = Array.from({ length: CLASSES }, () => new RunClass());

  record(items: number, ns: number): void {
    this.classes[classOf(items)]!.add(ns, items);
  }

  /** Predicted ns of a run of `items`, or undefined when too few runs were timed. */
  predict(items: number): number | undefined {
    const c = classOf(items);
    const own = this.classes[c]!;
    if (own.p90 > 0 && items <= own.maxItems) return own.p90;
    // A bigger batch takes at least as long.
    for (let k = c + (own.p90 > 0 ? 1 : 0); k < CLASSES; k++) {
      const up = this.classes[k]!;
      if (up.p90 > 0 && up.maxItems >= items) return up.p90;
    }
    // A smaller batch's time per item, scaled up: more than the batch will take.
    for (let k = c; k >= 0; k--) {
      const down = this.classes[k]!;
      if (down.p90 > 0) return (down.p90 / down.maxItems) * items;
    }
    return undefined;
  }
}

type NativeSession = {
  loadModel(modelPath: string, options: InferenceSession.SessionOptions): void;
  run(feeds: Record<string, OrtTensor>, fetches: Record<string, null>, options: object): Record<string, OrtTensor>;
  dispose(): void;
};

interface OrtModules {
  readonly Tensor: typeof OrtTensor;
  readonly createSession: () => NativeSession;
}

let ortModules: OrtModules | undefined;

/**
 * onnxruntime-node on the main thread, loaded on first use. The session is
 * its native binding's own object: InferenceSession.run would defer each run
 * to a later event-loop turn (setImmediate), the turn inline execution saves.
 */
function loadOrt(): OrtModules {
  if (ortModules) return ortModules;
  const require = createRequire(import.meta.url);
  const ort = require('onnxruntime-node') as typeof import('onnxruntime-node');
  const b = require('onnxruntime-node/dist/binding.js') as {
    binding: { InferenceSession: new () => NativeSession };
    initOrt: () => void;
  };
  if (typeof b.initOrt !== 'function' || typeof b.binding?.InferenceSession !== 'function') {
    throw new Error('this onnxruntime-node has no synchronous session binding');
  }
  b.initOrt();
  ortModules = { Tensor: ort.Tensor, createSession: () => new b.binding.InferenceSession() };
  return ortModules;
}

/** A session on the main thread. run() blocks for the whole run. */
export class InlineSession {
  private readonly native: NativeSession;
  private readonly fetchMaps = new Map<string, Record<string, null>>();
  readonly Tensor: typeof OrtTensor;
  /** How long creating it took, ms. */
  readonly createMs: number;

  constructor(modelPath: string, options: InferenceSession.SessionOptions) {
    const start = nowNs();
    const ort = loadOrt();
    this.Tensor = ort.Tensor;
    this.native = ort.createSession();
    this.native.loadModel(modelPath, options);
    this.createMs = (nowNs() - start) / 1e6;
  }

  run(feeds: Record<string, OrtTensor>, fetches: readonly string[]): Record<string, OrtTensor> {
    const key = fetches.join('\0');
    let map = this.fetchMaps.get(key);
    if (map === undefined) {
      map = {};
      for (const f of fetches) map[f] = null;
      this.fetchMaps.set(key, map);
    }
    return this.native.run(feeds, map, {});
  }

  release(): void {
    this.native.dispose();
  }
}

type SessionState = 'none' | 'ready' | 'failed' | 'closed';

/** A model's wide main-thread session (see the file comment). */
export interface WideSpec {
  readonly create: () => InlineSession;
  /** Its intra-op threads (the event loop's among them). */
  readonly threads: number;
  /** How long its helper threads wait for the next run, µs (0: they stop at the end of each run). */
  readonly spinMicros: number;
  /** hrtime ns (tests replace it). */
  readonly clockNs?: () => number;
}

/** What a model's instances share to decide where each run goes. */
export class InlinePolicy {
  readonly times = new RunEstimates();
  /** Moving mean of the measured crossing, ns. */
  crossingNs = DEFAULT_CROSSING_NS;
  private crossings = 0;
  private session: InlineSession | undefined;
  private state: SessionState = 'none';
  /** Runs of the wide session (see the file comment), timed apart. */
  wideTimes = new RunEstimates();
  /** Wide runs made so far (the first WIDE_WARMUP_RUNS are not timed). */
  private wideRuns = 0;
  /** Runs refused the wide session for its own figure since it was last timed afresh. */
  private wideRefusals = 0;
  private wide: InlineSession | undefined;
  private wideState: SessionState = 'none';

  constructor(
    readonly mode: InlineMode,
    private readonly createSession: () => InlineSession,
    /**
     * `boundNs`: the bound the run was within (the threshold, or LIGHT_INLINE_NS while requests come one at a time);
     * `wide`: the wide session.
     */
    private readonly onCreated: (
      session: InlineSession,
      predictedNs: number,
      boundNs: number,
      wide: boolean,
    ) => void = () => {},
    /** `wide`: the wide session could not be created (runs keep the one-thread session). */
    private readonly onFailed: (err: Error, wide: boolean) => void = () => {},
    private readonly overlap: RunOverlap = runOverlap,
    /**
     * The wide session (see the file comment); undefined: the model has none (one thread, or a CPU budget under two
     * cores).
     */
    private readonly wideSpec: WideSpec | undefined = undefined,
  ) {
    this.clockNs = wideSpec?.clockNs ?? nowNs;
  }

  private readonly clockNs: () => number;
  /** When the last inline run ended (clock ns); 0 while a gap is being counted or none ran. */
  private lastInlineEndNs = 0;
  /** Moving share of gaps between inline runs within the helpers' wait. */
  private gapHits = 1;
  /** Single runs in a row made inline under a saturated loop because the thread slept. */
  private asleepInline = 0;

  /** The wide session's intra-op threads; 1 when the model has none. */
  get wideThreads(): number {
    return this.wideSpec?.threads ?? 1;
  }

  /** The moving share of gaps between inline runs that were within the wide session's wait (1 at first). */
  get gapHitRate(): number {
    return this.gapHits;
  }

  /** mode 'on': the session now (a load error when it cannot be created). */
  createNow(): void {
    this.session = this.createSession();
    this.state = 'ready';
  }

  /** The threshold a predicted run must be within, ns. */
  get thresholdNs(): number {
    return Math.min(MAX_INLINE_NS, Math.max(MIN_INLINE_NS, this.crossingNs));
  }

  /**
   * The session to run `items` inline with, or undefined for the thread.
   * `threadIdle`: the instance's session thread has nothing in flight;
   * `requests`: how many requests the run serves; `threadAsleep`: the
   * thread is asleep (waking it costs the event loop a system call).
   */
  choose(items: number, threadIdle: boolean, requests = 1, threadAsleep = false): InlineSession | undefined {
    if (requests > 1) this.overlap.overlapped();
    if (this.mode === 'off' || !threadIdle || this.state === 'failed' || this.state === 'closed') return undefined;
    if (this.mode === 'on') return this.session;
    const predicted = this.times.predict(items);
    if (predicted === undefined) return undefined;
    // One at a time, there is nothing else for the loop to do while the run would be on the thread.
    const light = requests < 2 && this.overlap.oneAtATime;
    const bound = light ? LIGHT_INLINE_NS : this.thresholdNs;
    if (predicted > bound) return undefined;
    if (!light && requests < 2) {
      // A thread that has gone to sleep had nothing for a while: waking it costs the event loop
      // more than a short run, and gains no parallel core for runs that rare. A few such runs
      // go inline; then one goes to the thread, so that runs which keep coming find it awake.
      if (!threadAsleep || ++this.asleepInline > ASLEEP_INLINE_RUNS) {
        this.asleepInline = 0;
        return undefined;
      }
    } else this.asleepInline = 0;
    if (light && predicted >= WIDE_MIN_NS) {
      const wide = this.wideFor(items, predicted);
      if (wide !== undefined) return wide;
    }
    if (this.state === 'none') {
      try {
        this.session = this.createSession();
        this.state = 'ready';
        this.onCreated(this.session, predicted, bound, false);
      } catch (err) {
        this.state = 'failed';
        this.onFailed(err as Error, false);
        return undefined;
      }
    }
    return this.session;
  }

  /**
   * The wide session for a run of `items` (predicted `predicted` ns on one thread), or undefined for the one-thread
   * session.
   */
  private wideFor(items: number, predicted: number): InlineSession | undefined {
    const spec = this.wideSpec;
    if (spec === undefined || this.wideState === 'failed' || this.wideState === 'closed') return undefined;
    if (spec.spinMicros > 0) {
      if (this.lastInlineEndNs > 0) {
        const hit = this.clockNs() - this.lastInlineEndNs <= spec.spinMicros * 1000 ? 1 : 0;
        this.gapHits = this.gapHits * 0.9 + hit * 0.1;
        this.lastInlineEndNs = 0;
      }
      // Runs too far apart for the helpers' wait to catch: it would be spent for nothing.
      if (this.gapHits < 0.5) return undefined;
    }
    const own = this.wideTimes.predict(items);
    // Beyond the bound, or no faster than one thread (helpers that find no free core make a run slower).
    if (own !== undefined && (own > LIGHT_INLINE_NS || own >= predicted)) {
      // A figure made in a bad moment would otherwise stand for ever: it is made again now and then.
      if (++this.wideRefusals >= WIDE_RETIME_AFTER) {
        this.wideRefusals = 0;
        this.wideTimes = new RunEstimates();
      }
      return undefined;
    }
    if (this.wideState === 'none') {
      try {
        this.wide = spec.create();
        this.wideState = 'ready';
        this.onCreated(this.wide, predicted, LIGHT_INLINE_NS, true);
      } catch (err) {
        this.wideState = 'failed';
        this.onFailed(err as Error, true);
        return undefined;
      }
    }
    return this.wide;
  }

  /** Whether `session` is the wide one (its runs are timed apart). */
  isWide(session: InlineSession): boolean {
    return session === this.wide;
  }

  /** A run's time; `session`: the main-thread session it ran in (none: the session thread). */
  recordRun(items: number, ns: number, session?: InlineSession): void {
    if (session !== undefined) this.lastInlineEndNs = this.clockNs();
    if (session === undefined || session !== this.wide) this.times.record(items, ns);
    else if (++this.wideRuns > WIDE_WARMUP_RUNS) this.wideTimes.record(items, ns);
  }

  recordCrossing(ns: number): void {
    if (!(ns > 0)) return;
    // The first few set the figure; then a moving mean.
    this.crossings++;
    const w = this.crossings < 8 ? 1 / this.crossings : 1 / 16;
    this.crossingNs = this.crossings === 1 ? ns : this.crossingNs + (ns - this.crossingNs) * w;
  }

  close(): void {
    this.state = 'closed';
    this.wideState = 'closed';
    const s = this.session;
    const w = this.wide;
    this.session = undefined;
    this.wide = undefined;
    s?.release();
    w?.release();
  }
}
