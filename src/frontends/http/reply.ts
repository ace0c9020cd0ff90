/** Writing HTTP replies: one writeHead + one end per reply, error bodies as Triton's `{"error":"..."}`. */
import type { ServerResponse } from 'node:http';
import { type NereidError, asNereidError } from '../../errors.js';

const JSON_TYPE = 'application/json';
/** Seconds a client refused for a full queue should wait before retrying. */
const RETRY_AFTER: readonly string[] = ['Retry-After', '1'];

export class Replier {
  /** Set while the frontend stops: replies then close their connection. */
  closing = false;
  private lastQueueFull: { error: NereidError; headers: string[]; body: string } | undefined;

  private prepare(res: ServerResponse): void {
    if (this.closing) res.shouldKeepAlive = false;
  }

  /** 200/… with a JSON text body. */
  json(res: ServerResponse, status: number, body: string | Buffer): void {
    this.prepare(res);
    const length = typeof body === 'string' ? Buffer.byteLength(body, 'utf8') : body.byteLength;
    res.writeHead(status, ['Content-Type', JSON_TYPE, 'Content-Length', String(length)]);
    res.end(body);
  }

  /** A reply without a body (health probes, load/unload). */
  empty(res: ServerResponse, status: number, contentType?: string): void {
    this.prepare(res);
    res.writeHead(
      status,
      contentType === undefined ? ['Content-Length', '0'] : ['Content-Type', contentType, 'Content-Length', '0'],
    );
    res.end();
  }

  /** `{"error": message}` with the status of the error's class; extra headers are a flat name/value list. */
  error(res: ServerResponse, err: unknown, extraHeaders?: readonly string[]): void {
    if (res.headersSent || res.destroyed) {
      res.destroy();
      return;
    }
    const e = asNereidError(err);
    if (e.code === 'NRD_QUEUE_FULL') {
      this.queueFull(res, e, extraHeaders);
      return;
    }
    const retry =
      e.retryAfterSecs === undefined
        ? extraHeaders
        : [...(extraHeaders ?? []), 'Retry-After', String(e.retryAfterSecs)];
    this.errorText(res, e.httpStatus, e.message, retry);
  }

  /**
   * A full queue's 503, which tells the client when to come back (beyond
   * Triton, which sends no Retry-After). Refusals come in floods and most
   * share one error (requests without an id), so the reply to the last
   * error is kept written out: its header list and body text.
   */
  private queueFull(res: ServerResponse, e: NereidError, extraHeaders: readonly string[] | undefined): void {
    let kept = this.lastQueueFull;
    if (extraHeaders !== undefined || kept === undefined || kept.error !== e) {
      // A text body goes out in one write with the header text; a Buffer would be a second part.
      const body = JSON.stringify({ error: e.message });
      const headers = [
        'Content-Type',
        JSON_TYPE,
        'Content-Length',
        String(Buffer.byteLength(body, 'utf8')),
        ...(extraHeaders ?? []),
        ...RETRY_AFTER,
      ];
      kept = { error: e, headers, body };
      if (extraHeaders === undefined) this.lastQueueFull = kept;
    }
    this.prepare(res);
    res.writeHead(e.httpStatus, kept.headers);
    res.end(kept.body);
  }

  errorText(res: ServerResponse, status: number, message: string, extraHeaders?: readonly string[]): void {
    this.prepare(res);
    const body = JSON.stringify({ error: message });
    const headers = ['Content-Type', JSON_TYPE, 'Content-Length', String(Buffer.byteLength(body, 'utf8'))];
    if (extraHeaders !== undefined) headers.push(...extraHeaders);
    res.writeHead(status, headers);
    res.end(body);
  }

  /** A reply whose headers (Content-Length included, a flat name/value list) and body are ready as they are. */
  whole(res: ServerResponse, status: number, headers: readonly string[], body: Buffer): void {
    this.prepare(res);
    res.writeHead(status, headers as string[]);
    res.end(body);
  }

  /** whole() for a text body (UTF-8), which node:http writes in one piece with the header text. */
  wholeText(res: ServerResponse, status: number, headers: readonly string[], body: string): void {
    this.prepare(res);
    res.writeHead(status, headers as string[]);
    res.end(body);
  }

  /** A body made of a JSON part followed by binary parts, written without joining them. */
  parts(
    res: ServerResponse,
    status: number,
    headers: string[],
    first: Buffer,
    rest: readonly Uint8Array[],
    total: number,
  ): void {
    this.prepare(res);
    headers.push('Content-Length', String(total));
    res.writeHead(status, headers);
    if (rest.length === 0) {
      res.end(first);
      return;
    }
    res.cork();
    res.write(first);
    for (let i = 0; i < rest.length; i++) res.write(rest[i]!);
    res.end();
  }
}
