/**
 * Options of the gRPC frontend, one field per `tritonserver --grpc-*` flag,
 * and their translation into @grpc/grpc-js channel options.
 */
import type { ChannelOptions } from '@grpc/grpc-js';
import type { AccessControl } from '../../auth/index.js';
import type { Logger } from '../../logger.js';
import type { LogSettingsStore, TraceSettingsStore } from './settings.js';
import type { Tracer } from '../../trace/index.js';

/** `--grpc-infer-response-compression-level`. */
export type GrpcCompressionLevel = 'none' | 'low' | 'medium' | 'high';

/**
 * Every field is optional; an omitted field takes Triton's default (see
 * GRPC_DEFAULTS). Field ↔ flag:
 *
 * | field | flag | default |
 * | --- | --- | --- |
 * | port | --grpc-port | 8001 (0: any free port) |
 * | address | --grpc-address | 0.0.0.0 (IPv6 literals with or without brackets) |
 * | compressionLevel | --grpc-infer-response-compression-level | none |
 * | keepaliveTimeMs | --grpc-keepalive-time | 7200000 |
 * | keepaliveTimeoutMs | --grpc-keepalive-timeout | 20000 |
 * | keepalivePermitWithoutCalls | --grpc-keepalive-permit-without-calls | false |
 * | http2MaxPingsWithoutData | --grpc-http2-max-pings-without-data | 2 |
 * | http2MinRecvPingIntervalWithoutDataMs | --grpc-http2-min-recv-ping-interval-without-data | 300000 |
 * | http2MaxPingStrikes | --grpc-http2-max-ping-strikes | 2 |
 * | maxConnectionAgeMs | --grpc-max-connection-age | unset (unlimited) |
 * | maxConnectionAgeGraceMs | --grpc-max-connection-age-grace | unset (unlimited) |
 * | inferAllocationPoolSize | --grpc-infer-allocation-pool-size | 8 (accepted, has no effect) |
 * | headerForwardPattern | --grpc-header-forward-pattern | unset |
 * | restrictedProtocols | --grpc-restricted-protocol (repeatable) | none |
 * | ssl.serverCert / serverKey / rootCert | --grpc-server-cert / --grpc-server-key / --grpc-root-cert | — |
 * | ssl (present) / ssl.mutual | --grpc-use-ssl / --grpc-use-ssl-mutual | off |
 *
 * `--allow-grpc=false` means: do not construct a GrpcFrontend at all.
 */
export interface GrpcFrontendOptions {
  port?: number;
  address?: string;
  /**
   * Response compression of ModelInfer / ModelStreamInfer: low → gzip,
   * medium and high → deflate. Any case; start() rejects other values.
   */
  compressionLevel?: GrpcCompressionLevel | (string & {});
  keepaliveTimeMs?: number;
  keepaliveTimeoutMs?: number;
  keepalivePermitWithoutCalls?: boolean;
  http2MaxPingsWithoutData?: number;
  http2MinRecvPingIntervalWithoutDataMs?: number;
  http2MaxPingStrikes?: number;
  maxConnectionAgeMs?: number;
  maxConnectionAgeGraceMs?: number;
  /** Triton's pool of pre-allocated infer handler states; meaningless here, logged and ignored. */
  inferAllocationPoolSize?: number;
  /**
   * Metadata whose key matches this regex becomes a string request
   * parameter of ModelInfer/ModelStreamInfer. Case-insensitive unless it
   * starts with `(?-i)`.
   */
  headerForwardPattern?: string;
  /**
   * The raw `--grpc-restricted-protocol` values, `<protocol>,...:<key>=<value>`;
   * start() rejects malformed ones. A restricted RPC then needs metadata
   * `triton-grpc-protocol-<key>: <value>`.
   */
  restrictedProtocols?: readonly string[];
  /** `--auth-keys`: calls need a key in the metadata `authorization` whose scopes open the RPC (and model). */
  access?: AccessControl;
  /** TLS: PEM file paths; `mutual` requires and verifies client certificates against rootCert. */
  ssl?: GrpcSslOptions;
  /** Backs the TraceSetting RPC; omitted: the RPC answers "the server does not support trace". */
  traceSettings?: TraceSettingsStore;
  /** Samples and records traces of ModelInfer/ModelStreamInfer requests; its settings answer TraceSetting. */
  tracer?: Tracer;
  /** Backs the LogSettings RPC; omitted: the RPC answers "the server does not support dynamic logging". */
  logSettings?: LogSettingsStore;
  /** Milliseconds stop() waits for open calls and streams before cutting them. Default 2000. */
  shutdownGraceMs?: number;
  logger?: Logger;
  /**
   * `--frontend-threads`: threads that each serve this port (default `NEREID_FRONTEND_THREADS`, else 1). Above 1
   * this frontend listens only for what they forward.
   */
  threads?: number;
  /** Whether this Node can share a port between threads (injectable for tests). */
  canReusePort?: () => boolean;
}

export interface GrpcSslOptions {
  serverCert: string;
  serverKey: string;
  rootCert?: string;
  mutual?: boolean;
}

/** Triton's defaults for the gRPC flags (src/grpc/grpc_server.h, command_line_parser). */
export const GRPC_DEFAULTS = {
  port: 8001,
  address: '0.0.0.0',
  compressionLevel: 'none' as GrpcCompressionLevel,
  keepaliveTimeMs: 7_200_000,
  keepaliveTimeoutMs: 20_000,
  keepalivePermitWithoutCalls: false,
  http2MaxPingsWithoutData: 2,
  http2MinRecvPingIntervalWithoutDataMs: 300_000,
  http2MaxPingStrikes: 2,
  inferAllocationPoolSize: 8,
  shutdownGraceMs: 2000,
} as const;

/** Triton caps messages at INT32_MAX in both directions. */
export const MAX_MESSAGE_BYTES = 2_147_483_647;

const COMPRESSION_LEVELS: readonly GrpcCompressionLevel[] = ['none', 'low', 'medium', 'high'];

/** Parses a `--grpc-infer-response-compression-level` value (case-insensitive); undefined if invalid. */
export function parseCompressionLevel(value: string): GrpcCompressionLevel | undefined {
  const v = value.toLowerCase() as GrpcCompressionLevel;
  return COMPRESSION_LEVELS.includes(v) ? v : undefined;
}

/**
 * The grpc-js server options for these settings. grpc-js enforces
 * keepalive time/timeout and connection age; the ping-policing settings
 * are passed under their gRPC core names, which grpc-js accepts but does
 * not act on (it never sends GOAWAY for too many pings).
 */
export function channelOptionsFor(o: GrpcFrontendOptions): ChannelOptions {
  const opts: ChannelOptions = {
    'grpc.max_receive_message_length': MAX_MESSAGE_BYTES,
    'grpc.max_send_message_length': MAX_MESSAGE_BYTES,
    // No channelz service is served, so skip its per-call bookkeeping.
    'grpc.enable_channelz': 0,
    'grpc.keepalive_time_ms': o.keepaliveTimeMs ?? GRPC_DEFAULTS.keepaliveTimeMs,
    'grpc.keepalive_timeout_ms': o.keepaliveTimeoutMs ?? GRPC_DEFAULTS.keepaliveTimeoutMs,
    'grpc.keepalive_permit_without_calls':
      (o.keepalivePermitWithoutCalls ?? GRPC_DEFAULTS.keepalivePermitWithoutCalls) ? 1 : 0,
    'grpc.http2.max_pings_without_data': o.http2MaxPingsWithoutData ?? GRPC_DEFAULTS.http2MaxPingsWithoutData,
    'grpc.http2.min_ping_interval_without_data_ms':
      o.http2MinRecvPingIntervalWithoutDataMs ?? GRPC_DEFAULTS.http2MinRecvPingIntervalWithoutDataMs,
    'grpc.http2.max_ping_strikes': o.http2MaxPingStrikes ?? GRPC_DEFAULTS.http2MaxPingStrikes,
  };
  if (o.maxConnectionAgeMs !== undefined) opts['grpc.max_connection_age_ms'] = o.maxConnectionAgeMs;
  if (o.maxConnectionAgeGraceMs !== undefined) opts['grpc.max_connection_age_grace_ms'] = o.maxConnectionAgeGraceMs;
  return opts;
}

/** "host:port" as grpc-js binds it: gRPC's ipv4:/ipv6: prefixes dropped, bare IPv6 literals bracketed. */
export function bindAddress(address: string, port: number): string {
  const bare = address.replace(/^ipv[46]:/, '');
  const host = bare.includes(':') && !bare.startsWith('[') ? `[${bare}]` : bare;
  return `${host}:${port}`;
}
