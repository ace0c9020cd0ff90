/**
 * A frontend thread's gRPC ModelInfer: the hot path, served here from the message to the answer (read, decode,
 * validate, refuse a full queue, encode) with the same code as the main thread's frontend; only the request crosses
 * to the main thread. A call this path does not cover goes to the main thread whole, as its bytes.
 */
import type { sendUnaryData, ServerUnaryCall } from '@grpc/grpc-js';
import { type PickedCall, TRACE_PICK } from './grpc-forward.js';
import { Cancellation } from '../../types/cancellation.js';
import type { ModelInferRequest } from '../../gen/grpc_service_pb.js';
import { inferenceServiceDefinition } from '../grpc/index.js';
import { decodeInfer } from '../grpc/infer-decode.js';
import { grpcStatusName, UnaryInferCall } from '../grpc/infer.js';
import { forwardedHeaders } from '../grpc/restrictions.js';
import { MalformedMessage } from '../grpc/service.js';
import { toServiceError } from '../grpc/status.js';
import { compileHeaderForwardPattern } from '../header-forward.js';
import { type RemoteServer, ThreadTrace } from './remote.js';
import { TracingFlag } from '../threads/wire.js';
import type { InferResponse } from '../../types/api.js';
import type { ThreadAccess } from './access.js';
import { authorizationOf, peerAddress } from '../grpc/auth.js';

type Call = ServerUnaryCall<Buffer, Buffer>;
const MODEL_INFER_PATH = inferenceServiceDefinition.ModelInfer!.path;
type Callback = sendUnaryData<Buffer>;

const readRequest = inferenceServiceDefinition.ModelInfer!.requestDeserialize as (
  bytes: Buffer,
) => ModelInferRequest | MalformedMessage;

export interface GrpcInferOptions {
  /** `--grpc-header-forward-pattern`. */
  readonly headerForwardPattern: string | undefined;
  /** Every call to the main thread (restricted protocols: checked there). */
  readonly forwardAll: boolean;
  /** `--auth-keys`: the thread's copy of the keys. */
  readonly access?: ThreadAccess | undefined;
}

export class GrpcInferThread {
  private readonly headerPattern: RegExp | undefined;

  constructor(
    private readonly remote: RemoteServer,
    /** Hands a call to the main thread as it came. */
    private readonly forward: (call: Call, callback: Callback) => void,
    private readonly options: GrpcInferOptions,
  ) {
    const pattern = options.headerForwardPattern;
    this.headerPattern = pattern === undefined || pattern === '' ? undefined : compileHeaderForwardPattern(pattern);
  }

  readonly handle = (call: Call, callback: Callback): void => {
    if (this.options.forwardAll) return this.forward(call, callback);
    const rate = this.remote.traceRate;
    if (rate !== 0) {
      // Every N-th call is picked here; only those carry what tracing needs (docs/tracing.md, "Frontend threads").
      const picked = this.remote.pickTrace(rate);
      (call as PickedCall)[TRACE_PICK] = picked ? '1' : '0';
      if (!this.serve(call, callback, picked ? TracingFlag.On : 0, picked)) this.forward(call, callback);
      return;
    }
    if (!this.serve(call, callback, this.remote.traceFlags, undefined)) this.forward(call, callback);
  };

  /** Serves the call here; false when the main thread must (malformed, unknown model, decoupled, cached, shm). */
  private serve(call: Call, callback: Callback, tracing: number, pick: boolean | undefined): boolean {
    // The message in a buffer of its own, which moves to the main thread with the request (tensors are views).
    const owned = new ArrayBuffer(call.request.byteLength);
    const bytes = Buffer.from(owned);
    bytes.set(call.request);
    const msg = readRequest(bytes);
    if (msg instanceof MalformedMessage) return false;
    // Before the model is looked up: a model outside the key's scopes is refused by the main thread, never asked about.
    const a = this.options.access;
    /** The client's address when the call carries a key: the main thread checks the failure limit once more. */
    let keyedAddress: string | undefined;
    if (a !== undefined) {
      // The peer string stands for the connection: a call repeating its last key is not hashed again.
      const peer = call.getPeer();
      const address = peerAddress(peer);
      const authorization = authorizationOf(call.metadata);
      if (!a.admits(authorization, address, 'inference', msg.modelName, peer)) return false;
      if (authorization !== undefined && authorization !== '') keyedAddress = address;
    }
    const version = msg.modelVersion === '' ? undefined : msg.modelVersion;
    const config = this.remote.modelConfig(msg.modelName, version);
    if (config === undefined || config.modelTransactionPolicy?.decoupled === true) return false;
    if (config.responseCache?.enable === true) return false;
    const refused = this.remote.admissionError(msg.modelName, version);
    if (refused !== undefined) {
      callback(toServiceError(refused), null);
      return true;
    }
    const abort = new Cancellation();
    let trace: ThreadTrace | undefined;
    if (tracing !== 0) {
      const context = (tracing & TracingFlag.Context) !== 0;
      const parent = context ? call.metadata.get('traceparent')[0] : undefined;
      const state = parent === undefined ? undefined : call.metadata.get('tracestate')[0];
      trace = new ThreadTrace(
        pick,
        this.remote.now(),
        typeof parent === 'string' ? parent : undefined,
        typeof state === 'string' ? state : undefined,
      );
      if ((tracing & TracingFlag.Log) !== 0) {
        // The tensor bytes received, as the main thread's frontend counts them.
        let bytesIn = 0;
        for (const raw of msg.rawInputContents) bytesIn += raw.byteLength;
        trace.log = { method: 'ModelInfer', path: MODEL_INFER_PATH, bytesIn };
      }
    }
    let decoded;
    try {
      const pattern = this.headerPattern;
      decoded = decodeInfer(msg, abort, pattern === undefined ? undefined : forwardedHeaders(call.metadata, pattern));
    } catch (e) {
      callback(toServiceError(e), null);
      // Traced, the main thread's frontend would end this trace with its first stamp alone: so does it for this one.
      if (trace !== undefined) this.remote.sent(trace, msg.modelName, NaN, NaN);
      return true;
    }
    // Client shared memory is registered with the main thread, which reads and writes it.
    if (decoded.shm !== undefined) return false;
    let pending: UnaryInferCall;
    if (trace === undefined) pending = new UnaryInferCall(callback as sendUnaryData<Uint8Array>, abort, undefined);
    else {
      trace.recvEnd = this.remote.now();
      pending = new TracedCall(callback as sendUnaryData<Uint8Array>, abort, this.remote, trace, msg.modelName);
    }
    call.on('cancelled', pending.cancelled.bind(pending));
    const r = decoded.request;
    this.remote
      .infer(
        {
          model: r.model,
          // '' for the latest, as the main thread's gRPC frontend passes it.
          version: String(r.version ?? ''),
          id: r.id ?? '',
          inputs: r.inputs,
          outputs: r.outputs,
          parameters: r.parameters,
          signal: abort,
          keyedAddress,
          trace,
        },
        owned,
      )
      .then(pending.done.bind(pending), pending.failed.bind(pending));
    return true;
  }
}

/** A call the main thread may trace: the send stamps around its answer, sent there once it is answered. */
class TracedCall extends UnaryInferCall {
  constructor(
    callback: sendUnaryData<Uint8Array>,
    abort: Cancellation,
    private readonly remote: RemoteServer,
    private readonly threadTrace: ThreadTrace,
    private readonly model: string,
  ) {
    super(threadTrace.log === undefined ? callback : loggedCallback(callback, threadTrace), abort, undefined);
  }

  override done(res: InferResponse): void {
    const start = this.remote.now();
    super.done(res);
    this.remote.sent(this.threadTrace, this.model, start, this.remote.now());
  }

  override failed(err: unknown): void {
    const start = this.remote.now();
    super.failed(err);
    const t = this.threadTrace;
    if (t.log !== undefined) t.status = grpcStatusName(toServiceError(err).code);
    this.remote.sent(t, this.model, start, this.remote.now());
  }
}

/** The request log: an answer's bytes (the main thread's frontend logs those of answers, not of errors). */
function loggedCallback(callback: sendUnaryData<Uint8Array>, t: ThreadTrace): sendUnaryData<Uint8Array> {
  return (err, value) => {
    if (err === null && value) {
      t.status = 'OK';
      t.bytesOut += value.byteLength;
    }
    callback(err, value);
  };
}
