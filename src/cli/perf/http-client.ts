/**
 * HTTP/REST (KServe v2) side of the load tool, on undici: control calls on
 * their own connection, and an infer transport on a Pool with one connection
 * per concurrent request and pipelining 1. Request bodies are encoded once;
 * each in-flight request is an InferCall driven through undici's dispatch
 * handler interface, so a request allocates nothing of ours.
 */
import { Client, Pool, type Dispatcher } from 'undici';
import { PerfError } from './errors.js';
import { parseStatistics, type StatsSnapshot } from './server-stats.js';
import { type CallSink, type ControlClient, InferCall, type InferTransport, type ServerInfo } from './transport.js';
import type { EncodedHttpBody } from './http-body.js';

/** "localhost:8000" or "http://host:port" -> "http://host:port". */
export function httpOrigin(url: string): string {
  const withScheme = /^[a-z]+:\/\//i.test(url) ? url : `http://${url}`;
  let u: URL;
  try {
    u = new URL(withScheme);
  } catch {
    throw new PerfError('failed to create client', `'${url}' is not a valid server address (expected host:port)`);
  }
  if (u.protocol !== 'http:') throw new PerfError('failed to create client', `unsupported URL scheme '${u.protocol}' in '${url}'`);
  return u.origin;
}

export function modelPath(name: string, version: string): string {
  return `/v2/models/${encodeURIComponent(name)}${version ? `/versions/${encodeURIComponent(version)}` : ''}`;
}

/** Turns a connection failure into a sentence naming the server. */
export function describeNetworkError(err: unknown, origin: string): string {
  const e = err as { code?: string; message?: string; cause?: { code?: string; message?: string } };
  const code = e.code ?? e.cause?.code;
  if (code === 'ECONNREFUSED') return `unable to connect to ${origin}: connection refused (is the server running?)`;
  if (code === 'ENOTFOUND' || code === 'EAI_AGAIN') return `unable to resolve the host of ${origin}`;
  if (code === 'UND_ERR_CONNECT_TIMEOUT') return `timed out connecting to ${origin}`;
  if (code === 'UND_ERR_SOCKET' || code === 'ECONNRESET') return `connection to ${origin} was closed by the server`;
  return `request to ${origin} failed: ${e.message ?? String(err)}${code ? ` (${code})` : ''}`;
}

function errorText(status: number, body: string): string {
  try {
    const doc = JSON.parse(body) as { error?: unknown };
    if (typeof doc.error === 'string') return doc.error;
  } catch {
    // not JSON: fall through
  }
  return body.trim() ? `HTTP ${status}: ${body.trim().slice(0, 500)}` : `HTTP ${status}`;
}

export class HttpControlClient implements ControlClient {
  private readonly client: Client;

  constructor(
    private readonly origin: string,
    private readonly headers: ReadonlyArray<[string, string]> = [],
  ) {
    this.client = new Client(origin, { pipelining: 1 });
  }

  private async getJson(path: string, what: string, method: 'GET' | 'POST' = 'GET'): Promise<unknown> {
    let res: Dispatcher.ResponseData;
    try {
      res = await this.client.request({ path, method, headers: Object.fromEntries(this.headers) });
    } catch (err) {
      throw new PerfError(what, describeNetworkError(err, this.origin));
    }
    const text = await res.body.text();
    if (res.statusCode !== 200) throw new PerfError(what, errorText(res.statusCode, text));
    try {
      return JSON.parse(text);
    } catch {
      throw new PerfError(what, `the server's response to ${path} is not JSON`);
    }
  }

  async serverMetadata(): Promise<ServerInfo> {
    const doc = (await this.getJson('/v2', 'failed to get server metadata')) as { extensions?: unknown };
    const ext = Array.isArray(doc.extensions) ? doc.extensions.filter((e): e is string => typeof e === 'string') : [];
    return { extensions: ext };
  }

  modelMetadata(name: string, version: string): Promise<unknown> {
    return this.getJson(modelPath(name, version), 'failed to get model metadata');
  }

  modelConfig(name: string, version: string): Promise<unknown> {
    return this.getJson(`${modelPath(name, version)}/config`, 'failed to get model config');
  }

  async statistics(name?: string, version?: string): Promise<StatsSnapshot> {
    const path = name === undefined ? '/v2/models/stats' : `${modelPath(name, version ?? '')}/stats`;
    return parseStatistics(await this.getJson(path, 'failed to get model statistics'));
  }

  async close(): Promise<void> {
    await this.client.close();
  }
}

/**
 * undici's dispatch handler, as a class so one instance per call slot is
 * reused: its methods read the call off `this`, no closures per request.
 */
class HttpCallHandler {
  constructor(
    private readonly call: InferCall,
    private readonly now: () => number,
    private readonly origin: string,
  ) {}

  onConnect(): void {}

  onRequestSent(): void {
    this.call.sentNs = this.now();
  }

  onResponseStarted(): void {
    this.call.responseStartNs = this.now();
  }

  onHeaders(statusCode: number): boolean {
    const call = this.call;
    call.statusCode = statusCode;
    if (call.responseStartNs === 0) call.responseStartNs = this.now();
    call.errorChunks = statusCode === 200 ? null : [];
    return true;
  }

  onData(chunk: Buffer): boolean {
    const chunks = this.call.errorChunks;
    if (chunks !== null) chunks.push(chunk);
    return true;
  }

  onComplete(): void {
    const call = this.call;
    const endNs = this.now();
    if (call.statusCode === 200) {
      call.sink.callDone(call, endNs);
      return;
    }
    const body = Buffer.concat(call.errorChunks ?? []).toString('utf8');
    call.errorChunks = null;
    call.sink.callFailed(call, new PerfError('', `inference request failed: ${errorText(call.statusCode, body)}`));
  }

  onError(err: Error): void {
    this.call.sink.callFailed(this.call, new PerfError('', `inference request failed: ${describeNetworkError(err, this.origin)}`));
  }
}

/** An InferCall that carries its undici handler. */
export class HttpInferCall extends InferCall {
  handler: HttpCallHandler | undefined;
}

export interface HttpTransportOptions {
  readonly origin: string;
  readonly modelName: string;
  readonly modelVersion: string;
  readonly bodies: readonly EncodedHttpBody[];
  readonly headers: ReadonlyArray<[string, string]>;
  /** Connections in the pool; null for no limit. */
  readonly connections: number | null;
  readonly now: () => number;
}

export class HttpInferTransport implements InferTransport {
  private readonly pool: Pool;
  private readonly requests: Dispatcher.DispatchOptions[];
  private readonly now: () => number;
  private readonly origin: string;

  constructor(o: HttpTransportOptions) {
    this.origin = o.origin;
    this.now = o.now;
    this.pool = new Pool(o.origin, { connections: o.connections, pipelining: 1 });
    const path = `${modelPath(o.modelName, o.modelVersion)}/infer`;
    this.requests = o.bodies.map((b) => {
      const headers: string[] = [];
      if (b.headerLength !== undefined) {
        headers.push('content-type', 'application/octet-stream', 'inference-header-content-length', String(b.headerLength));
      } else {
        headers.push('content-type', 'application/json');
      }
      for (const [k, v] of o.headers) headers.push(k, v);
      return { method: 'POST', path, headers, body: b.body };
    });
  }

  get bodyCount(): number {
    return this.requests.length;
  }

  /** Makes a call object bound to this transport (its handler is created once). */
  createCall(sink: CallSink, slot: number): HttpInferCall {
    const call = new HttpInferCall(sink, slot);
    call.handler = new HttpCallHandler(call, this.now, this.origin);
    return call;
  }

  send(call: InferCall): void {
    const c = call as HttpInferCall;
    c.startNs = this.now();
    c.sentNs = 0;
    c.responseStartNs = 0;
    c.statusCode = 0;
    this.pool.dispatch(this.requests[c.bodyIndex]!, c.handler as unknown as Dispatcher.DispatchHandler);
  }

  async close(): Promise<void> {
    await this.pool.close();
  }
}
