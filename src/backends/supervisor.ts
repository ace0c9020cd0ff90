/**
 * Keeps one instance's worker (a process or a thread) running: when it dies
 * unexpectedly the requests it held fail (the worker rejects them), and a new
 * worker is started and initialized after a backoff that grows while crashes
 * repeat. Shared by the process-based backends and the javascript backend.
 */
import type { Logger } from 'pino';

const FIRST_BACKOFF_MS = 100;
const MAX_BACKOFF_MS = 10_000;
/** A worker that lived this long resets the backoff. */
const STABLE_AFTER_MS = 30_000;

/** What the supervisor needs of a worker. */
export interface SupervisedWorker {
  readonly isAlive: boolean;
  /** Date.now() when it was started. */
  readonly startedAt: number;
  /** For log records: a process id or a thread id. */
  readonly pid?: number;
  /** Set by the supervisor; the worker calls it once when it ends without close() having been called. */
  onUnexpectedExit: ((info: never, err: Error) => void) | undefined;
  close(graceMs: number): Promise<void>;
}

export class Supervisor<W extends SupervisedWorker> {
  /** How many times the worker was restarted after an unexpected exit. */
  restartCount = 0;
  private worker: W | null = null;
  private pending: Promise<W> | null = null;
  private failures = 0;
  private closed = false;
  private timer: NodeJS.Timeout | undefined;
  /** Rejects the wait before a scheduled restart (used by close()). */
  private cancelWait: ((err: Error) => void) | undefined;

  /**
   * `noun` names the worker in log records ("Python process", "worker thread");
   * `label` names the instance ("model 'm' instance 'm_0'").
   */
  constructor(
    private readonly launch: () => Promise<W>,
    private readonly logger: Logger,
    private readonly label: string,
    private readonly noun: string,
  ) {}

  /** First start: failures propagate to the caller (the model fails to load). */
  async start(): Promise<W> {
    const w = await this.launch();
    this.adopt(w);
    return w;
  }

  /** The running worker, waiting for a restart in progress. */
  current(): Promise<W> {
    if (this.worker?.isAlive) return Promise.resolve(this.worker);
    if (this.pending) return this.pending;
    if (this.closed) return Promise.reject(new Error(`${this.label} is unloaded`));
    return this.scheduleRestart();
  }

  /** The running worker if there is one, without waiting. */
  get running(): W | null {
    return this.worker?.isAlive ? this.worker : null;
  }

  async close(graceMs: number): Promise<void> {
    this.closed = true;
    clearTimeout(this.timer);
    this.cancelWait?.(new Error(`${this.label} is unloaded`));
    const w = this.worker;
    this.worker = null;
    if (w) await w.close(graceMs);
  }

  private adopt(w: W): void {
    this.worker = w;
    const onExit = (_info: never, err: Error): void => {
      if (this.worker === w) this.worker = null;
      if (this.closed) return;
      if (Date.now() - w.startedAt > STABLE_AFTER_MS) this.failures = 0;
      this.logger.error({ err: err.message }, `${this.label}: ${this.noun} died; restarting it`);
      void this.scheduleRestart().catch(() => {});
    };
    w.onUnexpectedExit = onExit;
  }

  private scheduleRestart(): Promise<W> {
    if (this.pending) return this.pending;
    const delay = Math.min(FIRST_BACKOFF_MS * 2 ** this.failures, MAX_BACKOFF_MS);
    this.failures++;
    const attempt = new Promise<void>((resolve, reject) => {
      // Not unref'd: a request waiting for the restart must keep the process alive.
      this.timer = setTimeout(resolve, delay);
      this.cancelWait = reject;
    }).then(async () => {
      this.cancelWait = undefined;
      if (this.closed) throw new Error(`${this.label} is unloaded`);
      const w = await this.launch();
      if (this.closed) {
        await w.close(1000);
        throw new Error(`${this.label} is unloaded`);
      }
      this.restartCount++;
      this.logger.warn(
        { restartCount: this.restartCount, pid: w.pid },
        `${this.label}: ${this.noun} restarted (restart #${this.restartCount})`,
      );
      this.adopt(w);
      return w;
    });
    this.pending = attempt;
    attempt.then(
      () => {
        if (this.pending === attempt) this.pending = null;
      },
      (err: unknown) => {
        if (this.pending === attempt) this.pending = null;
        if (this.closed) return;
        this.logger.error({ err: (err as Error).message }, `${this.label}: restart failed; trying again`);
        void this.scheduleRestart().catch(() => {});
      },
    );
    return attempt;
  }
}
