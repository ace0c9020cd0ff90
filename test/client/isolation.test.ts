/**
 * `nereid/client` stands alone: importing it through the package's subpath
 * export loads none of the server (no onnxruntime, no frontends, no core),
 * so it can be used, and later shipped, on its own.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..', '..');

/** Our files `nereid/client` may load (under dist/src), and the packages. */
const ALLOWED_FILES = /^(client\/[^/]+|tensor\/[^/]+|protowire\/[^/]+|gen\/[^/]+|config\/(json|errors)|errors)\.js$/;
const ALLOWED_PACKAGES = new Set([
  'undici',
  '@grpc/grpc-js',
  '@grpc/proto-loader',
  '@bufbuild/protobuf',
  '@js-sdsl/ordered-map',
  'protobufjs',
  'long',
  'lodash.camelcase',
  '@protobufjs',
]);

test("importing 'nereid/client' loads only the client, the tensor codecs and its protocol packages", () => {
  const scratch = mkdtempSync(path.join(tmpdir(), 'nereid-isolation-'));
  try {
    const log = path.join(scratch, 'resolved.txt');
    const hook = path.join(scratch, 'hook.mjs');
    // Every module resolution (ours and packages', ESM and CommonJS seen by the loader) is written down.
    writeFileSync(
      hook,
      `import { appendFileSync } from 'node:fs';
export async function resolve(specifier, context, next) {
  const r = await next(specifier, context);
  appendFileSync(${JSON.stringify(log)}, r.url + '\\n');
  return r;
}
`,
    );
    const register = `import { register } from 'node:module'; register(${JSON.stringify(pathToFileURL(hook).href)});`;
    const script = `
const m = await import('nereid/client');
if (typeof m.InferenceClient !== 'function') throw new Error('no InferenceClient');
new m.InferenceClient({ url: 'http://127.0.0.1:1' });
new m.InferenceClient({ url: 'grpc://127.0.0.1:1' });
const maps = (await import('node:fs')).readFileSync('/proc/self/maps', 'utf8');
console.log(JSON.stringify({ onnxruntime: /onnxruntime/.test(maps) }));
`;
    const r = spawnSync(
      process.execPath,
      ['--import', `data:text/javascript,${encodeURIComponent(register)}`, '--input-type=module', '-e', script],
      {
        cwd: ROOT,
        encoding: 'utf8',
      },
    );
    assert.equal(r.status, 0, r.stderr);
    assert.deepEqual(JSON.parse(r.stdout.trim().split('\n').pop()!), { onnxruntime: false });
    const urls = [...new Set(readFileSync(log, 'utf8').trim().split('\n'))].filter((u) => u.startsWith('file:'));
    const dist = pathToFileURL(path.join(ROOT, 'dist', 'src')).href + '/';
    const ours = urls.filter((u) => u.startsWith(dist)).map((u) => u.slice(dist.length));
    assert.ok(ours.includes('client/index.js'), `nereid/client resolved elsewhere:\n${urls.join('\n')}`);
    assert.deepEqual(ours.filter((f) => !ALLOWED_FILES.test(f)), [], 'server modules loaded by nereid/client');
    const packages = new Set(
      urls
        .map((u) => /\/node_modules\/((?:@[^/]+\/)?[^/]+)\//.exec(u)?.[1])
        .filter((p): p is string => p !== undefined),
    );
    assert.deepEqual([...packages].filter((p) => !ALLOWED_PACKAGES.has(p)), [], 'packages loaded by nereid/client');
    assert.ok(packages.has('undici') && packages.has('@grpc/grpc-js'), [...packages].join());
  } finally {
    rmSync(scratch, { recursive: true, force: true });
  }
});
