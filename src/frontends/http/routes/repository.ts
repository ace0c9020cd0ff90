/** The model repository extension: the index, and loading and unloading models. */
import type { IncomingMessage, ServerResponse } from 'node:http';
import { Errors } from '../../../errors.js';
import { type HttpContext, JSON_TYPE, isObject, readJson } from './context.js';

export async function handleRepositoryIndex(
  ctx: HttpContext,
  req: IncomingMessage,
  res: ServerResponse,
  repository: string,
): Promise<void> {
  const doc = await readJson(ctx, req, false);
  let readyOnly = false;
  if (isObject(doc) && doc['ready'] !== undefined) {
    if (typeof doc['ready'] !== 'boolean')
      throw Errors.malformedBody("Invalid value for 'ready': expected a boolean");
    readyOnly = doc['ready'];
  }
  const index = await ctx.server.repositoryIndex(readyOnly, repository === '' ? undefined : repository);
  const entries = index.map((e) => {
    const entry: Record<string, string | number> = { name: e.name };
    if (e.version !== undefined) entry['version'] = e.version;
    if (e.state !== undefined) entry['state'] = e.state;
    if (e.reason !== undefined && e.reason !== '') entry['reason'] = e.reason;
    if (e.memoryBytes !== undefined) entry['memory_bytes'] = e.memoryBytes;
    return entry;
  });
  ctx.reply.json(res, 200, JSON.stringify(entries));
}

export async function handleRepositoryControl(
  ctx: HttpContext,
  req: IncomingMessage,
  res: ServerResponse,
  repository: string,
  model: string,
  action: string,
): Promise<void> {
  const doc = await readJson(ctx, req, false);
  const scope = repository === '' ? {} : { repository };
  if (action === 'load') {
    let config: string | undefined;
    let files: Record<string, Uint8Array> | undefined;
    const params = isObject(doc) ? doc['parameters'] : undefined;
    if (params !== undefined) {
      if (!isObject(params)) throw Errors.jsonValue('attempt to access JSON non-object as object');
      for (const key of Object.keys(params)) {
        const value = params[key];
        if (typeof value !== 'string') throw Errors.jsonValue('attempt to access JSON non-string as string');
        if (key === 'config') {
          config = value;
        } else if (key.startsWith('file:')) {
          files ??= {};
          files[key] = Buffer.from(value, 'base64');
        } else {
          throw Errors.internal('unexpected error on creating Triton parameter');
        }
      }
    }
    await ctx.server.loadModel(
      model,
      config === undefined && files === undefined && repository === '' ? undefined : { config, files, ...scope },
    );
  } else {
    let unloadDependents = false;
    const params = isObject(doc) ? doc['parameters'] : undefined;
    // Like Triton, a non-boolean value is ignored rather than reported.
    if (isObject(params) && params['unload_dependents'] === true) unloadDependents = true;
    await ctx.server.unloadModel(model, { unloadDependents, ...scope });
  }
  ctx.reply.empty(res, 200, JSON_TYPE);
}
