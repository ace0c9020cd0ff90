/**
 * config.pbtxt parsing. protobuf-es reads the text; a light walker of our
 * own goes over the same text with the schema to record where every field
 * was written, and, when protobuf-es rejects the text, to say where and why
 * in plain words.
 */
import { fromText } from '@bufbuild/protobuf/txtpb';
import { ModelConfigSchema, type ModelConfig } from '../gen/model_config_pb.js';
import { ConfigError } from './errors.js';
import type { ConfigPositions } from './positions.js';
import { ScanError } from './text-scanner.js';
import { LocatedError, TextWalker } from './text-walker.js';

export interface ParsedModelConfig {
  config: ModelConfig;
  positions: ConfigPositions;
}

/** Parses config.pbtxt text; `file` is the display path used in errors (`<model>/config.pbtxt`). */
export function parseModelConfig(text: string, file: string): ModelConfig {
  return parseModelConfigWithPositions(text, file).config;
}

export function parseModelConfigWithPositions(text: string, file: string): ParsedModelConfig {
  let config: ModelConfig;
  try {
    config = fromText(ModelConfigSchema, text);
  } catch (err) {
    const located = findTextError(text);
    if (located !== undefined) {
      throw new ConfigError(located.message, {
        file,
        line: located.line,
        column: located.column,
        field: located.field,
      });
    }
    throw new ConfigError(plainProtobufMessage(err), { file });
  }
  return { config, positions: collectPositions(text) };
}

/** Field positions of a text that parses; best effort for one that does not. */
export function collectPositions(text: string): ConfigPositions {
  const walker = new TextWalker(text);
  try {
    walker.walk(ModelConfigSchema);
  } catch {
    // Keep what was recorded before the problem.
  }
  return walker.positions;
}

/** The first problem in a text, with its place, or undefined when the walker finds none. */
export function findTextError(
  text: string,
): { message: string; line: number; column: number; field?: string } | undefined {
  try {
    new TextWalker(text).walk(ModelConfigSchema);
    return undefined;
  } catch (err) {
    if (err instanceof LocatedError) return err;
    if (err instanceof ScanError) return { message: err.message, line: err.line, column: err.column };
    return undefined;
  }
}

function plainProtobufMessage(err: unknown): string {
  const raw = err instanceof Error ? err.message : String(err);
  return raw.replace(/^cannot decode (field )?inference\./, '').replace(/ from text format:/, ':');
}
