/**
 * Reads a Triton trace file the way Triton's qa/common/trace_summary.py
 * reads one (same grouping and the same checks, our own code): entries are
 * merged by id, a trace without a parent must carry the frontend's first
 * timestamp, a child counts when its parent does, every span it measures
 * must have both ends with end >= start. Throws where the script would.
 */
export interface TraceFileEntry {
  id?: number;
  model_name?: string;
  model_version?: number;
  request_id?: string;
  parent_id?: number;
  timestamps?: Array<{ name: string; ns: number }>;
  activity?: string;
  tensor?: { name: string; data: string; shape: string; dtype: string };
}

export interface MergedTrace {
  id: number;
  model_name?: string;
  model_version?: number;
  request_id?: string;
  parent_id?: number;
  timestamps: Map<string, number>;
  /** Names in file order (a name may repeat: decoupled responses). */
  order: string[];
  tensors: Array<{ activity: string; tensor: NonNullable<TraceFileEntry['tensor']> }>;
}

export type Frontend = 'http' | 'grpc';

const FILTER: Record<Frontend, string> = { http: 'HTTP_RECV_START', grpc: 'GRPC_WAITREAD_START' };

function span(ts: Map<string, number>, start: string, end: string): number {
  const a = ts.get(start);
  const b = ts.get(end);
  if (a === undefined || b === undefined) throw new Error(`timestamps missing "${a === undefined ? start : end}"`);
  if (b < a) throw new Error(`end timestamp "${end}" < start timestamp "${start}"`);
  return b - a;
}

/** Merges the entries of each id (ids of the given frontend and their descendants only, as the script filters them). */
export function mergeTraces(entries: readonly TraceFileEntry[], frontend?: Frontend): Map<number, MergedTrace> {
  const sorted = [...entries].sort((a, b) => (a.id ?? -1) - (b.id ?? -1));
  const keep = new Set<number>();
  for (const e of sorted) {
    if (e.id === undefined) continue;
    if (e.parent_id === undefined) {
      if (frontend === undefined) keep.add(e.id);
      else if (e.timestamps?.some((t) => t.name.includes(FILTER[frontend]))) keep.add(e.id);
    } else if (keep.has(e.parent_id)) {
      keep.add(e.id);
    }
  }
  const out = new Map<number, MergedTrace>();
  for (const e of sorted) {
    if (e.id === undefined || !keep.has(e.id)) continue;
    let m = out.get(e.id);
    if (m === undefined) {
      m = { id: e.id, timestamps: new Map(), order: [], tensors: [] };
      out.set(e.id, m);
    }
    if (e.model_name !== undefined) m.model_name = e.model_name;
    if (e.model_version !== undefined) m.model_version = e.model_version;
    if (e.request_id !== undefined) m.request_id = e.request_id;
    if (e.parent_id !== undefined) m.parent_id = e.parent_id;
    for (const t of e.timestamps ?? []) {
      m.timestamps.set(t.name, t.ns);
      m.order.push(t.name);
    }
    if (e.activity !== undefined && e.tensor !== undefined) m.tensors.push({ activity: e.activity, tensor: e.tensor });
  }
  return out;
}

export interface ModelSummary {
  count: number;
  /** Span name -> total ns, as the script sums them. */
  spans: Map<string, number>;
}

/** The script's summary: per (model, version), the spans it adds up. Throws on a missing or reversed timestamp. */
export function summarize(traces: Map<number, MergedTrace>, frontend: Frontend): Map<string, ModelSummary> {
  const out = new Map<string, ModelSummary>();
  const add = (s: ModelSummary, name: string, ns: number) => s.spans.set(name, (s.spans.get(name) ?? 0) + ns);
  for (const t of traces.values()) {
    const ts = t.timestamps;
    if (!ts.has('REQUEST_START') || !ts.has('REQUEST_END')) continue;
    const key = `${t.model_name} (${t.model_version})`;
    let s = out.get(key);
    if (s === undefined) {
      s = { count: 0, spans: new Map() };
      out.set(key, s);
    }
    s.count += 1;
    if (frontend === 'http' && ts.has('HTTP_RECV_START') && ts.has('HTTP_SEND_END')) {
      add(s, 'HTTP_INFER', span(ts, 'HTTP_RECV_START', 'HTTP_SEND_END'));
      add(s, 'HTTP_RECV', span(ts, 'HTTP_RECV_START', 'HTTP_RECV_END'));
      add(s, 'HTTP_SEND', span(ts, 'HTTP_SEND_START', 'HTTP_SEND_END'));
    }
    if (frontend === 'grpc' && ts.has('GRPC_WAITREAD_END') && ts.has('GRPC_SEND_END')) {
      add(s, 'GRPC_INFER', span(ts, 'GRPC_WAITREAD_END', 'GRPC_SEND_END'));
      add(s, 'GRPC_SEND', span(ts, 'GRPC_SEND_START', 'GRPC_SEND_END'));
    }
    add(s, 'REQUEST', span(ts, 'REQUEST_START', 'REQUEST_END'));
    if (ts.has('QUEUE_START') && ts.has('COMPUTE_START')) add(s, 'QUEUE', span(ts, 'QUEUE_START', 'COMPUTE_START'));
    if (ts.has('COMPUTE_START') && ts.has('COMPUTE_END')) add(s, 'COMPUTE', span(ts, 'COMPUTE_START', 'COMPUTE_END'));
    if (ts.has('COMPUTE_INPUT_END') && ts.has('COMPUTE_OUTPUT_START')) {
      add(s, 'COMPUTE_INPUT', span(ts, 'COMPUTE_START', 'COMPUTE_INPUT_END'));
      add(s, 'COMPUTE_INFER', span(ts, 'COMPUTE_INPUT_END', 'COMPUTE_OUTPUT_START'));
      add(s, 'COMPUTE_OUTPUT', span(ts, 'COMPUTE_OUTPUT_START', 'COMPUTE_END'));
    }
  }
  return out;
}
