import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync, readdirSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { ALLOWED, UNCHECKED } from '../architecture/module-map.js';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..', '..');

/** The rows of the module map table in docs/architecture.md: folder -> what it may import. */
function documentedMap(): Map<string, string[] | 'everything'> {
  const text = readFileSync(path.join(ROOT, 'docs', 'architecture.md'), 'utf8');
  const section = text.split(/^## /m).find((s) => s.startsWith('The module map'));
  assert.ok(section, 'docs/architecture.md has no "## The module map" section');
  const rows = new Map<string, string[] | 'everything'>();
  for (const line of section.split('\n')) {
    const cells = line.split('|').map((c) => c.trim());
    const folder = /^`([a-z]+)\/`$/.exec(cells[1] ?? '');
    if (!folder) continue;
    const imports = cells[3] ?? '';
    rows.set(
      folder[1]!,
      imports === 'everything' ? 'everything' : [...imports.matchAll(/`([a-z]+)`/g)].map((m) => m[1]!).sort(),
    );
  }
  return rows;
}

test("docs/architecture.md's module map names every folder under src/ and the imports the test allows", () => {
  const documented = documentedMap();
  const folders = readdirSync(path.join(ROOT, 'src'), { withFileTypes: true })
    .filter((e) => e.isDirectory() && e.name !== 'gen')
    .map((e) => e.name)
    .sort();
  assert.deepEqual([...documented.keys()].sort(), folders, 'the table and the folders under src/ differ');
  for (const [folder, imports] of documented) {
    if (imports === 'everything') {
      assert.ok(UNCHECKED.has(folder), `${folder}/: the table says it may import everything, the test does not`);
      continue;
    }
    assert.deepEqual(imports, [...(ALLOWED[folder] ?? [])].sort(), `${folder}/: the table and the import test differ`);
  }
});
