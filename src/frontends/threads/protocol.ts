/** What the main thread and a frontend thread say to each other (docs/architecture.md, "Frontends on every core"). */
import type { MessagePort } from 'node:worker_threads';
import type { ReplicaInit } from '../../auth/index.js';

/** The gRPC options a frontend thread applies itself (GrpcFrontendOptions' fields; the rest stay on main). */
export interface GrpcThreadOptions {
  readonly compressionLevel?: string | undefined;
  readonly keepaliveTimeMs?: number | undefined;
  readonly keepaliveTimeoutMs?: number | undefined;
  readonly keepalivePermitWithoutCalls?: boolean | undefined;
  readonly http2MaxPingsWithoutData?: number | undefined;
  readonly http2MinRecvPingIntervalWithoutDataMs?: number | undefined;
  readonly http2MaxPingStrikes?: number | undefined;
  readonly maxConnectionAgeMs?: number | undefined;
  readonly maxConnectionAgeGraceMs?: number | undefined;
  readonly ssl?: { serverCert: string; serverKey: string; rootCert?: string; mutual?: boolean } | undefined;
  /** `--grpc-header-forward-pattern`, applied to the infer calls a thread serves itself. */
  readonly headerForwardPattern?: string | undefined;
  /** Every call goes to the main thread (restricted protocols are checked there). */
  readonly forwardAll?: boolean;
}

export interface FrontendThreadInit {
  readonly kind: 'http' | 'grpc';
  /** 0 for the first thread when the port is to be picked; the others get the port it picked. */
  readonly port: number;
  readonly address: string;
  /** The main thread's frontend, listening on this Unix socket for what a frontend thread forwards. */
  readonly upstream: string;
  readonly index: number;
  readonly http?: HttpThreadOptions;
  readonly grpc?: GrpcThreadOptions;
  /** The thread's line to the main thread's server (FrontendBridge). */
  readonly bridge?: BridgeEnds;
  /** With `--auth-keys`: the keys, for the thread to check its infer requests itself. */
  readonly auth?: AuthEnds;
}

/**
 * The keys as the main thread has them when the thread starts, and the port their updates (AccessUpdate: a
 * reload, an address reaching the failure limit) come on. The main thread bumps SharedSlot.AuthGeneration after
 * posting one, so the thread reads it before its next check, not after its next event-loop turn.
 */
export interface AuthEnds {
  readonly port: MessagePort;
  readonly init: ReplicaInit;
}

export interface BridgeEnds {
  readonly port: MessagePort;
  readonly sync: MessagePort;
  /** Raised by the main thread when it has answered on `sync`. */
  readonly signal: Int32Array;
  /** SharedSlot's slots. */
  readonly shared: Int32Array;
  /** The main thread's trace clock base (clock.ts BASE_HR): a thread's stamps are sent relative to it. */
  readonly clockBase: bigint;
}

export interface HttpThreadOptions {
  readonly maxInputSize: number;
  readonly restrictedApis: readonly string[];
  readonly headerForwardPattern: string | undefined;
}

/** Frontend thread → main thread. */
export type ThreadMessage =
  | { readonly t: 'listening'; readonly port: number }
  | { readonly t: 'failed'; readonly code: string | undefined; readonly message: string }
  | { readonly t: 'log'; readonly level: 'warn' | 'error' | 'debug'; readonly msg: string; readonly detail?: string }
  | { readonly t: 'stopped' };

/** Main thread → frontend thread. */
export type MainMessage = { readonly t: 'drain' } | { readonly t: 'stop'; readonly graceMs: number };

/** The header (HTTP) and metadata key (gRPC) that carry the client's address on a forwarded request. */
export const PEER_HEADER = 'x-nereid-frontend-peer';
/**
 * On an HTTP infer request or gRPC ModelInfer call a frontend thread forwards while it picks the requests to trace
 * (SharedSlot.TraceRate): '1' to trace it, '0' not to. Taken out of clients' requests by the threads.
 */
export const TRACE_PICK_HEADER = 'x-nereid-trace-pick';
