/** The server credentials of `--grpc-use-ssl` and its certificate flags (insecure without them). */
import { readFileSync } from 'node:fs';
import { ServerCredentials } from '@grpc/grpc-js';
import { Errors } from '../../errors.js';
import type { GrpcSslOptions } from './options.js';

export function credentialsFor(ssl: GrpcSslOptions | undefined): ServerCredentials {
  if (!ssl) return ServerCredentials.createInsecure();
  const read = (file: string, flag: string): Buffer => {
    try {
      return readFileSync(file);
    } catch (e) {
      throw Errors.config(`${flag}: cannot read '${file}': ${(e as Error).message}`);
    }
  };
  const root = ssl.rootCert ? read(ssl.rootCert, '--grpc-root-cert') : null;
  if (ssl.mutual && !root) throw Errors.config('--grpc-use-ssl-mutual requires --grpc-root-cert');
  return ServerCredentials.createSsl(
    root,
    [{ cert_chain: read(ssl.serverCert, '--grpc-server-cert'), private_key: read(ssl.serverKey, '--grpc-server-key') }],
    ssl.mutual === true,
  );
}
