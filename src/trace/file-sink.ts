/**
 * Triton mode: finished traces go to the trace file as Triton writes it.
 * With log-frequency N, every N traces of a setting go to `<file>.<i>`
 * (i counting from 0); otherwise they are kept and written to `<file>` at
 * shutdown. A setting taken out of force (an update) writes what it holds.
 *
 * The event loop only writes each trace as numbers into a batch (file-record.ts) and decides where entries go;
 * the JSON text and the file writes are made on a thread of its own (file-writer.ts).
 */
import { Worker } from 'node:worker_threads';
import type { Logger } from 'pino';
import type { ActiveSetting } from './settings.js';
import type { TraceGroup, TraceGroupSink } from './trace.js';
import { DEFAULT_FILE_THREAD_NICE, traceThreadNice } from './thread-priority.js';
import {
  BASE_HR,
  type FileWriterInit,
  type FromFileWriter,
  OP_WHOLE,
  OP_WRITE,
  RecordWriter,
  type ToFileWriter,
} from './file-record.js';

const WRITER_URL = new URL('./file-writer.js', import.meta.url);
/** A batch goes to the writer thread after this long, or once it holds this many requests. */
const FLUSH_MS = 20;
const FLUSH_GROUPS = 512;

let nextKey = 1;

export class TritonFileSink implements TraceGroupSink {
  private index = 0;
  /** Settings holding traces not written yet. */
  private readonly holding = new Set<ActiveSetting>();
  private closed: Promise<void> | undefined;
  private readonly worker: Worker;
  private records = new RecordWriter();
  private groups = 0;
  private flushing = false;
  private onClosed: (() => void) | undefined;

  constructor(
    readonly file: string,
    private readonly logger: Logger | undefined,
  ) {
    this.worker = new Worker(WRITER_URL, {
      workerData: { base: BASE_HR, nice: traceThreadNice(DEFAULT_FILE_THREAD_NICE) } satisfies FileWriterInit,
    });
    this.worker.unref();
    this.worker.on('message', (msg: FromFileWriter) => {
      if (msg.t === 'closed') this.onClosed?.();
      else if (msg.t === 'nice') {
        this.logger?.debug({ err: { message: msg.message } }, 'the trace file thread keeps its priority');
      } else this.logger?.error({ err: { message: msg.message }, file: msg.file }, 'failed creating trace file');
    });
    this.worker.on('error', (err: unknown) => this.logger?.error({ err }, 'the trace file thread failed'));
    this.worker.on('exit', () => this.onClosed?.());
  }

  finished(group: TraceGroup): void {
    const setting = group.setting;
    if (setting === undefined || this.closed !== undefined) return;
    const key = ((setting.pending as number | undefined) ??= nextKey++);
    let wrote = false;
    for (const trace of group.traces) if (this.records.trace(key, trace)) wrote = true;
    if (!wrote) return;
    setting.pendingGroups += 1;
    setting.collected += 1;
    this.holding.add(setting);
    const frequency = setting.values.logFrequency;
    const countDone = setting.remaining === 0 && setting.collected === setting.created;
    if ((frequency !== 0 && setting.pendingGroups >= frequency) || countDone) this.writeIndexed(setting);
    if (++this.groups >= FLUSH_GROUPS) this.flush();
    else if (!this.flushing) {
      // Batches of several turns of the event loop: each message wakes the writer thread, which costs more.
      this.flushing = true;
      setTimeout(() => {
        this.flushing = false;
        this.flush();
      }, FLUSH_MS).unref();
    }
  }

  /** A setting left force: what it holds goes out now (to an indexed file) or with the plain file. */
  replaced(setting: ActiveSetting): void {
    if (setting.pendingGroups === 0) return;
    if (setting.values.logFrequency !== 0) this.writeIndexed(setting);
    else this.moveToWhole(setting);
    this.flush();
  }

  private moveToWhole(setting: ActiveSetting): void {
    if (setting.pendingGroups === 0) return;
    this.records.op(OP_WHOLE, setting.pending as number);
    setting.pendingGroups = 0;
    this.holding.delete(setting);
  }

  private writeIndexed(setting: ActiveSetting): void {
    if (setting.pendingGroups === 0) return;
    setting.pendingGroups = 0;
    this.holding.delete(setting);
    this.records.op(OP_WRITE, setting.pending as number, `${this.file}.${this.index++}`);
  }

  private flush(): void {
    this.groups = 0;
    if (this.records.empty) return;
    const batch = this.records.take();
    this.worker.postMessage(batch satisfies ToFileWriter, [batch.nums.buffer]);
  }

  /** Shutdown (SIGTERM included): everything held is written before this resolves. */
  close(): Promise<void> {
    if (this.closed !== undefined) return this.closed;
    for (const setting of [...this.holding]) {
      if (setting.values.logFrequency !== 0) this.writeIndexed(setting);
      else this.moveToWhole(setting);
    }
    this.flush();
    this.closed = new Promise<void>((resolve) => {
      this.onClosed = resolve;
      this.worker.ref();
      this.worker.postMessage({ t: 'close', file: this.file } satisfies ToFileWriter);
    }).then(() => this.worker.terminate().then(() => undefined));
    return this.closed;
  }
}
