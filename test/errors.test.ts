/**
 * The errors module is the one place a code gets its class: each code maps
 * to one Triton class (so one HTTP status and one gRPC code), every helper
 * is used, and the code literals elsewhere in src/ name codes of the
 * catalogue with the catalogue's class.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readdirSync, readFileSync, statSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { Errors, MODEL_REPORTED_CODES, NereidError, asNereidError, type TritonErrorClass } from '../src/errors.js';
import { AUTH_FAILURE_CODES } from '../src/auth/access.js';

const SRC = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..', 'src');

function sources(dir: string): string[] {
  return readdirSync(dir).flatMap((name) => {
    const p = path.join(dir, name);
    return statSync(p).isDirectory() ? sources(p) : p.endsWith('.ts') ? [p] : [];
  });
}

const CLASSES: TritonErrorClass[] = [
  'INTERNAL',
  'NOT_FOUND',
  'INVALID_ARG',
  'UNAVAILABLE',
  'UNSUPPORTED',
  'ALREADY_EXISTS',
  'CANCELLED',
  'UNKNOWN',
];

/** Every error the catalogue can make, with the helper that made it. */
function catalogue(): Array<{ helper: string; error: NereidError }> {
  const out: Array<{ helper: string; error: NereidError }> = [];
  for (const [helper, make] of Object.entries(Errors)) {
    if (helper === 'modelReported') {
      for (const cls of CLASSES) out.push({ helper, error: Errors.modelReported(cls, 'm') });
      continue;
    }
    out.push({ helper, error: (make as (...args: unknown[]) => NereidError)('a', 'b', 'c', 'd') });
  }
  return out;
}

test('each code maps to one class, so to one HTTP status and one gRPC code', () => {
  const classOf = new Map<string, TritonErrorClass>();
  const clashes: string[] = [];
  for (const { helper, error } of catalogue()) {
    assert.match(error.code, /^NRD_[A-Z0-9_]+$/, helper);
    const seen = classOf.get(error.code);
    if (seen !== undefined && seen !== error.errorClass)
      clashes.push(`${error.code}: ${seen} and ${error.errorClass} (${helper})`);
    classOf.set(error.code, error.errorClass);
  }
  assert.deepEqual(clashes, []);
  // A model's own error keeps its class, and a code of its own for it.
  assert.equal(new Set(Object.values(MODEL_REPORTED_CODES)).size, CLASSES.length);
  for (const cls of CLASSES) assert.equal(Errors.modelReported(cls, 'm').errorClass, cls);
  // The status tables follow Triton's.
  const statuses = Object.fromEntries(
    CLASSES.map((cls) => [cls, [Errors.modelReported(cls, '').httpStatus, Errors.modelReported(cls, '').grpcStatus]]),
  );
  assert.deepEqual(statuses, {
    INTERNAL: [500, 13],
    NOT_FOUND: [404, 5],
    INVALID_ARG: [400, 3],
    UNAVAILABLE: [503, 14],
    UNSUPPORTED: [501, 12],
    ALREADY_EXISTS: [400, 6],
    CANCELLED: [400, 1],
    UNKNOWN: [400, 2],
  });
  assert.equal(asNereidError(new Error('boom')).code, Errors.internal('').code);
});

test('the code literals outside the catalogue are its codes, with its classes', () => {
  const classOf = new Map(catalogue().map(({ error }) => [error.code, error.errorClass]));
  const problems: string[] = [];
  for (const file of sources(SRC)) {
    if (file === path.join(SRC, 'errors.ts')) continue;
    const text = readFileSync(file, 'utf8');
    const where = path.relative(SRC, file);
    for (const m of text.matchAll(/'(NRD_[A-Z0-9_]+)'/g)) {
      if (!classOf.has(m[1]!) && !AUTH_FAILURE_CODES.includes(m[1]!))
        problems.push(`${where}: '${m[1]}' is no code of the catalogue`);
    }
    // Errors are made by the catalogue's helpers, not in place with a code of their own choosing.
    for (const m of text.matchAll(/new NereidError\(\s*'(NRD_[A-Z0-9_]+)'/g))
      problems.push(`${where}: ${m[1]} made in place`);
    // A subclass's super call must agree with the catalogue.
    for (const m of text.matchAll(/super\(\s*'(NRD_[A-Z0-9_]+)',\s*'([A-Z_]+)'/g)) {
      if (classOf.get(m[1]!) !== m[2])
        problems.push(`${where}: ${m[1]} made as ${m[2]}, the catalogue says ${classOf.get(m[1]!)}`);
    }
  }
  assert.deepEqual(problems, []);
});

test('every helper of the catalogue is used by the server', () => {
  const text = sources(SRC)
    .filter((f) => f !== path.join(SRC, 'errors.ts'))
    .map((f) => readFileSync(f, 'utf8'))
    .join('\n');
  const unused = Object.keys(Errors).filter((helper) => !new RegExp(`\\bErrors\\.${helper}\\b`).test(text));
  assert.deepEqual(unused, []);
});
