/**
 * Random trace and span ids as hex, cut from a pool of random hex refilled 4 KiB of random bytes at a time: the
 * OpenTelemetry SDK's generator draws Math.random per id, and a Buffer.toString per id costs a native call each;
 * a slice of a string is a small view (it keeps its 8 KiB pool alive while an id lives, bounded by the span queue).
 */
import { randomFillSync } from 'node:crypto';

const POOL_BYTES = 4096;
const bytes = Buffer.allocUnsafe(POOL_BYTES);
let pool = '';
let at = 0;

/** `count` random bytes as lower-case hex (16 for a trace id, 8 for a span id). */
export function randomHex(count: number): string {
  const chars = 2 * count;
  if (at + chars > pool.length) {
    pool = randomFillSync(bytes).toString('hex');
    at = 0;
  }
  at += chars;
  return pool.slice(at - chars, at);
}
