/**
 * OpenAI's API on any model (docs/openai.md): /v1 on the HTTP port (the HTTP
 * frontend hands every /v1 path to `handle`), and on a listener of its own
 * with --openai-port. It reaches models only through the ServerApi.
 */
import http, { type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { Logger } from 'pino';
import { Errors } from '../../errors.js';
import type { ServerApi } from '../../core/server-api.js';
import { readBody } from '../http/body.js';
import { parseJsonBytes } from '../http/json-parse.js';
import { modelContract } from './contracts.js';
import type { OpenAiContext, TokenTimings } from './context.js';
import { EmbeddingsEndpoint } from './embeddings.js';
import { OpenAiError, modelNotFound, toOpenAiError } from './errors.js';
import { requireObject } from './fields.js';
import { GenerationEndpoint } from './generation.js';
import { ModelTexts } from './model-text.js';
import { type OpenAiApiGroup, OpenAiAccess, parseOpenAiRestrictedApis } from './restrictions.js';
import type { AccessControl } from '../../auth/index.js';

export interface OpenAiFrontendOptions {
  /** --http-max-input-size: bound on request bodies and prompts. */
  readonly maxInputSize: number;
  readonly logger: Logger;
  /** --openai-tokenizer: tokenizer and chat template files for models whose folder has none. */
  readonly tokenizerDir?: string;
  /** --openai-restricted-api values. */
  readonly restrictedApis?: readonly string[];
  /** Where time-to-first-token and inter-token times go (metrics). */
  readonly timings?: TokenTimings;
  /** `--auth-keys`: /v1 needs a key with the `openai` scope for the model asked for (docs/security.md). */
  readonly access?: AccessControl;
}

interface Route {
  readonly group: OpenAiApiGroup;
  readonly method: 'GET' | 'POST';
  readonly handle: (req: IncomingMessage, res: ServerResponse, model: string) => Promise<void> | void;
}

export class OpenAiFrontend {
  private readonly ctx: OpenAiContext;
  private readonly access: OpenAiAccess;
  private readonly generation: GenerationEndpoint;
  private readonly embeddings: EmbeddingsEndpoint;
  private readonly created = Math.floor(Date.now() / 1000);
  private readonly routes: ReadonlyMap<string, Route>;
  private listener: http.Server | undefined;

  constructor(
    private readonly server: ServerApi,
    private readonly options: OpenAiFrontendOptions,
  ) {
    this.ctx = {
      server,
      texts: new ModelTexts(options.tokenizerDir),
      timings: options.timings,
      maxInputSize: options.maxInputSize,
    };
    this.access = new OpenAiAccess(parseOpenAiRestrictedApis(options.restrictedApis ?? []), options.access);
    this.generation = new GenerationEndpoint(this.ctx);
    this.embeddings = new EmbeddingsEndpoint(this.ctx);
    this.routes = new Map<string, Route>([
      ['/v1/models', { group: 'model-repository', method: 'GET', handle: (q, res) => this.listModels(q, res) }],
      ['/v1/models/*', { group: 'model-repository', method: 'GET', handle: (_q, res, m) => this.showModel(res, m) }],
      [
        '/v1/completions',
        {
          group: 'inference',
          method: 'POST',
          handle: (q, res) => this.withBody(q, res, (b) => this.generation.handle(res, b, false)),
        },
      ],
      [
        '/v1/chat/completions',
        {
          group: 'inference',
          method: 'POST',
          handle: (q, res) => this.withBody(q, res, (b) => this.generation.handle(res, b, true)),
        },
      ],
      [
        '/v1/embeddings',
        {
          group: 'embedding',
          method: 'POST',
          handle: (q, res) => this.withBody(q, res, (b) => this.embeddings.handle(res, b)),
        },
      ],
      ['/health/ready', { group: 'health', method: 'GET', handle: (_q, res) => this.ready(res) }],
    ]);
  }

  /** Answers one request whose path starts with /v1 (or /health/ready on the own port). */
  readonly handle = (req: IncomingMessage, res: ServerResponse, path: string): void => {
    let model = '';
    let route = this.routes.get(path);
    try {
      if (route === undefined && path.startsWith('/v1/models/') && path.length > '/v1/models/'.length) {
        route = this.routes.get('/v1/models/*');
        model = decodeURIComponent(path.slice('/v1/models/'.length));
      }
      if (route === undefined)
        throw new OpenAiError(
          404,
          'invalid_request_error',
          `Invalid URL (${req.method ?? ''} ${path})`,
          null,
          'unknown_url',
        );
      const denied = this.access.authorize(req, route.group, model === '' ? undefined : model);
      if (denied !== undefined) throw denied;
      if (req.method !== route.method) {
        const e = new OpenAiError(
          405,
          'invalid_request_error',
          `Method ${req.method ?? ''} is not allowed on ${path}; use ${route.method}`,
          null,
          'method_not_allowed',
        );
        this.fail(res, e, ['Allow', route.method]);
        return;
      }
      const pending = route.handle(req, res, model);
      if (pending !== undefined) pending.catch((err: unknown) => this.fail(res, err));
    } catch (err) {
      this.fail(res, err);
    }
  };

  /** Listens on its own port (--openai-port), serving /v1 and /health/ready. */
  start(port: number, address: string): Promise<{ port: number }> {
    const listener = http.createServer({ keepAlive: true, noDelay: true }, (req, res) => {
      const url = req.url ?? '/';
      const q = url.indexOf('?');
      this.handle(req, res, q === -1 ? url : url.slice(0, q));
    });
    listener.keepAliveTimeout = 65_000;
    listener.headersTimeout = 66_000;
    this.listener = listener;
    return new Promise((resolve, reject) => {
      const onError = (err: NodeJS.ErrnoException): void =>
        reject(err.code === 'EADDRINUSE' ? Errors.socketInUse(address, port) : err);
      listener.once('error', onError);
      listener.listen(port, address, () => {
        listener.off('error', onError);
        const bound = (listener.address() as AddressInfo).port;
        this.options.logger.info({ address, port: bound }, 'Started OpenAI-compatible frontend');
        resolve({ port: bound });
      });
    });
  }

  stop(): Promise<void> {
    const listener = this.listener;
    if (listener === undefined || !listener.listening) return Promise.resolve();
    return new Promise((resolve) => {
      listener.close(() => resolve());
      listener.closeIdleConnections();
    });
  }

  private fail(res: ServerResponse, err: unknown, extraHeaders: readonly string[] = []): void {
    const e = toOpenAiError(err);
    if (e.status >= 500 && !(err instanceof OpenAiError)) this.options.logger.error({ err }, 'OpenAI request failed');
    if (res.headersSent || res.destroyed) {
      res.destroy();
      return;
    }
    const body = e.toJson();
    const headers = ['Content-Type', 'application/json', 'Content-Length', String(Buffer.byteLength(body))];
    if (e.retryAfter !== undefined) headers.push('Retry-After', String(e.retryAfter));
    headers.push(...extraHeaders);
    res.writeHead(e.status, headers);
    res.end(body);
  }

  private async withBody(
    req: IncomingMessage,
    res: ServerResponse,
    run: (body: Record<string, unknown>) => Promise<void>,
  ): Promise<void> {
    const encoding = req.headers['content-encoding'];
    if (encoding !== undefined && encoding !== 'identity') {
      throw new OpenAiError(
        415,
        'invalid_request_error',
        `Content-Encoding '${encoding}' is not supported; send the body uncompressed`,
      );
    }
    const bytes = await readBody(req, this.options.maxInputSize);
    if (bytes.byteLength === 0)
      throw new OpenAiError(
        400,
        'invalid_request_error',
        'The request has no body; send a JSON object',
        null,
        'invalid_json',
      );
    const body = requireObject(parseJsonBytes(bytes));
    // The model is in the body: checked against the key's scopes before anything looks it up.
    if (typeof body['model'] === 'string') {
      const denied = this.access.authorizeModel(req, body['model']);
      if (denied !== undefined) throw denied;
    }
    await run(body);
  }

  private ready(res: ServerResponse): void {
    const ok = this.server.isReady();
    res.writeHead(ok ? 200 : 503, ['Content-Length', '0']);
    res.end();
  }

  private modelEntry(name: string): string {
    return JSON.stringify({ id: name, object: 'model', created: this.created, owned_by: 'nereid' });
  }

  /** Why `name` is not served on /v1, or undefined when it is. */
  private unfit(name: string): string | undefined {
    const contract = modelContract(this.server.modelMetadata(name), this.server.modelConfig(name));
    return typeof contract === 'string' ? contract : undefined;
  }

  private async listModels(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const index = await this.server.repositoryIndex(true);
    const inScope = this.access.modelFilter(req);
    const names = [...new Set(index.filter((e) => e.state === undefined || e.state === 'READY').map((e) => e.name))]
      .filter((name) => inScope === undefined || inScope(name))
      .sort();
    const entries: string[] = [];
    for (const name of names) {
      try {
        if (this.unfit(name) === undefined) entries.push(this.modelEntry(name));
      } catch {
        // Unloaded between the index and the look-up: not listed.
      }
    }
    const body = `{"object":"list","data":[${entries.join(',')}]}`;
    res.writeHead(200, ['Content-Type', 'application/json', 'Content-Length', String(Buffer.byteLength(body))]);
    res.end(body);
  }

  private showModel(res: ServerResponse, name: string): void {
    let why: string | undefined;
    try {
      why = this.unfit(name);
    } catch {
      throw modelNotFound(name);
    }
    if (why !== undefined) {
      throw new OpenAiError(
        404,
        'invalid_request_error',
        `The model '${name}' is not served on /v1: ${why}`,
        'model',
        'model_not_found',
      );
    }
    const body = this.modelEntry(name);
    res.writeHead(200, ['Content-Type', 'application/json', 'Content-Length', String(Buffer.byteLength(body))]);
    res.end(body);
  }
}
