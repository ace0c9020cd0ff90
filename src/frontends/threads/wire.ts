/**
 * Requests, answers and errors as they cross between a frontend thread and the main thread: tensors travel as
 * views over transferred ArrayBuffers (moved, not copied), errors as their code, class and message.
 */
import { NereidError, asNereidError, type TritonErrorClass } from '../../errors.js';
import type { ModelConfig } from '../../gen/model_config_pb.js';
import type { Tensor } from '../../tensor/tensor.js';
import type { InferResponse, ParameterValue, RequestedOutput } from '../../types/api.js';

export interface WireError {
  readonly code: string;
  readonly errorClass: TritonErrorClass;
  readonly message: string;
  readonly retryAfterSecs: number | undefined;
  /** Statuses outside Triton's error classes (a refused key: 429 / RESOURCE_EXHAUSTED); else the class's. */
  readonly httpStatus?: number;
  readonly grpcStatus?: number;
}

export function toWireError(err: unknown): WireError {
  const e = asNereidError(err);
  return { code: e.code, errorClass: e.errorClass, message: e.message, retryAfterSecs: e.retryAfterSecs };
}

export function fromWireError(w: WireError): NereidError {
  const e =
    w.httpStatus === undefined || w.grpcStatus === undefined
      ? new NereidError(w.code, w.errorClass, w.message)
      : new StatusError(w.code, w.errorClass, w.message, w.httpStatus, w.grpcStatus);
  e.retryAfterSecs = w.retryAfterSecs;
  return e;
}

/** An error answered with statuses of its own rather than its class's. */
class StatusError extends NereidError {
  constructor(
    code: string,
    errorClass: TritonErrorClass,
    message: string,
    private readonly http: number,
    private readonly grpc: number,
  ) {
    super(code, errorClass, message);
  }
  override get httpStatus(): number {
    return this.http;
  }
  override get grpcStatus(): number {
    return this.grpc;
  }
}

export interface WireTensor {
  readonly name: string;
  readonly datatype: Tensor['datatype'];
  readonly shape: readonly number[];
  readonly data: Uint8Array;
}

/** Frontend thread → main thread, on the bridge port. */
export type BridgeRequest =
  | {
      readonly t: 'infer';
      readonly id: number;
      readonly model: string;
      readonly version: string | undefined;
      readonly requestId: string;
      readonly inputs: readonly WireTensor[];
      readonly outputs: readonly RequestedOutput[] | undefined;
      readonly parameters: Readonly<Record<string, ParameterValue>> | undefined;
      /** The client's address when the request carried a key (`--auth-keys`): checked against the failure limit. */
      readonly keyedAddress?: string | undefined;
      /** While requests may be traced: what the main thread needs to decide and to trace (none otherwise). */
      readonly trace?: WireTrace | undefined;
    }
  | { readonly t: 'cancel'; readonly id: number }
  /**
   * A traced request's reply was written (its answer said `traced`): when the thread began sending it and when it
   * handed it to the socket (NaN: the client was gone), ns on the main thread's trace clock. Ends the trace.
   */
  | {
      readonly t: 'sent';
      readonly id: number;
      readonly start: number;
      readonly end: number;
      /** With WireTrace.log: the reply's status and bytes, when it was written. */
      readonly status?: number | string | undefined;
      readonly bytesOut?: number | undefined;
    }
  /**
   * A request with a WireTrace refused on the thread before it crossed (a body that does not decode): the main
   * thread samples it as if it had come and traces its frontend stamps alone, as its own frontend would.
   */
  | {
      readonly t: 'early';
      readonly model: string;
      readonly trace: WireTrace;
      readonly start: number;
      readonly end: number;
      readonly status?: number | string | undefined;
      readonly bytesOut?: number | undefined;
    }
  /** Requests refused for a full queue on the thread, counted per model and version over one event-loop turn. */
  | { readonly t: 'refused'; readonly model: string; readonly version: string | undefined; count: number }
  | { readonly t: 'batch'; readonly items: readonly BridgeRequest[] };

/**
 * A request a frontend thread serves while requests may be traced (docs/tracing.md, "Frontend threads"): the
 * times it began and finished reading it, as ns since the main thread's trace clock base (clock.ts BASE_HR), and
 * the client's W3C context (opentelemetry mode) or the thread's pick (TraceRate). The main thread samples it.
 */
export interface WireTrace {
  /** TraceRate: picked by the thread (only picked requests carry a WireTrace then). */
  readonly pick: boolean | undefined;
  readonly recvStart: number;
  readonly recvEnd: number;
  readonly traceparent: string | undefined;
  readonly tracestate: string | undefined;
  /** The request log is on (TracingFlag.Log): what its line says of the request. */
  readonly log?: WireLog | undefined;
}

/** What the request log's line says of a request a thread read (the frontend's part of RequestLogEntry). */
export interface WireLog {
  readonly method: string;
  readonly path: string;
  readonly bytesIn: number;
}

/** Main thread → frontend thread, on the bridge port. */
export type BridgeAnswer =
  /** `traced`: the request is traced; the thread says when it sent the reply ('sent'). */
  | { readonly t: 'answer'; readonly id: number; readonly response: WireResponse; readonly traced?: true }
  | { readonly t: 'failed'; readonly id: number; readonly error: WireError; readonly traced?: true }
  | { readonly t: 'full'; readonly key: string; readonly error: WireError }
  | { readonly t: 'open'; readonly key: string }
  | { readonly t: 'batch'; readonly items: readonly BridgeAnswer[] };

/**
 * Messages sent in one event-loop turn leave as one (a message costs its receiver a wake-up and a task, whatever
 * it carries): the requests one socket poll brought, the answers of one batch.
 */
export class Coalescer<M> {
  private items: M[] = [];
  private transfer: ArrayBuffer[] = [];
  private scheduled = false;

  /** `flushed`: called once the turn's messages have left (messages sent until then may still be changed). */
  constructor(
    private readonly port: { postMessage(message: unknown, transfer?: ArrayBuffer[]): void },
    private readonly wrap: (items: M[]) => M,
    private readonly flushed?: () => void,
  ) {}

  send(message: M, transfer?: readonly ArrayBuffer[]): void {
    this.items.push(message);
    if (transfer !== undefined) for (const b of transfer) this.transfer.push(b);
    if (!this.scheduled) {
      this.scheduled = true;
      setImmediate(this.flush);
    }
  }

  private readonly flush = (): void => {
    this.scheduled = false;
    const items = this.items;
    const transfer = this.transfer;
    this.items = [];
    this.transfer = [];
    if (items.length === 1) this.port.postMessage(items[0], transfer);
    else if (items.length > 1) this.port.postMessage(this.wrap(items), transfer);
    this.flushed?.();
  };
}

export interface WireResponse {
  readonly modelName: string;
  readonly modelVersion: string;
  readonly id: string;
  readonly parameters: InferResponse['parameters'];
  readonly outputs: readonly WireTensor[];
}

/** Frontend thread → main thread on the synchronous port, and the answer. */
export interface ConfigQuery {
  readonly model: string;
  readonly version: string | undefined;
}
export type ConfigAnswer = { readonly config: ModelConfig } | { readonly error: WireError };

/** Shared Int32 slots of one pool: what a frontend thread reads per request without asking. */
export const enum SharedSlot {
  /** Bumped by the main thread whenever a model version is loaded or unloaded: cached configurations are stale. */
  ConfigGeneration = 0,
  /**
   * TracingFlag bits: whether the tracer may sample (or log) requests now, and how the threads take part (HTTP infer
   * and gRPC ModelInfer; docs/tracing.md, "Frontend threads").
   */
  Tracing = 1,
  /** Bumped by the main thread after it posts a keys update (AuthEnds): a thread reads it before its next check. */
  AuthGeneration = 2,
  /**
   * N > 0 while every N-th request is traced and nothing else is (Tracer.threadRate): the threads then pick those
   * of HTTP infer and gRPC ModelInfer themselves, and only those carry a WireTrace (docs/tracing.md, "Frontend
   * threads").
   */
  TraceRate = 3,
  /** The infer requests the threads have counted for TraceRate, all threads of the pool together. */
  TraceSeen = 4,
  Count = 5,
}

/** SharedSlot.Tracing's bits. */
export const enum TracingFlag {
  /** Requests may be traced: the threads send each with a WireTrace (TraceRate: only the picked ones). */
  On = 1,
  /** The request log is on: the threads send what its line says of each request too (WireTrace.log). */
  Log = 2,
  /** opentelemetry mode: the threads read the client's traceparent and tracestate. */
  Context = 4,
}

export function admissionKey(model: string, version: string | undefined): string {
  return version === undefined || version === '' ? model : `${model}\u0000${version}`;
}

/**
 * Copies tensors whose bytes do not lie in `owned` into one fresh buffer, so that every tensor is a view over a
 * buffer that may be transferred; returns those buffers.
 */
export function transferableTensors(
  tensors: readonly Tensor[],
  owned: ArrayBuffer | undefined,
): { tensors: WireTensor[]; transfer: ArrayBuffer[] } {
  let extra = 0;
  for (const t of tensors) if (t.data.buffer !== owned) extra += t.data.byteLength;
  const out: WireTensor[] = [];
  const transfer: ArrayBuffer[] = owned === undefined ? [] : [owned];
  const pack = extra > 0 ? new Uint8Array(new ArrayBuffer(extra)) : undefined;
  if (pack !== undefined) transfer.push(pack.buffer as ArrayBuffer);
  let offset = 0;
  for (const t of tensors) {
    let data = t.data;
    if (data.buffer !== owned) {
      pack!.set(data, offset);
      data = pack!.subarray(offset, offset + data.byteLength);
      offset += data.byteLength;
    }
    out.push({ name: t.name, datatype: t.datatype, shape: t.shape, data });
  }
  return { tensors: out, transfer };
}
