/**
 * Request bodies: read with a size bound (checked while streaming, so an
 * oversized upload is refused before it is buffered) and inflated when the
 * client sent Content-Encoding gzip or deflate.
 */
import type { IncomingMessage } from 'node:http';
import { unzip } from 'node:zlib';
import { Errors, type NereidError } from '../../errors.js';

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
    return Errors.bodyTooLarge(`request JSON size of ${size} bytes exceeds the maximum allowed input size of ${limitHint(max)}`);
  }
  if (inferHeader.trim() === '0') {
    return Errors.bodyTooLarge(`Raw input has a byte_size (${size} bytes) that exceeds the maximum allowed value of ${limitHint(max)}`);
  }
  return Errors.bodyTooLarge(`request size of ${size} bytes exceeds the maximum allowed input size of ${limitHint(max)}`);
}

/**
 * Collects the body of `req`. Rejects (and stops reading) as soon as the
 * declared or received size passes `limit`. A body that arrives in one chunk
 * is returned as that chunk, without a copy.
 */
export function readBody(req: IncomingMessage, limit: number): Promise<Buffer> {
  return new Promise<Buffer>((resolve, reject) => {
    const inferHeader = headerValue(req, 'inference-header-content-length');
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
    // The parser hands over each chunk of a chunked body as its own piece; a flood of tiny ones is refused (Triton's limit).
    const chunked = declared === undefined && req.headers['transfer-encoding'] !== undefined;
    let pieces = 0;
    const stop = (err: NereidError): void => {
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

/** Inflates a gzip or zlib body off the event loop, bounded by `limit` output bytes. */
/**
 * At most this many bodies inflate at once: each may grow to the input limit
 * (64 MiB by default), and many at once (a storm of gzip bombs) would push the
 * process's memory up by their sum, which the allocator then keeps.
 */
const MAX_CONCURRENT_INFLATES = 2;
let inflating = 0;
const inflateQueue: Array<() => void> = [];

export async function inflateBody(body: Buffer, limit: number): Promise<Buffer> {
  if (body.byteLength === 0) throw Errors.malformedBody('nothing to be decompressed');
  if (inflating >= MAX_CONCURRENT_INFLATES) await new Promise<void>((resolve) => inflateQueue.push(resolve));
  inflating++;
  try {
    return await inflateNow(body, limit);
  } finally {
    inflating--;
    inflateQueue.shift()?.();
  }
}

function inflateNow(body: Buffer, limit: number): Promise<Buffer> {
  return new Promise<Buffer>((resolve, reject) => {
    unzip(body, { maxOutputLength: limit }, (err, out) => {
      if (err === null) {
        resolve(out);
      } else if ((err as NodeJS.ErrnoException).code === 'ERR_BUFFER_TOO_LARGE') {
        reject(Errors.bodyTooLarge(`Decompressed data size exceeds the maximum allowed value of ${limitHint(limit)}`));
      } else {
        reject(Errors.malformedBody(`failed to decompress the request body: ${err.message}`));
      }
    });
  });
}
