/**
 * The main thread's side of the frontend threads' infer requests: runs them through the server (so batching spans
 * every connection of every thread), answers with the outputs' bytes moved into a transferred buffer, cancels
 * the ones whose client went away, answers configurations synchronously, and tells the threads which models'
 * queues are full so that they refuse there.
 */
import { MessageChannel, type MessagePort } from 'node:worker_threads';
import type { AccessControl, AccessUpdate, AuthFailure } from '../../auth/index.js';
import type { ServerApi } from '../../core/server-api.js';
import type { Tensor } from '../../tensor/tensor.js';
import { Cancellation } from '../../types/cancellation.js';
import { Errors } from '../../errors.js';
import type { AuthEnds } from './protocol.js';
import type { Trace, Tracer } from '../../trace/index.js';
import {
  admissionKey,
  Coalescer,
  type BridgeAnswer,
  type BridgeRequest,
  type ConfigAnswer,
  type ConfigQuery,
  SharedSlot,
  TracingFlag,
  toWireError,
  type WireError,
  type WireTensor,
  type WireTrace,
} from './wire.js';

/** The frontend stamps' names by protocol: receive start and end, send start and end. */
const STAMPS = {
  http: ['HTTP_RECV_START', 'HTTP_RECV_END', 'HTTP_SEND_START', 'HTTP_SEND_END'],
  grpc: ['GRPC_WAITREAD_START', 'GRPC_WAITREAD_END', 'GRPC_SEND_START', 'GRPC_SEND_END'],
} as const;

interface Events {
  on?(event: string, listener: () => void): unknown;
  off?(event: string, listener: () => void): unknown;
}

const MODEL_EVENTS = ['stateChange', 'versionReady', 'versionUnloaded'] as const;
/** How often the tracing flag is read again (it also is before every answer of a forwarded HTTP request). */
const TRACING_POLL_MS = 200;

export class FrontendBridge {
  /** Shared with every thread: SharedSlot's slots. */
  readonly shared = new Int32Array(new SharedArrayBuffer(SharedSlot.Count * 4));
  private readonly ports = new Set<MessagePort>();
  /** Each thread's port until its close, which comes after every message the thread sent on it. */
  private readonly portsClosed = new Set<Promise<void>>();
  private readonly full = new Map<string, { model: string; version: string | undefined }>();
  private fullCheck: NodeJS.Immediate | undefined;
  private fullTimer: NodeJS.Timeout | undefined;
  private readonly poll: NodeJS.Timeout;
  private readonly bump = (): void => void Atomics.add(this.shared, SharedSlot.ConfigGeneration, 1);
  /** Each thread's end of its keys updates (AuthEnds). */
  private readonly authPorts = new Set<MessagePort>();
  private readonly unsubscribe: (() => void) | undefined;

  constructor(
    private readonly server: ServerApi,
    private readonly tracing: Tracer | undefined,
    /** `--auth-keys`: the threads check keys themselves, with copies kept up to date from this one. */
    private readonly access?: AccessControl,
    /** The threads' protocol: the names of the frontend stamps of the requests they serve. */
    private readonly kind: 'http' | 'grpc' = 'http',
  ) {
    const events = server as Events;
    for (const e of MODEL_EVENTS) events.on?.(e, this.bump);
    this.refreshTracing();
    this.poll = setInterval(() => this.refreshTracing(), TRACING_POLL_MS);
    this.poll.unref();
    this.unsubscribe = access?.subscribe((u) => this.relayAuth(u));
  }

  /** A new thread's keys and the port of their updates (undefined without `--auth-keys`). */
  attachAuth(): AuthEnds | undefined {
    if (this.access === undefined) return undefined;
    const channel = new MessageChannel();
    const mine = channel.port1;
    this.authPorts.add(mine);
    mine.on('close', () => this.authPorts.delete(mine));
    mine.unref();
    return { port: channel.port2, init: this.access.snapshot() };
  }

  private relayAuth(update: AccessUpdate): void {
    for (const p of this.authPorts) p.postMessage(update);
    // After the posts: a thread that sees the new generation finds the update on its port.
    Atomics.add(this.shared, SharedSlot.AuthGeneration, 1);
  }

  /**
   * Resolves once the main thread has read everything the threads sent (call it after they exited: a worker's exit
   * is seen before the messages it sent last, such as the send stamps and status of the replies it wrote last).
   */
  async drained(): Promise<void> {
    await Promise.all(this.portsClosed);
  }

  close(): void {
    this.unsubscribe?.();
    for (const p of this.authPorts) p.close();
    this.authPorts.clear();
    clearInterval(this.poll);
    if (this.fullCheck !== undefined) clearImmediate(this.fullCheck);
    clearTimeout(this.fullTimer);
    const events = server(this.server);
    for (const e of MODEL_EVENTS) events.off?.(e, this.bump);
    for (const p of this.ports) p.close();
    this.ports.clear();
  }

  /** Reads the tracer's state into the shared flag (before a forwarded request is answered, and periodically). */
  refreshTracing(): void {
    const t = this.tracing;
    let flags = 0;
    if (t !== undefined && t.threadsForward) {
      flags = TracingFlag.On;
      if (t.logsRequests) flags |= TracingFlag.Log;
      if (t.readsContext) flags |= TracingFlag.Context;
    }
    Atomics.store(this.shared, SharedSlot.Tracing, flags);
    Atomics.store(this.shared, SharedSlot.TraceRate, t?.threadRate ?? 0);
  }

  /** Serves one thread: `port` carries its infer requests, `sync` its configuration queries. */
  attach(port: MessagePort, sync: MessagePort, signal: Int32Array): void {
    this.ports.add(port);
    const closed = new Promise<void>((resolve) => port.once('close', resolve));
    this.portsClosed.add(closed);
    void closed.then(() => this.portsClosed.delete(closed));
    const pending = new Map<number, Cancellation>();
    /** Traced requests answered, until the thread says when it sent their reply. */
    const sending = new SendingTraces();
    const out = new Coalescer<BridgeAnswer>(port, (items) => ({ t: 'batch', items }));
    const take = (m: BridgeRequest): void => {
      if (m.t === 'cancel') pending.get(m.id)?.abort();
      else if (m.t === 'sent') this.sent(sending, m);
      else if (m.t === 'early') this.early(m);
      // Counted in the statistics as the main thread's own refusals are, whether or not the queue is still full.
      else if (m.t === 'refused') this.server.countRefusals?.(m.model, m.version, m.count);
      else if (m.t === 'batch') for (const item of m.items) take(item);
      else this.infer(out, pending, sending, m);
    };
    port.on('message', take);
    port.on('close', () => {
      this.ports.delete(port);
      for (const c of pending.values()) c.abort();
      sending.close();
    });
    sync.on('message', (q: ConfigQuery) => {
      let answer: ConfigAnswer;
      try {
        answer = { config: this.server.modelConfig(q.model, q.version) };
      } catch (err) {
        answer = { error: toWireError(err) };
      }
      sync.postMessage(answer);
      Atomics.store(signal, 0, 1);
      Atomics.notify(signal, 0);
    });
  }

  /** A traced request's reply went out on its thread: its send stamps, and its trace ends. */
  private sent(sending: SendingTraces, m: Extract<BridgeRequest, { t: 'sent' }>): void {
    const trace = sending.take(m.id);
    if (trace !== undefined) this.finish(trace, m);
  }

  /** The send stamps and, for the request log, the reply's status and bytes: the trace ends. */
  private finish(trace: Trace, m: Extract<BridgeRequest, { t: 'sent' | 'early' }>): void {
    const names = STAMPS[this.kind];
    trace.stampAt(names[2], m.start);
    trace.stampAt(names[3], m.end);
    const log = trace.group.log;
    if (log !== undefined && m.status !== undefined) {
      log.status = m.status;
      log.bytesOut = m.bytesOut ?? 0;
    }
    trace.end();
  }

  /** A request refused on its thread before it crossed: traced, when sampled, with its frontend stamps alone. */
  private early(m: Extract<BridgeRequest, { t: 'early' }>): void {
    const trace = this.sample(m.model, m.trace);
    if (trace !== undefined) this.finish(trace, m);
  }

  /** A trace for a request a thread served while requests may be traced, when the tracer samples it. */
  private sample(model: string, w: WireTrace): Trace | undefined {
    const tracer = this.tracing;
    if (tracer === undefined || !tracer.enabled) return undefined;
    const trace = tracer.sample(model, w.traceparent, w.tracestate, w.pick, w.recvStart);
    if (trace === undefined) return undefined;
    const names = STAMPS[this.kind];
    trace.stampAt(names[0], w.recvStart);
    trace.stampAt(names[1], w.recvEnd);
    const log = trace.group.log;
    if (log !== undefined && w.log !== undefined) {
      log.protocol = this.kind;
      log.method = w.log.method;
      log.path = w.log.path;
      log.bytesIn = w.log.bytesIn;
    }
    return trace;
  }

  private infer(
    out: Coalescer<BridgeAnswer>,
    pending: Map<number, Cancellation>,
    sending: SendingTraces,
    m: Extract<BridgeRequest, { t: 'infer' }>,
  ): void {
    // A thread admitted this keyed request on its copy of the keys; the address may have reached the failure limit
    // since (its update still on the way): the limit is the main thread's, so it has the last word.
    if (m.keyedAddress !== undefined && this.access !== undefined) {
      const limited = this.access.refuseLimited(m.keyedAddress);
      if (limited !== undefined) {
        out.send({ t: 'failed', id: m.id, error: authWireError(limited) });
        return;
      }
    }
    const signal = new Cancellation();
    pending.set(m.id, signal);
    const trace = m.trace === undefined ? undefined : this.sample(m.model, m.trace);
    const answer = (a: BridgeAnswer, transfer?: ArrayBuffer[]): void => {
      pending.delete(m.id);
      if (trace !== undefined) sending.add(m.id, trace);
      out.send(a, transfer);
      // A request done may have let the next batch leave the queue.
      this.scheduleFullCheck();
    };
    this.server
      .infer({
        model: m.model,
        version: m.version,
        id: m.requestId,
        inputs: m.inputs as Tensor[],
        outputs: m.outputs,
        parameters: m.parameters,
        signal,
        trace,
      })
      .then(
        (r) => {
          const { tensors, buffer } = packOutputs(r.outputs);
          const response = {
            modelName: r.modelName,
            modelVersion: r.modelVersion,
            id: r.id,
            parameters: r.parameters,
            outputs: tensors,
          };
          // Only a traced request's answer says so (nothing more crosses for the others).
          answer(
            trace === undefined
              ? { t: 'answer', id: m.id, response }
              : { t: 'answer', id: m.id, response, traced: true },
            [buffer],
          );
        },
        (err: unknown) => {
          const error = toWireError(err);
          if (error.code === 'NRD_QUEUE_FULL') this.markFull(m.model, m.version);
          answer(
            trace === undefined ? { t: 'failed', id: m.id, error } : { t: 'failed', id: m.id, error, traced: true },
          );
        },
      );
  }

  /** Tells the threads to refuse this model's requests themselves until its queue has room again. */
  private markFull(model: string, version: string | undefined): void {
    const key = admissionKey(model, version);
    if (this.full.has(key) || this.server.queueFull?.(model, version) !== true) return;
    // The refusal as the frontend words it before a request is read (no request id).
    const error = toWireError(Errors.maxQueueSizeExceeded(''));
    this.full.set(key, { model, version });
    this.broadcast({ t: 'full', key, error });
    this.scheduleFullCheck();
  }

  /**
   * Looks again at the full queues at the end of this turn. Asked when a forwarded request is answered, and every
   * millisecond while a queue is full (for room made by requests from elsewhere): an immediate asked again from each
   * check would keep the event loop from ever sleeping while a queue is full, taking a core from the model's threads.
   */
  private scheduleFullCheck(): void {
    if (this.full.size > 0) this.fullCheck ??= setImmediate(this.checkFull);
  }

  private readonly checkFull = (): void => {
    this.fullCheck = undefined;
    for (const [key, { model, version }] of this.full) {
      if (this.server.queueFull?.(model, version) === true) continue;
      this.full.delete(key);
      this.broadcast({ t: 'open', key });
    }
    if (this.full.size > 0) this.fullTimer ??= setTimeout(this.fullTimeout, 1);
  };

  private readonly fullTimeout = (): void => {
    this.fullTimer = undefined;
    this.scheduleFullCheck();
  };

  private broadcast(a: BridgeAnswer): void {
    for (const p of this.ports) p.postMessage(a);
  }
}

/** A thread's traced requests answered, until it says when it sent their reply ('sent'). */
class SendingTraces {
  private readonly traces = new Map<number, Trace>();
  private open = true;

  add(id: number, trace: Trace): void {
    // The thread is gone: no send stamps will come.
    if (this.open) this.traces.set(id, trace);
    else trace.end();
  }

  take(id: number): Trace | undefined {
    const trace = this.traces.get(id);
    this.traces.delete(id);
    return trace;
  }

  /** The thread is gone: its traces end without their send stamps. */
  close(): void {
    this.open = false;
    for (const t of this.traces.values()) t.end();
    this.traces.clear();
  }
}

/** A refused key as it crosses to a thread: its own statuses (429 / RESOURCE_EXHAUSTED), with Retry-After. */
function authWireError(f: AuthFailure): WireError {
  return {
    code: f.code,
    errorClass: 'UNAVAILABLE',
    message: f.message,
    retryAfterSecs: f.retryAfterSecs,
    httpStatus: f.httpStatus,
    grpcStatus: f.grpcStatus,
  };
}

function server(s: ServerApi): Events {
  return s as Events;
}

/** The outputs' bytes copied into one buffer of their own, to be transferred (the batch's buffers stay here). */
function packOutputs(outputs: readonly Tensor[]): { tensors: WireTensor[]; buffer: ArrayBuffer } {
  let total = 0;
  for (const t of outputs) total += t.data.byteLength;
  const buffer = new ArrayBuffer(total);
  const bytes = new Uint8Array(buffer);
  const tensors: WireTensor[] = [];
  let offset = 0;
  for (const t of outputs) {
    bytes.set(t.data, offset);
    const data = bytes.subarray(offset, offset + t.data.byteLength);
    tensors.push({ name: t.name, datatype: t.datatype, shape: t.shape, data });
    offset += t.data.byteLength;
  }
  return { tensors, buffer };
}
