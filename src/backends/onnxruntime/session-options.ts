/**
 * onnxruntime session options from a model configuration, read the way
 * Triton's onnxruntime backend reads them: `parameters` (intra_op_thread_count,
 * inter_op_thread_count, execution_mode, enable_mem_arena, enable_mem_pattern,
 * session.* config entries) and `optimization { graph { level } }`.
 */
import { defaultSpinMicros, processCpuBudget } from '../cpu-budget.js';
import { DEFAULT_SPIN_WAIT_MICROS } from '../idle-wait.js';
import type { SessionPoolSettings } from './thread/session-pool.js';
import type { InferenceSession } from 'onnxruntime-node';
import { ModelInstanceGroup_Kind, type ModelConfig } from '../../gen/model_config_pb.js';
import { Errors } from '../../errors.js';

/**
 * Default intra-op threads per instance when the configuration names none.
 * ORT's own default is a pool of one thread per core for every session; with
 * Triton's default of two CPU instances per model (and several models) that
 * oversubscribes the cores, and the pools contend with each other and with
 * the event loop. With one thread, each instance runs on its own session
 * thread and the instances are the unit of parallelism, which is what the
 * dynamic batcher and instance_group counts assume. A large model served by a
 * single instance gains from more: set intra_op_thread_count (0 restores ORT's
 * default) or `--backend-config=onnxruntime,intra_op_thread_count=N`.
 */
export const DEFAULT_INTRA_OP_THREADS = 1;

/**
 * The intra-op default of a model with session threads of its own (a big
 * model, or session_thread 'own'): the CPU the process may use (cores, capped
 * by a cgroup quota) shared out among the model's KIND_CPU instances, at
 * least one each. One instance of a big model on an 8-core machine gets 8, two
 * get 4 each. Models small enough to share the pool's threads keep
 * DEFAULT_INTRA_OP_THREADS: a session with a pool of its own would need a
 * thread of its own, and a small model's run gains little from one.
 */
export function machineIntraOpThreads(config: ModelConfig, budget = processCpuBudget()): number {
  let instances = 0;
  for (const g of config.instanceGroup)
    if (g.kind === ModelInstanceGroup_Kind.CPU && !g.passive) instances += Math.max(1, g.count);
  return Math.max(1, Math.floor(budget / Math.max(1, instances)));
}

/**
 * Spinning keeps idle intra-op threads busy-waiting for work: a little lower
 * latency, but it burns cores other instances and the event loop need.
 */
export const DEFAULT_ALLOW_SPINNING = '0';

const SPINNING_KEY = 'session.intra_op.allow_spinning';
const SPINNING_STOP_KEY = 'session.force_spinning_stop';
const SPIN_DURATION_KEY = 'session.intra_op.spin_duration_us';

/**
 * Intra-op threads of a model's wide main-thread session (see policies/inline.ts):
 * while requests come one at a time, a run long enough to gain from it is
 * split between the event loop's thread and this many less one helper
 * threads. Nereid's own parameter (`inline_intra_op_thread_count`, or for
 * every model `--backend-config=onnxruntime,inline_intra_op_thread_count=N`);
 * 1 turns the wide session off. Default: 2 when the process may use two cores
 * or more (cores, capped by a cgroup quota), else 1. A model whose
 * intra_op_thread_count is set (or the backend config's) gets no wide session
 * unless this is set too: its main-thread session already has the threads
 * it asked for.
 */
export const DEFAULT_INLINE_INTRA_OP_THREADS = 2;

/** The wide session's intra-op threads (1: none). Throws a config error for a bad value. */
export function inlineIntraOpThreads(
  modelName: string,
  config: ModelConfig,
  backendConfig: Readonly<Record<string, string>>,
  budget = processCpuBudget(),
): number {
  const v = intParameter(
    modelName,
    config,
    'inline_intra_op_thread_count',
    backendConfig['inline_intra_op_thread_count'],
  );
  if (v !== undefined) {
    if (v < 1 || v > 256) {
      throw Errors.config(
        `model '${modelName}': parameter 'inline_intra_op_thread_count' must be between 1 and 256, got ${v}`,
      );
    }
    return v;
  }
  if (intParameter(modelName, config, 'intra_op_thread_count', backendConfig['intra_op_thread_count']) !== undefined)
    return 1;
  return Math.max(1, Math.min(DEFAULT_INLINE_INTRA_OP_THREADS, Math.floor(budget)));
}

/**
 * The wide session's options: the model's, with `threads` intra-op threads
 * that spin while a run is active and, for `spinMicros` after it
 * (session.intra_op.spin_duration_us), wait for the next one, then sleep;
 * with spinMicros 0 they stop at the end of each run
 * (session.force_spinning_stop). The model's own session.* entries win.
 */
export function wideInlineOptions(
  options: InferenceSession.SessionOptions,
  config: ModelConfig,
  threads: number,
  spinMicros: number,
): InferenceSession.SessionOptions {
  const extra: Record<string, string> = {
    ...(options.extra as Record<string, string> | undefined),
    [SPINNING_KEY]: '1',
  };
  if (spinMicros > 0) {
    extra[SPIN_DURATION_KEY] = String(spinMicros);
    extra[SPINNING_STOP_KEY] = '0';
  } else {
    extra[SPINNING_STOP_KEY] = '1';
  }
  for (const key of [SPINNING_KEY, SPINNING_STOP_KEY, SPIN_DURATION_KEY]) {
    const own = configParameter(config, key);
    if (own !== undefined) extra[key] = own;
  }
  return { ...options, intraOpNumThreads: threads, extra };
}

/**
 * How long an instance's session thread busy-waits for the next run after one
 * ends, before it dozes (µs; ../idle-wait.ts says when it does). Nereid's own
 * parameter (`spin_wait_microseconds`, or for every model
 * `--backend-config=onnxruntime,spin_wait_microseconds=N`); 0 turns it off.
 * Throws a config error for a bad value.
 */
export function spinWaitMicros(
  modelName: string,
  config: ModelConfig,
  backendConfig: Readonly<Record<string, string>>,
): number {
  const v =
    intParameter(modelName, config, 'spin_wait_microseconds', backendConfig['spin_wait_microseconds']) ??
    defaultSpinMicros(DEFAULT_SPIN_WAIT_MICROS);
  if (v < 0 || v > 1_000_000) {
    throw Errors.config(
      `model '${modelName}': parameter 'spin_wait_microseconds' must be between 0 and 1000000, got ${v}`,
    );
  }
  return v;
}

/**
 * Whether a model's sessions may share a pool thread (model parameter
 * `session_thread`): "shared", "own", or unset ("auto": shared when the
 * model is small and its sessions run with one intra-op thread).
 */
export function sessionThreadChoice(modelName: string, config: ModelConfig): 'auto' | 'shared' | 'own' {
  const raw = configParameter(config, 'session_thread');
  if (raw === undefined) return 'auto';
  const v = raw.trim();
  if (v === 'shared' || v === 'own') return v;
  throw Errors.config(`model '${modelName}': parameter 'session_thread' must be 'shared' or 'own', got '${raw}'`);
}

/** Default stall limit of a shared session thread (see SessionPoolSettings.stallMs). */
export const DEFAULT_SESSION_THREAD_STALL_MS = 10_000;

/**
 * The session thread pool from `--backend-config=onnxruntime,session_threads=N`
 * (default: the cores the process may use; 0: a thread per session) and
 * `session_thread_stall_ms`. Throws a config error for a bad value.
 */
export function sessionPoolSettings(backendConfig: Readonly<Record<string, string>>): SessionPoolSettings {
  const threads =
    backendInt('session_threads', backendConfig['session_threads'], 0, 1024) ??
    Math.max(1, Math.ceil(processCpuBudget()));
  const stallMs =
    backendInt('session_thread_stall_ms', backendConfig['session_thread_stall_ms'], 1, 86_400_000) ??
    DEFAULT_SESSION_THREAD_STALL_MS;
  return { threads, stallMs };
}

function backendInt(key: string, raw: string | undefined, min: number, max: number): number | undefined {
  if (raw === undefined) return undefined;
  const value = Number(raw.trim());
  if (raw.trim() === '' || !Number.isInteger(value) || value < min || value > max) {
    throw Errors.config(`--backend-config=onnxruntime,${key}: must be an integer from ${min} to ${max}, got '${raw}'`);
  }
  return value;
}

export interface PlacementOptions {
  readonly kind: 'CPU' | 'GPU' | 'MODEL';
  readonly deviceId: number;
}

/** A config parameter's string value, or undefined when absent. */
export function configParameter(config: ModelConfig, key: string): string | undefined {
  return config.parameters[key]?.stringValue;
}

function intParameter(
  modelName: string,
  config: ModelConfig,
  key: string,
  fallback: string | undefined,
): number | undefined {
  const raw = configParameter(config, key) ?? fallback;
  if (raw === undefined) return undefined;
  const value = Number(raw.trim());
  if (raw.trim() === '' || !Number.isInteger(value)) {
    throw Errors.config(`model '${modelName}': parameter '${key}' must be an integer, got '${raw}'`);
  }
  return value;
}

function boolParameter(modelName: string, config: ModelConfig, key: string): boolean | undefined {
  const v = intParameter(modelName, config, key, undefined);
  return v === undefined ? undefined : v !== 0;
}

/** Session options for one instance. Throws a config error for a bad parameter value. */
export function buildSessionOptions(
  modelName: string,
  config: ModelConfig,
  backendConfig: Readonly<Record<string, string>>,
  placement: PlacementOptions,
  /** Intra-op threads when neither the model nor the backend config names a count (see machineIntraOpThreads). */
  defaultIntra = DEFAULT_INTRA_OP_THREADS,
): InferenceSession.SessionOptions {
  const levelValue = config.optimization?.graph?.level ?? 0;
  const graphOptimizationLevel =
    levelValue === -1 ? 'basic' : levelValue === 1 ? 'extended' : levelValue === 2 ? 'disabled' : 'all';

  const executionMode = intParameter(modelName, config, 'execution_mode', undefined) ?? 0;
  if (executionMode !== 0 && executionMode !== 1) {
    throw Errors.config(
      `model '${modelName}': invalid configuration value provided. Expected ` +
      `values for execution_mode are 0 or 1 but got ${executionMode}`,
    );
  }

  // Model parameters win; `--backend-config=onnxruntime,intra_op_thread_count=N` sets the default for every model.
  const intra =
    intParameter(modelName, config, 'intra_op_thread_count', backendConfig['intra_op_thread_count']) ?? defaultIntra;
  const inter = intParameter(modelName, config, 'inter_op_thread_count', backendConfig['inter_op_thread_count']);
  if (intra < 0)
    throw Errors.config(`model '${modelName}': parameter 'intra_op_thread_count' must be >= 0, got ${intra}`);
  if (inter !== undefined && inter < 0) {
    throw Errors.config(`model '${modelName}': parameter 'inter_op_thread_count' must be >= 0, got ${inter}`);
  }

  // Session config entries (onnxruntime_session_options_config_keys.h) pass through.
  const extra: Record<string, string> = { [SPINNING_KEY]: DEFAULT_ALLOW_SPINNING };
  for (const [key, value] of Object.entries(config.parameters)) {
    if (key.startsWith('session.')) extra[key] = value.stringValue;
  }

  const options: InferenceSession.SessionOptions = {
    graphOptimizationLevel,
    executionMode: executionMode === 1 ? 'parallel' : 'sequential',
    executionProviders: placement.kind === 'GPU' ? [{ name: 'cuda', deviceId: placement.deviceId }, 'cpu'] : ['cpu'],
    // onnxruntime logs straight to stderr, outside the server's log; its errors
    // reach the caller as exceptions anyway, so only fatal ones are printed.
    logSeverityLevel: 4,
    extra,
  };
  const mutable = options as {
    -readonly [K in keyof InferenceSession.SessionOptions]: InferenceSession.SessionOptions[K];
  };
  if (intra > 0) mutable.intraOpNumThreads = intra;
  if (inter !== undefined && inter > 0) mutable.interOpNumThreads = inter;
  const arena = boolParameter(modelName, config, 'enable_mem_arena');
  if (arena !== undefined) mutable.enableCpuMemArena = arena;
  const pattern = boolParameter(modelName, config, 'enable_mem_pattern');
  if (pattern !== undefined) mutable.enableMemPattern = pattern;
  return options;
}
