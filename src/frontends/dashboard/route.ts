/**
 * The built-in dashboard (docs/dashboard.md): `GET /dashboard` serves the
 * page, its script and styles (bundled into dist/ at build time, uPlot
 * included), and `GET /dashboard/api/state` the numbers as JSON — a Nereid
 * extension scripts can read too. The page itself holds no data; the state
 * endpoint is guarded like the metadata API (keys, restricted APIs), and
 * the page's load and unload buttons call the repository API, guarded as it is.
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { gzipSync } from 'node:zlib';
import type { DashboardHistory } from './history.js';

interface Asset {
  type: string;
  body: Buffer;
  gzip: Buffer;
}

const STATIC = path.join(path.dirname(fileURLToPath(import.meta.url)), 'static');

const FILES: Record<string, [file: string, type: string]> = {
  '/dashboard': ['index.html', 'text/html; charset=utf-8'],
  '/dashboard/': ['index.html', 'text/html; charset=utf-8'],
  '/dashboard/dashboard.js': ['dashboard.js', 'text/javascript; charset=utf-8'],
  '/dashboard/dashboard.css': ['dashboard.css', 'text/css; charset=utf-8'],
  '/dashboard/uplot.js': ['uplot.js', 'text/javascript; charset=utf-8'],
  '/dashboard/uplot.css': ['uplot.css', 'text/css; charset=utf-8'],
};

/** The page's files, read and compressed once. */
export function loadDashboardAssets(dir = STATIC): Map<string, Asset> {
  const out = new Map<string, Asset>();
  for (const [url, [file, type]] of Object.entries(FILES)) {
    const body = readFileSync(path.join(dir, file));
    out.set(url, { type, body, gzip: gzipSync(body, { level: 9 }) });
  }
  return out;
}

/** Answers 401/403/429 and returns true when the request may not read the dashboard's numbers. */
export type DashboardGuard = (req: IncomingMessage, res: ServerResponse) => boolean;

export class DashboardRoute {
  private readonly assets: Map<string, Asset>;

  constructor(
    private readonly history: DashboardHistory,
    assets?: Map<string, Asset>,
  ) {
    this.assets = assets ?? loadDashboardAssets();
  }

  /** Whether `path` is the dashboard's. */
  static owns(path: string): boolean {
    return path === '/dashboard' || path.startsWith('/dashboard/');
  }

  handle(req: IncomingMessage, res: ServerResponse, path: string, query: string, guard: DashboardGuard): void {
    const asset = this.assets.get(path);
    const isState = path === '/dashboard/api/state';
    if (asset === undefined && !isState) return send(res, 404, 'text/plain', 'Not Found');
    if (req.method !== 'GET' && req.method !== 'HEAD') {
      res.setHeader('Allow', 'GET, HEAD');
      return send(res, 405, 'text/plain', 'Method Not Allowed');
    }
    if (asset !== undefined) {
      const gzip = /\bgzip\b/.test(String(req.headers['accept-encoding'] ?? ''));
      res.setHeader('Cache-Control', 'no-cache');
      res.setHeader('X-Content-Type-Options', 'nosniff');
      if (gzip) res.setHeader('Content-Encoding', 'gzip');
      res.setHeader('Vary', 'Accept-Encoding');
      return send(res, 200, asset.type, gzip ? asset.gzip : asset.body, req.method === 'HEAD');
    }
    if (guard(req, res)) return;
    const since = Number(new URLSearchParams(query).get('since') ?? 0);
    if (!Number.isFinite(since) || since < 0) {
      return send(res, 400, 'application/json', JSON.stringify({ error: "'since' must be a non-negative number" }));
    }
    this.history.state(since).then(
      (state) => {
        // Live numbers: a browser that kept each answer in its HTTP cache would do that work every second.
        res.setHeader('Cache-Control', 'no-store');
        send(res, 200, 'application/json', JSON.stringify(state), req.method === 'HEAD');
      },
      (err: unknown) => send(res, 500, 'application/json', JSON.stringify({ error: String(err) })),
    );
  }
}

function send(res: ServerResponse, status: number, type: string, body: string | Buffer, headOnly = false): void {
  if (res.headersSent || res.destroyed) return;
  res.statusCode = status;
  res.setHeader('Content-Type', type);
  res.setHeader('Content-Length', typeof body === 'string' ? Buffer.byteLength(body) : body.length);
  res.end(headOnly ? undefined : body);
}
