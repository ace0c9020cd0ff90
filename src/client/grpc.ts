/**
 * KServe v2 over gRPC (Triton's inference.GRPCInferenceService) on one
 * grpc-js channel, which multiplexes every call over a kept-alive HTTP/2
 * connection. Messages are our protobuf-es types of proto/grpc_service.proto;
 * inputs travel as raw_input_contents and outputs are read from
 * raw_output_contents as views.
 */
import {
  create,
  fromBinary,
  toBinary,
  type DescMessage,
  type MessageInitShape,
  type MessageShape,
} from '@bufbuild/protobuf';
import * as grpc from '@grpc/grpc-js';
import {
  GRPCInferenceService,
  ModelInferResponseSchema,
  ModelStreamInferResponseSchema,
  type InferParameter,
  type ModelInferResponse,
  type StatisticDuration,
} from '../gen/grpc_service_pb.js';
import { modelConfigToJson } from '../config/json.js';
import type { Datatype } from '../tensor/datatype.js';
import { describeTlsFailure } from './http-text.js';
import { abortFailure, exactInteger, throwIfAborted } from './call.js';
import {
  AbortError,
  ConnectionError,
  InferenceServerError,
  ProtocolError,
  STATUS_CODES,
  TimeoutError,
} from './errors.js';
import { encodeInferRequest, readInferAnswer, type InferAnswer } from './grpc-wire.js';
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
  TraceSettings,
  TraceSettingsUpdate,
} from './types.js';

type Methods = typeof GRPCInferenceService.method;
type Input<K extends keyof Methods> = Methods[K]['input'];
type Output<K extends keyof Methods> = Methods[K]['output'];

const SERVICE = `/${GRPCInferenceService.typeName}/`;
const MODEL_INFER = `${SERVICE}ModelInfer`;
const NO_CALL_OPTIONS: grpc.CallOptions = {};
const NO_CONTEXT = {};
type ChannelCall = ReturnType<grpc.ChannelInterface['createCall']>;
const same = (b: Buffer): Buffer => b;
const EMPTY_BYTES = new Uint8Array(0);
type Mutable<T> = { -readonly [K in keyof T]: T[K] };
const FINAL = 'triton_final_response';

/** "host:port" from grpc://host:port (a path is refused by the caller). */
export function grpcAddress(url: string): string {
  return url.replace(/^[a-z]+:\/\//i, '').replace(/\/+$/, '');
}

/** A sentence for a grpc-js failure; a connection that could not be made names the server. */
export function describeGrpcError(err: grpc.ServiceError, address: string): string {
  if (err.code === grpc.status.UNAVAILABLE) {
    // grpc-js reports a failed handshake as "No connection established. Last error: Error: <reason>".
    const last = /Last error: (?:Error: )?(.*?)(?:\. Resolution note:.*)?$/s.exec(err.details ?? '');
    const tls = last ? describeTlsFailure(address, last[1]!) : undefined;
    if (tls !== undefined) return tls;
    return `unable to connect to ${address}: ${err.details || 'unavailable'} (is the server running?)`;
  }
  return err.details || err.message;
}

function isConnectionFailure(err: grpc.ServiceError): boolean {
  return (
    err.code === grpc.status.UNAVAILABLE &&
    /No connection established|ECONNREFUSED|ECONNRESET|Connection dropped|connect/i.test(err.details ?? '')
  );
}

export interface GrpcTransportOptions {
  readonly address: string;
  readonly secure: boolean;
  readonly compression: 'gzip' | 'deflate' | undefined;
  readonly headers: Record<string, string> | undefined;
  readonly tls: { ca?: string | Buffer; key?: string | Buffer; cert?: string | Buffer } | undefined;
}

const toBuffer = (b: Uint8Array) => Buffer.from(b.buffer, b.byteOffset, b.byteLength);

export class GrpcTransport implements Transport {
  private readonly client: grpc.Client;
  private readonly channel: grpc.ChannelInterface;
  private readonly address: string;
  private readonly metadata: grpc.Metadata;
  private readonly serializers = new Map<string, [(m: never) => Buffer, (b: Buffer) => unknown]>();

  constructor(o: GrpcTransportOptions) {
    this.address = o.address;
    const asBuffer = (v: string | Buffer | undefined) =>
      v === undefined ? null : Buffer.isBuffer(v) ? v : Buffer.from(v);
    const creds = o.secure
      ? grpc.credentials.createSsl(asBuffer(o.tls?.ca), asBuffer(o.tls?.key), asBuffer(o.tls?.cert))
      : grpc.credentials.createInsecure();
    const options: grpc.ChannelOptions = { 'grpc.max_receive_message_length': -1, 'grpc.max_send_message_length': -1 };
    if (o.compression !== undefined) options['grpc.default_compression_algorithm'] = o.compression === 'gzip' ? 2 : 1;
    this.client = new grpc.Client(o.address, creds, options);
    this.channel = this.client.getChannel();
    this.metadata = new grpc.Metadata();
    for (const [k, v] of Object.entries(o.headers ?? {})) this.metadata.add(k.toLowerCase(), v);
  }

  private metadataFor(c: CallContext): grpc.Metadata {
    if (c.headers === undefined) return this.metadata;
    const md = this.metadata.clone();
    for (const [k, v] of Object.entries(c.headers)) md.set(k.toLowerCase(), v);
    return md;
  }

  private codec<K extends keyof Methods>(
    key: K,
  ): [(m: MessageShape<Input<K>>) => Buffer, (b: Buffer) => MessageShape<Output<K>>] {
    let pair = this.serializers.get(key);
    if (pair === undefined) {
      const m = GRPCInferenceService.method[key];
      const input = m.input as DescMessage;
      const output = m.output as DescMessage;
      pair = [(msg: never) => toBuffer(toBinary(input, msg)), (b: Buffer) => fromBinary(output, b)];
      this.serializers.set(key, pair);
    }
    return pair as unknown as [(m: MessageShape<Input<K>>) => Buffer, (b: Buffer) => MessageShape<Output<K>>];
  }

  private failure(what: string, err: grpc.ServiceError, c: CallContext): Error {
    if (err.code === grpc.status.CANCELLED && c.signal?.aborted) return new AbortError(what, c.signal.reason);
    if (err.code === grpc.status.DEADLINE_EXCEEDED && c.timeout !== undefined) return new TimeoutError(what, c.timeout);
    if (isConnectionFailure(err))
      return new ConnectionError(`${what}: ${describeGrpcError(err, this.address)}`, { cause: err });
    if (err.code === grpc.status.INTERNAL && /parse|deserializ/i.test(err.details ?? '')) {
      return new ProtocolError(`${what}: the answer does not parse: ${err.details}`, { cause: err });
    }
    return new InferenceServerError('grpc', err.code ?? STATUS_CODES.UNKNOWN, err.details || err.message);
  }

  /** One unary call; the caller's signal cancels it, a timeout becomes the call's deadline. */
  private unary<K extends keyof Methods>(
    key: K,
    request: MessageInitShape<Input<K>> | MessageShape<Input<K>>,
    what: string,
    c: CallContext,
  ): Promise<MessageShape<Output<K>>> {
    const m = GRPCInferenceService.method[key];
    const [serialize, deserialize] = this.codec(key);
    return this.call(SERVICE + m.name, serialize, (b: Buffer) => {
      try {
        return deserialize(b);
      } catch (err) {
        // grpc-js turns a throwing deserializer into an INTERNAL status naming it.
        throw new Error(`failed to parse the answer: ${(err as Error).message}`, { cause: err });
      }
    }, () => create(m.input as DescMessage, request as never) as MessageShape<Input<K>>, what, c);
  }

  private call<Req, Res>(
    path: string,
    serialize: (m: Req) => Buffer,
    deserialize: (b: Buffer) => Res,
    message: () => Req,
    what: string,
    c: CallContext,
  ): Promise<Res> {
    return new Promise<Res>((resolve, reject) => {
      throwIfAborted(what, c);
      const options: grpc.CallOptions =
        c.timeout === undefined ? NO_CALL_OPTIONS : { deadline: Date.now() + c.timeout };
      let onAbort: (() => void) | undefined;
      const call = this.client.makeUnaryRequest(path, serialize, deserialize, message(), this.metadataFor(c), options,
        (err, res) => {
          if (onAbort !== undefined) c.signal!.removeEventListener('abort', onAbort);
          if (err) reject(this.failure(what, err, c));
          else resolve(res!);
        });
      if (c.signal !== undefined) {
        onAbort = () => call.cancel();
        c.signal.addEventListener('abort', onAbort, { once: true });
      }
    });
  }

  async isLive(c: CallContext): Promise<boolean> {
    return (await this.unary('serverLive', {}, 'liveness check', c)).live;
  }

  async isReady(c: CallContext): Promise<boolean> {
    return (await this.unary('serverReady', {}, 'readiness check', c)).ready;
  }

  async isModelReady(model: string, version: string, c: CallContext): Promise<boolean> {
    try {
      return (await this.unary('modelReady', { name: model, version }, `readiness check of model '${model}'`, c)).ready;
    } catch (err) {
      // As over HTTP: a model the server does not know is not ready.
      if (err instanceof InferenceServerError && err.code === 'NOT_FOUND') return false;
      throw err;
    }
  }

  async serverMetadata(c: CallContext): Promise<ServerMetadata> {
    const r = await this.unary('serverMetadata', {}, 'server metadata', c);
    return { name: r.name, version: r.version, extensions: [...r.extensions] };
  }

  async modelMetadata(model: string, version: string, c: CallContext): Promise<ModelMetadata> {
    const r = await this.unary('modelMetadata', { name: model, version }, `metadata of model '${model}'`, c);
    const tensors = (list: typeof r.inputs) =>
      list.map((t) => ({ name: t.name, datatype: t.datatype, shape: t.shape.map(Number) }));
    return {
      name: r.name,
      versions: [...r.versions],
      platform: r.platform,
      inputs: tensors(r.inputs),
      outputs: tensors(r.outputs),
    };
  }

  async modelConfig(model: string, version: string, c: CallContext): Promise<ModelConfig> {
    const r = await this.unary('modelConfig', { name: model, version }, `configuration of model '${model}'`, c);
    if (r.config === undefined) throw new ProtocolError(`configuration of model '${model}': the answer has no config`);
    return modelConfigToJson(r.config);
  }

  /**
   * One ModelInfer call on the channel itself, with one promise: makeUnaryRequest's layers (an Error for the
   * caller's stack, a call event emitter, the interceptor chain, the options objects) cost more than the rest of the
   * client's work per call. The message is written and read by hand (grpc-wire.ts).
   */
  infer(r: WireRequest, c: CallContext): Promise<InferResult> {
    return new Promise<InferResult>((resolve, reject) => {
      if (c.signal?.aborted) return reject(new AbortError(inferWhat(r), c.signal.reason));
      const bytes = encodeInferRequest(r, false);
      const deadline = c.timeout === undefined ? Infinity : Date.now() + c.timeout;
      const call = this.channel.createCall(MODEL_INFER, deadline, undefined, null, undefined);
      const listener = new InferListener(this, r, c, call, resolve, reject);
      call.start(this.metadataFor(c), listener);
      call.startRead();
      call.sendMessageWithContext(NO_CONTEXT, bytes);
      call.halfClose();
      if (c.signal !== undefined) listener.listen(c.signal);
    });
  }

  /** The client's error for a call that ended with a status other than OK. */
  statusFailure(what: string, status: grpc.StatusObject, c: CallContext): Error {
    const err = new Error(`${status.code} ${grpc.status[status.code]}: ${status.details}`) as grpc.ServiceError;
    err.code = status.code;
    err.details = status.details;
    err.metadata = status.metadata;
    return this.failure(what, err, c);
  }

  async *stream(r: WireRequest, c: CallContext): AsyncGenerator<InferResult, void, undefined> {
    const what = `streamed inference request to model '${r.model}'`;
    throwIfAborted(what, c);
    const options: grpc.CallOptions = c.timeout === undefined ? {} : { deadline: Date.now() + c.timeout };
    const call = this.client.makeBidiStreamRequest(
      `${SERVICE}ModelStreamInfer`,
      same,
      same,
      this.metadataFor(c),
      options,
    );
    const queue = new AnswerQueue<Buffer>();
    call.on('data', (b: Buffer) => queue.push(b));
    call.on('error', (err: grpc.ServiceError) => queue.fail(this.failure(what, err, c)));
    call.on('end', () => queue.end());
    const onAbort = () => call.cancel();
    c.signal?.addEventListener('abort', onAbort, { once: true });
    let done = false;
    try {
      call.write(encodeInferRequest(r, true));
      call.end();
      for (;;) {
        const bytes = await queue.next();
        if (bytes === undefined) break;
        let msg;
        try {
          msg = fromBinary(ModelStreamInferResponseSchema, bytes);
        } catch (err) {
          throw new ProtocolError(`${what}: a streamed answer does not parse: ${(err as Error).message}`);
        }
        if (msg.errorMessage !== '') throw new InferenceServerError('grpc', STATUS_CODES.UNKNOWN, msg.errorMessage);
        if (msg.inferResponse === undefined)
          throw new ProtocolError(`${what}: a streamed answer has neither a response nor an error`);
        const result = readInferResponse(what, msg.inferResponse, r.bytesAsStrings, sharedMemoryOutputs(r));
        // A bare final flag (asked for, so the end is known without waiting for the stream to close) is not a response.
        if (!(result.final === true && result.outputs.length === 0)) yield result;
        if (result.final === true) {
          done = true;
          break;
        }
      }
      done = true;
    } finally {
      c.signal?.removeEventListener('abort', onAbort);
      // Stopped early (break, error): cancelling the call cancels the request on the server.
      if (!done) call.cancel();
      // eslint-disable-next-line no-unsafe-finally -- an abort is the cause of whatever else ended the stream
      if (c.signal?.aborted && !done) throw abortFailure(what, c);
    }
  }

  async repositoryIndex(ready: boolean, c: CallContext): Promise<RepositoryIndexEntry[]> {
    const r = await this.unary('repositoryIndex', { ready }, 'repository index', c);
    return r.models.map((m) => {
      const e: { name: string; version?: string; state?: string; reason?: string } = { name: m.name };
      if (m.version !== '') e.version = m.version;
      if (m.state !== '') e.state = m.state;
      if (m.reason !== '') e.reason = m.reason;
      return e;
    });
  }

  async loadModel(model: string, args: LoadArguments, c: CallContext): Promise<void> {
    const p: Record<
      string,
      { parameterChoice: { case: 'stringParam'; value: string } | { case: 'bytesParam'; value: Uint8Array } }
    > = {};
    if (args.config !== undefined) p['config'] = { parameterChoice: { case: 'stringParam', value: args.config } };
    for (const [path, bytes] of Object.entries(args.files ?? {}))
      p[`file:${path}`] = { parameterChoice: { case: 'bytesParam', value: bytes } };
    await this.unary('repositoryModelLoad', { modelName: model, parameters: p }, `load of model '${model}'`, c);
  }

  async unloadModel(model: string, unloadDependents: boolean, c: CallContext): Promise<void> {
    const parameters: Record<string, { parameterChoice: { case: 'boolParam'; value: boolean } }> = {};
    if (unloadDependents) parameters['unload_dependents'] = { parameterChoice: { case: 'boolParam', value: true } };
    await this.unary('repositoryModelUnload', { modelName: model, parameters }, `unload of model '${model}'`, c);
  }

  async statistics(model: string, version: string, c: CallContext): Promise<ModelStatistics[]> {
    const r = await this.unary('modelStatistics', { name: model, version }, 'statistics', c);
    const d = (x: StatisticDuration | undefined) => ({ count: Number(x?.count ?? 0n), ns: Number(x?.ns ?? 0n) });
    return r.modelStats.map((m) => {
      const s = m.inferenceStats;
      return {
        name: m.name,
        version: m.version,
        last_inference: Number(m.lastInference),
        inference_count: Number(m.inferenceCount),
        execution_count: Number(m.executionCount),
        inference_stats: {
          success: d(s?.success),
          fail: d(s?.fail),
          queue: d(s?.queue),
          compute_input: d(s?.computeInput),
          compute_infer: d(s?.computeInfer),
          compute_output: d(s?.computeOutput),
          cache_hit: d(s?.cacheHit),
          cache_miss: d(s?.cacheMiss),
        },
        response_stats: Object.fromEntries(
          Object.entries(m.responseStats).map(([k, v]) => [
            k,
            {
              compute_infer: d(v.computeInfer),
              compute_output: d(v.computeOutput),
              success: d(v.success),
              fail: d(v.fail),
              empty_response: d(v.emptyResponse),
              cancel: d(v.cancel),
            },
          ]),
        ),
        batch_stats: m.batchStats.map((b) => ({
          batch_size: Number(b.batchSize),
          compute_input: d(b.computeInput),
          compute_infer: d(b.computeInfer),
          compute_output: d(b.computeOutput),
        })),
        memory_usage: m.memoryUsage.map((u) => ({ type: u.type, id: Number(u.id), byte_size: Number(u.byteSize) })),
      };
    });
  }

  async traceSettings(model: string, update: TraceSettingsUpdate | undefined, c: CallContext): Promise<TraceSettings> {
    const settings: Record<string, { value: string[] }> = {};
    for (const [k, v] of Object.entries(update ?? {})) {
      settings[k] = { value: v === null ? [] : Array.isArray(v) ? v.map(String) : [String(v)] };
    }
    const r = await this.unary('traceSetting', { settings, modelName: model }, 'trace settings', c);
    const out: TraceSettings = {};
    for (const [k, v] of Object.entries(r.settings))
      out[k] = k === 'trace_level' || v.value.length !== 1 ? [...v.value] : v.value[0]!;
    return out;
  }

  async logSettings(update: LogSettingsUpdate | undefined, c: CallContext): Promise<LogSettings> {
    type Choice =
      | { case: 'boolParam'; value: boolean }
      | { case: 'uint32Param'; value: number }
      | { case: 'stringParam'; value: string };
    const settings: Record<string, { parameterChoice: Choice }> = {};
    for (const [k, v] of Object.entries(update ?? {})) {
      const choice: Choice =
        typeof v === 'boolean'
          ? { case: 'boolParam', value: v }
          : typeof v === 'number'
            ? { case: 'uint32Param', value: v }
            : { case: 'stringParam', value: String(v) };
      settings[k] = { parameterChoice: choice };
    }
    const r = await this.unary('logSettings', { settings }, 'log settings', c);
    const out: Record<string, unknown> = {};
    for (const [k, v] of Object.entries(r.settings)) out[k] = v.parameterChoice.value;
    return out as unknown as LogSettings;
  }

  async systemSharedMemoryStatus(name: string, c: CallContext): Promise<SharedMemoryStatus[]> {
    const r = await this.unary('systemSharedMemoryStatus', { name }, 'shared memory status', c);
    return Object.values(r.regions).map((s) => ({
      name: s.name,
      key: s.key,
      offset: Number(s.offset),
      byteSize: Number(s.byteSize),
    }));
  }

  async registerSystemSharedMemory(
    name: string,
    key: string,
    byteSize: number,
    offset: number,
    c: CallContext,
  ): Promise<void> {
    await this.unary(
      'systemSharedMemoryRegister',
      { name, key, offset: BigInt(offset), byteSize: BigInt(byteSize) },
      `registration of shared memory region '${name}'`,
      c,
    );
  }

  async unregisterSystemSharedMemory(name: string, c: CallContext): Promise<void> {
    await this.unary('systemSharedMemoryUnregister', { name }, `unregistration of shared memory region '${name}'`, c);
  }

  async close(): Promise<void> {
    this.client.close();
  }
}

function parameterValue(p: InferParameter): string | number | boolean | bigint | undefined {
  const c = p.parameterChoice;
  switch (c.case) {
    case 'int64Param':
    case 'uint64Param':
      return exactInteger(c.value);
    case undefined:
      return undefined;
    default:
      return c.value;
  }
}

function readParameters(map: { [key: string]: InferParameter }): Parameters | undefined {
  let out: Parameters | undefined;
  for (const k in map) {
    const v = parameterValue(map[k]!);
    if (v === undefined) continue;
    (out ??= {})[k] = v;
  }
  return out;
}

/** The answer's bytes as an InferAnswer: the hand-written reader, else the generated decoder (and its error). */
function decodeInferAnswer(what: string, bytes: Buffer): InferAnswer {
  try {
    return readInferAnswer(bytes) ?? fromBinary(ModelInferResponseSchema, bytes);
  } catch (err) {
    throw new ProtocolError(`${what}: the answer does not parse: ${(err as Error).message}`, { cause: err });
  }
}

function readInferResponse(
  what: string,
  res: InferAnswer,
  bytesAsStrings: boolean,
  inShm: Map<string, SharedMemoryRef> | undefined,
): InferResult {
  const raw = res.rawOutputContents;
  if (raw.length !== 0 && raw.length !== res.outputs.length) {
    throw new ProtocolError(
      `${what}: the answer has ${res.outputs.length} outputs but ${raw.length} raw_output_contents`,
    );
  }
  const outputs: InferOutput[] = new Array(res.outputs.length);
  for (let i = 0; i < res.outputs.length; i++) {
    const o = res.outputs[i]!;
    const shape = answerShape(what, o.name, o.shape);
    const parameters = readParameters(o.parameters);
    const sharedMemory = inShm?.get(o.name);
    if (sharedMemory !== undefined) {
      // Written into the region the request named: its raw entry is empty.
      const data = emptyDataChecked(what, o.name, o.datatype);
      const output: Mutable<InferOutput> = { name: o.name, datatype: o.datatype as Datatype, shape, data };
      if (parameters !== undefined) output.parameters = parameters;
      output.sharedMemory = sharedMemory;
      outputs[i] = output;
      continue;
    }
    if (raw.length === 0 && o.contents !== undefined) {
      throw new ProtocolError(
        `${what}: output '${o.name}' came in typed contents; the client reads raw_output_contents only`,
      );
    }
    const data = outputData(what, o.name, o.datatype, shape, raw[i] ?? EMPTY_BYTES, bytesAsStrings);
    const output: Mutable<InferOutput> = { name: o.name, datatype: o.datatype as Datatype, shape, data };
    if (parameters !== undefined) output.parameters = parameters;
    outputs[i] = output;
  }
  const parameters = readParameters(res.parameters);
  let final: boolean | undefined;
  if (parameters !== undefined && FINAL in parameters) {
    final = parameters[FINAL] === true;
    delete parameters[FINAL];
  }
  const result: Mutable<InferResult> = { model: res.modelName, version: res.modelVersion, id: res.id, outputs };
  if (parameters !== undefined && Object.keys(parameters).length > 0) result.parameters = parameters;
  if (final !== undefined) result.final = final;
  return result;
}

function emptyDataChecked(what: string, name: string, datatype: string) {
  try {
    return emptyData(datatype as InferOutput['datatype']);
  } catch {
    throw new ProtocolError(`${what}: output '${name}' has an unknown datatype ${JSON.stringify(datatype)}`);
  }
}

const inferWhat = (r: WireRequest) => `inference request to model '${r.model}'`;

/** What grpc-js tells of one ModelInfer call, turned into the caller's result or error. */
class InferListener implements grpc.InterceptingListener {
  private message: Buffer | undefined;
  private onAbort: (() => void) | undefined;
  private ended = false;

  constructor(
    private readonly transport: GrpcTransport,
    private readonly r: WireRequest,
    private readonly c: CallContext,
    private readonly call: ChannelCall,
    private readonly resolve: (result: InferResult) => void,
    private readonly reject: (err: Error) => void,
  ) {}

  /** Cancels the call when `signal` fires. */
  listen(signal: AbortSignal): void {
    if (this.ended) return;
    this.onAbort = () => this.call.cancelWithStatus(grpc.status.CANCELLED, 'Cancelled on client');
    signal.addEventListener('abort', this.onAbort, { once: true });
  }

  onReceiveMetadata(): void {}

  onReceiveMessage(message: Buffer): void {
    if (this.message !== undefined) {
      this.call.cancelWithStatus(grpc.status.UNIMPLEMENTED, 'Too many responses received');
      return;
    }
    this.message = message;
  }

  onReceiveStatus(status: grpc.StatusObject): void {
    if (this.ended) return;
    this.ended = true;
    if (this.onAbort !== undefined) this.c.signal!.removeEventListener('abort', this.onAbort);
    const r = this.r;
    const what = inferWhat(r);
    if (status.code !== grpc.status.OK) return this.reject(this.transport.statusFailure(what, status, this.c));
    const bytes = this.message;
    this.message = undefined;
    if (bytes === undefined) return this.reject(new ProtocolError(`${what}: the server answered OK without a message`));
    try {
      this.resolve(readInferResponse(what, decodeInferAnswer(what, bytes), r.bytesAsStrings, sharedMemoryOutputs(r)));
    } catch (err) {
      this.reject(err as Error);
    }
  }
}

/** The answers of a stream as a pull queue: pushed by grpc-js events, taken by the async generator. */
class AnswerQueue<T> {
  private readonly items: T[] = [];
  private error: Error | undefined;
  private ended = false;
  private waiter: { resolve: (v: T | undefined) => void; reject: (e: Error) => void } | undefined;

  push(item: T): void {
    if (this.waiter) {
      const w = this.waiter;
      this.waiter = undefined;
      w.resolve(item);
    } else this.items.push(item);
  }

  fail(err: Error): void {
    if (this.ended) return;
    this.error = err;
    this.ended = true;
    this.wake();
  }

  end(): void {
    this.ended = true;
    this.wake();
  }

  private wake(): void {
    if (!this.waiter) return;
    const w = this.waiter;
    this.waiter = undefined;
    if (this.error) w.reject(this.error);
    else w.resolve(undefined);
  }

  next(): Promise<T | undefined> {
    if (this.items.length > 0) return Promise.resolve(this.items.shift());
    if (this.error) return Promise.reject(this.error);
    if (this.ended) return Promise.resolve(undefined);
    return new Promise((resolve, reject) => (this.waiter = { resolve, reject }));
  }
}

export type { ModelInferResponse };
