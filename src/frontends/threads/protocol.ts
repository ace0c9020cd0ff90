/** What the main thread and a frontend thread say to each other (docs/architecture.md, "Frontends on every core"). */
import type { GrpcFrontendOptions } from '../grpc/options.js';

/** The gRPC options a frontend thread applies itself (the rest stay with the main thread's frontend). */
export type GrpcThreadOptions = Omit<
  GrpcFrontendOptions,
  'access' | 'tracer' | 'traceSettings' | 'logSettings' | 'logger' | 'port' | 'address'
>;

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
}

export interface HttpThreadOptions {
  readonly maxInputSize: number;
  readonly restrictedApis: readonly string[];
  readonly headerForwardPattern: string | undefined;
  /** With `--auth-keys` every request is forwarded: the keys, their failure limit and counters live on main. */
  readonly forwardAll: boolean;
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
