/**
 * InferenceClient: one KServe v2 client over HTTP/REST or gRPC, chosen by
 * the URL's scheme. It checks what it is given before sending, applies the
 * default timeout and headers, and retries calls that failed as UNAVAILABLE
 * when asked to. docs/client.md describes it.
 */
import { checkParameters } from './call.js';
import { AbortError, InvalidInputError, isRetryable } from './errors.js';
import { GrpcTransport, grpcAddress } from './grpc.js';
import { HttpTransport } from './http.js';
import { checkSharedMemory, wireInputs } from './tensors.js';
import type { CallContext, Transport, WireRequest } from './transport.js';
import type {
  CallOptions,
  ClientOptions,
  InferRequest,
  InferResult,
  LoadModelOptions,
  LogSettings,
  LogSettingsUpdate,
  ModelConfig,
  ModelMetadata,
  ModelStatistics,
  RepositoryIndexEntry,
  ServerMetadata,
  SharedMemoryStatus,
  TraceSettings,
  TraceSettingsUpdate,
  UnloadModelOptions,
} from './types.js';

interface Backoff {
  readonly attempts: number;
  readonly initialDelay: number;
  readonly maxDelay: number;
}

const NO_OPTIONS: CallOptions = {};

function checkName(what: string, name: unknown): string {
  if (typeof name !== 'string' || name === '')
    throw new InvalidInputError(`${what} must be a non-empty string, not ${JSON.stringify(name)}`);
  return name;
}

function checkVersion(model: string, version: unknown): string {
  if (version === undefined || version === '') return '';
  const text = typeof version === 'number' ? String(version) : version;
  if (typeof text !== 'string' || !/^[0-9]+$/.test(text)) {
    throw new InvalidInputError(
      `version of model '${model}' must be a version number like "1", not ${JSON.stringify(version)}`,
    );
  }
  return text;
}

function checkTimeout(where: string, ms: unknown): number | undefined {
  if (ms === undefined) return undefined;
  if (typeof ms !== 'number' || !Number.isFinite(ms) || ms <= 0)
    throw new InvalidInputError(`${where}: timeout must be a number of milliseconds > 0, not ${String(ms)}`);
  return ms;
}

function sleep(ms: number, signal: AbortSignal | undefined, what: string): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) return reject(new AbortError(what, signal.reason));
    const onAbort = () => {
      clearTimeout(timer);
      reject(new AbortError(what, signal!.reason));
    };
    const timer = setTimeout(() => {
      signal?.removeEventListener('abort', onAbort);
      resolve();
    }, ms);
    signal?.addEventListener('abort', onAbort, { once: true });
  });
}

export class InferenceClient {
  /** The URL the client was made with. */
  readonly url: string;
  readonly protocol: 'http' | 'grpc';
  private readonly transport: Transport;
  private readonly timeout: number | undefined;
  private readonly backoff: Backoff | undefined;
  /** The context of a call that sets no signal, timeout or headers. */
  private readonly defaults: CallContext;

  constructor(options: ClientOptions) {
    if (typeof options !== 'object' || options === null)
      throw new InvalidInputError('InferenceClient needs options: { url }');
    let u: URL;
    try {
      u = new URL(options.url);
    } catch {
      throw new InvalidInputError(
        `url ${JSON.stringify(options.url)} is not a URL like http://localhost:8000 or grpc://localhost:8001`,
      );
    }
    if (options.tensorFormat !== undefined && options.tensorFormat !== 'binary' && options.tensorFormat !== 'json') {
      throw new InvalidInputError(
        `tensorFormat must be "binary" or "json", not ${JSON.stringify(options.tensorFormat)}`,
      );
    }
    if (options.compression !== undefined && options.compression !== 'gzip' && options.compression !== 'deflate') {
      throw new InvalidInputError(
        `compression must be "gzip" or "deflate", not ${JSON.stringify(options.compression)}`,
      );
    }
    if (options.connections !== undefined && (!Number.isSafeInteger(options.connections) || options.connections < 1)) {
      throw new InvalidInputError(`connections must be an integer >= 1, not ${String(options.connections)}`);
    }
    if (!['http:', 'https:', 'grpc:', 'grpcs:'].includes(u.protocol)) {
      throw new InvalidInputError(`url ${JSON.stringify(options.url)}: the scheme must be http, https, grpc or grpcs`);
    }
    if ((u.pathname !== '/' && u.pathname !== '') || u.search !== '' || u.hash !== '') {
      throw new InvalidInputError(
        `url ${JSON.stringify(options.url)} must name only the server (scheme, host and port), no path`,
      );
    }
    this.url = options.url;
    this.timeout = checkTimeout('client options', options.timeout);
    this.backoff = InferenceClient.backoff(options.retry);
    this.defaults = { signal: undefined, timeout: this.timeout, headers: undefined };
    switch (u.protocol) {
      case 'http:':
      case 'https:':
        this.protocol = 'http';
        this.transport = new HttpTransport({
          origin: u.origin,
          connections: options.connections,
          tensorFormat: options.tensorFormat ?? 'binary',
          compression: options.compression,
          headers: options.headers,
          tls: options.tls,
        });
        break;
      case 'grpc:':
      case 'grpcs:':
        if (options.tensorFormat === 'json')
          throw new InvalidInputError('tensorFormat "json" is for HTTP; gRPC always sends raw tensor bytes');
        if (options.compression === 'deflate') throw new InvalidInputError('compression over gRPC is "gzip"');
        this.protocol = 'grpc';
        this.transport = new GrpcTransport({
          address: grpcAddress(`${u.hostname.includes(':') ? `[${u.hostname}]` : u.hostname}:${u.port || '8001'}`),
          secure: u.protocol === 'grpcs:',
          compression: options.compression,
          headers: options.headers,
          tls: options.tls,
        });
        break;
      default:
        throw new InvalidInputError(
          `url ${JSON.stringify(options.url)}: the scheme must be http, https, grpc or grpcs`,
        );
    }
  }

  private static backoff(retry: ClientOptions['retry']): Backoff | undefined {
    if (retry === undefined || retry === false) return undefined;
    const r = retry === true ? {} : retry;
    const attempts = r.attempts ?? 3;
    if (!Number.isSafeInteger(attempts) || attempts < 1)
      throw new InvalidInputError(`retry.attempts must be an integer >= 1, not ${String(attempts)}`);
    const initialDelay = r.initialDelay ?? 50;
    const maxDelay = r.maxDelay ?? 2000;
    for (const [k, v] of [['initialDelay', initialDelay], ['maxDelay', maxDelay]] as const) {
      if (typeof v !== 'number' || !Number.isFinite(v) || v < 0)
        throw new InvalidInputError(`retry.${k} must be a number of milliseconds >= 0`);
    }
    return { attempts, initialDelay, maxDelay };
  }

  private context(o: CallOptions | undefined): CallContext {
    const opts = o ?? NO_OPTIONS;
    // The common call has none of its own: one context object serves them all.
    if (opts.timeout === undefined && opts.signal === undefined && opts.headers === undefined) return this.defaults;
    const timeout = opts.timeout === undefined ? this.timeout : checkTimeout('call options', opts.timeout);
    if (opts.signal !== undefined && !(opts.signal instanceof AbortSignal))
      throw new InvalidInputError('signal must be an AbortSignal');
    return { signal: opts.signal, timeout, headers: opts.headers };
  }

  /** Runs a call, and again after a growing, jittered pause while it fails as UNAVAILABLE (when retries are on). */
  private async run<T>(what: string, c: CallContext, call: () => Promise<T>): Promise<T> {
    const b = this.backoff;
    if (b === undefined) return call();
    for (let attempt = 1; ; attempt++) {
      try {
        return await call();
      } catch (err) {
        if (attempt >= b.attempts || !isRetryable(err)) throw err;
        const delay = Math.min(b.maxDelay, b.initialDelay * 2 ** (attempt - 1));
        await sleep(delay * (0.5 + Math.random() / 2), c.signal, what);
      }
    }
  }

  /** Whether the server is live (GET /v2/health/live, ServerLive). */
  isLive(options?: CallOptions): Promise<boolean> {
    const c = this.context(options);
    return this.run('liveness check', c, () => this.transport.isLive(c));
  }

  /** Whether the server is ready for inference. */
  isReady(options?: CallOptions): Promise<boolean> {
    const c = this.context(options);
    return this.run('readiness check', c, () => this.transport.isReady(c));
  }

  /** Whether a model (a version, or the one the server picks) is ready; false for a model the server does not know. */
  isModelReady(model: string, version?: string, options?: CallOptions): Promise<boolean> {
    checkName('model', model);
    const v = checkVersion(model, version);
    const c = this.context(options);
    return this.run('model readiness check', c, () => this.transport.isModelReady(model, v, c));
  }

  serverMetadata(options?: CallOptions): Promise<ServerMetadata> {
    const c = this.context(options);
    return this.run('server metadata', c, () => this.transport.serverMetadata(c));
  }

  modelMetadata(model: string, version?: string, options?: CallOptions): Promise<ModelMetadata> {
    checkName('model', model);
    const v = checkVersion(model, version);
    const c = this.context(options);
    return this.run('model metadata', c, () => this.transport.modelMetadata(model, v, c));
  }

  /** The configuration in Triton's JSON form (the same object over HTTP and gRPC). */
  modelConfig(model: string, version?: string, options?: CallOptions): Promise<ModelConfig> {
    checkName('model', model);
    const v = checkVersion(model, version);
    const c = this.context(options);
    return this.run('model configuration', c, () => this.transport.modelConfig(model, v, c));
  }

  private wireRequest(r: InferRequest): WireRequest {
    if (typeof r !== 'object' || r === null) throw new InvalidInputError('infer needs a request: { model, inputs }');
    const model = checkName('model', r.model);
    const version = checkVersion(model, r.version);
    if (r.id !== undefined && typeof r.id !== 'string')
      throw new InvalidInputError(`request id must be a string, not ${typeof r.id}`);
    checkParameters(`request for model '${model}'`, r.parameters);
    const inputs = wireInputs(model, r.inputs);
    for (const t of inputs) if (t.parameters !== undefined) checkParameters(`input '${t.name}'`, t.parameters);
    if (r.outputs !== undefined) {
      if (!Array.isArray(r.outputs))
        throw new InvalidInputError(`request for model '${model}': outputs must be an array`);
      const outputs = r.outputs;
      for (let i = 0; i < outputs.length; i++) {
        const o = outputs[i]!;
        const name = o?.name;
        if (typeof name !== 'string' || name === '') checkName(`request for model '${model}': an output's name`, name);
        // A scan rather than a Set: requests name few outputs, and this runs on every call.
        for (let j = 0; j < i; j++) {
          if (outputs[j]!.name === name) throw new InvalidInputError(`output '${name}' is requested twice`);
        }
        if (o.parameters !== undefined) checkParameters(`output '${name}'`, o.parameters);
        if (o.sharedMemory !== undefined) checkSharedMemory(`output '${name}'`, o.sharedMemory);
        if (o.classification !== undefined && (!Number.isSafeInteger(o.classification) || o.classification < 1)) {
          throw new InvalidInputError(`output '${name}': classification must be an integer >= 1 (the top K)`);
        }
      }
    }
    return {
      model,
      version,
      id: r.id ?? '',
      inputs,
      outputs: r.outputs,
      parameters: r.parameters,
      bytesAsStrings: r.bytesAsStrings === true,
    };
  }

  /** Runs one inference; outputs come back as typed arrays of their datatypes. */
  infer(request: InferRequest): Promise<InferResult> {
    let w: WireRequest;
    let c: CallContext;
    try {
      w = this.wireRequest(request);
      c = this.context(request);
    } catch (err) {
      return Promise.reject(err);
    }
    if (this.backoff === undefined) return this.transport.infer(w, c);
    return this.run('inference request', c, () => this.transport.infer(w, c));
  }

  /**
   * The responses to one request as they come, for decoupled models (gRPC
   * ModelStreamInfer; HTTP generate_stream). Stopping the loop early, or the
   * signal, cancels the request on the server. Streams are not retried.
   */
  stream(request: InferRequest): AsyncIterable<InferResult> {
    const w = this.wireRequest(request);
    const c = this.context(request);
    return this.transport.stream(w, c);
  }

  /** The models in the server's repositories, with versions and states. */
  repositoryIndex(options?: CallOptions & { ready?: boolean }): Promise<RepositoryIndexEntry[]> {
    const c = this.context(options);
    const ready = options?.ready ?? false;
    if (typeof ready !== 'boolean') throw new InvalidInputError('repositoryIndex: ready must be a boolean');
    return this.run('repository index', c, () => this.transport.repositoryIndex(ready, c));
  }

  /** Loads (or reloads) a model; `config` and `files` override the repository's. */
  loadModel(model: string, options?: LoadModelOptions): Promise<void> {
    checkName('model', model);
    const c = this.context(options);
    const config =
      options?.config === undefined
        ? undefined
        : typeof options.config === 'string'
          ? options.config
          : JSON.stringify(options.config);
    const files = options?.files;
    if (files !== undefined) {
      if (config === undefined)
        throw new InvalidInputError(`load of model '${model}': files override a model only together with a config`);
      for (const [k, v] of Object.entries(files)) {
        if (!(v instanceof Uint8Array))
          throw new InvalidInputError(`load of model '${model}': file '${k}' must be a Uint8Array`);
      }
    }
    return this.run('model load', c, () => this.transport.loadModel(model, { config, files }, c));
  }

  unloadModel(model: string, options?: UnloadModelOptions): Promise<void> {
    checkName('model', model);
    const c = this.context(options);
    return this.run('model unload', c, () => this.transport.unloadModel(model, options?.unloadDependents === true, c));
  }

  /** Statistics of every model, or of one model (all its versions unless one is named). */
  statistics(model?: string, version?: string, options?: CallOptions): Promise<ModelStatistics[]> {
    if (model !== undefined) checkName('model', model);
    const v = checkVersion(model ?? '', version);
    const c = this.context(options);
    return this.run('statistics', c, () => this.transport.statistics(model ?? '', v, c));
  }

  /** Trace settings, global or as one model sees them. */
  traceSettings(model?: string, options?: CallOptions): Promise<TraceSettings> {
    if (model !== undefined) checkName('model', model);
    const c = this.context(options);
    return this.run('trace settings', c, () => this.transport.traceSettings(model ?? '', undefined, c));
  }

  /** Changes trace settings (null clears a model's override) and returns the settings in effect. */
  updateTraceSettings(settings: TraceSettingsUpdate, model?: string, options?: CallOptions): Promise<TraceSettings> {
    if (typeof settings !== 'object' || settings === null)
      throw new InvalidInputError('updateTraceSettings needs an object of settings');
    if (model !== undefined) checkName('model', model);
    const c = this.context(options);
    return this.run('trace settings', c, () => this.transport.traceSettings(model ?? '', settings, c));
  }

  logSettings(options?: CallOptions): Promise<LogSettings> {
    const c = this.context(options);
    return this.run('log settings', c, () => this.transport.logSettings(undefined, c));
  }

  updateLogSettings(settings: LogSettingsUpdate, options?: CallOptions): Promise<LogSettings> {
    if (typeof settings !== 'object' || settings === null)
      throw new InvalidInputError('updateLogSettings needs an object of settings');
    const c = this.context(options);
    return this.run('log settings', c, () => this.transport.logSettings(settings, c));
  }

  /** Registered system shared-memory regions (all, or the one named). */
  systemSharedMemoryStatus(name?: string, options?: CallOptions): Promise<SharedMemoryStatus[]> {
    if (name !== undefined) checkName('region name', name);
    const c = this.context(options);
    return this.run('shared memory status', c, () => this.transport.systemSharedMemoryStatus(name ?? '', c));
  }

  /** Registers `byteSize` bytes of the shared-memory object `key` (from `offset`) under `name`. */
  registerSystemSharedMemory(
    name: string,
    key: string,
    byteSize: number,
    options?: CallOptions & { offset?: number },
  ): Promise<void> {
    checkName('region name', name);
    checkName('shared memory key', key);
    const offset = options?.offset ?? 0;
    for (const [k, v] of [['byteSize', byteSize], ['offset', offset]] as const) {
      if (!Number.isSafeInteger(v) || v < 0)
        throw new InvalidInputError(`region '${name}': ${k} must be an integer >= 0, not ${String(v)}`);
    }
    const c = this.context(options);
    return this.run('shared memory registration', c, () =>
      this.transport.registerSystemSharedMemory(name, key, byteSize, offset, c),
    );
  }

  /** Unregisters one region, or every region when no name is given. */
  unregisterSystemSharedMemory(name?: string, options?: CallOptions): Promise<void> {
    if (name !== undefined) checkName('region name', name);
    const c = this.context(options);
    return this.run('shared memory unregistration', c, () =>
      this.transport.unregisterSystemSharedMemory(name ?? '', c),
    );
  }

  /** Closes the connections; calls after this fail. */
  close(): Promise<void> {
    return this.transport.close();
  }
}
