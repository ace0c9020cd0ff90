/**
 * The module map (docs/architecture.md and the architecture table): which
 * folder under src/ may import which. A new import across a forbidden edge
 * fails here; the edges listed in KNOWN are the ones still to be moved into a
 * leaf module (the public types, Cancellation and the statistics recorder
 * live in core/ today), and the list may only shrink.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readdirSync, readFileSync, statSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const SRC = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..', '..', 'src');

/** Shared by everything: generated protobuf code, the errors module, the logger. */
const SHARED = new Set(['gen', 'errors.ts', 'logger.ts']);

const ALLOWED: Record<string, readonly string[]> = {
  tensor: [],
  config: ['tensor'],
  repository: ['config'],
  onnx: ['tensor'],
  backends: ['tensor', 'config', 'onnx'],
  scheduler: ['tensor', 'config', 'backends'],
  cache: ['tensor', 'config', 'backends', 'scheduler'],
  core: ['tensor', 'config', 'repository', 'onnx', 'backends', 'scheduler', 'cache'],
  metrics: ['core'],
  frontends: ['core', 'tensor'],
};

/** Forbidden edges that exist today, file by file: to be removed, never added to. */
const KNOWN = new Set([
  'backends/backend.ts -> core',
  'backends/python/bls.ts -> core',
  'scheduler/default-scheduler.ts -> core',
  'scheduler/dynamic-batcher.ts -> core',
  'scheduler/scheduler.ts -> core',
  'scheduler/scheduled-request.ts -> core',
  'scheduler/sequence-batcher/index.ts -> core',
  'scheduler/ensemble-scheduler.ts -> core',
  'frontends/http/server.ts -> config',
]);

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
