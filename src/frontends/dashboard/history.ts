/**
 * The dashboard's numbers: once a second, each ready model version's
 * statistics (the same recorder the statistics extension and /metrics read)
 * are turned into one sample per model, kept in a ring of 15 minutes, so a
 * page opened late still shows the recent past. Memory is bounded by the
 * models in the repository times the ring's length.
 */
import os from 'node:os';
import type { ModelVersion } from '../../core/model-version.js';
import type { RepositoryIndexEntry, ServerMetadata } from '../../types/api.js';
import type { LatencySummary } from '../../types/latency-window.js';
import type { ModelVersionStatistics } from '../../types/statistics.js';

/** What the dashboard reads of the server (Server implements it). */
export interface DashboardServer {
  readyVersions(): ModelVersion[];
  repositoryIndex(readyOnly?: boolean): Promise<RepositoryIndexEntry[]>;
  isLive(): boolean;
  isReady(): boolean;
  metadata(): ServerMetadata;
}

/** One second of one model (every version added up). Durations in microseconds; null: nothing to measure. */
export interface ModelSample {
  /** ms since the epoch. */
  t: number;
  requestsPerSec: number;
  failuresPerSec: number;
  p50Us: number | null;
  p99Us: number | null;
  /** Mean time queued and mean compute time (input + infer + output) of the second's requests. */
  queueUs: number | null;
  computeUs: number | null;
  /** Cache hits over lookups in the second. */
  cacheHitRate: number | null;
  /** Executions by batch size in the second. */
  batches: Record<string, number>;
  firstTokenP50Us: number | null;
}

export interface DashboardProblem {
  time: string;
  level: 'warning' | 'error';
  message: string;
  model?: string;
}

export interface DashboardOptions {
  /** Ports the server listens on, shown as they are. */
  ports: Record<string, number | undefined>;
  /** The memory budget of paging, when set. */
  memoryBudgetBytes?: number;
  /** Samples kept per model (default 900: 15 minutes at one a second). */
  ringLength?: number;
  /** Problems kept (default 50). */
  problemsKept?: number;
}

interface Cumulative {
  success: number;
  fail: number;
  queueNs: number;
  computeNs: number;
  cacheHits: number;
  cacheMisses: number;
  batches: Map<number, number>;
}

function cumulative(stats: ModelVersionStatistics): Cumulative {
  const json = stats.toJSON();
  const batches = new Map<number, number>();
  for (const b of json.batch_stats) batches.set(b.batch_size, b.compute_infer.count);
  return {
    success: stats.success.count,
    fail: stats.fail.count,
    queueNs: stats.queue.ns,
    computeNs: stats.computeInput.ns + stats.computeInfer.ns + stats.computeOutput.ns,
    cacheHits: stats.cacheHit.count,
    cacheMisses: stats.cacheMiss.count,
    batches,
  };
}

/** The window of the version with the most requests stands for the model. */
function busiest(a: LatencySummary | undefined, b: LatencySummary): LatencySummary {
  return a === undefined || b.count > a.count ? b : a;
}

export class DashboardHistory {
  private readonly rings = new Map<string, ModelSample[]>();
  private readonly last = new WeakMap<ModelVersionStatistics, Cumulative>();
  private readonly problems: DashboardProblem[] = [];
  private readonly ringLength: number;
  private readonly problemsKept: number;
  private readonly startedMs = Date.now();
  private lastSampleMs = Date.now();
  private timer: NodeJS.Timeout | undefined;

  constructor(
    private readonly server: DashboardServer,
    private readonly options: DashboardOptions,
  ) {
    this.ringLength = options.ringLength ?? 900;
    this.problemsKept = options.problemsKept ?? 50;
  }

  start(intervalMs = 1000): void {
    if (this.timer !== undefined) return;
    this.lastSampleMs = Date.now();
    this.timer = setInterval(() => this.sample(), intervalMs);
    this.timer.unref();
  }

  stop(): void {
    if (this.timer !== undefined) clearInterval(this.timer);
    this.timer = undefined;
  }

  /** A warning or error of the server's log (a pino record). */
  recordProblem(record: Record<string, unknown>): void {
    const level = typeof record['level'] === 'number' && record['level'] >= 50 ? 'error' : 'warning';
    const time = typeof record['time'] === 'string' ? record['time'] : new Date().toISOString();
    const message = typeof record['msg'] === 'string' ? record['msg'] : '';
    const model = typeof record['model'] === 'string' ? record['model'] : undefined;
    this.problems.push(model === undefined ? { time, level, message } : { time, level, message, model });
    if (this.problems.length > this.problemsKept) this.problems.shift();
  }

  /** Takes one sample of every ready model (the timer calls it each second; tests call it directly). */
  sample(now = Date.now()): void {
    const seconds = Math.max(0.001, (now - this.lastSampleMs) / 1000);
    this.lastSampleMs = now;
    const byModel = new Map<string, ModelVersion[]>();
    for (const v of this.server.readyVersions()) {
      const list = byModel.get(v.modelName);
      if (list === undefined) byModel.set(v.modelName, [v]);
      else list.push(v);
    }
    for (const [model, versions] of byModel) {
      let success = 0;
      let fail = 0;
      let queueNs = 0;
      let computeNs = 0;
      let hits = 0;
      let misses = 0;
      let latency: LatencySummary | undefined;
      let firstToken: LatencySummary | undefined;
      const batches: Record<string, number> = {};
      for (const v of versions) {
        const now = cumulative(v.stats);
        const before = this.last.get(v.stats);
        this.last.set(v.stats, now);
        latency = busiest(latency, v.stats.recentRequests.take());
        firstToken = busiest(firstToken, v.stats.recentFirstTokens.take());
        if (before === undefined) continue;
        success += now.success - before.success;
        fail += now.fail - before.fail;
        queueNs += now.queueNs - before.queueNs;
        computeNs += now.computeNs - before.computeNs;
        hits += now.cacheHits - before.cacheHits;
        misses += now.cacheMisses - before.cacheMisses;
        for (const [size, count] of now.batches) {
          const d = count - (before.batches.get(size) ?? 0);
          if (d > 0) batches[size] = (batches[size] ?? 0) + d;
        }
      }
      const sample: ModelSample = {
        t: now,
        requestsPerSec: success / seconds,
        failuresPerSec: fail / seconds,
        p50Us: latency !== undefined && latency.count > 0 ? latency.p50Us : null,
        p99Us: latency !== undefined && latency.count > 0 ? latency.p99Us : null,
        queueUs: success > 0 ? queueNs / success / 1000 : null,
        computeUs: success > 0 ? computeNs / success / 1000 : null,
        cacheHitRate: hits + misses > 0 ? hits / (hits + misses) : null,
        batches,
        firstTokenP50Us: firstToken !== undefined && firstToken.count > 0 ? firstToken.p50Us : null,
      };
      let ring = this.rings.get(model);
      if (ring === undefined) this.rings.set(model, (ring = []));
      ring.push(sample);
      if (ring.length > this.ringLength) ring.shift();
    }
  }

  /** Everything the page shows; `sinceMs` keeps only the samples after it (the page asks for what is new). */
  async state(sinceMs = 0): Promise<Record<string, unknown>> {
    const index = await this.server.repositoryIndex(false);
    const ready = new Map<string, ModelVersion[]>();
    for (const v of this.server.readyVersions()) {
      const list = ready.get(v.modelName);
      if (list === undefined) ready.set(v.modelName, [v]);
      else list.push(v);
    }
    const entries = new Map<string, RepositoryIndexEntry[]>();
    for (const e of index) {
      const list = entries.get(e.name);
      if (list === undefined) entries.set(e.name, [e]);
      else list.push(e);
    }
    const models = [...entries].map(([name, list]) => {
      const versions = ready.get(name) ?? [];
      const config = versions[0]?.config;
      const ring = this.rings.get(name);
      const lastSample = ring?.[ring.length - 1];
      let memoryBytes: number | undefined;
      for (const e of list) {
        const m = (e as { memory_bytes?: unknown }).memory_bytes;
        if (typeof m === 'number') memoryBytes = (memoryBytes ?? 0) + m;
      }
      const scheduling = config?.schedulingChoice;
      const batching = scheduling === undefined
        ? undefined
        : scheduling.case === 'ensembleScheduling'
          ? 'ensemble'
          : scheduling.case === 'sequenceBatching'
            ? 'sequence'
            : scheduling.case === 'dynamicBatching'
              ? 'dynamic'
              : 'none';
      const preferred = scheduling?.case === 'dynamicBatching' ? scheduling.value.preferredBatchSize : [];
      return {
        name,
        versions: list.map((e) => ({ version: e.version ?? '', state: e.state ?? 'UNKNOWN', reason: e.reason ?? '' })),
        backend: config === undefined ? undefined : config.backend || config.platform,
        instances: versions.reduce((n, v) => n + v.instances.length, 0),
        maxBatchSize: config?.maxBatchSize,
        batching,
        preferredBatchSizes: preferred,
        memoryBytes,
        requestsPerSec: lastSample?.requestsPerSec ?? 0,
      };
    });
    const series: Record<string, ModelSample[]> = {};
    for (const [name, ring] of this.rings) {
      const fresh = sinceMs > 0 ? ring.filter((s) => s.t > sinceMs) : ring;
      if (fresh.length > 0) series[name] = fresh;
    }
    const md = this.server.metadata();
    const mem = process.memoryUsage();
    return {
      server: {
        name: md.name,
        version: md.version,
        uptimeSecs: Math.round((Date.now() - this.startedMs) / 1000),
        live: this.server.isLive(),
        ready: this.server.isReady(),
        ports: this.options.ports,
        node: process.version,
        cores: os.availableParallelism(),
        memory: { rssBytes: mem.rss, totalBytes: os.totalmem() },
        memoryBudgetBytes: this.options.memoryBudgetBytes,
      },
      now: this.lastSampleMs,
      models,
      series,
      problems: this.problems,
    };
  }
}
