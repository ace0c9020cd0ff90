/**
 * The nice value of tracing's own threads (the trace file's writer, the OTLP export thread): raised,
 * telemetry yields the CPU to serving under load, and spans are dropped when export falls behind. On Linux,
 * setpriority on the calling thread's id changes that thread only: os.setPriority(0, n) inside a worker lowers
 * the worker alone.
 * See docs/tracing.md ("The threads' priority").
 */
import { setPriority } from 'node:os';

/**
 * The defaults: the OTLP export thread at 10 (serving first when the CPU is short, for spans dropped then; the
 * gain in throughput was not steady, docs/tracing.md); the trace file thread as the server, since it cannot drop
 * and would hold the backlog.
 */
export const DEFAULT_EXPORT_THREAD_NICE = 10;
export const DEFAULT_FILE_THREAD_NICE = 0;
const VARIABLE = 'NEREID_TRACE_THREAD_NICE';

/** The nice value for a tracing thread: NEREID_TRACE_THREAD_NICE (0 to 19; 0 leaves it as it is), else `fallback`. */
export function traceThreadNice(fallback: number, env: NodeJS.ProcessEnv = process.env): number {
  const text = env[VARIABLE];
  if (text === undefined || text === '') return fallback;
  const n = Number(text);
  if (!/^\d+$/.test(text.trim()) || !Number.isInteger(n) || n < 0 || n > 19) {
    throw new Error(`${VARIABLE} must be an integer from 0 to 19, got '${text}'`);
  }
  return n;
}

/**
 * Lowers the calling thread's priority to `nice` (called inside the thread). Returns why it could not, or
 * undefined: a system that refuses (EACCES, EPERM, ENOSYS) leaves the thread as it was and tracing goes on.
 */
export function lowerThisThread(nice: number): string | undefined {
  if (nice === 0) return undefined;
  try {
    setPriority(0, nice);
    return undefined;
  } catch (err) {
    return err instanceof Error ? err.message : String(err);
  }
}
