/**
 * The javascript backend's settings: model parameters in config.pbtxt
 * (`parameters { key: "execute_timeout_ms" value: { string_value: "5000" } }`),
 * with `--backend-config=javascript,<key>=<value>` as the default for every
 * model. A bad value fails the load with a message naming it.
 */
import { defaultSpinMicros } from '../cpu-budget.js';
import { DEFAULT_SPIN_WAIT_MICROS } from '../idle-wait.js';
import type { ModelConfig } from '../../gen/model_config_pb.js';
import { Errors } from '../../errors.js';

/** How long one execute() may take before its requests fail (ms). */
export const DEFAULT_EXECUTE_TIMEOUT_MS = 60_000;
/** How long import and initialize() may take before the load fails (ms). */
export const DEFAULT_INITIALIZE_TIMEOUT_MS = 60_000;

export interface JavaScriptSettings {
  readonly executeTimeoutMs: number;
  readonly initializeTimeoutMs: number;
  /** The busy-wait for the next batch (µs, ../idle-wait.ts); 0 turns it off. */
  readonly spinMicros: number;
  /** Heap limit of each worker thread (MB); 0: Node's default. A thread that runs out of it dies and is restarted. */
  readonly maxHeapMb: number;
}

function intSetting(
  modelName: string,
  config: ModelConfig,
  backendConfig: Readonly<Record<string, string>>,
  key: string,
  fallback: number,
  min: number,
  max: number,
): number {
  const raw = config.parameters[key]?.stringValue ?? backendConfig[key];
  if (raw === undefined) return fallback;
  const value = Number(raw.trim());
  if (raw.trim() === '' || !Number.isInteger(value) || value < min || value > max) {
    throw Errors.loadFailed(modelName, `parameter '${key}' must be a whole number from ${min} to ${max}, got '${raw}'`);
  }
  return value;
}

export function readSettings(
  modelName: string,
  config: ModelConfig,
  backendConfig: Readonly<Record<string, string>>,
): JavaScriptSettings {
  return {
    executeTimeoutMs: intSetting(
      modelName,
      config,
      backendConfig,
      'execute_timeout_ms',
      DEFAULT_EXECUTE_TIMEOUT_MS,
      1,
      86_400_000,
    ),
    initializeTimeoutMs: intSetting(
      modelName,
      config,
      backendConfig,
      'initialize_timeout_ms',
      DEFAULT_INITIALIZE_TIMEOUT_MS,
      1,
      86_400_000,
    ),
    spinMicros: intSetting(
      modelName,
      config,
      backendConfig,
      'spin_wait_microseconds',
      defaultSpinMicros(DEFAULT_SPIN_WAIT_MICROS),
      0,
      1_000_000,
    ),
    maxHeapMb: intSetting(modelName, config, backendConfig, 'max_heap_mb', 0, 0, 1_048_576),
  };
}
