/**
 * Triton mode: finished traces go to the trace file as Triton writes it.
 * With log-frequency N, every N traces of a setting go to `<file>.<i>`
 * (i counting from 0); otherwise they are kept and written to `<file>` at
 * shutdown. A setting taken out of force (an update) writes what it holds.
 */
import { writeFileSync } from 'node:fs';
import { writeFile } from 'node:fs/promises';
import type { Logger } from 'pino';
import type { ActiveSetting } from './settings.js';
import type { TraceGroup, TraceGroupSink } from './trace.js';
import { EntryBuffer } from './triton-format.js';

export class TritonFileSink implements TraceGroupSink {
  private index = 0;
  /** Traces for the plain file, written once at shutdown. */
  private readonly whole = new EntryBuffer();
  /** Settings holding traces not written yet. */
  private readonly holding = new Set<ActiveSetting>();
  private writes: Promise<void> = Promise.resolve();
  private closed = false;

  constructor(
    readonly file: string,
    private readonly logger: Logger | undefined,
  ) {}

  finished(group: TraceGroup): void {
    const setting = group.setting;
    if (setting === undefined || this.closed) return;
    const into = ((setting.pending as EntryBuffer | undefined) ??= new EntryBuffer());
    for (const trace of group.traces) into.append(trace);
    if (into.empty) return;
    setting.pendingGroups += 1;
    setting.collected += 1;
    this.holding.add(setting);
    const frequency = setting.values.logFrequency;
    const countDone = setting.remaining === 0 && setting.collected === setting.created;
    if ((frequency !== 0 && setting.pendingGroups >= frequency) || countDone) this.writeIndexed(setting);
  }

  /** A setting left force: what it holds goes out now (to an indexed file) or with the plain file. */
  replaced(setting: ActiveSetting): void {
    if (setting.pendingGroups === 0) return;
    if (setting.values.logFrequency !== 0) this.writeIndexed(setting);
    else this.moveToWhole(setting);
  }

  private moveToWhole(setting: ActiveSetting): void {
    const pending = setting.pending as EntryBuffer | undefined;
    if (pending !== undefined) this.whole.appendEntries(pending);
    setting.pendingGroups = 0;
    this.holding.delete(setting);
  }

  private writeIndexed(setting: ActiveSetting): void {
    const pending = setting.pending as EntryBuffer | undefined;
    setting.pendingGroups = 0;
    this.holding.delete(setting);
    if (pending === undefined || pending.empty) return;
    const body = pending.take();
    const name = `${this.file}.${this.index++}`;
    // Off the event loop; a failure is logged, as Triton logs it, and never reaches a request.
    this.writes = this.writes.then(() =>
      writeFile(name, body).catch((err: unknown) => this.logger?.error({ err, file: name }, 'failed ' +
        'creating trace file')),
    );
  }

  /** Shutdown (SIGTERM included): everything held is written before this resolves. */
  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    for (const setting of [...this.holding]) {
      if (setting.values.logFrequency !== 0) this.writeIndexed(setting);
      else this.moveToWhole(setting);
    }
    await this.writes;
    if (this.whole.empty) return;
    try {
      writeFileSync(this.file, this.whole.take());
    } catch (err) {
      this.logger?.error({ err, file: this.file }, 'failed creating trace file');
    }
  }
}
