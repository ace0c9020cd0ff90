/**
 * The request log (`--log-requests`, beyond Triton): one line per inference
 * request, every `--log-requests-rate`-th one, in the server's log format,
 * with the protocol, method or RPC, path, model, version, status, bytes in
 * and out, queue, compute and total µs, and the trace id when traced. Its
 * timings are the request's trace timestamps, so a logged request is
 * recorded as a trace is (written nowhere unless tracing also took it).
 */
import type { Logger } from 'pino';
import type { TraceStampName } from '../types/api.js';
import type { Trace } from './trace.js';

/** What the frontend tells about a logged request. */
export class RequestLogEntry {
  protocol = '';
  method = '';
  path = '';
  status: number | string = 0;
  bytesIn = 0;
  bytesOut = 0;
}

export class RequestLog {
  private seen = 0;

  constructor(
    private readonly logger: Logger,
    private readonly rate: number,
  ) {}

  /** Whether this request is logged (every rate-th). */
  pick(): boolean {
    return ++this.seen % this.rate === 0;
  }

  /** Writes the line of a finished request. */
  write(root: Trace, entry: RequestLogEntry, traceId: string | number | undefined): void {
    const us = (from: TraceStampName, to: TraceStampName): number | undefined => {
      const a = root.stampOf(from);
      const b = root.stampOf(to);
      return a === undefined || b === undefined ? undefined : (b - a) / 1000;
    };
    const start = entry.protocol === 'grpc' ? 'GRPC_WAITREAD_START' : 'HTTP_RECV_START';
    const end = entry.protocol === 'grpc' ? 'GRPC_SEND_END' : 'HTTP_SEND_END';
    const lastAt = root.stampNames.lastIndexOf(end);
    const last = lastAt < 0 ? undefined : root.stampTimes[lastAt];
    const first = root.stampOf(start);
    const line: Record<string, unknown> = {
      protocol: entry.protocol,
      method: entry.method,
      path: entry.path,
      model: root.modelName || undefined,
      version: root.modelVersion || undefined,
      status: entry.status,
      bytes_in: entry.bytesIn,
      bytes_out: entry.bytesOut,
      queue_us: round(us('QUEUE_START', 'COMPUTE_START')),
      compute_us: round(us('COMPUTE_START', 'COMPUTE_END')),
      total_us: first === undefined || last === undefined ? undefined : round((last - first) / 1000),
    };
    if (traceId !== undefined) line.trace_id = traceId;
    this.logger.info(line, 'request');
  }
}

function round(v: number | undefined): number | undefined {
  return v === undefined ? undefined : Math.round(v);
}
