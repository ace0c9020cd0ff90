/**
 * Where each onnxruntime session runs. Starting a worker thread costs far
 * more than creating a small model's session on it (Node builds a new
 * environment per thread and loads onnxruntime-node into it: tens of ms of
 * CPU, against about a millisecond for the session), so the sessions of
 * small models share a pool of threads sized from the cores. Big models,
 * GPU instances and models that ask for more intra-op threads get a thread
 * of their own, as does any instance whose model already has an instance on
 * every pool thread (instances of one model never share a thread: they are
 * the unit of parallelism).
 *
 * Isolation: a pool thread that dies takes down only the sessions on it.
 * Each of them fails its runs in flight, the log names every one, and each
 * is created again on a thread of its own, so that a session that kills its
 * thread again harms nobody else. A watchdog stops a pool thread that
 * spends longer than the stall limit on one entry (a run that hangs holds up
 * every session behind it) and the same happens; the stalled thread ends
 * by itself once its run returns.
 */
import type { Logger } from 'pino';
import type { InferenceSession } from 'onnxruntime-node';
import { SessionClient } from './session-client.js';
import { SessionThread } from './session-thread.js';

export interface SessionPoolSettings {
  /** Pool threads shared by small models' sessions; 0: every session gets a thread of its own. */
  readonly threads: number;
  /** A pool thread busy with one entry this long is stopped (ms). */
  readonly stallMs: number;
}

export interface SessionRequest {
  readonly modelPath: string;
  readonly options: InferenceSession.SessionOptions;
  readonly spinMicros: number;
  /** Names the session in log records ("model 'm' instance 'm_0'"). */
  readonly label: string;
  /** Sessions with the same key (the instances of one model version) are put on different threads. */
  readonly affinityKey: string;
  /** Whether the session may share a pool thread. */
  readonly shared: boolean;
  readonly logger: Logger;
}

export class SessionThreadPool {
  private readonly pooled: SessionThread[] = [];
  private readonly loggers = new WeakMap<SessionClient, Logger>();
  private watchdog: NodeJS.Timeout | undefined;

  constructor(readonly settings: SessionPoolSettings) {}

  /** Pool threads running now (for tests and log records). */
  get threadCount(): number {
    return this.pooled.length;
  }

  /** Creates a session where the request allows; rejects with onnxruntime's message when it cannot be created. */
  async open(req: SessionRequest): Promise<SessionClient> {
    const client = new SessionClient(req.modelPath, req.options, req.label);
    client.affinityKey = req.affinityKey;
    this.loggers.set(client, req.logger);
    const place = req.shared ? this.pick(req) : undefined;
    if (place === undefined) {
      await client.openOnOwn(ownThread(req.spinMicros, req.logger, req.label));
      return client;
    }
    await client.openOn(place);
    return client;
  }

  /**
   * The pool thread for a shared session: a new one while the pool is not
   * full, else the one with the fewest sessions among those without a
   * session of the same key; undefined when every thread has one.
   */
  private pick(req: SessionRequest): SessionThread | undefined {
    const size = this.settings.threads;
    if (size <= 0) return undefined;
    let best: SessionThread | undefined;
    let sameSpin = 0;
    for (const t of this.pooled) {
      if (t.spinMicros !== req.spinMicros || !t.alive) continue;
      sameSpin++;
      if (hostsKey(t, req.affinityKey)) continue;
      if (best === undefined || t.clients.size < best.clients.size) best = t;
    }
    if (sameSpin < size && (best === undefined || best.clients.size > 0)) return this.startThread(req.spinMicros);
    return best;
  }

  private startThread(spinMicros: number): SessionThread {
    const thread = new SessionThread(spinMicros);
    thread.onDeath = (err, clients) => this.threadDied(thread, err, clients);
    thread.onEmpty = () => this.retire(thread);
    this.pooled.push(thread);
    this.startWatchdog();
    return thread;
  }

  private forget(thread: SessionThread): void {
    const i = this.pooled.indexOf(thread);
    if (i >= 0) this.pooled.splice(i, 1);
    if (this.pooled.length === 0) this.stopWatchdog();
  }

  /** A pool thread with no sessions left ends. */
  private retire(thread: SessionThread): void {
    this.forget(thread);
    void thread.exit();
  }

  private threadDied(thread: SessionThread, err: Error, clients: readonly SessionClient[]): void {
    this.forget(thread);
    const logger = this.loggers.get(clients[0]!);
    logger?.error(
      { err: err.message, sessions: clients.map((c) => c.label) },
      `onnxruntime session thread ${thread.number} died: ${err.message}; its ${clients.length} session(s) fail their ` +
      `runs in flight and are created again, each on a thread of its own: ${clients.map((c) => c.label).join(', ')}`,
    );
    for (const client of clients) void this.restartAlone(client, thread.spinMicros);
  }

  /** Creates a session again on a thread of its own, after its pool thread died. */
  private async restartAlone(client: SessionClient, spinMicros: number): Promise<void> {
    const logger = this.loggers.get(client);
    const thread = ownThread(spinMicros, logger, client.label);
    try {
      await client.openOnOwn(thread);
      logger?.warn(`${client.label}: onnxruntime session created again on thread ${thread.number} of its own`);
    } catch (err) {
      // A session closed meanwhile needs nothing more.
      if ((err as Error).message !== 'onnxruntime session is closed') {
        logger?.error(
          { err: (err as Error).message },
          `${client.label}: onnxruntime session could not be created ` +
          `again: ${(err as Error).message}; the instance is not ready`,
        );
      }
    }
  }

  private startWatchdog(): void {
    if (this.watchdog !== undefined) return;
    const every = Math.max(10, Math.min(1000, this.settings.stallMs / 4));
    this.watchdog = setInterval(() => this.checkStalls(), every);
    this.watchdog.unref();
  }

  private stopWatchdog(): void {
    clearInterval(this.watchdog);
    this.watchdog = undefined;
  }

  private checkStalls(): void {
    const now = performance.now();
    for (const thread of [...this.pooled]) {
      const { ms, running } = thread.stalledFor(now);
      if (ms <= this.settings.stallMs || thread.clients.size < 2) continue;
      const who = running?.label ?? 'a session';
      thread.abandon(
        `${who} was busy for more than ${this.settings.stallMs} ms on a shared ` +
        `session thread, holding up the sessions behind it; the thread was given up`,
      );
    }
  }
}

function hostsKey(thread: SessionThread, key: string): boolean {
  for (const c of thread.clients.values()) if (c.affinityKey === key) return true;
  return false;
}

/** A thread for one session alone; its death is logged against that session. */
function ownThread(spinMicros: number, logger: Logger | undefined, label: string): SessionThread {
  const thread = new SessionThread(spinMicros);
  thread.onDeath = (err) =>
    logger?.error(
      { err: err.message },
      `onnxruntime session thread ${thread.number} of ${label} died: ${err.message}; the instance is not ready`,
    );
  return thread;
}
