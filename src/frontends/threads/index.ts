/** Frontends on every core: the HTTP and gRPC frontends' threads (docs/architecture.md, "Frontends on every core"). */
import { randomBytes } from 'node:crypto';
import { rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';

export { FrontendThreadPool, ListenFailure } from './pool.js';
export { FrontendBridge } from './bridge.js';
export { effectiveThreads, nodeHasReusePort, resetReusePortWarning } from './reuse-port.js';
export { PEER_HEADER, TRACE_PICK_HEADER, type GrpcThreadOptions } from './protocol.js';

/** Where `--frontend-threads` is not given: `NEREID_FRONTEND_THREADS`, else `fallback`. */
export function frontendThreadsFromEnv(fallback: number, env: NodeJS.ProcessEnv = process.env): number {
  const text = env['NEREID_FRONTEND_THREADS'];
  if (text === undefined || text === '') return fallback;
  const n = Number(text);
  return Number.isInteger(n) && n >= 1 ? n : fallback;
}

/** A fresh path for the main thread's frontend to listen on for what its threads forward. */
export function internalSocketPath(kind: string): string {
  return path.join(tmpdir(), `nereid-${process.pid}-${kind}-${randomBytes(6).toString('hex')}.sock`);
}

export function removeSocket(file: string | undefined): void {
  if (file !== undefined) rmSync(file, { force: true });
}
