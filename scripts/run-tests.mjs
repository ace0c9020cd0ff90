// Runs every compiled test file under dist/test with Node's test runner.
import { readdirSync, statSync } from 'node:fs';
import { spawnSync } from 'node:child_process';
import path from 'node:path';

function find(dir) {
  const out = [];
  for (const name of readdirSync(dir)) {
    const p = path.join(dir, name);
    if (statSync(p).isDirectory()) out.push(...find(p));
    else if (name.endsWith('.test.js')) out.push(p);
  }
  return out;
}

const filter = process.argv.slice(2);
let files = find('dist/test').sort();
if (filter.length > 0) files = files.filter((f) => filter.some((x) => f.includes(x)));
if (files.length === 0) {
  console.error('no test files found');
  process.exit(1);
}
const env = { ...process.env, NEREID_LOG_LEVEL: process.env.NEREID_LOG_LEVEL ?? 'silent' };
env.NEREID_TEST_PYTHON ??= '/usr/bin/python3';
const r = spawnSync(process.execPath, ['--test', '--test-concurrency=2', '--test-timeout=300000', ...files], { stdio: 'inherit', env });
process.exit(r.status ?? 1);
