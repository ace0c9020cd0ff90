/** scripts/run-tests.mjs: with CI=true a skipped test fails the run. */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..', '..');

function run(fixture: string, ci: boolean): { status: number | null; stderr: string } {
  const dir = mkdtempSync(path.join(tmpdir(), 'nereid-runner-'));
  try {
    const file = path.join(dir, 'fixture.test.js');
    writeFileSync(file, fixture);
    const env: NodeJS.ProcessEnv = { ...process.env, CI: ci ? 'true' : '' };
    delete env['NODE_TEST_CONTEXT'];
    const r = spawnSync(process.execPath, [path.join(ROOT, 'scripts', 'run-tests.mjs'), file], {
      cwd: ROOT,
      env,
      encoding: 'utf8',
    });
    return { status: r.status, stderr: r.stderr };
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

const SKIPPING = `import { test } from 'node:test';
test('needs a tool', { skip: 'promtool not found' }, () => {});
test('runs', () => {});
`;

test('in CI a skipped test fails the run and is named', () => {
  const r = run(SKIPPING, true);
  assert.equal(r.status, 1, r.stderr);
  assert.match(r.stderr, /CI=true: 1 test\(s\) skipped/);
  assert.match(r.stderr, /needs a tool \(promtool not found\)/);
});

test('outside CI a skip is reported but passes', () => {
  const r = run(SKIPPING, false);
  assert.equal(r.status, 0, r.stderr);
  assert.match(r.stderr, /1 test\(s\) skipped/);
});

test('a run without skips passes in CI; a failure still fails', () => {
  assert.equal(run(`import { test } from 'node:test';\ntest('ok', () => {});\n`, true).status, 0);
  assert.notEqual(
    run(`import { test } from 'node:test';\ntest('bad', () => { throw new Error('x'); });\n`, true).status,
    0,
  );
});
