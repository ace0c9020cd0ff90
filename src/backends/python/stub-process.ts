/**
 * One Python worker process (python/nereid_stub.py) and the command channel
 * to it. Commands run one at a time; while one runs, the worker may send BLS
 * calls and log records, which are served here. The process's stdout and
 * stderr go to the model's logger line by line.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import type { Socket } from 'node:net';
import type { Logger } from 'pino';
import { type StartWaiter, waitForStart } from '../start-timeout.js';
import { FrameDecoder, writeFrame, type Frame, type FrameHeader } from './frame.js';

export interface StubOptions {
  readonly executable: string;
  readonly script: string;
  readonly args: readonly string[];
  readonly env: NodeJS.ProcessEnv;
  readonly logger: Logger;
  /** Names the process in messages, e.g. "model 'add_sub' instance 'add_sub_0'". */
  readonly label: string;
  /** How long to wait for the worker to report that it started. */
  readonly startTimeoutMs: number;
  /** Serves a BLS call from the worker; resolves with the reply frame to send back. */
  readonly onBls?: (frame: Frame) => Promise<{ header: FrameHeader; buffers: Uint8Array[] }>;
  /** Serves a BLS call on a decoupled model: `reply` writes each response frame back. */
  readonly onBlsStream?: (frame: Frame, reply: (header: FrameHeader, buffers: Uint8Array[]) => void) => Promise<void>;
}

/** Receives the responses a decoupled model sends for one request (frames of type 's'). */
export interface StreamSink {
  /** One response frame; `final` when its flag ends the request. */
  response(frame: Frame, final: boolean): void;
  /** The process died with the request still open. */
  failed(err: Error): void;
}

export interface ExitInfo {
  readonly code: number | null;
  readonly signal: NodeJS.Signals | null;
}

class PendingCommand {
  constructor(
    readonly header: FrameHeader,
    readonly buffers: readonly Uint8Array[],
    readonly resolve: (frame: Frame) => void,
    readonly reject: (err: Error) => void,
  ) {}
}

const STDERR_TAIL_LINES = 20;
const PY_LEVELS = ['info', 'warn', 'error', 'debug'] as const;

export class StubProcess {
  readonly pid: number | undefined;
  readonly startedAt = Date.now();
  /** Versions the worker reported (python, numpy, torch...). */
  versions: Record<string, string> = {};
  /** Called once when the process ends without close() having been called. */
  onUnexpectedExit: ((info: ExitInfo, err: Error) => void) | undefined;

  private readonly child: ChildProcess;
  private readonly toWorker: Socket;
  /** Cancellation notices for decoupled requests (fd 5; the worker polls it). */
  private readonly cancelPipe: Socket;
  private readonly streams = new Map<number, StreamSink>();
  private nextStreamKey = 1;
  private readonly queue: PendingCommand[] = [];
  private active: PendingCommand | null = null;
  private alive = true;
  private closing = false;
  private readonly stderrTail: string[] = [];
  private readonly exitPromise: Promise<ExitInfo>;
  private helloWaiter: StartWaiter | null = null;

  private constructor(private readonly opts: StubOptions) {
    this.child = spawn(opts.executable, [opts.script, ...opts.args], {
      stdio: ['ignore', 'pipe', 'pipe', 'pipe', 'pipe', 'pipe'],
      env: opts.env,
    });
    this.pid = this.child.pid;
    this.toWorker = this.child.stdio[3] as Socket;
    const fromWorker = this.child.stdio[4] as Socket;
    this.cancelPipe = (this.child.stdio as unknown as Socket[])[5]!;
    this.cancelPipe.on('error', () => {});
    const decoder = new FrameDecoder((f) => this.onFrame(f));
    fromWorker.on('data', (chunk: Buffer) => {
      try {
        decoder.push(chunk);
      } catch (err) {
        this.fail(new Error(`${opts.label}: unreadable message from the Python process: ${(err as Error).message}`));
        this.child.kill('SIGKILL');
      }
    });
    // The pipes error with EPIPE when the worker dies; the exit handler reports that.
    fromWorker.on('error', () => {});
    this.toWorker.on('error', () => {});
    this.pipeLines(this.child.stdout!, 'stdout');
    this.pipeLines(this.child.stderr!, 'stderr');

    this.exitPromise = new Promise<ExitInfo>((resolve) => {
      let spawnError: Error | undefined;
      this.child.on('error', (err) => {
        spawnError = err;
        // 'exit' may not follow a failed spawn
        if (this.child.pid === undefined) finish(null, null);
      });
      const finish = (code: number | null, signal: NodeJS.Signals | null): void => {
        if (!this.alive) return;
        this.alive = false;
        const info: ExitInfo = { code, signal };
        const err = spawnError
          ? new Error(`${opts.label}: cannot start Python interpreter '${opts.executable}': ${spawnError.message}`)
          : new Error(`${opts.label}: the Python process ${this.describeExit(info)}${this.tailText()}`);
        const wasClosing = this.closing;
        this.fail(err);
        resolve(info);
        if (!wasClosing) this.onUnexpectedExit?.(info, err);
      };
      this.child.on('exit', (code, signal) => {
        // let stderr drain so that the tail names the cause
        setImmediate(() => finish(code, signal));
      });
    });
  }

  /** Spawns the worker and waits until it reports that it is ready for commands. */
  static async start(opts: StubOptions): Promise<StubProcess> {
    const p = new StubProcess(opts);
    await waitForStart(
      opts.startTimeoutMs,
      () => new Error(`${opts.label}: the Python process did not start within ${opts.startTimeoutMs} ms`),
      () => p.kill(),
      (waiter) => (p.helloWaiter = waiter),
    );
    return p;
  }

  get isAlive(): boolean {
    return this.alive;
  }

  get exited(): Promise<ExitInfo> {
    return this.exitPromise;
  }

  /** Sends a command; resolves with the worker's reply frame, rejects if the process dies first. */
  command(header: FrameHeader, buffers: readonly Uint8Array[] = []): Promise<Frame> {
    return new Promise<Frame>((resolve, reject) => {
      if (!this.alive) {
        reject(new Error(`${this.opts.label}: the Python process is not running`));
        return;
      }
      const cmd = new PendingCommand(header, buffers, resolve, reject);
      if (this.active) this.queue.push(cmd);
      else this.dispatch(cmd);
    });
  }

  /** Like command(), but gives up (and kills the process) after timeoutMs. */
  async commandWithTimeout(header: FrameHeader, timeoutMs: number, what: string): Promise<Frame> {
    let timer: NodeJS.Timeout | undefined;
    const timeout = new Promise<never>((_, reject) => {
      timer = setTimeout(() => {
        reject(new Error(`${this.opts.label}: ${what} did not answer within ${timeoutMs} ms`));
      }, timeoutMs);
    });
    try {
      return await Promise.race([this.command(header), timeout]);
    } finally {
      clearTimeout(timer);
    }
  }

  /** Registers a decoupled request; its key goes to the worker with the request. */
  openStream(sink: StreamSink): number {
    const key = this.nextStreamKey++;
    this.streams.set(key, sink);
    return key;
  }

  /** Forgets a request whose stream the server ended itself. */
  closeStream(key: number): void {
    this.streams.delete(key);
  }

  /** Requests still waiting for their final response. */
  get openStreamCount(): number {
    return this.streams.size;
  }

  /** Tells the worker that the client of an open request went away (is_cancelled()). */
  cancelStream(key: number): void {
    if (this.alive && this.streams.has(key)) writeFrame(this.cancelPipe, { t: 'cancel', k: key }, []);
  }

  /** Asks the worker to finalize and exit; kills it if it does not within graceMs. */
  async close(graceMs: number): Promise<void> {
    if (!this.alive) return;
    this.closing = true;
    try {
      await this.commandWithTimeout({ t: 'finalize' }, graceMs, 'finalize()');
    } catch (err) {
      this.opts.logger.warn({ err: (err as Error).message }, 'finalize failed');
    }
    const exited = await Promise.race([
      this.exitPromise.then(() => true),
      new Promise<boolean>((r) => setTimeout(() => r(false), Math.min(graceMs, 2000)).unref()),
    ]);
    if (!exited) {
      this.child.kill('SIGKILL');
      await this.exitPromise;
    }
  }

  /** Kills the process now (used by start timeouts and by close when finalize hangs). */
  kill(signal: NodeJS.Signals = 'SIGKILL'): void {
    this.closing = true;
    if (this.alive) this.child.kill(signal);
  }

  private dispatch(cmd: PendingCommand): void {
    this.active = cmd;
    writeFrame(this.toWorker, cmd.header, cmd.buffers);
  }

  private onFrame(frame: Frame): void {
    const h = frame.header;
    switch (h.t) {
      case 'log':
        this.onLogRecord(h);
        return;
      case 's': {
        const key = h.k as number;
        const sink = this.streams.get(key);
        const final = h.f === 1;
        if (sink === undefined) {
          this.opts.logger.warn({ key }, 'a response for a request that already ended was dropped');
          return;
        }
        if (final) this.streams.delete(key);
        sink.response(frame, final);
        return;
      }
      case 'bls':
        this.onBlsCall(frame);
        return;
      case 'hello':
        this.versions = (h.versions as Record<string, string> | undefined) ?? {};
        this.helloWaiter?.resolve();
        this.helloWaiter = null;
        return;
      case 'fatal':
        this.helloWaiter?.reject(new Error(String(h.m)));
        this.helloWaiter = null;
        return;
      default: {
        const cmd = this.active;
        if (!cmd) {
          this.opts.logger.warn({ type: h.t }, 'unexpected message from the Python process');
          return;
        }
        this.active = null;
        const next = this.queue.shift();
        if (next) this.dispatch(next);
        cmd.resolve(frame);
      }
    }
  }

  private onLogRecord(h: FrameHeader): void {
    const level = PY_LEVELS[Number(h.l)] ?? 'info';
    this.opts.logger[level]({ source: 'pb_utils.Logger' }, String(h.m));
  }

  private onBlsCall(frame: Frame): void {
    const id = frame.header.id;
    if (frame.header.dec === true) {
      const stream = this.opts.onBlsStream;
      const write = (header: FrameHeader, buffers: Uint8Array[]): void => {
        if (this.alive) writeFrame(this.toWorker, header, buffers);
      };
      if (!stream) {
        write({ t: 'bls_result', id, fin: true, e: { m: 'BLS is not available here', c: 'UNSUPPORTED' } }, []);
        return;
      }
      stream(frame, write).catch((err: unknown) => {
        const m = err instanceof Error ? err.message : String(err);
        write({ t: 'bls_result', id, fin: true, e: { m, c: 'INTERNAL' } }, []);
      });
      return;
    }
    const serve = this.opts.onBls;
    if (!serve) {
      writeFrame(this.toWorker, { t: 'bls_result', id, e: { m: 'BLS is not available here', c: 'UNSUPPORTED' } }, []);
      return;
    }
    serve(frame).then(
      (reply) => {
        if (this.alive) writeFrame(this.toWorker, reply.header, reply.buffers);
      },
      (err: unknown) => {
        const m = err instanceof Error ? err.message : String(err);
        if (this.alive) writeFrame(this.toWorker, { t: 'bls_result', id, e: { m, c: 'INTERNAL' } }, []);
      },
    );
  }

  private fail(err: Error): void {
    this.helloWaiter?.reject(err);
    this.helloWaiter = null;
    const active = this.active;
    this.active = null;
    active?.reject(err);
    for (const cmd of this.queue.splice(0)) cmd.reject(err);
    if (this.streams.size > 0) {
      const sinks = [...this.streams.values()];
      this.streams.clear();
      for (const sink of sinks) sink.failed(err);
    }
  }

  private pipeLines(stream: NodeJS.ReadableStream, name: 'stdout' | 'stderr'): void {
    let partial = '';
    stream.setEncoding('utf8');
    stream.on('data', (text: string) => {
      const lines = (partial + text).split('\n');
      partial = lines.pop() ?? '';
      for (const line of lines) this.logLine(name, line);
    });
    stream.on('end', () => {
      if (partial) this.logLine(name, partial);
      partial = '';
    });
  }

  private logLine(stream: 'stdout' | 'stderr', line: string): void {
    if (stream === 'stderr') {
      this.stderrTail.push(line);
      if (this.stderrTail.length > STDERR_TAIL_LINES) this.stderrTail.shift();
    }
    this.opts.logger.info({ stream }, line);
  }

  private describeExit(info: ExitInfo): string {
    if (info.signal) return `was killed by signal ${info.signal}`;
    return `exited with code ${info.code}`;
  }

  private tailText(): string {
    const last = this.stderrTail.filter((l) => l.trim() !== '').slice(-1)[0];
    return last ? ` (last stderr line: ${last.trim()})` : '';
  }
}
