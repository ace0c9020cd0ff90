import { NereidError } from '../errors.js';

/** A 1-based line and column in a config.pbtxt. */
export interface SourcePosition {
  readonly line: number;
  readonly column: number;
}

export interface ConfigErrorLocation {
  /** Display path, relative to the repository: `<model>/config.pbtxt`. */
  file?: string;
  line?: number;
  column?: number;
  /** Field path at fault, e.g. `input[0].dims`. */
  field?: string;
  /** Model name, used to say where when no file is known. */
  model?: string;
}

/**
 * A model configuration that cannot be parsed or is not valid. The message
 * leads with `file:line:column:` when the place is known, like a compiler.
 */
export class ConfigError extends NereidError {
  readonly file: string | undefined;
  readonly line: number | undefined;
  readonly column: number | undefined;
  readonly field: string | undefined;
  /** The message without the location prefix. */
  readonly detail: string;

  constructor(detail: string, where: ConfigErrorLocation = {}) {
    super('NRD_CONFIG', 'INVALID_ARG', locationPrefix(where) + detail);
    this.name = 'ConfigError';
    this.file = where.file;
    this.line = where.line;
    this.column = where.column;
    this.field = where.field;
    this.detail = detail;
  }
}

function locationPrefix(where: ConfigErrorLocation): string {
  if (where.file !== undefined) {
    if (where.line !== undefined) return `${where.file}:${where.line}:${where.column ?? 1}: `;
    return `${where.file}: `;
  }
  if (where.model) return `model '${where.model}': `;
  return '';
}
