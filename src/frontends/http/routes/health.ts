/** Health: the server's liveness and readiness, and each model's readiness. */
import type { ServerResponse } from 'node:http';
import { type HttpContext, parseVersion } from './context.js';

export function handleHealth(ctx: HttpContext, res: ServerResponse, kind: string): void {
  const ok = kind === 'live' ? ctx.server.isLive() : ctx.server.isReady();
  ctx.reply.empty(res, ok ? 200 : 400);
}

export async function handleModelReady(
  ctx: HttpContext,
  res: ServerResponse,
  model: string,
  versionText: string | undefined,
): Promise<void> {
  const ready = await ctx.server.modelReady(model, parseVersion(model, versionText));
  if (ready) ctx.reply.empty(res, 200);
  else ctx.reply.errorText(res, 400, 'Model version not ready');
}
