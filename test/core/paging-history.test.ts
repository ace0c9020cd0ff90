/**
 * --model-memory-history: the paging scores written to a file and read back after a restart, what a damaged
 * file or a path that cannot be written does, and (in the simulation of the paging benchmark's request flow)
 * what the scores kept from a previous run change from the first request.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdirSync, mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { PagingPolicy } from '../../src/core/paging-policy.js';
import { PagingHistory, parsePagingHistory } from '../../src/core/paging-history.js';
import { NereidError } from '../../src/errors.js';
import { recordingLogger } from '../helpers/recording-logger.js';
import { simulate } from './paging-simulation.js';

function tempDir(t: { after(fn: () => void): void }): string {
  const dir = mkdtempSync(path.join(tmpdir(), 'nereid-history-'));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  return dir;
}

test('the scores go to the file and come back after a restart, decayed as they were', async (t) => {
  const file = path.join(tempDir(t), 'paging.json');
  const { logger, records } = recordingLogger();
  const before = new PagingPolicy();
  const history = new PagingHistory(file, before, logger);
  await history.open();
  assert.ok(records.some((r) => r['msg'] === 'no paging history yet: the scores start from the first request'));
  for (let i = 0; i < 300; i++) before.recordUse(i % 3 === 0 ? 'cold' : 'hot');
  await history.close();
  const doc = JSON.parse(readFileSync(file, 'utf8')) as Record<string, unknown>;
  assert.equal(doc['nereid_paging_history'], 1);
  assert.equal(doc['half_life_requests'], before.halfLifeRequests);
  assert.deepEqual(Object.keys(doc['scores'] as object), ['hot', 'cold'], 'most requested first');

  const after = new PagingPolicy();
  await new PagingHistory(file, after, logger).open();
  for (const m of ['hot', 'cold']) assert.ok(Math.abs(after.score(m) - before.score(m)) < 1e-3, m);
  assert.equal(after.score('never'), 0);
  // The next request decays the restored scores like any earlier request.
  after.recordUse('cold');
  assert.ok(after.score('hot') < before.score('hot'));
  assert.ok(Math.abs(after.score('cold') - (before.score('cold') * 2 ** (-1 / 2000) + 1)) < 1e-3);
  // No temporary file is left beside it.
  assert.deepEqual(readdirSync(path.dirname(file)), ['paging.json']);
});

test('a periodic save writes only when requests came, and a failed save is logged, the server goes on', async (t) => {
  const dir = tempDir(t);
  const file = path.join(dir, 'paging.json');
  const { logger, records } = recordingLogger();
  const policy = new PagingPolicy();
  const history = new PagingHistory(file, policy, logger);
  await history.open();
  const first = readFileSync(file, 'utf8');
  await history.save();
  assert.equal(readFileSync(file, 'utf8'), first, 'no request, nothing written');
  policy.recordUse('m');
  rmSync(dir, { recursive: true });
  await history.save();
  const warning = records.find((r) => r['msg'] === 'paging history not saved');
  assert.ok(warning, JSON.stringify(records));
  assert.match(String(warning['err']), /ENOENT/);
  mkdirSync(dir);
  await history.close();
  assert.ok(JSON.parse(readFileSync(file, 'utf8')).scores.m > 0.99, 'written once the folder is back');
});

test('a file that does not parse is logged with what is wrong, and the server starts without it', async (t) => {
  const dir = tempDir(t);
  const cases: Array<[string, RegExp]> = [
    ['{"nereid_paging_history": 1, "scores": {', /not JSON/],
    ['[1, 2]', /not a JSON object/],
    ['{"scores": {}}', /'nereid_paging_history' is undefined, this server reads 1/],
    ['{"nereid_paging_history": 2, "scores": {}}', /'nereid_paging_history' is 2, this server reads 1/],
    ['{"nereid_paging_history": 1, "scores": [3]}', /'scores' is not an object of model names and numbers/],
    ['{"nereid_paging_history": 1, "scores": {"a": 2, "b": "many"}}', /'scores.b' is "many", not a number of 0/],
    ['{"nereid_paging_history": 1, "scores": {"a": -1}}', /'scores.a' is -1, not a number of 0 or more/],
  ];
  for (const [text, why] of cases) {
    assert.throws(() => parsePagingHistory(text), why, text);
    const file = path.join(dir, 'paging.json');
    writeFileSync(file, text);
    const { logger, records } = recordingLogger();
    const policy = new PagingPolicy();
    const history = new PagingHistory(file, policy, logger);
    await history.open();
    const warning = records.find((r) => r['level'] === 40);
    assert.ok(warning, text);
    assert.equal(warning['file'], file);
    assert.match(String(warning['err']), why);
    assert.equal(policy.score('a'), 0, 'nothing restored from a file that does not parse');
    await history.close();
    assert.deepEqual(parsePagingHistory(readFileSync(file, 'utf8')), new Map(), 'written again, valid');
  }
});

test('a path that cannot be read or written stops the start, naming the flag and the path', async (t) => {
  const dir = tempDir(t);
  const { logger } = recordingLogger();
  const missing = path.join(dir, 'no-such-folder', 'paging.json');
  await assert.rejects(new PagingHistory(missing, new PagingPolicy(), logger).open(), (err: unknown) => {
    assert.ok(err instanceof NereidError);
    assert.match(err.message, /^--model-memory-history: cannot write '.*no-such-folder\/paging\.json': .*ENOENT/);
    return true;
  });
  await assert.rejects(
    new PagingHistory(dir, new PagingPolicy(), logger).open(),
    /^NereidError: --model-memory-history: cannot read '.*': EISDIR/,
  );
});

// The paging benchmark's flow (test/core/paging-simulation.ts) after a restart: the scores of a previous run of the
// same popularity (another seed, 1,000 or 2,700 requests) restored, with nothing loaded (explicit mode, as the
// benchmark) or the models they rank first loaded (none or poll mode loads them last at start). From a cold start the
// same streams unload the five hottest many times in their first few hundred requests
// (docs/paging.md#which-model-goes).
test('simulated restart with the previous scores: the five hottest are never unloaded, from the first request', () => {
  const options = { requests: 3000, graceMs: 500, colderWaitMs: 0, freshMs: 0, loadWaitMs: 30_000 };
  let coldUnloads = 0;
  for (const places of [7, 8]) {
    for (let seed = 1; seed <= 8; seed++) {
      for (const previous of [1000, 2700]) {
        let ran: PagingPolicy | undefined;
        const policy = () => (ran = new PagingPolicy());
        simulate({ ...options, seed: seed + 1000, places, requests: previous, policy });
        const scores = ran!.scores();
        const ranked = [...scores].sort((a, b) => b[1] - a[1]).map(([name]) => name);
        const restored = () => {
          const p = new PagingPolicy();
          p.restore(scores);
          return p;
        };
        for (const loaded of [[], ranked.slice(0, places)]) {
          const r = simulate({ ...options, seed, places, loaded, policy: restored });
          const at = `${places} places, seed ${seed}, ${previous} requests before, ${loaded.length} loaded`;
          assert.deepEqual(r.hotEvictions, [], `${at}: the five hottest unloaded at requests ${r.hotEvictions}`);
          assert.equal(r.failed, 0, at);
        }
      }
      coldUnloads += simulate({ ...options, seed, places }).hotEvictions.length;
    }
  }
  assert.ok(coldUnloads > 40, `from a cold start the same streams unloaded the five hottest ${coldUnloads} times`);
});
