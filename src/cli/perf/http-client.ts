/**
 * HTTP/REST (KServe v2) control calls of the load tool, on undici: server
 * metadata, model metadata and configuration, statistics. The infer hot
 * path is in http1.ts.
 */
import { Client, type Dispatcher } from 'undici';
import { PerfError } from './errors.js';
import { parseStatistics, type StatsSnapshot } from './server-stats.js';
import type { ControlClient, ServerInfo } from './transport.js';
import { describeNetworkError, errorText, modelPath } from '../../client/http-text.js';

export { describeNetworkError, errorText, modelPath } from '../../client/http-text.js';

/** "localhost:8000" or "http://host:port" -> "http://host:port". */
export function httpOrigin(url: string): string {
  const withScheme = /^[a-z]+:\/\//i.test(url) ? url : `http://${url}`;
  let u: URL;
  try {
    u = new URL(withScheme);
  } catch {
    throw new PerfError('failed to create client', `'${url}' is not a valid server address (expected host:port)`);
  }
  if (u.protocol !== 'http:')
    throw new PerfError('failed to create client', `unsupported URL scheme '${u.protocol}' in '${url}'`);
  return u.origin;
}

export class HttpControlClient implements ControlClient {
  private readonly client: Client;

  constructor(
    private readonly origin: string,
    private readonly headers: ReadonlyArray<[string, string]> = [],
  ) {
    this.client = new Client(origin, { pipelining: 1 });
  }

  private async getJson(path: string, what: string, method: 'GET' | 'POST' = 'GET'): Promise<unknown> {
    let res: Dispatcher.ResponseData;
    try {
      res = await this.client.request({ path, method, headers: Object.fromEntries(this.headers) });
    } catch (err) {
      throw new PerfError(what, describeNetworkError(err, this.origin));
    }
    const text = await res.body.text();
    if (res.statusCode !== 200) throw new PerfError(what, errorText(res.statusCode, text));
    try {
      return JSON.parse(text);
    } catch {
      throw new PerfError(what, `the server's response to ${path} is not JSON`);
    }
  }

  async serverMetadata(): Promise<ServerInfo> {
    const doc = (await this.getJson('/v2', 'failed to get server metadata')) as { extensions?: unknown };
    const ext = Array.isArray(doc.extensions) ? doc.extensions.filter((e): e is string => typeof e === 'string') : [];
    return { extensions: ext };
  }

  modelMetadata(name: string, version: string): Promise<unknown> {
    return this.getJson(modelPath(name, version), 'failed to get model metadata');
  }

  modelConfig(name: string, version: string): Promise<unknown> {
    return this.getJson(`${modelPath(name, version)}/config`, 'failed to get model config');
  }

  async statistics(name?: string, version?: string): Promise<StatsSnapshot> {
    const path = name === undefined ? '/v2/models/stats' : `${modelPath(name, version ?? '')}/stats`;
    return parseStatistics(await this.getJson(path, 'failed to get model statistics'));
  }

  async close(): Promise<void> {
    await this.client.close();
  }
}
