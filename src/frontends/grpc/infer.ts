/**
 * ModelInfer and ModelStreamInfer: decode → ServerApi.infer → encode.
 */
import { Cancellation } from '../../types/cancellation.js';
import { create, toBinary } from '@bufbuild/protobuf';
import {
  type Metadata,
  type sendUnaryData,
  type ServerDuplexStream,
  type ServerUnaryCall,
  status as grpcStatus,
} from '@grpc/grpc-js';
import type { Trace, Tracer } from '../../trace/index.js';
import { TRACE_PICK_HEADER } from '../threads/index.js';
import { ModelStreamInferResponseSchema, type ModelInferRequest } from '../../gen/grpc_service_pb.js';
import { MODEL_REPORTED_CODES, asNereidError, Errors, type NereidError } from '../../errors.js';
import type { ServerApi } from '../../core/server-api.js';
import type { InferRequest, InferResponse, ParameterValue, StreamResponse } from '../../types/api.js';
import { streamResponses } from '../../core/response-stream.js';
import type { Logger } from '../../logger.js';
import { decodeInferRequest, wantsEmptyFinalResponse } from './infer-decode.js';
import { type DecodedGrpcInfer, decodeInfer } from './infer-decode.js';
import { RequestSharedMemory } from '../../core/shared-memory.js';
import { encodeInferResponse } from './infer-encode.js';
import { malformedError } from './handlers.js';
import { forwardedHeaders } from './restrictions.js';
import { MalformedMessage } from './service.js';
import { toServiceError } from './status.js';
import { refusal } from './auth.js';
import type { AuthFailure } from '../../auth/index.js';
import { batchWrites } from './batched-writes.js';

const DECOUPLED_ON_MODEL_INFER = "ModelInfer RPC doesn't support models with decoupled transaction policy";

/** Errors Triton reports from its response callback (after the core ran) rather than when enqueuing. */
const AFTER_CORE = new Set(['NRD_REQUEST_TIMEOUT', 'NRD_CANCELLED', ...Object.values(MODEL_REPORTED_CODES)]);

/** true when the model (version) is decoupled; false when unknown, leaving the error to infer(). */
function isDecoupled(server: ServerApi, model: string, version: string): boolean {
  try {
    return server.modelConfig(model, version === '' ? undefined : version).modelTransactionPolicy?.decoupled === true;
  } catch {
    return false;
  }
}

/** A trace for a request of this call when the tracer samples it (W3C context from the call's metadata). */
export function sampleCall(
  tracer: Tracer | undefined,
  model: string,
  metadata: Metadata,
  rpc: string,
  msg?: ModelInferRequest,
  /** Calls come from frontend threads, which may have picked them (TRACE_PICK_HEADER). */
  threads = false,
): Trace | undefined {
  if (tracer === undefined || !tracer.enabled) return undefined;
  if (threads) {
    const pick = metadata.get(TRACE_PICK_HEADER)[0];
    if (pick !== undefined) {
      metadata.remove(TRACE_PICK_HEADER);
      return tracer.sample(model, undefined, undefined, pick === '1');
    }
  }
  // Triton mode never reads a context: no metadata lookups (each validates its key) on every call.
  const parent = tracer.readsContext ? metadata.get('traceparent')[0] : undefined;
  const state = parent === undefined ? undefined : metadata.get('tracestate')[0];
  const trace = tracer.sample(
    model,
    typeof parent === 'string' ? parent : undefined,
    typeof state === 'string' ? state : undefined,
  );
  const log = trace?.group.log;
  if (log !== undefined) {
    log.protocol = 'grpc';
    log.method = rpc;
    log.path = `/inference.GRPCInferenceService/${rpc}`;
    // The tensor bytes received (the message itself is decoded before the handler sees it).
    if (msg !== undefined) for (const raw of msg.rawInputContents) log.bytesIn += raw.byteLength;
  }
  return trace;
}

/** A traced gRPC response went out: what the request log says of it. */
function logSent(trace: Trace, status: string, bytes: number): void {
  const log = trace.group.log;
  if (log === undefined) return;
  log.status = status;
  log.bytesOut += bytes;
}

/** Completes one unary call; a class so no closures are made per request. */
export class UnaryInferCall {
  private finished = false;
  constructor(
    private readonly callback: sendUnaryData<Uint8Array>,
    private readonly abort: Cancellation,
    private readonly trace: Trace | undefined,
  ) {}
  done(res: InferResponse): void {
    this.finished = true;
    const trace = this.trace;
    trace?.stamp('GRPC_SEND_START');
    let bytes: Buffer;
    try {
      bytes = encodeInferResponse(res);
    } catch (e) {
      this.callback(toServiceError(e), null);
      trace?.stamp('GRPC_SEND_END');
      trace?.end();
      return;
    }
    this.callback(null, bytes);
    if (trace !== undefined) {
      trace.stamp('GRPC_SEND_END');
      logSent(trace, 'OK', bytes.byteLength);
      trace.end();
    }
  }
  failed(err: unknown): void {
    this.finished = true;
    this.trace?.stamp('GRPC_SEND_START');
    const error = toServiceError(err);
    this.callback(error, null);
    if (this.trace !== undefined) {
      this.trace.stamp('GRPC_SEND_END');
      logSent(this.trace, grpcStatusName(error.code), 0);
      this.trace.end();
    }
  }
  /** grpc-js also signals 'cancelled' after every completed call; only a pending request is aborted. */
  cancelled(): void {
    if (!this.finished) this.abort.abort();
  }
}

export function modelInferHandler(
  server: ServerApi,
  headerPattern?: RegExp,
  tracer?: Tracer,
  /** `--auth-keys` (auth.ts, inferKeyCheck): checked first, as the interceptor checks the other RPCs. */
  keyCheck?: (call: ServerUnaryCall<unknown, unknown>, model: string | undefined) => AuthFailure | undefined,
  /** Calls come from frontend threads (sampleCall). */
  threads = false,
) {
  return (
    call: ServerUnaryCall<ModelInferRequest | MalformedMessage, Uint8Array>,
    callback: sendUnaryData<Uint8Array>,
  ): void => {
    const msg = call.request;
    if (keyCheck !== undefined) {
      const failure = keyCheck(call, msg instanceof MalformedMessage ? undefined : msg.modelName);
      if (failure !== undefined) {
        callback(refusal(failure), null);
        return;
      }
    }
    if (msg instanceof MalformedMessage) {
      callback(malformedError(msg), null);
      return;
    }
    // A full queue answers before the inputs are unpacked.
    const refused = server.admissionError?.(
      msg.modelName,
      msg.modelVersion === '' ? undefined : msg.modelVersion,
      msg.id,
    );
    if (refused !== undefined) {
      callback(toServiceError(refused), null);
      return;
    }
    const abort = new Cancellation();
    // The message is read when the handler runs: WAITREAD ends once its tensors are taken from it.
    const trace = sampleCall(tracer, msg.modelName, call.metadata, 'ModelInfer', msg, threads);
    trace?.stamp('GRPC_WAITREAD_START');
    let decoded;
    try {
      const headers = headerPattern === undefined ? undefined : forwardedHeaders(call.metadata, headerPattern);
      decoded = decodeInfer(msg, abort, headers, trace);
      if (isDecoupled(server, msg.modelName, msg.modelVersion))
        throw Errors.decoupledNotSupported(DECOUPLED_ON_MODEL_INFER);
    } catch (e) {
      callback(toServiceError(e), null);
      trace?.end();
      return;
    }
    trace?.stamp('GRPC_WAITREAD_END');
    const pending = new UnaryInferCall(callback, abort, trace);
    // grpc-js emits 'cancelled' at most once per call (guarded by its cancel notification), so `on` spares once's
    // wrapper.
    call.on('cancelled', pending.cancelled.bind(pending));
    const run = decoded.shm === undefined ? server.infer(decoded.request) : inferWithSharedMemory(server, decoded);
    run.then(pending.done.bind(pending), pending.failed.bind(pending));
  };
}

const NO_BYTES = new Uint8Array(0);

/**
 * Reads the inputs held in client regions, runs the request, writes the
 * outputs bound to regions and answers them with empty contents (as Triton).
 */
async function inferWithSharedMemory(server: ServerApi, decoded: DecodedGrpcInfer): Promise<InferResponse> {
  const plan = decoded.shm!;
  const shm = new RequestSharedMemory(server.sharedMemory);
  try {
    for (const { index, ref } of plan.inputs) {
      const t = decoded.inputs[index]!;
      decoded.inputs[index] = shm.inputTensor(t.name, t.datatype, t.shape, ref);
    }
    for (const [name, ref] of plan.outputs) shm.bindOutput(name, ref);
    const response = await server.infer(decoded.request);
    if (!shm.hasOutputs) return response;
    await shm.writeOutputs(response.outputs);
    return {
      ...response,
      outputs: response.outputs.map((t) =>
        shm.isOutput(t.name) ? { name: t.name, datatype: t.datatype, shape: t.shape, data: NO_BYTES } : t,
      ),
    };
  } finally {
    shm.release();
  }
}

/** One request's place in the stream's response order. */
class StreamSlot {
  bytes: Uint8Array | undefined;
  error: NereidError | undefined;
  trace: Trace | undefined = undefined;
  constructor(
    readonly session: StreamInferSession,
    readonly msg: ModelInferRequest | undefined,
  ) {}
  done(res: InferResponse): void {
    try {
      this.bytes = encodeInferResponse(res, true);
    } catch (e) {
      this.error = asNereidError(e);
    }
    this.session.flush();
  }
  failed(err: unknown): void {
    this.error = asNereidError(err);
    this.session.flush();
  }
  get settled(): boolean {
    return this.bytes !== undefined || this.error !== undefined;
  }
}

/**
 * One ModelStreamInfer call. Requests run concurrently; responses are
 * written in request order. A failed request is answered with
 * `error_message` and the stream stays open, unless the client opened it
 * with metadata `triton_grpc_error: true`: then the first failure reported
 * after the core ran the request (execution, timeout, cancellation) ends
 * the stream with that error's status. Requests refused up front (unknown
 * model, bad input) are still answered in-stream, as in Triton, where only
 * the response callback honours the switch.
 */
class StreamInferSession {
  private readonly slots: StreamSlot[] = [];
  /** Aborts every request of the stream; a Cancellation has no listener limit (a stream may hold many requests). */
  private readonly abort = new Cancellation();
  /** Requests of decoupled models still streaming; each has its own cancellation. */
  private readonly open = new Set<Cancellation>();
  private readonly strictErrors: boolean;
  private inputEnded = false;
  private closed = false;
  /** Metadata is fixed for the stream's life, so headers are forwarded from one parse. */
  private readonly headers: Readonly<Record<string, ParameterValue>> | undefined;
  private readonly headerError: unknown;

  constructor(
    private readonly server: ServerApi,
    private readonly call: ServerDuplexStream<ModelInferRequest | MalformedMessage, Uint8Array>,
    private readonly logger: Logger,
    headerPattern: RegExp | undefined,
    private readonly tracer: Tracer | undefined,
  ) {
    this.strictErrors = call.metadata.get('triton_grpc_error')[0] === 'true';
    try {
      this.headers = headerPattern === undefined ? undefined : forwardedHeaders(call.metadata, headerPattern);
    } catch (e) {
      this.headerError = e;
    }
    call.on('data', (m: ModelInferRequest | MalformedMessage) => this.onRequest(m));
    call.on('end', () => {
      this.inputEnded = true;
      this.flush();
    });
    call.on('cancelled', () => this.close());
    call.on('error', (e: Error) => {
      this.logger.debug({ err: e }, 'ModelStreamInfer stream error');
      this.close();
    });
  }

  /** Client went away (grpc-js also reports 'cancelled' after a normal end, when nothing is pending). */
  private close(): void {
    this.closed = true;
    if (this.slots.length > 0) {
      for (const slot of this.slots) slot.trace?.end();
      this.slots.length = 0;
      this.abort.abort();
    }
    if (this.open.size > 0) {
      const open = [...this.open];
      this.open.clear();
      for (const c of open) c.abort();
    }
  }

  private onRequest(m: ModelInferRequest | MalformedMessage): void {
    if (this.closed) return;
    if (m instanceof MalformedMessage) {
      const slot = new StreamSlot(this, undefined);
      slot.error = Errors.malformedBody(`failed to parse ${m.typeName}: ${m.reason}`);
      this.slots.push(slot);
      this.flush();
      return;
    }
    if (isDecoupled(this.server, m.modelName, m.modelVersion)) {
      this.startDecoupled(m);
      return;
    }
    const slot = new StreamSlot(this, m);
    this.slots.push(slot);
    const trace = sampleCall(this.tracer, m.modelName, this.call.metadata, 'ModelStreamInfer', m);
    trace?.stamp('GRPC_WAITREAD_START');
    slot.trace = trace;
    let decoded;
    try {
      if (this.headerError !== undefined) throw this.headerError;
      decoded = decodeInfer(m, this.abort, this.headers, trace);
    } catch (e) {
      slot.failed(e);
      return;
    }
    trace?.stamp('GRPC_WAITREAD_END');
    const run =
      decoded.shm === undefined ? this.server.infer(decoded.request) : inferWithSharedMemory(this.server, decoded);
    run.then(slot.done.bind(slot), slot.failed.bind(slot));
  }

  /**
   * A request on a decoupled model: each of its responses is written as it
   * comes (not in request order), with triton_final_response false until
   * the last; a bare final flag is written only when the request asked for
   * it (triton_enable_empty_final_response).
   */
  private startDecoupled(m: ModelInferRequest): void {
    const cancel = new Cancellation();
    const trace = sampleCall(this.tracer, m.modelName, this.call.metadata, 'ModelStreamInfer', m);
    trace?.stamp('GRPC_WAITREAD_START');
    let request: InferRequest;
    try {
      if (this.headerError !== undefined) throw this.headerError;
      request = decodeInferRequest(m, cancel, this.headers, trace);
    } catch (e) {
      const slot = new StreamSlot(this, m);
      slot.trace = trace;
      this.slots.push(slot);
      slot.failed(e);
      return;
    }
    trace?.stamp('GRPC_WAITREAD_END');
    this.open.add(cancel);
    void this.pump(m, streamResponses(this.server, request), cancel, wantsEmptyFinalResponse(m), trace);
  }

  private async pump(
    m: ModelInferRequest,
    responses: AsyncIterable<StreamResponse>,
    cancel: Cancellation,
    emptyFinal: boolean,
    trace: Trace | undefined,
  ): Promise<void> {
    try {
      for await (const item of responses) {
        if (this.closed) break;
        // A bare final flag is written only when the client asked for it.
        const writes = trace !== undefined && (item.error !== undefined || item.response !== undefined || emptyFinal);
        if (writes) trace.stamp('GRPC_SEND_START');
        if (item.error !== undefined) {
          if (this.strictErrors) {
            this.closed = true;
            this.close();
            this.call.emit('error', toServiceError(item.error));
            return;
          }
          this.call.write(errorResponse(m, item.error, item.final));
        } else if (item.response !== undefined) {
          let bytes: Uint8Array;
          try {
            bytes = encodeInferResponse(item.response, true, item.final);
          } catch (e) {
            bytes = errorResponse(m, asNereidError(e), item.final);
          }
          this.call.write(bytes);
          if (trace !== undefined) logSent(trace, 'OK', bytes.byteLength);
        } else if (emptyFinal) {
          this.call.write(
            encodeInferResponse(
              { modelName: m.modelName, modelVersion: m.modelVersion, id: m.id, outputs: [] },
              true,
              true,
            ),
          );
        }
        if (writes) trace.stamp('GRPC_SEND_END');
      }
    } finally {
      trace?.end();
      this.open.delete(cancel);
      this.flush();
    }
  }

  /** Writes every settled response at the head of the queue. */
  flush(): void {
    if (this.closed) return;
    const slots = this.slots;
    while (slots.length > 0 && slots[0]!.settled) {
      const slot = slots.shift()!;
      const trace = slot.trace;
      trace?.stamp('GRPC_SEND_START');
      if (slot.error === undefined) {
        this.call.write(slot.bytes!);
        if (trace !== undefined) {
          logSent(trace, 'OK', slot.bytes!.byteLength);
          sent(trace);
        }
        continue;
      }
      if (this.strictErrors && AFTER_CORE.has(slot.error.code)) {
        this.closed = true;
        this.abort.abort();
        this.call.emit('error', toServiceError(slot.error));
        if (trace !== undefined) sent(trace);
        this.close();
        return;
      }
      this.call.write(errorResponse(slot.msg, slot.error));
      if (trace !== undefined) {
        logSent(trace, slot.error.code, 0);
        sent(trace);
      }
    }
    if (this.inputEnded && slots.length === 0 && this.open.size === 0) {
      this.closed = true;
      this.call.end();
    }
  }
}

/** A gRPC status code's name (the request log's status for gRPC). */
export function grpcStatusName(code: number | undefined): string {
  return code === undefined ? 'UNKNOWN' : (grpcStatus[code] ?? String(code));
}

/** A traced response went out: the trace is complete. */
function sent(trace: Trace): void {
  trace.stamp('GRPC_SEND_END');
  trace.end();
}

/**
 * The stream message for a failed request: the error text, and the
 * request id so the client can tell which request failed. Failures the
 * core reported after running the request also name the model and carry
 * `triton_final_response`, as Triton's do.
 */
function errorResponse(msg: ModelInferRequest | undefined, err: NereidError, decoupledFinal?: boolean): Uint8Array {
  const afterCore = (decoupledFinal !== undefined || AFTER_CORE.has(err.code)) && msg !== undefined;
  return toBinary(
    ModelStreamInferResponseSchema,
    create(ModelStreamInferResponseSchema, {
      errorMessage: err.message,
      inferResponse: afterCore
        ? {
            id: msg.id,
            modelName: msg.modelName,
            modelVersion: msg.modelVersion,
            parameters: {
              triton_final_response: { parameterChoice: { case: 'boolParam', value: decoupledFinal ?? true } },
            },
          }
        : { id: msg?.id ?? '' },
    }),
  );
}

export function modelStreamInferHandler(server: ServerApi, logger: Logger, headerPattern?: RegExp, tracer?: Tracer) {
  return (call: ServerDuplexStream<ModelInferRequest | MalformedMessage, Uint8Array>): void => {
    batchWrites(call);
    new StreamInferSession(server, call, logger, headerPattern, tracer);
  };
}
