/**
 * The gRPC frontend: Triton's inference.GRPCInferenceService, the standard
 * health service and server reflection, served with @grpc/grpc-js over
 * the same ServerApi as the HTTP frontend.
 */
import { readFileSync } from 'node:fs';
import { Server, ServerCredentials, type ServerInterceptor, type UntypedServiceImplementation } from '@grpc/grpc-js';
import { GRPCInferenceService, ModelInferRequestSchema } from '../../gen/grpc_service_pb.js';
import { Health } from '../../gen/health_pb.js';
import type { ServerApi } from '../../core/server-api.js';
import { Errors } from '../../errors.js';
import { silentLogger, type Logger } from '../../logger.js';
import { algorithmForLevel, responseCompressionInterceptor } from './compression.js';
import { commonHandlers, healthHandlers } from './handlers.js';
import { modelInferHandler, modelStreamInferHandler } from './infer.js';
import {
  bindAddress,
  channelOptionsFor,
  GRPC_DEFAULTS,
  parseCompressionLevel,
  type GrpcFrontendOptions,
  type GrpcSslOptions,
} from './options.js';
import { addReflection } from './reflection.js';
import { authInterceptor } from './auth.js';
import { compileHeaderForwardPattern } from '../header-forward.js';
import { parseRestrictedProtocols, restrictionInterceptor } from './restrictions.js';
import { serviceDefinition } from './service.js';
import { readModelInferRequest } from './infer-request-read.js';

export {
  GRPC_DEFAULTS,
  MAX_MESSAGE_BYTES,
  channelOptionsFor,
  parseCompressionLevel,
  type GrpcCompressionLevel,
  type GrpcFrontendOptions,
  type GrpcSslOptions,
} from './options.js';
export { parseRestrictedProtocols } from './restrictions.js';
export type {
  LogSettings,
  LogSettingsChange,
  LogSettingsStore,
  TraceSettings,
  TraceSettingsStore,
} from './settings.js';

/** grpc-js definitions of the services, usable to build clients too. */
export const inferenceServiceDefinition = serviceDefinition(GRPCInferenceService, {
  [ModelInferRequestSchema.typeName]: readModelInferRequest,
});
export const healthServiceDefinition = serviceDefinition(Health);

const INFER_PATHS: ReadonlySet<string> = new Set([
  inferenceServiceDefinition.ModelInfer!.path,
  inferenceServiceDefinition.ModelStreamInfer!.path,
]);

function credentialsFor(ssl: GrpcSslOptions | undefined): ServerCredentials {
  if (!ssl) return ServerCredentials.createInsecure();
  const read = (file: string, flag: string): Buffer => {
    try {
      return readFileSync(file);
    } catch (e) {
      throw Errors.config(`${flag}: cannot read '${file}': ${(e as Error).message}`);
    }
  };
  const root = ssl.rootCert ? read(ssl.rootCert, '--grpc-root-cert') : null;
  if (ssl.mutual && !root) throw Errors.config('--grpc-use-ssl-mutual requires --grpc-root-cert');
  return ServerCredentials.createSsl(
    root,
    [{ cert_chain: read(ssl.serverCert, '--grpc-server-cert'), private_key: read(ssl.serverKey, '--grpc-server-key') }],
    ssl.mutual === true,
  );
}

export class GrpcFrontend {
  private readonly options: GrpcFrontendOptions;
  private readonly logger: Logger;
  private grpcServer: Server | undefined;

  constructor(
    private readonly server: ServerApi,
    options: GrpcFrontendOptions = {},
  ) {
    this.options = options;
    this.logger = options.logger ?? silentLogger;
  }

  /** Binds and starts serving; resolves with the bound port (useful with port 0). */
  async start(): Promise<{ port: number }> {
    if (this.grpcServer) throw new Error('gRPC frontend already started');
    const o = this.options;
    if (o.inferAllocationPoolSize !== undefined) {
      this.logger.debug(
        { inferAllocationPoolSize: o.inferAllocationPoolSize },
        '--grpc-infer-allocation-pool-size has no effect in Nereid (no pre-allocated handler states); ignored',
      );
    }
    const credentials = credentialsFor(o.ssl);
    const interceptors: ServerInterceptor[] = [];
    const level = parseCompressionLevel(o.compressionLevel ?? GRPC_DEFAULTS.compressionLevel);
    if (level === undefined) {
      throw Errors.config(
        `--grpc-infer-response-compression-level must be none, low, medium or high, got '${o.compressionLevel}'`,
      );
    }
    const algorithm = algorithmForLevel(level);
    if (algorithm) interceptors.push(responseCompressionInterceptor(algorithm, INFER_PATHS, this.logger));

    const restrictions = parseRestrictedProtocols(o.restrictedProtocols ?? []);
    // Listed after compression: grpc-js wraps in list order, and compression needs the innermost call.
    if (restrictions.size > 0) interceptors.push(restrictionInterceptor(restrictions));
    if (o.access !== undefined) interceptors.push(authInterceptor(o.access));
    const headerPattern = o.headerForwardPattern ? compileHeaderForwardPattern(o.headerForwardPattern) : undefined;

    const grpcServer = new Server({ ...channelOptionsFor(o), interceptors });
    const implementation: UntypedServiceImplementation = {
      ...commonHandlers({
        server: this.server,
        traceSettings: o.traceSettings ?? o.tracer?.settings,
        logSettings: o.logSettings,
        access: o.access,
      }),
      ModelInfer: modelInferHandler(this.server, headerPattern, o.tracer),
      ModelStreamInfer: modelStreamInferHandler(this.server, this.logger, headerPattern, o.tracer),
    } as unknown as UntypedServiceImplementation;
    grpcServer.addService(inferenceServiceDefinition, implementation);
    grpcServer.addService(
      healthServiceDefinition,
      healthHandlers(this.server) as unknown as UntypedServiceImplementation,
    );
    addReflection(grpcServer);

    const address = bindAddress(o.address ?? GRPC_DEFAULTS.address, o.port ?? GRPC_DEFAULTS.port);
    const port = await new Promise<number>((resolve, reject) => {
      grpcServer.bindAsync(address, credentials, (err, bound) => {
        if (!err) resolve(bound);
        else {
          grpcServer.forceShutdown();
          const why = err.message.includes('EADDRINUSE') ? `Socket '${address}' already in use` : err.message;
          reject(Errors.config(`failed to start GRPC service: ${why}`));
        }
      });
    });
    this.grpcServer = grpcServer;
    this.logger.info({ address, port }, 'Started GRPCInferenceService');
    return { port };
  }

  /** Stops accepting calls, lets open ones finish within shutdownGraceMs, then cuts the rest. */
  async stop(): Promise<void> {
    const grpcServer = this.grpcServer;
    if (!grpcServer) return;
    this.grpcServer = undefined;
    const graceMs = this.options.shutdownGraceMs ?? GRPC_DEFAULTS.shutdownGraceMs;
    await new Promise<void>((resolve) => {
      const timer = setTimeout(() => {
        grpcServer.forceShutdown();
        resolve();
      }, graceMs);
      grpcServer.tryShutdown(() => {
        clearTimeout(timer);
        resolve();
      });
    });
  }
}
