import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { createLogger, formatTextLine, reconfigureLogger } from '../src/logger.js';

function tempFile(t: { after: (fn: () => void) => void }): string {
  const dir = mkdtempSync(path.join(tmpdir(), 'nereid-log-'));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  return path.join(dir, 'sub', 'server.log');
}

test("Triton's default and ISO8601 line formats", () => {
  const record = {
    level: 40,
    time: '2026-12-01T10:22:23.123Z',
    pid: 4242,
    msg: 'model loaded',
    model: 'simple',
    reason: 'has spaces',
  };
  assert.match(
    formatTextLine(record, 'default'),
    /^W1201 \d\d:22:23\.123000 4242 nereid\] model loaded model=simple reason="has spaces"\n$/,
  );
  assert.equal(
    formatTextLine(record, 'ISO8601'),
    '2026-12-01T10:22:23Z W 4242 nereid] model loaded model=simple reason="has spaces"\n',
  );
  assert.match(formatTextLine({ ...record, level: 50 }, 'ISO8601'), / E 4242 nereid\]/);
  assert.match(formatTextLine({ ...record, level: 20 }, 'default'), /^V1201 /);
});

test('JSON lines carry an ISO timestamp and each key once, written to --log-file', (t) => {
  const file = tempFile(t);
  const logger = createLogger({ level: 'info', format: 'json', destination: file });
  logger
    .child({ model: 'simple', version: 1 })
    .child({ model: 'simple', instance: 'simple_0' })
    .info('instance started');
  const line = readFileSync(file, 'utf8').trim();
  assert.equal(line.match(/"model"/g)?.length, 1, line);
  const record = JSON.parse(line) as Record<string, unknown>;
  assert.match(String(record['time']), /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/);
  assert.equal(record['instance'], 'simple_0');
  assert.equal(record['msg'], 'instance started');
});

test('a file is not a terminal: JSON unless a format is asked for', (t) => {
  const file = tempFile(t);
  createLogger({ level: 'info', destination: file }).info('plain');
  const iso = tempFile(t);
  createLogger({ level: 'info', destination: iso, format: 'ISO8601' }).info('readable');
  assert.doesNotThrow(() => JSON.parse(readFileSync(file, 'utf8')));
  assert.match(readFileSync(iso, 'utf8'), /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ I \d+ nereid\] readable\n$/);
});

test("Triton's switches are independent: --log-error=false drops errors and keeps info", (t) => {
  const file = tempFile(t);
  const logger = createLogger({ switches: { error: false }, format: 'json', destination: file });
  logger.error('hidden');
  logger.info('shown');
  logger.debug('verbose off');
  reconfigureLogger(logger, { switches: { verbose: 1, error: true } });
  logger.debug('verbose on');
  logger.error('error on');
  const msgs = readFileSync(file, 'utf8').trim().split('\n').map((l) => (JSON.parse(l) as { msg: string }).msg);
  assert.deepEqual(msgs, ['shown', 'verbose on', 'error on']);
});
