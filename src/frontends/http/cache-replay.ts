/**
 * Replies to response-cache hits kept as they were written, so that the same
 * request sent again is answered without decoding, validating, shaping or
 * encoding anything.
 *
 * A reply is kept under the request as it arrived: the model and version of
 * the URL, Inference-Header-Content-Length, the forwarded headers (they
 * become request parameters) and the body bytes, which hold everything else
 * that shapes the reply (id, requested outputs, binary or JSON, request
 * parameters). Only identity-encoded requests whose reply goes out
 * uncompressed are kept, and only replies of hits. Before a kept reply is
 * written the server confirms its ticket (the same model version still
 * answers, the cache still holds the same entry) and counts the hit;
 * otherwise the request takes the full path and the kept reply is dropped.
 *
 * The replies are bounded on their own, beside the cache's budget: at most
 * `BUDGET_BYTES` of requests, reply bodies and tickets, least recently used
 * dropped first; requests over `MAX_REQUEST_BYTES` and replies over
 * `MAX_REPLY_BYTES` are never kept.
 */
import type { IncomingMessage } from 'node:http';
import type { CacheHitTicket } from '../../types/api.js';

export const MAX_REQUEST_BYTES = 4096;
export const MAX_REPLY_BYTES = 64 * 1024;
export const BUDGET_BYTES = 1024 * 1024;
/**
 * Charged per kept reply beyond its request's prefix and body, its reply body and what its ticket holds (the headers,
 * the map entry).
 */
const ENTRY_OVERHEAD_BYTES = 160;

/** A request as the key of a kept reply: what besides the body shapes its reply, the body, and a hash of both. */
export class RequestKey {
  constructor(
    readonly hash: number,
    readonly prefix: string,
    readonly body: Buffer,
  ) {}
}

export class KeptReply {
  constructor(
    readonly prefix: string,
    /** A copy of the request body (the parser's buffer is not ours to keep). */
    readonly request: Buffer,
    readonly ticket: CacheHitTicket,
    /** The reply's headers, Content-Length included, as a flat name/value list. */
    readonly headers: readonly string[],
    readonly body: Buffer,
    readonly bytes: number,
  ) {}
}

/**
 * 52 bits of hash over `prefix` and `body`, 8 bytes a step. It only picks the
 * candidate: a kept reply is used once its prefix and body compare equal, so
 * a collision costs a miss, never a wrong reply. (V8 hashes a string key of a
 * few hundred bytes several times slower than this loop.)
 */
export function requestHash(prefix: string, body: Buffer): number {
  let h1 = 0x9e3779b9 ^ body.length;
  let h2 = 0x85ebca6b;
  for (let i = 0; i < prefix.length; i++) h1 = Math.imul(h1 ^ prefix.charCodeAt(i), 0x01000193);
  const whole = body.length & ~7;
  let i = 0;
  for (; i < whole; i += 8) {
    h1 = Math.imul(h1 ^ (body[i]! | (body[i + 1]! << 8) | (body[i + 2]! << 16) | (body[i + 3]! << 24)), 0x9e3779b1);
    h1 = (h1 << 13) | (h1 >>> 19);
    h2 = Math.imul(h2 ^ (body[i + 4]! | (body[i + 5]! << 8) | (body[i + 6]! << 16) | (body[i + 7]! << 24)), 0x85ebca77);
    h2 = (h2 << 15) | (h2 >>> 17);
  }
  for (; i < body.length; i++) h2 = Math.imul(h2 ^ body[i]!, 0x01000193);
  h1 = Math.imul(h1 ^ (h1 >>> 16), 0x85ebca6b);
  h1 ^= h1 >>> 13;
  h2 = Math.imul(h2 ^ (h2 >>> 16), 0xc2b2ae35);
  h2 ^= h2 >>> 16;
  return (h1 >>> 0) * 0x100000 + (h2 >>> 12);
}

export class CacheReplies {
  private readonly kept = new Map<number, KeptReply>();
  private used = 0;

  get size(): number {
    return this.kept.size;
  }

  /** Bytes charged against BUDGET_BYTES. */
  get usedBytes(): number {
    return this.used;
  }

  /**
   * The key a reply to this request is kept under, or undefined for a request
   * whose reply is not kept (its body is too large). `forwardPattern` is the
   * frontend's --http-header-forward-pattern.
   */
  keyOf(
    req: IncomingMessage,
    model: string,
    version: string | undefined,
    inferHeader: string | undefined,
    forwardPattern: RegExp | undefined,
    body: Buffer,
  ): RequestKey | undefined {
    if (body.byteLength > MAX_REQUEST_BYTES) return undefined;
    let prefix = model + '\u0000' + (version ?? '') + '\u0000' + (inferHeader === undefined ? '-' : inferHeader);
    if (forwardPattern !== undefined) {
      const raw = req.rawHeaders;
      for (let i = 0; i < raw.length; i += 2) {
        if (forwardPattern.test(raw[i]!)) prefix += '\u0000' + raw[i]! + '\u0001' + raw[i + 1]!;
      }
    }
    return new RequestKey(requestHash(prefix, body), prefix, body);
  }

  /** The reply kept for the request `key`, now the most recently used, or undefined. */
  get(key: RequestKey): KeptReply | undefined {
    const reply = this.kept.get(key.hash);
    if (reply === undefined || reply.prefix !== key.prefix || !reply.request.equals(key.body)) return undefined;
    this.kept.delete(key.hash);
    this.kept.set(key.hash, reply);
    return reply;
  }

  /** Forgets the reply kept for the request `key`. */
  drop(key: RequestKey): void {
    this.dropHash(key.hash);
  }

  private dropHash(hash: number): void {
    const reply = this.kept.get(hash);
    if (reply === undefined) return;
    this.kept.delete(hash);
    this.used -= reply.bytes;
  }

  /** Keeps a hit's reply for the request `key`, dropping the least recently used ones to stay within the budget. */
  keep(key: RequestKey, ticket: CacheHitTicket, headers: readonly string[], body: Buffer): void {
    if (body.byteLength > MAX_REPLY_BYTES) return;
    // A request whose hash another one has takes its place.
    this.dropHash(key.hash);
    const bytes = ENTRY_OVERHEAD_BYTES + key.prefix.length + key.body.byteLength + body.byteLength + ticket.heldBytes;
    while (this.used + bytes > BUDGET_BYTES) {
      const oldest = this.kept.keys().next();
      if (oldest.done) break;
      this.dropHash(oldest.value);
    }
    this.kept.set(key.hash, new KeptReply(key.prefix, Buffer.from(key.body), ticket, headers, body, bytes));
    this.used += bytes;
  }
}
