/**
 * Starting and initializing one instance's worker process; shared by the
 * python and pytorch backends.
 */
import type { Logger } from 'pino';
import type { BackendInstance, BackendModel, ExecutionTimer, InstanceContext } from '../backend.js';
import type { Frame, FrameHeader } from './frame.js';
import { Errors } from '../../errors.js';
import { serveBls, serveBlsStream } from './bls.js';
import { modelConfigToJson } from '../../config/index.js';
import type { Interpreter } from './interpreter.js';
import { resolveInterpreter, stubScript } from './interpreter.js';
import { StubProcess } from './stub-process.js';
import { StubSupervisor } from './supervisor.js';

export type WorkerMode = 'python' | 'torch';

const DEFAULT_STUB_TIMEOUT_S = 30;
/** How long finalize() may take at unload before the process is killed. */
export const FINALIZE_GRACE_MS = 10_000;

export function stubTimeoutMs(backendConfig: Readonly<Record<string, string>>): number {
  const s = Number(backendConfig['stub-timeout-seconds']);
  return (Number.isFinite(s) && s > 0 ? s : DEFAULT_STUB_TIMEOUT_S) * 1000;
}

/** The dict model.py's initialize(args) receives, with Triton's keys. */
export function initializeArgs(ctx: InstanceContext): Record<string, string> {
  return {
    model_config: JSON.stringify(modelConfigToJson(ctx.config)),
    model_instance_kind: ctx.kind,
    model_instance_name: ctx.instanceName,
    model_instance_device_id: String(ctx.deviceId),
    model_repository: ctx.modelDir,
    model_version: String(ctx.version),
    model_name: ctx.modelName,
  };
}

/** Raised when the worker reports a Python exception; `message` is the traceback's last line. */
export class PythonError extends Error {
  constructor(
    message: string,
    readonly traceback: string | undefined,
  ) {
    super(message);
    this.name = 'PythonError';
  }
}

export interface WorkerSpec {
  readonly mode: WorkerMode;
  /** model.py or model.pt. */
  readonly file: string;
  readonly interpreter: Interpreter;
}

/** Spawns a worker and runs its init command; the first failure is thrown. */
export async function launchWorker(ctx: InstanceContext, spec: WorkerSpec, logger: Logger): Promise<StubProcess> {
  const label = `model '${ctx.modelName}' instance '${ctx.instanceName}'`;
  const server = ctx.server;
  const proc = await StubProcess.start({
    executable: spec.interpreter.executable,
    script: stubScript(),
    // Named on the command line, as Triton's stub is, so `ps` shows which process serves what.
    args: ['--mode', spec.mode, '--model', ctx.modelName, '--instance', ctx.instanceName],
    env: spec.interpreter.env,
    logger,
    label,
    startTimeoutMs: stubTimeoutMs(ctx.backendConfig),
    onBls: spec.mode === 'python' ? (frame) => serveBls(server, frame) : undefined,
    onBlsStream: spec.mode === 'python' ? (frame, reply) => serveBlsStream(server, frame, reply) : undefined,
  });
  let reply;
  try {
    reply = await proc.command({ t: 'init', file: spec.file, args: initializeArgs(ctx) });
  } catch (err) {
    proc.kill();
    throw err;
  }
  if (reply.header.t !== 'ok') {
    const tb = typeof reply.header.tb === 'string' ? reply.header.tb : undefined;
    if (tb) logger.error({ traceback: tb }, `${label}: initialization failed`);
    proc.kill();
    throw new PythonError(String(reply.header.m ?? 'initialization failed'), tb);
  }
  return proc;
}

/** Starts the first worker (its failure fails the load) and keeps it running afterwards. */
export async function superviseWorker(ctx: InstanceContext, spec: WorkerSpec): Promise<StubSupervisor> {
  const logger = ctx.logger.child({ model: ctx.modelName, instance: ctx.instanceName });
  const supervisor = new StubSupervisor(
    () => launchWorker(ctx, spec, logger),
    logger,
    `model '${ctx.modelName}' instance '${ctx.instanceName}'`,
  );
  await supervisor.start();
  return supervisor;
}

/** A message for a load failure: the Python reason, without our own label when it is there. */
/**
 * The interpreter an instance of this model would start with can be found
 * (as createInstance finds it; nothing is started): the load error otherwise.
 */
export function checkInterpreter(
  modelName: string,
  ctx: Pick<InstanceContext, 'config' | 'modelDir' | 'backendConfig'>,
  mode: 'python' | 'torch',
): void {
  try {
    resolveInterpreter(ctx.config, ctx.modelDir, ctx.backendConfig, mode);
  } catch (err) {
    throw Errors.loadFailed(modelName, loadFailureReason(err));
  }
}

export function loadFailureReason(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}

/**
 * Sends one execute command to an instance's worker and returns its reply,
 * marking the timer's stages. A missing process, a dead one, or a reply of
 * another type than `expected` (a Python exception in `what`, whose traceback
 * is logged) becomes a model execution error.
 */
export async function executeOnWorker(
  supervisor: StubSupervisor,
  ctx: InstanceContext,
  header: FrameHeader,
  buffers: readonly Uint8Array[],
  timer: ExecutionTimer,
  expected: string,
  what: string,
): Promise<Frame> {
  const model = ctx.modelName;
  let proc: StubProcess;
  try {
    proc = await supervisor.current();
  } catch (err) {
    throw Errors.modelExecution(model, `the Python process is not available: ${loadFailureReason(err)}`);
  }
  const pending = proc.command(header, buffers);
  timer.inputDone();
  let reply: Frame;
  try {
    reply = await pending;
  } catch (err) {
    throw Errors.modelExecution(model, loadFailureReason(err));
  }
  timer.inferDone();
  const h = reply.header;
  if (h.t !== expected) {
    if (typeof h.tb === 'string') ctx.logger.error({ model, traceback: h.tb }, `${what} failed`);
    throw Errors.modelExecution(model, String(h.m ?? `unexpected reply '${h.t}'`));
  }
  return reply;
}

/**
 * A model version served by supervised worker processes: each instance gets
 * its own process (started with the model's interpreter) wrapped by `wrap`.
 * Shared by the python and pytorch backends.
 */
export class ProcessModel implements BackendModel {
  constructor(
    private readonly modelName: string,
    private readonly mode: WorkerMode,
    private readonly file: string,
    private readonly wrap: (ctx: InstanceContext, supervisor: StubSupervisor) => BackendInstance,
  ) {}

  async createInstance(ctx: InstanceContext): Promise<BackendInstance> {
    let supervisor: StubSupervisor;
    try {
      const interpreter = resolveInterpreter(ctx.config, ctx.modelDir, ctx.backendConfig, this.mode);
      supervisor = await superviseWorker(ctx, { mode: this.mode, file: this.file, interpreter });
    } catch (err) {
      throw Errors.loadFailed(this.modelName, loadFailureReason(err));
    }
    return this.wrap(ctx, supervisor);
  }

  async close(): Promise<void> {}
}
