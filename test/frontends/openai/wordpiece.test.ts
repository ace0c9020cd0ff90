/** The WordPiece fast path gives the ids @huggingface/tokenizers gives, and hands it every text it does not cover. */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { Tokenizer } from '@huggingface/tokenizers';
import { FastWordPiece } from '../../../src/frontends/openai/wordpiece.js';
import { seededRandom } from '../../helpers/onnx-builder.js';
import { EXAMPLES } from './helpers.js';

const json = JSON.parse(readFileSync(path.join(EXAMPLES, 'text_embedder', 'tokenizer.json'), 'utf8')) as Record<
  string,
  unknown
>;
const library = new Tokenizer(json, {});
const fast = FastWordPiece.from(json)!;

const TEXTS = [
  'Hello, World!',
  'the quick brown fox jumps over the lazy dog',
  "It's 3:45pm -- e-mail me @ home (or don't).",
  '  leading and trailing spaces  ',
  'tabs\tand\nnewlines\r\nand\u0007bells\u0000nul',
  'UPPER lower MiXeD',
  'unknownwordzzqx and qqqqq',
  'a'.repeat(150),
  'x'.repeat(99) + ' ' + 'y'.repeat(100) + ' ' + 'z'.repeat(101),
  '[]{}|~`^\\<>=+*#$%&_',
  'numbers 12345 and 3.14159',
  'Mixed\u0001CASE\u0002word, [brackets] and [SEP-like] [CLS',
  'THE END.',
  '',
];

test('ASCII texts: the same ids, with and without special tokens', () => {
  const rand = seededRandom(7);
  const alphabet = 'abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789 .,!?-\'"()\t\n#';
  const random = Array.from({ length: 300 }, () =>
    Array.from({ length: Math.floor(rand() * 60) }, () => alphabet[Math.floor(rand() * alphabet.length)]).join(''),
  );
  for (const text of [...TEXTS, ...random]) {
    for (const special of [true, false]) {
      assert.deepEqual(
        fast.encode(text, special),
        library.encode(text, { add_special_tokens: special }).ids,
        JSON.stringify(text),
      );
    }
  }
});

test('texts with non-ASCII characters or an added token go to the library', () => {
  assert.equal(fast.encode('café', true), undefined);
  assert.equal(fast.encode('日本語', true), undefined);
  assert.equal(fast.encode('a [SEP] b', true), undefined);
});

test('tokenizers of another kind get no fast path', () => {
  const tiny = JSON.parse(readFileSync(path.join(EXAMPLES, 'tiny_llm', 'tokenizer.json'), 'utf8')) as Record<
    string,
    unknown
  >;
  assert.equal(FastWordPiece.from(tiny), undefined);
  assert.equal(FastWordPiece.from({ ...json, normalizer: { type: 'Lowercase' } }), undefined);
  assert.equal(FastWordPiece.from({ ...json, post_processor: { type: 'RobertaProcessing' } }), undefined);
});

test('sentences of whole vocabulary words in mixed case: the same ids, lowercasing or not', () => {
  const vocab = Object.keys((json['model'] as { vocab: Record<string, number> }).vocab);
  const rand = seededRandom(23);
  const pick = () => vocab[Math.floor(rand() * vocab.length)]!;
  const mixed = (w: string) =>
    [...w].map((c) => (rand() < 0.3 ? c.toUpperCase() : c)).join('');
  const texts = Array.from({ length: 300 }, () =>
    Array.from({ length: 1 + Math.floor(rand() * 12) }, () => (rand() < 0.5 ? mixed(pick()) : pick())).join(
      rand() < 0.8 ? ' ' : ', ',
    ),
  );
  const normalizer = json['normalizer'] as Record<string, unknown>;
  const cased = { ...json, normalizer: { ...normalizer, lowercase: false } };
  const casedFast = FastWordPiece.from(cased)!;
  const casedLibrary = new Tokenizer(cased, {});
  for (const text of texts) {
    if ([...text].some((c) => c.charCodeAt(0) > 0x7e)) continue;
    for (const [f, lib] of [
      [fast, library],
      [casedFast, casedLibrary],
    ] as const) {
      const want = lib.encode(text, { add_special_tokens: true }).ids;
      const got = f.encode(text, true);
      // A text holding an added token's text goes to the library.
      if (got === undefined) continue;
      assert.deepEqual(got, want, JSON.stringify(text));
    }
  }
});
