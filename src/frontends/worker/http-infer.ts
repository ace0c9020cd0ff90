/**
 * A frontend thread's HTTP infer: the hot path, served here from the body to the reply (read, decode, validate
 * the framing, refuse a full queue, encode); only the request itself crosses to the main thread. Anything this
 * path does not cover goes to the main thread whole (see `HttpThread.onRequest`).
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import { NereidError } from '../../errors.js';
import type { ModelConfig } from '../../gen/model_config_pb.js';
import { headerValue, inflateBody, readBody, requestEncoding } from '../http/body.js';
import { decodeInferBody, decodeRawInfer } from '../http/infer-decode.js';
import { Replier } from '../http/reply.js';
import { forwardHeaders, parseRestrictedApis, type Restriction } from '../http/restrictions.js';
import { compileHeaderForwardPattern } from '../header-forward.js';
import { InferCall, inferHeaderLength, sendInferResponse } from '../http/routes/infer.js';
import { Router } from '../http/router.js';
import { parseWireVersion } from '../../core/version-string.js';
import type { HttpForwarder } from './http-forward.js';
import type { HttpThreadOptions } from '../threads/protocol.js';
import { type RemoteServer, ThreadTrace } from './remote.js';
import { TracingFlag } from '../threads/wire.js';
import type { ThreadAccess } from './access.js';

const INFER_ROUTE = '/v2/models/:model[/versions/:version]/infer';

export class HttpThread {
  readonly reply = new Replier();
  private readonly router = new Router<true>();
  private readonly restriction: Restriction | undefined;
  private readonly forwardPattern: RegExp | undefined;
  /** The request being taken: whether it was picked to be traced (forwarded with TRACE_PICK_HEADER), when counted. */
  private tracePick: '0' | '1' | undefined = undefined;

  constructor(
    private readonly remote: RemoteServer,
    private readonly forwarder: HttpForwarder,
    private readonly options: HttpThreadOptions,
    /** `--auth-keys`: the thread's copy of the keys. */
    private readonly access?: ThreadAccess,
  ) {
    this.router.add(INFER_ROUTE, true);
    this.restriction = parseRestrictedApis(options.restrictedApis).get('inference');
    const pattern = options.headerForwardPattern;
    this.forwardPattern = pattern === undefined ? undefined : compileHeaderForwardPattern(pattern);
  }

  readonly onRequest = (req: IncomingMessage, res: ServerResponse): void => {
    if (this.reply.closing) res.shouldKeepAlive = false;
    this.tracePick = undefined;
    const served = req.method === 'POST' ? this.serveInfer(req, res) : false;
    if (!served) this.forwarder.forward(req, res, undefined, this.tracePick);
  };

  /** Serves an infer here; false when the main thread must (not an infer, unknown model, decoupled, cached...). */
  private serveInfer(req: IncomingMessage, res: ServerResponse): boolean {
    const url = req.url ?? '/';
    const q = url.indexOf('?');
    const found = this.router.match(q === -1 ? url : url.slice(0, q));
    if (found === undefined) return false;
    /** Whether to send the request with a ThreadTrace: picked here, or the main thread decides (0: neither). */
    let tracing = 0;
    const rate = this.remote.traceRate;
    if (rate !== 0) {
      // Every N-th request is picked here; only those carry what tracing needs (docs/tracing.md, "Frontend threads").
      const picked = this.remote.pickTrace(rate);
      this.tracePick = picked ? '1' : '0';
      if (picked) tracing = TracingFlag.On;
    } else tracing = this.remote.traceFlags;
    const r = this.restriction;
    if (r !== undefined && headerValue(req, r.headerKey) !== r.value) return false;
    const model = found.params['model']!;
    // Before the model is looked up: a model outside the key's scopes is refused by the main thread, never asked about.
    const a = this.access;
    const socket = req.socket;
    if (a !== undefined && !a.admits(req.headers.authorization, socket.remoteAddress, 'inference', model, socket))
      return false;
    let version: string | undefined;
    try {
      version = parseWireVersion(found.params['version']);
    } catch {
      return false;
    }
    const config = this.remote.modelConfig(model, version);
    // Decoupled models are refused, and cached replies kept, by the main thread's frontend.
    if (config === undefined || config.modelTransactionPolicy?.decoupled === true) return false;
    if (config.responseCache?.enable === true) return false;
    const refused = this.remote.admissionError(model, version);
    if (refused !== undefined) {
      this.reply.error(res, refused);
      return true;
    }
    const pick = this.tracePick;
    if (tracing === 0) {
      this.infer(req, res, model, version, config, pick, undefined).catch((err: unknown) => this.fail(res, err));
      return true;
    }
    const context = (tracing & TracingFlag.Context) !== 0;
    const parent = context ? req.headers.traceparent : undefined;
    const state = parent === undefined ? undefined : req.headers.tracestate;
    const trace = new ThreadTrace(
      rate !== 0 ? true : undefined,
      this.remote.now(),
      typeof parent === 'string' ? parent : undefined,
      typeof state === 'string' ? state : undefined,
    );
    if ((tracing & TracingFlag.Log) !== 0) {
      trace.log = { method: req.method ?? '', path: url, bytesIn: Number(req.headers['content-length'] ?? 0) || 0 };
      // The reply's bytes as written to the socket (status line and headers included).
      trace.bytesOut = socket.bytesWritten;
    }
    void this.tracedInfer(req, res, model, version, config, pick, trace);
    return true;
  }

  /** An infer the main thread may trace: its reply's send stamps go there once written (or failed). */
  private async tracedInfer(
    req: IncomingMessage,
    res: ServerResponse,
    model: string,
    version: string | undefined,
    config: ModelConfig,
    pick: '0' | '1' | undefined,
    trace: ThreadTrace,
  ): Promise<void> {
    try {
      await this.infer(req, res, model, version, config, pick, trace);
    } catch (err) {
      trace.sendStart = this.remote.now();
      this.fail(res, err);
    }
    // Ended and not destroyed: the reply was handed to the socket (a client gone first gets no send end).
    let end = NaN;
    if (res.writableEnded && !res.destroyed) {
      end = this.remote.now();
      if (trace.log !== undefined) {
        trace.status = res.statusCode;
        trace.bytesOut = (res.socket?.bytesWritten ?? trace.bytesOut) - trace.bytesOut;
      }
    }
    this.remote.sent(trace, model, trace.sendStart, end);
  }

  private async infer(
    req: IncomingMessage,
    res: ServerResponse,
    model: string,
    version: string | undefined,
    config: ModelConfig,
    pick: '0' | '1' | undefined,
    trace: ThreadTrace | undefined,
  ): Promise<void> {
    const encoding = requestEncoding(req);
    if (encoding === 'unknown') {
      if (trace !== undefined) trace.sendStart = this.remote.now();
      this.reply.errorText(res, 501, 'Unsupported compression type', ['Accept-Encoding', 'gzip, deflate']);
      return;
    }
    const max = this.options.maxInputSize;
    const received = await readBody(req, max, true);
    const inflated = encoding === 'identity' ? received : await inflateBody(received, max);
    // The body in a buffer of its own, which moves to the main thread with the request (the parser's is not ours).
    const owned = new ArrayBuffer(inflated.byteLength);
    const body = Buffer.from(owned);
    body.set(inflated);
    const headerLength = inferHeaderLength(headerValue(req, 'inference-header-content-length'), body.byteLength);
    const decoded =
      headerLength === 0 ? decodeRawInfer(body, config) : decodeInferBody(body, headerLength, model, max);
    if (decoded.shmInputs !== undefined || decoded.shmOutputs !== undefined) {
      // Client shared memory is registered with the main thread, which reads and writes it (and traces it there).
      if (trace !== undefined) trace.crossed = true;
      this.forwarder.forward(req, res, received, pick);
      return;
    }
    if (trace !== undefined) trace.recvEnd = this.remote.now();
    const pattern = this.forwardPattern;
    const parameters = pattern === undefined ? decoded.parameters : forwardHeaders(req, pattern, decoded.parameters);
    const call = new InferCall(res);
    const { id, inputs, outputs } = decoded;
    const response = await this.remote.infer(
      {
        model,
        version,
        id,
        inputs,
        outputs,
        parameters,
        signal: call.signal,
        keyedAddress: this.keyedAddress(req),
        trace,
      },
      owned,
    );
    call.done();
    if (trace !== undefined) trace.sendStart = this.remote.now();
    const compressing = sendInferResponse(this, req, res, response, decoded);
    if (compressing !== undefined) await compressing;
  }

  /** `--auth-keys`: the client's address when the request carries a key, for the main thread's last limit check. */
  private keyedAddress(req: IncomingMessage): string | undefined {
    const authorization = req.headers.authorization;
    if (this.access === undefined || authorization === undefined || authorization === '') return undefined;
    return req.socket.remoteAddress ?? '';
  }

  private fail(res: ServerResponse, err: unknown): void {
    if (err instanceof NereidError && (err.code === 'NRD_BODY_TOO_LARGE' || err.code === 'NRD_TOO_MANY_CHUNKS'))
      res.shouldKeepAlive = false;
    this.reply.error(res, err);
  }
}

