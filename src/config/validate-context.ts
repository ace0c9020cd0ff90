import type { DescEnum } from '@bufbuild/protobuf';
import type { ModelConfig } from '../gen/model_config_pb.js';
import { ConfigError } from './errors.js';
import { lookupPosition, type ConfigPositions } from './positions.js';

/** What a validation rule needs to report a problem at the right place. */
export class ConfigChecker {
  constructor(
    readonly config: ModelConfig,
    readonly file: string | undefined,
    readonly positions: ConfigPositions | undefined,
  ) {}

  /** Throws a ConfigError for the field at `path` (proto names, e.g. `input[0].dims[1]`). */
  fail(path: string, message: string): never {
    const pos = lookupPosition(this.positions, path);
    throw new ConfigError(message, {
      file: this.file,
      line: pos?.line,
      column: pos?.column,
      field: path === '' ? undefined : path,
      model: this.config.name === '' ? undefined : this.config.name,
    });
  }
}

/** The proto name of an enum value, or its number when it has none. */
export function enumName(desc: DescEnum, value: number): string {
  return desc.values.find((v) => v.number === value)?.name ?? String(value);
}

export function isKnownEnum(desc: DescEnum, value: number): boolean {
  return desc.values.some((v) => v.number === value);
}

export function formatDims(dims: readonly bigint[]): string {
  return `[${dims.join(', ')}]`;
}
