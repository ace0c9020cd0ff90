import { test } from 'node:test';
import assert from 'node:assert/strict';
import {
  MIN_ENTRY_BYTES,
  ResponseCache,
  cacheKey,
  createResponseCache,
  parseCacheConfigFlags,
} from '../../src/cache/response-cache.js';
import type { Tensor } from '../../src/tensor/tensor.js';

function t(name: string, values: number[], shape = [values.length], datatype: 'INT32' | 'FP32' = 'INT32'): Tensor {
  const data = datatype === 'INT32' ? new Int32Array(values) : new Float32Array(values);
  return { name, datatype, shape, data: new Uint8Array(data.buffer) };
}

test('the key covers model, version and its load, input names, types, ' +
  'shapes, bytes and requested outputs, not input order', () => {
  const base = cacheKey('m', 1, [t('A', [1, 2]), t('B', [3])], ['OUT']);
  assert.equal(cacheKey('m', 1, [t('B', [3]), t('A', [1, 2])], ['OUT']), base, 'inputs are taken in name order');
  const differing = [
    cacheKey('n', 1, [t('A', [1, 2]), t('B', [3])], ['OUT']),
    cacheKey('m', 2, [t('A', [1, 2]), t('B', [3])], ['OUT']),
    cacheKey('m', 1, [t('A', [1, 3]), t('B', [3])], ['OUT']),
    cacheKey('m', 1, [t('A', [1, 2], [2, 1]), t('B', [3])], ['OUT']),
    cacheKey('m', 1, [t('A', [1, 2], [2], 'FP32'), t('B', [3])], ['OUT']),
    cacheKey('m', 1, [t('C', [1, 2]), t('B', [3])], ['OUT']),
    cacheKey('m', 1, [t('A', [1, 2]), t('B', [3])], ['OUT', 'OUT2']),
    cacheKey('m', 1, [t('A', [1, 2]), t('B', [3])], ['OUT'], 2),
  ];
  for (const k of differing) assert.notEqual(k, base);
  assert.equal(new Set(differing).size, differing.length);
});

test('entries are evicted least recently used first within the byte budget', () => {
  const one = { outputs: [t('OUT', new Array(16).fill(1))] };
  const probe = new ResponseCache(1 << 20);
  probe.insert('k1', one, 'm', 1);
  const entryBytes = probe.utilization * (1 << 20);
  const cache = new ResponseCache(Math.floor(entryBytes * 3.5));
  cache.insert('a', one, 'm', 1);
  cache.insert('b', one, 'm', 1);
  cache.insert('c', one, 'm', 1);
  assert.equal(cache.entryCount, 3);
  assert.ok(cache.lookup('a'), 'a becomes the most recently used');
  cache.insert('d', one, 'm', 1);
  assert.equal(cache.entryCount, 3);
  assert.equal(cache.counters.evictions, 1);
  assert.equal(cache.lookup('b'), undefined, 'b was the least recently used');
  assert.ok(cache.lookup('a'));
  assert.ok(cache.lookup('c'));
  assert.ok(cache.lookup('d'));
  assert.equal(cache.counters.hits, 4);
  assert.equal(cache.counters.misses, 1);
  assert.equal(cache.counters.lookups, 5);
  assert.ok(cache.utilization > 0.8 && cache.utilization <= 1);
});

test('a response larger than the whole cache is not stored and evicts nothing', () => {
  const cache = new ResponseCache(MIN_ENTRY_BYTES + 100);
  assert.equal(cache.insert('small', { outputs: [t('O', [1])] }, 'm', 1), true);
  assert.equal(cache.insert('big', { outputs: [t('O', new Array(1000).fill(1))] }, 'm', 1), false);
  assert.equal(cache.entryCount, 1);
  assert.ok(cache.lookup('small'));
});

test('a stored response owns its bytes: later changes to the backend buffer do not reach it', () => {
  const cache = new ResponseCache(1 << 16);
  const out = t('OUT', [1, 2, 3]);
  cache.insert('k', { outputs: [out] }, 'm', 1);
  out.data.fill(0);
  assert.deepEqual([...new Int32Array(new Uint8Array(cache.lookup('k')!.outputs[0]!.data).buffer)], [1, 2, 3]);
});

test('an unloaded version drops only its own entries', () => {
  const cache = new ResponseCache(1 << 16);
  cache.insert('a', { outputs: [t('O', [1])] }, 'm', 1);
  cache.insert('b', { outputs: [t('O', [1])] }, 'm', 2);
  cache.insert('c', { outputs: [t('O', [1])] }, 'other', 1);
  cache.dropVersion('m', 1);
  assert.equal(cache.lookup('a'), undefined);
  assert.ok(cache.lookup('b'));
  assert.ok(cache.lookup('c'));
});

test('cache configuration: tritonserver flag formats and clear start-up errors', () => {
  assert.equal(createResponseCache(undefined), undefined);
  assert.equal(createResponseCache(parseCacheConfigFlags(['local,size=1048576']))!.size, 1048576);
  assert.throws(
    () => parseCacheConfigFlags(['size=100']),
    /No cache specified. --cache-config option format is <cache name>,<setting>=<value>. Got size=100/,
  );
  assert.throws(
    () => parseCacheConfigFlags(['local,size']),
    /--cache-config option format is '<cache name>,<setting>=<value>'. Got local,size/,
  );
  assert.throws(() => parseCacheConfigFlags(['local,size=']), /option format/);
  assert.throws(() => createResponseCache({ local: { size: 'lots' } }), (e: Error & { code?: string }) => {
    assert.equal(e.code, 'NRD_CACHE_CONFIG');
    assert.match(e.message, /size=lots: the size must be a whole number of bytes/);
    return true;
  });
  assert.throws(() => createResponseCache({ local: { size: '-5' } }), /whole number of bytes/);
  assert.throws(
    () => createResponseCache({ local: { size: '10' } }),
    new RegExp(`could not hold a single response; the smallest entry takes ${MIN_ENTRY_BYTES} bytes`),
  );
  assert.throws(
    () => createResponseCache({ local: {} as Record<string, string> }),
    /didn't contain a valid 'size' field/,
  );
  assert.throws(() => createResponseCache({ local: { size: '1000', ttl: '5' } }), /no setting 'ttl'/);
  assert.throws(() => createResponseCache({ redis: { host: 'x' } }), /cache 'redis' is not available/);
});
