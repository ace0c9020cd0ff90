/**
 * The one command-line tokenizer of the `nereid` commands, on `node:util`
 * parseArgs. It splits the arguments into options and positionals and leaves
 * every decision to the command: which names exist, what a value must look
 * like and the error texts (serve speaks tritonserver's, perf
 * perf_analyzer's).
 *
 * What it accepts: `--name=value` and `--name value` for options that take a
 * value (the next argument is the value whatever it looks like, as getopt
 * does), `--name` alone for those that do not, repeated options (one token
 * each), short options `-m value`, `-mvalue` and bundles `-va` for commands
 * that declare short letters.
 */
import { parseArgs } from 'node:util';

export interface OptionSpec {
  /** The option's value is the rest of `--name=value` or the next argument. */
  readonly takesValue: boolean;
  /** One letter: `-x` is the same option. */
  readonly short?: string;
}

export type ArgToken =
  | {
      readonly kind: 'long';
      /** Without the dashes; '' for a lone `--`, which no command knows. */
      readonly name: string;
      /** undefined: none given (no `=` and, for an option that takes one, no argument left). */
      readonly value: string | undefined;
      /** The value came after `=` in the same argument. */
      readonly inline: boolean;
      /** The whole argument as written, `=value` included. */
      readonly arg: string;
    }
  | {
      readonly kind: 'short';
      readonly letter: string;
      /** The long name of a declared letter, undefined for an unknown one. */
      readonly name: string | undefined;
      readonly value: string | undefined;
      readonly arg: string;
    }
  | { readonly kind: 'positional'; readonly value: string; readonly arg: string };

export function tokenize(argv: readonly string[], specs: ReadonlyMap<string, OptionSpec>): ArgToken[] {
  const options: Record<string, { type: 'string' | 'boolean'; short?: string }> = Object.create(null);
  for (const [name, spec] of specs) {
    options[name] = spec.short === undefined
      ? { type: spec.takesValue ? 'string' : 'boolean' }
      : { type: spec.takesValue ? 'string' : 'boolean', short: spec.short };
  }
  const { tokens } = parseArgs({ args: [...argv], options, strict: false, allowPositionals: true, tokens: true });
  const out: ArgToken[] = [];
  for (const t of tokens) {
    const arg = argv[t.index]!;
    if (t.kind === 'positional') {
      out.push({ kind: 'positional', value: t.value, arg });
    } else if (t.kind === 'option-terminator') {
      // Nothing here ends its options with `--`: report it as an unknown option and stop.
      out.push({ kind: 'long', name: '', value: undefined, inline: false, arg });
      break;
    } else if (t.rawName.startsWith('--')) {
      out.push({ kind: 'long', name: t.name, value: t.value, inline: t.inlineValue === true, arg });
    } else {
      const letter = t.rawName.slice(1);
      const known = specs.has(t.name) && specs.get(t.name)!.short === letter;
      out.push({ kind: 'short', letter, name: known ? t.name : undefined, value: t.value, arg });
    }
  }
  return out;
}
