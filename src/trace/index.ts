/** Request tracing as Triton does it: trace files and OpenTelemetry (see docs/tracing.md). */
export { Tracer, type TracerOptions } from './tracer.js';
export {
  TraceSettings,
  ActiveSetting,
  LEVEL_OFF,
  LEVEL_TIMESTAMPS,
  LEVEL_TENSORS,
  type TraceMode,
  type TraceValues,
} from './settings.js';
export { Trace, TraceGroup } from './trace.js';
export { parseTraceparent, contextJson, type RemoteContext } from './traceparent.js';
export { formatG, tensorDataText } from './triton-format.js';
export type { OtelOptions } from './otel.js';
