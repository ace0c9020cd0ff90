/** npm commands print no npm warnings, and the Node versions the project says it supports are the ones it tests. */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..', '..');
const pkg = JSON.parse(readFileSync(path.join(ROOT, 'package.json'), 'utf8')) as {
  engines: { node: string };
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

test('engines names the Node lines the suite runs on: the machine and Node 24', () => {
  assert.match(pkg.engines.node, /\^20\./);
  assert.match(pkg.engines.node, /\^24\./);
  assert.match(pkg.scripts['test']!, /node scripts\/test-node24\.mjs/);
  const major = Number(process.versions.node.split('.')[0]);
  assert.ok([20, 24].includes(major), `running on Node ${process.versions.node}, which engines does not name`);
});
