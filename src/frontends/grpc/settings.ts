/**
 * What the TraceSetting and LogSettings RPCs need from the rest of the
 * server. The stores are shared with the HTTP frontend (one set of
 * settings per server), so they are passed in rather than owned here.
 */

/** Trace settings as Triton reports them: every value a list of strings. */
export type TraceSettings = Record<string, string[]>;

export interface TraceSettingsStore {
  /** Current settings, global (model omitted) or as seen by one model. */
  get(model?: string): TraceSettings;
  /**
   * Applies changes (an empty list clears a model's override back to the
   * global value) and returns the resulting settings. Throws NereidError
   * INVALID_ARG for a value it cannot parse.
   */
  update(model: string | undefined, changes: TraceSettings): TraceSettings;
}

/** Log settings, keyed and typed as Triton's LogSettings RPC reports them. */
export interface LogSettings {
  log_file: string;
  log_info: boolean;
  log_warning: boolean;
  log_error: boolean;
  log_verbose_level: number;
  /** "default" or "ISO8601". */
  log_format: string;
}

export type LogSettingsChange = Partial<Omit<LogSettings, 'log_file'>>;

export interface LogSettingsStore {
  get(): LogSettings;
  /** Applies validated changes and returns the resulting settings. */
  update(changes: LogSettingsChange): LogSettings;
}
