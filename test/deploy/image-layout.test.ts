import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { TempRepository } from '../helpers/repository.js';
import { LOOPBACK_PORTS, startServe } from '../helpers/serve-process.js';
import { ROOT } from './helm.js';

const PYTHON = process.env.NEREID_TEST_PYTHON ?? '/usr/bin/python3';

test('the image layout script installs production dependencies only, and nereid ' +
  'serve from it serves the example repository and a Python model', async (t) => {
  const dest = mkdtempSync(path.join(tmpdir(), 'nereid-image-'));
  t.after(() => rmSync(dest, { recursive: true, force: true }));
  const built = spawnSync('sh', [path.join(ROOT, 'deploy', 'image-layout.sh'), dest], { encoding: 'utf8' });
  assert.equal(built.status, 0, built.stdout + built.stderr);

  // The lockfile marks what only development needs ("dev": true); the layout has exactly the rest.
  const lock = JSON.parse(readFileSync(path.join(ROOT, 'package-lock.json'), 'utf8')) as {
    packages: Record<string, { dev?: boolean; optional?: boolean }>;
  };
  const top = Object.entries(lock.packages).filter(([p]) => /^node_modules\/(@[^/]+\/)?[^/]+$/.test(p));
  const devOnly = top.filter(([, e]) => e.dev).map(([p]) => p);
  const production = top.filter(([, e]) => !e.dev && !e.optional).map(([p]) => p);
  assert.ok(devOnly.includes('node_modules/typescript') && production.includes('node_modules/onnxruntime-node'));
  // Pruned by the layout script: @azure/identity's browser sign-in library, which only its browser build imports.
  const pruned = ['node_modules/@azure/msal-browser'];
  for (const p of production) {
    assert.equal(existsSync(path.join(dest, p)), !pruned.includes(p), `${p} is installed, or pruned`);
  }
  const leftovers = spawnSync('find', [
    path.join(dest, 'node_modules'),
    '-name', '*.map', '-o', '-name', '*.d.ts', '-o', '-type', 'd', '-path', '*/dist/browser',
  ], { encoding: 'utf8' });
  assert.equal(leftovers.stdout, '', 'no source maps, type declarations or browser builds');
  for (const p of devOnly) assert.ok(!existsSync(path.join(dest, p)), `${p} (development only) is left out`);
  assert.ok(!existsSync(path.join(dest, 'dist', 'test')), 'no compiled tests');
  const ortBins = path.join(dest, 'node_modules', 'onnxruntime-node', 'bin', 'napi-v6');
  assert.deepEqual(readdirSync(ortBins), ['linux']);
  assert.deepEqual(readdirSync(path.join(ortBins, 'linux')), [process.arch]);

  // Run from another folder, as the image's entrypoint does: nothing may come from the source tree.
  // At verbose: where nereid sets the malloc tuning itself, its note is a verbose line.
  const s = startServe(['serve', ...LOOPBACK_PORTS, '--log-verbose=1'], {
    command: [path.join(dest, 'bin', 'nereid')],
    cwd: tmpdir(),
    env: { NEREID_LOG_LEVEL: 'debug' },
  });
  t.after(() => s.stop());
  const ports = await s.ports;
  assert.match(
    s.stderr(),
    new RegExp(`"repositories":\\["${path.join(dest, 'examples', 'model_repository')}"\\]`),
    'the bundled examples by default',
  );
  // The malloc setting is logged once; when nereid set it, the re-executed process is still the PID started (the signal
  // below reaches it).
  const malloc = s.stderr().split('\n').filter((l) => l.includes('malloc'));
  assert.equal(malloc.length, 1, s.stderr());
  if (malloc[0]!.includes('set by nereid'))
    assert.match(readFileSync(`/proc/${s.pid}/environ`, 'utf8'), /(^|\0)NEREID_MALLOC_TUNED=/);
  const r = await fetch(`http://127.0.0.1:${ports.http}/v2/models/fraud_detector/infer`, {
    method: 'POST',
    body: JSON.stringify({
      inputs: [
        {
          name: 'input_features',
          datatype: 'FP32',
          shape: [1, 10],
          data: [0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1],
        },
      ],
    }),
  });
  assert.equal(r.status, 200);
  const body = (await r.json()) as { model_name: string; outputs: Array<{ shape: number[]; data: number[] }> };
  assert.equal(body.model_name, 'fraud_detector');
  assert.deepEqual(body.outputs[0]!.shape, [1, 1]);
  const p = body.outputs[0]!.data[0]!;
  assert.ok(p > 0 && p < 1, `a sigmoid output, got ${p}`);
  s.signal('SIGTERM');
  assert.equal(await s.exit, 0);

  // The Python backend's stubs ship too.
  const repo = new TempRepository()
    .config(
      'py_identity',
      'backend: "python"\nmax_batch_size: 0\ninput [ { name: "INPUT0" data_type: TYPE_FP32 ' +
      'dims: [ 2 ] } ]\noutput [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 2 ] } ]\n',
    )
    .file(
      'py_identity',
      '1/model.py',
      readFileSync(path.join(ROOT, 'test', 'fixtures', 'python_models', 'identity', 'model.py')),
    );
  t.after(() => repo.cleanup());
  const py = startServe(
    [
      'serve',
      `--model-repository=${repo.dir}`,
      `--backend-config=python,python-executable=${PYTHON}`,
      ...LOOPBACK_PORTS,
    ],
    { command: [path.join(dest, 'bin', 'nereid')], cwd: tmpdir() },
  );
  t.after(() => py.stop());
  const pyPorts = await py.ports;
  const echoed = await fetch(`http://127.0.0.1:${pyPorts.http}/v2/models/py_identity/infer`, {
    method: 'POST',
    body: JSON.stringify({ inputs: [{ name: 'INPUT0', datatype: 'FP32', shape: [2], data: [1.5, -2] }] }),
  });
  assert.equal(echoed.status, 200);
  assert.deepEqual(((await echoed.json()) as { outputs: Array<{ data: number[] }> }).outputs[0]!.data, [1.5, -2]);
});

/** The instructions of a Dockerfile's last stage. */
function finalStage(file: string): { from: string; lines: string[]; all: string } {
  const all = readFileSync(path.join(ROOT, 'deploy', file), 'utf8');
  const stages = all.split(/^FROM /m);
  const last = stages[stages.length - 1]!;
  return { from: last.split('\n')[0]!, lines: last.split('\n'), all };
}

for (const [file, base, layoutArgs] of [
  ['Dockerfile.cuda', /^\$\{CUDA_IMAGE\}$/, /image-layout\.sh \/opt\/nereid --cuda$/m],
] as const) {
  test(`${file}: multi-stage, the layout script's output on a slim base, ` +
    `a numeric non-root user, tini as PID 1 running nereid serve`, () => {
    const stage = finalStage(file);
    assert.ok((stage.all.match(/^FROM /gm) ?? []).length >= 2, 'a build stage and a runtime stage');
    assert.match(stage.from, base);
    assert.match(stage.all, layoutArgs);
    assert.ok(stage.lines.includes('COPY --from=build /opt/nereid /opt/nereid'));
    assert.ok(stage.lines.includes('USER 10001:10001'));
    assert.ok(stage.lines.includes('ENTRYPOINT ["/usr/bin/tini", "--", "nereid", "serve"]'));
    assert.match(stage.all, /apt-get install -y --no-install-recommends \$pkgs/);
    assert.match(stage.all, /pkgs="tini/);
    if (file === 'Dockerfile.cuda') assert.match(stage.all, /ARG CUDA_IMAGE=nvidia\/cuda:12\.[0-9.]+-cudnn-runtime-/);
  });
}
