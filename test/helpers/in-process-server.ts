/** Starts the server inside the test's own process, on free loopback ports, as `nereid serve` would. */
import { buildServeConfig, startServing, type RunningServer } from '../../src/cli/serve.js';
import { type Logger, silentLogger } from '../../src/logger.js';
import { LOOPBACK_PORTS } from './serve-process.js';

/**
 * The flags every in-process test server starts with: the child process's free loopback ports, and no CPU or GPU
 * metrics (their sampling would only add noise). A test that wants no metrics at all adds `--allow-metrics=false`.
 */
export function inProcessFlags(repoDir: string, flags: readonly string[] = []): string[] {
  return [
    `--model-repository=${repoDir}`,
    ...LOOPBACK_PORTS,
    '--allow-cpu-metrics=false',
    '--allow-gpu-metrics=false',
    ...flags,
  ];
}

/** `startServing` with {@link inProcessFlags}; the caller's flags come last. Stop it with `shutdown()`. */
export function serveInProcess(
  repoDir: string,
  flags: readonly string[] = [],
  logger: Logger = silentLogger,
): Promise<RunningServer> {
  return startServing(buildServeConfig(inProcessFlags(repoDir, flags)), logger);
}
