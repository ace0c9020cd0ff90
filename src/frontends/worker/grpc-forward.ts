/**
 * A frontend thread's gRPC forwarding: each call of a service goes, message for message, to the main thread's
 * frontend over a Unix socket, with its metadata, deadline and cancellation; the answer's messages, metadata and
 * status come back as they were.
 */
import {
  Client,
  type ClientUnaryCall,
  credentials,
  Metadata,
  type MethodDefinition,
  type ServerDuplexStream,
  type ServerReadableStream,
  type ServerUnaryCall,
  type ServerWritableStream,
  type ServiceDefinition,
  type StatusObject,
  type UntypedServiceImplementation,
  status as GrpcStatus,
  type requestCallback,
  type sendUnaryData,
} from '@grpc/grpc-js';
import { PEER_HEADER, TRACE_PICK_HEADER } from '../threads/protocol.js';

const same = (b: Buffer): Buffer => b;

/** `def` with its messages left as bytes: a forwarded call is never decoded here. */
export function passthroughDefinition(def: ServiceDefinition): ServiceDefinition {
  const out: Record<string, MethodDefinition<Buffer, Buffer>> = {};
  for (const [name, m] of Object.entries(def)) {
    out[name] = {
      ...(m as MethodDefinition<unknown, unknown>),
      requestSerialize: same,
      requestDeserialize: same,
      responseSerialize: same,
      responseDeserialize: same,
    };
  }
  return out as ServiceDefinition;
}

/** Metadata keys that describe the hop, not the call; grpc-js sets its own. */
function forwardable(key: string): boolean {
  return (
    !key.startsWith('grpc-') &&
    key !== 'user-agent' &&
    key !== 'content-type' &&
    key !== 'te' &&
    key !== 'date' &&
    key !== TRACE_PICK_HEADER
  );
}

/** Where a thread's ModelInfer handler leaves its pick for the forwarded call (TRACE_PICK_HEADER's value). */
export const TRACE_PICK = Symbol('tracePick');
export type PickedCall = object & { [TRACE_PICK]?: '0' | '1' };

function copyMetadata(from: Metadata, peer?: string, tracePick?: '0' | '1'): Metadata {
  const out = new Metadata();
  for (const [key, values] of Object.entries(from.toJSON())) {
    if (!forwardable(key)) continue;
    for (const v of values) out.add(key, v);
  }
  if (peer !== undefined) out.set(PEER_HEADER, peer);
  if (tracePick !== undefined) out.set(TRACE_PICK_HEADER, tracePick);
  return out;
}

function errorOf(s: StatusObject): { code: number; details: string; metadata: Metadata } {
  return { code: s.code, details: s.details, metadata: copyMetadata(s.metadata) };
}

type AnyServerCall =
  | ServerUnaryCall<Buffer, Buffer>
  | ServerReadableStream<Buffer, Buffer>
  | ServerWritableStream<Buffer, Buffer>
  | ServerDuplexStream<Buffer, Buffer>;

export class GrpcForwarder {
  private readonly client: Client;

  constructor(socketPath: string) {
    this.client = new Client(`unix:${socketPath}`, credentials.createInsecure(), {
      'grpc.max_receive_message_length': -1,
      'grpc.max_send_message_length': -1,
      'grpc.enable_channelz': 0,
    });
  }

  close(): void {
    this.client.close();
  }

  /** Handlers forwarding every method of `def`. */
  implementation(def: ServiceDefinition): UntypedServiceImplementation {
    const impl: UntypedServiceImplementation = {};
    for (const [name, m] of Object.entries(def)) {
      const path = m.path;
      if (!m.requestStream && !m.responseStream) impl[name] = this.unary(path);
      else if (!m.requestStream) impl[name] = this.serverStream(path);
      else if (!m.responseStream) impl[name] = this.clientStream(path);
      else impl[name] = this.bidi(path);
    }
    return impl;
  }

  private options(call: AnyServerCall): { deadline?: Date | number } {
    const deadline = call.getDeadline();
    return deadline === Infinity ? {} : { deadline };
  }

  /** A handler forwarding the unary method at `path` (also for a call a thread's own handler hands over). */
  unary(path: string) {
    return (call: ServerUnaryCall<Buffer, Buffer>, callback: sendUnaryData<Buffer>): void => {
      this.relayAnswer(call, callback, (done) =>
        this.client.makeUnaryRequest<Buffer, Buffer>(
          path,
          same,
          same,
          call.request,
          copyMetadata(call.metadata, call.getPeer(), (call as PickedCall)[TRACE_PICK]),
          this.options(call),
          done,
        ),
      );
    };
  }

  private serverStream(path: string) {
    return (call: ServerWritableStream<Buffer, Buffer>): void => {
      const upstream = this.client.makeServerStreamRequest<Buffer, Buffer>(
        path,
        same,
        same,
        call.request,
        copyMetadata(call.metadata, call.getPeer()),
        this.options(call),
      );
      this.relayAnswers(upstream, call);
    };
  }

  private clientStream(path: string) {
    return (call: ServerReadableStream<Buffer, Buffer>, callback: sendUnaryData<Buffer>): void => {
      const upstream = this.relayAnswer(call, callback, (done) =>
        this.client.makeClientStreamRequest<Buffer, Buffer>(
          path,
          same,
          same,
          copyMetadata(call.metadata, call.getPeer()),
          this.options(call),
          done,
        ),
      );
      call.on('data', (m: Buffer) => upstream.write(m));
      call.on('end', () => upstream.end());
    };
  }

  /**
   * Starts a call with one answer (`start` is handed its callback) and relays it back: metadata as it
   * comes, the answer with the trailers once the status arrives, cancellation upstream.
   */
  private relayAnswer<C extends ClientUnaryCall>(
    call: ServerUnaryCall<Buffer, Buffer> | ServerReadableStream<Buffer, Buffer>,
    callback: sendUnaryData<Buffer>,
    start: (done: requestCallback<Buffer>) => C,
  ): C {
    let answer: Buffer | undefined;
    const upstream = start((err, value) => {
      answer = err ? undefined : value;
    });
    upstream.on('metadata', (md: Metadata) => call.sendMetadata(copyMetadata(md)));
    // grpc-js calls back before it emits the status; the trailers come with the status.
    upstream.on('status', (s: StatusObject) => {
      if (s.code === GrpcStatus.OK && answer !== undefined) callback(null, answer, copyMetadata(s.metadata));
      else callback(errorOf(s));
    });
    call.on('cancelled', () => upstream.cancel());
    return upstream;
  }

  private bidi(path: string) {
    return (call: ServerDuplexStream<Buffer, Buffer>): void => {
      const upstream = this.client.makeBidiStreamRequest<Buffer, Buffer>(
        path,
        same,
        same,
        copyMetadata(call.metadata, call.getPeer()),
        this.options(call),
      );
      call.on('data', (m: Buffer) => upstream.write(m));
      call.on('end', () => upstream.end());
      this.relayAnswers(upstream, call);
    };
  }

  private relayAnswers(
    upstream: NodeJS.EventEmitter & { cancel(): void },
    call: ServerWritableStream<Buffer, Buffer> | ServerDuplexStream<Buffer, Buffer>,
  ): void {
    upstream.on('metadata', (md: Metadata) => call.sendMetadata(copyMetadata(md)));
    upstream.on('data', (m: Buffer) => call.write(m));
    // The status comes once, as the 'status' event; the 'error' event repeats a failed one.
    upstream.on('error', () => undefined);
    upstream.on('status', (s: StatusObject) => {
      if (s.code === GrpcStatus.OK) call.end(copyMetadata(s.metadata));
      else call.emit('error', errorOf(s));
    });
    call.on('cancelled', () => upstream.cancel());
  }
}
