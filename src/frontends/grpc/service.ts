/**
 * grpc-js service definitions built from the protobuf-es descriptors, so
 * that the .proto files stay the single source of method paths and types.
 */
import {
  create,
  fromBinary,
  isMessage,
  toBinary,
  type DescMessage,
  type DescService,
  type MessageInitShape,
  type MessageShape,
} from '@bufbuild/protobuf';
import type { MethodDefinition, ServiceDefinition } from '@grpc/grpc-js';

/**
 * What a handler receives instead of a message when the bytes were not a
 * valid protobuf. Returned (not thrown) by the deserializer so the handler
 * can answer INVALID_ARGUMENT with the reason, and a stream can stay open.
 */
export class MalformedMessage {
  constructor(
    readonly typeName: string,
    readonly reason: string,
  ) {}
}

/** A handler may hand the serializer a ready-encoded message. */
export type Encoded = Uint8Array;

function asBuffer(bytes: Uint8Array): Buffer {
  return Buffer.isBuffer(bytes) ? bytes : Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength);
}

/**
 * A faster decoder for one message type: the message fromBinary would
 * return, or undefined to let fromBinary decide (and report any error).
 */
export type FastReader = (bytes: Uint8Array) => unknown;

function methodDefinition<I extends DescMessage, O extends DescMessage>(
  path: string,
  name: string,
  input: I,
  output: O,
  requestStream: boolean,
  responseStream: boolean,
  fast: FastReader | undefined,
): MethodDefinition<MessageShape<I> | MalformedMessage, MessageShape<O> | Encoded> {
  return {
    path,
    originalName: name,
    requestStream,
    responseStream,
    // Clients may pass a message or a plain init object.
    requestSerialize: (value) =>
      asBuffer(
        toBinary(input, isMessage(value, input) ? value : create(input, value as unknown as MessageInitShape<I>)),
      ),
    requestDeserialize: (bytes: Buffer) => {
      try {
        return (fast?.(bytes) as MessageShape<I> | undefined) ?? fromBinary(input, bytes);
      } catch (e) {
        return new MalformedMessage(input.typeName, (e as Error).message);
      }
    },
    responseSerialize: (value) => asBuffer(value instanceof Uint8Array ? value : toBinary(output, value)),
    responseDeserialize: (bytes: Buffer) => fromBinary(output, bytes),
  };
}

/**
 * One grpc-js definition per RPC of `service`, keyed by the RPC's proto
 * name (e.g. "ModelInfer"). Works for clients (makeGenericClientConstructor)
 * and servers (addService) alike. `fastReaders` (by message type name)
 * decode requests of those types before fromBinary is tried.
 */
export function serviceDefinition(
  service: DescService,
  fastReaders: Readonly<Record<string, FastReader>> = {},
): ServiceDefinition {
  const def: Record<string, MethodDefinition<unknown, unknown>> = {};
  for (const m of service.methods) {
    const streamingIn = m.methodKind === 'client_streaming' || m.methodKind === 'bidi_streaming';
    const streamingOut = m.methodKind === 'server_streaming' || m.methodKind === 'bidi_streaming';
    def[m.name] = methodDefinition(
      `/${service.typeName}/${m.name}`,
      m.name,
      m.input,
      m.output,
      streamingIn,
      streamingOut,
      fastReaders[m.input.typeName],
    ) as MethodDefinition<unknown, unknown>;
  }
  return def as ServiceDefinition;
}
