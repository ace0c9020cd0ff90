/**
 * The main-thread side of a session worker: starts it, sends batches, and
 * matches results to the runs waiting for them.
 */
import { Worker } from 'node:worker_threads';
import type { FromWorker, SessionWorkerInit, ToWorker, WireTensor } from './worker-protocol.js';

const WORKER_URL = new URL('./session-worker.js', import.meta.url);

/** How long close() waits for the worker to release its session before terminating it. */
const CLOSE_GRACE_MS = 5000;

class PendingRun {
  constructor(
    readonly resolve: (outputs: readonly WireTensor[]) => void,
    readonly reject: (err: Error) => void,
  ) {}
}

export class SessionWorkerError extends Error {
  override readonly name = 'SessionWorkerError';
}

export class SessionClient {
  private readonly worker: Worker;
  private readonly pending = new Map<number, PendingRun>();
  private nextId = 1;
  private dead: Error | undefined;
  private onDrained: (() => void) | undefined;
  private readonly exited: Promise<void>;

  private constructor(worker: Worker) {
    this.worker = worker;
    this.exited = new Promise((resolve) => worker.once('exit', () => resolve()));
    worker.on('message', (msg: FromWorker) => this.onMessage(msg));
    worker.on('error', (err) => this.fail(new SessionWorkerError(`onnxruntime session thread failed: ${err.message}`)));
    worker.on('exit', (code) => this.fail(new SessionWorkerError(`onnxruntime session thread exited (code ${code})`)));
    // Idle workers do not keep the process alive; a run in flight does.
    worker.unref();
  }

  /** Starts a worker and creates its session. Rejects with onnxruntime's message when the session cannot be created. */
  static start(init: SessionWorkerInit): Promise<SessionClient> {
    const worker = new Worker(WORKER_URL, { workerData: init });
    return new Promise((resolve, reject) => {
      const onMessage = (msg: FromWorker): void => {
        cleanup();
        if (msg.kind === 'ready') resolve(new SessionClient(worker));
        else {
          reject(new SessionWorkerError(msg.kind === 'init-error' ? msg.message : `unexpected '${msg.kind}' from session thread`));
          void worker.terminate();
        }
      };
      const onError = (err: Error): void => {
        cleanup();
        reject(new SessionWorkerError(`onnxruntime session thread failed to start: ${err.message}`));
      };
      const onExit = (code: number): void => {
        cleanup();
        reject(new SessionWorkerError(`onnxruntime session thread exited during start (code ${code})`));
      };
      const cleanup = (): void => {
        worker.off('message', onMessage);
        worker.off('error', onError);
        worker.off('exit', onExit);
      };
      worker.on('message', onMessage);
      worker.on('error', onError);
      worker.on('exit', onExit);
    });
  }

  get alive(): boolean {
    return this.dead === undefined;
  }

  /**
   * Runs the session. The ArrayBuffers of numeric feeds are transferred to the
   * worker (they must not be used afterwards); outputs come back transferred.
   */
  run(feeds: readonly WireTensor[], fetches: readonly string[]): Promise<readonly WireTensor[]> {
    if (this.dead) return Promise.reject(this.dead);
    const id = this.nextId++;
    const transfer: ArrayBuffer[] = [];
    for (const f of feeds) {
      if (!Array.isArray(f.data)) {
        const buf = (f.data as ArrayBufferView).buffer;
        if (buf instanceof ArrayBuffer && !transfer.includes(buf)) transfer.push(buf);
      }
    }
    const msg: ToWorker = { kind: 'run', id, feeds, fetches };
    return new Promise((resolve, reject) => {
      this.pending.set(id, new PendingRun(resolve, reject));
      if (this.pending.size === 1) this.worker.ref();
      this.worker.postMessage(msg, transfer);
    });
  }

  async close(): Promise<void> {
    if (this.dead) return;
    this.dead = new SessionWorkerError('onnxruntime session is closed');
    // Let runs already handed to the worker finish before the session goes.
    if (this.pending.size > 0) await new Promise<void>((resolve) => (this.onDrained = resolve));
    this.worker.ref();
    this.worker.postMessage({ kind: 'close' } satisfies ToWorker);
    const timer = setTimeout(() => void this.worker.terminate(), CLOSE_GRACE_MS);
    await this.exited;
    clearTimeout(timer);
  }

  private onMessage(msg: FromWorker): void {
    if (msg.kind !== 'result' && msg.kind !== 'run-error') return;
    const p = this.pending.get(msg.id);
    if (!p) return;
    this.pending.delete(msg.id);
    if (this.pending.size === 0) {
      this.worker.unref();
      this.onDrained?.();
    }
    if (msg.kind === 'result') p.resolve(msg.outputs);
    else p.reject(new SessionWorkerError(msg.message));
  }

  private fail(err: Error): void {
    if (!this.dead) this.dead = err;
    for (const p of this.pending.values()) p.reject(err);
    this.pending.clear();
    this.onDrained?.();
  }
}
