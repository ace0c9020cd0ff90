// Runs the test suite again on Node 24 (the current LTS line) beside the machine's Node.
// The binary comes from the `node` package on the npm registry, installed into
// .tools/node24 (git-ignored) on first use; arguments are passed to run-tests.mjs.
import { execFileSync, spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const MAJOR = 24;
const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const dir = path.join(root, '.tools', `node${MAJOR}`);
const bin = path.join(dir, 'node_modules', 'node', 'bin', process.platform === 'win32' ? 'node.exe' : 'node');
const binLink = path.join(dir, 'node_modules', '.bin', 'node');

function installed() {
  const candidate = existsSync(binLink) ? binLink : existsSync(bin) ? bin : undefined;
  if (candidate === undefined) return undefined;
  try {
    const v = execFileSync(candidate, ['--version'], { encoding: 'utf8' }).trim();
    return v.startsWith(`v${MAJOR}.`) ? candidate : undefined;
  } catch {
    return undefined;
  }
}

let node = installed();
if (node === undefined) {
  mkdirSync(dir, { recursive: true });
  // Its own tiny project: the `node` package fetches the platform binary in an install script,
  // which npm 11 runs only when allowed (npm 10 runs it anyway).
  writeFileSync(
    path.join(dir, 'package.json'),
    JSON.stringify({ private: true, allowScripts: { node: true } }, null, 2) + '\n',
  );
  writeFileSync(path.join(dir, '.npmrc'), 'ignore-scripts=false\nfund=false\naudit=false\n');
  const npm = process.platform === 'win32' ? 'npm.cmd' : 'npm';
  // Under `npm test` the parent npm exports its own settings (ignore-scripts among them) as
  // npm_config_* variables, which would override the .npmrc above: drop them, and say it on the command line too.
  const env = Object.fromEntries(
    Object.entries(process.env).filter(([k]) => !k.toLowerCase().startsWith('npm_config_')),
  );
  const r = spawnSync(npm, ['install', '--no-save', '--ignore-scripts=false', `node@${MAJOR}`], {
    cwd: dir,
    stdio: 'inherit',
    env,
  });
  if (r.status !== 0) {
    console.error(`could not install node@${MAJOR} from the npm registry into ${dir}`);
    process.exit(1);
  }
  node = installed();
  if (node === undefined) {
    console.error(`node@${MAJOR} was installed into ${dir} but gives no v${MAJOR} binary`);
    process.exit(1);
  }
}
console.log(`\n== the test suite on Node ${execFileSync(node, ['--version'], { encoding: 'utf8' }).trim()} ==`);
const r = spawnSync(node, [path.join(root, 'scripts', 'run-tests.mjs'), ...process.argv.slice(2)], {
  cwd: root,
  stdio: 'inherit',
});
process.exit(r.status ?? 1);
