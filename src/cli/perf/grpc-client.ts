/**
 * gRPC side of the load tool: Triton's GRPCInferenceService through
 * @grpc/grpc-js, with messages from our protobuf-es code for
 * proto/grpc_service.proto. Infer requests are encoded once; ModelInfer
 * sends the prepared bytes, and --streaming keeps one ModelStreamInfer
 * stream per concurrency slot.
 */
import { create, fromBinary, toBinary, toJson, type DescMessage, type MessageShape } from '@bufbuild/protobuf';
import * as grpc from '@grpc/grpc-js';
import {
  ModelConfigRequestSchema,
  ModelConfigResponseSchema,
  ModelInferRequestSchema,
  ModelInferResponseSchema,
  ModelMetadataRequestSchema,
  ModelMetadataResponseSchema,
  ModelStatisticsRequestSchema,
  ModelStatisticsResponseSchema,
  ModelStreamInferResponseSchema,
  ServerMetadataRequestSchema,
  ServerMetadataResponseSchema,
} from '../../gen/grpc_service_pb.js';
import { modelConfigToJson } from '../../config/index.js';
import { describeGrpcError, grpcAddress } from '../../client/grpc.js';
import { PerfError } from './errors.js';
import type { PerfOptions } from './options.js';
import type { ModelInfo } from './model.js';
import { type Step, assembleRequest } from './input-data.js';
import { parseStatistics, type StatsSnapshot } from './server-stats.js';
import { type CallSink, type ControlClient, InferCall, type InferTransport, type ServerInfo } from './transport.js';

const SERVICE = '/inference.GRPCInferenceService';
const identity = (b: Buffer) => b;
export { grpcAddress };

const CHANNEL_OPTIONS: grpc.ChannelOptions = {
  'grpc.max_receive_message_length': -1,
  'grpc.max_send_message_length': -1,
};

export class GrpcControlClient implements ControlClient {
  private readonly client: grpc.Client;

  constructor(
    private readonly address: string,
    private readonly metadata: grpc.Metadata,
  ) {
    this.client = new grpc.Client(address, grpc.credentials.createInsecure(), CHANNEL_OPTIONS);
  }

  private call<I extends DescMessage, O extends DescMessage>(
    method: string,
    input: I,
    output: O,
    request: MessageShape<I>,
    what: string,
  ): Promise<MessageShape<O>> {
    return new Promise((resolve, reject) => {
      this.client.makeUnaryRequest(
        `${SERVICE}/${method}`,
        (m: MessageShape<I>) => Buffer.from(toBinary(input, m)),
        (b: Buffer) => fromBinary(output, b),
        request,
        this.metadata,
        { deadline: Date.now() + 30_000 },
        (err, res) => (err ? reject(new PerfError(what, describeGrpcError(err, this.address))) : resolve(res!)),
      );
    });
  }

  async serverMetadata(): Promise<ServerInfo> {
    const r = await this.call(
      'ServerMetadata',
      ServerMetadataRequestSchema,
      ServerMetadataResponseSchema,
      create(ServerMetadataRequestSchema),
      'failed to get server metadata',
    );
    return { extensions: [...r.extensions] };
  }

  async modelMetadata(name: string, version: string): Promise<unknown> {
    const r = await this.call(
      'ModelMetadata',
      ModelMetadataRequestSchema,
      ModelMetadataResponseSchema,
      create(ModelMetadataRequestSchema, { name, version }),
      'failed to get model metadata',
    );
    return toJson(ModelMetadataResponseSchema, r, { useProtoFieldName: true });
  }

  async modelConfig(name: string, version: string): Promise<unknown> {
    const r = await this.call(
      'ModelConfig',
      ModelConfigRequestSchema,
      ModelConfigResponseSchema,
      create(ModelConfigRequestSchema, { name, version }),
      'failed to get model config',
    );
    return r.config ? modelConfigToJson(r.config) : {};
  }

  async statistics(name?: string, version?: string): Promise<StatsSnapshot> {
    const r = await this.call(
      'ModelStatistics',
      ModelStatisticsRequestSchema,
      ModelStatisticsResponseSchema,
      create(ModelStatisticsRequestSchema, { name: name ?? '', version: version ?? '' }),
      'failed to get model statistics',
    );
    const doc = toJson(ModelStatisticsResponseSchema, r, { useProtoFieldName: true }) as Record<string, unknown>;
    return parseStatistics({ model_stats: doc['model_stats'] ?? [] });
  }

  async close(): Promise<void> {
    this.client.close();
  }
}

/** A gRPC call: its completion callbacks are bound once, when the call object is made. */
export class GrpcInferCall extends InferCall {
  transport!: GrpcInferTransport;
  stream: grpc.ClientDuplexStream<Buffer, Buffer> | undefined;
  readonly onUnary = (err: grpc.ServiceError | null, bytes?: Buffer) => this.transport.unaryDone(this, err, bytes);
  readonly onStreamData = (bytes: Buffer) => this.transport.streamData(this, bytes);
  readonly onStreamError = (err: grpc.ServiceError) => this.transport.streamError(this, err);
}

export interface GrpcTransportOptions {
  readonly address: string;
  readonly bodies: readonly Buffer[];
  readonly metadata: grpc.Metadata;
  readonly streaming: boolean;
  readonly now: () => number;
}

export class GrpcInferTransport implements InferTransport {
  private readonly client: grpc.Client;
  private readonly bodies: readonly Buffer[];
  private readonly options: GrpcTransportOptions;
  private readonly calls: GrpcInferCall[] = [];

  constructor(o: GrpcTransportOptions) {
    this.options = o;
    this.bodies = o.bodies;
    this.client = new grpc.Client(o.address, grpc.credentials.createInsecure(), CHANNEL_OPTIONS);
  }

  get bodyCount(): number {
    return this.bodies.length;
  }

  createCall(sink: CallSink, slot: number): GrpcInferCall {
    const call = new GrpcInferCall(sink, slot);
    call.transport = this;
    this.calls.push(call);
    return call;
  }

  send(c: InferCall): void {
    const call = c as GrpcInferCall;
    const now = this.options.now;
    call.startNs = now();
    call.responseStartNs = 0;
    const body = this.bodies[call.bodyIndex]!;
    if (this.options.streaming) {
      if (!call.stream) {
        call.stream = this.client.makeBidiStreamRequest(
          `${SERVICE}/ModelStreamInfer`,
          identity,
          identity,
          this.options.metadata,
        );
        call.stream.on('data', call.onStreamData);
        call.stream.on('error', call.onStreamError);
      }
      call.stream.write(body);
    } else {
      this.client.makeUnaryRequest(
        `${SERVICE}/ModelInfer`,
        identity,
        identity,
        body,
        this.options.metadata,
        call.onUnary,
      );
    }
    // The request is already encoded: "marshal" is what it takes to hand it to the channel.
    call.sentNs = now();
  }

  unaryDone(call: GrpcInferCall, err: grpc.ServiceError | null, bytes: Buffer | undefined): void {
    const now = this.options.now;
    if (err) {
      call.sink.callFailed(
        call,
        new PerfError('', `inference request failed: ${describeGrpcError(err, this.options.address)}`),
      );
      return;
    }
    // "unmarshal": decoding the response, as a client would.
    call.responseStartNs = now();
    fromBinary(ModelInferResponseSchema, bytes!);
    call.sink.callDone(call, now());
  }

  streamData(call: GrpcInferCall, bytes: Buffer): void {
    const now = this.options.now;
    call.responseStartNs = now();
    const res = fromBinary(ModelStreamInferResponseSchema, bytes);
    if (res.errorMessage) {
      call.sink.callFailed(call, new PerfError('', `inference request failed: ${res.errorMessage}`));
      return;
    }
    call.sink.callDone(call, now());
  }

  streamError(call: GrpcInferCall, err: grpc.ServiceError): void {
    call.stream = undefined;
    if (err.code === grpc.status.CANCELLED) return;
    call.sink.callFailed(
      call,
      new PerfError('', `inference stream failed: ${describeGrpcError(err, this.options.address)}`),
    );
  }

  async close(): Promise<void> {
    for (const c of this.calls) {
      c.stream?.removeListener('error', c.onStreamError);
      c.stream?.on('error', () => undefined);
      c.stream?.end();
      c.stream?.cancel();
    }
    this.client.close();
  }
}

/** Encodes one ModelInferRequest per input step. */
export function encodeGrpcInferRequests(o: PerfOptions, model: ModelInfo, steps: readonly Step[]): Buffer[] {
  return steps.map((_, i) => {
    const inputs = assembleRequest(model, steps, i, o.batchSize);
    const msg = create(ModelInferRequestSchema, {
      modelName: o.modelName,
      modelVersion: o.modelVersion,
      inputs: inputs.map((t) => ({ name: t.name, datatype: t.datatype, shape: t.shape.map((d) => BigInt(d)) })),
      outputs: model.outputs.map((t) => ({ name: t.name })),
      rawInputContents: inputs.map((t) => t.data),
    });
    return Buffer.from(toBinary(ModelInferRequestSchema, msg));
  });
}

export function grpcBackend(o: PerfOptions) {
  const address = grpcAddress(o.url);
  const metadata = new grpc.Metadata();
  for (const [k, v] of o.headers) metadata.add(k.toLowerCase(), v);
  if (o.loadMode === 'request_rate' && o.streaming) {
    throw new PerfError('', '--streaming is supported with --concurrency-range only in nereid perf');
  }
  return {
    control: new GrpcControlClient(address, metadata),
    async createTransport(
      model: ModelInfo,
      steps: Step[],
      _connections: number | null,
      now: () => number,
    ): Promise<InferTransport> {
      return new GrpcInferTransport({
        address,
        bodies: encodeGrpcInferRequests(o, model, steps),
        metadata,
        streaming: o.streaming,
        now,
      });
    },
  };
}
