/**
 * `npm install` on a clean clone prints no npm warning and installs what building, serving and the
 * test command need, and not the servers only the tests start (those go to .tools/test-servers).
 * A real install into a scratch folder holding the files npm reads from a clone (package.json,
 * package-lock.json, .npmrc); the npm cache may make it quick, it does not change what npm checks
 * (engines, deprecations, peer dependencies, the lockfile against package.json).
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { copyFileSync, existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..', '..');

test('npm install on a clean clone prints no npm warning and leaves the test-only servers out', (t) => {
  const files = ['package.json', 'package-lock.json', '.npmrc'];
  const tracked = spawnSync('git', ['ls-files', ...files], { cwd: ROOT, encoding: 'utf8' });
  assert.equal(tracked.status, 0, tracked.stderr);
  assert.deepEqual(tracked.stdout.trim().split('\n').sort(), ['.npmrc', 'package-lock.json', 'package.json']);
  const dir = mkdtempSync(path.join(tmpdir(), 'nereid-install-'));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  for (const f of files) copyFileSync(path.join(ROOT, f), path.join(dir, f));

  // npm runs under the machine's node (engine warnings depend on it), not the one the tests were relaunched on.
  const env = Object.fromEntries(
    Object.entries(process.env).filter(([k]) => !k.toLowerCase().startsWith('npm_config_')),
  );
  const machineNode = process.env['NEREID_MACHINE_NODE'];
  if (machineNode !== undefined) env['PATH'] = `${path.dirname(machineNode)}${path.delimiter}${env['PATH'] ?? ''}`;
  const args = ['install', '--no-audit', '--no-fund', '--prefer-offline'];
  const r = spawnSync('npm', args, { cwd: dir, encoding: 'utf8', env });
  const out = r.stdout + r.stderr;
  assert.equal(r.status, 0, out);
  const warnings = out.split('\n').filter((l) => /^npm warn/i.test(l));
  assert.deepEqual(warnings, [], `npm install printed ${warnings.length} warning line(s)`);
  const added = /added (\d+) packages/.exec(out);
  assert.ok(added, out);
  t.diagnostic(`npm install added ${added[1]} packages under node ${machineNode ?? process.execPath}`);

  const has = (p: string): boolean => existsSync(path.join(dir, 'node_modules', p, 'package.json'));
  for (const p of ['onnxruntime-node', 'typescript', '@bufbuild/buf', '@grpc/grpc-js', 'kubernetes-models']) {
    assert.ok(has(p), `${p} is installed`);
  }
  for (const p of ['azurite', 'firebase-tools']) {
    assert.ok(!has(p), `${p} is a test server, installed into .tools/test-servers, not by npm install`);
  }
});
