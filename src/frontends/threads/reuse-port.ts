/**
 * Whether this Node can listen with SO_REUSEPORT (`reusePort`, Node 22.12+ and 23.1+), which lets each frontend
 * thread own a listening socket on the same port. Without it the frontends stay on the main thread.
 */
import type { Logger } from '../../logger.js';

export function nodeHasReusePort(version: string = process.versions.node): boolean {
  const [major = 0, minor = 0] = version.split('.').map(Number);
  return major >= 24 || (major === 23 && minor >= 1) || (major === 22 && minor >= 12);
}

let warned = false;

/**
 * The number of frontend threads to run: `requested`, or 1 when `canReusePort` says no (logged once per process,
 * however many frontends ask).
 */
export function effectiveThreads(
  requested: number,
  logger: Logger,
  canReusePort: () => boolean = nodeHasReusePort,
): number {
  if (requested <= 1) return 1;
  if (canReusePort()) return requested;
  if (!warned) {
    warned = true;
    logger.warn(
      { requested, node: process.versions.node },
      `--frontend-threads=${requested} needs a Node.js with reusePort (22.12+ or 23.1+): ` +
        'serving HTTP and gRPC on one thread',
    );
  }
  return 1;
}

/** For tests: the next fallback is logged again. */
export function resetReusePortWarning(): void {
  warned = false;
}
