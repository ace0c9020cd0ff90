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
 * `BUDGET_BYTES` of request keys and reply bodies, least recently used
 * dropped first; requests over `MAX_REQUEST_BYTES` and replies over
 * `MAX_REPLY_BYTES` are never kept.
 */
import type { IncomingMessage } from 'node:http';
import type { CacheHitTicket } from '../../types/api.js';

export const MAX_REQUEST_BYTES = 4096;
export const MAX_REPLY_BYTES = 64 * 1024;
export const BUDGET_BYTES = 1024 * 1024;
/** Charged per kept reply beyond its key and body (the headers, the map entry). */
const ENTRY_OVERHEAD_BYTES = 160;

export class KeptReply {
  constructor(
    readonly ticket: CacheHitTicket,
    /** The reply's headers, Content-Length included, as a flat name/value list. */
    readonly headers: readonly string[],
    readonly body: Buffer,
    readonly bytes: number,
  ) {}
}

export class CacheReplies {
  private readonly kept = new Map<string, KeptReply>();
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
  ): string | undefined {
    if (body.byteLength > MAX_REQUEST_BYTES) return undefined;
    let key = model + '\u0000' + (version ?? '') + '\u0000' + (inferHeader === undefined ? '-' : inferHeader) + '\u0000';
    if (forwardPattern !== undefined) {
      const raw = req.rawHeaders;
      for (let i = 0; i < raw.length; i += 2) {
        if (forwardPattern.test(raw[i]!)) key += raw[i]! + '\u0001' + raw[i + 1]! + '\u0001';
      }
    }
    return key + '\u0000' + body.toString('latin1');
  }

  /** The reply kept under `key`, now the most recently used, or undefined. */
  get(key: string): KeptReply | undefined {
    const reply = this.kept.get(key);
    if (reply === undefined) return undefined;
    this.kept.delete(key);
    this.kept.set(key, reply);
    return reply;
  }

  drop(key: string): void {
    const reply = this.kept.get(key);
    if (reply === undefined) return;
    this.kept.delete(key);
    this.used -= reply.bytes;
  }

  /** Keeps a hit's reply under `key`, dropping the least recently used ones to stay within the budget. */
  keep(key: string, ticket: CacheHitTicket, headers: readonly string[], body: Buffer): void {
    if (body.byteLength > MAX_REPLY_BYTES) return;
    this.drop(key);
    const bytes = ENTRY_OVERHEAD_BYTES + key.length + body.byteLength;
    while (this.used + bytes > BUDGET_BYTES) {
      const oldest = this.kept.keys().next();
      if (oldest.done) break;
      this.drop(oldest.value);
    }
    this.kept.set(key, new KeptReply(ticket, headers, body, bytes));
    this.used += bytes;
  }
}
