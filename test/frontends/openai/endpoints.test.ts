/**
 * The OpenAI endpoints with the official `openai` client against a real
 * server: the model list, embeddings (floats, base64, batched, token ids),
 * completions and chat, streamed and not, with usage.
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { cpSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { Tokenizer } from '@huggingface/tokenizers';
import { EXAMPLES, OpenAiServer, post } from './helpers.js';

const embedderTokenizer = () =>
  new Tokenizer(
    JSON.parse(readFileSync(path.join(EXAMPLES, 'text_embedder', 'tokenizer.json'), 'utf8')),
    JSON.parse(readFileSync(path.join(EXAMPLES, 'text_embedder', 'tokenizer_config.json'), 'utf8')),
  );

/**
 * The embedding of `text` computed here from /v2 infer's per-token output: mean over the tokens, then L2-normalised.
 */
async function embeddingFromV2(port: number, ids: number[]): Promise<number[]> {
  const n = ids.length;
  const r = await post(port, '/v2/models/text_embedder/infer', {
    inputs: [
      { name: 'input_ids', datatype: 'INT64', shape: [1, n], data: ids },
      { name: 'attention_mask', datatype: 'INT64', shape: [1, n], data: ids.map(() => 1) },
      { name: 'token_type_ids', datatype: 'INT64', shape: [1, n], data: ids.map(() => 0) },
    ],
  });
  assert.equal(r.status, 200, r.text);
  const out = r.json['outputs'][0] as { shape: number[]; data: number[] };
  const dim = out.shape[2]!;
  const mean = new Array<number>(dim).fill(0);
  for (let s = 0; s < n; s++) for (let d = 0; d < dim; d++) mean[d]! += out.data[s * dim + d]! / n;
  const norm = Math.hypot(...mean);
  return mean.map((x) => x / norm);
}

function assertClose(actual: readonly number[], expected: readonly number[], tolerance = 1e-5): void {
  assert.equal(actual.length, expected.length);
  for (let i = 0; i < actual.length; i++) {
    assert.ok(Math.abs(actual[i]! - expected[i]!) <= tolerance, `element ${i}: ${actual[i]} vs ${expected[i]}`);
  }
}

describe('OpenAI endpoints with the openai client', () => {
  let s: OpenAiServer;
  before(async () => {
    s = await OpenAiServer.start({
      fixtures: ['text_stats', 'batch_llm'],
      prepare: (repo) => {
        repo.addSub('simple');
        // The embedder again under a name that is not ASCII (nor Latin-1).
        cpSync(path.join(EXAMPLES, 'text_embedder'), path.join(repo.dir, 'вектор'), { recursive: true });
        const config = readFileSync(path.join(EXAMPLES, 'text_embedder', 'config.pbtxt'), 'utf8');
        repo.config('вектор', config.replace('name: "text_embedder"', 'name: "вектор"'));
      },
    });
  });
  after(() => s.stop());

  test('GET /v1/models lists the ready models that fit a contract, and only those', async () => {
    const ids: string[] = [];
    for await (const m of s.client().models.list()) ids.push(m.id);
    assert.deepEqual(ids, ['batch_llm', 'text_embedder', 'text_stats', 'tiny_llm', 'вектор']);
    const one = await s.client().models.retrieve('tiny_llm');
    assert.equal(one.id, 'tiny_llm');
    assert.equal(one.object, 'model');
    assert.equal(one.owned_by, 'nereid');
  });

  test('embeddings of a batch match the model run through /v2 ' +
    'with the same tokens, pooled and normalised', async () => {
    const texts = ['hello world', 'the quick brown fox jumps over the lazy dog', 'a'];
    const r = await s.client().embeddings.create({ model: 'text_embedder', input: texts, encoding_format: 'float' });
    assert.equal(r.object, 'list');
    assert.equal(r.model, 'text_embedder');
    assert.equal(r.data.length, 3);
    const tokenizer = embedderTokenizer();
    let tokens = 0;
    for (let i = 0; i < texts.length; i++) {
      assert.equal(r.data[i]!.index, i);
      assert.equal(r.data[i]!.object, 'embedding');
      const ids = tokenizer.encode(texts[i]!).ids;
      tokens += ids.length;
      assertClose(r.data[i]!.embedding, await embeddingFromV2(s.httpPort, ids));
      assert.ok(Math.abs(Math.hypot(...r.data[i]!.embedding) - 1) < 1e-5);
    }
    assert.deepEqual(r.usage, { prompt_tokens: tokens, total_tokens: tokens });
    assert.notDeepEqual(r.data[0]!.embedding, r.data[1]!.embedding);
  });

  test('base64 embeddings hold the same float32 values as the float ones', async () => {
    const input = ['model server', 'vector search'];
    const floats = await s.client().embeddings.create({ model: 'text_embedder', input, encoding_format: 'float' });
    // The client decodes base64 itself when it asked for it; read the raw body to see the wire form.
    const raw = await post(s.httpPort, '/v1/embeddings', { model: 'text_embedder', input, encoding_format: 'base64' });
    assert.equal(raw.status, 200);
    for (let i = 0; i < input.length; i++) {
      const b64 = raw.json['data'][i]['embedding'] as string;
      assert.equal(typeof b64, 'string');
      const bytes = Buffer.from(b64, 'base64');
      const decoded = Array.from(new Float32Array(bytes.buffer, bytes.byteOffset, bytes.byteLength / 4));
      // The float form is the shortest decimal of each float32: read back as float32, the very same bits.
      assert.deepEqual(floats.data[i]!.embedding.map(Math.fround), decoded);
    }
    // And the client's own base64 path (its default) decodes to the same numbers.
    const viaClient = await s.client().embeddings.create({ model: 'text_embedder', input });
    assertClose(viaClient.data[1]!.embedding, floats.data[1]!.embedding, 1e-7);
  });

  test('a model whose name is not ASCII has it back in the float answer, whole', async () => {
    const input = ['model server', 'vector search'];
    const r = await post(s.httpPort, '/v1/embeddings', { model: 'вектор', input, encoding_format: 'float' });
    assert.equal(r.status, 200);
    assert.equal(r.json['model'], 'вектор');
    const same = await s.client().embeddings.create({ model: 'text_embedder', input, encoding_format: 'float' });
    const vectors = r.json['data'].map((d: { embedding: number[] }) => d.embedding);
    assert.deepEqual(vectors, same.data.map((d) => d.embedding));
  });

  test('token-id inputs give the embeddings of the texts they encode', async () => {
    const tokenizer = embedderTokenizer();
    const texts = ['good morning', 'water'];
    const ids = texts.map((t) => tokenizer.encode(t).ids);
    const byText = await s
      .client()
      .embeddings.create({ model: 'text_embedder', input: texts, encoding_format: 'float' });
    const byIds = await s.client().embeddings.create({ model: 'text_embedder', input: ids, encoding_format: 'float' });
    for (let i = 0; i < texts.length; i++) assertClose(byIds.data[i]!.embedding, byText.data[i]!.embedding);
    const single = await s
      .client()
      .embeddings.create({ model: 'text_embedder', input: ids[1]!, encoding_format: 'float' });
    assertClose(single.data[0]!.embedding, byText.data[1]!.embedding);
    assert.equal(single.usage.prompt_tokens, ids[1]!.length);
  });

  test('a model with one BYTES text input embeds texts as they are, in batches of its max_batch_size', async () => {
    const input = ['hello world', 'aeiou', 'x', 'one two three'];
    const r = await s.client().embeddings.create({ model: 'text_stats', input, encoding_format: 'float' });
    // embedding_normalize "false": the model's own vectors.
    assert.deepEqual(
      r.data.map((d) => d.embedding),
      [
        [11, 3, 1],
        [5, 5, 0],
        [1, 0, 0],
        [13, 5, 2],
      ],
    );
    // No tokenizer: words are counted.
    assert.equal(r.usage.prompt_tokens, 7);
  });

  test('a completion answers with text, finish_reason and usage', async () => {
    const r = await s
      .client()
      .completions.create({ model: 'tiny_llm', prompt: 'one two three four five', max_tokens: 3 });
    assert.equal(r.object, 'text_completion');
    assert.match(r.id, /^cmpl-/);
    assert.equal(r.model, 'tiny_llm');
    assert.equal(r.choices.length, 1);
    assert.equal(r.choices[0]!.text, 'one two three');
    assert.equal(r.choices[0]!.finish_reason, 'length');
    assert.deepEqual(r.usage, { prompt_tokens: 5, completion_tokens: 3, total_tokens: 8 });
    const short = await s.client().completions.create({ model: 'tiny_llm', prompt: 'hello world', max_tokens: 8 });
    assert.equal(short.choices[0]!.text, 'hello world');
    assert.equal(short.choices[0]!.finish_reason, 'stop');
  });

  test('several prompts make one choice each, in order, with the usage summed', async () => {
    const r = await s.client().completions.create({ model: 'tiny_llm', prompt: ['one two three', 'four', 'five six'] });
    assert.deepEqual(r.choices.map((c) => [c.index, c.text, c.finish_reason]), [
      [0, 'one two three', 'stop'],
      [1, 'four', 'stop'],
      [2, 'five six', 'stop'],
    ]);
    assert.deepEqual(r.usage, { prompt_tokens: 6, completion_tokens: 6, total_tokens: 12 });
    // Token-id prompts: the tokenizer reads each back into text.
    const tokenizer = JSON.parse(readFileSync(path.join(EXAMPLES, 'tiny_llm', 'tokenizer.json'), 'utf8'));
    const tiny = new Tokenizer(tokenizer, {});
    const ids = ['red green', 'blue'].map((t) => tiny.encode(t).ids);
    const byIds = await s.client().completions.create({ model: 'tiny_llm', prompt: ids, max_tokens: 1 });
    assert.deepEqual(byIds.choices.map((c) => [c.index, c.text, c.finish_reason]), [
      [0, 'red', 'length'],
      [1, 'blue', 'length'],
    ]);
    assert.equal(byIds.usage?.prompt_tokens, ids[0]!.length + ids[1]!.length);
  });

  test('the prompts of one request reach the model together, so its batcher joins them', async () => {
    const r = await s.client().completions.create({ model: 'batch_llm', prompt: ['a', 'b', 'c'] });
    assert.deepEqual(r.choices.map((c) => c.text), ['a in a batch of 3', 'b in a batch of 3', 'c in a batch of 3']);
  });

  test('several prompts stream their pieces with the index of their choice', async () => {
    const stream = await s.client().completions.create({
      model: 'tiny_llm',
      prompt: ['a b c', 'd e', 'f g h i'],
      max_tokens: 3,
      stream: true,
      stream_options: { include_usage: true },
    });
    const texts = ['', '', ''];
    const finishes: Array<Array<string | null>> = [[], [], []];
    let usage: unknown;
    for await (const chunk of stream) {
      if (chunk.usage) usage = chunk.usage;
      for (const c of chunk.choices) {
        texts[c.index] += c.text;
        finishes[c.index]!.push(c.finish_reason);
      }
    }
    assert.deepEqual(texts, ['a b c', 'd e', 'f g h']);
    // Each choice's last chunk, and only it, carries its finish_reason.
    for (const [i, f] of finishes.entries()) {
      assert.ok(f.slice(0, -1).every((x) => x === null), `choice ${i}: ${JSON.stringify(f)}`);
    }
    assert.deepEqual(finishes.map((f) => f.at(-1)), ['length', 'stop', 'length']);
    assert.deepEqual(usage, { prompt_tokens: 9, completion_tokens: 8, total_tokens: 17 });
  });

  test('stop words reach the model as stop_words', async () => {
    const r = await s
      .client()
      .completions.create({ model: 'tiny_llm', prompt: 'red green blue white', stop: ['blue'] });
    assert.equal(r.choices[0]!.text, 'red green');
  });

  test('a chat completion renders the chat template and answers as the assistant', async () => {
    const r = await s.client().chat.completions.create({
      model: 'tiny_llm',
      messages: [
        { role: 'system', content: 'be brief' },
        { role: 'user', content: [{ type: 'text', text: 'hello there' }] },
      ],
    });
    assert.equal(r.object, 'chat.completion');
    assert.match(r.id, /^chatcmpl-/);
    assert.equal(r.choices[0]!.message.role, 'assistant');
    assert.equal(r.choices[0]!.message.content, 'hello there');
    assert.equal(r.choices[0]!.finish_reason, 'stop');
    // <|system|> be brief <|end|> <|user|> hello there <|end|> <|assistant|>: 9 tokens of tiny_llm's tokenizer.
    assert.deepEqual(r.usage, { prompt_tokens: 9, completion_tokens: 2, total_tokens: 11 });
  });

  test('a streamed chat completion comes as chunks, one per token, with usage last when asked', async () => {
    const stream = await s.client().chat.completions.create({
      model: 'tiny_llm',
      messages: [{ role: 'user', content: 'stream these four words' }],
      stream: true,
      stream_options: { include_usage: true },
    });
    const deltas: string[] = [];
    const finishes: Array<string | null> = [];
    let usage: unknown;
    const ids = new Set<string>();
    for await (const chunk of stream) {
      ids.add(chunk.id);
      assert.equal(chunk.object, 'chat.completion.chunk');
      if (chunk.usage) usage = chunk.usage;
      for (const c of chunk.choices) {
        if (c.delta.content) deltas.push(c.delta.content);
        finishes.push(c.finish_reason);
      }
    }
    assert.deepEqual(deltas, ['stream', ' these', ' four', ' words']);
    assert.equal(finishes.at(-1), 'stop');
    assert.equal(ids.size, 1);
    assert.deepEqual(usage, { prompt_tokens: 7, completion_tokens: 4, total_tokens: 11 });
  });

  test('a streamed completion ends with finish_reason length at max_tokens', async () => {
    const stream = await s
      .client()
      .completions.create({ model: 'tiny_llm', prompt: 'a b c d e f', max_tokens: 4, stream: true });
    let text = '';
    let finish: string | null = null;
    let usageSeen = false;
    for await (const chunk of stream) {
      if (chunk.usage) usageSeen = true;
      text += chunk.choices[0]?.text ?? '';
      finish = chunk.choices[0]?.finish_reason ?? finish;
    }
    assert.equal(text, 'a b c d');
    assert.equal(finish, 'length');
    assert.equal(usageSeen, false);
  });

  test('the raw stream is Server-Sent Events ending with data: [DONE]', async () => {
    const r = await post(s.httpPort, '/v1/completions', { model: 'tiny_llm', prompt: 'x y', stream: true });
    assert.equal(r.status, 200);
    assert.match(r.headers.get('content-type') ?? '', /^text\/event-stream/);
    const events = r.text.split('\n\n').filter(Boolean);
    assert.equal(events.at(-1), 'data: [DONE]');
    for (const e of events.slice(0, -1)) assert.ok(JSON.parse(e.replace(/^data: /, '')).choices);
  });

  test('OpenAI requests count in the model statistics and the token histograms', async () => {
    const before = s.running.server.modelStatistics('tiny_llm')[0]!.inference_stats.success.count;
    const stream = await s
      .client()
      .chat.completions.create({ model: 'tiny_llm', messages: [{ role: 'user', content: 'p q r' }], stream: true });
    for await (const _ of stream) void _;
    await s.client().completions.create({ model: 'tiny_llm', prompt: 'x' });
    // A decoupled model's request is counted when its execute() returns, which may come after its last response.
    const success = () => s.running.server.modelStatistics('tiny_llm')[0]!.inference_stats.success.count;
    for (let i = 0; i < 200 && success() < before + 2; i++) await new Promise((r) => setTimeout(r, 10));
    assert.equal(success() - before, 2);
    const metrics = await (await fetch(`http://127.0.0.1:${s.running.ports.metrics}/metrics`)).text();
    const count = (name: string) =>
      Number(new RegExp(`^${name}_count\\{model="tiny_llm",version="1"\\} (\\d+)`, 'm').exec(metrics)?.[1]);
    assert.ok(count('nereid_time_to_first_token_seconds') >= 1, metrics);
    assert.ok(count('nereid_inter_token_latency_seconds') >= 2);
  });
});

describe('--openai-tokenizer', () => {
  let s: OpenAiServer;
  before(async () => {
    s = await OpenAiServer.start({
      args: [`--openai-tokenizer=${path.join(EXAMPLES, 'tiny_llm')}`],
      // A copy of tiny_llm without its tokenizer files: they come from --openai-tokenizer.
      prepare: (repo) => {
        repo.file('bare_llm', '1/model.mjs', readFileSync(path.join(EXAMPLES, 'tiny_llm', '1', 'model.mjs')));
        const config = readFileSync(path.join(EXAMPLES, 'tiny_llm', 'config.pbtxt'), 'utf8');
        repo.config('bare_llm', config.replace('name: "tiny_llm"', 'name: "bare_llm"'));
      },
    });
  });
  after(() => s.stop());

  test('a model whose folder has no template or tokenizer uses the shared folder', async () => {
    const messages = [{ role: 'user' as const, content: 'shared template works' }];
    const r = await s.client().chat.completions.create({ model: 'bare_llm', messages });
    assert.equal(r.choices[0]!.message.content, 'shared template works');
    assert.deepEqual(r.usage, { prompt_tokens: 6, completion_tokens: 3, total_tokens: 9 });
  });
});
