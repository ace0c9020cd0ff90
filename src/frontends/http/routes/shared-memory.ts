/** The shared-memory extensions (registration needs --allow-client-shm; status always answers). */
import type { IncomingMessage, ServerResponse } from 'node:http';
import { Errors } from '../../../errors.js';
import { type HttpContext, JSON_TYPE, type JsonObject, isObject, jsonUint, readJson } from './context.js';

export async function handleSharedMemory(
  ctx: HttpContext,
  req: IncomingMessage,
  res: ServerResponse,
  kind: 'system' | 'cuda',
  region: string,
  action: string,
): Promise<void> {
  const shm = ctx.server.sharedMemory;
  if (action === 'status') {
    const status = kind === 'system' ? shm.systemStatus(region) : shm.cudaStatus(region);
    ctx.reply.json(res, 200, JSON.stringify(status));
    return;
  }
  if (action === 'unregister') {
    shm.unregister(kind, region);
    ctx.reply.empty(res, 200, JSON_TYPE);
    return;
  }
  if (!shm.allowed) throw Errors.clientShmDisabled();
  if (region === '') throw Errors.badParameter(`'region name' is necessary to register ${kind} shared memory region`);
  if (kind === 'cuda') {
    shm.registerCuda(region, 0, 0);
    return;
  }
  const doc = await readJson(ctx, req, true);
  const body: JsonObject = isObject(doc) ? doc : {};
  if (body['key'] === undefined) throw Errors.badParameter("Shared memory register request has no 'key' field");
  const key = body['key'];
  if (typeof key !== 'string') throw Errors.jsonValue('attempt to access JSON non-string as string');
  const offset = body['offset'] === undefined ? 0 : jsonUint(body['offset']);
  if (body['byte_size'] === undefined)
    throw Errors.badParameter("Shared memory register request has no 'byte_size' field");
  const byteSize = jsonUint(body['byte_size']);
  shm.registerSystem(region, key, offset, byteSize);
  ctx.reply.empty(res, 200, JSON_TYPE);
}
