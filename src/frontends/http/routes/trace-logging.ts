/** The trace and logging extensions: their settings, read and updated. */
import type { IncomingMessage, ServerResponse } from 'node:http';
import { Errors } from '../../../errors.js';
import { type HttpContext, readJson } from './context.js';

export async function handleTrace(
  ctx: HttpContext,
  req: IncomingMessage,
  res: ServerResponse,
  model: string,
): Promise<void> {
  if (model !== '') {
    const ready = await ctx.server.modelReady(model);
    if (!ready) throw Errors.traceUnknownModel(model);
  }
  if (req.method === 'POST') ctx.traceSettings.updateFromJson(model, await readJson(ctx, req, true));
  ctx.reply.json(res, 200, ctx.traceSettings.toJson(model));
}

export async function handleLogging(ctx: HttpContext, req: IncomingMessage, res: ServerResponse): Promise<void> {
  if (req.method === 'POST') ctx.logSettings.updateFromJson(await readJson(ctx, req, true));
  ctx.reply.json(res, 200, ctx.logSettings.toJson());
}
