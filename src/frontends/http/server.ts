/**
 * The KServe v2 HTTP frontend with Triton's extensions, on node:http.
 *
 * Routing follows Triton's: one table of full paths (./routes/table.ts), no
 * percent-decoding, 404 "Not Found" for anything else. The table gives each
 * route its API category and methods, and the dispatcher applies
 * `--http-restricted-api` (403) and then the method (405 "Method Not
 * Allowed" for a known path with the wrong method) once, before the handler.
 * The handlers live beside the table in ./routes/, one file per API group.
 */
import http, { type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { Logger } from 'pino';
import type { AccessControl } from '../../auth/index.js';
import type { ServerApi } from '../../core/server-api.js';
import { Errors, NereidError } from '../../errors.js';
import type { Tracer } from '../../trace/index.js';
import { refuseHttp } from './auth.js';
import { headerValue } from './body.js';
import { CacheReplies } from './cache-replay.js';
import { answerClientError } from './client-error.js';
import { compileHeaderForwardPattern } from '../header-forward.js';
import { type HttpApiCategory, type Restriction, parseRestrictedApis } from './restrictions.js';
import { Replier } from './reply.js';
import type { Router } from './router.js';
import { type HttpContext } from './routes/context.js';
import { type HttpRoute, routeTable } from './routes/table.js';
import { LogSettings, TraceSettings } from './settings.js';
import { takeTracePick } from './routes/infer.js';
import {
  effectiveThreads,
  FrontendBridge,
  FrontendThreadPool,
  frontendThreadsFromEnv,
  internalSocketPath,
  ListenFailure,
  PEER_HEADER,
  removeSocket,
} from '../threads/index.js';

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
  /**
   * Answers every path under /dashboard (the built-in dashboard); `guard` answers 401/403 and returns true when
   * the request may not read metadata (keys and `--http-restricted-api`, as the metadata routes).
   */
  dashboard?: (
    req: IncomingMessage,
    res: ServerResponse,
    path: string,
    query: string,
    guard: (req: IncomingMessage, res: ServerResponse) => boolean,
  ) => void;
  /**
   * `--frontend-threads`: threads that each serve this port (default `NEREID_FRONTEND_THREADS`, else 1: all on
   * the calling thread). Above 1 this frontend listens only for what they forward.
   */
  threads?: number;
  /** Whether this Node can share a port between threads (injectable for tests). */
  canReusePort?: () => boolean;
}

export const DEFAULT_MAX_INPUT_SIZE = 64 * 1024 * 1024;

/** How long a stopping frontend thread lets its requests in flight finish. */
const THREAD_STOP_GRACE_MS = 5000;

const METHOD_NOT_ALLOWED = 405;
const NOT_FOUND = 404;

export class HttpFrontend {
  private readonly httpServer: http.Server;
  private readonly reply = new Replier();
  /** What the route handlers (./routes/) share. */
  private readonly ctx: HttpContext;
  private readonly logger: Logger;
  private readonly restrictions: ReadonlyMap<HttpApiCategory, Restriction>;
  private readonly routes: Router<HttpRoute>;
  private closed: Promise<void> | undefined;
  private pool: FrontendThreadPool | undefined;
  private socketPath: string | undefined;

  constructor(
    private readonly server: ServerApi,
    private readonly options: HttpFrontendOptions,
  ) {
    this.logger = options.logger;
    this.restrictions = parseRestrictedApis(options.restrictedApis ?? []);
    this.ctx = {
      server,
      reply: this.reply,
      maxInputSize: options.maxInputSize > 0 ? options.maxInputSize : DEFAULT_MAX_INPUT_SIZE,
      forwardPattern:
        options.headerForwardPattern === undefined || options.headerForwardPattern === ''
          ? undefined
          : compileHeaderForwardPattern(options.headerForwardPattern),
      access: options.access,
      tracer: options.tracer,
      traceSettings: options.traceSettings ?? options.tracer?.settings ?? new TraceSettings(),
      logSettings: options.logSettings ?? new LogSettings(),
      replies: new CacheReplies(),
      fail: (res, err) => this.fail(res, err),
    };
    this.routes = routeTable(this.ctx);
    this.httpServer = http.createServer({ keepAlive: true, noDelay: true }, (req, res) => this.onRequest(req, res));
    this.httpServer.on('clientError', answerClientError);
    // Outlive common load-balancer idle timeouts (60 s) so they close first.
    this.httpServer.keepAliveTimeout = 65_000;
    this.httpServer.headersTimeout = 66_000;
  }

  async start(): Promise<{ port: number }> {
    const threads = effectiveThreads(
      this.options.threads ?? frontendThreadsFromEnv(1),
      this.logger,
      this.options.canReusePort,
    );
    if (threads <= 1) {
      const port = await this.listen(this.options.port, this.options.address);
      this.logger.info({ address: this.options.address, port }, 'Started HTTPService');
      return { port };
    }
    this.socketPath = internalSocketPath('http');
    await this.listen(0, '', this.socketPath);
    const forwardPattern = this.options.headerForwardPattern;
    this.pool = new FrontendThreadPool(
      {
        kind: 'http',
        port: this.options.port,
        address: this.options.address,
        upstream: this.socketPath,
        http: {
          maxInputSize: this.ctx.maxInputSize,
          restrictedApis: this.options.restrictedApis ?? [],
          headerForwardPattern: forwardPattern === '' ? undefined : forwardPattern,
        },
      },
      threads,
      this.logger,
      new FrontendBridge(this.server, this.options.tracer, this.options.access, 'http'),
    );
    let port: number;
    try {
      port = await this.pool.start();
    } catch (err) {
      await this.stop();
      if (err instanceof ListenFailure && err.code === 'EADDRINUSE')
        throw Errors.socketInUse(this.options.address, this.options.port);
      throw err;
    }
    this.logger.info({ address: this.options.address, port, threads }, 'Started HTTPService');
    return { port };
  }

  /** The frontend's threads (undefined with one thread), for tests. */
  get threads(): FrontendThreadPool | undefined {
    return this.pool;
  }

  private listen(port: number, address: string, socketPath?: string): Promise<number> {
    return new Promise((resolve, reject) => {
      const onError = (err: NodeJS.ErrnoException): void =>
        reject(err.code === 'EADDRINUSE' ? Errors.socketInUse(this.options.address, this.options.port) : err);
      this.httpServer.once('error', onError);
      const listening = (): void => {
        this.httpServer.off('error', onError);
        resolve(socketPath === undefined ? (this.httpServer.address() as AddressInfo).port : 0);
      };
      if (socketPath !== undefined) this.httpServer.listen(socketPath, listening);
      else this.httpServer.listen(port, address, listening);
    });
  }

  /** From now on every response closes its connection, so keep-alive clients reconnect (to another replica). */
  drain(): void {
    this.reply.closing = true;
    this.pool?.drain();
  }

  /** Stops accepting connections; requests in flight finish, then their connections close. */
  stop(): Promise<void> {
    if (this.closed !== undefined) return this.closed;
    this.reply.closing = true;
    const threadsStopped = this.pool?.stop(THREAD_STOP_GRACE_MS) ?? Promise.resolve();
    this.closed = threadsStopped.then(
      () =>
        new Promise<void>((resolve) => {
          if (!this.httpServer.listening) {
            resolve();
            return;
          }
          this.httpServer.close(() => {
            removeSocket(this.socketPath);
            resolve();
          });
          this.httpServer.closeIdleConnections();
        }),
    );
    return this.closed;
  }

  private onRequest(req: IncomingMessage, res: ServerResponse): void {
    if (this.pool !== undefined) {
      // Forwarded by a frontend thread: the client's address, for the key failure limit.
      takeForwardedPeer(req);
      takeTracePick(req);
      // A trace setting changed by this request reaches the threads before its answer does.
      refreshBeforeHead(res, this.pool.refreshShared);
    }
    const url = req.url ?? '/';
    const q = url.indexOf('?');
    const path = q === -1 ? url : url.slice(0, q);
    if (this.options.v1 !== undefined && (path === '/v1' || path.startsWith('/v1/'))) {
      if (this.reply.closing) res.shouldKeepAlive = false;
      return this.options.v1(req, res, path);
    }
    if (this.options.dashboard !== undefined && (path === '/dashboard' || path.startsWith('/dashboard/')))
      return this.options.dashboard(req, res, path, q === -1 ? '' : url.slice(q + 1), this.metadataGuard);
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

  /** The metadata group's checks, for routes outside the table (the dashboard's numbers). */
  private readonly metadataGuard = (req: IncomingMessage, res: ServerResponse): boolean => {
    const access = this.options.access;
    if (access !== undefined && refuseHttp(access, this.reply, req, res, 'metadata')) return true;
    return this.restricted(req, res, 'metadata');
  };

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
}

function takeForwardedPeer(req: IncomingMessage): void {
  const peer = req.headers[PEER_HEADER];
  if (typeof peer !== 'string') return;
  delete req.headers[PEER_HEADER];
  Object.defineProperty(req.socket, 'remoteAddress', { value: peer, configurable: true });
}

function refreshBeforeHead(res: ServerResponse, refresh: () => void): void {
  const writeHead = res.writeHead;
  res.writeHead = function (this: ServerResponse, ...args: Parameters<ServerResponse['writeHead']>) {
    refresh();
    return writeHead.apply(this, args);
  } as ServerResponse['writeHead'];
}
