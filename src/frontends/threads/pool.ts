/**
 * The main thread's side of the frontend threads: starts them on one port (the first picks it when the port is 0),
 * restarts one that dies (only its connections are lost), and drains and stops them with the frontend.
 */
import net from 'node:net';
import { MessageChannel, type MessagePort, Worker } from 'node:worker_threads';
import type { FrontendBridge } from './bridge.js';
import { BASE_HR } from '../../trace/clock.js';
import type { Logger } from '../../logger.js';
import type { BridgeEnds, FrontendThreadInit, MainMessage, ThreadMessage } from './protocol.js';

const WORKER_URL = new URL('../worker/worker.js', import.meta.url);
/** How long stop() waits for a thread past its grace period before terminating it. */
const STOP_MARGIN_MS = 2000;

export class ListenFailure extends Error {
  constructor(
    readonly code: string | undefined,
    message: string,
  ) {
    super(message);
  }
}

export class FrontendThreadPool {
  private readonly threads: (Worker | undefined)[];
  private port = 0;
  private stopping = false;
  /** Restarts so far (for tests and the log). */
  restarts = 0;

  constructor(
    private readonly init: Omit<FrontendThreadInit, 'index' | 'bridge'>,
    count: number,
    private readonly logger: Logger,
    /** Serves the threads' own infer requests; without it they forward everything. */
    private readonly bridge?: FrontendBridge,
  ) {
    this.threads = new Array<Worker | undefined>(count).fill(undefined);
  }

  get size(): number {
    return this.threads.length;
  }

  /** The running threads (a test ends one to see it restarted). */
  workers(): readonly Worker[] {
    return this.threads.filter((w): w is Worker => w !== undefined);
  }

  /** Starts every thread; resolves with the port they share. */
  async start(): Promise<number> {
    // Threads that share a port with SO_REUSEPORT would share it with another server that set it as well: a plain
    // bind first fails as Triton's would when the port is taken.
    if (this.init.port !== 0) await probePort(this.init.port, this.init.address);
    try {
      this.port = await this.spawn(0, this.init.port);
      await Promise.all(this.threads.slice(1).map((_, i) => this.spawn(i + 1, this.port)));
    } catch (err) {
      await this.stop(0);
      throw err;
    }
    return this.port;
  }

  /** Reads the tracer's state into what the threads share (before a forwarded request's answer goes out). */
  readonly refreshShared = (): void => this.bridge?.refreshTracing();

  drain(): void {
    this.post({ t: 'drain' });
  }

  /** Stops the threads: each closes its listener, lets its calls finish within `graceMs`, then ends. */
  async stop(graceMs: number): Promise<void> {
    this.stopping = true;
    const exits = this.workers().map(
      (w) =>
        new Promise<void>((resolve) => {
          const timer = setTimeout(() => void w.terminate(), graceMs + STOP_MARGIN_MS);
          w.once('exit', () => {
            clearTimeout(timer);
            resolve();
          });
        }),
    );
    this.post({ t: 'stop', graceMs });
    await Promise.all(exits);
    await this.bridge?.drained();
    this.bridge?.close();
  }

  private post(message: MainMessage): void {
    for (const w of this.workers()) w.postMessage(message);
  }

  private spawn(index: number, port: number): Promise<number> {
    return new Promise<number>((resolve, reject) => {
      let bridge: BridgeEnds | undefined;
      const transferList: MessagePort[] = [];
      if (this.bridge !== undefined) {
        const line = new MessageChannel();
        const sync = new MessageChannel();
        const signal = new Int32Array(new SharedArrayBuffer(4));
        this.bridge.attach(line.port1, sync.port1, signal);
        bridge = { port: line.port2, sync: sync.port2, signal, shared: this.bridge.shared, clockBase: BASE_HR };
        transferList.push(line.port2, sync.port2);
      }
      const auth = this.bridge?.attachAuth();
      if (auth !== undefined) transferList.push(auth.port);
      const init: FrontendThreadInit = { ...this.init, port, index, bridge, auth };
      let worker: Worker;
      try {
        worker = new Worker(WORKER_URL, { workerData: init, transferList });
      } catch (err) {
        // No thread took the ports: closed here, so that stop() does not wait for their close.
        for (const p of transferList) p.close();
        throw err;
      }
      this.threads[index] = worker;
      let listening = false;
      worker.on('message', (m: ThreadMessage) => {
        if (m.t === 'listening') {
          listening = true;
          resolve(m.port);
        } else if (m.t === 'failed') {
          reject(new ListenFailure(m.code, m.message));
        } else if (m.t === 'log') {
          this.logger[m.level]({ thread: index, kind: this.init.kind, detail: m.detail }, m.msg);
        }
      });
      worker.on('error', (err) => {
        if (!listening) reject(err);
        else this.logger.error({ err, thread: index, kind: this.init.kind }, 'frontend thread failed');
      });
      worker.on('exit', (code) => {
        if (!listening) reject(new Error(`${this.init.kind} frontend thread ${index} exited with ${code} at start`));
        if (this.threads[index] !== worker) return;
        this.threads[index] = undefined;
        if (this.stopping || !listening) return;
        this.restarts++;
        this.logger.warn(
          { thread: index, kind: this.init.kind, code },
          'frontend thread ended: restarting it (its connections were lost)',
        );
        this.spawn(index, this.port).catch((err: unknown) =>
          this.logger.error({ err, thread: index, kind: this.init.kind }, 'frontend thread failed to restart'),
        );
      });
    });
  }
}

function probePort(port: number, host: string): Promise<void> {
  return new Promise((resolve, reject) => {
    const probe = net.createServer();
    probe.once('error', (err: NodeJS.ErrnoException) => reject(new ListenFailure(err.code, err.message)));
    probe.listen({ port, host }, () => probe.close(() => resolve()));
  });
}
