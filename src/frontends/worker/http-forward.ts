/**
 * A frontend thread's HTTP forwarding: a request it does not serve itself goes whole to the main thread's frontend
 * (over a Unix socket, kept-alive connections), and the answer, streamed or not, comes back the same way.
 */
import http, { type IncomingMessage, type ServerResponse } from 'node:http';
import { Errors } from '../../errors.js';
import { MAX_BODY_CHUNKS } from '../http/body.js';
import { Replier } from '../http/reply.js';
import { PEER_HEADER, TRACE_PICK_HEADER } from '../threads/protocol.js';

/** Request headers that belong to the client's connection, not to the request. */
const REQUEST_HOP = new Set(['connection', 'keep-alive', 'proxy-connection', 'expect', PEER_HEADER, TRACE_PICK_HEADER]);

export class HttpForwarder {
  private readonly agent: http.Agent;
  private readonly replier = new Replier();

  constructor(
    private readonly socketPath: string,
    /** --http-max-input-size: what the main thread refuses, it is not sent (it would not read it). */
    private readonly maxInputSize: number,
  ) {
    this.agent = new http.Agent({ keepAlive: true, maxFreeSockets: 64 });
  }

  close(): void {
    this.agent.destroy();
  }

  /** Forwards `req`; `body`, when given, is the body already read from it; `tracePick`: TRACE_PICK_HEADER's value. */
  forward(req: IncomingMessage, res: ServerResponse, body?: Buffer, tracePick?: '0' | '1'): void {
    const raw = req.rawHeaders;
    const headers: string[] = [];
    for (let i = 0; i < raw.length; i += 2) {
      if (!REQUEST_HOP.has(raw[i]!.toLowerCase())) headers.push(raw[i]!, raw[i + 1]!);
    }
    headers.push(PEER_HEADER, req.socket.remoteAddress ?? '');
    if (tracePick !== undefined) headers.push(TRACE_PICK_HEADER, tracePick);
    const upstream = http.request({
      socketPath: this.socketPath,
      agent: this.agent,
      method: req.method,
      path: req.url,
      headers,
      setHost: false,
    });
    upstream.on('response', (answer) => relay(answer, res));
    this.sendBody(req, res, upstream, body);
    upstream.on('error', (err) => {
      if (res.writableEnded) return; // answered here (a refused body)
      if (res.headersSent || res.destroyed) {
        res.destroy();
        return;
      }
      const text = JSON.stringify({ error: `the server's main thread did not answer: ${err.message}` });
      res.writeHead(502, ['Content-Type', 'application/json', 'Content-Length', String(Buffer.byteLength(text))]);
      res.end(text);
    });
    // The client went away first: so does the forwarded request, which cancels it on the main thread.
    res.on('close', () => {
      if (!res.writableFinished) upstream.destroy();
    });
  }

  /**
   * Streams the body up to the first byte past the limit, then ends it: the main thread refuses the body there with
   * its own message and closes, and a body still being written would fail with EPIPE before its answer is read.
   */
  private sendBody(
    req: IncomingMessage,
    res: ServerResponse,
    upstream: http.ClientRequest,
    body: Buffer | undefined,
  ): void {
    if (body !== undefined) {
      upstream.end(body);
      return;
    }
    const limit = this.maxInputSize;
    const declared = req.headers['content-length'];
    if (declared !== undefined && Number(declared) > limit) {
      // Refused from its headers alone.
      upstream.flushHeaders();
      req.resume();
      return;
    }
    let total = 0;
    let pieces = 0;
    const onData = (chunk: Buffer): void => {
      total += chunk.byteLength;
      if (++pieces > MAX_BODY_CHUNKS && req.headers['transfer-encoding'] !== undefined) {
        // The main thread would see the pieces joined differently: refused here, with its text.
        req.off('data', onData);
        req.off('end', onEnd);
        req.pause();
        upstream.destroy();
        res.shouldKeepAlive = false;
        this.replier.error(res, Errors.tooManyChunks(MAX_BODY_CHUNKS));
        return;
      }
      const over = total > limit;
      if (!upstream.write(chunk) && !over) {
        req.pause();
        upstream.once('drain', () => req.resume());
      }
      if (over) {
        req.off('data', onData);
        req.off('end', onEnd);
        upstream.end();
      }
    };
    const onEnd = (): void => void upstream.end();
    req.on('data', onData);
    req.on('end', onEnd);
    req.on('error', () => upstream.destroy());
  }
}

function relay(answer: IncomingMessage, res: ServerResponse): void {
  const raw = answer.rawHeaders;
  const headers: string[] = [];
  for (let i = 0; i < raw.length; i += 2) {
    const name = raw[i]!.toLowerCase();
    if (name === 'keep-alive') continue;
    // The main thread's "Connection: close" (draining, or a refused body) closes the client's connection too.
    if (name === 'connection' && raw[i + 1]!.toLowerCase() !== 'close') continue;
    headers.push(raw[i]!, raw[i + 1]!);
  }
  if (res.destroyed) {
    answer.destroy();
    return;
  }
  res.writeHead(answer.statusCode ?? 502, answer.statusMessage, headers);
  // Flush each piece as it comes (server-sent events).
  answer.on('data', (chunk: Buffer) => {
    if (!res.write(chunk)) {
      answer.pause();
      res.once('drain', () => answer.resume());
    }
  });
  answer.on('end', () => res.end());
  answer.on('error', () => res.destroy());
  answer.on('aborted', () => res.destroy());
}
