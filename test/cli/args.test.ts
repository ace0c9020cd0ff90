import { test } from 'node:test';
import assert from 'node:assert/strict';
import { type OptionSpec, tokenize } from '../../src/cli/args.js';
import { buildServeConfig } from '../../src/cli/serve.js';
import { parseFlags } from '../../src/cli/flags.js';
import { UsageError, parseArgs } from '../../src/cli/perf/options.js';

const SPECS = new Map<string, OptionSpec>([
  ['model-name', { takesValue: true, short: 'm' }],
  ['verbose', { takesValue: false, short: 'v' }],
  ['async', { takesValue: false, short: 'a' }],
  ['url', { takesValue: true }],
]);

test('the tokenizer splits long, short and bundled options, values and positionals', () => {
  assert.deepEqual(tokenize(['--url=x:1', '--url', 'y', '--url', '--verbose', '--verbose=no', 'z'], SPECS), [
    { kind: 'long', name: 'url', value: 'x:1', inline: true, arg: '--url=x:1' },
    { kind: 'long', name: 'url', value: 'y', inline: false, arg: '--url' },
    // The next argument is the value whatever it looks like, as getopt takes it.
    { kind: 'long', name: 'url', value: '--verbose', inline: false, arg: '--url' },
    { kind: 'long', name: 'verbose', value: 'no', inline: true, arg: '--verbose=no' },
    { kind: 'positional', value: 'z', arg: 'z' },
  ]);
  assert.deepEqual(tokenize(['-vmname', '-va', '-m', 'n', '-Q'], SPECS), [
    { kind: 'short', letter: 'v', name: 'verbose', value: undefined, arg: '-vmname' },
    { kind: 'short', letter: 'm', name: 'model-name', value: 'name', arg: '-vmname' },
    { kind: 'short', letter: 'v', name: 'verbose', value: undefined, arg: '-va' },
    { kind: 'short', letter: 'a', name: 'async', value: undefined, arg: '-va' },
    { kind: 'short', letter: 'm', name: 'model-name', value: 'n', arg: '-m' },
    { kind: 'short', letter: 'Q', name: undefined, value: undefined, arg: '-Q' },
  ]);
  assert.deepEqual(tokenize(['--url'], SPECS), [
    { kind: 'long', name: 'url', value: undefined, inline: false, arg: '--url' },
  ]);
  assert.deepEqual(tokenize(['--', '--url=x'], SPECS), [
    { kind: 'long', name: '', value: undefined, inline: false, arg: '--' },
  ]);
});

test('serve: --flag=value, --flag value, repeated flags and booleans given every way', () => {
  const c = buildServeConfig([
    '--model-repository=a',
    '--model-repository',
    'b',
    '--strict-readiness',
    'false',
    '--exit-on-error=false',
    '--allow-grpc',
    '--http-port',
    '9000',
    '--log-verbose=1',
  ]);
  assert.deepEqual(c.server.modelRepositories, ['a', 'b']);
  assert.equal(c.server.strictReadiness, false);
  assert.equal(c.server.exitOnError, false);
  assert.equal(c.grpc.enabled, true);
  assert.equal(c.http.port, 9000);
  // A bare boolean does not take a following word that is no boolean.
  assert.throws(
    () => buildServeConfig(['--strict-readiness', 'models']),
    /unexpected argument 'models' \(flags look like --name=value\)/,
  );
});

test('serve: what is not a known flag is refused with its text', () => {
  const specs = { 'model-repository': { type: 'string', repeat: true } } as const;
  assert.throws(() => parseFlags(['-x'], specs), /unexpected argument '-x' \(flags look like --name=value\)/);
  assert.throws(() => parseFlags(['-abc'], specs), /unexpected argument '-abc'/);
  assert.throws(() => parseFlags(['models'], specs), /unexpected argument 'models'/);
  assert.throws(() => parseFlags(['--'], specs), /unrecognized flag '--'; run 'nereid serve --help' for the list/);
  assert.throws(() => parseFlags(['--model-repository'], specs), /flag '--model-repository' needs a value/);
  // Names of Object.prototype's members are no flags either.
  for (const name of ['constructor', 'toString', '__proto__', 'hasOwnProperty']) {
    assert.throws(() => parseFlags([`--${name}=1`], specs), new RegExp(`unrecognized flag '--${name}'`));
    assert.throws(() => buildServeConfig([`--${name}=1`]), new RegExp(`unrecognized flag '--${name}'`));
  }
});

test('perf: getopt forms and texts on the same tokenizer', () => {
  const o = parseArgs(['-vmsimple', '--concurrency-range=1:4', '-u', 'h:1', '--async']);
  assert.equal(o.modelName, 'simple');
  assert.equal(o.verbose, true);
  assert.equal(o.url, 'h:1');
  assert.deepEqual(o.concurrencyRange, { start: 1, end: 4, step: 1 });
  const usage = (argv: string[], text: string) =>
    assert.throws(() => parseArgs(argv), (err: unknown) => err instanceof UsageError && err.message === text);
  usage(['-m', 'a', '--nope=3'], "Error: Invalid long option '--nope=3'");
  usage(['-m', 'a', '--'], "Error: Invalid long option '--'");
  usage(['-m', 'a', '-vZ'], "Error: Invalid short option '-Z'");
  usage(['-m', 'a', '--url'], "Error: Missing value for option '--url'");
  usage(['-m'], "Error: Missing value for option '-m'");
  usage(['-m', 'a', '--verbose=1'], "Error: Option '--verbose' takes no value");
  usage(['-m', 'a', 'extra'], "Error: Unexpected argument 'extra'");
});
