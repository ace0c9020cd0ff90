/**
 * Response compression for the infer RPCs (`--grpc-infer-response-compression-level`).
 *
 * grpc-js decompresses requests but never compresses responses, so this
 * interceptor does it: it marks the response headers with `grpc-encoding`
 * and replaces the call's message framing with a compressed one. The
 * framing hook is grpc-js's internal `serializeMessage`; if a grpc-js
 * release drops it, responses go out uncompressed (still valid) and a
 * warning is logged once.
 *
 * Levels follow gRPC core's choice among the algorithms every mainstream
 * client accepts: low → gzip, medium and high → deflate.
 */
import { deflateSync, gzipSync } from 'node:zlib';
import { ServerInterceptingCall, type ServerInterceptor } from '@grpc/grpc-js';
import type { Logger } from '../../logger.js';
import type { GrpcCompressionLevel } from './options.js';

export type CompressionAlgorithm = 'gzip' | 'deflate';

export function algorithmForLevel(level: GrpcCompressionLevel): CompressionAlgorithm | undefined {
  switch (level) {
    case 'low':
      return 'gzip';
    case 'medium':
    case 'high':
      return 'deflate';
    default:
      return undefined;
  }
}

/** The part of grpc-js's innermost server call that frames messages. */
interface FramingCall {
  serializeMessage?: (value: unknown) => Buffer;
  handler?: { serialize?: (value: unknown) => Buffer };
}

function compressedFramer(call: FramingCall, algorithm: CompressionAlgorithm): (value: unknown) => Buffer {
  const serialize = call.handler!.serialize!;
  return (value: unknown): Buffer => {
    const body = serialize(value);
    const packed = algorithm === 'gzip' ? gzipSync(body) : deflateSync(body);
    const frame = Buffer.allocUnsafe(packed.byteLength + 5);
    frame.writeUInt8(1, 0); // compressed-flag
    frame.writeUInt32BE(packed.byteLength, 1);
    packed.copy(frame, 5);
    return frame;
  };
}

/** An interceptor compressing the responses of the methods at `paths`. */
export function responseCompressionInterceptor(
  algorithm: CompressionAlgorithm,
  paths: ReadonlySet<string>,
  logger: Logger,
): ServerInterceptor {
  let warned = false;
  return (method, call) => {
    if (!paths.has(method.path)) return new ServerInterceptingCall(call);
    const inner = call as unknown as FramingCall;
    if (typeof inner.serializeMessage !== 'function' || typeof inner.handler?.serialize !== 'function') {
      if (!warned) {
        warned = true;
        logger.warn(
          'gRPC response compression is unavailable with this @grpc/grpc-js version; responses are sent uncompressed',
        );
      }
      return new ServerInterceptingCall(call);
    }
    inner.serializeMessage = compressedFramer(inner, algorithm);
    return new ServerInterceptingCall(call, {
      sendMetadata(metadata, next) {
        metadata.set('grpc-encoding', algorithm);
        next(metadata);
      },
    });
  };
}
