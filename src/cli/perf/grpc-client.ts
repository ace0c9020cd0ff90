import type { PerfOptions } from './options.js';
import { PerfError } from './errors.js';

export function grpcBackend(_o: PerfOptions): never {
  throw new PerfError('failed to create client', 'gRPC is not implemented yet');
}
