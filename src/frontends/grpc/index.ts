/**
 * The gRPC frontend: Triton's inference.GRPCInferenceService, the standard
 * health service and server reflection, served with @grpc/grpc-js over
 * the same ServerApi as the HTTP frontend.
 */
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
} from './options.js';
import { addReflection } from './reflection.js';
import { authInterceptor, dropForwardedPeerInterceptor, inferKeyCheck } from './auth.js';
import { compileHeaderForwardPattern } from '../header-forward.js';
import { parseRestrictedProtocols, restrictionInterceptor } from './restrictions.js';
import { serviceDefinition } from './service.js';
import { credentialsFor } from './credentials.js';
import {
  effectiveThreads,
  FrontendBridge,
  FrontendThreadPool,
  frontendThreadsFromEnv,
  internalSocketPath,
  ListenFailure,
  removeSocket,
  type GrpcThreadOptions,
} from '../threads/index.js';
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

export class GrpcFrontend {
  private readonly options: GrpcFrontendOptions;
  private readonly logger: Logger;
  private grpcServer: Server | undefined;
  private pool: FrontendThreadPool | undefined;
  private socketPath: string | undefined;

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
    const threads = effectiveThreads(o.threads ?? frontendThreadsFromEnv(1), this.logger, o.canReusePort);
    // Without restricted protocols ModelInfer's handler checks the key itself (a restriction is checked first).
    const keyCheck =
      o.access !== undefined && restrictions.size === 0 ? inferKeyCheck(o.access, threads > 1) : undefined;
    const byHandler = new Set(keyCheck === undefined ? [] : ['ModelInfer']);
    if (o.access !== undefined) interceptors.push(authInterceptor(o.access, threads > 1, byHandler));
    else if (threads > 1) interceptors.push(dropForwardedPeerInterceptor());
    const headerPattern = o.headerForwardPattern ? compileHeaderForwardPattern(o.headerForwardPattern) : undefined;

    const grpcServer = new Server({ ...channelOptionsFor(o), interceptors });
    const implementation: UntypedServiceImplementation = {
      ...commonHandlers({
        server: this.server,
        traceSettings: o.traceSettings ?? o.tracer?.settings,
        logSettings: o.logSettings,
        access: o.access,
      }),
      ModelInfer: modelInferHandler(this.server, headerPattern, o.tracer, keyCheck, threads > 1),
      ModelStreamInfer: modelStreamInferHandler(this.server, this.logger, headerPattern, o.tracer),
    } as unknown as UntypedServiceImplementation;
    grpcServer.addService(inferenceServiceDefinition, implementation);
    grpcServer.addService(
      healthServiceDefinition,
      healthHandlers(this.server) as unknown as UntypedServiceImplementation,
    );
    addReflection(grpcServer);

    if (threads > 1) this.socketPath = internalSocketPath('grpc');
    const address =
      this.socketPath !== undefined
        ? `unix:${this.socketPath}`
        : bindAddress(o.address ?? GRPC_DEFAULTS.address, o.port ?? GRPC_DEFAULTS.port);
    let port = await new Promise<number>((resolve, reject) => {
      // The threads' own link to this server is a Unix socket of this process: no TLS there.
      const own = this.socketPath !== undefined ? ServerCredentials.createInsecure() : credentials;
      grpcServer.bindAsync(address, own, (err, bound) => {
        if (!err) resolve(bound);
        else {
          grpcServer.forceShutdown();
          const why = err.message.includes('EADDRINUSE') ? `Socket '${address}' already in use` : err.message;
          reject(Errors.config(`failed to start GRPC service: ${why}`));
        }
      });
    });
    this.grpcServer = grpcServer;
    if (this.socketPath !== undefined) port = await this.startThreads(threads, this.socketPath);
    const publicAddress = bindAddress(o.address ?? GRPC_DEFAULTS.address, o.port ?? GRPC_DEFAULTS.port);
    this.logger.info({ address: publicAddress, port, threads }, 'Started GRPCInferenceService');
    return { port };
  }

  /** The frontend's threads (undefined with one thread), for tests. */
  get threads(): FrontendThreadPool | undefined {
    return this.pool;
  }

  private async startThreads(threads: number, socketPath: string): Promise<number> {
    const o = this.options;
    const own: GrpcThreadOptions = {
      compressionLevel: o.compressionLevel,
      keepaliveTimeMs: o.keepaliveTimeMs,
      keepaliveTimeoutMs: o.keepaliveTimeoutMs,
      keepalivePermitWithoutCalls: o.keepalivePermitWithoutCalls,
      http2MaxPingsWithoutData: o.http2MaxPingsWithoutData,
      http2MinRecvPingIntervalWithoutDataMs: o.http2MinRecvPingIntervalWithoutDataMs,
      http2MaxPingStrikes: o.http2MaxPingStrikes,
      maxConnectionAgeMs: o.maxConnectionAgeMs,
      maxConnectionAgeGraceMs: o.maxConnectionAgeGraceMs,
      ssl: o.ssl,
      headerForwardPattern: o.headerForwardPattern,
      forwardAll: (o.restrictedProtocols ?? []).length > 0,
    };
    const address = (o.address ?? GRPC_DEFAULTS.address).replace(/^ipv[46]:/, '').replace(/^\[(.*)\]$/, '$1');
    this.pool = new FrontendThreadPool(
      { kind: 'grpc', port: o.port ?? GRPC_DEFAULTS.port, address, upstream: socketPath, grpc: own },
      threads,
      this.logger,
      new FrontendBridge(this.server, o.tracer, o.access, 'grpc'),
    );
    try {
      return await this.pool.start();
    } catch (err) {
      await this.stop();
      if (err instanceof ListenFailure) {
        const why =
          err.code === 'EADDRINUSE' ? `Socket '${bindAddress(address, o.port ?? 0)}' already in use` : err.message;
        throw Errors.config(`failed to start GRPC service: ${why}`);
      }
      throw err;
    }
  }

  /** Stops accepting calls, lets open ones finish within shutdownGraceMs, then cuts the rest. */
  async stop(): Promise<void> {
    const grpcServer = this.grpcServer;
    if (!grpcServer) return;
    this.grpcServer = undefined;
    const graceMs = this.options.shutdownGraceMs ?? GRPC_DEFAULTS.shutdownGraceMs;
    const pool = this.pool;
    this.pool = undefined;
    if (pool !== undefined) await pool.stop(graceMs);
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
    removeSocket(this.socketPath);
  }
}
