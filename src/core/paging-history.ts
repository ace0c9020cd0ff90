/**
 * The paging scores kept across restarts (`--model-memory-history=<file>`):
 * read at start so that the models popular before a restart keep their
 * standing from the first request, written every SAVE_EVERY_MS while
 * requests come and once more at stop (docs/paging.md#after-a-restart).
 */
import { readFile, rename, rm, writeFile } from 'node:fs/promises';
import type { Logger } from 'pino';
import { Errors } from '../errors.js';
import type { PagingPolicy } from './paging-policy.js';

/** How often the scores are written while requests come (a crash loses at most this much). */
export const SAVE_EVERY_MS = 30_000;
/** The file's format version, under the key FORMAT_KEY. */
const FORMAT_KEY = 'nereid_paging_history';
const FORMAT = 1;

/** The scores in a history file's text; throws an Error saying what is wrong where. */
export function parsePagingHistory(text: string): Map<string, number> {
  let doc: unknown;
  try {
    doc = JSON.parse(text);
  } catch (err) {
    throw new Error(`not JSON: ${(err as Error).message}`, { cause: err });
  }
  if (typeof doc !== 'object' || doc === null || Array.isArray(doc)) throw new Error('not a JSON object');
  const fields = doc as Record<string, unknown>;
  if (fields[FORMAT_KEY] !== FORMAT) {
    throw new Error(`'${FORMAT_KEY}' is ${JSON.stringify(fields[FORMAT_KEY])}, this server reads ${FORMAT}`);
  }
  const scores = fields['scores'];
  if (typeof scores !== 'object' || scores === null || Array.isArray(scores)) {
    throw new Error("'scores' is not an object of model names and numbers");
  }
  const out = new Map<string, number>();
  for (const [name, value] of Object.entries(scores)) {
    if (typeof value !== 'number' || !Number.isFinite(value) || value < 0) {
      throw new Error(`'scores.${name}' is ${JSON.stringify(value)}, not a number of 0 or more`);
    }
    out.set(name, value);
  }
  return out;
}

export class PagingHistory {
  private timer: NodeJS.Timeout | undefined;
  /** The policy's request count at the last save: no new request, nothing to write. */
  private savedAt = -1;
  private saving: Promise<void> = Promise.resolve();

  constructor(
    readonly file: string,
    private readonly policy: PagingPolicy,
    private readonly logger: Logger,
  ) {}

  /**
   * Restores the scores the file holds, writes them back at once (so a path
   * that cannot be written stops the start, not the first save), then saves
   * every SAVE_EVERY_MS. A missing file is a first start; one that does not
   * parse is logged and replaced, the server starts without a history.
   */
  async open(): Promise<void> {
    let text: string | undefined;
    try {
      text = await readFile(this.file, 'utf8');
    } catch (err) {
      const e = err as NodeJS.ErrnoException;
      if (e.code !== 'ENOENT') throw Errors.config(`--model-memory-history: cannot read '${this.file}': ${e.message}`);
      this.logger.info({ file: this.file }, 'no paging history yet: the scores start from the first request');
    }
    if (text !== undefined) {
      try {
        const scores = parsePagingHistory(text);
        this.policy.restore(scores);
        this.logger.info({ file: this.file, models: scores.size }, 'paging history restored');
      } catch (err) {
        this.logger.warn(
          { file: this.file, err: (err as Error).message },
          'paging history not used, the scores start from the first request; the file is written again',
        );
      }
    }
    try {
      await this.write();
    } catch (err) {
      throw Errors.config(`--model-memory-history: cannot write '${this.file}': ${(err as Error).message}`);
    }
    this.timer = setInterval(() => void this.save(), SAVE_EVERY_MS);
    this.timer.unref();
  }

  /** Writes the scores if requests came since the last write; a failure is logged, the server goes on. */
  save(): Promise<void> {
    this.saving = this.saving.then(async () => {
      if (this.policy.requests === this.savedAt) return;
      try {
        await this.write();
      } catch (err) {
        this.logger.warn({ file: this.file, err: (err as Error).message }, 'paging history not saved');
      }
    });
    return this.saving;
  }

  /** Stops the timer and writes the last scores (nothing when open() did not finish: the start failed). */
  async close(): Promise<void> {
    if (this.timer === undefined) return;
    clearInterval(this.timer);
    this.timer = undefined;
    await this.save();
  }

  /** Writes a temporary file beside the history and renames it over, so a crash leaves the old or the new one. */
  private async write(): Promise<void> {
    const requests = this.policy.requests;
    const doc = {
      [FORMAT_KEY]: FORMAT,
      saved_at: new Date().toISOString(),
      half_life_requests: this.policy.halfLifeRequests,
      scores: Object.fromEntries(
        [...this.policy.scores()].sort((a, b) => b[1] - a[1]).map(([n, s]) => [n, Number(s.toPrecision(6))]),
      ),
    };
    const temporary = `${this.file}.${process.pid}.tmp`;
    try {
      await writeFile(temporary, `${JSON.stringify(doc, null, 2)}\n`);
      await rename(temporary, this.file);
    } catch (err) {
      await rm(temporary, { force: true }).catch(() => undefined);
      throw err;
    }
    this.savedAt = requests;
  }
}
