/**
 * tritonserver-style flags on the shared tokenizer (args.ts): `--name=value`
 * or `--name value`, repeated flags, booleans as true/false, on/off, 1/0
 * (`--flag` alone is true; `--flag false` takes the next word when it is one
 * of those).
 */
import { Errors } from '../errors.js';
import { type OptionSpec, tokenize } from './args.js';

export interface FlagSpec {
  /** 'bool' flags may be given bare (`--flag` = true). */
  readonly type: 'string' | 'int' | 'bool';
  readonly repeat?: boolean;
}

export type FlagValues = Map<string, string[]>;

export function parseFlags(argv: readonly string[], specs: Readonly<Record<string, FlagSpec>>): FlagValues {
  const known = new Map<string, FlagSpec>(Object.entries(specs));
  const options = new Map<string, OptionSpec>();
  for (const [name, spec] of known) options.set(name, { takesValue: spec.type !== 'bool' });
  const tokens = tokenize(argv, options);
  const out: FlagValues = new Map();
  for (let t = 0; t < tokens.length; t++) {
    const token = tokens[t]!;
    if (token.kind !== 'long') throw Errors.config(`unexpected argument '${token.arg}' (flags look like --name=value)`);
    const name = token.name;
    const spec = known.get(name);
    if (!spec) throw Errors.config(`unrecognized flag '--${name}'; run 'nereid serve --help' for the list`);
    let value = token.value;
    if (value === undefined && spec.type === 'bool') {
      const next = tokens[t + 1];
      if (next?.kind === 'positional' && parseBoolOrUndefined(next.value) !== undefined) {
        value = next.value;
        t++;
      } else {
        value = 'true';
      }
    }
    if (value === undefined) throw Errors.config(`flag '--${name}' needs a value`);
    if (spec.type === 'bool' && parseBoolOrUndefined(value) === undefined) {
      throw Errors.config(`flag '--${name}' takes true/false, on/off or 1/0, got '${value}'`);
    }
    if (spec.type === 'int' && !/^-?\d+$/.test(value)) {
      throw Errors.config(`flag '--${name}' takes an integer, got '${value}'`);
    }
    const list = out.get(name) ?? [];
    if (!spec.repeat) list.length = 0;
    list.push(value);
    out.set(name, list);
  }
  return out;
}

function parseBoolOrUndefined(v: string): boolean | undefined {
  const s = v.toLowerCase();
  if (s === 'true' || s === 'on' || s === '1') return true;
  if (s === 'false' || s === 'off' || s === '0') return false;
  return undefined;
}

export class FlagReader {
  constructor(private readonly values: FlagValues) {}
  has(name: string): boolean {
    return this.values.has(name);
  }
  string(name: string, fallback: string): string;
  string(name: string): string | undefined;
  string(name: string, fallback?: string): string | undefined {
    const v = this.values.get(name);
    return v ? v[v.length - 1] : fallback;
  }
  all(name: string): string[] {
    return this.values.get(name) ?? [];
  }
  int(name: string, fallback: number): number {
    const v = this.string(name);
    return v === undefined ? fallback : Number.parseInt(v, 10);
  }
  bool(name: string, fallback: boolean): boolean {
    const v = this.string(name);
    return v === undefined ? fallback : parseBoolOrUndefined(v)!;
  }
}
