import { test } from 'node:test';
import assert from 'node:assert/strict';
import { deflateSync, gzipSync } from 'node:zlib';
import { type InflateProgress, gzipDeclaredSize, inflateBody } from '../../../src/frontends/http/body.js';
import { NereidError } from '../../../src/errors.js';

const MiB = 1024 * 1024;
const LIMIT = MiB;
const TOO_LARGE = `Decompressed data size exceeds the maximum allowed value ` +
  `of ${LIMIT} bytes. Use --http-max-input-size to increase the limit.`;

/** 64 MiB of spaces: a bomb of about 64 KiB that inflates to 64 times the limit. */
const spaces = Buffer.alloc(64 * MiB, 0x20);
const gzipBomb = gzipSync(spaces);
const deflateBomb = deflateSync(spaces);

function fresh(): InflateProgress {
  return { consumed: 0, produced: 0 };
}

async function refused(body: Buffer, progress: InflateProgress): Promise<void> {
  await assert.rejects(inflateBody(body, LIMIT, progress), (err: unknown) => {
    assert.ok(err instanceof NereidError);
    assert.equal(err.code, 'NRD_BODY_TOO_LARGE');
    assert.equal(err.message, TOO_LARGE);
    return true;
  });
}

test('the gzip trailer gives the size a body declares', () => {
  assert.equal(gzipDeclaredSize(gzipBomb), 64 * MiB);
  assert.equal(gzipDeclaredSize(gzipSync(Buffer.from('hello'))), 5);
  assert.equal(gzipDeclaredSize(deflateBomb), undefined, 'zlib format has no size trailer');
  assert.equal(gzipDeclaredSize(Buffer.from([0x1f, 0x8b])), undefined, 'too short for a header and trailer');
});

test('a gzip bomb that declares more than the limit is refused without inflating a byte', async () => {
  const progress = fresh();
  await refused(gzipBomb, progress);
  assert.deepEqual(progress, { consumed: 0, produced: 0 });
});

test('a gzip bomb whose trailer lies is abandoned at the limit, having read a small part of it', async () => {
  const liar = Buffer.from(gzipBomb);
  liar.writeUInt32LE(1000, liar.byteLength - 4);
  const progress = fresh();
  await refused(liar, progress);
  // A first attempt sized from the trailer (64 KiB at least), then one with room for the limit, each stopped one byte
  // past it.
  assert.ok(progress.produced <= 64 * 1024 + 1 + LIMIT + 1, `produced ${progress.produced}`);
  assert.ok(progress.produced > LIMIT, `produced ${progress.produced}`);
  assert.ok(progress.consumed < liar.byteLength / 16, `consumed ${progress.consumed} of ${liar.byteLength}`);
});

test('a deflate bomb (no trailer) is abandoned at the limit, having read a small part of it', async () => {
  const progress = fresh();
  await refused(deflateBomb, progress);
  assert.ok(progress.produced <= 2 * (LIMIT + 1), `produced ${progress.produced}`);
  assert.ok(
    progress.consumed < deflateBomb.byteLength / 16,
    `consumed ${progress.consumed} of ${deflateBomb.byteLength}`,
  );
});

test('bodies within the limit inflate whole, in one attempt when the size is known or guessed', async () => {
  const text = Buffer.from(
    JSON.stringify({ inputs: [{ name: 'INPUT0', datatype: 'INT32', shape: [1, 4], data: [1, 2, 3, 4] }] }),
  );
  for (const packed of [gzipSync(text), deflateSync(text)]) {
    const progress = fresh();
    assert.deepEqual(await inflateBody(packed, LIMIT, progress), text);
    assert.equal(progress.produced, text.byteLength);
    assert.equal(progress.consumed, packed.byteLength);
  }
  // Exactly the limit fits.
  const full = Buffer.alloc(LIMIT, 0x61);
  assert.equal((await inflateBody(gzipSync(full), LIMIT)).byteLength, LIMIT);
  assert.equal((await inflateBody(deflateSync(full), LIMIT)).byteLength, LIMIT);
});

test('a body that inflates past the first guess but within the limit takes a second attempt and is whole', async () => {
  // 512 KiB of one byte deflates about 1,000 to 1, far past the 16x guess.
  const body = Buffer.alloc(512 * 1024, 0x62);
  const progress = fresh();
  const out = await inflateBody(deflateSync(body), LIMIT, progress);
  assert.ok(out.equals(body));
  assert.ok(progress.produced > body.byteLength, 'the first attempt stopped part way');
  // A trailer that understates the size is corrupt: the second attempt inflates it all and zlib's length check refuses
  // it.
  const liar = gzipSync(body);
  liar.writeUInt32LE(10, liar.byteLength - 4);
  await assert.rejects(inflateBody(liar, LIMIT), /failed to decompress the request body: incorrect length check/);
});

test('an empty or corrupt body is a malformed body', async () => {
  await assert.rejects(inflateBody(Buffer.alloc(0), LIMIT), /nothing to be decompressed/);
  await assert.rejects(inflateBody(Buffer.from('not compressed at all'), LIMIT), (err: unknown) => {
    assert.ok(err instanceof NereidError);
    assert.equal(err.code, 'NRD_MALFORMED_BODY');
    assert.match(err.message, /^failed to decompress the request body: /);
    return true;
  });
});
