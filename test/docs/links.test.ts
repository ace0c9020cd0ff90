import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, mkdirSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { brokenLinks, headingAnchors } from './markdown-links.js';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..', '..');

function markdownFiles(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((e) => {
    const p = path.join(dir, e.name);
    return e.isDirectory() ? markdownFiles(p) : e.name.endsWith('.md') ? [p] : [];
  });
}

test('every relative link in the README and docs/ resolves, file and anchor', () => {
  const files = [path.join(ROOT, 'README.md'), ...markdownFiles(path.join(ROOT, 'docs'))];
  assert.ok(files.length > 10, `found only ${files.length} Markdown files`);
  const broken = files.flatMap((f) => brokenLinks(f, ROOT));
  assert.deepEqual(broken, [], `broken links:\n${broken.join('\n')}`);
});

test('the README stays a README: at most 150 lines', async () => {
  const { readFileSync } = await import('node:fs');
  const lines = readFileSync(path.join(ROOT, 'README.md'), 'utf8').trimEnd().split('\n').length;
  assert.ok(lines <= 150, `README.md has ${lines} lines`);
});

test('heading anchors follow GitHub: punctuation dropped, spaces as hyphens, repeats numbered', () => {
  const anchors = headingAnchors(
    '# Title\n## Stopping: ready goes first, live goes last\n## How it works\n### How it works\n' +
      '## Differences from perf_analyzer\n## `nereid perf` flags\n```\n## not a heading\n```\n',
  );
  assert.deepEqual(
    [...anchors],
    [
      'title',
      'stopping-ready-goes-first-live-goes-last',
      'how-it-works',
      'how-it-works-1',
      'differences-from-perf_analyzer',
      'nereid-perf-flags',
    ],
  );
});

test('a missing file, a missing anchor and a link out of the repository are each reported', () => {
  const root = mkdtempSync(path.join(tmpdir(), 'nereid-links-'));
  try {
    mkdirSync(path.join(root, 'docs'));
    writeFileSync(path.join(root, 'docs', 'a.md'), '# A\n## Known part\n');
    writeFileSync(
      path.join(root, 'README.md'),
      '[ok](docs/a.md) [ok](docs/a.md#known-part) [ok](#readme) [web](https://example.com/x.md)\n' +
        '# Readme\n[gone](docs/b.md) [no anchor](docs/a.md#unknown) [out](../elsewhere.md)\n' +
        '`[in code](docs/c.md)`\n```\n[in a block](docs/d.md)\n```\n',
    );
    assert.deepEqual(brokenLinks(path.join(root, 'README.md'), root), [
      'README.md: docs/b.md (no such file)',
      'README.md: docs/a.md#unknown (no heading with that anchor)',
      'README.md: ../elsewhere.md (leaves the repository)',
    ]);
  } finally {
    rmSync(root, { recursive: true, force: true });
  }
});
