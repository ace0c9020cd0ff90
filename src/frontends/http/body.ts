/**
 * Request bodies: read with a size bound (checked while streaming, so an
 * oversized upload is refused before it is buffered) and inflated when the
 * client sent Content-Encoding gzip or deflate.
 */
import type { IncomingMessage } from 'node:http';
import { createUnzip } from 'node:zlib';
import { Errors, type NereidError } from '../../errors.js';
import { processReclaimer } from '../memory-reclaim.js';

const EMPTY = Buffer.alloc(0);

/** Triton's bound on the non-empty chunks of one chunked request body. */
export const MAX_BODY_CHUNKS = 65_536;

function limitHint(max: number): string {
  return `${max} bytes. Use --http-max-input-size to increase the limit.`;
}

/**
 * The error for a body over the limit, worded as Triton words the check that
 * applies to it: the whole body is JSON when there is no
 * Inference-Header-Content-Length, and it is one raw tensor when that header is 0.
 */
export function bodyTooLarge(size: number, max: number, inferHeader: string | undefined): NereidError {
  if (inferHeader === undefined) {
    return Errors.bodyTooLarge(
      `request JSON size of ${size} bytes exceeds the maximum allowed input size of ${limitHint(max)}`,
    );
  }
  if (inferHeader.trim() === '0') {
    return Errors.bodyTooLarge(
      `Raw input has a byte_size (${size} bytes) that exceeds the maximum allowed value of ${limitHint(max)}`,
    );
  }
  return Errors.bodyTooLarge(
    `request size of ${size} bytes exceeds the maximum allowed input size of ${limitHint(max)}`,
  );
}

/**
 * Collects the body of `req`. Rejects (and stops reading) as soon as the
 * declared or received size passes `limit`. A body that arrives in one chunk
 * is returned as that chunk, without a copy. `inferFraming`: the endpoint
 * reads Inference-Header-Content-Length (infer alone does), which then words
 * the error; for every other endpoint the whole body is JSON, as Triton has it.
 */
export function readBody(req: IncomingMessage, limit: number, inferFraming = false): Promise<Buffer> {
  return new Promise<Buffer>((resolve, reject) => {
    const inferHeader = inferFraming ? headerValue(req, 'inference-header-content-length') : undefined;
    const declared = req.headers['content-length'];
    if (declared !== undefined) {
      const size = Number(declared);
      if (size > limit) {
        reject(bodyTooLarge(size, limit, inferHeader));
        return;
      }
    }
    const chunks: Buffer[] = [];
    let total = 0;
    // The parser hands over each chunk of a chunked body as its own piece; a flood of tiny ones is refused (Triton's
    // limit).
    const chunked = declared === undefined && req.headers['transfer-encoding'] !== undefined;
    let pieces = 0;
    const stop = (err: NereidError): void => {
      processReclaimer.note(total);
      req.off('data', onData);
      req.off('end', onEnd);
      req.pause();
      reject(err);
    };
    const onData = (chunk: Buffer): void => {
      total += chunk.byteLength;
      if (total > limit) {
        stop(bodyTooLarge(total, limit, inferHeader));
        return;
      }
      if (chunked && ++pieces > MAX_BODY_CHUNKS) {
        stop(Errors.tooManyChunks(MAX_BODY_CHUNKS));
        return;
      }
      chunks.push(chunk);
    };
    const onEnd = (): void => {
      req.off('error', onError);
      processReclaimer.note(total);
      if (chunks.length === 0) resolve(EMPTY);
      else if (chunks.length === 1) resolve(chunks[0]!);
      else resolve(Buffer.concat(chunks, total));
    };
    const onError = (err: Error): void => reject(err);
    req.on('data', onData);
    req.once('end', onEnd);
    req.once('error', onError);
  });
}

/** First value of a request header (Node joins repeated ones with ", "). */
export function headerValue(req: IncomingMessage, name: string): string | undefined {
  const v = req.headers[name];
  return Array.isArray(v) ? v[0] : v;
}

export type RequestEncoding = 'identity' | 'gzip' | 'deflate' | 'unknown';

/** Content-Encoding of a request, compared exactly as Triton does. */
export function requestEncoding(req: IncomingMessage): RequestEncoding {
  const v = headerValue(req, 'content-encoding');
  if (v === undefined || v === '' || v === 'identity') return 'identity';
  if (v === 'gzip') return 'gzip';
  if (v === 'deflate') return 'deflate';
  return 'unknown';
}

/**
 * At most this many bodies inflate at once: each may grow to the input limit
 * (64 MiB by default), and many at once (a storm of gzip bombs) would push the
 * process's memory up by their sum.
 */
const MAX_CONCURRENT_INFLATES = 2;
let inflating = 0;
const inflateQueue: Array<() => void> = [];

/** What one inflation read and wrote, for callers that account for it (tests, memory bookkeeping). */
export interface InflateProgress {
  /** Compressed bytes the inflater consumed. */
  consumed: number;
  /** Decompressed bytes it produced, the discarded attempts included. */
  produced: number;
}

/**
 * The first attempt's room, as a multiple of the compressed size, when the body does not declare its size (deflate).
 */
const FIRST_GUESS_RATIO = 16;
const MIN_CHUNK = 64 * 1024;

/**
 * The size a gzip body declares in its trailer (ISIZE: the last member's size,
 * modulo 2^32), or undefined for anything else. A valid stream decompresses to
 * at least that many bytes, so it bounds the result from below.
 */
export function gzipDeclaredSize(body: Buffer): number | undefined {
  if (body.byteLength < 18 || body[0] !== 0x1f || body[1] !== 0x8b) return undefined;
  return body.readUInt32LE(body.byteLength - 4);
}

function decompressedTooLarge(limit: number): NereidError {
  return Errors.bodyTooLarge(`Decompressed data size exceeds the maximum allowed value of ${limitHint(limit)}`);
}

/**
 * Inflates a gzip or zlib body off the event loop, bounded by `limit` output
 * bytes. The output goes into one buffer sized up front (from the gzip trailer,
 * else a first guess, then the limit), so the result is that buffer without a
 * copy and a large one is a mapping of its own that is returned to the system
 * when collected, instead of thousands of 16 KiB pieces that fragment the heap.
 * A gzip body whose trailer declares more than the limit is refused without
 * inflating it; any other is abandoned as soon as its output passes the limit.
 */
export async function inflateBody(
  body: Buffer,
  limit: number,
  progress: InflateProgress = { consumed: 0, produced: 0 },
): Promise<Buffer> {
  if (body.byteLength === 0) throw Errors.malformedBody('nothing to be decompressed');
  const declared = gzipDeclaredSize(body);
  if (declared !== undefined && declared > limit) throw decompressedTooLarge(limit);
  if (inflating >= MAX_CONCURRENT_INFLATES) await new Promise<void>((resolve) => inflateQueue.push(resolve));
  inflating++;
  const producedBefore = progress.produced;
  try {
    const first = Math.min(limit, Math.max(MIN_CHUNK, declared ?? FIRST_GUESS_RATIO * body.byteLength));
    const out = await inflateUpTo(body, first, progress);
    if (out !== undefined) return out;
    if (first >= limit) throw decompressedTooLarge(limit);
    // The first guess was short (or the trailer lied): once more with room for the whole limit.
    const whole = await inflateUpTo(body, limit, progress);
    if (whole === undefined) throw decompressedTooLarge(limit);
    return whole;
  } finally {
    inflating--;
    inflateQueue.shift()?.();
    processReclaimer.note(progress.produced - producedBefore);
  }
}

/** The inflated body when it fits in `max` bytes, undefined (the inflater stopped and closed) when it does not. */
function inflateUpTo(body: Buffer, max: number, progress: InflateProgress): Promise<Buffer | undefined> {
  return new Promise<Buffer | undefined>((resolve, reject) => {
    // One chunk one byte larger than `max`: a body that fits comes out as a single chunk.
    const engine = createUnzip({ chunkSize: max + 1 });
    const chunks: Buffer[] = [];
    let total = 0;
    const account = (): void => {
      progress.consumed += engine.bytesWritten;
      progress.produced += total;
    };
    engine.on('data', (chunk: Buffer) => {
      total += chunk.byteLength;
      if (total > max) {
        engine.removeAllListeners('end');
        engine.removeAllListeners('data');
        account();
        engine.close();
        chunks.length = 0;
        resolve(undefined);
        return;
      }
      chunks.push(chunk);
    });
    engine.once('end', () => {
      account();
      engine.close();
      resolve(chunks.length === 0 ? EMPTY : chunks.length === 1 ? chunks[0]! : Buffer.concat(chunks, total));
    });
    engine.once('error', (err) => {
      account();
      reject(Errors.malformedBody(`failed to decompress the request body: ${err.message}`));
    });
    engine.end(body);
  });
}
