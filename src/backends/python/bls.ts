/**
 * Business-logic scripting: a model's pb_utils.InferenceRequest(...).exec()
 * arrives here as a frame and runs on any model this server serves.
 */
import type { InferenceCaller, ParameterValue } from '../backend.js';
import type { InferRequest, InferResponse, RequestTrace, RequestedOutput } from '../../types/api.js';
import { NereidError } from '../../errors.js';
import { isDatatype } from '../../tensor/datatype.js';
import type { Tensor } from '../../tensor/tensor.js';
import type { Frame, FrameHeader, WireTensor } from './frame.js';
import { decodeWireTensors, encodeWireTensors } from './wire.js';

/**
 * Traces of the requests models are executing, by handle (the trace id the
 * worker is told): a BLS call naming one is traced as its child, as
 * Triton's python backend spawns a child trace from request.trace().
 */
const openTraces = new Map<number, RequestTrace>();

export function openTrace(trace: RequestTrace): void {
  openTraces.set(trace.id, trace);
}

export function closeTrace(trace: RequestTrace): void {
  openTraces.delete(trace.id);
}

const FLAG_SEQUENCE_START = 1;
const FLAG_SEQUENCE_END = 2;

function blsParameters(h: FrameHeader): Record<string, ParameterValue> {
  const params: Record<string, ParameterValue> = {};
  if (typeof h.p === 'string' && h.p !== '' && h.p !== '{}') {
    const parsed = JSON.parse(h.p) as Record<string, unknown>;
    for (const [k, v] of Object.entries(parsed)) {
      if (typeof v === 'string' || typeof v === 'number' || typeof v === 'boolean') params[k] = v;
    }
  }
  const corr = h.c;
  if ((typeof corr === 'number' && corr !== 0) || (typeof corr === 'string' && corr !== '')) {
    params.sequence_id = corr;
    const flags = Number(h.f ?? 0);
    if (flags & FLAG_SEQUENCE_START) params.sequence_start = true;
    if (flags & FLAG_SEQUENCE_END) params.sequence_end = true;
  }
  const timeoutUs = Number(h.to ?? 0);
  if (timeoutUs > 0) params.timeout = timeoutUs;
  return params;
}

function blsRequest(h: FrameHeader, frame: Frame): InferRequest {
  const inputs: Tensor[] = decodeWireTensors((h.i as WireTensor[]) ?? [], frame.buffers);
  for (const t of inputs) {
    if (!isDatatype(t.datatype)) throw new Error(`BLS input '${t.name}' has unknown data type '${t.datatype}'`);
  }
  const names = (h.o as string[] | undefined) ?? [];
  const outputs: RequestedOutput[] | undefined = names.length ? names.map((name) => ({ name })) : undefined;
  const parent = typeof h.tr === 'number' ? openTraces.get(h.tr) : undefined;
  return {
    model: String(h.model),
    version: typeof h.version === 'string' && h.version !== '' ? h.version : undefined,
    id: typeof h.rid === 'string' ? h.rid : undefined,
    inputs,
    outputs,
    parameters: blsParameters(h),
    trace: parent?.spawn(),
  };
}

function responseFrame(id: unknown, response: InferResponse): { header: FrameHeader; buffers: Uint8Array[] } {
  const { metas, buffers } = encodeWireTensors(response.outputs);
  const header: FrameHeader = { t: 'bls_result', id, o: metas };
  if (response.parameters && Object.keys(response.parameters).length) {
    header.p = JSON.stringify(response.parameters, (_k, v: unknown) => (typeof v === 'bigint' ? Number(v) : v));
  }
  return { header, buffers };
}

function errorHeader(id: unknown, err: unknown): FrameHeader {
  const m = err instanceof Error ? err.message : String(err);
  const c = err instanceof NereidError ? err.errorClass : 'INTERNAL';
  return { t: 'bls_result', id, e: { m, c } };
}

export async function serveBls(
  server: InferenceCaller,
  frame: Frame,
): Promise<{ header: FrameHeader; buffers: Uint8Array[] }> {
  const id = frame.header.id;
  let request: InferRequest | undefined;
  try {
    request = blsRequest(frame.header, frame);
    return responseFrame(id, await server.infer(request));
  } catch (err) {
    return { header: errorHeader(id, err), buffers: [] };
  } finally {
    request?.trace?.end();
  }
}

/** exec(decoupled=True): every response goes back as it comes, the last with `fin`. */
export async function serveBlsStream(
  server: InferenceCaller,
  frame: Frame,
  reply: (header: FrameHeader, buffers: Uint8Array[]) => void,
): Promise<void> {
  const id = frame.header.id;
  let request: InferRequest;
  try {
    request = blsRequest(frame.header, frame);
  } catch (err) {
    reply({ ...errorHeader(id, err), fin: true }, []);
    return;
  }
  if (server.inferStream === undefined) {
    request.trace?.end();
    reply({ ...errorHeader(id, new Error('BLS on decoupled models is not available here')), fin: true }, []);
    return;
  }
  try {
    for await (const item of server.inferStream(request)) {
      if (item.error) {
        reply({ ...errorHeader(id, item.error), fin: item.final }, []);
      } else if (item.response) {
        const r = responseFrame(id, item.response);
        r.header.fin = item.final;
        reply(r.header, r.buffers);
      } else {
        reply({ t: 'bls_result', id, fin: true }, []);
      }
    }
  } finally {
    request.trace?.end();
  }
}
