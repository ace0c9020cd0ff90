/** The generate extension: generate and generate_stream. */
import type { IncomingMessage, ServerResponse } from 'node:http';
import { Errors, NereidError } from '../../../errors.js';
import { streamResponses } from '../../../core/response-stream.js';
import type { ServerApi } from '../../../core/server-api.js';
import { readBody, requestEncoding } from '../body.js';
import { generateResponseJson, mapGenerateRequest } from '../generate.js';
import { parseJsonBytes } from '../json-parse.js';
import { forwardHeaders } from '../restrictions.js';
import { type HttpContext, parseVersion } from './context.js';
import { InferCall } from './infer.js';

/**
 * generate and generate_stream: JSON in (mapped onto the inputs), JSON out.
 * The status is that of the first response; generate_stream writes each
 * response as a Server-Sent Event (`data: {...}` and a blank line) as it
 * comes, generate waits for exactly one. A client that goes away cancels
 * the request in the backend.
 */
export async function handleGenerate(
  ctx: HttpContext,
  req: IncomingMessage,
  res: ServerResponse,
  model: string,
  versionText: string | undefined,
  streaming: boolean,
): Promise<void> {
  const version = parseVersion(model, versionText);
  let metadata: ReturnType<ServerApi['modelMetadata']>;
  try {
    metadata = ctx.server.modelMetadata(model, version);
  } catch (err) {
    // Model paging: a model unloaded for room loads first (docs/paging.md).
    const loading = ctx.server.pageIn?.(model);
    if (loading === undefined) throw err;
    await loading;
    metadata = ctx.server.modelMetadata(model, version);
  }
  if (requestEncoding(req) !== 'identity') {
    throw Errors.malformedBody("Unsupported content-encoding, only 'identity' is supported.");
  }
  const body = await readBody(req, ctx.maxInputSize);
  const doc = body.byteLength === 0 ? {} : parseJsonBytes(body);
  const mapped = mapGenerateRequest(doc, metadata.inputs, ctx.maxInputSize);
  const parameters =
    ctx.forwardPattern === undefined
      ? mapped.parameters
      : forwardHeaders(req, ctx.forwardPattern, mapped.parameters);
  const call = new InferCall(res);
  const responses = streamResponses(ctx.server, {
    model,
    version,
    id: mapped.id,
    inputs: mapped.inputs,
    parameters,
    signal: call.signal,
  });
  let started = false;
  const bodies: string[] = [];
  let status = 200;
  for await (const item of responses) {
    let text: string | undefined;
    let error = item.error;
    if (item.response !== undefined) {
      try {
        text = generateResponseJson(item.response);
      } catch (err) {
        error = err instanceof NereidError ? err : Errors.internal(String((err as Error).message ?? err));
      }
    }
    if (error !== undefined) text = JSON.stringify({ error: error.message });
    if (!started) {
      started = true;
      if (error !== undefined) status = error.httpStatus;
      if (streaming) {
        if (ctx.reply.closing) res.shouldKeepAlive = false;
        res.writeHead(status, ['Content-Type', 'text/event-stream; charset=utf-8', 'Cache-Control', 'no-cache']);
      }
    }
    if (text === undefined) continue;
    if (streaming) {
      if (res.destroyed) break;
      res.write(`data: ${text}\n\n`);
    } else {
      bodies.push(text);
    }
  }
  call.done();
  if (streaming) {
    res.end();
    return;
  }
  const out = bodies.length === 1 ? bodies[0]! : JSON.stringify({ error: Errors.generateResponseCount().message });
  ctx.reply.json(res, status, out);
}
