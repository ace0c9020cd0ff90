/**
 * Command-line flags of `nereid perf`: perf_analyzer's names, defaults and
 * validation rules, plus `--throughput-threshold` (ours) for CI gates.
 */
import { existsSync, statSync } from 'node:fs';
import { type OptionSpec, tokenize } from '../args.js';

export type Protocol = 'http' | 'grpc';
export type TensorFormat = 'binary' | 'json';
export type MeasurementMode = 'time_windows' | 'count_windows';
export type RequestDistribution = 'constant' | 'poisson';
export type LoadMode = 'concurrency' | 'request_rate';

/** Where generated or user data comes from. */
export type InputDataSource =
  | { kind: 'random' }
  | { kind: 'zero' }
  | { kind: 'files'; paths: string[] };

export interface Range {
  start: number;
  /** 0 means "no limit": keep stepping until the latency threshold is hit. */
  end: number;
  step: number;
}

export interface PerfOptions {
  modelName: string;
  /** '' means the server picks (latest). */
  modelVersion: string;
  url: string;
  protocol: Protocol;
  batchSize: number;
  /** --shape NAME:d1,d2 (repeatable). */
  shapes: Map<string, number[]>;
  loadMode: LoadMode;
  concurrencyRange: Range;
  requestRateRange: Range;
  requestDistribution: RequestDistribution;
  binarySearch: boolean;
  measurementMode: MeasurementMode;
  measurementIntervalMs: number;
  measurementRequestCount: number;
  /** A fraction: --stability-percentage 10 gives 0.1. */
  stabilityThreshold: number;
  maxTrials: number;
  /** -1: report and stabilise on the average latency. */
  percentile: number;
  /** 0: no limit. */
  latencyThresholdMs: number;
  /** 0: no floor. Ours: fail a level whose throughput is below it. */
  throughputThreshold: number;
  inputData: InputDataSource;
  stringLength: number;
  stringData: string | undefined;
  async: boolean;
  forcedSync: boolean;
  streaming: boolean;
  maxThreads: number;
  maxThreadsSpecified: boolean;
  inputTensorFormat: TensorFormat;
  outputTensorFormat: TensorFormat;
  headers: Array<[string, string]>;
  csvFile: string | undefined;
  verboseCsv: boolean;
  collectMetrics: boolean;
  metricsUrl: string;
  metricsIntervalMs: number;
  warmupRequestCount: number;
  requestCount: number;
  verbose: boolean;
  help: boolean;
}

/** A bad command line. perf_analyzer exits with OPTION_ERROR (3) for these. */
export class UsageError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'UsageError';
  }
}

export const DEFAULT_HTTP_URL = 'localhost:8000';
export const DEFAULT_GRPC_URL = 'localhost:8001';
const DEFAULT_MAX_THREADS = 16;

export function defaultOptions(): PerfOptions {
  return {
    modelName: '',
    modelVersion: '',
    url: DEFAULT_HTTP_URL,
    protocol: 'http',
    batchSize: 1,
    shapes: new Map(),
    loadMode: 'concurrency',
    concurrencyRange: { start: 1, end: 1, step: 1 },
    requestRateRange: { start: 1, end: 1, step: 1 },
    requestDistribution: 'constant',
    binarySearch: false,
    measurementMode: 'time_windows',
    measurementIntervalMs: 5000,
    measurementRequestCount: 50,
    stabilityThreshold: 0.1,
    maxTrials: 10,
    percentile: -1,
    latencyThresholdMs: 0,
    throughputThreshold: 0,
    inputData: { kind: 'random' },
    stringLength: 128,
    stringData: undefined,
    async: false,
    forcedSync: false,
    streaming: false,
    maxThreads: DEFAULT_MAX_THREADS,
    maxThreadsSpecified: false,
    inputTensorFormat: 'binary',
    outputTensorFormat: 'binary',
    headers: [],
    csvFile: undefined,
    verboseCsv: false,
    collectMetrics: false,
    metricsUrl: 'localhost:8002/metrics',
    metricsIntervalMs: 1000,
    warmupRequestCount: 0,
    requestCount: 0,
    verbose: false,
    help: false,
  };
}

interface PerfOptionSpec extends OptionSpec {
  /** Long name without the dashes. */
  readonly long: string;
  readonly apply: (o: ParseState, value: string) => void;
}

interface ParseState {
  opts: PerfOptions;
  urlSpecified: boolean;
  loadModeSet: 'none' | 'concurrency' | 'request_rate';
  zeroInput: boolean;
}

/** Integer parse with std::stoi's leniency ("12abc" is 12) but rejecting no digits at all. */
function parseIntStrict(flag: string, value: string): number {
  const m = /^\s*([+-]?\d+)/.exec(value);
  if (!m) throw new UsageError(`Failed to parse ${flag}. Invalid value provided: ${value}`);
  return Number.parseInt(m[1]!, 10);
}

function parseFloatStrict(flag: string, value: string): number {
  const n = Number.parseFloat(value);
  if (!Number.isFinite(n)) throw new UsageError(`Failed to parse ${flag}. Invalid value provided: ${value}`);
  return n;
}

function parseTensorFormat(flag: string, value: string): TensorFormat {
  if (value === 'binary' || value === 'json') return value;
  throw new UsageError(
    `Failed to parse ${flag}. Unsupported type provided: '${value}'. The available options are 'binary' or 'json'.`,
  );
}

function setLoadMode(s: ParseState, mode: 'concurrency' | 'request_rate'): void {
  const names = { concurrency: 'Concurrency', request_rate: 'RequestRate' } as const;
  if (s.loadModeSet !== 'none' && s.loadModeSet !== mode) {
    throw new UsageError(`Cannot use both ${names[s.loadModeSet]} and ${names[mode]} inference load modes.`);
  }
  s.loadModeSet = mode;
}

/** Flags we accept for compatibility but whose only supported value is the default. */
function onlyDefault(flag: string, allowed: readonly string[]) {
  return (_s: ParseState, value: string) => {
    if (!allowed.includes(value)) {
      throw new UsageError(`${flag} '${value}' is not supported by nereid perf (supported: ${allowed.join(', ')}).`);
    }
  };
}

function unsupported(flag: string) {
  return () => {
    throw new UsageError(`${flag} is not supported by nereid perf.`);
  };
}

const SPECS: readonly PerfOptionSpec[] = [
  { long: 'model-name', short: 'm', takesValue: true, apply: (s, v) => (s.opts.modelName = v) },
  { long: 'model-version', short: 'x', takesValue: true, apply: (s, v) => (s.opts.modelVersion = v) },
  {
    long: 'url',
    short: 'u',
    takesValue: true,
    apply: (s, v) => {
      s.opts.url = v;
      s.urlSpecified = true;
    },
  },
  {
    long: 'protocol',
    short: 'i',
    takesValue: true,
    apply: (s, v) => {
      const p = v.toLowerCase();
      if (p !== 'http' && p !== 'grpc') {
        throw new UsageError('Failed to parse -i (protocol). The value should be either HTTP or gRPC.');
      }
      s.opts.protocol = p;
    },
  },
  {
    long: 'batch-size',
    short: 'b',
    takesValue: true,
    apply: (s, v) => {
      const n = parseIntStrict('-b', v);
      if (n <= 0) throw new UsageError('Failed to parse -b (batch size). The value must be > 0.');
      s.opts.batchSize = n;
    },
  },
  {
    long: 'shape',
    takesValue: true,
    apply: (s, v) => {
      const colon = v.lastIndexOf(':');
      if (colon < 0) throw new UsageError('Failed to parse --shape. There must be a colon after input name.');
      const name = v.slice(0, colon);
      const dims = v
        .slice(colon + 1)
        .split(',')
        .map((d) => parseIntStrict('--shape', d));
      if (dims.some((d) => d <= 0)) {
        throw new UsageError('Failed to parse --shape. The dimensions of input tensor must be > 0.');
      }
      s.opts.shapes.set(name, dims);
    },
  },
  {
    long: 'concurrency-range',
    takesValue: true,
    apply: (s, v) => {
      setLoadMode(s, 'concurrency');
      const parts = v.split(':');
      if (parts.length > 3) {
        throw new UsageError('Failed to parse --concurrency-range. The value does not match <start:end:step>.');
      }
      const r = s.opts.concurrencyRange;
      parts.forEach((p, i) => {
        const n = parseIntStrict('--concurrency-range', p);
        if (n < 0) throw new UsageError(`Failed to parse --concurrency-range. Invalid value provided: ${v}`);
        if (i === 0) r.start = n;
        else if (i === 1) r.end = n;
        else r.step = n;
      });
    },
  },
  {
    long: 'request-rate-range',
    takesValue: true,
    apply: (s, v) => {
      setLoadMode(s, 'request_rate');
      const parts = v.split(':');
      if (parts.length > 3) {
        throw new UsageError('Failed to parse --request-rate-range. The value does not match <start:end:step>.');
      }
      const r = s.opts.requestRateRange;
      parts.forEach((p, i) => {
        const n = parseFloatStrict('--request-rate-range', p);
        if (i === 0) r.start = n;
        else if (i === 1) r.end = n;
        else r.step = n;
      });
    },
  },
  {
    long: 'request-distribution',
    takesValue: true,
    apply: (s, v) => {
      if (v !== 'constant' && v !== 'poisson') {
        throw new UsageError(
          `Failed to parse --request-distribution. Unsupported type ` +
          `provided: '${v}'. Choices are 'poisson' or 'constant'.`,
        );
      }
      s.opts.requestDistribution = v;
    },
  },
  { long: 'binary-search', takesValue: false, apply: (s) => (s.opts.binarySearch = true) },
  {
    long: 'measurement-mode',
    takesValue: true,
    apply: (s, v) => {
      if (v !== 'time_windows' && v !== 'count_windows') {
        throw new UsageError(
          `Failed to parse --measurement-mode. Unsupported type provided: '` +
          `${v}'. The available options are 'time_windows' or 'count_windows'.`,
        );
      }
      s.opts.measurementMode = v;
    },
  },
  {
    long: 'measurement-interval',
    short: 'p',
    takesValue: true,
    apply: (s, v) => {
      const n = parseIntStrict('--measurement-interval', v);
      if (n <= 0) throw new UsageError('Failed to parse --measurement-interval (-p). The value must be > 0 msec.');
      s.opts.measurementIntervalMs = n;
    },
  },
  {
    long: 'measurement-request-count',
    takesValue: true,
    apply: (s, v) => {
      const n = parseIntStrict('--measurement-request-count', v);
      if (n <= 0) throw new UsageError('Failed to parse --measurement-request-count. The value must be > 0.');
      s.opts.measurementRequestCount = n;
    },
  },
  {
    long: 'stability-percentage',
    short: 's',
    takesValue: true,
    apply: (s, v) => {
      const n = parseFloatStrict('--stability-percentage', v);
      if (n < 0) throw new UsageError('Failed to parse --stability-percentage (-s). The value must be >= 0.0.');
      s.opts.stabilityThreshold = n / 100;
    },
  },
  {
    long: 'max-trials',
    short: 'r',
    takesValue: true,
    apply: (s, v) => {
      const n = parseIntStrict('--max-trials', v);
      if (n <= 0) throw new UsageError('Failed to parse --max-trials (-r). The value must be > 0.');
      s.opts.maxTrials = n;
    },
  },
  { long: 'percentile', takesValue: true, apply: (s, v) => (s.opts.percentile = parseIntStrict('--percentile', v)) },
  {
    long: 'latency-threshold',
    short: 'l',
    takesValue: true,
    apply: (s, v) => {
      const n = parseIntStrict('--latency-threshold', v);
      if (n < 0) throw new UsageError('Failed to parse --latency-threshold (-l). The value must be >= 0 msecs.');
      s.opts.latencyThresholdMs = n;
    },
  },
  {
    long: 'throughput-threshold',
    takesValue: true,
    apply: (s, v) => {
      const n = parseFloatStrict('--throughput-threshold', v);
      if (n < 0) throw new UsageError('Failed to parse --throughput-threshold. The value must be >= 0 infer/sec.');
      s.opts.throughputThreshold = n;
    },
  },
  {
    long: 'input-data',
    takesValue: true,
    apply: (s, v) => {
      if (v === 'zero') {
        s.zeroInput = true;
        if (s.opts.inputData.kind !== 'files') s.opts.inputData = { kind: 'zero' };
      } else if (v === 'random') {
        // the default
      } else if (existsSync(v) && statSync(v).isFile()) {
        const paths = s.opts.inputData.kind === 'files' ? s.opts.inputData.paths : [];
        paths.push(v);
        s.opts.inputData = { kind: 'files', paths };
      } else if (existsSync(v) && statSync(v).isDirectory()) {
        throw new UsageError(
          `--input-data '${v}': directories of raw tensor files are not supported by nereid perf; use a JSON file.`,
        );
      } else {
        throw new UsageError(
          `Failed to parse --input-data. Unsupported type provided: '${v}'. The ` +
          `available options are 'zero', 'random', path to a directory, or a json file.`,
        );
      }
    },
  },
  {
    long: 'string-length',
    takesValue: true,
    apply: (s, v) => {
      const n = parseIntStrict('--string-length', v);
      if (n <= 0) throw new UsageError('Failed to parse --string-length. The value must be > 0');
      s.opts.stringLength = n;
    },
  },
  { long: 'string-data', takesValue: true, apply: (s, v) => (s.opts.stringData = v) },
  { long: 'async', short: 'a', takesValue: false, apply: (s) => (s.opts.async = true) },
  { long: 'sync', takesValue: false, apply: (s) => (s.opts.forcedSync = true) },
  { long: 'streaming', takesValue: false, apply: (s) => (s.opts.streaming = true) },
  {
    long: 'max-threads',
    takesValue: true,
    apply: (s, v) => {
      const n = parseIntStrict('--max-threads', v);
      if (n <= 0) throw new UsageError('Failed to parse --max-threads. The value must be > 0.');
      s.opts.maxThreads = n;
      s.opts.maxThreadsSpecified = true;
    },
  },
  {
    long: 'input-tensor-format',
    takesValue: true,
    apply: (s, v) => (s.opts.inputTensorFormat = parseTensorFormat('--input-tensor-format', v)),
  },
  {
    long: 'output-tensor-format',
    takesValue: true,
    apply: (s, v) => (s.opts.outputTensorFormat = parseTensorFormat('--output-tensor-format', v)),
  },
  {
    long: 'header',
    short: 'H',
    takesValue: true,
    apply: (s, v) => {
      const colon = v.indexOf(':');
      if (colon <= 0) throw new UsageError(`Failed to parse -H. Expected 'Header:Value', got '${v}'.`);
      s.opts.headers.push([v.slice(0, colon).trim(), v.slice(colon + 1).trim()]);
    },
  },
  { long: 'filename', short: 'f', takesValue: true, apply: (s, v) => (s.opts.csvFile = v) },
  { long: 'verbose-csv', takesValue: false, apply: (s) => (s.opts.verboseCsv = true) },
  { long: 'collect-metrics', takesValue: false, apply: (s) => (s.opts.collectMetrics = true) },
  { long: 'metrics-url', takesValue: true, apply: (s, v) => (s.opts.metricsUrl = v) },
  {
    long: 'metrics-interval',
    takesValue: true,
    apply: (s, v) => {
      const n = parseIntStrict('--metrics-interval', v);
      if (n <= 0) throw new UsageError('Failed to parse --metrics-interval. The value must be > 0 msecs.');
      s.opts.metricsIntervalMs = n;
    },
  },
  {
    long: 'warmup-request-count',
    takesValue: true,
    apply: (s, v) => {
      const n = parseIntStrict('--warmup-request-count', v);
      if (n < 0) throw new UsageError('Failed to parse --warmup-request-count. The value must be >= 0.');
      s.opts.warmupRequestCount = n;
    },
  },
  {
    long: 'request-count',
    takesValue: true,
    apply: (s, v) => {
      const n = parseIntStrict('--request-count', v);
      if (n <= 0) throw new UsageError('Failed to parse --request-count. The value must be > 0.');
      s.opts.requestCount = n;
    },
  },
  { long: 'verbose', short: 'v', takesValue: false, apply: (s) => (s.opts.verbose = true) },
  { long: 'help', short: 'h', takesValue: false, apply: (s) => (s.opts.help = true) },
  { long: 'service-kind', takesValue: true, apply: onlyDefault('--service-kind', ['triton']) },
  { long: 'shared-memory', takesValue: true, apply: onlyDefault('--shared-memory', ['none']) },
  {
    long: 'grpc-compression-algorithm',
    takesValue: true,
    apply: onlyDefault('--grpc-compression-algorithm', ['none']),
  },
  { long: 'output-shared-memory-size', takesValue: true, apply: () => undefined },
  { long: 'request-intervals', takesValue: true, apply: unsupported('--request-intervals') },
  { long: 'sequence-length', takesValue: true, apply: unsupported('--sequence-length') },
  { long: 'sequence-id-range', takesValue: true, apply: unsupported('--sequence-id-range') },
  { long: 'num-of-sequences', takesValue: true, apply: unsupported('--num-of-sequences') },
  { long: 'request-parameter', takesValue: true, apply: unsupported('--request-parameter') },
  { long: 'profile-export-file', takesValue: true, apply: unsupported('--profile-export-file') },
  { long: 'periodic-concurrency-range', takesValue: true, apply: unsupported('--periodic-concurrency-range') },
];

const BY_LONG = new Map(SPECS.map((s) => [s.long, s]));

/** Parses argv (without the program and subcommand names) into validated options. Throws UsageError. */
export function parseArgs(argv: readonly string[]): PerfOptions {
  const state: ParseState = { opts: defaultOptions(), urlSpecified: false, loadModeSet: 'none', zeroInput: false };
  // getopt_long's texts, as perf_analyzer prints them.
  for (const token of tokenize(argv, BY_LONG)) {
    if (token.kind === 'positional') throw new UsageError(`Error: Unexpected argument '${token.arg}'`);
    if (token.kind === 'long') {
      const spec = BY_LONG.get(token.name);
      if (!spec) throw new UsageError(`Error: Invalid long option '${token.arg}'`);
      if (spec.takesValue && token.value === undefined)
        throw new UsageError(`Error: Missing value for option '${token.arg}'`);
      if (!spec.takesValue && token.inline) throw new UsageError(`Error: Option '--${token.name}' takes no value`);
      spec.apply(state, token.value ?? '');
    } else {
      const spec = token.name === undefined ? undefined : BY_LONG.get(token.name);
      if (!spec) throw new UsageError(`Error: Invalid short option '-${token.letter}'`);
      if (spec.takesValue && token.value === undefined)
        throw new UsageError(`Error: Missing value for option '-${token.letter}'`);
      spec.apply(state, token.value ?? '');
    }
  }
  const o = state.opts;
  if (o.help) return o;
  if (state.loadModeSet === 'request_rate') o.loadMode = 'request_rate';
  if (!state.urlSpecified && o.protocol === 'grpc') o.url = DEFAULT_GRPC_URL;
  if (o.loadMode === 'concurrency' && !o.maxThreadsSpecified) {
    o.maxThreads = Math.max(DEFAULT_MAX_THREADS, o.concurrencyRange.end);
  }
  if (o.requestCount > 0) {
    o.measurementMode = 'count_windows';
    o.measurementRequestCount = o.requestCount;
  }
  verify(o, state);
  return o;
}

function verify(o: PerfOptions, s: ParseState): void {
  if (!o.modelName) throw new UsageError('Failed to parse -m (model name). The value must be specified.');
  if (o.concurrencyRange.start <= 0) throw new UsageError('The start of the search range must be > 0');
  if (o.concurrencyRange.step <= 0 && o.loadMode === 'concurrency') {
    throw new UsageError('Failed to parse --concurrency-range. The step must be > 0.');
  }
  if (o.requestRateRange.start <= 0) {
    throw new UsageError('Failed to parse --request-rate-range. The start of the search range must be > 0.');
  }
  if (o.requestRateRange.step <= 0 && o.loadMode === 'request_rate') {
    throw new UsageError('Failed to parse --request-rate-range. The step must be > 0.');
  }
  if (o.streaming && o.protocol !== 'grpc') {
    throw new UsageError('Streaming is only allowed with gRPC protocol and Triton C API.');
  }
  if (o.percentile !== -1 && (o.percentile > 99 || o.percentile < 1)) {
    throw new UsageError(
      'Failed to parse --percentile. The value must be -1 for not reporting or in range (0, 100).',
    );
  }
  if (s.zeroInput && o.inputData.kind === 'files') {
    throw new UsageError('--input-data zero cannot be combined with an input data file.');
  }
  if (o.async && o.forcedSync) throw new UsageError('Cannot specify --async and --sync simultaneously.');
  if (o.streaming && o.forcedSync) throw new UsageError('can not use streaming with synchronous API');
  if (o.protocol === 'grpc' && (o.inputTensorFormat === 'json' || o.outputTensorFormat === 'json')) {
    throw new UsageError('--input-tensor-format/--output-tensor-format json are only valid with -i http.');
  }
  const rangeEnd = o.loadMode === 'concurrency' ? o.concurrencyRange.end : o.requestRateRange.end;
  if (rangeEnd === 0 && o.latencyThresholdMs === 0) {
    throw new UsageError('The end of the search range and the latency limit can not be both 0 (or 0.0) simultaneously');
  }
  if (o.binarySearch) {
    const r = o.loadMode === 'concurrency' ? o.concurrencyRange : o.requestRateRange;
    if (r.end === 0) throw new UsageError('The end of the range can not be 0 (or 0.0) for binary search mode.');
    if (o.latencyThresholdMs === 0) throw new UsageError('The --latency-threshold cannot be 0 for binary search mode.');
    if (r.end < r.start) {
      throw new UsageError('The end of the range can not be less than start of the range for binary search mode.');
    }
  }
  const multiLevel =
    o.loadMode === 'concurrency'
      ? o.concurrencyRange.start < o.concurrencyRange.end
      : o.requestRateRange.start < o.requestRateRange.end;
  if (o.warmupRequestCount > 0 && multiLevel) {
    throw new UsageError(
      o.loadMode === 'concurrency'
        ? '--warmup-request-count not supported with multiple concurrency values in one run'
        : '--warmup-request-count not supported with multiple request rate values in one run',
    );
  }
  if (o.requestCount > 0) {
    if (o.loadMode === 'concurrency' && o.requestCount < o.concurrencyRange.start) {
      throw new UsageError('--request-count can not be less than concurrency');
    }
    if (multiLevel) {
      throw new UsageError(
        o.loadMode === 'concurrency'
          ? '--request-count not supported with multiple concurrency values in one run'
          : '--request-count not supported with multiple request rate values in one run',
      );
    }
  }
}

export const USAGE = `Usage: nereid perf -m <model> [options]

Measures a Triton-protocol server (Nereid or Triton) the way perf_analyzer does.

  -m <model>                        model name (required)
  -x <version>                      model version (default: latest)
  -u <host:port>                    server (default localhost:8000 for http, localhost:8001 for grpc)
  -i http|grpc                      protocol (default http)
  -b <n>                            batch size (default 1)
  --shape <name>:<d1,d2,...>        shape for inputs with variable (-1) dimensions; repeatable
  --concurrency-range <s:e:step>    closed-loop load levels (default 1:1:1; e=0: until the latency limit)
  --request-rate-range <s:e:step>   open-loop load levels in requests/second
  --request-distribution constant|poisson
  --binary-search                   search the range for the latency limit instead of stepping
  --measurement-mode time_windows|count_windows
  -p, --measurement-interval <ms>   time window length (default 5000)
  --measurement-request-count <n>   requests per count window (default 50)
  -s, --stability-percentage <pct>  windows agree within this percentage (default 10)
  -r, --max-trials <n>              windows per level before giving up (default 10)
  --percentile <p>                  stabilise and report on this latency percentile
  -l, --latency-threshold <ms>      latency limit; a level over it fails the run (exit 1)
  --throughput-threshold <infer/s>  throughput floor; a level under it fails the run (exit 1)
  --input-data zero|random|<file.json>
  --string-length <n>               length of generated BYTES elements (default 128)
  --string-data <text>              value of every generated BYTES element
  --sync | -a, --async              call style (default sync)
  --streaming                       gRPC bidirectional streaming
  --max-threads <n>                 connections for request-rate mode (default 16)
  --input-tensor-format binary|json, --output-tensor-format binary|json   (http; default binary)
  -H <Header:Value>                 extra HTTP header; repeatable
  -f <file.csv>, --verbose-csv      write perf_analyzer's CSV report
  --collect-metrics, --metrics-url <url>, --metrics-interval <ms>
  --warmup-request-count <n>, --request-count <n>
  -v                                verbose: print every measurement window

Exit status: 0 success; 1 a latency or throughput threshold was missed; 2 no stable
measurement; 3 bad command line; 99 any other error (server unreachable, request errors).
`;
