/**
 * KServe v2 over HTTP/REST on an undici keep-alive pool. Inference uses the
 * binary tensor extension unless JSON is asked for: a JSON header, then each
 * input's bytes, with Inference-Header-Content-Length saying where the JSON
 * ends; outputs come back the same way and are read as views of the answer.
 */
import { promisify } from 'node:util';
import zlib from 'node:zlib';
import { Pool, type Dispatcher } from 'undici';
import { type Datatype, elementCount, isDatatype } from '../tensor/datatype.js';
import { decodeJsonTensorData, encodeJsonTensorData } from '../tensor/json-codec.js';
import { abortFailure, callSignal, exactInteger, hasBigint, jsonText, throwIfAborted } from './call.js';
import { ConnectionError, InferenceServerError, InvalidInputError, ProtocolError } from './errors.js';
import { describeNetworkError, errorText, isNetworkError, modelPath } from './http-text.js';
import { answerShape, emptyData, outputData, sharedMemoryOutputs } from './tensors.js';
import type { CallContext, LoadArguments, Transport, WireRequest } from './transport.js';
import type {
  InferOutput,
  InferResult,
  LogSettings,
  LogSettingsUpdate,
  ModelConfig,
  ModelMetadata,
  ModelStatistics,
  Parameters,
  RepositoryIndexEntry,
  ServerMetadata,
  SharedMemoryRef,
  SharedMemoryStatus,
  TensorMetadata,
  TraceSettings,
  TraceSettingsUpdate,
} from './types.js';

const gzip = promisify(zlib.gzip);
const deflate = promisify(zlib.deflate);
const gunzip = promisify(zlib.gunzip);
const inflate = promisify(zlib.inflate);

const HEADER_LENGTH = 'inference-header-content-length';
const EMPTY = Buffer.alloc(0);
type Json = Record<string, unknown>;

export interface HttpTransportOptions {
  readonly origin: string;
  readonly connections: number | undefined;
  readonly tensorFormat: 'binary' | 'json';
  readonly compression: 'gzip' | 'deflate' | undefined;
  readonly headers: Record<string, string> | undefined;
  readonly tls: { ca?: string | Buffer; key?: string | Buffer; cert?: string | Buffer } | undefined;
}

interface Reply {
  readonly status: number;
  readonly headers: Dispatcher.ResponseData['headers'];
  readonly body: Buffer;
}

function isObject(v: unknown): v is Json {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

function header(h: Reply['headers'], name: string): string | undefined {
  const v = h[name];
  return Array.isArray(v) ? v[0] : v;
}

export class HttpTransport implements Transport {
  private readonly pool: Pool;
  private readonly origin: string;
  private readonly binary: boolean;
  private readonly compression: 'gzip' | 'deflate' | undefined;
  private readonly baseHeaders: Record<string, string>;
  /** Model metadata by "model/version", for mapping generate_stream answers back to tensors. */
  private readonly metadataCache = new Map<string, Promise<ModelMetadata>>();
  /** Inference-Header-Content-Length headers by length, and each merged with the client's headers. */
  private readonly lengthHeaders = new Map<number, Record<string, string>>();
  private readonly mergedHeaders = new WeakMap<Record<string, string>, Record<string, string>>();

  constructor(o: HttpTransportOptions) {
    this.origin = o.origin;
    this.binary = o.tensorFormat === 'binary';
    this.compression = o.compression;
    this.baseHeaders = { ...(o.headers ?? {}) };
    if (o.compression !== undefined) this.baseHeaders['accept-encoding'] = 'gzip, deflate';
    const connect = o.tls ? { ca: o.tls.ca, key: o.tls.key, cert: o.tls.cert } : undefined;
    this.pool = new Pool(o.origin, {
      connections: o.connections ?? null,
      pipelining: 1,
      ...(connect ? { connect } : {}),
    });
  }

  private headersFor(c: CallContext, extra?: Record<string, string>): Record<string, string> {
    if (c.headers === undefined) {
      if (extra === undefined) return this.baseHeaders;
      // The common inference call: the client's headers and the header length, merged once per length.
      let merged = this.mergedHeaders.get(extra);
      if (merged === undefined) {
        merged = { ...this.baseHeaders, ...extra };
        this.mergedHeaders.set(extra, merged);
      }
      return merged;
    }
    return { ...this.baseHeaders, ...c.headers, ...(extra ?? {}) };
  }

  /** Sends one request and reads the whole answer; every failure leaves as a client error. */
  private async send(
    what: string,
    method: 'GET' | 'POST',
    path: string,
    body: Buffer | string | undefined,
    c: CallContext,
    extraHeaders?: Record<string, string>,
    compress = false,
  ): Promise<Reply> {
    throwIfAborted(what, c);
    const signal = callSignal(c);
    let headers = this.headersFor(c, extraHeaders);
    // Triton decompresses inference bodies only; the other endpoints read their JSON as it comes.
    if (compress && body !== undefined && this.compression !== undefined && body.length > 0) {
      const raw = typeof body === 'string' ? Buffer.from(body) : body;
      body = await (this.compression === 'gzip' ? gzip(raw) : deflate(raw));
      headers = { ...headers, 'content-encoding': this.compression };
    }
    let res: Reply;
    try {
      res = await this.exchange(method, path, body, headers, signal);
    } catch (err) {
      throw this.failure(what, err, c, signal);
    }
    let bytes = res.body;
    const encoding = header(res.headers, 'content-encoding');
    if (encoding !== undefined && encoding !== 'identity') {
      try {
        if (encoding === 'gzip') bytes = await gunzip(bytes);
        else if (encoding === 'deflate') bytes = await inflate(bytes);
        else throw new Error(`unknown Content-Encoding '${encoding}'`);
      } catch (err) {
        throw new ProtocolError(
          `${what}: the answer's ${encoding} body does not decompress: ${(err as Error).message}`,
        );
      }
    }
    return { status: res.status, headers: res.headers, body: bytes };
  }

  /**
   * One request and its whole answer, through the pool's dispatch with a handler that keeps the body's chunks:
   * undici's request() makes a stream, an async resource and a body mixin for each answer, which cost a call more
   * than everything else the client does. docs/client.md ("What it costs") has the figures.
   */
  private exchange(
    method: 'GET' | 'POST',
    path: string,
    body: Buffer | string | undefined,
    headers: Record<string, string>,
    signal: AbortSignal | undefined,
  ): Promise<Reply> {
    return new Promise<Reply>((resolve, reject) => {
      let controller: Dispatcher.DispatchController | undefined;
      let status = 0;
      let answerHeaders: Reply['headers'] = {};
      let first: Buffer | undefined;
      let more: Buffer[] | undefined;
      let size = 0;
      const onAbort = () => controller?.abort(signal!.reason);
      const done = () => signal?.removeEventListener('abort', onAbort);
      if (signal !== undefined) {
        if (signal.aborted) return reject(signal.reason);
        signal.addEventListener('abort', onAbort, { once: true });
      }
      this.pool.dispatch({ method, path, body, headers }, {
        onRequestStart(c) {
          controller = c;
          if (signal?.aborted) c.abort(signal.reason);
        },
        onResponseStart(_c, statusCode, h) {
          // 1xx answers come before the final one; only the final one is kept.
          status = statusCode;
          answerHeaders = h;
        },
        onResponseData(_c, chunk) {
          if (first === undefined) first = chunk;
          else (more ??= []).push(chunk);
          size += chunk.byteLength;
        },
        onResponseEnd() {
          done();
          const bytes =
            first === undefined ? EMPTY : more === undefined ? first : Buffer.concat([first, ...more], size);
          resolve({ status, headers: answerHeaders, body: bytes });
        },
        onResponseError(_c, err) {
          done();
          reject(err);
        },
      });
    });
  }

  private failure(what: string, err: unknown, c: CallContext, signal: AbortSignal | undefined): Error {
    if (signal?.aborted) return abortFailure(what, c);
    if (isNetworkError(err))
      return new ConnectionError(`${what}: ${describeNetworkError(err, this.origin)}`, { cause: err });
    const e = err as { code?: string; message?: string };
    if (e.code === 'HPE_INVALID_CONSTANT' || e.code?.startsWith('HPE_')) {
      return new ProtocolError(`${what}: the answer from ${this.origin} is not valid HTTP (${e.message ?? e.code})`, {
        cause: err,
      });
    }
    return new ConnectionError(`${what}: ${describeNetworkError(err, this.origin)}`, { cause: err });
  }

  private serverError(reply: Reply): InferenceServerError {
    return new InferenceServerError('http', reply.status, errorText(reply.status, reply.body.toString('utf8')));
  }

  private async json(
    what: string,
    method: 'GET' | 'POST',
    path: string,
    body: string | undefined,
    c: CallContext,
  ): Promise<unknown> {
    const reply = await this.send(what, method, path, body, c);
    if (reply.status !== 200) throw this.serverError(reply);
    return parseJson(what, reply.body);
  }

  private async empty(what: string, path: string, body: string | undefined, c: CallContext): Promise<void> {
    const reply = await this.send(what, 'POST', path, body, c);
    if (reply.status !== 200) throw this.serverError(reply);
  }

  /** 200 means yes; any other answer from the server means no (Triton's own clients read it so). */
  private async health(what: string, path: string, c: CallContext): Promise<boolean> {
    const reply = await this.send(what, 'GET', path, undefined, c);
    return reply.status === 200;
  }

  isLive(c: CallContext): Promise<boolean> {
    return this.health('liveness check', '/v2/health/live', c);
  }

  isReady(c: CallContext): Promise<boolean> {
    return this.health('readiness check', '/v2/health/ready', c);
  }

  isModelReady(model: string, version: string, c: CallContext): Promise<boolean> {
    return this.health(`readiness check of model '${model}'`, `${modelPath(model, version)}/ready`, c);
  }

  async serverMetadata(c: CallContext): Promise<ServerMetadata> {
    const doc = await this.json('server metadata', 'GET', '/v2', undefined, c);
    return readServerMetadata(doc);
  }

  async modelMetadata(model: string, version: string, c: CallContext): Promise<ModelMetadata> {
    const doc = await this.json(`metadata of model '${model}'`, 'GET', modelPath(model, version), undefined, c);
    return readModelMetadata(model, doc);
  }

  async modelConfig(model: string, version: string, c: CallContext): Promise<ModelConfig> {
    const doc = await this.json(
      `configuration of model '${model}'`,
      'GET',
      `${modelPath(model, version)}/config`,
      undefined,
      c,
    );
    if (!isObject(doc)) throw new ProtocolError(`configuration of model '${model}': the answer is not a JSON object`);
    return doc;
  }

  async infer(r: WireRequest, c: CallContext): Promise<InferResult> {
    const what = `inference request to model '${r.model}'`;
    const { body, headerLength } = this.encodeInfer(r);
    const reply = await this.send(
      what,
      'POST',
      `${modelPath(r.model, r.version)}/infer`,
      body,
      c,
      headerLength === undefined ? undefined : this.headerLengthHeaders(headerLength),
      true,
    );
    if (reply.status !== 200) throw this.serverError(reply);
    return readInferReply(what, reply, r.bytesAsStrings, sharedMemoryOutputs(r));
  }

  /** `{ inference-header-content-length }`, one object per length (a request's header length rarely changes). */
  private headerLengthHeaders(n: number): Record<string, string> {
    let h = this.lengthHeaders.get(n);
    if (h === undefined) {
      h = { [HEADER_LENGTH]: String(n) };
      if (this.lengthHeaders.size >= 256) this.lengthHeaders.clear();
      this.lengthHeaders.set(n, h);
    }
    return h;
  }

  /** The request body: a JSON header and, in binary format, each input's bytes after it. */
  private encodeInfer(r: WireRequest): { body: Buffer; headerLength: number | undefined } {
    const binary = this.binary;
    // Written as text directly: this runs once per request, and JSON.stringify with a replacer costs more.
    let text = '{';
    if (r.id !== '') text += `"id":${JSON.stringify(r.id)},`;
    const unnamedOutputs = binary && r.outputs === undefined ? '"binary_data_output":true' : '';
    const requestParameters = parametersText(r.parameters, unnamedOutputs);
    if (requestParameters !== '') text += `${requestParameters.slice(1)},`;
    text += '"inputs":[';
    const chunks: Uint8Array[] = [];
    for (let i = 0; i < r.inputs.length; i++) {
      const t = r.inputs[i]!;
      let extra: string;
      let data: string | undefined;
      if (t.sharedMemory !== undefined) {
        extra = sharedMemoryText(t.sharedMemory);
      } else if (binary || t.datatype === 'FP16' || t.datatype === 'BF16') {
        // JSON cannot carry half-precision values: they travel binary in either format.
        extra = `"binary_data_size":${t.bytes!.byteLength}`;
        chunks.push(t.bytes!);
      } else {
        extra = '';
        data = jsonData(t.name, t.datatype, t.shape, t.bytes!);
      }
      if (i > 0) text += ',';
      text += `{"name":${JSON.stringify(t.name)},"shape":[${t.shape.join(',')}],"datatype":"${t.datatype}"`;
      text += parametersText(t.parameters, extra);
      if (data !== undefined) text += `,"data":${data}`;
      text += '}';
    }
    text += ']';
    if (r.outputs !== undefined) {
      text += ',"outputs":[';
      for (let i = 0; i < r.outputs.length; i++) {
        const o = r.outputs[i]!;
        let extra = o.sharedMemory !== undefined ? sharedMemoryText(o.sharedMemory) : `"binary_data":${binary}`;
        if (o.classification !== undefined) extra += `,"classification":${o.classification}`;
        text += `${i > 0 ? ',' : ''}{"name":${JSON.stringify(o.name)}${parametersText(o.parameters, extra)}}`;
      }
      text += ']';
    }
    text += '}';
    // One buffer for the header and every input's bytes, each copied once.
    const jsonLength = Buffer.byteLength(text);
    let size = jsonLength;
    for (const chunk of chunks) size += chunk.byteLength;
    const body = Buffer.allocUnsafe(size);
    let at = body.write(text, 0, jsonLength, 'utf8');
    for (const chunk of chunks) {
      body.set(chunk, at);
      at += chunk.byteLength;
    }
    return { body, headerLength: binary || chunks.length > 0 ? jsonLength : undefined };
  }

  async *stream(r: WireRequest, c: CallContext): AsyncGenerator<InferResult, void, undefined> {
    const what = `streamed inference request to model '${r.model}'`;
    const metadata = await this.cachedMetadata(r.model, r.version, c);
    const body = generateBody(r, metadata);
    throwIfAborted(what, c);
    const signal = callSignal(c);
    let res: Dispatcher.ResponseData;
    try {
      res = await this.pool.request({
        method: 'POST',
        path: `${modelPath(r.model, r.version)}/generate_stream`,
        body,
        headers: { ...this.headersFor(c), 'content-type': 'application/json', 'accept-encoding': 'identity' },
        signal,
      });
    } catch (err) {
      throw this.failure(what, err, c, signal);
    }
    if (res.statusCode !== 200) {
      let text: string;
      try {
        text = await res.body.text();
      } catch (err) {
        throw this.failure(what, err, c, signal);
      }
      throw new InferenceServerError('http', res.statusCode, errorText(res.statusCode, text));
    }
    let pending = '';
    let finished = false;
    try {
      for await (const chunk of res.body) {
        pending += (chunk as Buffer).toString('utf8');
        let end: number;
        while ((end = pending.indexOf('\n\n')) !== -1) {
          const event = pending.slice(0, end);
          pending = pending.slice(end + 2);
          const data = sseData(what, event);
          if (data === undefined) continue;
          yield readGenerateEvent(what, r, metadata, data);
        }
      }
      finished = true;
    } catch (err) {
      if (err instanceof InferenceServerError || err instanceof ProtocolError) throw err;
      throw this.failure(what, err, c, signal);
    } finally {
      // A consumer that stops early (break, an error) closes the connection, which cancels the request on the server.
      if (!finished) res.body.destroy();
    }
    if (pending.trim() !== '')
      throw new ProtocolError(
        `${what}: the event stream ended inside an event: ${JSON.stringify(pending.slice(0, 200))}`,
      );
  }

  private cachedMetadata(model: string, version: string, c: CallContext): Promise<ModelMetadata> {
    const key = `${model}/${version}`;
    let p = this.metadataCache.get(key);
    if (p === undefined) {
      p = this.modelMetadata(model, version, c);
      this.metadataCache.set(key, p);
      p.catch(() => this.metadataCache.delete(key));
    }
    return p;
  }

  async repositoryIndex(ready: boolean, c: CallContext): Promise<RepositoryIndexEntry[]> {
    const doc = await this.json('repository index', 'POST', '/v2/repository/index', JSON.stringify({ ready }), c);
    if (!Array.isArray(doc)) throw new ProtocolError('repository index: the answer is not a JSON array');
    return doc.map((e, i) => {
      if (!isObject(e) || typeof e['name'] !== 'string')
        throw new ProtocolError(`repository index: entry ${i} has no name`);
      const out: { name: string; version?: string; state?: string; reason?: string } = { name: e['name'] };
      for (const k of ['version', 'state', 'reason'] as const) if (typeof e[k] === 'string') out[k] = e[k] as string;
      return out;
    });
  }

  loadModel(model: string, args: LoadArguments, c: CallContext): Promise<void> {
    const parameters: Record<string, string> = {};
    if (args.config !== undefined) parameters['config'] = args.config;
    for (const [path, bytes] of Object.entries(args.files ?? {})) {
      parameters[`file:${path}`] = Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength).toString('base64');
    }
    const body = Object.keys(parameters).length > 0 ? JSON.stringify({ parameters }) : undefined;
    return this.empty(`load of model '${model}'`, `/v2/repository/models/${encodeURIComponent(model)}/load`, body, c);
  }

  unloadModel(model: string, unloadDependents: boolean, c: CallContext): Promise<void> {
    const body = unloadDependents ? JSON.stringify({ parameters: { unload_dependents: true } }) : undefined;
    return this.empty(
      `unload of model '${model}'`,
      `/v2/repository/models/${encodeURIComponent(model)}/unload`,
      body,
      c,
    );
  }

  async statistics(model: string, version: string, c: CallContext): Promise<ModelStatistics[]> {
    const path = model === '' ? '/v2/models/stats' : `${modelPath(model, version)}/stats`;
    const doc = await this.json('statistics', 'GET', path, undefined, c);
    if (!isObject(doc) || !Array.isArray(doc['model_stats']))
      throw new ProtocolError('statistics: the answer has no model_stats list');
    return doc['model_stats'] as ModelStatistics[];
  }

  async traceSettings(model: string, update: TraceSettingsUpdate | undefined, c: CallContext): Promise<TraceSettings> {
    const path = model === '' ? '/v2/trace/setting' : `/v2/models/${encodeURIComponent(model)}/trace/setting`;
    const doc = await this.json(
      'trace settings',
      update ? 'POST' : 'GET',
      path,
      update ? JSON.stringify(update) : undefined,
      c,
    );
    if (!isObject(doc)) throw new ProtocolError('trace settings: the answer is not a JSON object');
    return doc as TraceSettings;
  }

  async logSettings(update: LogSettingsUpdate | undefined, c: CallContext): Promise<LogSettings> {
    const doc = await this.json(
      'log settings',
      update ? 'POST' : 'GET',
      '/v2/logging',
      update ? JSON.stringify(update) : undefined,
      c,
    );
    if (!isObject(doc)) throw new ProtocolError('log settings: the answer is not a JSON object');
    return doc as unknown as LogSettings;
  }

  async systemSharedMemoryStatus(name: string, c: CallContext): Promise<SharedMemoryStatus[]> {
    const path =
      name === ''
        ? '/v2/systemsharedmemory/status'
        : `/v2/systemsharedmemory/region/${encodeURIComponent(name)}/status`;
    const doc = await this.json('shared memory status', 'GET', path, undefined, c);
    if (!Array.isArray(doc)) throw new ProtocolError('shared memory status: the answer is not a JSON array');
    return doc.map((e: unknown, i) => {
      if (!isObject(e) || typeof e['name'] !== 'string')
        throw new ProtocolError(`shared memory status: entry ${i} has no name`);
      return {
        name: e['name'],
        key: String(e['key'] ?? ''),
        offset: Number(e['offset'] ?? 0),
        byteSize: Number(e['byte_size'] ?? 0),
      };
    });
  }

  registerSystemSharedMemory(
    name: string,
    key: string,
    byteSize: number,
    offset: number,
    c: CallContext,
  ): Promise<void> {
    return this.empty(
      `registration of shared memory region '${name}'`,
      `/v2/systemsharedmemory/region/${encodeURIComponent(name)}/register`,
      JSON.stringify({ key, offset, byte_size: byteSize }),
      c,
    );
  }

  unregisterSystemSharedMemory(name: string, c: CallContext): Promise<void> {
    const path =
      name === ''
        ? '/v2/systemsharedmemory/unregister'
        : `/v2/systemsharedmemory/region/${encodeURIComponent(name)}/unregister`;
    return this.empty(`unregistration of shared memory region '${name}'`, path, undefined, c);
  }

  async close(): Promise<void> {
    await this.pool.close();
  }
}

/**
 * `,"parameters":{...}` with the caller's parameters and `extra` (formatted `"key":value` pairs),
 * or '' when both are empty.
 */
function parametersText(p: Parameters | undefined, extra: string): string {
  const user = p === undefined ? '{}' : hasBigint(p) ? jsonText(p) : JSON.stringify(p);
  if (user.length === 2) return extra === '' ? '' : `,"parameters":{${extra}}`;
  return `,"parameters":${extra === '' ? user : `${user.slice(0, -1)},${extra}}`}`;
}

function sharedMemoryText(ref: SharedMemoryRef): string {
  const offset = ref.offset ? `,"shared_memory_offset":${ref.offset}` : '';
  return `"shared_memory_region":${JSON.stringify(ref.region)},"shared_memory_byte_size":${ref.byteSize}${offset}`;
}

/** The JSON of body's first `end` bytes (all of it by default). */
function parseJson(what: string, body: Buffer, end = body.byteLength): unknown {
  try {
    return JSON.parse(body.toString('utf8', 0, end));
  } catch (err) {
    throw new ProtocolError(
      `${what}: the answer is not JSON (${(err as Error).message}): ` +
        JSON.stringify(body.toString('utf8', 0, Math.min(end, 200))),
    );
  }
}

/** The JSON text of an input's `data`. */
function jsonData(name: string, datatype: Datatype, shape: readonly number[], bytes: Uint8Array): string {
  if (datatype === 'FP16' || datatype === 'BF16') {
    throw new InvalidInputError(
      `input '${name}' is ${datatype}, which the JSON format cannot carry; use the binary tensor format`,
    );
  }
  return encodeJsonTensorData(name, datatype, bytes, elementCount(shape));
}

export function readServerMetadata(doc: unknown): ServerMetadata {
  if (!isObject(doc) || typeof doc['name'] !== 'string' || typeof doc['version'] !== 'string') {
    throw new ProtocolError('server metadata: the answer has no name or version');
  }
  const ext = Array.isArray(doc['extensions'])
    ? doc['extensions'].filter((e): e is string => typeof e === 'string')
    : [];
  return { name: doc['name'], version: doc['version'], extensions: ext };
}

function readTensorMetadata(what: string, list: unknown): TensorMetadata[] {
  if (list === undefined) return [];
  if (!Array.isArray(list)) throw new ProtocolError(`${what}: inputs and outputs must be lists`);
  return list.map((t, i) => {
    if (
      !isObject(t) ||
      typeof t['name'] !== 'string' ||
      typeof t['datatype'] !== 'string' ||
      !Array.isArray(t['shape'])
    ) {
      throw new ProtocolError(`${what}: tensor ${i} lacks a name, datatype or shape`);
    }
    return { name: t['name'], datatype: t['datatype'], shape: (t['shape'] as unknown[]).map(Number) };
  });
}

function readModelMetadata(model: string, doc: unknown): ModelMetadata {
  const what = `metadata of model '${model}'`;
  if (!isObject(doc) || typeof doc['name'] !== 'string') throw new ProtocolError(`${what}: the answer has no name`);
  return {
    name: doc['name'],
    versions: Array.isArray(doc['versions']) ? doc['versions'].map(String) : [],
    platform: typeof doc['platform'] === 'string' ? doc['platform'] : '',
    inputs: readTensorMetadata(what, doc['inputs']),
    outputs: readTensorMetadata(what, doc['outputs']),
  };
}

function readParameters(v: unknown): Parameters | undefined {
  if (!isObject(v)) return undefined;
  let out: Parameters | undefined;
  for (const k in v) {
    if (k === 'binary_data_size') continue;
    const x = v[k];
    if (typeof x === 'string' || typeof x === 'number' || typeof x === 'boolean') (out ??= {})[k] = x;
    else if (typeof x === 'bigint') (out ??= {})[k] = exactInteger(x);
  }
  return out;
}

/** Reads an infer answer: the JSON header, then each binary output's bytes in order. */
function readInferReply(
  what: string,
  reply: Reply,
  bytesAsStrings: boolean,
  inShm: Map<string, SharedMemoryRef> | undefined,
): InferResult {
  const lengthText = header(reply.headers, HEADER_LENGTH);
  const body = reply.body;
  let doc: unknown;
  let binary: Buffer;
  if (lengthText !== undefined) {
    const n = Number(lengthText);
    if (!Number.isSafeInteger(n) || n < 0 || n > body.byteLength) {
      throw new ProtocolError(
        `${what}: Inference-Header-Content-Length ${JSON.stringify(lengthText)} ` +
        `does not fit a body of ${body.byteLength} bytes`,
      );
    }
    doc = parseJson(what, body, n);
    binary = body.subarray(n);
  } else {
    doc = parseJson(what, body);
    binary = body.subarray(body.byteLength);
  }
  if (!isObject(doc)) throw new ProtocolError(`${what}: the answer is not a JSON object`);
  if (typeof doc['model_name'] !== 'string') throw new ProtocolError(`${what}: the answer has no model_name`);
  if (!Array.isArray(doc['outputs'])) throw new ProtocolError(`${what}: the answer has no outputs list`);
  const list = doc['outputs'] as unknown[];
  const outputs: InferOutput[] = new Array(list.length);
  let offset = 0;
  for (let i = 0; i < list.length; i++) {
    const o = list[i];
    if (!isObject(o) || typeof o['name'] !== 'string' || typeof o['datatype'] !== 'string') {
      throw new ProtocolError(`${what}: output ${i} of the answer lacks a name or datatype`);
    }
    const name = o['name'];
    const datatype = o['datatype'] as Datatype;
    const shape = answerShape(what, name, o['shape']);
    const p = isObject(o['parameters']) ? o['parameters'] : undefined;
    const size = p?.['binary_data_size'];
    let data;
    let sharedMemory;
    if (size !== undefined) {
      if (typeof size !== 'number' || !Number.isSafeInteger(size) || size < 0 || offset + size > binary.byteLength) {
        throw new ProtocolError(
          `${what}: output '${name}' declares ${String(size)} binary bytes but ${binary.byteLength - offset} remain`,
        );
      }
      data = outputData(what, name, datatype, shape, binary.subarray(offset, offset + size), bytesAsStrings);
      offset += size;
    } else if (o['data'] !== undefined) {
      data = jsonOutputData(what, name, datatype, shape, o['data'], bytesAsStrings);
    } else if (inShm?.has(name)) {
      // The server wrote it into the region the request named; the answer carries no bytes for it.
      if (!isDatatype(datatype))
        throw new ProtocolError(`${what}: output '${name}' has an unknown datatype ${JSON.stringify(datatype)}`);
      data = emptyData(datatype);
      sharedMemory = inShm.get(name);
    } else if (elementCount(shape) === 0) {
      data = outputData(what, name, datatype, shape, new Uint8Array(0), bytesAsStrings);
    } else {
      throw new ProtocolError(`${what}: output '${name}' has neither data nor binary_data_size`);
    }
    const output: { -readonly [K in keyof InferOutput]: InferOutput[K] } = { name, datatype, shape, data };
    const parameters = p === undefined ? undefined : readParameters(p);
    if (parameters !== undefined) output.parameters = parameters;
    if (sharedMemory !== undefined) output.sharedMemory = sharedMemory;
    outputs[i] = output;
  }
  if (offset !== binary.byteLength) {
    throw new ProtocolError(
      `${what}: the answer has ${binary.byteLength - offset} bytes after its outputs' binary data`,
    );
  }
  const result: { -readonly [K in keyof InferResult]: InferResult[K] } = {
    model: doc['model_name'],
    version: typeof doc['model_version'] === 'string' ? doc['model_version'] : String(doc['model_version'] ?? ''),
    id: typeof doc['id'] === 'string' ? doc['id'] : '',
    outputs,
  };
  const parameters = doc['parameters'] === undefined ? undefined : readParameters(doc['parameters']);
  if (parameters !== undefined) result.parameters = parameters;
  return result;
}

function jsonOutputData(
  what: string,
  name: string,
  datatype: Datatype,
  shape: number[],
  data: unknown,
  bytesAsStrings: boolean,
) {
  let bytes: Uint8Array;
  try {
    bytes = decodeJsonTensorData(name, datatype, shape, data, Number.MAX_SAFE_INTEGER);
  } catch (err) {
    throw new ProtocolError(`${what}: output '${name}' of the answer: ${(err as Error).message}`);
  }
  return outputData(what, name, datatype, shape, bytes, bytesAsStrings);
}

/** The generate_stream body: each input as a top-level key holding its flat data. */
function generateBody(r: WireRequest, metadata: ModelMetadata): string {
  const known = new Set(metadata.inputs.map((t) => t.name));
  let text = '{';
  let first = true;
  const add = (key: string, valueText: string) => {
    text += `${first ? '' : ','}${JSON.stringify(key)}:${valueText}`;
    first = false;
  };
  if (r.id !== '') add('id', JSON.stringify(r.id));
  for (const t of r.inputs) {
    if (t.sharedMemory !== undefined)
      throw new InvalidInputError(
        `input '${t.name}': streams over HTTP cannot read inputs from shared memory; use gRPC`,
      );
    if (!known.has(t.name)) throw new InvalidInputError(`input '${t.name}' is not an input of model '${r.model}'`);
    add(t.name, jsonData(t.name, t.datatype, t.shape, t.bytes!));
  }
  if (r.outputs !== undefined)
    throw new InvalidInputError(`streams over HTTP return every output; leave outputs out or use gRPC`);
  if (r.parameters !== undefined) add('parameters', jsonText(r.parameters));
  return text + '}';
}

/** The JSON of one server-sent event (undefined for comments and keep-alives). */
function sseData(what: string, event: string): unknown {
  let data = '';
  for (const line of event.split('\n')) {
    if (line.startsWith('data:')) data += line.slice(line[5] === ' ' ? 6 : 5);
  }
  if (data === '') return undefined;
  try {
    return JSON.parse(data);
  } catch {
    throw new ProtocolError(`${what}: an event's data is not JSON: ${JSON.stringify(data.slice(0, 200))}`);
  }
}

/** One generate_stream event as an InferResult: keys naming outputs become tensors, the rest parameters. */
function readGenerateEvent(what: string, r: WireRequest, metadata: ModelMetadata, doc: unknown): InferResult {
  if (!isObject(doc)) throw new ProtocolError(`${what}: an event is not a JSON object`);
  if (typeof doc['error'] === 'string') throw new InferenceServerError('http', 500, doc['error']);
  const outputs: InferOutput[] = [];
  const parameters: Parameters = {};
  let anyParameter = false;
  for (const meta of metadata.outputs) {
    if (!(meta.name in doc)) continue;
    const value = doc[meta.name];
    const values = Array.isArray(value) ? value : [value];
    const shape = filledShape(meta.shape, values.length);
    outputs.push({
      name: meta.name,
      datatype: meta.datatype as Datatype,
      shape,
      data: jsonOutputData(what, meta.name, meta.datatype as Datatype, shape, values, r.bytesAsStrings),
    });
  }
  const outputNames = new Set(metadata.outputs.map((t) => t.name));
  for (const [k, v] of Object.entries(doc)) {
    if (k === 'model_name' || k === 'model_version' || k === 'id' || outputNames.has(k)) continue;
    if (typeof v === 'string' || typeof v === 'number' || typeof v === 'boolean') {
      parameters[k] = v;
      anyParameter = true;
    }
  }
  return {
    model: typeof doc['model_name'] === 'string' ? doc['model_name'] : r.model,
    version: typeof doc['model_version'] === 'string' ? doc['model_version'] : '',
    id: typeof doc['id'] === 'string' ? doc['id'] : '',
    outputs,
    ...(anyParameter ? { parameters } : {}),
  };
}

/** A metadata shape with its -1 dims filled for `count` elements: the innermost takes what is left, the others 1. */
function filledShape(dims: readonly number[], count: number): number[] {
  const shape = [...dims];
  let fixed = 1;
  for (const d of shape) if (d >= 0) fixed *= d;
  let innermost = true;
  for (let i = shape.length - 1; i >= 0; i--) {
    if (shape[i]! < 0) {
      shape[i] = innermost ? (fixed === 0 ? 0 : count / fixed) : 1;
      innermost = false;
    }
  }
  return shape.length === 0 ? [count] : shape;
}
