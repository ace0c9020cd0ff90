/** npm commands print no npm warnings, and the Node versions the project says it supports are the ones it tests. */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..', '..');
const pkg = JSON.parse(readFileSync(path.join(ROOT, 'package.json'), 'utf8')) as {
  scripts: Record<string, string>;
  allowScripts?: Record<string, boolean>;
};

test('an npm script runs without npm warnings (no unknown project config in .npmrc)', () => {
  const r = spawnSync('npm', ['run', 'serve', '--', '--help'], {
    cwd: ROOT,
    encoding: 'utf8',
    env: { ...process.env, NODE_OPTIONS: '' },
  });
  assert.equal(r.status, 0, r.stderr);
  assert.doesNotMatch(r.stderr, /npm warn/i, r.stderr);
  assert.match(r.stdout, /Usage: nereid serve/);
});

test("install scripts are decided, not left to npm's warning: onnxruntime-node's CUDA download stays skipped", () => {
  const npmrc = readFileSync(path.join(ROOT, '.npmrc'), 'utf8');
  assert.match(npmrc, /^ignore-scripts=true$/m, 'npm 10 and 11 skip dependency install scripts');
  assert.equal(pkg.allowScripts?.['onnxruntime-node'], false, "npm 11's allowScripts records the denial");
});

test('the README commands run under a supported Node: the suite runs once, and a smoke subset on Node 22', () => {
  const engines = (pkg as { engines?: unknown }).engines;
  assert.equal(engines, undefined, 'npm would warn about the root package on an older node');
  assert.match(pkg.scripts['test']!, /node scripts\/run-tests\.mjs( |$)/);
  assert.match(pkg.scripts['test']!, /node scripts\/with-node\.mjs --node=22 scripts\/run-tests\.mjs /);
  assert.match(pkg.scripts['start']!, /node scripts\/with-node\.mjs dist\/src\/cli\/main\.js serve$/);
  const [major = 0, minor = 0] = process.versions.node.split('.').map(Number);
  const supported = major >= 24 || (major === 22 && minor >= 15);
  assert.ok(supported, `the tests run on Node ${process.versions.node}, which is not supported`);
});

/** Runs `node ARGS` with process.versions.node reported as 20.20.2: an end-of-life Node, as a fresh machine has. */
function asNode20(args: string[]): ReturnType<typeof spawnSync> {
  const fake = "Object.defineProperty(process, 'versions', { value: { ...process.versions, node: '20.20.2' } });";
  return spawnSync(process.execPath, ['--import', `data:text/javascript,${encodeURIComponent(fake)}`, ...args], {
    cwd: ROOT,
    encoding: 'utf8',
  });
}

test('on an unsupported Node the CLI fails at once and says what to install', () => {
  const r = asNode20([path.join(ROOT, 'dist', 'src', 'cli', 'main.js'), 'serve', '--help']);
  assert.equal(r.status, 1, String(r.stdout) + String(r.stderr));
  assert.match(String(r.stderr), /^error: Node\.js v\S+ is not supported: install Node\.js 24 \(or 22\.15 or later\)/);
  assert.equal(String(r.stdout), '');
});

test('on an unsupported Node the project\'s launcher runs the command under the pinned Node 24 instead', () => {
  const r = asNode20([path.join(ROOT, 'scripts', 'with-node.mjs'), '-p', 'process.version']);
  assert.equal(r.status, 0, String(r.stderr));
  const said = /Node\.js v\S+ is not supported \(Node\.js 24, or 22\.15 or later\); running under Node 24\./;
  assert.match(String(r.stderr), said);
  assert.match(String(r.stdout).trim(), /^v24\./);
});
