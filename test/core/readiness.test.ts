/**
 * Strict readiness (Triton's --strict-readiness, the default): not ready while a model that should be loaded is not
 * READY.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { Server } from '../../src/core/server.js';
import { HttpFrontend } from '../../src/frontends/http/index.js';
import { silentLogger } from '../../src/logger.js';
import { TempRepository } from '../helpers/repository.js';

function twoRepositoriesWithADuplicate(t: { after: (fn: () => void) => void }): [TempRepository, TempRepository] {
  const a = new TempRepository().addSub('good').addSub('dup');
  const b = new TempRepository().addSub('dup');
  t.after(() => {
    a.cleanup();
    b.cleanup();
  });
  return [a, b];
}

test('a model found in two repositories keeps the server not ready (400 on /v2/health/ready)', async (t) => {
  const [a, b] = twoRepositoriesWithADuplicate(t);
  const server = new Server({ modelRepositories: [a.dir, b.dir], exitOnError: false, logger: silentLogger });
  await server.start();
  t.after(() => server.stop());
  const index = new Map((await server.repositoryIndex()).map((e) => [e.name, e]));
  assert.equal(index.get('good')?.state, 'READY');
  assert.equal(index.get('dup')?.state, 'UNAVAILABLE');
  assert.match(index.get('dup')?.reason ?? '', /more than one model repository/);
  assert.equal(server.isReady(), false);

  const http = new HttpFrontend(server, { port: 0, address: '127.0.0.1', maxInputSize: 1 << 20, logger: silentLogger });
  const { port } = await http.start();
  t.after(() => http.stop());
  assert.equal((await fetch(`http://127.0.0.1:${port}/v2/health/ready`)).status, 400);
  assert.equal((await fetch(`http://127.0.0.1:${port}/v2/health/live`)).status, 200);
});

test('explicit mode: a duplicate asked for with --load-model keeps ' +
  'the server not ready; one not asked for does not', async (t) => {
  const [a, b] = twoRepositoriesWithADuplicate(t);
  const asked = new Server({
    modelRepositories: [a.dir, b.dir],
    modelControlMode: 'explicit',
    loadModels: ['good', 'dup'],
    exitOnError: false,
    logger: silentLogger,
  });
  await asked.start();
  t.after(() => asked.stop());
  assert.equal(asked.isReady(), false);

  const notAsked = new Server({
    modelRepositories: [a.dir, b.dir],
    modelControlMode: 'explicit',
    loadModels: ['good'],
    exitOnError: false,
    logger: silentLogger,
  });
  await notAsked.start();
  t.after(() => notAsked.stop());
  assert.equal(notAsked.isReady(), true);
});

test('with --strict-readiness=false the server is ready while a duplicate fails', async (t) => {
  const [a, b] = twoRepositoriesWithADuplicate(t);
  const server = new Server({
    modelRepositories: [a.dir, b.dir],
    exitOnError: false,
    strictReadiness: false,
    logger: silentLogger,
  });
  await server.start();
  t.after(() => server.stop());
  assert.equal(server.isReady(), true);
});
