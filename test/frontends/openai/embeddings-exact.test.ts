/**
 * /v1/embeddings gives, bit for bit, the vectors computed in the test from the model's raw output (/v2 infer with
 * the same padded tokens, the same rows per model call): whether the items were made on the session thread
 * (inline_execution "off") or on the event loop ("on"), as floats and as base64, over several model calls.
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { cpSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { Tokenizer } from '@huggingface/tokenizers';
import { EXAMPLES, OpenAiServer, post } from './helpers.js';
import { call } from '../http/helpers.js';

/** Rows per model call of the copies below: the texts take two calls. */
const ROWS = 4;
const TEXTS = [
  'the quick brown fox',
  'water',
  'how many people will come over this day',
  'a',
  'sound and number',
  'look at the long word that you write',
];

const tokenizer = () =>
  new Tokenizer(
    JSON.parse(readFileSync(path.join(EXAMPLES, 'text_embedder', 'tokenizer.json'), 'utf8')),
    JSON.parse(readFileSync(path.join(EXAMPLES, 'text_embedder', 'tokenizer_config.json'), 'utf8')),
  );

/** The vectors of `ids`, computed here from the model's raw output for rows padded as /v1/embeddings pads them. */
async function referenceVectors(port: number, model: string, ids: number[][]): Promise<Float32Array[]> {
  const vectors: Float32Array[] = [];
  for (let start = 0; start < ids.length; start += ROWS) {
    const rows = ids.slice(start, start + ROWS);
    const seq = Math.max(...rows.map((r) => r.length));
    const matrix = (f: (row: number[], s: number) => number) =>
      rows.flatMap((row) => Array.from({ length: seq }, (_, s) => (s < row.length ? f(row, s) : 0)));
    const input = (name: string, data: number[]) => ({ name, datatype: 'INT64', shape: [rows.length, seq], data });
    const r = await post(port, `/v2/models/${model}/infer`, {
      inputs: [
        input('input_ids', matrix((row, s) => row[s]!)),
        input('attention_mask', matrix(() => 1)),
        input('token_type_ids', matrix(() => 0)),
      ],
    });
    assert.equal(r.status, 200, r.text);
    const out = r.json['outputs'][0] as { shape: number[]; data: number[] };
    const dim = out.shape[2]!;
    // /v2 writes each float32 exactly (as a double); the sums are doubles in token order, the means float32.
    rows.forEach((row, k) => {
      const v = new Float32Array(dim);
      for (let d = 0; d < dim; d++) {
        let sum = 0;
        for (let s = 0; s < row.length; s++) sum += Math.fround(out.data[(k * seq + s) * dim + d]!);
        v[d] = sum / row.length;
      }
      let squares = 0;
      for (const x of v) squares += x * x;
      const norm = Math.sqrt(squares);
      for (let d = 0; d < dim; d++) v[d] = v[d]! / norm;
      vectors.push(v);
    });
  }
  return vectors;
}

const NON_ASCII = 'embedder_\u00e9\u6f22';

const bits = (v: Float32Array) => Array.from(new Uint32Array(v.buffer, v.byteOffset, v.length));

describe('/v1/embeddings matches a reference from the raw output, bit for bit', () => {
  let s: OpenAiServer;
  before(async () => {
    s = await OpenAiServer.start({
      prepare: (repo) => {
        const config = readFileSync(path.join(EXAMPLES, 'text_embedder', 'config.pbtxt'), 'utf8');
        // A model name outside ASCII: the answer echoes it, so it is not all one byte a character.
        cpSync(path.join(EXAMPLES, 'text_embedder'), path.join(repo.dir, NON_ASCII), { recursive: true });
        repo.config(NON_ASCII, config.replace('name: "text_embedder"', `name: "${NON_ASCII}"`));
        for (const inline of ['off', 'on']) {
          const name = `embedder_inline_${inline}`;
          cpSync(path.join(EXAMPLES, 'text_embedder'), path.join(repo.dir, name), { recursive: true });
          const renamed = config.replace('name: "text_embedder"', `name: "${name}"`);
          repo.config(
            name,
            renamed.replace('max_batch_size: 64', `max_batch_size: ${ROWS}`) +
              `parameters { key: "inline_execution" value: { string_value: "${inline}" } }\n`,
          );
        }
      },
    });
  });
  after(() => s.stop());

  for (const inline of ['off', 'on']) {
    test(`items made ${inline === 'off' ? 'on the session thread' : 'on the event loop'}`, async () => {
      const model = `embedder_inline_${inline}`;
      const ids = TEXTS.map((t) => tokenizer().encode(t).ids);
      const want = await referenceVectors(s.httpPort, model, ids);
      const floats = await post(s.httpPort, '/v1/embeddings', { model, input: TEXTS, encoding_format: 'float' });
      const base64 = await post(s.httpPort, '/v1/embeddings', { model, input: TEXTS, encoding_format: 'base64' });
      assert.equal(floats.status, 200, floats.text);
      assert.equal(base64.status, 200, base64.text);
      for (let i = 0; i < TEXTS.length; i++) {
        assert.equal(floats.json['data'][i].index, i);
        assert.equal(base64.json['data'][i].index, i);
        const fromFloats = new Float32Array(floats.json['data'][i].embedding as number[]);
        assert.deepEqual(bits(fromFloats), bits(want[i]!), `text ${i} as floats`);
        const bytes = Buffer.from(base64.json['data'][i].embedding as string, 'base64');
        const fromBase64 = new Float32Array(bytes.buffer, bytes.byteOffset, bytes.byteLength / 4);
        assert.deepEqual(bits(fromBase64), bits(want[i]!), `text ${i} as base64`);
      }
    });
  }

  test('a model name outside ASCII: the same vectors, and a Content-Length in bytes', async () => {
    const ids = TEXTS.map((t) => tokenizer().encode(t).ids);
    const want = await referenceVectors(s.httpPort, 'embedder_inline_on', ids);
    for (const encoding_format of ['float', 'base64']) {
      // A raw socket read: a wrong length would cut the body short or leave the read waiting.
      const answer = await call(s.httpPort, 'POST', '/v1/embeddings', {
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ model: NON_ASCII, input: TEXTS, encoding_format }),
      });
      assert.equal(answer.status, 200, answer.body.toString());
      assert.equal(Number(answer.headers['content-length']), answer.body.byteLength);
      const json = JSON.parse(answer.body.toString('utf8')) as {
        model: string;
        data: { embedding: number[] | string }[];
      };
      assert.equal(json.model, NON_ASCII);
      json.data.forEach((item, i) => {
        const v =
          typeof item.embedding === 'string'
            ? new Float32Array(new Uint8Array(Buffer.from(item.embedding, 'base64')).buffer)
            : new Float32Array(item.embedding);
        assert.deepEqual(bits(v), bits(want[i]!), `text ${i} as ${encoding_format}`);
      });
    }
  });
});
