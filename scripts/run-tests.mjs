// Runs the compiled test files under dist/test (or the files named) with Node's test runner,
// under a supported Node.js (on an older one, the pinned Node 24 from .tools/: scripts/supported-node.mjs).
// With CI=true a skipped test fails the run: a missing dependency must not shrink the suite.
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync } from 'node:fs';
import { spawnSync } from 'node:child_process';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { relaunchIfUnsupported } from './supported-node.mjs';

await relaunchIfUnsupported();

function find(dir) {
  const out = [];
  for (const name of readdirSync(dir)) {
    const p = path.join(dir, name);
    if (statSync(p).isDirectory()) out.push(...find(p));
    else if (name.endsWith('.test.js')) out.push(p);
  }
  return out;
}

// --frontend-threads=N: servers the tests start serve HTTP and gRPC on N threads (NEREID_FRONTEND_THREADS, read
// where a frontend or `nereid serve` is not told otherwise); package.json's test script runs the protocol suites
// with 1 and again with 2.
const threadsArg = process.argv.slice(2).find((a) => a.startsWith('--frontend-threads='));
const args = process.argv.slice(2).filter((a) => a !== threadsArg);
// Arguments naming test files are run as they are; the others filter dist/test by substring.
const named = args.filter((a) => a.endsWith('.js') && existsSync(a));
const filter = args.filter((a) => !named.includes(a));
let files = named.length > 0 && filter.length === 0 ? named : find('dist/test').sort();
if (filter.length > 0) files = files.filter((f) => filter.some((x) => f.includes(x)));
if (files.length === 0) {
  console.error('no test files found');
  process.exit(1);
}
const env = { ...process.env, NEREID_LOG_LEVEL: process.env.NEREID_LOG_LEVEL ?? 'silent' };
env.NEREID_TEST_PYTHON ??= '/usr/bin/python3';
if (threadsArg !== undefined) env.NEREID_FRONTEND_THREADS = threadsArg.slice('--frontend-threads='.length);

// The console gets the usual report; a TAP copy goes to a file for the totals.
const scratch = mkdtempSync(path.join(tmpdir(), 'nereid-tests-'));
const tap = path.join(scratch, 'report.tap');
const r = spawnSync(
  process.execPath,
  [
    '--test',
    '--test-concurrency=2',
    '--test-timeout=300000',
    `--test-reporter=${process.stdout.isTTY ? 'spec' : 'tap'}`,
    '--test-reporter-destination=stdout',
    '--test-reporter=tap',
    `--test-reporter-destination=${tap}`,
    ...files,
  ],
  { stdio: 'inherit', env },
);
const report = existsSync(tap) ? readFileSync(tap, 'utf8') : '';
rmSync(scratch, { recursive: true, force: true });

/** The runner's final "# name N" totals. */
function total(name) {
  const all = [...report.matchAll(new RegExp(`^# ${name} (\\d+)$`, 'gm'))];
  return all.length === 0 ? 0 : Number(all[all.length - 1][1]);
}

let status = r.status ?? 1;
const skipped = total('skipped') + total('todo');
if (skipped > 0) {
  const names = [...report.matchAll(/^\s*ok \d+ - (.*) # (?:SKIP|TODO)(.*)$/gm)].map(
    (m) => `  ${m[1]}${m[2] ? ` (${m[2].trim()})` : ''}`,
  );
  if (process.env.CI === 'true') {
    console.error(`\nCI=true: ${skipped} test(s) skipped; in CI a skipped test is a failure:\n${names.join('\n')}`);
    if (status === 0) status = 1;
  } else {
    console.error(`\nnote: ${skipped} test(s) skipped (with CI=true this fails the run):\n${names.join('\n')}`);
  }
}
process.exit(status);
