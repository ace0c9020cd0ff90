/** Errors of the load tool and the exit codes perf_analyzer uses for them. */

export const ExitCode = {
  success: 0,
  /** Ours: a level missed --latency-threshold or --throughput-threshold. */
  thresholdMissed: 1,
  /** perf_analyzer's STABILITY_ERROR. */
  stability: 2,
  /** perf_analyzer's OPTION_ERROR. */
  option: 3,
  /** perf_analyzer's GENERIC_ERROR. */
  generic: 99,
} as const;

/** A failure with the step that failed ("failed to get model metadata") and why. */
export class PerfError extends Error {
  readonly context: string;
  readonly detail: string;
  readonly exitCode: number;
  constructor(context: string, detail: string, exitCode: number = ExitCode.generic) {
    super(context ? `${context}: ${detail}` : detail);
    this.name = 'PerfError';
    this.context = context;
    this.detail = detail;
    this.exitCode = exitCode;
  }
}
