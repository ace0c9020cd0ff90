/**
 * `--auth-keys` on gRPC: the key comes in the metadata `authorization`
 * (`Bearer <secret>`), as over HTTP. The key and its group are checked when
 * the metadata arrives; for the RPCs that name a model, each request
 * message's model is checked too, before any handler sees it, so a model
 * outside the key's scopes is refused the same way whether it exists or
 * not. A refused call ends with UNAUTHENTICATED, PERMISSION_DENIED or
 * RESOURCE_EXHAUSTED (with `retry-after` in the trailers); on a stream, a
 * request for a model outside the scopes ends the stream.
 */
import { PEER_HEADER } from '../threads/protocol.js';
import {
  Metadata,
  ResponderBuilder,
  ServerInterceptingCall,
  ServerListenerBuilder,
  type ServerInterceptingCallInterface,
  type ServerInterceptor,
} from '@grpc/grpc-js';
import {
  type AccessControl,
  type ApiGroup,
  type AuthFailure,
  type Principal,
  isAuthFailure,
} from '../../auth/index.js';
import { CATEGORY_OF_RPC } from './restrictions.js';

/** The RPCs whose request message names a model (`model_name` or `name`), with the group it is checked in. */
const MODEL_OF_MESSAGE: Readonly<Record<string, (message: unknown) => string | undefined>> = {
  ModelInfer: (m) => (m as { modelName?: string }).modelName,
  ModelStreamInfer: (m) => (m as { modelName?: string }).modelName,
  ModelMetadata: (m) => (m as { name?: string }).name,
  ModelConfig: (m) => (m as { name?: string }).name,
  // An empty name asks for every model: the handler lists only those in the key's scopes.
  ModelStatistics: (m) => {
    const name = (m as { name?: string }).name;
    return name === '' ? undefined : name;
  },
};

/** The client's address without its port, as grpc-js gives the peer (`1.2.3.4:5678`, `::1:5678`). */
export function peerAddress(peer: string): string {
  const colon = peer.lastIndexOf(':');
  return colon > 0 && /^\d+$/.test(peer.slice(colon + 1)) ? peer.slice(0, colon) : peer;
}

function refuse(call: ServerInterceptingCallInterface, failure: AuthFailure): void {
  const metadata = new Metadata();
  if (failure.retryAfterSecs !== undefined) metadata.set('retry-after', String(failure.retryAfterSecs));
  call.sendStatus({ code: failure.grpcStatus, details: failure.message, metadata });
}

/** The authorization header a call carries (a string; binary values are no key). */
export function authorizationOf(metadata: Metadata): string | undefined {
  const value = metadata.get('authorization')[0];
  return typeof value === 'string' ? value : undefined;
}

/**
 * `forwardedPeer`: calls come from the frontend threads, which name the client's address in the metadata
 * (`PEER_HEADER`); it is taken out before the handlers see the metadata. `checkedByHandler`: RPCs whose handler
 * makes the same check itself (inferKeyCheck), which pass through untouched: wrapping a call costs grpc-js more
 * than the check.
 */
export function authInterceptor(
  access: AccessControl,
  forwardedPeer = false,
  checkedByHandler: ReadonlySet<string> = new Set(),
): ServerInterceptor {
  return (method, call) => {
    const rpc = method.path.slice(method.path.lastIndexOf('/') + 1);
    // grpc-js chains what an interceptor returns: the call itself adds nothing.
    if (checkedByHandler.has(rpc)) return call as ServerInterceptingCall;
    // Server reflection and anything unnamed describe the server: the metadata group.
    const group: ApiGroup = CATEGORY_OF_RPC[rpc] ?? 'metadata';
    const modelOf = MODEL_OF_MESSAGE[rpc];
    let peer = call.getPeer();
    let address = peerAddress(peer);
    let who: Principal | undefined;
    let refused = false;
    const builder = new ServerListenerBuilder().withOnReceiveMetadata((metadata: Metadata, next) => {
      if (forwardedPeer) {
        peer = takeForwardedPeer(metadata) ?? peer;
        address = peerAddress(peer);
      }
      const found = access.authenticate(authorizationOf(metadata), address, peer);
      const failure = isAuthFailure(found) ? found : access.authorize(found, address, group);
      if (failure !== undefined) {
        refused = true;
        refuse(call, failure);
        return;
      }
      who = found as Principal;
      next(metadata);
    });
    if (modelOf !== undefined) {
      builder.withOnReceiveMessage((message, next) => {
        if (refused) return;
        const model = modelOf(message);
        const failure =
          who === undefined || model === undefined ? undefined : access.authorize(who, address, group, model);
        if (failure !== undefined) {
          refused = true;
          refuse(call, failure);
          return;
        }
        next(message);
      });
    }
    const listener = builder.build();
    return new ServerInterceptingCall(call, new ResponderBuilder().withStart((next) => next(listener)).build());
  };
}

/** The answer a handler gives for a refused key: the status, with `retry-after` in the trailers for a 429. */
export function refusal(failure: AuthFailure): { code: number; details: string; metadata: Metadata } {
  const metadata = new Metadata();
  if (failure.retryAfterSecs !== undefined) metadata.set('retry-after', String(failure.retryAfterSecs));
  return { code: failure.grpcStatus, details: failure.message, metadata };
}

/**
 * ModelInfer's key check, made by its handler (the interceptor lets it through): the key and the group as the
 * interceptor checks them when the metadata arrives, then the message's model, before anything looks it up.
 * `model` undefined (a malformed message): the group alone, as the interceptor would. The peer string stands for
 * the connection: a call repeating the connection's last key is not hashed again (AccessControl.authenticate).
 */
export function inferKeyCheck(
  access: AccessControl,
  forwardedPeer: boolean,
): (call: { metadata: Metadata; getPeer(): string }, model: string | undefined) => AuthFailure | undefined {
  return (call, model) => {
    let peer = call.getPeer();
    if (forwardedPeer) peer = takeForwardedPeer(call.metadata) ?? peer;
    const address = peerAddress(peer);
    const who = access.authenticate(authorizationOf(call.metadata), address, peer);
    if (isAuthFailure(who)) return who;
    const group = access.authorize(who, address, 'inference');
    return group ?? (model === undefined ? undefined : access.authorize(who, address, 'inference', model));
  };
}

/** The client's peer (`address:port`) a frontend thread put in the metadata, taken out of it. */
export function takeForwardedPeer(metadata: Metadata): string | undefined {
  const value = metadata.get(PEER_HEADER)[0];
  metadata.remove(PEER_HEADER);
  return typeof value === 'string' ? value : undefined;
}

/** Takes the frontend threads' peer metadata out of every call (without `--auth-keys`, nothing reads it). */
export function dropForwardedPeerInterceptor(): ServerInterceptor {
  return (_method, call) => {
    const listener = new ServerListenerBuilder()
      .withOnReceiveMetadata((metadata: Metadata, next) => {
        metadata.remove(PEER_HEADER);
        next(metadata);
      })
      .build();
    return new ServerInterceptingCall(call, new ResponderBuilder().withStart((next) => next(listener)).build());
  };
}
