/**
 * Test fixtures for the gRPC frontend: an echo ServerApi, a grpc-js client
 * built from our own service definitions, and promise wrappers.
 */
import { create } from '@bufbuild/protobuf';
import { SharedMemoryRegistry } from '../../../src/core/shared-memory.js';
import * as grpc from '@grpc/grpc-js';
import { fileURLToPath } from 'node:url';
import { ModelConfigSchema, type ModelConfig } from '../../../src/gen/model_config_pb.js';
import { Errors } from '../../../src/errors.js';
import type { LoadModelOptions, ServerApi } from '../../../src/core/server-api.js';
import type {
  InferRequest,
  InferResponse,
  ModelControlMode,
  ModelMetadata,
  ModelStatistics,
  RepositoryIndexEntry,
  ServerMetadata,
} from '../../../src/types/api.js';
import {
  GrpcFrontend,
  healthServiceDefinition,
  inferenceServiceDefinition,
  type GrpcFrontendOptions,
} from '../../../src/frontends/grpc/index.js';
import { modelConfigToJson } from '../../../src/config/index.js';
import type { ModelStreamInferResponse } from '../../../src/gen/grpc_service_pb.js';

/** The repository root (tests run from dist/test/...). */
export const repoRoot = fileURLToPath(new URL('../../../../', import.meta.url));

const zeroStat = () => ({ count: 0, ns: 0 });

/**
 * A ServerApi that answers from memory. Model "echo" returns its inputs as
 * outputs (only the requested ones, when outputs are named) and echoes the
 * request parameters back as response parameters. "fail" fails in
 * execution; "decoupled" is configured decoupled. A `delay_ms` parameter
 * delays the answer. Every call is recorded.
 */
export class EchoServer implements ServerApi {
  readonly controlMode: ModelControlMode = 'explicit';
  /** Client shared memory off, as by default; a test may swap in an enabled registry. */
  sharedMemory = new SharedMemoryRegistry(false);
  ready = true;
  readonly requests: InferRequest[] = [];
  readonly loads: Array<{ name: string; options?: LoadModelOptions }> = [];
  readonly unloads: Array<{ name: string; unloadDependents?: boolean }> = [];
  readonly models = ['echo', 'fail', 'decoupled'];

  async start(): Promise<void> {}
  async stop(): Promise<void> {}
  isLive(): boolean {
    return true;
  }
  isReady(): boolean {
    return this.ready;
  }
  metadata(): ServerMetadata {
    return { name: 'triton', version: '2.0.0-test', extensions: ['classification', 'sequence', 'model_repository'] };
  }
  private check(name: string, version?: string): void {
    if (!this.models.includes(name)) throw Errors.modelNotFound(name);
    if (version !== undefined && version !== '1') throw Errors.modelVersionNotFound(name, version);
  }
  modelMetadata(name: string, version?: string): ModelMetadata {
    this.check(name, version);
    return {
      name,
      versions: ['1'],
      platform: 'onnxruntime_onnx',
      inputs: [{ name: 'INPUT0', datatype: 'INT32', shape: [-1, 16] }],
      outputs: [{ name: 'OUTPUT0', datatype: 'INT32', shape: [-1, 16] }],
    };
  }
  modelConfig(name: string, version?: string): ModelConfig {
    this.check(name, version);
    return create(ModelConfigSchema, {
      name,
      maxBatchSize: 8,
      modelTransactionPolicy: { decoupled: name === 'decoupled' },
    });
  }
  modelConfigJson(name: string, version?: string): Record<string, unknown> {
    return modelConfigToJson(this.modelConfig(name, version));
  }

  async modelReady(name: string, version?: string): Promise<boolean> {
    this.check(name, version);
    return true;
  }
  async infer(request: InferRequest): Promise<InferResponse> {
    this.requests.push(request);
    this.check(request.model, request.version === '' ? undefined : String(request.version));
    const delay = request.parameters?.delay_ms;
    if (delay !== undefined) await new Promise((r) => setTimeout(r, Number(delay)));
    if (request.model === 'fail') throw Errors.modelExecution(request.model, 'deliberate failure');
    const wanted = request.outputs?.map((o) => o.name);
    const outputs = request.inputs.filter((t) => wanted === undefined || wanted.includes(t.name));
    return {
      modelName: request.model,
      modelVersion: '1',
      id: request.id ?? '',
      parameters: request.parameters,
      outputs,
    };
  }
  modelStatistics(name?: string, version?: string): ModelStatistics[] {
    if (name !== undefined && !this.models.includes(name)) throw Errors.statsModelNotAvailable(name);
    void version;
    return [
      {
        name: name ?? 'echo',
        version: '1',
        last_inference: 1700000000000,
        inference_count: 7,
        execution_count: 3,
        inference_stats: {
          success: { count: 7, ns: 7000 },
          fail: zeroStat(),
          queue: { count: 7, ns: 700 },
          compute_input: zeroStat(),
          compute_infer: zeroStat(),
          compute_output: zeroStat(),
          cache_hit: zeroStat(),
          cache_miss: zeroStat(),
        },
        response_stats: {},
        batch_stats: [
          {
            batch_size: 2,
            compute_input: zeroStat(),
            compute_infer: { count: 3, ns: 300 },
            compute_output: zeroStat(),
          },
        ],
        memory_usage: [],
      },
    ];
  }
  async repositoryIndex(readyOnly?: boolean, repository?: string): Promise<RepositoryIndexEntry[]> {
    checkRepository(repository);
    const all: RepositoryIndexEntry[] = [{ name: 'echo', version: '1', state: 'READY' }, { name: 'never_loaded' }];
    return readyOnly ? all.filter((e) => e.state === 'READY') : all;
  }
  async loadModel(name: string, options?: LoadModelOptions): Promise<void> {
    checkRepository(options?.repository);
    this.loads.push({ name, options });
    if (name === 'broken') throw Errors.loadFailed(name, 'no such file');
  }
  async unloadModel(name: string, options?: { unloadDependents?: boolean; repository?: string }): Promise<void> {
    checkRepository(options?.repository);
    this.unloads.push({ name, unloadDependents: options?.unloadDependents });
  }
}

const InferenceClient = grpc.makeGenericClientConstructor(inferenceServiceDefinition, 'GRPCInferenceService');
const HealthClient = grpc.makeGenericClientConstructor(healthServiceDefinition, 'Health');

export interface Harness {
  frontend: GrpcFrontend;
  port: number;
  client: grpc.Client;
  health: grpc.Client;
  close(): Promise<void>;
}

export async function startHarness(
  server: ServerApi,
  options: GrpcFrontendOptions = {},
  clientOptions: grpc.ClientOptions = {},
): Promise<Harness> {
  const frontend = new GrpcFrontend(server, { port: 0, address: '127.0.0.1', ...options });
  const { port } = await frontend.start();
  const target = `127.0.0.1:${port}`;
  const creds = grpc.credentials.createInsecure();
  const client = new InferenceClient(target, creds, { 'grpc.max_receive_message_length': -1, ...clientOptions });
  const health = new HealthClient(target, creds);
  return {
    frontend,
    port,
    client,
    health,
    async close() {
      client.close();
      health.close();
      await frontend.stop();
    },
  };
}

/** Calls a unary RPC by name; resolves with the response or rejects with the ServiceError. */
export function unary<Res>(
  client: grpc.Client,
  method: string,
  request: unknown,
  metadata = new grpc.Metadata(),
): Promise<Res> {
  return new Promise((resolve, reject) => {
    const fn = (client as unknown as Record<string, (...args: unknown[]) => void>)[method]!;
    fn.call(client, request, metadata, (err: grpc.ServiceError | null, res: Res) => (err ? reject(err) : resolve(res)));
  });
}

/** Sends `requests` on one ModelStreamInfer stream, ends it, and resolves with every response it answered. */
export function streamAll(client: grpc.Client, requests: unknown[]): Promise<ModelStreamInferResponse[]> {
  return new Promise((resolve, reject) => {
    const out: ModelStreamInferResponse[] = [];
    const stream = (
      client as unknown as { ModelStreamInfer(): grpc.ClientDuplexStream<unknown, ModelStreamInferResponse> }
    ).ModelStreamInfer();
    stream.on('data', (m: ModelStreamInferResponse) => out.push(m));
    stream.on('error', reject);
    stream.on('end', () => resolve(out));
    for (const r of requests) stream.write(r);
    stream.end();
  });
}

/** Awaits a rejected call and returns its ServiceError. */
export async function callError(p: Promise<unknown>): Promise<grpc.ServiceError> {
  try {
    await p;
  } catch (e) {
    return e as grpc.ServiceError;
  }
  throw new Error('expected the call to fail');
}


/** The fake serves one repository, named 'models'. */
function checkRepository(repository: string | undefined): void {
  if (repository !== undefined && repository !== 'models')
    throw Errors.unknownRepository(`no model repository named '${repository}'`);
}
