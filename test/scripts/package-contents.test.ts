/** What `npm publish` would ship, and that every runtime dependency is used. */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { readdirSync, readFileSync, statSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..', '..');

function sources(dir: string): string[] {
  return readdirSync(dir).flatMap((name) => {
    const p = path.join(dir, name);
    return statSync(p).isDirectory() ? sources(p) : p.endsWith('.ts') ? [p] : [];
  });
}

test('the package ships the server, the Python stub and the examples, and no test or bench tooling', () => {
  const r = spawnSync('npm', ['pack', '--dry-run', '--json', '--ignore-scripts'], { cwd: ROOT, encoding: 'utf8' });
  assert.equal(r.status, 0, r.stderr);
  const files = (JSON.parse(r.stdout) as Array<{ files: Array<{ path: string }> }>)[0]!.files.map((f) => f.path);
  for (const needed of [
    'dist/src/index.js',
    'dist/src/index.d.ts',
    'dist/src/cli/main.js',
    'python/nereid_stub.py',
    'package.json',
  ]) {
    assert.ok(files.includes(needed), `${needed} is published`);
  }
  assert.deepEqual(
    files.filter((f) => /^dist\/(test|bench|scripts)\//.test(f)),
    [],
    'tests, benchmarks and build scripts stay out',
  );
});

test('every runtime dependency is imported by the server', () => {
  const pkg = JSON.parse(readFileSync(path.join(ROOT, 'package.json'), 'utf8')) as {
    dependencies: Record<string, string>;
  };
  const text = sources(path.join(ROOT, 'src')).map((f) => readFileSync(f, 'utf8')).join('\n');
  const unused = Object.keys(pkg.dependencies).filter(
    (name) => !text.includes(`'${name}'`) && !text.includes(`'${name}/`),
  );
  assert.deepEqual(unused, [], `dependencies nothing in src/ imports: ${unused.join(', ')}`);
});

test('package.json, package-lock.json and LICENSE name the same licence', () => {
  const pkg = JSON.parse(readFileSync(path.join(ROOT, 'package.json'), 'utf8')) as {
    name: string;
    version: string;
    license: string;
  };
  const lock = JSON.parse(readFileSync(path.join(ROOT, 'package-lock.json'), 'utf8')) as {
    name: string;
    version: string;
    packages: Record<string, { name?: string; version?: string; license?: string }>;
  };
  const root = lock.packages['']!;
  assert.deepEqual([lock.name, lock.version, root.name, root.version], [pkg.name, pkg.version, pkg.name, pkg.version]);
  assert.equal(root.license, pkg.license);
  assert.equal(pkg.license, 'MIT');
  assert.match(readFileSync(path.join(ROOT, 'LICENSE'), 'utf8'), /^MIT License\n/);
});

test('nothing the package ships imports the tests, benchmarks or build scripts it leaves out', () => {
  const outside = ['test', 'bench', 'scripts'].map((dir) => path.join(ROOT, dir) + path.sep);
  const importers = sources(path.join(ROOT, 'src'))
    .filter((f) =>
      [...readFileSync(f, 'utf8').matchAll(/(?:from|import)\s*\(?\s*'(\.[^']+)'/g)].some((m) => {
        const target = path.resolve(path.dirname(f), m[1]!);
        return outside.some((dir) => target.startsWith(dir));
      }),
    )
    .map((f) => path.relative(ROOT, f));
  assert.deepEqual(importers, []);
});
