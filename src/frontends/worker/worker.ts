/**
 * A frontend thread: its own HTTP or gRPC server on the shared port (SO_REUSEPORT, so the kernel spreads
 * connections over the threads), forwarding to the main thread's frontend what it does not serve itself.
 */
import http from 'node:http';
import net from 'node:net';
import { parentPort, workerData } from 'node:worker_threads';
import { Server, ServerCredentials, type ServerInterceptor } from '@grpc/grpc-js';
import { answerClientError } from '../http/client-error.js';
import { algorithmForLevel, responseCompressionInterceptor } from '../grpc/compression.js';
import { healthServiceDefinition, inferenceServiceDefinition } from '../grpc/index.js';
import { channelOptionsFor, GRPC_DEFAULTS, parseCompressionLevel } from '../grpc/options.js';
import { addReflection } from '../grpc/reflection.js';
import { credentialsFor } from '../grpc/credentials.js';
import { silentLogger } from '../../logger.js';
import { GrpcForwarder, passthroughDefinition } from './grpc-forward.js';
import { GrpcInferThread } from './grpc-infer.js';
import { HttpForwarder } from './http-forward.js';
import { HttpThread } from './http-infer.js';
import { RemoteServer } from './remote.js';
import { ThreadAccess } from './access.js';
import type { FrontendThreadInit, MainMessage, ThreadMessage } from '../threads/protocol.js';

const init = workerData as FrontendThreadInit;
const port = parentPort!;

function tell(message: ThreadMessage): void {
  port.postMessage(message);
}

function listenOptions(): net.ListenOptions {
  return { port: init.port, host: init.address, reusePort: true } as net.ListenOptions;
}

function failed(err: NodeJS.ErrnoException): void {
  tell({ t: 'failed', code: err.code, message: err.message });
  process.exit(1);
}

function startHttp(): void {
  const options = init.http!;
  const forwarder = new HttpForwarder(init.upstream, options.maxInputSize);
  const b = init.bridge!;
  const remote = new RemoteServer(b.port, b.sync, b.signal, b.shared, b.clockBase);
  const access = init.auth === undefined ? undefined : new ThreadAccess(init.auth, b.shared);
  const thread = new HttpThread(remote, forwarder, options, access);
  const server = http.createServer({ keepAlive: true, noDelay: true }, thread.onRequest);
  server.on('clientError', answerClientError);
  server.keepAliveTimeout = 65_000;
  server.headersTimeout = 66_000;
  server.once('error', failed);
  server.listen(listenOptions(), () => {
    server.off('error', failed);
    tell({ t: 'listening', port: (server.address() as net.AddressInfo).port });
  });
  port.on('message', (m: MainMessage) => {
    if (m.t === 'drain') thread.reply.closing = true;
    else if (m.t === 'stop') {
      thread.reply.closing = true;
      server.close(() => {
        forwarder.close();
        b.port.close();
        b.sync.close();
        access?.close();
        port.close();
      });
      server.closeIdleConnections();
    }
  });
}

function startGrpc(): void {
  const o = init.grpc ?? {};
  const interceptors: ServerInterceptor[] = [];
  const level = parseCompressionLevel(o.compressionLevel ?? GRPC_DEFAULTS.compressionLevel);
  const algorithm = level === undefined ? undefined : algorithmForLevel(level);
  if (algorithm) {
    const def = inferenceServiceDefinition;
    const paths = new Set([def.ModelInfer!.path, def.ModelStreamInfer!.path]);
    interceptors.push(responseCompressionInterceptor(algorithm, paths, silentLogger));
  }
  const server = new Server({ ...channelOptionsFor(o), interceptors });
  const forwarder = new GrpcForwarder(init.upstream);
  for (const def of [inferenceServiceDefinition, healthServiceDefinition]) {
    const through = passthroughDefinition(def);
    const implementation = forwarder.implementation(through);
    const b = init.bridge;
    if (def === inferenceServiceDefinition && b !== undefined) {
      // ModelInfer is served here (grpc-infer.ts); the rest, and what it hands over, goes to the main thread.
      const remote = new RemoteServer(b.port, b.sync, b.signal, b.shared, b.clockBase);
      const forwardAll = o.forwardAll === true;
      const access = init.auth === undefined ? undefined : new ThreadAccess(init.auth, b.shared);
      const infer = new GrpcInferThread(remote, forwarder.unary(def.ModelInfer!.path), {
        headerForwardPattern: o.headerForwardPattern,
        forwardAll,
        access,
      });
      implementation['ModelInfer'] = infer.handle;
    }
    server.addService(through, implementation);
  }
  addReflection(server);
  let credentials: ServerCredentials;
  try {
    credentials = credentialsFor(o.ssl);
  } catch (err) {
    failed(err as NodeJS.ErrnoException);
    return;
  }
  const injector = server.createConnectionInjector(credentials);
  const listener = net.createServer({ noDelay: true }, (socket) => injector.injectConnection(socket));
  listener.once('error', failed);
  listener.listen(listenOptions(), () => {
    listener.off('error', failed);
    tell({ t: 'listening', port: (listener.address() as net.AddressInfo).port });
  });
  port.on('message', (m: MainMessage) => {
    if (m.t !== 'stop') return;
    listener.close();
    const timer = setTimeout(() => server.forceShutdown(), m.graceMs);
    server.tryShutdown(() => {
      clearTimeout(timer);
      injector.destroy();
      forwarder.close();
      init.bridge?.port.close();
      init.bridge?.sync.close();
      init.auth?.port.close();
      port.close();
    });
  });
}

if (init.kind === 'http') startHttp();
else startGrpc();
