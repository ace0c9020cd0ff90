/**
 * The seam between the load drivers and a wire protocol: a reusable call
 * object per in-flight request (fixed fields, no per-request closures) and a
 * transport that sends one prepared request body with it.
 */
import type { StatsSnapshot } from './server-stats.js';

export interface CallSink {
  /** The request finished with a success response; `endNs` is when its last byte arrived. */
  callDone(call: InferCall, endNs: number): void;
  callFailed(call: InferCall, error: Error): void;
}

export class InferCall {
  /** Which concurrency slot owns this call (-1 for request-rate calls). */
  readonly slot: number;
  readonly sink: CallSink;
  bodyIndex = 0;
  startNs = 0;
  /** When the request was fully written. */
  sentNs = 0;
  /** When the first response byte arrived. */
  responseStartNs = 0;
  delayed = false;

  constructor(sink: CallSink, slot: number) {
    this.sink = sink;
    this.slot = slot;
  }
}

export interface ServerInfo {
  extensions: string[];
}

export interface InferTransport {
  /** How many prepared request bodies there are (steps of input data). */
  readonly bodyCount: number;
  /** A reusable call object for one concurrency slot (or one request-rate in-flight request). */
  createCall(sink: CallSink, slot: number): InferCall;
  /** Sends prepared body `call.bodyIndex`; the transport reports back on call.sink. */
  send(call: InferCall): void;
  close(): Promise<void>;
}

/** The control calls a protocol client offers (server metadata, model metadata/config, statistics). */
export interface ControlClient {
  serverMetadata(): Promise<ServerInfo>;
  modelMetadata(name: string, version: string): Promise<unknown>;
  /** The model configuration as Triton's JSON (proto field names). */
  modelConfig(name: string, version: string): Promise<unknown>;
  /** All models' statistics when `name` is omitted. */
  statistics(name?: string, version?: string): Promise<StatsSnapshot>;
  close(): Promise<void>;
}
