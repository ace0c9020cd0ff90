/**
 * The KServe v2 HTTP frontend with Triton's extensions, on node:http.
 *
 * Routing follows Triton's: one table of full paths (`addRoutes`), no
 * percent-decoding, 404 "Not Found" for anything else. The table gives each
 * route its API category and methods, and the dispatcher applies
 * `--http-restricted-api` (403) and then the method (405 "Method Not
 * Allowed" for a known path with the wrong method) once, before the handler.
 */
import { Cancellation } from '../../types/cancellation.js';
import http, { type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { Logger } from 'pino';
import { Errors, NereidError } from '../../errors.js';
import type { ServerApi } from '../../core/server-api.js';
import { RequestSharedMemory } from '../../core/shared-memory.js';
import { parseWireVersion } from '../../core/version-string.js';
import { headerValue, inflateBody, readBody, requestEncoding } from './body.js';
import { answerClientError } from './client-error.js';
import { compressBody, negotiateResponseEncoding } from './compression.js';
import { type DecodedInfer, decodeInferBody, decodeRawInfer } from './infer-decode.js';
import { type EncodedInferResponse, encodeInferResponse } from './infer-encode.js';
import { CacheReplies, MAX_REPLY_BYTES, type RequestKey } from './cache-replay.js';
import type { CacheHitTicket } from '../../types/api.js';
import { parseJsonBytes } from './json-parse.js';
import { generateResponseJson, mapGenerateRequest } from './generate.js';
import { streamResponses } from '../../core/response-stream.js';
import { Replier } from './reply.js';
import { Router, type RouteParams } from './router.js';
import type { AccessControl } from '../../auth/index.js';
import { refuseHttp } from './auth.js';
import { LogSettings, TraceSettings, stoi } from './settings.js';
import type { Trace, Tracer } from '../../trace/index.js';
import {
  type HttpApiCategory,
  type Restriction,
  compileHeaderForwardPattern,
  forwardHeaders,
  parseRestrictedApis,
} from './restrictions.js';

export interface HttpFrontendOptions {
  port: number;
  address: string;
  /** --http-max-input-size: bound on request bodies and on each JSON tensor (default 64 MiB). */
  maxInputSize: number;
  logger: Logger;
  /** Shared with the gRPC frontend when given. */
  logSettings?: LogSettings;
  traceSettings?: TraceSettings;
  /** Samples and records traces of infer requests; its settings answer the trace extension. */
  tracer?: Tracer;
  /** `--http-restricted-api` values: `<api>,<api>...:<header>=<value>`. */
  restrictedApis?: readonly string[];
  /** `--http-header-forward-pattern`: matching headers become request parameters. */
  headerForwardPattern?: string;
  /** Answers every path under /v1 (the OpenAI-compatible frontend). */
  v1?: (req: IncomingMessage, res: ServerResponse, path: string) => void;
  /** `--auth-keys`: requests need a key whose scopes open the route's group (and the model in its path). */
  access?: AccessControl;
}

export const DEFAULT_MAX_INPUT_SIZE = 64 * 1024 * 1024;

/** One entry of the route table: the API group `--http-restricted-api` names, the methods, the handler. */
interface HttpRoute {
  readonly category: HttpApiCategory;
  readonly methods: readonly string[];
  readonly handle: (req: IncomingMessage, res: ServerResponse, params: RouteParams) => Promise<void> | void;
}

const GET: readonly string[] = ['GET'];
const POST: readonly string[] = ['POST'];
const GET_POST: readonly string[] = ['GET', 'POST'];

const METHOD_NOT_ALLOWED = 405;
const NOT_FOUND = 404;
const JSON_TYPE = 'application/json';

type JsonObject = Record<string, unknown>;

function jsonUint(v: unknown): number {
  if (typeof v === 'number' && Number.isInteger(v) && v >= 0) return v;
  if (typeof v === 'bigint' && v >= 0n) return Number(v);
  throw Errors.jsonValue('attempt to access JSON non-unsigned-integer as unsigned-integer');
}

function isObject(v: unknown): v is JsonObject {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

/** Version from the URL: '' = let the server choose; "007" means 7; "-1", "0" or "x" are Triton's INVALID_ARG. */
function parseVersion(_model: string, text: string | undefined): string | undefined {
  return parseWireVersion(text);
}

/** Inference-Header-Content-Length, parsed like std::stoi and range-checked against the body. */
export function inferHeaderLength(raw: string | undefined, contentLength: number): number {
  if (raw === undefined) return contentLength;
  const v = stoi(raw);
  if (v === 'invalid') throw Errors.malformedBody(`Unable to parse Inference-Header-Content-Length, got: ${raw}`);
  if (v === 'range') {
    throw Errors.malformedBody(
      `Unable to parse Inference-Header-Content-Length, value is out of range [ -2147483648, 2147483647 ], got: ${raw}`,
    );
  }
  if (v < 0 || v > contentLength) {
    throw Errors.malformedBody(`inference header size should be in range (0, ${contentLength}), got: ${raw}`);
  }
  return v;
}

export class HttpFrontend {
  private readonly httpServer: http.Server;
  private readonly reply = new Replier();
  private readonly logSettings: LogSettings;
  private readonly traceSettings: TraceSettings;
  private readonly tracer: Tracer | undefined;
  private readonly maxInputSize: number;
  private readonly logger: Logger;
  private readonly restrictions: ReadonlyMap<HttpApiCategory, Restriction>;
  private readonly forwardPattern: RegExp | undefined;
  private readonly routes = new Router<HttpRoute>();
  private readonly replies = new CacheReplies();
  private closed: Promise<void> | undefined;

  constructor(
    private readonly server: ServerApi,
    private readonly options: HttpFrontendOptions,
  ) {
    this.maxInputSize = options.maxInputSize > 0 ? options.maxInputSize : DEFAULT_MAX_INPUT_SIZE;
    this.logger = options.logger;
    this.logSettings = options.logSettings ?? new LogSettings();
    this.tracer = options.tracer;
    this.traceSettings = options.traceSettings ?? options.tracer?.settings ?? new TraceSettings();
    this.restrictions = parseRestrictedApis(options.restrictedApis ?? []);
    this.forwardPattern =
      options.headerForwardPattern === undefined || options.headerForwardPattern === ''
        ? undefined
        : compileHeaderForwardPattern(options.headerForwardPattern);
    this.addRoutes();
    this.httpServer = http.createServer({ keepAlive: true, noDelay: true }, (req, res) => this.onRequest(req, res));
    this.httpServer.on('clientError', answerClientError);
    // Outlive common load-balancer idle timeouts (60 s) so they close first.
    this.httpServer.keepAliveTimeout = 65_000;
    this.httpServer.headersTimeout = 66_000;
  }

  start(): Promise<{ port: number }> {
    return new Promise((resolve, reject) => {
      const onError = (err: NodeJS.ErrnoException): void =>
        reject(err.code === 'EADDRINUSE' ? Errors.socketInUse(this.options.address, this.options.port) : err);
      this.httpServer.once('error', onError);
      this.httpServer.listen(this.options.port, this.options.address, () => {
        this.httpServer.off('error', onError);
        const port = (this.httpServer.address() as AddressInfo).port;
        this.logger.info({ address: this.options.address, port }, 'Started HTTPService');
        resolve({ port });
      });
    });
  }

  /** From now on every response closes its connection, so keep-alive clients reconnect (to another replica). */
  drain(): void {
    this.reply.closing = true;
  }

  /** Stops accepting connections; requests in flight finish, then their connections close. */
  stop(): Promise<void> {
    if (this.closed !== undefined) return this.closed;
    this.reply.closing = true;
    this.closed = new Promise<void>((resolve) => {
      if (!this.httpServer.listening) {
        resolve();
        return;
      }
      this.httpServer.close(() => resolve());
      this.httpServer.closeIdleConnections();
    });
    return this.closed;
  }

  private onRequest(req: IncomingMessage, res: ServerResponse): void {
    const url = req.url ?? '/';
    const q = url.indexOf('?');
    const path = q === -1 ? url : url.slice(0, q);
    if (this.options.v1 !== undefined && (path === '/v1' || path.startsWith('/v1/'))) {
      if (this.reply.closing) res.shouldKeepAlive = false;
      return this.options.v1(req, res, path);
    }
    let pending: Promise<void> | void;
    try {
      pending = this.route(req, res, path);
    } catch (err) {
      this.fail(res, err);
      return;
    }
    if (pending !== undefined) pending.catch((err: unknown) => this.fail(res, err));
  }

  private fail(res: ServerResponse, err: unknown): void {
    if (err instanceof NereidError) {
      // A refused oversized body is left unread: do not keep reading it on this connection.
      if (err.code === 'NRD_BODY_TOO_LARGE' || err.code === 'NRD_TOO_MANY_CHUNKS') res.shouldKeepAlive = false;
    } else if (res.destroyed) {
      this.logger.debug({ err }, 'HTTP client went away');
    } else {
      this.logger.error({ err }, 'HTTP request failed unexpectedly');
    }
    this.reply.error(res, err);
  }

  /** Answers 403 and returns true when `category` is restricted and the request lacks the header. */
  private restricted(req: IncomingMessage, res: ServerResponse, category: HttpApiCategory): boolean {
    if (this.restrictions.size === 0) return false;
    const r = this.restrictions.get(category);
    if (r === undefined || headerValue(req, r.headerKey) === r.value) return false;
    this.reply.errorText(res, 403, `This API is restricted, expecting header '${r.header}'`);
    return true;
  }

  private notAllowed(res: ServerResponse): void {
    this.reply.errorText(res, METHOD_NOT_ALLOWED, 'Method Not Allowed');
  }

  private route(req: IncomingMessage, res: ServerResponse, path: string): Promise<void> | void {
    const found = this.routes.match(path);
    if (found === undefined) return this.reply.errorText(res, NOT_FOUND, 'Not Found');
    const route = found.route;
    const access = this.options.access;
    if (access !== undefined && refuseHttp(access, this.reply, req, res, route.category, found.params['model'])) return;
    if (this.restricted(req, res, route.category)) return;
    if (!route.methods.includes(req.method ?? '')) return this.notAllowed(res);
    return route.handle(req, res, found.params);
  }

  /** Triton's endpoints: each path once, with its API category and methods. */
  private addRoutes(): void {
    const route = (category: HttpApiCategory, methods: readonly string[], handle: HttpRoute['handle']): HttpRoute => ({
      category,
      methods,
      handle,
    });
    const model = (p: RouteParams): string => p['model']!;
    this.routes
      .add('/v2', route('metadata', GET, (_req, res) => this.handleServerMetadata(res)))
      .add('/v2/health/live', route('health', GET, (_req, res) => this.handleHealth(res, 'live')))
      .add('/v2/health/ready', route('health', GET, (_req, res) => this.handleHealth(res, 'ready')))
      .add('/v2/models/stats', route('statistics', GET, (req, res) => this.handleStats(res, '', undefined, req)))
      .add(
        '/v2/models/:model[/versions/:version]',
        route('metadata', GET, (_req, res, p) => this.handleModelMetadata(res, model(p), p['version'])),
      )
      .add(
        '/v2/models/:model[/versions/:version]/ready',
        route('health', GET, (_req, res, p) => this.handleModelReady(res, model(p), p['version'])),
      )
      .add(
        '/v2/models/:model[/versions/:version]/config',
        route('model-config', GET, (_req, res, p) => this.handleModelConfig(res, model(p), p['version'])),
      )
      .add(
        '/v2/models/:model[/versions/:version]/stats',
        route('statistics', GET, (_req, res, p) => this.handleStats(res, model(p), p['version'])),
      )
      .add(
        '/v2/models/:model[/versions/:version]/infer',
        route('inference', POST, (req, res, p) => this.admitInfer(req, res, model(p), p['version'])),
      )
      .add(
        '/v2/models/:model[/versions/:version]/generate',
        route('inference', POST, (req, res, p) => this.handleGenerate(req, res, model(p), p['version'], false)),
      )
      .add(
        '/v2/models/:model[/versions/:version]/generate_stream',
        route('inference', POST, (req, res, p) => this.handleGenerate(req, res, model(p), p['version'], true)),
      )
      .add(
        '/v2/models/:model/trace/setting',
        route('trace', GET_POST, (req, res, p) => this.handleTrace(req, res, model(p))),
      )
      .add('/v2/trace/setting', route('trace', GET_POST, (req, res) => this.handleTrace(req, res, '')))
      .add('/v2/logging', route('logging', GET_POST, (req, res) => this.handleLogging(req, res)))
      .add(
        '/v2/repository[/:repository]/index',
        route('model-repository', POST, (req, res, p) => this.handleRepositoryIndex(req, res, p['repository'] ?? '')),
      )
      .add(
        '/v2/repository[/:repository]/models/:model/load',
        route('model-repository', POST, (req, res, p) =>
          this.handleRepositoryControl(req, res, p['repository'] ?? '', model(p), 'load'),
        ),
      )
      .add(
        '/v2/repository[/:repository]/models/:model/unload',
        route('model-repository', POST, (req, res, p) =>
          this.handleRepositoryControl(req, res, p['repository'] ?? '', model(p), 'unload'),
        ),
      );
    for (const kind of ['system', 'cuda'] as const) {
      for (const action of ['status', 'register', 'unregister'] as const) {
        this.routes.add(
          `/v2/${kind}sharedmemory[/region/:region]/${action}`,
          route('shared-memory', action === 'status' ? GET : POST, (req, res, p) =>
            this.handleSharedMemory(req, res, kind, p['region'] ?? '', action),
          ),
        );
      }
    }
  }

  // --- health and metadata -------------------------------------------------

  private handleHealth(res: ServerResponse, kind: string): void {
    const ok = kind === 'live' ? this.server.isLive() : this.server.isReady();
    this.reply.empty(res, ok ? 200 : 400);
  }

  private handleServerMetadata(res: ServerResponse): void {
    const md = this.server.metadata();
    this.reply.json(res, 200, JSON.stringify({ name: md.name, version: md.version, extensions: md.extensions }));
  }

  private async handleModelReady(res: ServerResponse, model: string, versionText: string | undefined): Promise<void> {
    const ready = await this.server.modelReady(model, parseVersion(model, versionText));
    if (ready) this.reply.empty(res, 200);
    else this.reply.errorText(res, 400, 'Model version not ready');
  }

  private handleModelMetadata(res: ServerResponse, model: string, versionText: string | undefined): void {
    const md = this.server.modelMetadata(model, parseVersion(model, versionText));
    const tensors = (list: typeof md.inputs) =>
      list.map((t) => ({ name: t.name, datatype: t.datatype, shape: t.shape }));
    const body = JSON.stringify({
      name: md.name,
      versions: md.versions,
      platform: md.platform,
      inputs: tensors(md.inputs),
      outputs: tensors(md.outputs),
    });
    this.reply.json(res, 200, body);
  }

  private handleModelConfig(res: ServerResponse, model: string, versionText: string | undefined): void {
    this.reply.json(res, 200, JSON.stringify(this.server.modelConfigJson(model, parseVersion(model, versionText))));
  }

  /** With `req` (every model's statistics) and keys, only the models in the key's scopes. */
  private handleStats(
    res: ServerResponse,
    model: string,
    versionText: string | undefined,
    req?: IncomingMessage,
  ): void {
    const version = parseVersion(model, versionText);
    let stats = this.server.modelStatistics(model === '' ? undefined : model, version);
    const inScope =
      req === undefined ? undefined : this.options.access?.modelFilter(req.headers.authorization, 'statistics');
    if (inScope !== undefined) stats = stats.filter((s) => inScope(s.name));
    this.reply.json(res, 200, JSON.stringify({ model_stats: stats }));
  }

  // --- model repository ----------------------------------------------------

  /** Reads and parses an optional JSON body (undefined when empty). */
  private async readJson(req: IncomingMessage, allowEmpty: boolean): Promise<unknown> {
    const body = await readBody(req, this.maxInputSize);
    if (body.byteLength === 0 && !allowEmpty) return undefined;
    return parseJsonBytes(body);
  }

  private async handleRepositoryIndex(req: IncomingMessage, res: ServerResponse, repository: string): Promise<void> {
    const doc = await this.readJson(req, false);
    let readyOnly = false;
    if (isObject(doc) && doc['ready'] !== undefined) {
      if (typeof doc['ready'] !== 'boolean')
        throw Errors.malformedBody("Invalid value for 'ready': expected a boolean");
      readyOnly = doc['ready'];
    }
    const index = await this.server.repositoryIndex(readyOnly, repository === '' ? undefined : repository);
    const entries = index.map((e) => {
      const entry: Record<string, string> = { name: e.name };
      if (e.version !== undefined) entry['version'] = e.version;
      if (e.state !== undefined) entry['state'] = e.state;
      if (e.reason !== undefined && e.reason !== '') entry['reason'] = e.reason;
      return entry;
    });
    this.reply.json(res, 200, JSON.stringify(entries));
  }

  private async handleRepositoryControl(
    req: IncomingMessage,
    res: ServerResponse,
    repository: string,
    model: string,
    action: string,
  ): Promise<void> {
    const doc = await this.readJson(req, false);
    const scope = repository === '' ? {} : { repository };
    if (action === 'load') {
      let config: string | undefined;
      let files: Record<string, Uint8Array> | undefined;
      const params = isObject(doc) ? doc['parameters'] : undefined;
      if (params !== undefined) {
        if (!isObject(params)) throw Errors.jsonValue('attempt to access JSON non-object as object');
        for (const key of Object.keys(params)) {
          const value = params[key];
          if (typeof value !== 'string') throw Errors.jsonValue('attempt to access JSON non-string as string');
          if (key === 'config') {
            config = value;
          } else if (key.startsWith('file:')) {
            files ??= {};
            files[key] = Buffer.from(value, 'base64');
          } else {
            throw Errors.internal('unexpected error on creating Triton parameter');
          }
        }
      }
      await this.server.loadModel(
        model,
        config === undefined && files === undefined && repository === '' ? undefined : { config, files, ...scope },
      );
    } else {
      let unloadDependents = false;
      const params = isObject(doc) ? doc['parameters'] : undefined;
      // Like Triton, a non-boolean value is ignored rather than reported.
      if (isObject(params) && params['unload_dependents'] === true) unloadDependents = true;
      await this.server.unloadModel(model, { unloadDependents, ...scope });
    }
    this.reply.empty(res, 200, JSON_TYPE);
  }

  // --- shared memory (registration needs --allow-client-shm; status always answers) ----

  private async handleSharedMemory(
    req: IncomingMessage,
    res: ServerResponse,
    kind: 'system' | 'cuda',
    region: string,
    action: string,
  ): Promise<void> {
    const shm = this.server.sharedMemory;
    if (action === 'status') {
      const status = kind === 'system' ? shm.systemStatus(region) : shm.cudaStatus(region);
      this.reply.json(res, 200, JSON.stringify(status));
      return;
    }
    if (action === 'unregister') {
      shm.unregister(kind, region);
      this.reply.empty(res, 200, JSON_TYPE);
      return;
    }
    if (!shm.allowed) throw Errors.clientShmDisabled();
    if (region === '') throw Errors.badParameter(`'region name' is necessary to register ${kind} shared memory region`);
    if (kind === 'cuda') {
      shm.registerCuda(region, 0, 0);
      return;
    }
    const doc = await this.readJson(req, true);
    const body: JsonObject = isObject(doc) ? doc : {};
    if (body['key'] === undefined) throw Errors.badParameter("Shared memory register request has no 'key' field");
    const key = body['key'];
    if (typeof key !== 'string') throw Errors.jsonValue('attempt to access JSON non-string as string');
    const offset = body['offset'] === undefined ? 0 : jsonUint(body['offset']);
    if (body['byte_size'] === undefined)
      throw Errors.badParameter("Shared memory register request has no 'byte_size' field");
    const byteSize = jsonUint(body['byte_size']);
    shm.registerSystem(region, key, offset, byteSize);
    this.reply.empty(res, 200, JSON_TYPE);
  }

  // --- trace and logging ---------------------------------------------------

  private async handleTrace(req: IncomingMessage, res: ServerResponse, model: string): Promise<void> {
    if (model !== '') {
      const ready = await this.server.modelReady(model);
      if (!ready) throw Errors.traceUnknownModel(model);
    }
    if (req.method === 'POST') this.traceSettings.updateFromJson(model, await this.readJson(req, true));
    this.reply.json(res, 200, this.traceSettings.toJson(model));
  }

  private async handleLogging(req: IncomingMessage, res: ServerResponse): Promise<void> {
    if (req.method === 'POST') this.logSettings.updateFromJson(await this.readJson(req, true));
    this.reply.json(res, 200, this.logSettings.toJson());
  }

  // --- inference -----------------------------------------------------------

  /**
   * The checks of an infer made before its body is read, synchronously: a
   * refusal (unknown model, full queue) is written from here without a
   * promise, so shedding load costs no copy, decode or extra turn.
   */
  private admitInfer(
    req: IncomingMessage,
    res: ServerResponse,
    model: string,
    versionText: string | undefined,
  ): Promise<void> | undefined {
    const version = parseVersion(model, versionText);
    // Resolves the model first (unknown model -> 404 before the body is looked at), as Triton does.
    const config = this.server.modelConfig(model, version);
    if (config.modelTransactionPolicy?.decoupled === true) {
      throw Errors.decoupledNotSupported("HTTP end point doesn't support models with decoupled transaction policy");
    }
    const refused = this.server.admissionError?.(model, version);
    if (refused !== undefined) {
      this.reply.error(res, refused);
      return undefined;
    }
    return this.handleInfer(req, res, model, version, config);
  }

  private handleInfer(
    req: IncomingMessage,
    res: ServerResponse,
    model: string,
    version: string | undefined,
    config: ReturnType<ServerApi['modelConfig']>,
  ): Promise<void> {
    const tracer = this.tracer;
    if (tracer !== undefined && tracer.enabled) {
      const trace = sampleRequest(tracer, model, req, res);
      if (trace !== undefined) return this.tracedInfer(req, res, model, version, config, trace);
    }
    return this.inferBody(req, res, model, version, config, undefined);
  }

  private async tracedInfer(
    req: IncomingMessage,
    res: ServerResponse,
    model: string,
    version: string | undefined,
    config: ReturnType<ServerApi['modelConfig']>,
    trace: Trace,
  ): Promise<void> {
    try {
      await this.inferBody(req, res, model, version, config, trace);
    } catch (err) {
      trace.stamp('HTTP_SEND_START'); // the error reply follows
      throw err;
    }
  }

  private async inferBody(
    req: IncomingMessage,
    res: ServerResponse,
    model: string,
    version: string | undefined,
    config: ReturnType<ServerApi['modelConfig']>,
    trace: Trace | undefined,
  ): Promise<void> {
    const encoding = requestEncoding(req);
    if (encoding === 'unknown') {
      trace?.stamp('HTTP_SEND_START');
      this.reply.errorText(res, 501, 'Unsupported compression type', ['Accept-Encoding', 'gzip, deflate']);
      return;
    }
    let body = await readBody(req, this.maxInputSize, true);
    if (encoding !== 'identity') body = await inflateBody(body, this.maxInputSize);
    const inferHeader = headerValue(req, 'inference-header-content-length');
    // A request answered from the response cache before, sent again: its reply as written then.
    // Only models that cache pay for the key (a hash over the body).
    const replayKey =
      config.responseCache?.enable === true &&
      encoding === 'identity' &&
      negotiateResponseEncoding(headerValue(req, 'accept-encoding')) === 'identity'
        ? this.replies.keyOf(req, model, version, inferHeader, this.forwardPattern, body)
        : undefined;
    // A traced request runs through the core, whose cache then records the hit in the trace.
    if (replayKey !== undefined && trace === undefined && this.replayCacheHit(res, replayKey, model, version)) return;

    const headerLength = inferHeaderLength(inferHeader, body.byteLength);
    const decoded =
      headerLength === 0 ? decodeRawInfer(body, config) : decodeInferBody(body, headerLength, model, this.maxInputSize);
    trace?.stamp('HTTP_RECV_END');

    const parameters =
      this.forwardPattern === undefined
        ? decoded.parameters
        : forwardHeaders(req, this.forwardPattern, decoded.parameters);
    if (decoded.shmInputs !== undefined || decoded.shmOutputs !== undefined) {
      return this.inferWithSharedMemory(req, res, model, version, decoded, parameters, trace);
    }
    const call = new InferCall(res);
    // One await on the server itself (callInfer would add a second): this is the hot path.
    const response = await this.server.infer(inferRequest(model, version, decoded, parameters, call.signal, trace));
    call.done();
    trace?.stamp('HTTP_SEND_START');
    if (replayKey !== undefined && response.cacheHit !== undefined) {
      this.sendAndKeep(res, response, decoded, replayKey, response.cacheHit);
      return;
    }
    const compressing = this.sendInferResponse(req, res, response, decoded);
    if (compressing !== undefined) await compressing;
  }

  /** Writes the reply kept under `key` when the server confirms its hit; false when the request must run. */
  private replayCacheHit(res: ServerResponse, key: RequestKey, model: string, version: string | undefined): boolean {
    const kept = this.replies.get(key);
    if (kept === undefined) return false;
    if (this.server.replayCacheHit?.(kept.ticket, model, version) !== true) {
      this.replies.drop(key);
      return false;
    }
    this.reply.whole(res, 200, kept.headers, kept.body);
    return true;
  }

  /**
   * An uncompressed reply to a cache hit, written as one buffer and kept for the same request sent again (when small
   * enough).
   */
  private sendAndKeep(
    res: ServerResponse,
    response: Parameters<typeof encodeInferResponse>[0],
    decoded: DecodedInfer,
    key: RequestKey,
    ticket: CacheHitTicket,
  ): void {
    const encoded = encodeInferResponse(response, decoded);
    const total = encoded.json.byteLength + encoded.binaryByteLength;
    const headers = inferReplyHeaders(encoded);
    if (total > MAX_REPLY_BYTES) {
      // Too large to keep: written in its parts, not joined.
      this.reply.parts(res, 200, headers, encoded.json, encoded.binary, total);
      return;
    }
    const body =
      encoded.whole ??
      (encoded.binaryByteLength > 0 ? Buffer.concat([encoded.json, ...encoded.binary], total) : encoded.json);
    headers.push('Content-Length', String(total));
    this.reply.whole(res, 200, headers, body);
    this.replies.keep(key, ticket, headers, body);
  }

  /**
   * generate and generate_stream: JSON in (mapped onto the inputs), JSON out.
   * The status is that of the first response; generate_stream writes each
   * response as a Server-Sent Event (`data: {...}` and a blank line) as it
   * comes, generate waits for exactly one. A client that goes away cancels
   * the request in the backend.
   */
  private async handleGenerate(
    req: IncomingMessage,
    res: ServerResponse,
    model: string,
    versionText: string | undefined,
    streaming: boolean,
  ): Promise<void> {
    const version = parseVersion(model, versionText);
    const metadata = this.server.modelMetadata(model, version);
    if (requestEncoding(req) !== 'identity') {
      throw Errors.malformedBody("Unsupported content-encoding, only 'identity' is supported.");
    }
    const body = await readBody(req, this.maxInputSize);
    const doc = body.byteLength === 0 ? {} : parseJsonBytes(body);
    const mapped = mapGenerateRequest(doc, metadata.inputs, this.maxInputSize);
    const parameters =
      this.forwardPattern === undefined
        ? mapped.parameters
        : forwardHeaders(req, this.forwardPattern, mapped.parameters);
    const call = new InferCall(res);
    const responses = streamResponses(this.server, {
      model,
      version,
      id: mapped.id,
      inputs: mapped.inputs,
      parameters,
      signal: call.signal,
    });
    let started = false;
    const bodies: string[] = [];
    let status = 200;
    for await (const item of responses) {
      let text: string | undefined;
      let error = item.error;
      if (item.response !== undefined) {
        try {
          text = generateResponseJson(item.response);
        } catch (err) {
          error = err instanceof NereidError ? err : Errors.internal(String((err as Error).message ?? err));
        }
      }
      if (error !== undefined) text = JSON.stringify({ error: error.message });
      if (!started) {
        started = true;
        if (error !== undefined) status = error.httpStatus;
        if (streaming) {
          if (this.reply.closing) res.shouldKeepAlive = false;
          res.writeHead(status, ['Content-Type', 'text/event-stream; charset=utf-8', 'Cache-Control', 'no-cache']);
        }
      }
      if (text === undefined) continue;
      if (streaming) {
        if (res.destroyed) break;
        res.write(`data: ${text}\n\n`);
      } else {
        bodies.push(text);
      }
    }
    call.done();
    if (streaming) {
      res.end();
      return;
    }
    const out = bodies.length === 1 ? bodies[0]! : JSON.stringify({ error: Errors.generateResponseCount().message });
    this.reply.json(res, status, out);
  }

  /** Runs the decoded request through the server, cancelled if the client goes away first. */
  private async callInfer(
    res: ServerResponse,
    model: string,
    version: string | undefined,
    decoded: DecodedInfer,
    parameters: DecodedInfer['parameters'],
    trace?: Trace,
  ): Promise<Parameters<typeof encodeInferResponse>[0]> {
    const call = new InferCall(res);
    const response = await this.server.infer(inferRequest(model, version, decoded, parameters, call.signal, trace));
    call.done();
    return response;
  }

  /** An infer whose inputs come from, or outputs go to, client shared-memory regions. */
  private async inferWithSharedMemory(
    req: IncomingMessage,
    res: ServerResponse,
    model: string,
    version: string | undefined,
    decoded: DecodedInfer,
    parameters: DecodedInfer['parameters'],
    trace: Trace | undefined,
  ): Promise<void> {
    const shm = new RequestSharedMemory(this.server.sharedMemory);
    try {
      for (const { index, ref } of decoded.shmInputs ?? []) {
        const t = decoded.inputs[index]!;
        decoded.inputs[index] = shm.inputTensor(t.name, t.datatype, t.shape, ref);
      }
      for (const [name, ref] of decoded.shmOutputs ?? []) shm.bindOutput(name, ref);
      const response = await this.callInfer(res, model, version, decoded, parameters, trace);
      await shm.writeOutputs(response.outputs);
      trace?.stamp('HTTP_SEND_START');
      const compressing = this.sendInferResponse(req, res, response, decoded);
      if (compressing !== undefined) await compressing;
    } finally {
      shm.release();
    }
  }

  /** Writes the reply; returns a promise only when the body is compressed first (off the event loop). */
  private sendInferResponse(
    req: IncomingMessage,
    res: ServerResponse,
    response: Parameters<typeof encodeInferResponse>[0],
    decoded: DecodedInfer,
  ): Promise<void> | undefined {
    const encoded = encodeInferResponse(response, decoded);
    const hasBinary = encoded.binaryByteLength > 0;
    const headers = inferReplyHeaders(encoded);
    const encoding = negotiateResponseEncoding(headerValue(req, 'accept-encoding'));
    if (encoding === 'identity') {
      if (!hasBinary) {
        // JSON alone: the text goes out in one write with the header text, without a copy into a Buffer first.
        headers.push('Content-Length', String(Buffer.byteLength(encoded.text, 'utf8')));
        this.reply.wholeText(res, 200, headers, encoded.text);
      } else if (encoded.whole !== undefined) {
        headers.push('Content-Length', String(encoded.whole.byteLength));
        this.reply.whole(res, 200, headers, encoded.whole);
      } else {
        this.reply.parts(
          res,
          200,
          headers,
          encoded.json,
          encoded.binary,
          encoded.json.byteLength + encoded.binaryByteLength,
        );
      }
      return undefined;
    }
    const whole = encoded.whole ?? (hasBinary ? Buffer.concat([encoded.json, ...encoded.binary]) : encoded.json);
    return compressBody(encoding, whole).then((compressed) => {
      headers.push('Content-Encoding', encoding);
      this.reply.parts(res, 200, headers, compressed, [], compressed.byteLength);
    });
  }
}

/**
 * Cancels the core request when the client goes away before the reply. The
 * listener stays on the response (one per request, which emits 'close' once)
 * rather than being removed when the call is done: removing it cost more.
 */
class InferCall {
  readonly signal = new Cancellation();
  private pending = true;

  constructor(private readonly res: ServerResponse) {
    res.on('close', this.onClose);
  }

  private readonly onClose = (): void => {
    if (this.pending && !this.res.writableFinished) this.signal.abort();
  };

  done(): void {
    this.pending = false;
  }
}

/** An infer reply's content headers: binary outputs follow a JSON header whose length the client is told. */
function inferReplyHeaders(encoded: EncodedInferResponse): string[] {
  return encoded.binaryByteLength > 0
    ? ['Content-Type', 'application/octet-stream', 'Inference-Header-Content-Length', String(encoded.json.byteLength)]
    : ['Content-Type', JSON_TYPE];
}

/** The server request for a decoded HTTP infer body. */
function inferRequest(
  model: string,
  version: string | undefined,
  decoded: DecodedInfer,
  parameters: DecodedInfer['parameters'],
  signal: Cancellation,
  trace: Trace | undefined,
): Parameters<ServerApi['infer']>[0] {
  const jsonOutputs = decoded.anyJson ? decoded : undefined;
  return {
    model,
    version,
    id: decoded.id,
    inputs: decoded.inputs,
    outputs: decoded.outputs,
    parameters,
    signal,
    jsonOutputs,
    trace,
  };
}

/**
 * A trace for this request when the tracer samples it (W3C context from its
 * headers). It ends when the reply has gone out (or the client went away).
 */
function sampleRequest(tracer: Tracer, model: string, req: IncomingMessage, res: ServerResponse): Trace | undefined {
  const parent = req.headers.traceparent;
  const state = req.headers.tracestate;
  const trace = tracer.sample(
    model,
    typeof parent === 'string' ? parent : undefined,
    typeof state === 'string' ? state : undefined,
  );
  if (trace === undefined) return undefined;
  trace.stamp('HTTP_RECV_START');
  // 'finish': the reply is handed to the socket; 'close' alone: the client went away first.
  res.once('finish', () => {
    trace.stamp('HTTP_SEND_END');
    trace.end();
  });
  res.once('close', () => trace.end());
  return trace;
}
