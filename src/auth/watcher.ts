/**
 * Re-reads the keys file when it changes, without a restart: fs.watch on
 * its folder (which also sees an editor's rename and a Kubernetes Secret's
 * symlink swap) and, because a watch can miss events or be unavailable, a
 * poll of the file's bytes every second. A file that no longer parses keeps
 * the previous keys and logs file:line and why.
 */
import { watch, type FSWatcher } from 'node:fs';
import { readFile } from 'node:fs/promises';
import path from 'node:path';
import type { Logger } from 'pino';
import { type KeyTable, KeysFileError, MAX_KEYS_FILE_BYTES, parseKeysFile } from './keys-file.js';

export interface KeysWatcherOptions {
  /** How often the file is read when no watch event came (default 1000 ms; a new key works within 2 s). */
  readonly pollMs?: number;
  /** Quiet time after a watch event before reading, so a file written in steps is read whole (default 50 ms). */
  readonly settleMs?: number;
  /** false: poll only (as where fs.watch is unavailable). */
  readonly watch?: boolean;
}

export class KeysFileWatcher {
  private watcher: FSWatcher | undefined;
  private poll: NodeJS.Timeout | undefined;
  private settle: NodeJS.Timeout | undefined;
  private lastText: string;
  private reading: Promise<void> | undefined;
  private again = false;
  private closed = false;

  constructor(
    readonly file: string,
    /** The text the current keys were parsed from. */
    initialText: string,
    private readonly apply: (table: KeyTable) => void,
    private readonly logger: Logger,
    private readonly options: KeysWatcherOptions = {},
  ) {
    this.lastText = initialText;
  }

  start(): void {
    const base = path.basename(this.file);
    if (this.options.watch !== false) this.startWatch(base);
    this.poll = setInterval(() => void this.reload(), this.options.pollMs ?? 1000);
    this.poll.unref();
  }

  private startWatch(base: string): void {
    try {
      this.watcher = watch(path.dirname(this.file), { persistent: false }, (_event, name) => {
        // A Secret volume swaps its `..data` link; an editor renames a temporary file over ours.
        if (name === null || name === base || name.startsWith('..')) this.soon();
      });
      this.watcher.on('error', (err) => {
        this.logger.warn({ file: this.file, err: err.message }, 'keys file: watch failed, polling only');
        this.watcher?.close();
        this.watcher = undefined;
      });
    } catch (err) {
      this.logger.warn({ file: this.file, err: (err as Error).message }, 'keys file: cannot watch, polling only');
    }
  }

  close(): void {
    this.closed = true;
    this.watcher?.close();
    if (this.poll !== undefined) clearInterval(this.poll);
    if (this.settle !== undefined) clearTimeout(this.settle);
  }

  /** Reads the file now (after any read in progress); resolves when done. */
  reload(): Promise<void> {
    if (this.closed) return Promise.resolve();
    if (this.reading !== undefined) {
      this.again = true;
      return this.reading;
    }
    this.reading = this.read().finally(() => {
      this.reading = undefined;
      if (this.again) {
        this.again = false;
        void this.reload();
      }
    });
    return this.reading;
  }

  private soon(): void {
    if (this.closed) return;
    if (this.settle !== undefined) clearTimeout(this.settle);
    this.settle = setTimeout(() => {
      this.settle = undefined;
      void this.reload();
    }, this.options.settleMs ?? 50);
    this.settle.unref();
  }

  private async read(): Promise<void> {
    let text: string;
    try {
      const bytes = await readFile(this.file);
      if (bytes.byteLength > MAX_KEYS_FILE_BYTES) {
        throw new KeysFileError(
          this.file,
          1,
          '',
          `the keys file is ${bytes.byteLength} bytes, more than the ${MAX_KEYS_FILE_BYTES} accepted`,
        );
      }
      text = bytes.toString('utf8');
    } catch (err) {
      this.refuse(
        err instanceof KeysFileError
          ? err
          : new KeysFileError(this.file, 1, '', `cannot read the keys file: ${(err as Error).message}`),
        '',
      );
      return;
    }
    if (text === this.lastText || this.closed) return;
    let table: KeyTable;
    try {
      table = parseKeysFile(this.file, text);
    } catch (err) {
      if (!(err instanceof KeysFileError)) throw err;
      this.refuse(err, text);
      return;
    }
    this.lastText = text;
    this.refused = undefined;
    this.apply(table);
    this.logger.info({ file: this.file, keys: [...table.byHash.values()].map((k) => k.name) }, 'keys file reloaded');
  }

  /** The problem last logged, so a broken file polled every second is logged once. */
  private refused: string | undefined;

  private refuse(err: KeysFileError, text: string): void {
    const said = `${err.message}\n${text}`;
    if (said === this.refused) return;
    this.refused = said;
    this.logger.error(
      { file: err.file, line: err.line, field: err.field, reason: err.why },
      `keys file not reloaded, keeping the previous keys: ${err.message}`,
    );
  }
}
