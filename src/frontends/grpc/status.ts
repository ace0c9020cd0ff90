/** Turning anything thrown by the core into the gRPC status Triton would send. */
import { Metadata, type ServiceError } from '@grpc/grpc-js';
import { asNereidError } from '../../errors.js';

/** A grpc-js error object whose code follows Triton's error-class mapping. */
export function toServiceError(err: unknown): Partial<ServiceError> {
  const e = asNereidError(err);
  const metadata = new Metadata();
  // As HTTP's Retry-After: when to try again (a model loading on demand).
  if (e.retryAfterSecs !== undefined) metadata.set('retry-after', String(e.retryAfterSecs));
  return { code: e.grpcStatus, details: e.message, metadata };
}
