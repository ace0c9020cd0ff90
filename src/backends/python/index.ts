/**
 * The python backend: model.py with class TritonPythonModel, one worker
 * process per instance (python/nereid_stub.py), talking over pipes.
 */
import { existsSync } from 'node:fs';
import { join } from 'node:path';
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
  ParameterValue,
} from '../backend.js';
import type { ModelConfig } from '../../gen/model_config_pb.js';
import { Errors, type TritonErrorClass } from '../../errors.js';
import type { Tensor } from '../../tensor/tensor.js';
import type { FrameHeader, WireTensor } from './frame.js';
import { modelConfigToJson } from '../../config/index.js';
import { modelConfigFromJsonString } from './config-json.js';
import { resolveInterpreter, stubScript } from './interpreter.js';
import { StubProcess, type StreamSink } from './stub-process.js';
import type { Frame } from './frame.js';
import type { StubSupervisor } from './supervisor.js';
import { decodeWireTensor } from './wire.js';
import { closeTrace, openTrace } from './bls.js';
import {
  FINALIZE_GRACE_MS,
  ProcessModel,
  checkInterpreter,
  executeOnWorker,
  loadFailureReason,
  stubTimeoutMs,
} from './worker.js';

export const DEFAULT_MODEL_FILENAME = 'model.py';
const READY_TIMEOUT_MS = 5000;

const ERROR_CLASSES = new Set<TritonErrorClass>([
  'INTERNAL',
  'NOT_FOUND',
  'INVALID_ARG',
  'UNAVAILABLE',
  'UNSUPPORTED',
  'ALREADY_EXISTS',
  'CANCELLED',
  'UNKNOWN',
]);

function modelFile(versionDir: string, config: ModelConfig): string {
  return join(versionDir, config.defaultModelFilename || DEFAULT_MODEL_FILENAME);
}

/** JSON for request parameters (int64 values as numbers). */
function parametersJson(params: Readonly<Record<string, ParameterValue>>): string {
  let empty = true;
  for (const _ in params) {
    empty = false;
    break;
  }
  if (empty) return '{}';
  return JSON.stringify(params, (_k, v: unknown) => (typeof v === 'bigint' ? Number(v) : v));
}

function correlationIdJson(id: bigint | string): number | string {
  if (typeof id === 'string') return id;
  return id <= BigInt(Number.MAX_SAFE_INTEGER) ? Number(id) : id.toString();
}

/** One request as the worker reads it. */
class WireRequest {
  constructor(
    readonly id: string,
    readonly c: number | string,
    readonly f: number,
    readonly p: string,
    readonly o: readonly string[],
    readonly i: WireTensor[],
    /** Decoupled models: the key the worker's response sender sends under. */
    public k: number | undefined = undefined,
    /** A traced request: its trace's handle (BLS calls name it to be traced as its children) and W3C context. */
    public tr: number | undefined = undefined,
    public tc: string | undefined = undefined,
  ) {}
}

/** Passes one decoupled request's responses from the worker to its ResponseSender. */
class DecoupledSink implements StreamSink {
  key = 0;
  constructor(
    private readonly instance: PythonInstance,
    private readonly request: BackendRequest,
    private readonly proc: StubProcess,
  ) {
    request.signal?.addEventListener('abort', this);
  }

  /** The client went away: the model sees it through is_cancelled(). */
  handleEvent(): void {
    this.proc.cancelStream(this.key);
  }

  response(frame: Frame, final: boolean): void {
    const h = frame.header;
    const sender = this.request.responseSender!;
    if (h.e === undefined && h.o === undefined) sender.send(undefined, final);
    else sender.send(this.instance.toResponse(this.request, h as WireItem, frame.buffers), final);
    if (final) this.detach();
  }

  failed(err: Error): void {
    this.request.responseSender!.send({ error: Errors.modelExecution(this.instance.modelName, err.message) }, true);
    this.detach();
  }

  detach(): void {
    this.request.signal?.removeEventListener('abort', this);
    if (this.request.trace !== undefined) closeTrace(this.request.trace);
  }
}

type WireItem = { o?: WireTensor[]; e?: { m: string; c: string }; p?: string };

/** What execute() gives back for a decoupled request that is answered through its sender. */
const NO_RESPONSE: BackendResponse = { outputs: [] };

/** The requests as the worker reads them, and the tensor buffers they index. */
function wireRequests(requests: readonly BackendRequest[]): { wire: WireRequest[]; buffers: Uint8Array[] } {
  const buffers: Uint8Array[] = [];
  const wire = new Array<WireRequest>(requests.length);
  for (let r = 0; r < requests.length; r++) {
    const req = requests[r]!;
    const metas = new Array<WireTensor>(req.inputs.length);
    for (let k = 0; k < req.inputs.length; k++) {
      const t = req.inputs[k]!;
      metas[k] = { n: t.name, d: t.datatype, s: t.shape as number[], b: buffers.length };
      buffers.push(t.data);
    }
    wire[r] = new WireRequest(
      req.id,
      correlationIdJson(req.correlationId),
      req.flags,
      parametersJson(req.parameters),
      req.requestedOutputs,
      metas,
    );
    const trace = req.trace;
    if (trace !== undefined) {
      openTrace(trace);
      wire[r]!.tr = trace.id;
      wire[r]!.tc = trace.context();
    }
  }
  return { wire, buffers };
}

/** The traces of a batch stop being BLS parents once its execute() (or, decoupled, its stream) is over. */
function closeTraces(requests: readonly BackendRequest[]): void {
  for (const r of requests) if (r.trace !== undefined) closeTrace(r.trace);
}

export class PythonInstance implements BackendInstance {
  private readonly outputNames: Set<string>;
  private readonly configOutputs: readonly string[];
  private readonly decoupled: boolean;

  constructor(
    private readonly ctx: InstanceContext,
    private readonly supervisor: StubSupervisor,
  ) {
    this.configOutputs = ctx.config.output.map((o) => o.name);
    this.outputNames = new Set(this.configOutputs);
    this.decoupled = ctx.config.modelTransactionPolicy?.decoupled === true;
    // Implicit-state outputs of a sequence model are outputs too (the sequence batcher keeps them).
    const scheduling = ctx.config.schedulingChoice;
    if (scheduling.case === 'sequenceBatching')
      for (const s of scheduling.value.state) this.outputNames.add(s.outputName);
  }

  get modelName(): string {
    return this.ctx.modelName;
  }

  /** How many times the worker process was restarted after dying. */
  get restartCount(): number {
    return this.supervisor.restartCount;
  }

  /** The worker's process id (for tests and diagnostics). */
  get pid(): number | undefined {
    return this.supervisor.running?.pid;
  }

  async execute(requests: readonly BackendRequest[], timer: ExecutionTimer): Promise<BackendResponse[]> {
    if (this.decoupled) return this.executeDecoupled(requests, timer);
    const model = this.ctx.modelName;
    const { wire, buffers } = wireRequests(requests);
    let reply: Frame;
    try {
      reply = await executeOnWorker(
        this.supervisor,
        this.ctx,
        { t: 'execute', r: wire },
        buffers,
        timer,
        'responses',
        'execute()',
      );
    } finally {
      closeTraces(requests);
    }
    const h = reply.header;
    const items = h.r as WireItem[];
    if (!Array.isArray(items) || items.length !== requests.length) {
      throw Errors.modelExecution(model, 'the Python process returned a malformed reply');
    }
    const responses = new Array<BackendResponse>(requests.length);
    for (let r = 0; r < requests.length; r++) {
      responses[r] = this.toResponse(requests[r]!, items[r]!, reply.buffers);
    }
    return responses;
  }

  /**
   * A decoupled model: each request is registered with the worker under a
   * key its response sender uses; execute() returning only frees the
   * instance, the responses arrive as 's' frames (StubProcess routes them).
   */
  private async executeDecoupled(
    requests: readonly BackendRequest[],
    timer: ExecutionTimer,
  ): Promise<BackendResponse[]> {
    const model = this.ctx.modelName;
    let proc: StubProcess;
    try {
      proc = await this.supervisor.current();
    } catch (err) {
      throw Errors.modelExecution(model, `the Python process is not available: ${loadFailureReason(err)}`);
    }
    const { wire, buffers } = wireRequests(requests);
    const sinks = new Array<DecoupledSink>(requests.length);
    for (let r = 0; r < requests.length; r++) {
      const sink = new DecoupledSink(this, requests[r]!, proc);
      sink.key = proc.openStream(sink);
      wire[r]!.k = sink.key;
      sinks[r] = sink;
    }
    const forget = (): void => {
      for (const sink of sinks) {
        proc.closeStream(sink.key);
        sink.detach();
      }
    };
    const pending = proc.command({ t: 'execute', r: wire }, buffers);
    timer.inputDone();
    let reply: Frame;
    try {
      reply = await pending;
    } catch (err) {
      forget();
      throw Errors.modelExecution(model, loadFailureReason(err));
    }
    timer.inferDone();
    const h = reply.header;
    const items = h.r as WireItem[] | undefined;
    if (h.t !== 'responses' || !Array.isArray(items) || items.length !== requests.length) {
      forget();
      if (typeof h.tb === 'string') this.ctx.logger.error({ model, traceback: h.tb }, 'execute() failed');
      throw Errors.modelExecution(model, String(h.m ?? 'the Python process returned a malformed reply'));
    }
    const responses = new Array<BackendResponse>(requests.length);
    for (let r = 0; r < requests.length; r++) {
      const e = items[r]!.e;
      if (e !== undefined) {
        proc.closeStream(sinks[r]!.key);
        sinks[r]!.detach();
        responses[r] = this.toResponse(requests[r]!, items[r]!, reply.buffers);
      } else {
        responses[r] = NO_RESPONSE;
      }
    }
    return responses;
  }

  /** One worker reply item as a backend response (also used for decoupled response frames). */
  toResponse(
    req: BackendRequest,
    item: WireItem,
    buffers: readonly Uint8Array[],
  ): BackendResponse {
    const model = this.ctx.modelName;
    if (item.e) {
      const cls = ERROR_CLASSES.has(item.e.c as TritonErrorClass) ? (item.e.c as TritonErrorClass) : 'INTERNAL';
      return { error: Errors.modelReported(cls, item.e.m) };
    }
    const metas = item.o ?? [];
    for (const m of metas) {
      if (!this.outputNames.has(m.n)) {
        return {
          error: Errors.modelExecution(
            model,
            `execute() returned output '${m.n}', which is not an output in the model configuration`,
          ),
        };
      }
    }
    const outputs: Tensor[] = [];
    const wanted = req.requestedOutputs.length ? req.requestedOutputs : this.configOutputs;
    for (const name of wanted) {
      for (const m of metas) {
        if (m.n === name) {
          outputs.push(decodeWireTensor(m, buffers));
          break;
        }
      }
    }
    if (item.p) {
      const parameters = JSON.parse(item.p) as Record<string, ParameterValue>;
      return { outputs, parameters };
    }
    return { outputs };
  }

  async isReady(): Promise<boolean> {
    const proc = this.supervisor.running;
    if (!proc) return false;
    try {
      const reply = await proc.commandWithTimeout({ t: 'is_ready' }, READY_TIMEOUT_MS, 'is_ready()');
      return reply.header.v === true;
    } catch {
      return false;
    }
  }

  close(): Promise<void> {
    return this.supervisor.close(FINALIZE_GRACE_MS);
  }
}

async function autoComplete(ctx: AutoCompleteContext): Promise<ModelConfig> {
  if (!ctx.versionDir) return ctx.config;
  const file = modelFile(ctx.versionDir, ctx.config);
  if (!existsSync(file)) return ctx.config;
  let proc: StubProcess | undefined;
  try {
    const interpreter = resolveInterpreter(ctx.config, ctx.modelDir, ctx.backendConfig);
    proc = await StubProcess.start({
      executable: interpreter.executable,
      script: stubScript(),
      args: ['--mode', 'python', '--model', ctx.modelName, '--instance', 'auto-complete'],
      env: interpreter.env,
      logger: ctx.logger.child({ model: ctx.modelName, stage: 'auto-complete' }),
      label: `model '${ctx.modelName}' auto-complete`,
      startTimeoutMs: stubTimeoutMs(ctx.backendConfig),
    });
    const timeout = stubTimeoutMs(ctx.backendConfig);
    const reply = await proc.commandWithTimeout(
      { t: 'auto_complete', file, config: JSON.stringify(modelConfigToJson(ctx.config)) },
      timeout,
      'auto_complete_config()',
    );
    const h: FrameHeader = reply.header;
    if (h.t !== 'config') throw new Error(String(h.m ?? `unexpected reply '${h.t}'`));
    if (typeof h.config !== 'string') return ctx.config;
    return modelConfigFromJsonString(h.config);
  } catch (err) {
    throw Errors.loadFailed(ctx.modelName, loadFailureReason(err));
  } finally {
    if (proc) await proc.close(FINALIZE_GRACE_MS);
  }
}

/** The model file loading needs; throws the load error when it is missing. */
function checkModelFile(ctx: ModelContext): string {
  const file = modelFile(ctx.versionDir, ctx.config);
  if (!existsSync(file)) {
    throw Errors.loadFailed(ctx.modelName, `model file '${file}' does not exist`);
  }
  return file;
}

export function createPythonBackend(): Backend {
  return {
    name: 'python',
    supportsDecoupled: true,
    autoCompleteConfig: autoComplete,
    async checkModel(ctx: ModelContext): Promise<void> {
      checkModelFile(ctx);
      checkInterpreter(ctx.modelName, ctx, 'python');
    },
    async loadModel(ctx: ModelContext): Promise<BackendModel> {
      const file = checkModelFile(ctx);
      return new ProcessModel(
        ctx.modelName,
        'python',
        file,
        (ictx, supervisor) => new PythonInstance(ictx, supervisor),
      );
    },
  };
}
