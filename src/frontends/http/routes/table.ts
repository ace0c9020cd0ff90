/**
 * Triton's HTTP endpoints, each path once with its API group (what
 * `--http-restricted-api` and `--auth-keys` scopes name), its methods and its
 * handler, which lives beside this file (one file per API group).
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { HttpApiCategory } from '../restrictions.js';
import { Router, type RouteParams } from '../router.js';
import type { HttpContext } from './context.js';
import { handleGenerate } from './generate.js';
import { handleHealth, handleModelReady } from './health.js';
import { admitInfer } from './infer.js';
import { handleModelConfig, handleModelMetadata, handleServerMetadata, handleStats } from './metadata.js';
import { handleRepositoryControl, handleRepositoryIndex } from './repository.js';
import { handleSharedMemory } from './shared-memory.js';
import { handleLogging, handleTrace } from './trace-logging.js';

/** One entry of the route table: the API group, the methods, the handler. */
export interface HttpRoute {
  readonly category: HttpApiCategory;
  readonly methods: readonly string[];
  readonly handle: (req: IncomingMessage, res: ServerResponse, params: RouteParams) => Promise<void> | void;
}

const GET: readonly string[] = ['GET'];
const POST: readonly string[] = ['POST'];
const GET_POST: readonly string[] = ['GET', 'POST'];

/** The table of every endpoint, its handlers bound to `ctx`. */
export function routeTable(ctx: HttpContext): Router<HttpRoute> {
  const routes = new Router<HttpRoute>();
  const route = (category: HttpApiCategory, methods: readonly string[], handle: HttpRoute['handle']): HttpRoute => ({
    category,
    methods,
    handle,
  });
  const model = (p: RouteParams): string => p['model']!;
  routes
    .add('/v2', route('metadata', GET, (_req, res) => handleServerMetadata(ctx, res)))
    .add('/v2/health/live', route('health', GET, (_req, res) => handleHealth(ctx, res, 'live')))
    .add('/v2/health/ready', route('health', GET, (_req, res) => handleHealth(ctx, res, 'ready')))
    .add('/v2/models/stats', route('statistics', GET, (req, res) => handleStats(ctx, res, '', undefined, req)))
    .add(
      '/v2/models/:model[/versions/:version]',
      route('metadata', GET, (_req, res, p) => handleModelMetadata(ctx, res, model(p), p['version'])),
    )
    .add(
      '/v2/models/:model[/versions/:version]/ready',
      route('health', GET, (_req, res, p) => handleModelReady(ctx, res, model(p), p['version'])),
    )
    .add(
      '/v2/models/:model[/versions/:version]/config',
      route('model-config', GET, (_req, res, p) => handleModelConfig(ctx, res, model(p), p['version'])),
    )
    .add(
      '/v2/models/:model[/versions/:version]/stats',
      route('statistics', GET, (_req, res, p) => handleStats(ctx, res, model(p), p['version'])),
    )
    .add(
      '/v2/models/:model[/versions/:version]/infer',
      route('inference', POST, (req, res, p) => admitInfer(ctx, req, res, model(p), p['version'])),
    )
    .add(
      '/v2/models/:model[/versions/:version]/generate',
      route('inference', POST, (req, res, p) => handleGenerate(ctx, req, res, model(p), p['version'], false)),
    )
    .add(
      '/v2/models/:model[/versions/:version]/generate_stream',
      route('inference', POST, (req, res, p) => handleGenerate(ctx, req, res, model(p), p['version'], true)),
    )
    .add(
      '/v2/models/:model/trace/setting',
      route('trace', GET_POST, (req, res, p) => handleTrace(ctx, req, res, model(p))),
    )
    .add('/v2/trace/setting', route('trace', GET_POST, (req, res) => handleTrace(ctx, req, res, '')))
    .add('/v2/logging', route('logging', GET_POST, (req, res) => handleLogging(ctx, req, res)))
    .add(
      '/v2/repository[/:repository]/index',
      route('model-repository', POST, (req, res, p) => handleRepositoryIndex(ctx, req, res, p['repository'] ?? '')),
    )
    .add(
      '/v2/repository[/:repository]/models/:model/load',
      route('model-repository', POST, (req, res, p) =>
        handleRepositoryControl(ctx, req, res, p['repository'] ?? '', model(p), 'load'),
      ),
    )
    .add(
      '/v2/repository[/:repository]/models/:model/unload',
      route('model-repository', POST, (req, res, p) =>
        handleRepositoryControl(ctx, req, res, p['repository'] ?? '', model(p), 'unload'),
      ),
    );
  for (const kind of ['system', 'cuda'] as const) {
    for (const action of ['status', 'register', 'unregister'] as const) {
      routes.add(
        `/v2/${kind}sharedmemory[/region/:region]/${action}`,
        route('shared-memory', action === 'status' ? GET : POST, (req, res, p) =>
          handleSharedMemory(ctx, req, res, kind, p['region'] ?? '', action),
        ),
      );
    }
  }
  return routes;
}
