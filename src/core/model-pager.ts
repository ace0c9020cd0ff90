/**
 * Model paging under a memory budget (`--model-memory-budget`): measures
 * what each load adds to the process, unloads idle models least frequently
 * used first (paging-policy.ts) to make room, and loads an unloaded model again when a request
 * needs it (once, however many requests wait). docs/paging.md explains the
 * rules and how exact the measurement is.
 */
import { EventEmitter } from 'node:events';
import { readFileSync, writeFileSync } from 'node:fs';
import { readdir, stat } from 'node:fs/promises';
import path from 'node:path';
import type { Logger } from 'pino';
import { Errors } from '../errors.js';
import type { ModelConfig } from '../gen/model_config_pb.js';
import { Limiter } from './limiter.js';
import type { ModelEntry } from './model-entry.js';
import type { LoadedModel, PreparedModel } from './model-loader.js';
import type { ModelVersion } from './model-version.js';
import { type Collect, memoryReducingCollection } from './garbage-collection.js';
import { formatBytes } from './memory-budget.js';
import { PagingHistory } from './paging-history.js';
import { type PagingCandidate, PagingPolicy } from './paging-policy.js';

/** The reason an unloaded-for-room version shows in the repository index (its state is UNAVAILABLE). */
export const MEMORY_BUDGET_REASON = 'unloaded: memory budget';
/**
 * The config parameter that keeps a model loaded: parameters { key: "nereid.pinned" value: { string_value:
 * "true" } }.
 */
export const PINNED_PARAMETER = 'nereid.pinned';
/** How long a request waits for its model to load (`--model-load-wait-ms`). */
export const DEFAULT_LOAD_WAIT_MS = 30_000;
/** How often a load that waits for room looks again (models go idle without telling anyone). */
const ROOM_POLL_MS = 10;
/** How long a load waits for a colder model's requests to finish rather than unload a hotter idle model. */
export const BUSY_GRACE_MS = 500;
/**
 * The longest a load waits for a model just unloaded to give its memory back (its thread exits, the allocators
 * return what it freed) before it unloads another model to stay within the budget.
 */
export const RELEASE_WAIT_MS = 250;
/** Less than this back since the last look, and an unloaded model's memory is taken as having come back. */
const RELEASE_STEP_BYTES = 1 << 20;
/** At most one collection for what the process keeps in this time (it stops the event loop meanwhile). */
export const COLLECT_EVERY_MS = 15_000;

export interface PagingOptions {
  /** The budget in bytes (resolved from `--model-memory-budget`). */
  budgetBytes: number;
  /** Models never unloaded for room (`--model-pin`). */
  pins?: readonly string[];
  /** Most a request waits for its model to load, and a load for room (`--model-load-wait-ms`). */
  loadWaitMs?: number;
  /** Where the scores are kept across restarts (`--model-memory-history`); unset: each start begins cold. */
  historyFile?: string;
  /** Where process status files are read (tests). Default /proc. */
  procDir?: string;
}

/** What the pager needs of the model repository manager. */
export interface PagerHost {
  entries(): Iterable<ModelEntry>;
  /** Unloads an idle model with MEMORY_BUDGET_REASON; its versions are released once closed. */
  evict(entry: ModelEntry): Promise<void>;
  readonly logger: Logger;
}

export interface ModelPagerEvents {
  /** A model was unloaded to make room. */
  evicted: [string];
  /** A request waited `seconds` for its model to load (also when the wait ran out). */
  loadWait: [number];
}

/** The resident set size of a process from its status file (VmRSS), in bytes; undefined when it cannot be read. */
export function processRssBytes(pid: number | 'self', procDir = '/proc'): number | undefined {
  try {
    const m = /^VmRSS:\s+(\d+)\s+kB/m.exec(readFileSync(path.join(procDir, String(pid), 'status'), 'utf8'));
    return m ? Number(m[1]) * 1024 : undefined;
  } catch {
    return undefined;
  }
}

/**
 * Starts a new peak of this process's resident memory (VmHWM), as writing 5
 * to clear_refs does; false where the kernel does not allow it.
 */
function resetPeakRss(): boolean {
  try {
    writeFileSync('/proc/self/clear_refs', '5');
    return true;
  } catch {
    return false;
  }
}

/** This process's peak resident memory since start or the last reset (VmHWM), in bytes. */
function peakRssBytes(): number | undefined {
  try {
    const m = /^VmHWM:\s+(\d+)\s+kB/m.exec(readFileSync('/proc/self/status', 'utf8'));
    return m ? Number(m[1]) * 1024 : undefined;
  } catch {
    return undefined;
  }
}

async function folderBytes(dir: string): Promise<number> {
  let total = 0;
  let names: string[];
  try {
    names = await readdir(dir);
  } catch {
    return 0;
  }
  for (const name of names) {
    const p = path.join(dir, name);
    try {
      const s = await stat(p);
      total += s.isDirectory() ? await folderBytes(p) : s.size;
    } catch {
      // Gone meanwhile: counts nothing.
    }
  }
  return total;
}

/** Reads `nereid.pinned`; throws a configuration error for a value other than "true" or "false". */
export function pinnedByConfig(config: ModelConfig, model: string): boolean {
  const p = config.parameters[PINNED_PARAMETER];
  if (p === undefined) return false;
  const value = p.stringValue.trim().toLowerCase();
  if (value === 'true') return true;
  if (value === 'false') return false;
  throw Errors.config(
    `model '${model}': parameter '${PINNED_PARAMETER}' must be "true" or "false", got "${p.stringValue}"`,
  );
}

/** Why a model is unloaded for room: logged with each eviction (docs/paging.md#which-model-goes). */
interface EvictionContext {
  /** Making room before a load, after it (its measured figure), or after a loaded model grew. */
  readonly stage: 'before' | 'after' | 'grew';
  /**
   * room: the figure does not fit; extra: it fits, but not with the load's peak and what the process keeps; grace: a
   * colder model stayed busy past the grace; resident: the resident-memory check.
   */
  readonly path: 'room' | 'extra' | 'grace' | 'resident';
  /** How many models the same call unloaded before this one. */
  readonly nth: number;
  readonly needed: number;
  readonly extra: number;
  readonly candidates: readonly PagingCandidate[];
}

export class ModelPager extends EventEmitter<ModelPagerEvents> {
  readonly budgetBytes: number;
  readonly loadWaitMs: number;
  readonly pins: ReadonlySet<string>;
  /** Measured bytes of each loaded version, until it is closed. */
  private readonly resident = new Map<ModelVersion, number>();
  /** The largest measurement of each model version so far: a reload into memory freed earlier may measure less. */
  private readonly remembered = new Map<string, number>();
  /** The backend and the files (times instances) of each remembered version, to compare models of a kind and size. */
  private readonly shapes = new Map<string, { backend: string; files: number }>();
  /** Backends with a measured load in this process: their first load also took their one-time costs. */
  private readonly backendsMeasured = new Set<string>();
  /** The versions (`model/version`) of each backend's first measured load, whose figures hold those costs. */
  private readonly firstLoads = new Set<string>();
  /** Loads are measured one at a time, so two loads' growth is not mixed up. */
  private readonly measuring = new Limiter(1);
  private readonly procDir: string;
  /** Evictions per model since start. */
  readonly evictions = new Map<string, number>();
  /** Which model goes for room: the least frequently used, frequencies decaying with traffic. */
  readonly policy = new PagingPolicy();
  /** The policy's scores kept across restarts (`--model-memory-history`). */
  readonly history: PagingHistory | undefined;
  /**
   * Measured bytes per byte of model files (times instances) at the last load; the first load (which also pays
   * one-time costs) is not used.
   */
  private bytesPerFileByte = 1;
  private measuredLoads = 0;
  /** The process's resident memory before its first measured load: what the budget comes on top of. */
  private baseRss: number | undefined;
  /** The most each model version's load took above what it kept (its peak while loading), by `model/version`. */
  private readonly transients = new Map<string, number>();
  /** The last load's peak above what it kept, per byte of its files (times instances). */
  private transientPerFileByte = 0;
  /**
   * Memory the process holds above its base that no loaded model's figure
   * accounts for, as found before the last load: what the allocators kept of
   * unloaded models and did not reuse (docs/paging.md#what-the-process-keeps).
   */
  retainedBytes = 0;
  /** Collections run for what the process keeps (nereid_model_memory_collections_total). */
  collections = 0;
  private readonly collect: Collect | undefined;
  private lastCollect = -Infinity;
  /** When a model was last unloaded for room (performance.now()). */
  private lastEviction = -Infinity;

  constructor(
    options: PagingOptions,
    private readonly host: PagerHost,
  ) {
    super();
    if (!Number.isSafeInteger(options.budgetBytes) || options.budgetBytes <= 0) {
      throw Errors.config(`--model-memory-budget must be above 0 bytes, got ${options.budgetBytes}`);
    }
    const wait = options.loadWaitMs ?? DEFAULT_LOAD_WAIT_MS;
    if (!Number.isInteger(wait) || wait < 0) throw Errors.config(`--model-load-wait-ms must be 0 or more, got ${wait}`);
    this.budgetBytes = options.budgetBytes;
    this.loadWaitMs = wait;
    this.pins = new Set(options.pins ?? []);
    this.procDir = options.procDir ?? '/proc';
    this.collect = memoryReducingCollection();
    this.history =
      options.historyFile === undefined ? undefined : new PagingHistory(options.historyFile, this.policy, host.logger);
  }

  /** Bytes the loaded versions hold, as measured. */
  usedBytes(): number {
    let total = 0;
    for (const b of this.resident.values()) total += b;
    return total;
  }

  /** The measured bytes of a loaded version (undefined when not measured). */
  memoryOf(v: ModelVersion): number | undefined {
    return this.resident.get(v);
  }

  /** Every measured version and its bytes. */
  residentVersions(): IterableIterator<[ModelVersion, number]> {
    return this.resident.entries();
  }

  /**
   * A loaded version took more memory (a session made on first use): it
   * counts from now on, and idle models make room when the budget is passed.
   * Growth during the load is already in the load's measurement.
   */
  grew(v: ModelVersion, bytes: number): void {
    const had = this.resident.get(v);
    if (had === undefined || bytes <= 0) return;
    const now = had + Math.round(bytes);
    this.resident.set(v, now);
    const key = `${v.modelName}/${v.version}`;
    this.remembered.set(key, Math.max(now, this.remembered.get(key) ?? 0));
    if (this.usedBytes() <= this.budgetBytes) return;
    this.host.logger.info(
      { model: v.modelName, grew: bytes, used: this.usedBytes(), budget: this.budgetBytes },
      'a model grew past the memory budget',
    );
    const grown = new Set([v.modelName]);
    void this.measuring
      .run(() => this.makeRoom(0, grown, Date.now(), 0, 'grew'))
      .catch((err: unknown) => this.host.logger.warn({ err }, 'making room after a model grew failed'));
  }

  /** A version was closed: its memory is free again. */
  released(v: ModelVersion): void {
    this.resident.delete(v);
  }

  /**
   * Whether a model must stay loaded: pinned by flag or configuration,
   * loaded with file overrides (its folder would be gone), or a dependency
   * (an ensemble's step) of a model that serves or is loading.
   */
  isPinned(entry: ModelEntry): boolean {
    if (this.pins.has(entry.name) || entry.override !== undefined) return true;
    if (entry.config?.parameters[PINNED_PARAMETER]?.stringValue.trim().toLowerCase() === 'true') return true;
    for (const other of this.host.entries()) {
      if (other === entry) continue;
      if (other.serving && other.dependsOn(entry.name)) return true;
      if (other.loadingDependencies.some((d) => d.model === entry.name)) return true;
    }
    return false;
  }

  /** No request queued or running, no open sequence, no load or unload in progress. */
  private isIdle(entry: ModelEntry): boolean {
    if (entry.busy !== undefined) return false;
    for (const v of entry.versions.values()) {
      if (v.inflight > 0 || (v.scheduler?.openSequences ?? 0) > 0) return false;
    }
    return true;
  }

  /** When the model was last used (a request or its load). */
  private lastUse(entry: ModelEntry): number {
    let last = 0;
    for (const v of entry.versions.values()) if (v.lastUsed > last) last = v.lastUsed;
    return last;
  }

  /** A request to `model` (its score in the policy). */
  recordUse(model: string): void {
    this.policy.recordUse(model);
  }

  /** The serving, unpinned models not in `protect` and with no load or unload in progress. */
  private candidates(protect: ReadonlySet<string>): PagingCandidate[] {
    const out: PagingCandidate[] = [];
    for (const entry of this.host.entries()) {
      if (protect.has(entry.name) || !entry.serving || entry.busy !== undefined || this.isPinned(entry)) continue;
      out.push({ name: entry.name, idle: this.isIdle(entry), lastUse: this.lastUse(entry) });
    }
    return out;
  }

  /** Whether some model outside `protect` holds memory and may become idle later (so waiting can help). */
  private couldFree(protect: ReadonlySet<string>): boolean {
    for (const entry of this.host.entries()) {
      if (protect.has(entry.name) || !entry.serving || this.isPinned(entry)) continue;
      for (const v of entry.versions.values()) if (this.resident.has(v)) return true;
    }
    return false;
  }

  /**
   * Unloads idle models, least frequently used first (PagingPolicy), until
   * `needed` more bytes fit in the budget, and `extra` too while idle models
   * can go. Busy models are waited for until `deadline`. Resolves false when
   * `needed` cannot be made to fit. `stage` names the caller in the eviction log.
   */
  private async makeRoom(
    needed: number,
    protect: ReadonlySet<string>,
    deadline: number,
    extra = 0,
    stage: 'before' | 'after' | 'grew' = 'before',
  ): Promise<boolean> {
    const graceEnd = Math.min(deadline, Date.now() + BUSY_GRACE_MS);
    let nth = 0;
    for (;;) {
      if (this.usedBytes() + extra + needed <= this.budgetBytes) return true;
      const candidates = this.candidates(protect);
      const mayWait = Date.now() < graceEnd;
      const decision = this.policy.choose(candidates, mayWait);
      // `extra` (a load's peak, what the allocators kept) is made room for only as far as idle models can go: a load
      // whose figure fits does not wait or fail for it.
      const fits = this.usedBytes() + needed <= this.budgetBytes;
      if (decision.evict === undefined && fits && !(decision.wait && mayWait)) return true;
      if (decision.evict !== undefined) {
        // Which path chose it: the grace ran out with a colder model busy, the figure fits and only `extra` is short.
        const graceOut = !mayWait && this.policy.choose(candidates, true).wait;
        const path = graceOut ? 'grace' : fits ? 'extra' : 'room';
        const why: EvictionContext = { stage, path, nth: nth++, needed, extra, candidates };
        if (await this.evict(decision.evict, why)) continue;
      }
      if (Date.now() >= deadline || !this.couldFree(protect)) return false;
      await new Promise((resolve) => setTimeout(resolve, ROOM_POLL_MS));
    }
  }

  /**
   * How many models of the loaded ones' mean figure the budget holds beside the pinned ones and `extra` (what the
   * process holds beyond the figures): the places it has at this moment, for the eviction log.
   */
  private places(extra: number): number {
    let pinned = 0;
    let free = 0;
    let n = 0;
    for (const entry of this.host.entries()) {
      const isPinned = this.isPinned(entry);
      for (const v of entry.versions.values()) {
        const bytes = this.resident.get(v);
        if (bytes === undefined) continue;
        if (isPinned) {
          pinned += bytes;
        } else {
          free += bytes;
          n++;
        }
      }
    }
    return n > 0 ? Math.round(((this.budgetBytes - pinned - extra) / (free / n)) * 100) / 100 : 0;
  }

  /** Unloads the model `name` for room (`why`: the path that chose it, for the log); false when it is gone. */
  private async evict(name: string, why: EvictionContext): Promise<boolean> {
    const victim = [...this.host.entries()].find((e) => e.name === name);
    if (victim === undefined) return false;
    this.host.logger.info(
      {
        model: victim.name,
        score: this.policy.score(victim.name),
        needed: why.needed,
        used: this.usedBytes(),
        extra: why.extra,
        budget: this.budgetBytes,
        stage: why.stage,
        path: why.path,
        nth: why.nth,
        request: this.policy.requests,
        places: this.places(why.extra),
        loaded: this.policy
          .rank(why.candidates)
          .map((c) => `${c.name}:${this.policy.score(c.name).toFixed(2)}${c.idle ? '' : '*'}`)
          .join(' '),
      },
      'unloading the least frequently used idle model to make room',
    );
    this.evictions.set(victim.name, (this.evictions.get(victim.name) ?? 0) + 1);
    this.emit('evicted', victim.name);
    await this.host.evict(victim);
    this.lastEviction = performance.now();
    return true;
  }

  /** The resident memory of this process and of the loaded instances' own processes (Python, TorchScript). */
  private residentNow(): number {
    let total = process.memoryUsage.rss();
    for (const v of this.resident.keys()) {
      for (const i of v.instances) {
        const pid = i.backend.pid;
        if (pid !== undefined) total += processRssBytes(pid, this.procDir) ?? 0;
      }
    }
    return total;
  }

  /**
   * Holds a load until the resident memory leaves room under the base and the budget for `bytes` (its figure and
   * its peak). The figures say there is room once a model is unloaded, but its memory comes back only as its thread
   * exits and the allocators return it: a load started before passes the bound by as much. Once the memory stops
   * coming back (or RELEASE_WAIT_MS after the last unload), what the process keeps has grown since it was measured,
   * and another idle model goes; with none left the load goes ahead (its figure fits).
   * docs/paging.md#what-the-process-keeps
   */
  private async untilResidentFits(bytes: number, protect: ReadonlySet<string>, deadline: number): Promise<void> {
    if (this.baseRss === undefined) return;
    const limit = this.baseRss + this.budgetBytes;
    const started = performance.now();
    let unloaded = 0;
    let previous = Infinity;
    for (;;) {
      const resident = this.residentNow();
      const over = resident + bytes - limit;
      // Waiting helps while the memory is still coming back; once a poll finds it no lower, it is kept.
      const returning = resident < previous - RELEASE_STEP_BYTES;
      previous = resident;
      if (over > 0 && Date.now() < deadline) {
        if (returning && performance.now() - this.lastEviction < RELEASE_WAIT_MS) {
          await new Promise((resolve) => setTimeout(resolve, ROOM_POLL_MS));
          continue;
        }
        const candidates = this.candidates(protect);
        const decision = this.policy.choose(candidates, false);
        // What the process holds beyond the figures, as the resident check sees it (the load's peak is in `bytes`).
        const beyond = Math.max(0, resident - limit + this.budgetBytes - this.usedBytes());
        const why: EvictionContext = {
          stage: 'before',
          path: 'resident',
          nth: unloaded,
          needed: bytes,
          extra: beyond,
          candidates,
        };
        if (decision.evict !== undefined && (await this.evict(decision.evict, why))) {
          unloaded++;
          previous = Infinity;
          continue;
        }
      }
      if (unloaded > 0 || performance.now() - started >= ROOM_POLL_MS) {
        const ms = Math.round(performance.now() - started);
        this.host.logger.debug({ over, bytes, ms, unloaded }, 'resident memory checked before a load');
      }
      return;
    }
  }

  /** The model's files once per instance: what a guess scales. */
  private async fileBytes(prepared: PreparedModel): Promise<number> {
    const instances = Math.max(1, prepared.config.instanceGroup.reduce((sum, g) => sum + Math.max(1, g.count), 0));
    let files = 0;
    for (const n of prepared.selected) files += await folderBytes(path.join(prepared.modelDir, String(n)));
    return files * instances;
  }

  /**
   * A first guess of a load's cost, to make room before it: its last
   * measurement, else its files scaled as the last load measured.
   */
  private estimate(prepared: PreparedModel, files: number): number {
    let known = 0;
    for (const n of prepared.selected) {
      const r = this.remembered.get(`${prepared.name}/${n}`);
      if (r === undefined) return Math.max(known, Math.round(files * this.bytesPerFileByte));
      known += r;
    }
    return known;
  }

  /**
   * The largest figure, scaled to `files`, of a model of the same backend with files within a quarter of these. A
   * load's figure is what the process grew by; where it reused memory an unload had just freed, it is less than the
   * load takes where none is left, and a model of its size measured elsewhere says more. The first load of a backend
   * also took the backend's one-time costs: its figure stands for another model only while no other is known.
   */
  private likeSized(prepared: PreparedModel, files: number): number {
    let most = 0;
    let first = 0;
    if (files <= 0 || prepared.backend === undefined) return most;
    for (const [key, shape] of this.shapes) {
      if (shape.backend !== prepared.backend.name || shape.files < files * 0.8 || shape.files > files * 1.25) continue;
      const scaled = (this.remembered.get(key) ?? 0) * (files / shape.files);
      if (this.firstLoads.has(key)) first = Math.max(first, scaled);
      else most = Math.max(most, scaled);
    }
    return Math.round(most > 0 ? most : first);
  }

  /** The peak above the end of a load, guessed from its last load, else from its files as the last load measured. */
  private transientGuess(prepared: PreparedModel, files: number): number {
    let known = 0;
    for (const n of prepared.selected) {
      const t = this.transients.get(`${prepared.name}/${n}`);
      if (t === undefined) return Math.max(known, Math.round(files * this.transientPerFileByte));
      known += t;
    }
    return known;
  }

  /**
   * The frontends have started (they took `bytes`, their threads' JavaScript engines among them): not a model's
   * memory, so it goes into the base. With no load measured yet (explicit mode), the base is the process as it is
   * now, before any request: taken at the first load instead, it would include what the first requests allocated.
   */
  frontendsStarted(bytes: number): void {
    if (this.baseRss === undefined) this.setBase(process.memoryUsage.rss());
    else if (bytes > 0) this.setBase(this.baseRss + bytes);
  }

  private setBase(bytes: number): void {
    this.baseRss = bytes;
    this.host.logger.info({ base: bytes, budget: this.budgetBytes }, 'memory budget base');
  }

  /** What the process holds above its base beyond the loaded models' figures (0 when it holds less). */
  private measureRetained(): number {
    const rss = process.memoryUsage.rss();
    if (this.baseRss === undefined) this.setBase(rss);
    this.retainedBytes = Math.max(0, rss - this.baseRss! - this.usedBytes());
    return this.retainedBytes;
  }

  /**
   * What the process keeps (measureRetained), after a memory-reducing collection when that is what would unload a
   * model for a load of `needed` bytes: much of it is the JavaScript heaps' garbage and V8's page pool, which the
   * worker threads of unloaded models fill (docs/paging.md#what-the-process-keeps). At most one per COLLECT_EVERY_MS.
   */
  private retainedAfterCollecting(needed: number): number {
    const retained = this.measureRetained();
    const short = this.usedBytes() + retained + needed - this.budgetBytes;
    const now = performance.now();
    const worth = short > 0 && retained >= needed / 2 && now - this.lastCollect >= COLLECT_EVERY_MS;
    if (this.collect === undefined || !worth) return retained;
    this.collect();
    this.collections++;
    this.lastCollect = performance.now();
    // Garbage grows back after a collection (the page pool's part does not): half of what it freed is still counted.
    const freed = Math.max(0, retained - this.measureRetained());
    const after = retained - freed / 2;
    this.retainedBytes = after;
    this.host.logger.debug(
      { retained, after, ms: Math.round(this.lastCollect - now) },
      'garbage collection for the memory the process keeps',
    );
    return after;
  }

  private noRoom(name: string, needed: number): string {
    return (
      `model '${name}' needs ${formatBytes(needed)} but the memory budget of ${formatBytes(this.budgetBytes)} has ` +
      `${formatBytes(Math.max(0, this.budgetBytes - this.usedBytes()))} free, ` +
      'and the other loaded models are pinned or stayed busy'
    );
  }

  /**
   * Runs `load` (the second phase of a model's load) under the budget:
   * makes room first, measures what the load added to the process (and
   * the instances' own processes), fails a version that alone exceeds
   * the budget, and makes room again when the measurement was larger than
   * the guess. Throws a memory budget error when no room can be made
   * before the load; failures after it show as UNAVAILABLE versions.
   */
  async load(
    entry: ModelEntry,
    prepared: PreparedModel,
    protect: ReadonlySet<string>,
    load: () => Promise<LoadedModel>,
  ): Promise<LoadedModel> {
    // An ensemble holds nothing of its own: its steps are loaded (and measured) as models of their own.
    if (prepared.backend === undefined) return load();
    const backend = prepared.backend.name;
    const deadline = Date.now() + this.loadWaitMs;
    return this.measuring.run(async () => {
      const files = await this.fileBytes(prepared);
      const guess = this.estimate(prepared, files);
      // Room for the load's peak too, and for what the allocators kept of earlier models: the process's resident
      // memory stays within its base and the budget (docs/paging.md#what-the-process-keeps).
      const transient = this.transientGuess(prepared, files);
      const extra = transient + this.retainedAfterCollecting(guess + transient);
      if (guess <= this.budgetBytes && !(await this.makeRoom(guess, protect, deadline, extra))) {
        throw Errors.memoryBudget(this.noRoom(entry.name, guess));
      }
      const likeSized = this.likeSized(prepared, files);
      if (guess <= this.budgetBytes) {
        await this.untilResidentFits(Math.max(guess, likeSized) + transient, protect, deadline);
      }
      const peakKnown = resetPeakRss();
      const before = process.memoryUsage();
      const loaded = await load();
      const after = process.memoryUsage();
      const peak = peakKnown ? peakRssBytes() : undefined;
      // The main thread's JavaScript heap is not the model's: a collection during the load would hide its growth.
      const grown = Math.max(0, after.rss - before.rss - (after.heapTotal - before.heapTotal));
      const ready = [...loaded.versions.values()].filter((v) => v.state === 'READY');
      if (peak !== undefined) {
        const over = Math.max(0, peak - after.rss);
        if (files > 0 && this.measuredLoads > 0) this.transientPerFileByte = over / files;
        for (const n of prepared.selected) {
          const key = `${prepared.name}/${n}`;
          const share = Math.round(over / prepared.selected.length);
          this.transients.set(key, Math.max(this.transients.get(key) ?? 0, share));
        }
      }
      if (ready.length === 0) return loaded;
      const costs = new Map<ModelVersion, number>();
      let total = 0;
      const firstOfBackend = !this.backendsMeasured.has(backend);
      this.backendsMeasured.add(backend);
      for (const v of ready) {
        let own = grown / ready.length;
        for (const i of v.instances) {
          const pid = i.backend.pid;
          if (pid !== undefined) own += processRssBytes(pid, this.procDir) ?? 0;
        }
        const key = `${v.modelName}/${v.version}`;
        const bytes = Math.round(Math.max(own, this.remembered.get(key) ?? 0));
        this.remembered.set(key, bytes);
        this.shapes.set(key, { backend, files: files / ready.length });
        if (firstOfBackend) this.firstLoads.add(key);
        costs.set(v, bytes);
        total += bytes;
      }
      if (files > 0 && this.measuredLoads++ > 0) this.bytesPerFileByte = total / files;
      let failure: string | undefined;
      if (total > this.budgetBytes) {
        failure =
          `model '${entry.name}' needs ${formatBytes(total)} of memory (measured at load), ` +
          `more than the whole memory budget of ${formatBytes(this.budgetBytes)}`;
      } else if (!(await this.makeRoom(total, protect, deadline, this.retainedAfter(after.rss, grown), 'after'))) {
        failure = this.noRoom(entry.name, total);
      }
      if (failure !== undefined) {
        await Promise.allSettled(ready.map((v) => v.close()));
        for (const v of ready) v.setState('UNAVAILABLE', failure);
        this.host.logger.error({ model: entry.name, bytes: total, budget: this.budgetBytes }, failure);
        return loaded;
      }
      for (const [v, bytes] of costs) {
        this.resident.set(v, bytes);
        v.touch();
      }
      this.host.logger.info(
        {
          model: entry.name,
          bytes: total,
          used: this.usedBytes(),
          budget: this.budgetBytes,
          rssBefore: before.rss,
          rssAfter: after.rss,
          rssPeak: peak,
          guess,
          likeSized,
          transient,
        },
        'model memory measured',
      );
      return loaded;
    });
  }

  /** What the allocators keep, measured again after a load that grew the process by `grown` (its own figure). */
  private retainedAfter(rss: number, grown: number): number {
    this.retainedBytes = Math.max(0, rss - (this.baseRss ?? rss) - this.usedBytes() - grown);
    return this.retainedBytes;
  }

  /**
   * Waits for a model's load on behalf of one request, at most
   * `loadWaitMs`; past that the request fails with UNAVAILABLE (and a
   * Retry-After) while the load goes on.
   */
  async wait(model: string, loading: Promise<void>): Promise<void> {
    const started = process.hrtime.bigint();
    let timer: NodeJS.Timeout | undefined;
    const timedOut = new Promise<never>((_, reject) => {
      timer = setTimeout(() => reject(Errors.modelLoadWait(model, this.loadWaitMs)), this.loadWaitMs);
    });
    try {
      await Promise.race([loading, timedOut]);
    } finally {
      clearTimeout(timer);
      this.emit('loadWait', Number(process.hrtime.bigint() - started) / 1e9);
    }
  }
}
