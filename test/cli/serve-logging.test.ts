/** `nereid serve` logging and flag handling, through a real process. */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { buildServeConfig, IGNORED_FLAGS, SERVE_FLAGS } from '../../src/cli/serve.js';
import { TempRepository } from '../helpers/repository.js';
import { LOOPBACK_PORTS, NEREID_MAIN } from '../helpers/serve-process.js';

async function waitFor<T>(what: string, probe: () => T | undefined, exited: () => boolean): Promise<T> {
  for (let i = 0; i < 600; i++) {
    const v = probe();
    if (v !== undefined) return v;
    if (exited()) break;
    await new Promise((r) => setTimeout(r, 50));
  }
  throw new Error(`gave up waiting for ${what}`);
}

test('--log-file gets ISO8601 lines, unused flags are named once, ' +
  'and /v2/logging starts from the command line', async (t) => {
  const repo = new TempRepository().addSub('simple');
  const dir = mkdtempSync(path.join(tmpdir(), 'nereid-serve-log-'));
  t.after(() => {
    repo.cleanup();
    rmSync(dir, { recursive: true, force: true });
  });
  const file = path.join(dir, 'server.log');
  const args = [
    'serve',
    `--model-repository=${repo.dir}`,
    ...LOOPBACK_PORTS,
    `--log-file=${file}`,
    '--log-format=ISO8601',
    '--log-error=false',
    '--log-verbose=1',
    '--http-thread-count=8',
    '--grpc-infer-thread-count=4',
  ];
  const env = { ...process.env };
  delete env['NEREID_LOG_LEVEL'];
  const child = spawn(process.execPath, [NEREID_MAIN, ...args], { stdio: ['ignore', 'ignore', 'pipe'], env });
  let stderr = '';
  child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
  let exited = false;
  const exit = new Promise<void>((r) => child.on('exit', () => ((exited = true), r())));
  t.after(async () => {
    child.kill('SIGTERM');
    await exit;
  });
  const read = () => {
    try {
      return readFileSync(file, 'utf8');
    } catch {
      return '';
    }
  };
  const serving = await waitFor(
    'the serving line',
    () =>
      read()
        .split('\n')
        .find((l) => l.includes('nereid is serving')),
    () => exited,
  );
  assert.match(serving, /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ I \d+ nereid\] nereid is serving /);
  const http = Number(/ http=(\d+)/.exec(serving)?.[1]);
  const log = read();
  const noEffect = log.split('\n').filter((l) => l.includes('accepted for compatibility, has no effect'));
  assert.equal(noEffect.length, 1, log);
  assert.match(
    noEffect[0]!,
    / W \d+ nereid\] accepted for compatibility, has no effect: --http-thread-count, --grpc-infer-thread-count$/,
  );
  assert.equal(stderr, '', 'with --log-file nothing goes to stderr');
  const settings = (await (await fetch(`http://127.0.0.1:${http}/v2/logging`)).json()) as Record<string, unknown>;
  assert.deepEqual(settings, {
    log_file: file,
    log_info: true,
    log_warning: true,
    log_error: false,
    log_verbose_level: 1,
    log_format: 'ISO8601',
  });
});

test('no flag is accepted and silently ignored: each one changes ' +
  'the configuration or is listed as having no effect', () => {
  const base = ['--model-repository=/m'];
  const strip = (argv: string[]) => {
    const c = buildServeConfig(argv) as unknown as Record<string, unknown>;
    const { ignored: _ignored, warnings: _warnings, ...rest } = c;
    return JSON.stringify(rest);
  };
  const reference = strip(base);
  const samples: Record<string, string[]> = {
    'model-control-mode': ['--model-control-mode=explicit'],
    'load-model': ['--model-control-mode=explicit', '--load-model=a'],
    'repository-poll-secs': ['--model-control-mode=poll', '--repository-poll-secs=3'],
    'grpc-infer-response-compression-level': ['--grpc-infer-response-compression-level=high'],
    'log-format': ['--log-format=ISO8601'],
    'backend-config': ['--backend-config=python,a=b'],
    'http-restricted-api': ['--http-restricted-api=health:k=v'],
    'grpc-restricted-protocol': ['--grpc-restricted-protocol=health:k=v'],
    'grpc-use-ssl': ['--grpc-use-ssl=true', '--grpc-server-cert=c', '--grpc-server-key=k'],
    'grpc-use-ssl-mutual': [
      '--grpc-use-ssl-mutual=true',
      '--grpc-server-cert=c',
      '--grpc-server-key=k',
      '--grpc-root-cert=r',
    ],
    'grpc-server-cert': ['--grpc-use-ssl=true', '--grpc-server-cert=c', '--grpc-server-key=k'],
    'grpc-server-key': ['--grpc-use-ssl=true', '--grpc-server-cert=c', '--grpc-server-key=k'],
    'grpc-root-cert': [
      '--grpc-use-ssl-mutual=true',
      '--grpc-server-cert=c',
      '--grpc-server-key=k',
      '--grpc-root-cert=r',
    ],
    'http-max-input-size': ['--http-max-input-size=77'],
  };
  const silent: string[] = [];
  for (const [name, spec] of Object.entries(SERVE_FLAGS)) {
    if (name === 'help') continue;
    const tries: string[][] =
      samples[name] !== undefined
        ? [samples[name]!]
        : spec.type === 'bool'
          ? [[`--${name}=true`], [`--${name}=false`]]
          : spec.type === 'int'
            ? [[`--${name}=12345`]]
            : [[`--${name}=sample`]];
    const changes = tries.some((extra) => {
      try {
        return strip([...base, ...extra]) !== reference;
      } catch {
        return true; // refused with an error: not silently accepted
      }
    });
    if (!changes) silent.push(name);
  }
  assert.deepEqual(
    silent,
    [],
    `flags accepted but changing nothing (implement them or list them in IGNORED_FLAGS): ${silent.join(', ')}`,
  );
  for (const name of Object.keys(IGNORED_FLAGS)) {
    const spec = IGNORED_FLAGS[name]!;
    const value = spec.type === 'bool' ? 'true' : spec.type === 'int' ? '1' : 'x';
    assert.deepEqual(buildServeConfig([...base, `--${name}=${value}`]).ignored, [name]);
  }
});
