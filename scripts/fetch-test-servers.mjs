// Installs the servers only the tests start (Azurite; the Cloud Storage emulator inside firebase-tools)
// into .tools/test-servers (git-ignored), exactly as scripts/test-servers/package-lock.json pins them.
// They are not devDependencies: a user who only builds and serves never downloads them.
// Reinstalls only when the lockfile changed since the last install.
import { createHash } from 'node:crypto';
import { copyFileSync, existsSync, mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { spawnSync } from 'node:child_process';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const source = path.join(root, 'scripts', 'test-servers');
const dir = path.join(root, '.tools', 'test-servers');
const stamp = path.join(dir, '.installed');

const lock = readFileSync(path.join(source, 'package-lock.json'));
const digest = createHash('sha256').update(readFileSync(path.join(source, 'package.json'))).update(lock).digest('hex');
if (existsSync(stamp) && readFileSync(stamp, 'utf8') === digest) process.exit(0);

rmSync(dir, { recursive: true, force: true });
mkdirSync(dir, { recursive: true });
copyFileSync(path.join(source, 'package.json'), path.join(dir, 'package.json'));
copyFileSync(path.join(source, 'package-lock.json'), path.join(dir, 'package-lock.json'));
writeFileSync(path.join(dir, '.npmrc'), 'ignore-scripts=true\nfund=false\naudit=false\n');
// Under `npm test` the parent npm exports its settings as npm_config_* variables; this install has its own.
const env = Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.toLowerCase().startsWith('npm_config_')));
const npm = process.platform === 'win32' ? 'npm.cmd' : 'npm';
const started = Date.now();
const r = spawnSync(npm, ['ci', '--no-audit', '--no-fund', '--loglevel=error'], { cwd: dir, stdio: 'inherit', env });
if (r.status !== 0) {
  console.error(`could not install the test servers (scripts/test-servers/package-lock.json) into ${dir}`);
  process.exit(1);
}
writeFileSync(stamp, digest);
const seconds = ((Date.now() - started) / 1000).toFixed(0);
console.log(`test servers (azurite, firebase-tools) installed in .tools/test-servers in ${seconds} s`);
