import { Writable } from 'node:stream';
import { pino, type Logger } from 'pino';

/** A pino logger that keeps every record, parsed, for a test to read. */
export function recordingLogger(): { logger: Logger; records: Array<Record<string, unknown>> } {
  const records: Array<Record<string, unknown>> = [];
  const stream = new Writable({
    write(chunk: Buffer, _enc, done) {
      for (const line of chunk.toString().split('\n'))
        if (line.trim()) records.push(JSON.parse(line) as Record<string, unknown>);
      done();
    },
  });
  return { logger: pino({ level: 'debug' }, stream), records };
}
