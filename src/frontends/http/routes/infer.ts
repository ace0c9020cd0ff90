/** Inference: admission before the body is read, decoding, the response cache's replayed replies, shared memory. */
import type { IncomingMessage, ServerResponse } from 'node:http';
import { Errors } from '../../../errors.js';
import type { ServerApi } from '../../../core/server-api.js';
import { RequestSharedMemory } from '../../../core/shared-memory.js';
import type { CacheHitTicket } from '../../../types/api.js';
import { Cancellation } from '../../../types/cancellation.js';
import type { Trace, Tracer } from '../../../trace/index.js';
import { TRACE_PICK_HEADER } from '../../threads/index.js';
import { headerValue, inflateBody, readBody, requestEncoding } from '../body.js';
import { MAX_REPLY_BYTES, type RequestKey } from '../cache-replay.js';
import { compressBody, negotiateResponseEncoding } from '../compression.js';
import { type DecodedInfer, decodeInferBody, decodeRawInfer } from '../infer-decode.js';
import { type EncodedInferResponse, encodeInferResponse } from '../infer-encode.js';
import { forwardHeaders } from '../restrictions.js';
import { stoi } from '../settings.js';
import { type HttpContext, JSON_TYPE, parseVersion } from './context.js';

/** Inference-Header-Content-Length, parsed like std::stoi and range-checked against the body. */
export function inferHeaderLength(raw: string | undefined, contentLength: number): number {
  if (raw === undefined) return contentLength;
  const v = stoi(raw);
  if (v === 'invalid') throw Errors.malformedBody(`Unable to parse Inference-Header-Content-Length, got: ${raw}`);
  if (v === 'range') {
    throw Errors.malformedBody(
      `Unable to parse Inference-Header-Content-Length, value is out of range [ -2147483648, 2147483647 ], got: ${raw}`,
    );
  }
  if (v < 0 || v > contentLength) {
    throw Errors.malformedBody(`inference header size should be in range (0, ${contentLength}), got: ${raw}`);
  }
  return v;
}

/**
 * The checks of an infer made before its body is read, synchronously: a
 * refusal (unknown model, full queue) is written from here without a
 * promise, so shedding load costs no copy, decode or extra turn.
 */
export function admitInfer(
  ctx: HttpContext,
  req: IncomingMessage,
  res: ServerResponse,
  model: string,
  versionText: string | undefined,
): Promise<void> | undefined {
  const version = parseVersion(model, versionText);
  // Resolves the model first (unknown model -> 404 before the body is looked at), as Triton does.
  let config: ReturnType<ServerApi['modelConfig']>;
  try {
    config = ctx.server.modelConfig(model, version);
  } catch (err) {
    // Model paging: a model unloaded for room loads first (docs/paging.md).
    const loading = ctx.server.pageIn?.(model);
    if (loading === undefined) throw err;
    return loading.then(() => admitInfer(ctx, req, res, model, versionText));
  }
  if (config.modelTransactionPolicy?.decoupled === true) {
    throw Errors.decoupledNotSupported("HTTP end point doesn't support models with decoupled transaction policy");
  }
  const refused = ctx.server.admissionError?.(model, version);
  if (refused !== undefined) {
    ctx.reply.error(res, refused);
    return undefined;
  }
  return handleInfer(ctx, req, res, model, version, config);
}

function handleInfer(
  ctx: HttpContext,
  req: IncomingMessage,
  res: ServerResponse,
  model: string,
  version: string | undefined,
  config: ReturnType<ServerApi['modelConfig']>,
): Promise<void> {
  const tracer = ctx.tracer;
  if (tracer !== undefined && tracer.enabled) {
    const trace = sampleRequest(tracer, model, req);
    if (trace !== undefined) return tracedInfer(ctx, req, res, model, version, config, trace);
  }
  return inferBody(ctx, req, res, model, version, config, undefined);
}

/**
 * An infer whose trace ends here, once its reply (or error reply) has been written: every path of inferBody writes
 * its reply before it settles, so no listener on the response is needed.
 */
async function tracedInfer(
  ctx: HttpContext,
  req: IncomingMessage,
  res: ServerResponse,
  model: string,
  version: string | undefined,
  config: ReturnType<ServerApi['modelConfig']>,
  trace: Trace,
): Promise<void> {
  // The reply's bytes as written to the socket (status line and headers included), for the request log.
  const log = trace.group.log;
  const socket = log !== undefined ? res.socket : null;
  const writtenBefore = socket?.bytesWritten ?? 0;
  try {
    await inferBody(ctx, req, res, model, version, config, trace);
  } catch (err) {
    trace.stamp('HTTP_SEND_START');
    ctx.fail(res, err);
  }
  // Ended and not destroyed: the reply was handed to the socket (a client gone first gets no HTTP_SEND_END).
  if (res.writableEnded && !res.destroyed) {
    trace.stamp('HTTP_SEND_END');
    if (log !== undefined) {
      log.status = res.statusCode;
      log.bytesOut = (socket?.bytesWritten ?? writtenBefore) - writtenBefore;
    }
  }
  trace.end();
}

async function inferBody(
  ctx: HttpContext,
  req: IncomingMessage,
  res: ServerResponse,
  model: string,
  version: string | undefined,
  config: ReturnType<ServerApi['modelConfig']>,
  trace: Trace | undefined,
): Promise<void> {
  const encoding = requestEncoding(req);
  if (encoding === 'unknown') {
    trace?.stamp('HTTP_SEND_START');
    ctx.reply.errorText(res, 501, 'Unsupported compression type', ['Accept-Encoding', 'gzip, deflate']);
    return;
  }
  let body = await readBody(req, ctx.maxInputSize, true);
  if (encoding !== 'identity') body = await inflateBody(body, ctx.maxInputSize);
  const inferHeader = headerValue(req, 'inference-header-content-length');
  // A request answered from the response cache before, sent again: its reply as written then.
  // Only models that cache pay for the key (a hash over the body).
  const replayKey =
    config.responseCache?.enable === true &&
    encoding === 'identity' &&
    negotiateResponseEncoding(headerValue(req, 'accept-encoding')) === 'identity'
      ? ctx.replies.keyOf(req, model, version, inferHeader, ctx.forwardPattern, body)
      : undefined;
  // A traced request runs through the core, whose cache then records the hit in the trace.
  if (replayKey !== undefined && trace === undefined && replayCacheHit(ctx, res, replayKey, model, version)) return;

  const headerLength = inferHeaderLength(inferHeader, body.byteLength);
  const decoded =
    headerLength === 0 ? decodeRawInfer(body, config) : decodeInferBody(body, headerLength, model, ctx.maxInputSize);
  trace?.stamp('HTTP_RECV_END');

  const parameters =
    ctx.forwardPattern === undefined
      ? decoded.parameters
      : forwardHeaders(req, ctx.forwardPattern, decoded.parameters);
  if (decoded.shmInputs !== undefined || decoded.shmOutputs !== undefined) {
    return inferWithSharedMemory(ctx, req, res, model, version, decoded, parameters, trace);
  }
  const call = new InferCall(res);
  // One await on the server itself (callInfer would add a second): this is the hot path.
  const response = await ctx.server.infer(inferRequest(model, version, decoded, parameters, call.signal, trace));
  call.done();
  trace?.stamp('HTTP_SEND_START');
  if (replayKey !== undefined && response.cacheHit !== undefined) {
    sendAndKeep(ctx, res, response, decoded, replayKey, response.cacheHit);
    return;
  }
  const compressing = sendInferResponse(ctx, req, res, response, decoded);
  if (compressing !== undefined) await compressing;
}

/** Writes the reply kept under `key` when the server confirms its hit; false when the request must run. */
function replayCacheHit(
  ctx: HttpContext,
  res: ServerResponse,
  key: RequestKey,
  model: string,
  version: string | undefined,
): boolean {
  const kept = ctx.replies.get(key);
  if (kept === undefined) return false;
  if (ctx.server.replayCacheHit?.(kept.ticket, model, version) !== true) {
    ctx.replies.drop(key);
    return false;
  }
  ctx.reply.whole(res, 200, kept.headers, kept.body);
  return true;
}

/**
 * An uncompressed reply to a cache hit, written as one buffer and kept for the same request sent again (when small
 * enough).
 */
function sendAndKeep(
  ctx: HttpContext,
  res: ServerResponse,
  response: Parameters<typeof encodeInferResponse>[0],
  decoded: DecodedInfer,
  key: RequestKey,
  ticket: CacheHitTicket,
): void {
  const encoded = encodeInferResponse(response, decoded);
  const total = encoded.json.byteLength + encoded.binaryByteLength;
  const headers = inferReplyHeaders(encoded);
  if (total > MAX_REPLY_BYTES) {
    // Too large to keep: written in its parts, not joined.
    ctx.reply.parts(res, 200, headers, encoded.json, encoded.binary, total);
    return;
  }
  const body =
    encoded.whole ??
    (encoded.binaryByteLength > 0 ? Buffer.concat([encoded.json, ...encoded.binary], total) : encoded.json);
  headers.push('Content-Length', String(total));
  ctx.reply.whole(res, 200, headers, body);
  ctx.replies.keep(key, ticket, headers, body);
}

/** Runs the decoded request through the server, cancelled if the client goes away first. */
async function callInfer(
  ctx: HttpContext,
  res: ServerResponse,
  model: string,
  version: string | undefined,
  decoded: DecodedInfer,
  parameters: DecodedInfer['parameters'],
  trace?: Trace,
): Promise<Parameters<typeof encodeInferResponse>[0]> {
  const call = new InferCall(res);
  const response = await ctx.server.infer(inferRequest(model, version, decoded, parameters, call.signal, trace));
  call.done();
  return response;
}

/** An infer whose inputs come from, or outputs go to, client shared-memory regions. */
async function inferWithSharedMemory(
  ctx: HttpContext,
  req: IncomingMessage,
  res: ServerResponse,
  model: string,
  version: string | undefined,
  decoded: DecodedInfer,
  parameters: DecodedInfer['parameters'],
  trace: Trace | undefined,
): Promise<void> {
  const shm = new RequestSharedMemory(ctx.server.sharedMemory);
  try {
    for (const { index, ref } of decoded.shmInputs ?? []) {
      const t = decoded.inputs[index]!;
      decoded.inputs[index] = shm.inputTensor(t.name, t.datatype, t.shape, ref);
    }
    for (const [name, ref] of decoded.shmOutputs ?? []) shm.bindOutput(name, ref);
    const response = await callInfer(ctx, res, model, version, decoded, parameters, trace);
    await shm.writeOutputs(response.outputs);
    trace?.stamp('HTTP_SEND_START');
    const compressing = sendInferResponse(ctx, req, res, response, decoded);
    if (compressing !== undefined) await compressing;
  } finally {
    shm.release();
  }
}

/** Writes the reply; returns a promise only when the body is compressed first (off the event loop). */
export function sendInferResponse(
  ctx: Pick<HttpContext, 'reply'>,
  req: IncomingMessage,
  res: ServerResponse,
  response: Parameters<typeof encodeInferResponse>[0],
  decoded: DecodedInfer,
): Promise<void> | undefined {
  const encoded = encodeInferResponse(response, decoded);
  const hasBinary = encoded.binaryByteLength > 0;
  const headers = inferReplyHeaders(encoded);
  const encoding = negotiateResponseEncoding(headerValue(req, 'accept-encoding'));
  if (encoding === 'identity') {
    if (!hasBinary) {
      // JSON alone: the text goes out in one write with the header text, without a copy into a Buffer first.
      headers.push('Content-Length', String(Buffer.byteLength(encoded.text, 'utf8')));
      ctx.reply.wholeText(res, 200, headers, encoded.text);
    } else if (encoded.whole !== undefined) {
      headers.push('Content-Length', String(encoded.whole.byteLength));
      ctx.reply.whole(res, 200, headers, encoded.whole);
    } else {
      ctx.reply.parts(
        res,
        200,
        headers,
        encoded.json,
        encoded.binary,
        encoded.json.byteLength + encoded.binaryByteLength,
      );
    }
    return undefined;
  }
  const whole = encoded.whole ?? (hasBinary ? Buffer.concat([encoded.json, ...encoded.binary]) : encoded.json);
  return compressBody(encoding, whole).then((compressed) => {
    headers.push('Content-Encoding', encoding);
    ctx.reply.parts(res, 200, headers, compressed, [], compressed.byteLength);
  });
}

/**
 * Cancels the core request when the client goes away before the reply. The
 * listener stays on the response (one per request, which emits 'close' once)
 * rather than being removed when the call is done: removing it cost more.
 */
export class InferCall {
  readonly signal = new Cancellation();
  private pending = true;

  constructor(private readonly res: ServerResponse) {
    res.on('close', this.onClose);
  }

  private readonly onClose = (): void => {
    if (this.pending && !this.res.writableFinished) this.signal.abort();
  };

  done(): void {
    this.pending = false;
  }
}

/** An infer reply's content headers: binary outputs follow a JSON header whose length the client is told. */
function inferReplyHeaders(encoded: EncodedInferResponse): string[] {
  return encoded.binaryByteLength > 0
    ? ['Content-Type', 'application/octet-stream', 'Inference-Header-Content-Length', String(encoded.json.byteLength)]
    : ['Content-Type', JSON_TYPE];
}

/** The server request for a decoded HTTP infer body. */
function inferRequest(
  model: string,
  version: string | undefined,
  decoded: DecodedInfer,
  parameters: DecodedInfer['parameters'],
  signal: Cancellation,
  trace: Trace | undefined,
): Parameters<ServerApi['infer']>[0] {
  const jsonOutputs = decoded.anyJson ? decoded : undefined;
  return {
    model,
    version,
    id: decoded.id,
    inputs: decoded.inputs,
    outputs: decoded.outputs,
    parameters,
    signal,
    jsonOutputs,
    trace,
  };
}

/** Where a request forwarded by a frontend thread keeps the thread's pick (TRACE_PICK_HEADER). */
const TRACE_PICK = Symbol('tracePick');
type Picked = IncomingMessage & { [TRACE_PICK]?: boolean };

/** A request forwarded by a frontend thread: the thread's pick, when it counted it, moves from its header. */
export function takeTracePick(req: IncomingMessage): void {
  const pick = req.headers[TRACE_PICK_HEADER];
  if (pick === undefined) return;
  delete req.headers[TRACE_PICK_HEADER];
  (req as Picked)[TRACE_PICK] = pick === '1';
}

/**
 * A trace for this request when the tracer samples it (W3C context from its
 * headers; a frontend thread's pick). tracedInfer ends it.
 */
function sampleRequest(tracer: Tracer, model: string, req: IncomingMessage): Trace | undefined {
  const picked = (req as Picked)[TRACE_PICK];
  if (picked !== undefined) {
    const trace = tracer.sample(model, undefined, undefined, picked);
    trace?.stamp('HTTP_RECV_START');
    return trace;
  }
  // Triton mode never reads a context: no header lookups on every request.
  const parent = tracer.readsContext ? req.headers.traceparent : undefined;
  const state = parent === undefined ? undefined : req.headers.tracestate;
  const trace = tracer.sample(
    model,
    typeof parent === 'string' ? parent : undefined,
    typeof state === 'string' ? state : undefined,
  );
  if (trace === undefined) return undefined;
  trace.stamp('HTTP_RECV_START');
  const log = trace.group.log;
  if (log !== undefined) {
    log.protocol = 'http';
    log.method = req.method ?? '';
    log.path = req.url ?? '';
    log.bytesIn = Number(req.headers['content-length'] ?? 0) || 0;
  }
  return trace;
}
