/** Metadata, model configuration and statistics: what the server and its models are, and what they did. */
import type { IncomingMessage, ServerResponse } from 'node:http';
import { type HttpContext, parseVersion } from './context.js';

export function handleServerMetadata(ctx: HttpContext, res: ServerResponse): void {
  const md = ctx.server.metadata();
  ctx.reply.json(res, 200, JSON.stringify({ name: md.name, version: md.version, extensions: md.extensions }));
}

export function handleModelMetadata(
  ctx: HttpContext,
  res: ServerResponse,
  model: string,
  versionText: string | undefined,
): void {
  const md = ctx.server.modelMetadata(model, parseVersion(model, versionText));
  const tensors = (list: typeof md.inputs) =>
    list.map((t) => ({ name: t.name, datatype: t.datatype, shape: t.shape }));
  const body = JSON.stringify({
    name: md.name,
    versions: md.versions,
    platform: md.platform,
    inputs: tensors(md.inputs),
    outputs: tensors(md.outputs),
  });
  ctx.reply.json(res, 200, body);
}

export function handleModelConfig(
  ctx: HttpContext,
  res: ServerResponse,
  model: string,
  versionText: string | undefined,
): void {
  ctx.reply.json(res, 200, JSON.stringify(ctx.server.modelConfigJson(model, parseVersion(model, versionText))));
}

/** With `req` (every model's statistics) and keys, only the models in the key's scopes. */
export function handleStats(
  ctx: HttpContext,
  res: ServerResponse,
  model: string,
  versionText: string | undefined,
  req?: IncomingMessage,
): void {
  const version = parseVersion(model, versionText);
  let stats = ctx.server.modelStatistics(model === '' ? undefined : model, version);
  const inScope =
    req === undefined ? undefined : ctx.access?.modelFilter(req.headers.authorization, 'statistics');
  if (inScope !== undefined) stats = stats.filter((s) => inScope(s.name));
  ctx.reply.json(res, 200, JSON.stringify({ model_stats: stats }));
}
