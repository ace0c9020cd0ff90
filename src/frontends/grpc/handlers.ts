/**
 * The RPCs of inference.GRPCInferenceService other than the two infer
 * calls, and grpc.health.v1.Health/Check. Each one decodes, calls the
 * ServerApi, and encodes; errors become Triton's gRPC status.
 */
import { create, type DescMessage, type MessageInitShape, type MessageShape } from '@bufbuild/protobuf';
import type { handleUnaryCall, sendUnaryData, ServerUnaryCall } from '@grpc/grpc-js';
import {
  CudaSharedMemoryRegisterResponseSchema,
  CudaSharedMemoryStatusResponseSchema,
  CudaSharedMemoryUnregisterResponseSchema,
  LogSettingsResponseSchema,
  ModelConfigResponseSchema,
  ModelMetadataResponseSchema,
  ModelReadyResponseSchema,
  ModelStatisticsResponseSchema,
  RepositoryIndexResponseSchema,
  RepositoryModelLoadResponseSchema,
  RepositoryModelUnloadResponseSchema,
  ServerLiveResponseSchema,
  ServerMetadataResponseSchema,
  ServerReadyResponseSchema,
  SystemSharedMemoryRegisterResponseSchema,
  SystemSharedMemoryStatusResponseSchema,
  SystemSharedMemoryUnregisterResponseSchema,
  TraceSettingResponseSchema,
  type InferResponseStatisticsSchema,
  type LogSettingsResponse_SettingValueSchema,
  type ModelStatisticsSchema,
  type StatisticDurationSchema,
  type CudaSharedMemoryRegisterRequest,
  type CudaSharedMemoryStatusRequest,
  type CudaSharedMemoryUnregisterRequest,
  type LogSettingsRequest,
  type ModelConfigRequest,
  type ModelMetadataRequest,
  type ModelReadyRequest,
  type ModelStatisticsRequest,
  type RepositoryIndexRequest,
  type RepositoryModelLoadRequest,
  type RepositoryModelUnloadRequest,
  type SystemSharedMemoryRegisterRequest,
  type SystemSharedMemoryStatusRequest,
  type SystemSharedMemoryUnregisterRequest,
  type TraceSettingRequest,
} from '../../gen/grpc_service_pb.js';
import {
  HealthCheckResponse_ServingStatus,
  HealthCheckResponseSchema,
  type HealthCheckRequest,
} from '../../gen/health_pb.js';
import { Errors, NereidError } from '../../errors.js';

/** Errors meaning the model is known but has no version serving: ModelReady answers not-ready. */
const NOT_SERVING = new Set(['NRD_MODEL_NO_VERSIONS', 'NRD_MODEL_VERSION_NOT_READY']);
import type { LoadModelOptions, ServerApi } from '../../core/server-api.js';
import { parseWireVersion } from '../../core/version-string.js';
import type { ModelStatistics, StatDuration } from '../../types/api.js';
import { MalformedMessage } from './service.js';
import type { LogSettingsChange, LogSettingsStore, TraceSettings, TraceSettingsStore } from './settings.js';
import { toServiceError } from './status.js';
import type { AccessControl } from '../../auth/index.js';
import { authorizationOf } from './auth.js';

type Handler<Req, Res> = handleUnaryCall<Req | MalformedMessage, Res>;

/** INVALID_ARGUMENT for bytes that did not decode as the request message. */
export function malformedError(m: MalformedMessage): ReturnType<typeof toServiceError> {
  return toServiceError(Errors.malformedBody(`failed to parse ${m.typeName}: ${m.reason}`));
}

/** Wraps a (possibly async) function of the request as a grpc-js unary handler. */
function unary<Req, O extends DescMessage>(
  fn: (
    request: Req,
    call: ServerUnaryCall<Req | MalformedMessage, MessageShape<O>>,
  ) => MessageShape<O> | Promise<MessageShape<O>>,
): Handler<Req, MessageShape<O>> {
  return (call: ServerUnaryCall<Req | MalformedMessage, MessageShape<O>>, callback: sendUnaryData<MessageShape<O>>) => {
    const request = call.request;
    if (request instanceof MalformedMessage) {
      callback(malformedError(request), null);
      return;
    }
    try {
      const result = fn(request, call);
      if (result instanceof Promise)
        result.then(
          (r) => callback(null, r),
          (e: unknown) => callback(toServiceError(e), null),
        );
      else callback(null, result);
    } catch (e) {
      callback(toServiceError(e), null);
    }
  };
}

/**
 * An empty version string means "let the server choose"; others must be integers > 0 (Triton's INVALID_ARGUMENT
 * otherwise).
 */
const versionArg = (v: string): string | undefined => parseWireVersion(v);

function duration(d: StatDuration | undefined): MessageInitShape<typeof StatisticDurationSchema> {
  return { count: BigInt(d?.count ?? 0), ns: BigInt(d?.ns ?? 0) };
}

function statisticsMessage(s: ModelStatistics): MessageInitShape<typeof ModelStatisticsSchema> {
  const i = s.inference_stats;
  const responseStats: Record<string, MessageInitShape<typeof InferResponseStatisticsSchema>> = {};
  for (const [key, value] of Object.entries(s.response_stats ?? {})) {
    const r = value as Record<string, StatDuration | undefined>;
    responseStats[key] = {
      computeInfer: duration(r.compute_infer),
      computeOutput: duration(r.compute_output),
      success: duration(r.success),
      fail: duration(r.fail),
      emptyResponse: duration(r.empty_response),
      cancel: duration(r.cancel),
    };
  }
  return {
    name: s.name,
    version: s.version,
    lastInference: BigInt(s.last_inference),
    inferenceCount: BigInt(s.inference_count),
    executionCount: BigInt(s.execution_count),
    inferenceStats: {
      success: duration(i.success),
      fail: duration(i.fail),
      queue: duration(i.queue),
      computeInput: duration(i.compute_input),
      computeInfer: duration(i.compute_infer),
      computeOutput: duration(i.compute_output),
      cacheHit: duration(i.cache_hit),
      cacheMiss: duration(i.cache_miss),
    },
    batchStats: s.batch_stats.map((b) => ({
      batchSize: BigInt(b.batch_size),
      computeInput: duration(b.compute_input),
      computeInfer: duration(b.compute_infer),
      computeOutput: duration(b.compute_output),
    })),
    memoryUsage: s.memory_usage.map((m) => ({ type: m.type, id: BigInt(m.id), byteSize: BigInt(m.byte_size) })),
    responseStats,
  };
}

function loadOptions(req: RepositoryModelLoadRequest): LoadModelOptions {
  let config: string | undefined;
  let files: Record<string, Uint8Array> | undefined;
  for (const key in req.parameters) {
    const choice = req.parameters[key]!.parameterChoice;
    if (key === 'config') {
      if (choice.case !== 'stringParam') {
        throw Errors.badParameter(`invalid value type for load parameter '${key}', expected string_param.`);
      }
      config = choice.value;
    } else if (key.startsWith('file:')) {
      if (choice.case !== 'bytesParam') {
        throw Errors.badParameter(`invalid value type for load parameter '${key}', expected bytes_param.`);
      }
      (files ??= {})[key] = choice.value;
    } else {
      throw Errors.badParameter(`unrecognized load parameter '${key}'.`);
    }
  }
  const options: LoadModelOptions = {};
  if (config !== undefined) options.config = config;
  if (files !== undefined) options.files = files;
  return options;
}

function traceChanges(req: TraceSettingRequest): TraceSettings {
  const changes: TraceSettings = {};
  for (const key in req.settings) {
    if (key === 'trace_file') {
      throw Errors.unsupported('trace file location can not be updated through network protocol');
    }
    changes[key] = req.settings[key]!.value;
  }
  return changes;
}

function logChanges(req: LogSettingsRequest): LogSettingsChange {
  const changes: LogSettingsChange = {};
  const s = req.settings;
  if (s['log_file'] !== undefined) {
    throw Errors.unsupported('log file location can not be updated through network protocol');
  }
  for (const key of ['log_info', 'log_warning', 'log_error'] as const) {
    const v = s[key];
    if (v === undefined) continue;
    if (v.parameterChoice.case !== 'boolParam') throw Errors.badParameter(`expect boolean for '${key}'`);
    changes[key] = v.parameterChoice.value;
  }
  const verbose = s['log_verbose_level'];
  if (verbose !== undefined) {
    if (verbose.parameterChoice.case !== 'uint32Param')
      throw Errors.badParameter("expect int32 for 'log_verbose_level'");
    changes.log_verbose_level = verbose.parameterChoice.value;
  }
  const format = s['log_format'];
  if (format !== undefined) {
    if (format.parameterChoice.case !== 'stringParam') throw Errors.badParameter("expect string for 'log_format'");
    const f = format.parameterChoice.value;
    if (f !== 'default' && f !== 'ISO8601' && f !== 'json')
      throw Errors.badParameter(`invalid argument for log_format, got: ${f}`);
    changes.log_format = f;
  }
  return changes;
}

type LogValue = MessageInitShape<typeof LogSettingsResponse_SettingValueSchema>;
const boolSetting = (value: boolean): LogValue => ({ parameterChoice: { case: 'boolParam', value } });

export interface HandlerDeps {
  server: ServerApi;
  traceSettings?: TraceSettingsStore;
  logSettings?: LogSettingsStore;
  /** `--auth-keys`: statistics of every model list only the models in the key's scopes. */
  access?: AccessControl;
}

/** Implementations keyed by RPC name, ready for `server.addService`. */
export function commonHandlers(deps: HandlerDeps): Record<string, Handler<never, never>> {
  const { server, traceSettings, logSettings } = deps;

  const handlers = {
    ServerLive: unary<unknown, typeof ServerLiveResponseSchema>(() =>
      create(ServerLiveResponseSchema, { live: server.isLive() }),
    ),

    ServerReady: unary<unknown, typeof ServerReadyResponseSchema>(() =>
      create(ServerReadyResponseSchema, { ready: server.isReady() }),
    ),

    ModelReady: unary<ModelReadyRequest, typeof ModelReadyResponseSchema>(async (req) => {
      let ready: boolean;
      try {
        ready = await server.modelReady(req.name, versionArg(req.version));
      } catch (err) {
        // A known model with no version serving (never loaded, unloaded, failed) is simply not ready.
        if (!(err instanceof NereidError) || !NOT_SERVING.has(err.code)) throw err;
        ready = false;
      }
      return create(ModelReadyResponseSchema, { ready });
    }),

    ServerMetadata: unary<unknown, typeof ServerMetadataResponseSchema>(() => {
      const m = server.metadata();
      return create(ServerMetadataResponseSchema, { name: m.name, version: m.version, extensions: m.extensions });
    }),

    ModelMetadata: unary<ModelMetadataRequest, typeof ModelMetadataResponseSchema>((req) => {
      const m = server.modelMetadata(req.name, versionArg(req.version));
      const tensor = (t: { name: string; datatype: string; shape: number[] }) => ({
        name: t.name,
        datatype: t.datatype,
        shape: t.shape.map((d) => BigInt(d)),
      });
      return create(ModelMetadataResponseSchema, {
        name: m.name,
        versions: m.versions,
        platform: m.platform,
        inputs: m.inputs.map(tensor),
        outputs: m.outputs.map(tensor),
      });
    }),

    ModelConfig: unary<ModelConfigRequest, typeof ModelConfigResponseSchema>((req) =>
      create(ModelConfigResponseSchema, { config: server.modelConfig(req.name, versionArg(req.version)) }),
    ),

    ModelStatistics: unary<ModelStatisticsRequest, typeof ModelStatisticsResponseSchema>((req, call) => {
      let stats = server.modelStatistics(req.name === '' ? undefined : req.name, versionArg(req.version));
      const inScope =
        req.name === '' ? deps.access?.modelFilter(authorizationOf(call.metadata), 'statistics') : undefined;
      if (inScope !== undefined) stats = stats.filter((s) => inScope(s.name));
      return create(ModelStatisticsResponseSchema, { modelStats: stats.map(statisticsMessage) });
    }),

    RepositoryIndex: unary<RepositoryIndexRequest, typeof RepositoryIndexResponseSchema>(async (req) => {
      const entries = await server.repositoryIndex(
        req.ready,
        req.repositoryName === '' ? undefined : req.repositoryName,
      );
      return create(RepositoryIndexResponseSchema, {
        models: entries.map((e) => ({
          name: e.name,
          version: e.version ?? '',
          state: e.state ?? '',
          reason: e.reason ?? '',
          memoryBytes: BigInt(e.memoryBytes ?? 0),
        })),
      });
    }),

    RepositoryModelLoad: unary<RepositoryModelLoadRequest, typeof RepositoryModelLoadResponseSchema>(async (req) => {
      const options = loadOptions(req);
      if (req.repositoryName !== '') options.repository = req.repositoryName;
      await server.loadModel(req.modelName, options);
      return create(RepositoryModelLoadResponseSchema);
    }),

    RepositoryModelUnload: unary<
      RepositoryModelUnloadRequest,
      typeof RepositoryModelUnloadResponseSchema
    >(async (req) => {
      let unloadDependents = false;
      const p = req.parameters['unload_dependents'];
      if (p !== undefined) {
        if (p.parameterChoice.case !== 'boolParam') {
          throw Errors.badParameter("invalid value type for 'unload_dependents' parameter, expected bool_param.");
        }
        unloadDependents = p.parameterChoice.value;
      }
      await server.unloadModel(req.modelName, {
        unloadDependents,
        ...(req.repositoryName === '' ? {} : { repository: req.repositoryName }),
      });
      return create(RepositoryModelUnloadResponseSchema);
    }),

    // Registering needs --allow-client-shm; status always answers.
    SystemSharedMemoryStatus: unary<SystemSharedMemoryStatusRequest, typeof SystemSharedMemoryStatusResponseSchema>(
      (req) => {
        const regions: Record<string, { name: string; key: string; offset: bigint; byteSize: bigint }> = {};
        for (const r of server.sharedMemory.systemStatus(req.name)) {
          regions[r.name] = { name: r.name, key: r.key, offset: BigInt(r.offset), byteSize: BigInt(r.byte_size) };
        }
        return create(SystemSharedMemoryStatusResponseSchema, { regions });
      },
    ),
    SystemSharedMemoryRegister: unary<
      SystemSharedMemoryRegisterRequest,
      typeof SystemSharedMemoryRegisterResponseSchema
    >((req) => {
      if (!server.sharedMemory.allowed) throw Errors.clientShmDisabled();
      server.sharedMemory.registerSystem(req.name, req.key, Number(req.offset), Number(req.byteSize));
      return create(SystemSharedMemoryRegisterResponseSchema);
    }),
    SystemSharedMemoryUnregister: unary<
      SystemSharedMemoryUnregisterRequest,
      typeof SystemSharedMemoryUnregisterResponseSchema
    >((req) => {
      server.sharedMemory.unregister('system', req.name);
      return create(SystemSharedMemoryUnregisterResponseSchema);
    }),

    // No GPU support: CUDA regions can never exist.
    CudaSharedMemoryStatus: unary<CudaSharedMemoryStatusRequest, typeof CudaSharedMemoryStatusResponseSchema>((req) => {
      server.sharedMemory.cudaStatus(req.name);
      return create(CudaSharedMemoryStatusResponseSchema);
    }),
    CudaSharedMemoryRegister: unary<CudaSharedMemoryRegisterRequest, typeof CudaSharedMemoryRegisterResponseSchema>(
      (req) => {
        // Triton's gRPC frontend built without CUDA answers this whatever --allow-client-shm says.
        throw Errors.cudaShmNoGpu(req.name);
      },
    ),
    CudaSharedMemoryUnregister: unary<
      CudaSharedMemoryUnregisterRequest,
      typeof CudaSharedMemoryUnregisterResponseSchema
    >((req) => {
      server.sharedMemory.unregister('cuda', req.name);
      return create(CudaSharedMemoryUnregisterResponseSchema);
    }),

    TraceSetting: unary<TraceSettingRequest, typeof TraceSettingResponseSchema>(async (req) => {
      if (!traceSettings) throw Errors.traceUnsupported();
      const model = req.modelName === '' ? undefined : req.modelName;
      if (model !== undefined && !(await server.modelReady(model))) {
        throw Errors.traceUnknownModel(model);
      }
      const changes = traceChanges(req);
      const current = Object.keys(changes).length > 0 ? traceSettings.update(model, changes) : traceSettings.get(model);
      const settings: Record<string, { value: string[] }> = {};
      for (const key in current) settings[key] = { value: current[key]! };
      return create(TraceSettingResponseSchema, { settings });
    }),

    LogSettings: unary<LogSettingsRequest, typeof LogSettingsResponseSchema>((req) => {
      if (!logSettings) throw Errors.loggingUnsupported();
      const known = logSettings.get();
      for (const key in req.settings) {
        // Triton passes over a key it does not know; refused here, naming it.
        if (!Object.hasOwn(known, key)) throw Errors.unknownLogSetting(key);
      }
      const changes = logChanges(req);
      const s = Object.keys(changes).length > 0 ? logSettings.update(changes) : logSettings.get();
      const settings: Record<string, LogValue> = {
        log_file: { parameterChoice: { case: 'stringParam', value: s.log_file } },
        log_info: boolSetting(s.log_info),
        log_warning: boolSetting(s.log_warning),
        log_error: boolSetting(s.log_error),
        log_verbose_level: { parameterChoice: { case: 'uint32Param', value: s.log_verbose_level } },
        log_format: { parameterChoice: { case: 'stringParam', value: s.log_format } },
      };
      return create(LogSettingsResponseSchema, { settings });
    }),
  };
  return handlers as unknown as Record<string, Handler<never, never>>;
}

/** grpc.health.v1.Health: SERVING exactly when the server is ready (the service name is ignored). */
export function healthHandlers(server: ServerApi): Record<string, Handler<never, never>> {
  const check = unary<HealthCheckRequest, typeof HealthCheckResponseSchema>(() =>
    create(HealthCheckResponseSchema, {
      status: server.isReady()
        ? HealthCheckResponse_ServingStatus.SERVING
        : HealthCheckResponse_ServingStatus.NOT_SERVING,
    }),
  );
  return { Check: check } as unknown as Record<string, Handler<never, never>>;
}
