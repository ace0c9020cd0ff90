/**
 * The module map (module-map.ts, shown in docs/architecture.md): which
 * folder under src/ may import which. A new import across a forbidden edge
 * fails here; the edges listed in KNOWN are the ones still to be removed, and
 * the list may only shrink.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readdirSync, readFileSync, statSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { ALLOWED, FRONTENDS, SHARED, UNCHECKED } from './module-map.js';

const SRC = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..', '..', 'src');

/** Forbidden edges that exist today, file by file (none now): to be removed, never added to. */
const KNOWN = new Set<string>([]);

function files(dir: string): string[] {
  return readdirSync(dir).flatMap((name) => {
    const p = path.join(dir, name);
    return statSync(p).isDirectory() ? files(p) : p.endsWith('.ts') ? [p] : [];
  });
}

function topOf(file: string): string {
  return path.relative(SRC, file).split(path.sep)[0]!.replace(/\.js$/, '.ts');
}

test('imports between src/ folders follow the module map', () => {
  const violations: string[] = [];
  const seen = new Set<string>();
  for (const file of files(SRC)) {
    const from = topOf(file);
    const allowed = ALLOWED[from];
    if (allowed === undefined) continue; // cli/ and the entry may import everything
    const text = readFileSync(file, 'utf8');
    for (const m of text.matchAll(/(?:from|import)\s*\(?\s*'(\.[^']+)'/g)) {
      const target = topOf(path.resolve(path.dirname(file), m[1]!));
      if (target === from || SHARED.has(target) || allowed.includes(target)) continue;
      const edge = `${path.relative(SRC, file)} -> ${target}`;
      seen.add(edge);
      if (!KNOWN.has(edge)) violations.push(edge);
    }
  }
  assert.deepEqual(violations, [], `imports the module map forbids:\n${violations.join('\n')}`);
  const stale = [...KNOWN].filter((edge) => !seen.has(edge));
  assert.deepEqual(stale, [], `edges listed as known that are gone: take them off KNOWN\n${stale.join('\n')}`);
});

test('frontend folders import one another only as the frontend map says', () => {
  const dir = path.join(SRC, 'frontends');
  const violations: string[] = [];
  for (const file of files(dir)) {
    const rel = path.relative(dir, file).split(path.sep);
    if (rel.length < 2) continue;
    const from = rel[0]!;
    const allowed = FRONTENDS[from];
    if (allowed === undefined) {
      violations.push(`frontends/${from} has no row in FRONTENDS`);
      continue;
    }
    const text = readFileSync(file, 'utf8');
    for (const m of text.matchAll(/(?:from|import)\s*\(?\s*'(\.[^']+)'/g)) {
      const target = path.relative(dir, path.resolve(path.dirname(file), m[1]!)).split(path.sep);
      if (target[0] === '..' || target.length < 2 || target[0] === from || allowed.includes(target[0]!)) continue;
      violations.push(`${path.relative(SRC, file)} -> frontends/${target[0]}`);
    }
  }
  assert.deepEqual([...new Set(violations)], []);
});

test('every folder and file under src/ has its row in the module map', () => {
  const unmapped = readdirSync(SRC)
    .map((name) => name.replace(/\.js$/, '.ts'))
    .filter((name) => !(name in ALLOWED) && !SHARED.has(name) && !UNCHECKED.has(name));
  assert.deepEqual(unmapped, [], `add these to ALLOWED (and to the architecture table):\n${unmapped.join('\n')}`);
});

test('the module map has no cycle, so the leaf modules stay leaves', () => {
  const cycles: string[] = [];
  const visit = (mod: string, trail: string[]): void => {
    if (trail.includes(mod)) {
      cycles.push([...trail.slice(trail.indexOf(mod)), mod].join(' -> '));
      return;
    }
    for (const next of ALLOWED[mod] ?? []) visit(next, [...trail, mod]);
  };
  for (const mod of Object.keys(ALLOWED)) visit(mod, []);
  assert.deepEqual(cycles, []);
  assert.deepEqual(ALLOWED['types'], ['tensor'], 'the shared types import nothing of ours but tensor/');
});
