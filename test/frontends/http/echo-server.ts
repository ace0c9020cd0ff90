/**
 * A small in-process ServerApi for frontend-only tests: each model echoes its
 * inputs back as OUTPUT<i>. It records what the frontend handed to it.
 */
import { create } from '@bufbuild/protobuf';
import { SharedMemoryRegistry } from '../../../src/core/shared-memory.js';
import { Errors } from '../../../src/errors.js';
import type { LoadModelOptions, ServerApi } from '../../../src/core/server-api.js';
import type {
  InferRequest,
  InferResponse,
  ModelMetadata,
  ModelStatistics,
  RepositoryIndexEntry,
  ServerMetadata,
} from '../../../src/types/api.js';
import {
  DataType,
  type ModelConfig,
  ModelConfigSchema,
  ModelInputSchema,
  ModelOutputSchema,
  ModelTransactionPolicySchema,
} from '../../../src/gen/model_config_pb.js';
import type { Tensor } from '../../../src/tensor/tensor.js';
import { modelConfigToJson } from '../../../src/config/index.js';

const zero = { count: 0, ns: 0 };

export class EchoServer implements ServerApi {
  readonly controlMode = 'explicit' as const;
  /** Client shared memory off, as by default; a test may swap in an enabled registry. */
  sharedMemory = new SharedMemoryRegistry(false);
  live = true;
  ready = true;
  lastRequest: InferRequest | undefined;
  loads: Array<{ name: string; options: LoadModelOptions | undefined }> = [];
  unloads: Array<{ name: string; unloadDependents: boolean | undefined }> = [];
  /** Resolvers for requests to model 'slow', released by the test. */
  slow: Array<() => void> = [];
  slowArrived: Promise<void>;
  private onSlowArrived!: () => void;
  aborted: Promise<void>;
  private onAborted!: () => void;

  private readonly configs = new Map<string, ModelConfig>([
    ['echo', config('echo', 0, [['INPUT0', DataType.TYPE_INT32, [-1n]]])],
    ['raw_fp32', config('raw_fp32', 8, [['INPUT0', DataType.TYPE_FP32, [-1n]]])],
    ['decoupled', config('decoupled', 0, [['INPUT0', DataType.TYPE_INT32, [1n]]], true)],
    ['unhealthy', config('unhealthy', 0, [['INPUT0', DataType.TYPE_INT32, [1n]]])],
    ['slow', config('slow', 0, [['INPUT0', DataType.TYPE_INT32, [1n]]])],
    ['hang', config('hang', 0, [['INPUT0', DataType.TYPE_INT32, [1n]]])],
  ]);

  constructor() {
    this.slowArrived = new Promise((r) => (this.onSlowArrived = r));
    this.aborted = new Promise((r) => (this.onAborted = r));
  }

  async start(): Promise<void> {}
  async stop(): Promise<void> {}
  isLive(): boolean {
    return this.live;
  }
  isReady(): boolean {
    return this.ready;
  }
  metadata(): ServerMetadata {
    return { name: 'triton', version: '2.50.0', extensions: ['classification', 'binary_tensor_data', 'statistics'] };
  }

  private resolve(name: string, version?: string | number): ModelConfig {
    const cfg = this.configs.get(name);
    if (cfg === undefined) throw Errors.modelNotFound(name);
    if (version !== undefined && version !== '' && String(version) !== '1') {
      if (String(version) === '2') throw Errors.modelVersionNotReady(name, '2');
      throw Errors.modelVersionNotFound(name, String(version));
    }
    return cfg;
  }

  modelMetadata(name: string, version?: string): ModelMetadata {
    const cfg = this.resolve(name, version);
    return {
      name,
      versions: ['1'],
      platform: 'echo',
      inputs: cfg.input.map((i) => ({ name: i.name, datatype: 'INT32', shape: i.dims.map(Number) })),
      outputs: [{ name: 'OUTPUT0', datatype: 'INT32', shape: [-1] }],
    };
  }

  modelConfig(name: string, version?: string): ModelConfig {
    return this.resolve(name, version);
  }
  modelConfigJson(name: string, version?: string): Record<string, unknown> {
    return modelConfigToJson(this.modelConfig(name, version));
  }


  async modelReady(name: string, version?: string): Promise<boolean> {
    this.resolve(name, version);
    return name !== 'unhealthy';
  }

  async infer(request: InferRequest): Promise<InferResponse> {
    this.resolve(request.model, request.version);
    this.lastRequest = request;
    if (request.model === 'slow') {
      await new Promise<void>((resolve) => {
        this.slow.push(resolve);
        this.onSlowArrived();
      });
    }
    if (request.model === 'hang') {
      await new Promise<void>((_resolve, reject) => {
        request.signal?.addEventListener('abort', () => {
          this.onAborted();
          reject(Errors.cancelled('request'));
        });
      });
    }
    let outputs: Tensor[] = request.inputs.map((t, i) => ({ ...t, name: `OUTPUT${i}` }));
    if (request.outputs !== undefined) {
      outputs = request.outputs.map((o) => {
        const found = outputs.find((t) => t.name === o.name);
        if (found === undefined) throw Errors.unknownOutput(o.name, request.model);
        return found;
      });
    }
    const echoParams = request.parameters?.['echo_parameters'] === true;
    return {
      modelName: request.model,
      modelVersion: '1',
      id: request.id ?? '',
      parameters: echoParams ? { flag: true, count: 3, label: 'x', ratio: 0.25 } : undefined,
      outputs,
    };
  }

  modelStatistics(name?: string, version?: string): ModelStatistics[] {
    if (name !== undefined && !this.configs.has(name)) throw Errors.statsModelNotAvailable(name);
    if (version !== undefined && version !== '1') throw Errors.statsVersionNotAvailable(name ?? '');
    const names = name === undefined ? ['echo', 'raw_fp32'] : [name];
    return names.map((n) => ({
      name: n,
      version: '1',
      last_inference: 0,
      inference_count: 0,
      execution_count: 0,
      inference_stats: {
        success: zero,
        fail: zero,
        queue: zero,
        compute_input: zero,
        compute_infer: zero,
        compute_output: zero,
        cache_hit: zero,
        cache_miss: zero,
      },
      response_stats: {},
      batch_stats: [],
      memory_usage: [],
    }));
  }

  async repositoryIndex(readyOnly?: boolean, repository?: string): Promise<RepositoryIndexEntry[]> {
    checkRepository(repository);
    const ready: RepositoryIndexEntry[] = [{ name: 'echo', version: '1', state: 'READY', reason: '' }];
    return readyOnly === true ? ready : [...ready, { name: 'never_loaded' }];
  }

  async loadModel(name: string, options?: LoadModelOptions): Promise<void> {
    checkRepository(options?.repository);
    this.loads.push({ name, options });
    if (name === 'broken') throw Errors.loadFailed(name, 'no such backend');
  }

  async unloadModel(name: string, options?: { unloadDependents?: boolean; repository?: string }): Promise<void> {
    checkRepository(options?.repository);
    this.unloads.push({ name, unloadDependents: options?.unloadDependents });
  }
}

function config(
  name: string,
  maxBatchSize: number,
  inputs: Array<[string, DataType, bigint[]]>,
  decoupled = false,
): ModelConfig {
  return create(ModelConfigSchema, {
    name,
    maxBatchSize,
    input: inputs.map(([n, dataType, dims]) => create(ModelInputSchema, { name: n, dataType, dims })),
    output: [create(ModelOutputSchema, { name: 'OUTPUT0', dataType: inputs[0]![1], dims: inputs[0]![2] })],
    modelTransactionPolicy: create(ModelTransactionPolicySchema, { decoupled }),
  });
}

/** The fake serves one repository, named 'models'. */
function checkRepository(repository: string | undefined): void {
  if (repository !== undefined && repository !== 'models')
    throw Errors.unknownRepository(`no model repository named '${repository}'`);
}
