/**
 * Timestamp names as small integers, the form in which both trace records
 * (file-record.ts, otel-record.ts) carry them to their threads.
 */
import type { TraceStampName } from '../types/api.js';

export const STAMP_NAMES: readonly TraceStampName[] = [
  'HTTP_RECV_START',
  'HTTP_RECV_END',
  'HTTP_SEND_START',
  'HTTP_SEND_END',
  'GRPC_WAITREAD_START',
  'GRPC_WAITREAD_END',
  'GRPC_SEND_START',
  'GRPC_SEND_END',
  'REQUEST_START',
  'QUEUE_START',
  'COMPUTE_START',
  'COMPUTE_INPUT_END',
  'COMPUTE_OUTPUT_START',
  'COMPUTE_END',
  'REQUEST_END',
];
export const STAMP_CODES = new Map<TraceStampName, number>(STAMP_NAMES.map((n, i) => [n, i]));
