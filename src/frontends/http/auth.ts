/**
 * `--auth-keys` on HTTP: `Authorization: Bearer <secret>`, checked by the
 * dispatcher against the route's API group and the model in its path,
 * before the method or the handler. The answer for a model outside the
 * key's scopes depends on the scopes alone, so it is the same whether the
 * model exists or not. Routes outside the route table (the OpenAI routes,
 * a dashboard) call `refuseHttp` with their own group and model.
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { AccessControl, ApiGroup, AuthFailure } from '../../auth/index.js';
import type { Replier } from './reply.js';

/** The headers of a refusal: how to authenticate (401), when to come back (429). */
function refusalHeaders(failure: AuthFailure): string[] {
  if (failure.httpStatus === 401) return ['WWW-Authenticate', 'Bearer'];
  if (failure.retryAfterSecs !== undefined) return ['Retry-After', String(failure.retryAfterSecs)];
  return [];
}

/**
 * Answers 401, 403 or 429 and returns true when `access` refuses the
 * request for `group` (and `model`, for the groups keys narrow by model);
 * false, writing nothing, when it may go on.
 */
export function refuseHttp(
  access: AccessControl,
  reply: Replier,
  req: IncomingMessage,
  res: ServerResponse,
  group: ApiGroup,
  model?: string,
): boolean {
  const socket = req.socket;
  const failure = access.check(req.headers.authorization, socket.remoteAddress, group, model, socket);
  if (failure === undefined) return false;
  reply.errorText(res, failure.httpStatus, failure.message, refusalHeaders(failure));
  return true;
}
