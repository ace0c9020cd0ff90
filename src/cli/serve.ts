/**
 * `nereid serve`: tritonserver's command line. Flags keep Triton's names,
 * defaults and meanings; those for features Nereid does not have are
 * accepted and reported once in the log.
 */
import { existsSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import type { Logger } from 'pino';
import type { StartupNote } from './allocator.js';
import { Server } from '../core/server.js';
import type { ModelControlMode } from '../types/api.js';
import { Errors } from '../errors.js';
import { serverBatchingPolicy } from '../scheduler/batching-policy.js';
import { cacheGauges, createResponseCache, parseCacheConfigFlags } from '../cache/response-cache.js';
import { HttpFrontend, type HttpFrontendOptions, LogSettings } from '../frontends/http/index.js';
import { DashboardHistory } from '../frontends/dashboard/history.js';
import { DashboardRoute } from '../frontends/dashboard/route.js';
import { Tracer } from '../trace/index.js';
import { parseTraceFlags, type TraceFlagResult } from '../trace/config.js';
import { GrpcFrontend } from '../frontends/grpc/index.js';
import { OpenAiFrontend, joinRestrictedApiArgs, parseOpenAiRestrictedApis } from '../frontends/openai/index.js';
import { Metrics, MetricsFrontend } from '../metrics/index.js';
import { frontendThreadsFromEnv } from '../frontends/threads/index.js';
import { processCpuBudget } from '../backends/cpu-budget.js';
import {
  createLogger,
  LOG_FORMATS,
  type LogFormat,
  type LogSwitches,
  reconfigureLogger,
  watchLogProblems,
} from '../logger.js';
import { isRemoteRepository } from '../repository/index.js';
import { checkPagingFlags, parseMemoryBudget } from '../core/memory-budget.js';
import { registerPagingMetrics } from '../metrics/paging.js';
import { type FlagSpec, FlagReader, parseFlags } from './flags.js';
import {
  AUTH_FAILURE_REASONS,
  AccessControl,
  DEFAULT_FAILURE_LIMIT,
  KeysFileWatcher,
  keysFileConfigError,
  parseKeysFile,
  readKeysText,
} from '../auth/index.js';

const S: FlagSpec = { type: 'string' };
const SR: FlagSpec = { type: 'string', repeat: true };
const I: FlagSpec = { type: 'int' };
const B: FlagSpec = { type: 'bool' };

/** Flags Nereid acts on. */
export const SERVE_FLAGS: Record<string, FlagSpec> = {
  'model-repository': SR,
  'model-store': SR,
  'model-cache-dir': S,
  'model-control-mode': S,
  'load-model': SR,
  'repository-poll-secs': I,
  'model-config-name': S,
  'model-load-thread-count': I,
  'model-load-retry-count': I,
  'model-memory-budget': S,
  'model-pin': SR,
  'model-load-wait-ms': I,
  'model-memory-history': S,
  'strict-readiness': B,
  'exit-on-error': B,
  'exit-timeout-secs': I,
  'disable-auto-complete-config': B,
  'strict-model-config': B,
  id: S,
  'allow-http': B,
  'http-port': I,
  'http-address': S,
  'http-max-input-size': I,
  'allow-grpc': B,
  'grpc-port': I,
  'grpc-address': S,
  'grpc-infer-response-compression-level': S,
  'grpc-keepalive-time': I,
  'grpc-keepalive-timeout': I,
  'grpc-keepalive-permit-without-calls': B,
  'grpc-http2-max-pings-without-data': I,
  'grpc-http2-min-recv-ping-interval-without-data': I,
  'grpc-http2-max-ping-strikes': I,
  'grpc-max-connection-age': I,
  'grpc-max-connection-age-grace': I,
  'allow-metrics': B,
  'allow-gpu-metrics': B,
  'allow-cpu-metrics': B,
  'metrics-port': I,
  'metrics-address': S,
  'metrics-interval-ms': I,
  'metrics-config': SR,
  'log-verbose': I,
  'log-info': B,
  'log-warning': B,
  'log-error': B,
  'log-format': S,
  'log-file': S,
  'backend-config': SR,
  'cache-config': SR,
  'response-cache-byte-size': I,
  'http-header-forward-pattern': S,
  'grpc-header-forward-pattern': S,
  'http-restricted-api': SR,
  'grpc-restricted-protocol': SR,
  'auth-keys': S,
  'auth-failure-limit': I,
  'grpc-use-ssl': B,
  'grpc-use-ssl-mutual': B,
  'grpc-server-cert': S,
  'grpc-server-key': S,
  'grpc-root-cert': S,
  help: B,
  'allow-client-shm': B,
  'openai-port': I,
  dashboard: B,
  'openai-tokenizer': S,
  'openai-restricted-api': SR,
  // Numbers are read here as tritonserver reads them (its messages), not by the generic int check.
  'trace-config': SR,
  'trace-file': S,
  'trace-level': SR,
  'trace-rate': S,
  'trace-count': S,
  'trace-log-frequency': S,
  // Beyond tritonserver: one log line per request (every N-th), see docs/tracing.md.
  'log-requests': B,
  'log-requests-rate': I,
  // Beyond tritonserver: HTTP and gRPC served on this many threads (docs/configuration.md).
  'frontend-threads': S,
};

/**
 * Accepted for compatibility; they change nothing here, and a start that
 * names any of them says so once ("accepted for compatibility, has no effect").
 */
export const IGNORED_FLAGS: Record<string, FlagSpec> = {
  // Triton's per-protocol pools; Nereid sizes its frontend threads with --frontend-threads.
  'http-thread-count': I,
  'grpc-infer-thread-count': I,
  // gRPC messages are not pooled.
  'grpc-infer-allocation-pool-size': I,
  'grpc-max-response-pool-size': I,
  'model-namespacing': B,
  'reuse-http-port': B,
  'reuse-grpc-port': B,
  'backend-directory': S,
  'repoagent-directory': S,
  'cache-directory': S,
  'rate-limit': S,
  'rate-limit-resource': SR,
  'pinned-memory-pool-byte-size': I,
  'cuda-memory-pool-byte-size': SR,
  'cuda-virtual-address-size': SR,
  'min-supported-compute-capability': S,
  'buffer-manager-thread-count': I,
  'host-policy': SR,
  'model-load-gpu-limit': SR,
  'enable-peer-access': B,
};

/** The repository served when none is given: the bundled examples. */
export function defaultModelRepository(): string {
  const here = path.dirname(fileURLToPath(import.meta.url));
  // dist/src/cli -> package root
  return path.resolve(here, '..', '..', '..', 'examples', 'model_repository');
}

export function parseBackendConfig(values: readonly string[]): Record<string, Record<string, string>> {
  const out: Record<string, Record<string, string>> = {};
  for (const raw of values) {
    const comma = raw.indexOf(',');
    const eqFirst = raw.indexOf('=');
    let backend = '';
    let setting = raw;
    if (comma !== -1 && (eqFirst === -1 || comma < eqFirst)) {
      backend = raw.slice(0, comma);
      setting = raw.slice(comma + 1);
    }
    const eq = setting.indexOf('=');
    if (eq <= 0) throw Errors.config(`--backend-config expects <backend>,<key>=<value> or <key>=<value>, got '${raw}'`);
    (out[backend] ??= {})[setting.slice(0, eq)] = setting.slice(eq + 1);
  }
  // The batching default for every model is checked here, so a bad value stops the server before any load.
  serverBatchingPolicy(out, '');
  for (const backend of Object.keys(out)) serverBatchingPolicy(out, backend);
  return out;
}

export interface ServeConfig {
  server: ConstructorParameters<typeof Server>[0];
  http: {
    enabled: boolean;
    port: number;
    address: string;
    maxInputSize: number;
    restrictedApis: string[];
    headerForwardPattern: string | undefined;
    /** --dashboard: the built-in dashboard under /dashboard (default on). */
    dashboard: boolean;
  };
  grpc: {
    enabled: boolean;
    port: number;
    address: string;
    keepaliveTimeMs: number;
    keepaliveTimeoutMs: number;
    keepalivePermitWithoutCalls: boolean;
    http2MaxPingsWithoutData: number;
    http2MinRecvPingIntervalWithoutDataMs: number;
    http2MaxPingStrikes: number;
    maxConnectionAgeMs: number | undefined;
    maxConnectionAgeGraceMs: number | undefined;
    compressionLevel: string;
    restrictedProtocols: string[];
    headerForwardPattern: string | undefined;
    ssl: { serverCert: string; serverKey: string; rootCert?: string; mutual: boolean } | undefined;
  };
  openai: {
    /** --openai-port: a listener of its own (off unless given); /v1 is always on the HTTP port. */
    port: number | undefined;
    tokenizerDir: string | undefined;
    restrictedApis: string[];
  };
  metrics: {
    enabled: boolean;
    port: number;
    address: string;
    allowCpu: boolean;
    allowGpu: boolean;
    intervalMs: number;
    config: string[];
  };
  /** `--auth-keys` (and `--auth-failure-limit`); undefined without a keys file. */
  auth: { keysFile: string; failureLimit: number } | undefined;
  /** --frontend-threads (a count, or auto: budgetFrontendThreads), else NEREID_FRONTEND_THREADS, else auto. */
  frontendThreads: number;
  ignored: string[];
  log: { switches: LogSwitches; format: LogFormat | undefined; file: string | undefined };
  /** --trace-config and the older --trace-* flags, read. */
  trace: TraceFlagResult['options'];
  /** Lines printed to stderr before the server starts (Triton's start-up warnings). */
  warnings: string[];
  logLevel: string;
}

/** The default's cap: past it, the main thread (scheduler, batchers) rather than parsing is the limit. */
export const MAX_DEFAULT_FRONTEND_THREADS = 8;

/**
 * `--frontend-threads=auto` (the default): half the CPU budget, at most MAX_DEFAULT_FRONTEND_THREADS, and 1 (all on
 * the main thread) up to 3 cores. The main thread and the models need the rest; on 2 cores threads were slower at
 * every point measured (docs/architecture.md, "How many threads").
 */
export function budgetFrontendThreads(budget = processCpuBudget()): number {
  return Math.max(1, Math.min(MAX_DEFAULT_FRONTEND_THREADS, Math.floor(budget / 2)));
}

function frontendThreadsFlag(f: FlagReader): number {
  if (!f.has('frontend-threads')) return frontendThreadsFromEnv(budgetFrontendThreads());
  if (f.string('frontend-threads') === 'auto') return budgetFrontendThreads();
  const text = f.string('frontend-threads') ?? '';
  const n = Number(text);
  if (!/^\d+$/.test(text) || n < 1) throw Errors.config(`--frontend-threads must be auto or 1 or more, got '${text}'`);
  return n;
}

export function buildServeConfig(argv: readonly string[]): ServeConfig {
  const values = parseFlags(joinRestrictedApiArgs(argv), { ...SERVE_FLAGS, ...IGNORED_FLAGS });
  const f = new FlagReader(values);
  const repos = [...f.all('model-repository'), ...f.all('model-store')];
  const mode = f.string('model-control-mode', 'none').toLowerCase();
  if (mode !== 'none' && mode !== 'poll' && mode !== 'explicit') {
    throw Errors.config(`--model-control-mode must be none, poll or explicit, got '${mode}'`);
  }
  const loadModels = f.all('load-model');
  if (loadModels.length > 0 && mode !== 'explicit') {
    throw Errors.loadModelNotExplicit();
  }
  if (loadModels.includes('*') && loadModels.length > 1) {
    throw Errors.config("--load-model='*' loads every model and must be the only --load-model");
  }
  const maxInput = f.int('http-max-input-size', 67108864);
  if (maxInput <= 0) throw Errors.config('--http-max-input-size must be greater than 0');
  const httpAddress = f.string('http-address', '0.0.0.0');
  const allowMetrics = f.bool('allow-metrics', true);
  const warnings: string[] = [];
  const strictGiven = f.has('strict-model-config');
  if (strictGiven)
    warnings.push(
      "Warning: '--strict-model-config' has been deprecated! Please use '--disable-auto-complete-config' instead.",
    );
  const disableAutoComplete = f.bool('disable-auto-complete-config', false);
  if (disableAutoComplete && strictGiven && !f.bool('strict-model-config', false)) {
    warnings.push(
      "Warning: Overriding deprecated '--strict-model-config' from " +
      "False to True in favor of '--disable-auto-complete-config'!",
    );
  }
  const verbose = f.int('log-verbose', 0);
  const switches: LogSwitches = {
    error: f.bool('log-error', true),
    warning: f.bool('log-warning', true),
    info: f.bool('log-info', true),
    verbose,
  };
  const logFormat = f.string('log-format');
  if (logFormat !== undefined && !(LOG_FORMATS as readonly string[]).includes(logFormat)) {
    throw Errors.config(`invalid argument for --log-format, got: ${logFormat} (use default, ISO8601 or json)`);
  }
  const trace = parseTraceFlags({
    config: f.all('trace-config'),
    file: f.string('trace-file'),
    level: f.all('trace-level'),
    rate: f.string('trace-rate'),
    count: f.string('trace-count'),
    logFrequency: f.string('trace-log-frequency'),
  });
  warnings.push(...trace.warnings);
  const logRequestsRate = f.int('log-requests-rate', 1);
  if (logRequestsRate < 1) {
    throw Errors.config(`--log-requests-rate must be 1 or more (every N-th request is logged), got ${logRequestsRate}`);
  }
  if (f.has('log-requests-rate') && !f.bool('log-requests', false)) {
    throw Errors.config('--log-requests-rate needs --log-requests=true');
  }
  trace.options.requestLogRate = f.bool('log-requests', false) ? logRequestsRate : 0;
  const logLevel =
    verbose > 0 ? 'debug' : switches.info ? 'info' : switches.warning ? 'warn' : switches.error ? 'error' : 'silent';
  const cfg: ServeConfig = {
    server: {
      modelRepositories: repos.length > 0 ? repos : [defaultModelRepository()],
      modelCacheDir: f.string('model-cache-dir'),
      id: f.string('id', 'triton'),
      modelControlMode: mode as ModelControlMode,
      loadModels,
      repositoryPollSecs: mode === 'poll' ? f.int('repository-poll-secs', 15) : 0,
      modelLoadThreadCount: f.int('model-load-thread-count', 4),
      modelLoadRetryCount: f.int('model-load-retry-count', 0),
      modelConfigName: f.string('model-config-name'),
      strictReadiness: f.bool('strict-readiness', true),
      exitOnError: f.bool('exit-on-error', true),
      exitTimeoutSecs: f.int('exit-timeout-secs', 30),
      disableAutoCompleteConfig: disableAutoComplete || f.bool('strict-model-config', false),
      backendConfig: parseBackendConfig(f.all('backend-config')),
      allowClientShm: f.bool('allow-client-shm', false),
      cacheConfig: cacheSettings(f, warnings),
      ...pagingSettings(f),
    },
    http: {
      enabled: f.bool('allow-http', true),
      port: f.int('http-port', 8000),
      address: httpAddress,
      maxInputSize: maxInput,
      restrictedApis: f.all('http-restricted-api'),
      headerForwardPattern: f.string('http-header-forward-pattern'),
      dashboard: f.bool('dashboard', true),
    },
    grpc: {
      enabled: f.bool('allow-grpc', true),
      port: f.int('grpc-port', 8001),
      address: f.string('grpc-address', '0.0.0.0'),
      keepaliveTimeMs: f.int('grpc-keepalive-time', 7200000),
      keepaliveTimeoutMs: f.int('grpc-keepalive-timeout', 20000),
      keepalivePermitWithoutCalls: f.bool('grpc-keepalive-permit-without-calls', false),
      http2MaxPingsWithoutData: f.int('grpc-http2-max-pings-without-data', 2),
      http2MinRecvPingIntervalWithoutDataMs: f.int('grpc-http2-min-recv-ping-interval-without-data', 300000),
      http2MaxPingStrikes: f.int('grpc-http2-max-ping-strikes', 2),
      maxConnectionAgeMs: connectionAgeMs(f, 'grpc-max-connection-age'),
      maxConnectionAgeGraceMs: connectionAgeMs(f, 'grpc-max-connection-age-grace'),
      compressionLevel: f.string('grpc-infer-response-compression-level', 'none').toLowerCase(),
      restrictedProtocols: f.all('grpc-restricted-protocol'),
      headerForwardPattern: f.string('grpc-header-forward-pattern'),
      ssl: grpcSsl(f),
    },
    frontendThreads: frontendThreadsFlag(f),
    openai: {
      port: f.has('openai-port') ? f.int('openai-port', 9000) : undefined,
      tokenizerDir: f.string('openai-tokenizer'),
      restrictedApis: f.all('openai-restricted-api'),
    },
    metrics: {
      enabled: allowMetrics,
      port: f.int('metrics-port', 8002),
      address: f.string('metrics-address', httpAddress),
      allowCpu: allowMetrics && f.bool('allow-cpu-metrics', true),
      allowGpu: allowMetrics && f.bool('allow-gpu-metrics', true),
      intervalMs: f.int('metrics-interval-ms', 2000),
      config: f.all('metrics-config'),
    },
    auth: authSettings(f),
    ignored: [...values.keys()].filter((k) => k in IGNORED_FLAGS),
    log: { switches, format: logFormat as LogFormat | undefined, file: f.string('log-file') || undefined },
    trace: trace.options,
    warnings,
    logLevel,
  };
  const ports: Array<[string, number, boolean]> = [
    ['HTTP', cfg.http.port, cfg.http.enabled],
    ['gRPC', cfg.grpc.port, cfg.grpc.enabled],
    ['metrics', cfg.metrics.port, cfg.metrics.enabled],
    ['OpenAI', cfg.openai.port ?? 0, cfg.openai.port !== undefined],
  ];
  parseOpenAiRestrictedApis(cfg.openai.restrictedApis); // a bad value fails here, before anything starts
  if (cfg.openai.tokenizerDir !== undefined && !existsSync(cfg.openai.tokenizerDir)) {
    throw Errors.config(`--openai-tokenizer: folder '${cfg.openai.tokenizerDir}' does not exist`);
  }
  for (let i = 0; i < ports.length; i++) {
    for (let j = i + 1; j < ports.length; j++) {
      const [a, pa, ea] = ports[i]!;
      const [b, pb, eb] = ports[j]!;
      if (ea && eb && pa === pb && pa !== 0)
        throw Errors.config(`the ${a} and ${b} ports are both ${pa}; each service needs its own port`);
    }
  }
  if (cfg.grpc.compressionLevel && !['none', 'low', 'medium', 'high'].includes(cfg.grpc.compressionLevel)) {
    throw Errors.config(
      `--grpc-infer-response-compression-level must be none, low, medium or high, got '${cfg.grpc.compressionLevel}'`,
    );
  }
  return cfg;
}

/**
 * --cache-config (and the deprecated --response-cache-byte-size) as tritonserver reads them; checked again when the
 * cache is built.
 */
function cacheSettings(f: FlagReader, warnings: string[]): Record<string, Record<string, string>> | undefined {
  const configs = f.all('cache-config');
  const sizeGiven = f.has('response-cache-byte-size');
  if (sizeGiven && configs.length > 0) {
    throw Errors.cacheConfig(
      'Incompatible flags --response-cache-byte-size and ' +
      '--cache-config both provided. Please provide one or the other.',
    );
  }
  if (sizeGiven) {
    const size = String(f.int('response-cache-byte-size', 0));
    warnings.push(
      `Warning: '--response-cache-byte-size' has been deprecated! This will default to the 'local' cache ` +
      `implementation with the provided byte size for its config. Please use '--cache-config' ` +
      `instead. The equivalent --cache-config CLI args would be: '--cache-config=local,size=${size}'`,
    );
    const settings = { local: { size } };
    createResponseCache(settings);
    return settings;
  }
  if (configs.length === 0) return undefined;
  const settings = parseCacheConfigFlags(configs);
  createResponseCache(settings); // a bad size fails here, before anything starts
  return settings;
}

function authSettings(f: FlagReader): ServeConfig['auth'] {
  const keysFile = f.string('auth-keys');
  const failureLimit = f.int('auth-failure-limit', DEFAULT_FAILURE_LIMIT);
  if (failureLimit < 0)
    throw Errors.config(
      `--auth-failure-limit must be 0 (no limit) or a number of failures a minute, got ${failureLimit}`,
    );
  if (keysFile === undefined) {
    if (f.has('auth-failure-limit')) throw Errors.config('--auth-failure-limit needs --auth-keys');
    return undefined;
  }
  if (keysFile === '') throw Errors.config('--auth-keys needs the path of a keys file');
  return { keysFile, failureLimit };
}

/**
 * The keys file read and checked at start (a problem stops the start, naming
 * file, line and field), then watched: a change applies within two seconds.
 */
function startAccessControl(
  auth: NonNullable<ServeConfig['auth']>,
  logger: Logger,
): { access: AccessControl; watcher: KeysFileWatcher } {
  let text: string;
  let access: AccessControl;
  try {
    text = readKeysText(auth.keysFile);
    access = new AccessControl(parseKeysFile(auth.keysFile, text), { failureLimit: auth.failureLimit, logger });
  } catch (err) {
    throw keysFileConfigError(err);
  }
  const keys = access.keys;
  logger.info(
    {
      file: auth.keysFile,
      keys: [...keys.byHash.values()].map((k) => k.name),
      anonymous: keys.anonymous.grants.scopes,
    },
    'API keys required (--auth-keys)',
  );
  if (keys.anonymousGiven && !keys.anonymous.grants.allows('health')) {
    logger.warn(
      { file: auth.keysFile },
      "the keys file's anonymous entry has no 'health' scope: health probes need a key",
    );
  }
  const watcher = new KeysFileWatcher(auth.keysFile, text, (table) => access.replaceKeys(table), logger);
  watcher.start();
  return { access, watcher };
}

/**
 * --model-memory-budget, --model-pin, --model-load-wait-ms and --model-memory-history (docs/paging.md); checked
 * here so a bad one stops the start.
 */
type PagingSettings = Pick<
  ServeConfig['server'],
  'modelMemoryBudget' | 'modelPins' | 'modelLoadWaitMs' | 'modelMemoryHistory'
>;

function pagingSettings(f: FlagReader): PagingSettings {
  const budget = f.string('model-memory-budget');
  if (budget !== undefined) parseMemoryBudget(budget);
  const settings = {
    modelMemoryBudget: budget,
    modelPins: f.all('model-pin'),
    modelLoadWaitMs: f.has('model-load-wait-ms') ? f.int('model-load-wait-ms', 0) : undefined,
    modelMemoryHistory: f.string('model-memory-history'),
  };
  checkPagingFlags(settings);
  return budget === undefined ? {} : settings;
}

/** As in tritonserver, 0 (the default) leaves the limit unset; a negative age is an error. */
function connectionAgeMs(f: FlagReader, flag: string): number | undefined {
  const ms = f.int(flag, 0);
  if (ms < 0) throw Errors.config(`--${flag} must be 0 (no limit) or a positive number of milliseconds, got ${ms}`);
  return ms === 0 ? undefined : ms;
}

function grpcSsl(f: FlagReader): ServeConfig['grpc']['ssl'] {
  if (!f.bool('grpc-use-ssl', false) && !f.bool('grpc-use-ssl-mutual', false)) return undefined;
  const serverCert = f.string('grpc-server-cert');
  const serverKey = f.string('grpc-server-key');
  if (!serverCert || !serverKey) throw Errors.config('--grpc-use-ssl needs --grpc-server-cert and --grpc-server-key');
  const mutual = f.bool('grpc-use-ssl-mutual', false);
  const rootCert = f.string('grpc-root-cert');
  if (mutual && !rootCert) throw Errors.config('--grpc-use-ssl-mutual needs --grpc-root-cert');
  return { serverCert, serverKey, rootCert, mutual };
}

export const SERVE_HELP = `Usage: nereid serve [--model-repository=<dir> ...] [flags]

Serves a Triton model repository over HTTP (KServe v2, port 8000), gRPC
(port 8001) and Prometheus metrics (port 8002). With no --model-repository
the bundled examples/model_repository is served. Flags are tritonserver's:
${Object.keys(SERVE_FLAGS)
  .map((f) => `  --${f}`)
  .join('\n')}
Accepted for compatibility (no effect): ${Object.keys(IGNORED_FLAGS)
  .map((f) => `--${f}`)
  .join(', ')}
`;

export interface RunningServer {
  server: Server;
  ports: { http?: number; grpc?: number; metrics?: number; openai?: number };
  /** Stops accepting, drains in-flight requests (bounded), unloads models. */
  shutdown(): Promise<void>;
}

/** Starts everything `nereid serve` starts. Throws on startup failure (after cleaning up). */
export async function startServing(cfg: ServeConfig, logger: Logger): Promise<RunningServer> {
  for (const repo of cfg.server.modelRepositories) {
    if (!isRemoteRepository(repo) && !existsSync(repo))
      throw Errors.config(`model repository '${repo}' does not exist`);
  }
  if (cfg.ignored.length > 0) {
    logger.warn(`accepted for compatibility, has no effect: ${cfg.ignored.map((flag) => `--${flag}`).join(', ')}`);
  }
  const auth = cfg.auth === undefined ? undefined : startAccessControl(cfg.auth, logger);
  const access = auth?.access;
  const server = new Server({ ...cfg.server, logger });
  const metrics = cfg.metrics.enabled
    ? new Metrics({
        allowCpuMetrics: cfg.metrics.allowCpu,
        allowGpuMetrics: cfg.metrics.allowGpu,
        metricsIntervalMs: cfg.metrics.intervalMs,
        metricsConfig: cfg.metrics.config,
        logger,
      })
    : undefined;
  if (metrics) {
    server.on('versionReady', (v) =>
      metrics.attach(v.stats, {
        pendingCount: () => v.scheduler?.pendingCount ?? 0,
        metricTags: Object.fromEntries(Object.entries(v.config.metricTags)),
        loadDurationSecs: v.loadDurationSecs,
        warmupDurationSecs: v.warmupDurationSecs,
        restartCount: () => v.restartCount,
        cacheEnabled: server.isCached(v),
        modelMetrics: v.config.modelMetrics,
        batching: () => v.scheduler?.batching,
      }),
    );
    if (server.responseCache)
      for (const [name, help, read] of cacheGauges(server.responseCache)) metrics.addScrapeGauge(name, help, read);
    server.on('versionUnloaded', (v) => metrics.detach(v.stats));
    if (access !== undefined) {
      metrics.addScrapeCounter(
        'nereid_auth_failures_total',
        'Requests refused by --auth-keys, by reason: missing (no key where one is needed), malformed ' +
        '(not Bearer), unknown (no such key), scope (the key lacks the scope), rate_limited',
        'reason',
        () => AUTH_FAILURE_REASONS.map((reason) => [reason, access.failures[reason]] as const),
      );
    }
    if (server.repository.pager) registerPagingMetrics(metrics, server.repository.pager);
    metrics.addScrapeGauge(
      'nereid_server_ready',
      'Whether /v2/health/ready answers ready (1) or not (0); ' +
      'with --strict-readiness every model to be served is ready',
      () => (server.isReady() ? 1 : 0),
    );
  }
  // One store of each setting, shared by both protocols, as in Triton.
  // /v2/logging starts from the command line's settings and changes the logger in place.
  const logSettings = new LogSettings(
    (state) =>
      reconfigureLogger(logger, {
        switches: {
          error: state.log_error,
          warning: state.log_warning,
          info: state.log_info,
          verbose: state.log_verbose_level,
        },
        format: (LOG_FORMATS as readonly string[]).includes(state.log_format)
          ? (state.log_format as LogFormat)
          : undefined,
      }),
    {
      log_file: cfg.log.file ?? '',
      log_error: cfg.log.switches.error,
      log_warning: cfg.log.switches.warning,
      log_info: cfg.log.switches.info,
      log_verbose_level: cfg.log.switches.verbose,
      log_format: cfg.log.format ?? 'default',
    },
  );
  const openai = new OpenAiFrontend(server, {
    maxInputSize: cfg.http.maxInputSize,
    logger,
    tokenizerDir: cfg.openai.tokenizerDir,
    restrictedApis: cfg.openai.restrictedApis,
    access,
    timings: metrics,
  });
  // One trace manager for both protocols, as in Triton; its settings answer the trace extension.
  const tracer = new Tracer({ ...cfg.trace, logger });
  if (metrics) {
    metrics.addScrapeCounter(
      'nereid_trace_spans_dropped_total',
      'OpenTelemetry spans dropped, by reason: the export queue was full ' +
      '(queue_full) or the collector did not take them (export_failed)',
      'reason',
      async () => {
        const dropped = await tracer.droppedSpans();
        return [
          ['queue_full', dropped.queueFull],
          ['export_failed', dropped.exportFailed],
        ];
      },
    );
    metrics.addScrapeCounter(
      'nereid_trace_context_invalid_total',
      'Requests whose W3C trace context was malformed and ignored, by header',
      'header',
      () => [['traceparent', tracer.invalidContexts]],
    );
  }
  const ports: RunningServer['ports'] = {};
  const dashboard = cfg.http.enabled && cfg.http.dashboard ? startDashboard(server, ports, logger) : undefined;
  const http = cfg.http.enabled
    ? new HttpFrontend(server, {
        port: cfg.http.port,
        address: cfg.http.address,
        maxInputSize: cfg.http.maxInputSize,
        logger,
        logSettings,
        tracer,
        restrictedApis: cfg.http.restrictedApis,
        headerForwardPattern: cfg.http.headerForwardPattern,
        v1: openai.handle,
        access,
        dashboard: dashboard?.handle,
        threads: cfg.frontendThreads,
      })
    : undefined;
  // In-flight gRPC calls get the same drain budget as the models (--exit-timeout-secs).
  const grpcOptions = {
    ...cfg.grpc,
    shutdownGraceMs: (cfg.server.exitTimeoutSecs ?? 30) * 1000,
    logger,
    logSettings,
    tracer,
    access,
    threads: cfg.frontendThreads,
  };
  const grpc = cfg.grpc.enabled ? new GrpcFrontend(server, grpcOptions) : undefined;
  const metricsFrontend = metrics
    ? new MetricsFrontend(metrics, { port: cfg.metrics.port, address: cfg.metrics.address, access })
    : undefined;
  // The stop sequence: readiness turns false at once while liveness stays true and the HTTP port keeps
  // answering probes (no keep-alive from here on); gRPC clients get GOAWAY and reconnect elsewhere;
  // in-flight requests finish within --exit-timeout-secs; only then the HTTP port closes.
  const shutdown = async (): Promise<void> => {
    http?.drain();
    await Promise.allSettled([grpc?.stop(), server.stop()]);
    await Promise.allSettled([http?.stop(), openai.stop(), metricsFrontend?.stop(), metrics?.close?.()]);
    auth?.watcher.close();
    dashboard?.history.stop();
    // Last, so the traces of the drained requests are in the file (or exported).
    await tracer.close();
  };
  try {
    await server.start();
    const beforeFrontends = process.memoryUsage.rss();
    if (http) ports.http = (await http.start()).port;
    if (grpc) ports.grpc = (await grpc.start()).port;
    // The frontends (with --frontend-threads, tens of MB per thread) are not models: the memory budget's base.
    server.repository.pager?.frontendsStarted(process.memoryUsage.rss() - beforeFrontends);
    if (metricsFrontend) ports.metrics = (await metricsFrontend.start()).port;
    if (cfg.openai.port !== undefined) ports.openai = (await openai.start(cfg.openai.port, cfg.http.address)).port;
  } catch (err) {
    await shutdown();
    throw err;
  }
  return { server, ports, shutdown };
}

/** The dashboard's sampler (one sample a second, 15 minutes kept) and its route; the log's problems feed it. */
function startDashboard(
  server: Server,
  ports: RunningServer['ports'],
  logger: Logger,
): { history: DashboardHistory; handle: NonNullable<HttpFrontendOptions['dashboard']> } {
  const history = new DashboardHistory(server, { ports });
  watchLogProblems(logger, (record) => history.recordProblem(record));
  history.start();
  const route = new DashboardRoute(history);
  return { history, handle: (req, res, path, query, guard) => route.handle(req, res, path, query, guard) };
}

/** `allocator`: the malloc and young-generation settings in effect, logged once at start (see cli/allocator.ts). */
export async function runServe(argv: readonly string[], allocator: readonly StartupNote[] = []): Promise<number> {
  if (argv.includes('--help') || argv.includes('-h')) {
    process.stdout.write(SERVE_HELP);
    return 0;
  }
  let cfg: ServeConfig;
  try {
    cfg = buildServeConfig(argv);
  } catch (err) {
    process.stderr.write(`error: ${(err as Error).message}\n`);
    return 2;
  }
  for (const line of cfg.warnings) process.stderr.write(`${line}\n`);
  const logger = createLogger({
    level: process.env.NEREID_LOG_LEVEL || undefined,
    switches: cfg.log.switches,
    format: cfg.log.format,
    destination: cfg.log.file ?? 2,
  });
  for (const note of allocator) {
    if (note.verbose) logger.debug(note.text);
    else logger.info(note.text);
  }
  let running: RunningServer;
  try {
    running = await startServing(cfg, logger);
  } catch (err) {
    logger.error({ reason: (err as Error).message }, 'failed to start');
    process.stderr.write(`error: creating server: ${(err as Error).message}\n`);
    return 1;
  }
  logger.info({ ...running.ports, repositories: cfg.server.modelRepositories }, 'nereid is serving');
  return new Promise<number>((resolve) => {
    let stopping = false;
    const onSignal = (signal: string) => {
      if (stopping) return;
      stopping = true;
      logger.info({ signal }, 'stopping: no new requests, waiting for in-flight ones');
      void running.shutdown().then(() => {
        logger.info('stopped');
        resolve(0);
      });
    };
    process.on('SIGTERM', () => onSignal('SIGTERM'));
    process.on('SIGINT', () => onSignal('SIGINT'));
  });
}
