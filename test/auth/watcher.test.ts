import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { Writable } from 'node:stream';
import { pino } from 'pino';
import { AccessControl, KeysFileWatcher, createKey, readKeysText } from '../../src/auth/index.js';

function recordingLogger() {
  const records: Array<Record<string, unknown>> = [];
  const stream = new Writable({
    write(chunk: Buffer, _enc, done) {
      for (const line of chunk.toString().split('\n'))
        if (line.trim()) records.push(JSON.parse(line) as Record<string, unknown>);
      done();
    },
  });
  return { logger: pino({ level: 'debug' }, stream), records };
}

/** Writes the file as a deployment should: a whole new file renamed over the old one. */
function replaceFile(file: string, text: string): void {
  writeFileSync(`${file}.tmp`, text);
  renameSync(`${file}.tmp`, file);
}

async function until(what: string, ok: () => boolean, limitMs = 10_000): Promise<void> {
  const end = Date.now() + limitMs;
  while (!ok()) {
    if (Date.now() > end) assert.fail(`${what} did not happen within ${limitMs} ms`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

function setUp(watch: boolean) {
  const dir = mkdtempSync(path.join(tmpdir(), 'nereid-keys-watch-'));
  const file = path.join(dir, 'keys.yaml');
  const first = createKey('first', ['inference']);
  replaceFile(file, `keys:\n${first.entry}`);
  const access = AccessControl.fromFile(file, { failureLimit: 0 });
  const { logger, records } = recordingLogger();
  const watcher = new KeysFileWatcher(file, readKeysText(file), (t) => access.replaceKeys(t), logger, {
    pollMs: 200,
    watch,
  });
  watcher.start();
  const done = (): void => {
    watcher.close();
    rmSync(dir, { recursive: true, force: true });
  };
  return { file, first, access, watcher, records, done };
}

const allowed = (access: AccessControl, secret: string): boolean =>
  access.check(`Bearer ${secret}`, 'a', 'inference', 'm') === undefined;

for (const watch of [true, false]) {
  test(`a key added to the file starts working and a removed one stops, ` +
    `without a restart (${watch ? 'watch' : 'poll only'})`, async () => {
    const s = setUp(watch);
    try {
      assert.ok(allowed(s.access, s.first.secret));
      const second = createKey('second', ['inference']);
      replaceFile(s.file, `keys:\n${s.first.entry}${second.entry}`);
      await until('the new key working', () => allowed(s.access, second.secret));
      assert.ok(allowed(s.access, s.first.secret));
      replaceFile(s.file, `keys:\n${second.entry}`);
      await until('the removed key refused', () => !allowed(s.access, s.first.secret));
      assert.ok(allowed(s.access, second.secret));
      assert.ok(s.records.some((r) => r.msg === 'keys file reloaded' && JSON.stringify(r.keys) === '["second"]'));
    } finally {
      s.done();
    }
  });
}

test('a file that no longer parses keeps the previous keys and logs file:line and why, once', async () => {
  const s = setUp(false);
  try {
    replaceFile(s.file, `keys:\n${s.first.entry}- name: broken\n  sha256: 1234\n  scopes: [health]\n`);
    await s.watcher.reload();
    await s.watcher.reload();
    assert.ok(allowed(s.access, s.first.secret));
    const errors = s.records.filter((r) => r.level === 50);
    assert.equal(errors.length, 1, JSON.stringify(s.records));
    const e = errors[0]!;
    assert.equal(e.file, s.file);
    assert.equal(e.line, 7);
    assert.equal(e.field, 'keys[1].sha256');
    assert.match(
      String(e.msg),
      new RegExp(
        `keeping the previous keys: ${s.file.replace(/[.]/g, '\\.')}:7: ` +
        `keys\\[1\\]\\.sha256: expected 64 hexadecimal digits`,
      ),
    );
    rmSync(s.file);
    await s.watcher.reload();
    assert.ok(allowed(s.access, s.first.secret));
    assert.match(String(s.records.filter((r) => r.level === 50)[1]?.msg), /cannot read the keys file/);
    // Fixed again: taken.
    const third = createKey('third', ['inference']);
    replaceFile(s.file, `keys:\n${third.entry}`);
    await s.watcher.reload();
    assert.ok(allowed(s.access, third.secret));
    assert.ok(!allowed(s.access, s.first.secret));
  } finally {
    s.done();
  }
});
