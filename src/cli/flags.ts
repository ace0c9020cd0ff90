/** Parsing of tritonserver-style flags: `--name=value` or `--name value`, booleans as true/false, on/off, 1/0. */
import { Errors } from '../errors.js';

export interface FlagSpec {
  /** 'bool' flags may be given bare (`--flag` = true). */
  readonly type: 'string' | 'int' | 'bool';
  readonly repeat?: boolean;
}

export type FlagValues = Map<string, string[]>;

export function parseFlags(argv: readonly string[], specs: Readonly<Record<string, FlagSpec>>): FlagValues {
  const out: FlagValues = new Map();
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i]!;
    if (!arg.startsWith('--')) throw Errors.config(`unexpected argument '${arg}' (flags look like --name=value)`);
    const eq = arg.indexOf('=');
    const name = eq === -1 ? arg.slice(2) : arg.slice(2, eq);
    const spec = specs[name];
    if (!spec) throw Errors.config(`unrecognized flag '--${name}'; run 'nereid serve --help' for the list`);
    let value: string;
    if (eq !== -1) value = arg.slice(eq + 1);
    else if (spec.type === 'bool' && (i + 1 >= argv.length || argv[i + 1]!.startsWith('--') || parseBoolOrUndefined(argv[i + 1]!) === undefined)) value = 'true';
    else {
      if (i + 1 >= argv.length) throw Errors.config(`flag '--${name}' needs a value`);
      value = argv[++i]!;
    }
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
