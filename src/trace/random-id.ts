/**
 * Random trace and span ids as hex, from a pool refilled 4 KiB at a time: the OpenTelemetry SDK's
 * generator draws Math.random per id, which costs more per request than one randomFillSync per pool.
 */
import { randomFillSync } from 'node:crypto';

const idPool = Buffer.allocUnsafe(4096);
let idAt = idPool.length;

/** `bytes` random bytes as lower-case hex (16 for a trace id, 8 for a span id). */
export function randomHex(bytes: number): string {
  if (idAt + bytes > idPool.length) {
    randomFillSync(idPool);
    idAt = 0;
  }
  idAt += bytes;
  return idPool.toString('hex', idAt - bytes, idAt);
}
