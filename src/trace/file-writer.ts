/**
 * The trace file's writer thread: turns the records of finished traces
 * (file-record.ts) into Triton's JSON entries and writes the files, so that
 * formatting and file writes stay off the server's event loop. The event
 * loop decides what goes where (settings, log-frequency, file names); the
 * ops come in its order.
 */
import { writeFileSync } from 'node:fs';
import { writeFile } from 'node:fs/promises';
import { parentPort, workerData } from 'node:worker_threads';
import {
  type FileBatch,
  type FileWriterInit,
  type FromFileWriter,
  OP_TRACE,
  OP_WHOLE,
  OP_WRITE,
  type ToFileWriter,
} from './file-record.js';
import { lowerThisThread } from './thread-priority.js';
import { EntryBuffer } from './triton-format.js';

const init = workerData as FileWriterInit;
const port = parentPort!;
// Writing yields the CPU to serving (docs/tracing.md); a system that refuses is told once, at debug.
const refused = lowerThisThread(init.nice);
if (refused !== undefined) port.postMessage({ t: 'nice', message: refused } satisfies FromFileWriter);
/** Entries of each setting not written yet. */
const pending = new Map<number, EntryBuffer>();
/** Entries for the plain file, written at close. */
const whole = new EntryBuffer(64 * 1024, init.base);
let writes: Promise<void> = Promise.resolve();

function post(msg: FromFileWriter): void {
  port.postMessage(msg);
}

function bufferOf(key: number): EntryBuffer {
  let buf = pending.get(key);
  if (buf === undefined) pending.set(key, (buf = new EntryBuffer(64 * 1024, init.base)));
  return buf;
}

function take(batch: FileBatch): void {
  const { nums, length, strings } = batch;
  let at = 0;
  while (at < length) {
    const op = nums[at++]!;
    const key = nums[at++]!;
    if (op === OP_TRACE) at = bufferOf(key).appendRecord(nums, at, strings);
    else if (op === OP_WRITE) {
      const name = strings[nums[at++]!]!;
      const buf = pending.get(key);
      // Taken whole: the setting's next entries start a buffer of their own (one that is done with is let go).
      pending.delete(key);
      if (buf === undefined || buf.empty) continue;
      const body = buf.take();
      // A failure is reported, as Triton logs it, and never reaches a request.
      writes = writes.then(() =>
        writeFile(name, body).catch((err: unknown) => post({ t: 'failed', file: name, message: String(err) })),
      );
    } else if (op === OP_WHOLE) {
      const buf = pending.get(key);
      pending.delete(key);
      if (buf !== undefined) whole.appendEntries(buf);
    } else throw new Error(`op ${op} in a trace file batch`);
  }
}

async function close(file: string): Promise<void> {
  await writes;
  if (!whole.empty) {
    try {
      writeFileSync(file, whole.take());
    } catch (err) {
      post({ t: 'failed', file, message: String(err) });
    }
  }
  post({ t: 'closed' });
}

port.on('message', (msg: ToFileWriter) => {
  if (msg.t === 'batch') take(msg);
  else void close(msg.file);
});
