/**
 * Keeps one instance's worker process running: when it dies unexpectedly the
 * requests it held fail (StubProcess rejects them), and a new process is
 * started and initialized after a backoff that grows while crashes repeat.
 */
import type { Logger } from 'pino';
import type { StubProcess } from './stub-process.js';

const FIRST_BACKOFF_MS = 100;
const MAX_BACKOFF_MS = 10_000;
/** A process that lived this long resets the backoff. */
const STABLE_AFTER_MS = 30_000;

export class StubSupervisor {
  /** How many times the process was restarted after an unexpected exit. */
  restartCount = 0;
  private proc: StubProcess | null = null;
  private pending: Promise<StubProcess> | null = null;
  private failures = 0;
  private closed = false;
  private timer: NodeJS.Timeout | undefined;
  /** Rejects the wait before a scheduled restart (used by close()). */
  private cancelWait: ((err: Error) => void) | undefined;

  constructor(
    private readonly launch: () => Promise<StubProcess>,
    private readonly logger: Logger,
    private readonly label: string,
  ) {}

  /** First start: failures propagate to the caller (the model fails to load). */
  async start(): Promise<StubProcess> {
    const p = await this.launch();
    this.adopt(p);
    return p;
  }

  /** The running process, waiting for a restart in progress. */
  current(): Promise<StubProcess> {
    if (this.proc?.isAlive) return Promise.resolve(this.proc);
    if (this.pending) return this.pending;
    if (this.closed) return Promise.reject(new Error(`${this.label} is unloaded`));
    return this.scheduleRestart();
  }

  /** The running process if there is one, without waiting. */
  get running(): StubProcess | null {
    return this.proc?.isAlive ? this.proc : null;
  }

  async close(graceMs: number): Promise<void> {
    this.closed = true;
    clearTimeout(this.timer);
    this.cancelWait?.(new Error(`${this.label} is unloaded`));
    const p = this.proc;
    this.proc = null;
    if (p) await p.close(graceMs);
  }

  private adopt(p: StubProcess): void {
    this.proc = p;
    p.onUnexpectedExit = (_info, err) => {
      if (this.proc === p) this.proc = null;
      if (this.closed) return;
      if (Date.now() - p.startedAt > STABLE_AFTER_MS) this.failures = 0;
      this.logger.error({ err: err.message }, `${this.label}: Python process died; restarting it`);
      void this.scheduleRestart().catch(() => {});
    };
  }

  private scheduleRestart(): Promise<StubProcess> {
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
      const p = await this.launch();
      if (this.closed) {
        await p.close(1000);
        throw new Error(`${this.label} is unloaded`);
      }
      this.restartCount++;
      this.logger.warn(
        { restartCount: this.restartCount, pid: p.pid },
        `${this.label}: Python process restarted (restart #${this.restartCount})`,
      );
      this.adopt(p);
      return p;
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
