/**
 * The metrics port (Triton: 8002). GET /metrics (trailing slash allowed)
 * serves the exposition; any other path answers 200 with an empty body, as
 * Triton does; methods other than GET get 405.
 */
import { type IncomingMessage, type Server, type ServerResponse, createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { AccessControl } from '../auth/index.js';
import { METRICS_CONTENT_TYPE, type Metrics } from './metrics.js';

export interface MetricsFrontendOptions {
  /** Default 8002; 0 picks a free port. */
  port?: number;
  /** Default: all interfaces. */
  address?: string;
  /** `--auth-keys`: the port needs a key with the `metrics` scope (unless anonymous has it). */
  access?: AccessControl;
}

export class MetricsFrontend {
  private server: Server | undefined;

  constructor(
    private readonly metrics: Metrics,
    private readonly options: MetricsFrontendOptions = {},
  ) {}

  start(): Promise<{ port: number }> {
    if (this.server) return Promise.resolve({ port: (this.server.address() as AddressInfo).port });
    const server = createServer((req, res) => void this.handle(req, res));
    server.keepAliveTimeout = 5000;
    this.server = server;
    return new Promise((resolve, reject) => {
      const onError = (err: Error): void => {
        this.server = undefined;
        reject(err);
      };
      server.once('error', onError);
      server.listen(this.options.port ?? 8002, this.options.address, () => {
        server.off('error', onError);
        resolve({ port: (server.address() as AddressInfo).port });
      });
    });
  }

  stop(): Promise<void> {
    const server = this.server;
    if (!server) return Promise.resolve();
    this.server = undefined;
    return new Promise((resolve) => {
      server.close(() => resolve());
      server.closeAllConnections();
    });
  }

  private async handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const refused = this.options.access?.check(req.headers.authorization, req.socket.remoteAddress, 'metrics');
    if (refused !== undefined) {
      const body = JSON.stringify({ error: refused.message });
      const extra: Record<string, string> =
        refused.httpStatus === 401
          ? { 'WWW-Authenticate': 'Bearer' }
          : refused.retryAfterSecs !== undefined
            ? { 'Retry-After': String(refused.retryAfterSecs) }
            : {};
      res.writeHead(refused.httpStatus, {
        'Content-Type': 'application/json',
        'Content-Length': String(Buffer.byteLength(body)),
        ...extra,
      });
      res.end(body);
      return;
    }
    if (req.method !== 'GET') {
      res.writeHead(405, { Allow: 'GET', 'Content-Length': '0' });
      res.end();
      return;
    }
    const url = req.url ?? '/';
    const q = url.indexOf('?');
    const path = q < 0 ? url : url.slice(0, q);
    let body = '';
    if (path === '/metrics' || path === '/metrics/') {
      try {
        body = await this.metrics.render();
      } catch (err) {
        res.writeHead(500, { 'Content-Type': 'text/plain; charset=utf-8' });
        res.end(err instanceof Error ? err.message : String(err));
        return;
      }
    }
    const bytes = Buffer.from(body, 'utf8');
    res.writeHead(200, { 'Content-Type': METRICS_CONTENT_TYPE, 'Content-Length': String(bytes.length) });
    res.end(bytes);
  }
}
