/**
 * The HTTP infer hot path: HTTP/1.1 keep-alive connections carrying fully
 * pre-serialised requests (request line, headers and body built once per
 * input step, so sending is one socket write) and a small incremental
 * response parser that skips successful bodies without copying them.
 *
 * Why not undici here: measured against wrk on the same server, undici's
 * per-request cost (request object, header validation, llhttp callbacks)
 * kept the tool far below the load wrk generates with the same core; this
 * path does only what a load generator must. undici still serves the
 * control calls (metadata, config, statistics).
 */
import net from 'node:net';
import { PerfError } from './errors.js';
import { describeNetworkError, errorText } from './http-client.js';
import { type CallSink, InferCall, type InferTransport } from './transport.js';

/** Serialises one POST request. `headers` must not include Host or Content-Length. */
export function buildHttpRequest(
  hostHeader: string,
  path: string,
  headers: ReadonlyArray<[string, string]>,
  body: Uint8Array,
): Buffer {
  let head = `POST ${path} HTTP/1.1\r\nHost: ${hostHeader}\r\n`;
  for (const [k, v] of headers) {
    if (/[\r\n]/.test(k) || /[\r\n]/.test(v))
      throw new PerfError('failed to prepare requests', `header '${k}' contains a line break`);
    head += `${k}: ${v}\r\n`;
  }
  head += `Content-Length: ${body.byteLength}\r\n\r\n`;
  return Buffer.concat([Buffer.from(head, 'latin1'), body]);
}

const CRLFCRLF = Buffer.from('\r\n\r\n');

const enum BodyMode {
  None,
  Length,
  Chunked,
  UntilClose,
}

const enum ChunkState {
  Size,
  Data,
  DataEnd,
  Trailer,
}

/** What the parser reports back to the connection. */
export interface ResponseSink {
  /** Called once per response, when the first byte arrives. */
  responseStarted(): void;
  /** The whole response is in. `errorBody` is the body text for a non-200 status. */
  responseComplete(status: number, errorBody: string, keepAlive: boolean): void;
  protocolError(message: string): void;
}

/**
 * Incremental HTTP/1.1 response parser (status line, headers, and a body
 * framed by Content-Length, chunked encoding or connection close).
 */
export class ResponseParser {
  private head: Buffer | null = null;
  private inResponse = false;
  private status = 0;
  private keepAlive = true;
  private mode = BodyMode.None;
  private remaining = 0;
  private chunkState = ChunkState.Size;
  private line = '';
  private errorChunks: Buffer[] | null = null;
  private cachedHead: Buffer | null = null;
  private cachedStatus = 0;
  private cachedKeepAlive = true;
  private cachedMode = BodyMode.None;
  private cachedLength = 0;

  constructor(private readonly sink: ResponseSink) {}

  /**
   * Feeds buf[start, end) from the socket. `buf` may be a reused read buffer:
   * nothing keeps a reference to it, and bytes past `end` are never looked at.
   */
  push(buf: Buffer, start = 0, end = buf.length): void {
    let off = start;
    while (off < end) {
      if (!this.inResponse) {
        this.inResponse = true;
        this.sink.responseStarted();
      }
      if (this.status === 0) {
        // Reading the status line and headers.
        if (this.head !== null) {
          const joined = Buffer.concat([this.head, buf.subarray(off, end)]);
          this.head = null;
          this.push(joined, 0, joined.length);
          return;
        }
        const h = buf.indexOf(CRLFCRLF, off);
        if (h < 0 || h + 4 > end) {
          if (end - off > 65536) return this.sink.protocolError('response headers larger than 64 KiB');
          this.head = Buffer.from(buf.subarray(off, end));
          return;
        }
        const len = h - off;
        const cached = this.cachedHead;
        if (cached !== null && cached.length === len && buf.compare(cached, 0, len, off, h) === 0) {
          // Servers repeat the same header block (same status, same length): skip re-parsing it.
          this.applyHead(this.cachedStatus, this.cachedKeepAlive, this.cachedMode, this.cachedLength);
        } else {
          if (!this.parseHead(buf.toString('latin1', off, h))) return;
          this.cachedHead = Buffer.from(buf.subarray(off, h));
        }
        off = h + 4;
        if (this.mode === BodyMode.None) {
          this.finish();
          continue;
        }
      }
      off = this.body(buf, off, end);
    }
  }

  /** Forgets a partial response (the connection it came on is gone). */
  reset(): void {
    this.head = null;
    this.inResponse = false;
    this.status = 0;
    this.mode = BodyMode.None;
    this.errorChunks = null;
    this.line = '';
  }

  /** The connection closed: completes a close-delimited body. Returns false if a response was cut short. */
  end(): boolean {
    if (this.inResponse && this.mode === BodyMode.UntilClose && this.status !== 0 && this.head === null) {
      this.keepAlive = false;
      this.finish();
      return true;
    }
    return !this.inResponse;
  }

  private parseHead(text: string): boolean {
    const m = /^HTTP\/1\.([01]) (\d{3})/.exec(text);
    if (!m) {
      this.sink.protocolError(`malformed response status line: ${JSON.stringify(text.slice(0, 40))}`);
      return false;
    }
    this.status = Number(m[2]);
    this.keepAlive = m[1] === '1';
    this.mode = BodyMode.UntilClose;
    let length = -1;
    const lower = text.toLowerCase();
    let i = lower.indexOf('\r\n');
    while (i >= 0) {
      const next = lower.indexOf('\r\n', i + 2);
      const line = lower.slice(i + 2, next < 0 ? undefined : next);
      const colon = line.indexOf(':');
      if (colon > 0) {
        const name = line.slice(0, colon).trim();
        const value = line.slice(colon + 1).trim();
        if (name === 'content-length') length = Number(value);
        else if (name === 'transfer-encoding' && value.includes('chunked')) this.mode = BodyMode.Chunked;
        else if (name === 'connection') {
          this.keepAlive = value.includes('keep-alive') || (this.keepAlive && !value.includes('close'));
        }
      }
      i = next;
    }
    let mode: BodyMode = this.mode as BodyMode;
    if (mode !== BodyMode.Chunked) {
      if (length >= 0) mode = length === 0 ? BodyMode.None : BodyMode.Length;
      else if (this.status === 204 || this.status === 304 || (this.status >= 100 && this.status < 200))
        mode = BodyMode.None;
    }
    this.cachedStatus = this.status;
    this.cachedKeepAlive = this.keepAlive;
    this.cachedMode = mode;
    this.cachedLength = length;
    this.applyHead(this.status, this.keepAlive, mode, length);
    return true;
  }

  private applyHead(status: number, keepAlive: boolean, mode: BodyMode, length: number): void {
    this.status = status;
    this.keepAlive = keepAlive;
    this.mode = mode;
    this.remaining = length;
    this.chunkState = ChunkState.Size;
    this.line = '';
    this.errorChunks = status === 200 ? null : [];
  }

  /** Consumes body bytes from buf[off, end); returns where the next response starts. */
  private body(buf: Buffer, off: number, end: number): number {
    switch (this.mode) {
      case BodyMode.Length: {
        const take = Math.min(this.remaining, end - off);
        if (this.errorChunks) this.errorChunks.push(Buffer.from(buf.subarray(off, off + take)));
        this.remaining -= take;
        if (this.remaining === 0) this.finish();
        return off + take;
      }
      case BodyMode.UntilClose:
        if (this.errorChunks) this.errorChunks.push(Buffer.from(buf.subarray(off, end)));
        return end;
      case BodyMode.Chunked:
        return this.chunked(buf, off, end);
      default:
        return end;
    }
  }

  private chunked(buf: Buffer, off: number, end: number): number {
    while (off < end) {
      if (this.chunkState === ChunkState.Data) {
        const take = Math.min(this.remaining, end - off);
        if (this.errorChunks) this.errorChunks.push(Buffer.from(buf.subarray(off, off + take)));
        this.remaining -= take;
        off += take;
        if (this.remaining === 0) this.chunkState = ChunkState.DataEnd;
        continue;
      }
      const nl = buf.indexOf(10, off);
      if (nl < 0 || nl >= end) {
        this.line += buf.toString('latin1', off, end);
        return end;
      }
      const line = (this.line + buf.toString('latin1', off, nl)).replace(/\r$/, '');
      this.line = '';
      off = nl + 1;
      if (this.chunkState === ChunkState.DataEnd) {
        this.chunkState = ChunkState.Size;
      } else if (this.chunkState === ChunkState.Size) {
        const size = Number.parseInt(line, 16);
        if (!Number.isFinite(size)) {
          this.sink.protocolError(`malformed chunk size ${JSON.stringify(line)}`);
          return end;
        }
        if (size === 0) this.chunkState = ChunkState.Trailer;
        else {
          this.remaining = size;
          this.chunkState = ChunkState.Data;
        }
      } else if (line === '') {
        // end of trailers
        this.finish();
        return off;
      }
    }
    return off;
  }

  private finish(): void {
    const status = this.status;
    const keepAlive = this.keepAlive;
    const errorBody = this.errorChunks ? Buffer.concat(this.errorChunks).toString('utf8') : '';
    this.errorChunks = null;
    this.status = 0;
    this.head = null;
    this.mode = BodyMode.None;
    this.inResponse = false;
    this.sink.responseComplete(status, errorBody, keepAlive);
  }
}

/** One keep-alive connection carrying one request at a time. */
class Http1Connection implements ResponseSink {
  private socket: net.Socket | null = null;
  private readonly parser: ResponseParser;
  call: InferCall | null = null;
  /** Reads land in this buffer (no Buffer per read, no stream machinery). */
  private readonly readBuffer = Buffer.allocUnsafe(64 * 1024);
  private readonly onRead = (n: number, buf: Buffer): boolean => {
    this.parser.push(buf, 0, n);
    return true;
  };
  private readonly onError = (err: Error) => this.lost(err);
  private readonly onClose = () => this.closed();

  constructor(private readonly transport: Http1InferTransport) {
    this.parser = new ResponseParser(this);
  }

  send(call: InferCall, request: Buffer): void {
    this.call = call;
    if (this.socket === null) {
      const s = net.connect({
        port: this.transport.port,
        host: this.transport.host,
        noDelay: true,
        onread: { buffer: this.readBuffer, callback: this.onRead },
      });
      s.on('error', this.onError);
      s.on('close', this.onClose);
      this.socket = s;
    }
    this.socket.write(request);
    call.sentNs = this.transport.now();
  }

  responseStarted(): void {
    if (this.call) this.call.responseStartNs = this.transport.now();
  }

  responseComplete(status: number, errorBody: string, keepAlive: boolean): void {
    const call = this.call;
    this.call = null;
    if (!keepAlive) this.drop();
    if (!call) return;
    if (status === 200) this.transport.completed(this, call, null);
    else
      this.transport.completed(
        this,
        call,
        new PerfError('', `inference request failed: ${errorText(status, errorBody)}`),
      );
  }

  protocolError(message: string): void {
    this.lost(new Error(message));
  }

  private lost(err: Error): void {
    const call = this.call;
    this.call = null;
    this.drop();
    if (call) {
      const text = err.message.startsWith('malformed') || err.message.startsWith('response headers')
        ? `invalid HTTP response from ${this.transport.origin}: ${err.message}`
        : describeNetworkError(err, this.transport.origin);
      this.transport.completed(this, call, new PerfError('', `inference request failed: ${text}`));
    }
  }

  private closed(): void {
    if (this.parser.end() && this.call === null) {
      this.socket = null;
      this.parser.reset();
      return;
    }
    this.lost(Object.assign(new Error('socket closed'), { code: 'ECONNRESET' }));
  }

  private drop(): void {
    const s = this.socket;
    this.socket = null;
    this.parser.reset();
    if (s) {
      s.off('close', this.onClose);
      s.on('error', () => undefined);
      s.destroy();
    }
  }

  destroy(): void {
    this.call = null;
    this.drop();
  }
}

export interface Http1TransportOptions {
  readonly origin: string;
  /** One fully serialised request per input step. */
  readonly requests: readonly Buffer[];
  /** Most open connections; null for no limit. Concurrency slots always get their own. */
  readonly connections: number | null;
  readonly now: () => number;
}

export class Http1InferTransport implements InferTransport {
  readonly host: string;
  readonly port: number;
  readonly origin: string;
  readonly now: () => number;
  private readonly requests: readonly Buffer[];
  private readonly maxConnections: number;
  private readonly slotConnections: Http1Connection[] = [];
  private readonly idle: Http1Connection[] = [];
  private readonly all: Http1Connection[] = [];
  private readonly waiting: InferCall[] = [];
  private waitingHead = 0;

  constructor(o: Http1TransportOptions) {
    const u = new URL(o.origin);
    this.host = u.hostname.replace(/^\[|\]$/g, '');
    this.port = Number(u.port || 80);
    this.origin = o.origin;
    this.now = o.now;
    this.requests = o.requests;
    this.maxConnections = o.connections ?? Number.POSITIVE_INFINITY;
  }

  get bodyCount(): number {
    return this.requests.length;
  }

  createCall(sink: CallSink, slot: number): InferCall {
    return new InferCall(sink, slot);
  }

  send(call: InferCall): void {
    call.startNs = this.now();
    call.sentNs = 0;
    call.responseStartNs = 0;
    let conn: Http1Connection | undefined;
    if (call.slot >= 0) {
      conn = this.slotConnections[call.slot];
      if (!conn) {
        conn = new Http1Connection(this);
        this.slotConnections[call.slot] = conn;
        this.all.push(conn);
      }
    } else {
      conn = this.idle.pop();
      if (!conn && this.all.length < this.maxConnections) {
        conn = new Http1Connection(this);
        this.all.push(conn);
      }
      if (!conn) {
        // Open loop with every connection busy: the request waits, and its latency includes the wait.
        this.waiting.push(call);
        return;
      }
    }
    conn.send(call, this.requests[call.bodyIndex]!);
  }

  /** A connection finished `call` (error null on success). */
  completed(conn: Http1Connection, call: InferCall, error: PerfError | null): void {
    if (call.slot < 0) {
      if (this.waitingHead < this.waiting.length) {
        const next = this.waiting[this.waitingHead++]!;
        if (this.waitingHead > 1024 && this.waitingHead * 2 > this.waiting.length) {
          this.waiting.splice(0, this.waitingHead);
          this.waitingHead = 0;
        }
        conn.send(next, this.requests[next.bodyIndex]!);
      } else {
        this.idle.push(conn);
      }
    }
    const endNs = this.now();
    if (error) call.sink.callFailed(call, error);
    else call.sink.callDone(call, endNs);
  }

  async close(): Promise<void> {
    for (const c of this.all) c.destroy();
    this.idle.length = 0;
    this.waiting.length = 0;
  }
}
