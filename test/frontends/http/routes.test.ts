/**
 * The HTTP route table against Triton's routing: Triton's HTTP server tries
 * the regular expressions below in this order (no percent-decoding, the
 * whole path must match). For a few hundred paths built from Triton's
 * segments, the table must find the same endpoint group (or none), then
 * apply the restricted-API check before the method check.
 */
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { HttpFrontend } from '../../../src/frontends/http/index.js';
import { Router } from '../../../src/frontends/http/router.js';
import { silentLogger } from '../../../src/logger.js';
import type { RepositoryIndexEntry } from '../../../src/types/api.js';
import { EchoServer } from './echo-server.js';
import { call, json } from './helpers.js';

const MODEL =
  new RegExp(
    String.raw`^\/v2\/models\/([^/]+)(?:\/versions\/([^/]+))?(?:\/(infer|generate|generate_stream|ready|config|stats|` +
    String.raw`trace\/setting))?$`,
  );
const HEALTH = /^\/v2\/health\/(live|ready)$/;
const SHM = /^\/v2\/(?:system|cuda)sharedmemory(?:\/region\/([^/]+))?\/(status|register|unregister)$/;
const REPOSITORY = /^\/v2\/repository(?:\/([^/]+))?\/(index|models\/([^/]+)\/(load|unload))$/;

/** Triton's endpoint group for a path, and the methods it takes; undefined: 404. */
function triton(path: string): { category: string; methods: string[] } | undefined {
  const GET = ['GET'];
  const POST = ['POST'];
  if (path === '/v2/models/stats') return { category: 'statistics', methods: GET };
  if (path === '/v2/logging') return { category: 'logging', methods: ['GET', 'POST'] };
  const m = MODEL.exec(path);
  if (m !== null) {
    switch (m[3]) {
      case 'infer':
      case 'generate':
      case 'generate_stream':
        return { category: 'inference', methods: POST };
      case 'ready':
        return { category: 'health', methods: GET };
      case 'config':
        return { category: 'model-config', methods: GET };
      case 'stats':
        return { category: 'statistics', methods: GET };
      case 'trace/setting':
        if (m[2] === undefined) return { category: 'trace', methods: ['GET', 'POST'] };
        break;
      default:
        return { category: 'metadata', methods: GET };
    }
  }
  if (path === '/v2') return { category: 'metadata', methods: GET };
  if (HEALTH.test(path)) return { category: 'health', methods: GET };
  const shm = SHM.exec(path);
  if (shm !== null) return { category: 'shared-memory', methods: shm[2] === 'status' ? GET : POST };
  if (REPOSITORY.test(path)) return { category: 'model-repository', methods: POST };
  if (path === '/v2/trace/setting') return { category: 'trace', methods: ['GET', 'POST'] };
  return undefined;
}

const CATEGORIES = [
  'health',
  'metadata',
  'inference',
  'shared-memory',
  'model-config',
  'model-repository',
  'statistics',
  'trace',
  'logging',
];

const SHAPES = [
  '/v2',
  '/v2/health/live',
  '/v2/health/ready',
  '/v2/models/m',
  '/v2/models/m/versions/1',
  '/v2/models/m/versions/1/infer',
  '/v2/models/m/generate_stream',
  '/v2/models/m/versions/1/ready',
  '/v2/models/m/config',
  '/v2/models/m/versions/1/stats',
  '/v2/models/stats',
  '/v2/models/m/trace/setting',
  '/v2/trace/setting',
  '/v2/logging',
  '/v2/systemsharedmemory/status',
  '/v2/systemsharedmemory/region/r/register',
  '/v2/cudasharedmemory/region/r/unregister',
  '/v2/repository/index',
  '/v2/repository/r/index',
  '/v2/repository/models/m/load',
  '/v2/repository/r/models/m/unload',
];
const WORDS = [
  'v2',
  'models',
  'versions',
  'stats',
  'infer',
  'generate',
  'ready',
  'config',
  'trace',
  'setting',
  'health',
  'live',
  'repository',
  'index',
  'load',
  'unload',
  'region',
  'status',
  'register',
  'systemsharedmemory',
  'logging',
  'm',
  '1',
  '',
  '%20',
];

/** Every shape, and variations of each: a segment replaced, dropped or doubled, a trailing slash. */
function paths(): string[] {
  let seed = 7;
  const random = (n: number): number => {
    seed = (seed * 1103515245 + 12345) % 2147483648;
    return seed % n;
  };
  const out = new Set<string>(SHAPES);
  for (const shape of SHAPES) {
    out.add(`${shape}/`);
    const segments = shape.slice(1).split('/');
    for (let i = 0; i < segments.length; i++) {
      out.add('/' + segments.filter((_, k) => k !== i).join('/'));
      out.add('/' + [...segments.slice(0, i + 1), segments[i], ...segments.slice(i + 1)].join('/'));
      for (let k = 0; k < 6; k++) {
        const copy = [...segments];
        copy[i] = WORDS[random(WORDS.length)]!;
        out.add('/' + copy.join('/'));
      }
    }
  }
  for (const odd of [
    '',
    '*',
    'v2',
    '/v2/models',
    '/v2/models/',
    '//v2',
    '/v2/repository/models/index',
    '/v2/repository/index/index',
    '/v2/repository/models/models/load',
    '/v2/models/versions/1',
    '/v2/models/m/versions/infer',
    '/v2/models/m/versions/1/trace/setting',
    '/V2',
  ]) {
    out.add(odd);
  }
  return [...out];
}

let core: IndexRecorder;
let frontend: HttpFrontend;
let port: number;

class IndexRecorder extends EchoServer {
  readonly indexCalls: Array<string | undefined> = [];
  override async repositoryIndex(readyOnly?: boolean, repository?: string): Promise<RepositoryIndexEntry[]> {
    this.indexCalls.push(repository);
    return [];
  }
}

before(async () => {
  core = new IndexRecorder();
  frontend = new HttpFrontend(core, {
    port: 0,
    address: '127.0.0.1',
    maxInputSize: 1 << 20,
    logger: silentLogger,
    restrictedApis: CATEGORIES.map((c) => `${c}:key-${c}=yes`),
  });
  ({ port } = await frontend.start());
});

after(async () => {
  await frontend.stop();
});

test('every path reaches the endpoint group Triton routes it to; restriction comes before the method', async () => {
  const checked = { routed: 0, notFound: 0 };
  for (const path of paths()) {
    if (!path.startsWith('/')) continue; // not a request target node:http sends
    const want = triton(path);
    // A method no endpoint takes, without any header: 404, or 403 naming the group's header.
    const bare = await call(port, 'DELETE', path);
    if (want === undefined) {
      assert.equal(bare.status, 404, `${path}: ${bare.body}`);
      assert.deepEqual(json(bare), { error: 'Not Found' });
      checked.notFound++;
      continue;
    }
    assert.equal(bare.status, 403, `${path}: ${bare.body}`);
    assert.deepEqual(json(bare), { error: `This API is restricted, expecting header 'key-${want.category}'` }, path);
    // With the header, the wrong method is 405 and a right one is not.
    const headers = { [`key-${want.category}`]: 'yes' };
    const wrong = await call(port, 'DELETE', path, { headers });
    assert.equal(wrong.status, 405, path);
    assert.deepEqual(json(wrong), { error: 'Method Not Allowed' });
    const right = await call(port, want.methods[0]!, path, {
      headers,
      body: want.methods[0] === 'POST' ? '{}' : undefined,
    });
    // Its handler answered (an unknown model 'm' is a 404 of its own, with Triton's text for it).
    assert.notEqual(right.status, 405, path);
    assert.notEqual(right.status, 403, path);
    assert.notEqual(right.body.toString(), '{"error":"Not Found"}', path);
    checked.routed++;
  }
  assert.ok(checked.routed >= 40 && checked.notFound >= 40, JSON.stringify(checked));
});

test('a literal segment that leads nowhere gives way to a name: ' +
  'the index of a repository called "models"', async () => {
  core.indexCalls.length = 0;
  const headers = { 'key-model-repository': 'yes' };
  for (const path of ['/v2/repository/models/index', '/v2/repository/index/index', '/v2/repository/index']) {
    const r = await call(port, 'POST', path, { headers, body: '{}' });
    assert.equal(r.status, 200, path);
  }
  assert.deepEqual(core.indexCalls, ['models', 'index', undefined]);
});

test('the router matches whole paths, tries literals first and refuses a pattern twice', () => {
  const router = new Router<string>()
    .add('/a/:x[/v/:y]/end', 'end')
    .add('/a/b', 'b')
    .add('/a/:x', 'x');
  assert.deepEqual(router.match('/a/b'), { route: 'b', params: {} });
  assert.deepEqual(router.match('/a/b/end'), { route: 'end', params: { x: 'b' } });
  assert.deepEqual(router.match('/a/q/v/2/end'), { route: 'end', params: { x: 'q', y: '2' } });
  assert.deepEqual(router.match('/a/__proto__'), { route: 'x', params: { x: '__proto__' } });
  for (const miss of ['/a', '/a/', '/a//end', '/a/b/', 'a/b', '', '/a/q/v/end'])
    assert.equal(router.match(miss), undefined, miss);
  // Recent paths are answered from memory; many different ones, or long ones, still match right.
  for (let i = 0; i < 1000; i++)
    assert.deepEqual(router.match(`/a/m${i}/end`), { route: 'end', params: { x: `m${i}` } });
  assert.deepEqual(router.match('/a/m1/end'), { route: 'end', params: { x: 'm1' } });
  const long = 'n'.repeat(5000);
  assert.deepEqual(router.match(`/a/${long}`), { route: 'x', params: { x: long } });
  assert.deepEqual(router.match(`/a/${long}`), { route: 'x', params: { x: long } });
  assert.equal(router.match('/a/q/v/end'), undefined);
  assert.throws(() => router.add('/a/b', 'again'), /added twice/);
  assert.throws(() => router.add('/a/:z/other', 'z'), /':z' where ':x' is/);
});
