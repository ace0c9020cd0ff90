/**
 * The javascript backend: a model is an ES module (model.mjs, or model.js,
 * which may be compiled TypeScript) whose default export is a class with
 * async initialize(args), execute(requests) and finalize(), in the spirit of
 * Triton's Python backend. Each instance runs in a worker thread of its own
 * under a supervisor that restarts it when it dies. See
 * docs/javascript-backend.md for the contract.
 */
import { existsSync } from 'node:fs';
import path from 'node:path';
import { Worker } from 'node:worker_threads';
import type {
  AutoCompleteContext,
  Backend,
  BackendInstance,
  BackendModel,
  BackendRequest,
  BackendResponse,
  ExecutionTimer,
  InstanceContext,
  ModelContext,
  SchedulingHooks,
} from '../backend.js';
import { Supervisor } from '../supervisor.js';
import { modelConfigFromJson, modelConfigToJson } from '../../config/index.js';
import type { ModelConfig } from '../../gen/model_config_pb.js';
import { Errors } from '../../errors.js';
import { datatypeFromConfigEnum } from '../../tensor/datatype.js';
import { ModelWorker, fromWireResponse } from './model-worker.js';
import type { FromWorker, OutputSpec, WorkerInit } from './protocol.js';
import { type JavaScriptSettings, readSettings } from './settings.js';

/** The model files looked for, in order, when default_model_filename is not set. */
export const DEFAULT_MODEL_FILENAMES = ['model.mjs', 'model.js'] as const;
/** How long finalize() may take at unload before the thread is stopped. */
const FINALIZE_GRACE_MS = 10_000;
/**
 * Executions an instance takes at once. The worker runs them one after
 * another; the next one waits in its queue, so it starts as soon as the one
 * before ends, without a round trip through the event loop.
 */
export const JS_MAX_IN_FLIGHT = 4;

/** The model file, or the paths looked for when there is none. */
function findModelFile(versionDir: string, config: ModelConfig): { file: string } | { missing: string[] } {
  const names = config.defaultModelFilename ? [config.defaultModelFilename] : DEFAULT_MODEL_FILENAMES;
  for (const name of names) {
    const file = path.join(versionDir, name);
    if (existsSync(file)) return { file };
  }
  return { missing: names.map((n) => path.join(versionDir, n)) };
}

function outputSpecs(config: ModelConfig): OutputSpec[] {
  return config.output.map((o) => ({
    name: o.name,
    datatype: datatypeFromConfigEnum(o.dataType) ?? 'BYTES',
    dims: (o.reshape ? o.reshape.shape : o.dims).map(Number),
  }));
}

/** What execute() gives back for a decoupled request that is answered through its sender. */
const NO_RESPONSE: BackendResponse = { outputs: [] };

export class JavaScriptInstance implements BackendInstance {
  readonly scheduling: SchedulingHooks = { maxInFlight: JS_MAX_IN_FLIGHT };

  constructor(
    private readonly modelName: string,
    private readonly supervisor: Supervisor<ModelWorker>,
    private readonly decoupled = false,
  ) {}

  /** How many times the worker thread was restarted after dying. */
  get restartCount(): number {
    return this.supervisor.restartCount;
  }

  /** The worker's thread id (for tests and diagnostics). */
  get threadId(): number | undefined {
    return this.supervisor.running?.pid;
  }

  async execute(requests: readonly BackendRequest[], timer: ExecutionTimer): Promise<BackendResponse[]> {
    const model = this.modelName;
    let worker = this.supervisor.running;
    if (!worker) {
      try {
        worker = await this.supervisor.current();
      } catch (err) {
        throw Errors.modelExecution(model, `the worker thread is not available: ${(err as Error).message}`);
      }
    }
    const { posted, done } = worker.execute(requests);
    let reply;
    try {
      reply = await done;
    } catch (err) {
      throw Errors.modelExecution(model, (err as Error).message);
    }
    const [picked, start, end] = reply.times as [number, number, number];
    timer.waited(picked - posted);
    timer.inputDone(BigInt(Math.round(start)));
    timer.inferDone(BigInt(Math.round(end)));
    if ('error' in reply) throw Errors.modelExecution(model, reply.error);
    // Decoupled: the responses went (and go) through each request's sender.
    if (this.decoupled) return requests.map(() => NO_RESPONSE);
    const wire = reply.responses;
    const responses = new Array<BackendResponse>(wire.length);
    for (let i = 0; i < wire.length; i++) responses[i] = fromWireResponse(model, wire[i]!);
    return responses;
  }

  async isReady(): Promise<boolean> {
    return this.supervisor.running !== null;
  }

  close(): Promise<void> {
    return this.supervisor.close(FINALIZE_GRACE_MS);
  }
}

class JavaScriptModel implements BackendModel {
  constructor(
    private readonly file: string,
    private readonly settings: JavaScriptSettings,
  ) {}

  async createInstance(ctx: InstanceContext): Promise<BackendInstance> {
    const label = `model '${ctx.modelName}' instance '${ctx.instanceName}'`;
    const logger = ctx.logger.child({ instance: ctx.instanceName });
    const init: Extract<WorkerInit, { mode: 'serve' }> = {
      mode: 'serve',
      file: this.file,
      modelDir: ctx.modelDir,
      args: {
        modelName: ctx.modelName,
        modelVersion: ctx.version,
        instanceName: ctx.instanceName,
        instanceKind: ctx.kind,
        deviceId: ctx.deviceId,
        modelDirectory: ctx.modelDir,
        modelConfig: modelConfigToJson(ctx.config),
      },
      outputs: outputSpecs(ctx.config),
      maxBatchSize: ctx.config.maxBatchSize,
      executeTimeoutMs: this.settings.executeTimeoutMs,
      spinMicros: this.settings.spinMicros,
      decoupled: ctx.config.modelTransactionPolicy?.decoupled === true,
    };
    const supervisor = new Supervisor<ModelWorker>(
      () =>
        ModelWorker.start({
          init,
          label,
          server: ctx.server,
          logger,
          initializeTimeoutMs: this.settings.initializeTimeoutMs,
          maxHeapMb: this.settings.maxHeapMb,
        }),
      logger,
      label,
      'worker thread',
    );
    try {
      await supervisor.start();
    } catch (err) {
      throw Errors.loadFailed(ctx.modelName, (err as Error).message);
    }
    return new JavaScriptInstance(ctx.modelName, supervisor, init.decoupled);
  }

  async close(): Promise<void> {}
}

/** Runs the model class's static auto_complete_config() on a throwaway worker thread. */
function runAutoComplete(
  file: string,
  modelDir: string,
  config: Record<string, unknown>,
  timeoutMs: number,
): Promise<Record<string, unknown> | null> {
  const init: WorkerInit = { mode: 'auto-complete', file, modelDir, config };
  const worker = new Worker(new URL('./worker.js', import.meta.url), { workerData: init });
  return new Promise<Record<string, unknown> | null>((resolve, reject) => {
    let failure: string | undefined;
    const timer = setTimeout(() => {
      failure = `auto_complete_config() did not finish within ${timeoutMs} ms (model parameter initialize_timeout_ms)`;
      void worker.terminate();
    }, timeoutMs);
    worker.on('message', (msg: FromWorker) => {
      if (msg.t === 'config') {
        clearTimeout(timer);
        resolve(msg.config);
        void worker.terminate();
      } else if (msg.t === 'init-error') {
        failure = msg.message;
        void worker.terminate();
      }
    });
    worker.on('error', (err) => {
      failure ??= `the worker thread failed: ${err.message}`;
    });
    worker.on('exit', (code) => {
      clearTimeout(timer);
      reject(new Error(failure ?? `the worker thread exited with code ${code}`));
    });
  });
}

async function autoComplete(ctx: AutoCompleteContext): Promise<ModelConfig> {
  if (!ctx.versionDir) return ctx.config;
  const found = findModelFile(ctx.versionDir, ctx.config);
  if (!('file' in found)) return ctx.config;
  const settings = readSettings(ctx.modelName, ctx.config, ctx.backendConfig);
  let completed: Record<string, unknown> | null;
  try {
    completed = await runAutoComplete(
      found.file,
      ctx.modelDir,
      modelConfigToJson(ctx.config),
      settings.initializeTimeoutMs,
    );
  } catch (err) {
    throw Errors.loadFailed(ctx.modelName, (err as Error).message);
  }
  if (completed === null) return ctx.config;
  try {
    return modelConfigFromJson(JSON.stringify(completed));
  } catch (err) {
    throw Errors.loadFailed(
      ctx.modelName,
      `auto_complete_config() returned an invalid configuration: ${(err as Error).message}`,
    );
  }
}

/** What loading checks before it starts anything: the module file is there, the parameters are valid. */
function checkModel(ctx: ModelContext): { file: string; settings: ReturnType<typeof readSettings> } {
  const found = findModelFile(ctx.versionDir, ctx.config);
  if (!('file' in found)) {
    const looked = found.missing.map((f) => `'${path.relative(ctx.modelDir, f)}'`).join(' or ');
    throw Errors.loadFailed(ctx.modelName, `model file ${looked} not found`);
  }
  return { file: found.file, settings: readSettings(ctx.modelName, ctx.config, ctx.backendConfig) };
}

async function loadModel(ctx: ModelContext): Promise<BackendModel> {
  const { file, settings } = checkModel(ctx);
  return new JavaScriptModel(file, settings);
}

export function createJavaScriptBackend(): Backend {
  return {
    name: 'javascript',
    supportsDecoupled: true,
    autoCompleteConfig: autoComplete,
    loadModel,
    checkModel: async (ctx) => {
      checkModel(ctx);
    },
  };
}
