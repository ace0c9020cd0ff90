/**
 * Streams from decoupled models over /v1: a client that disconnects cancels
 * the model's request (JavaScript isCancelled(), Python is_cancelled()), a
 * model that fails mid-stream ends the stream with an error the client
 * raises, a slow reader does not make the server buffer a chunk per token,
 * and a full queue answers 429 with Retry-After.
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import http from 'node:http';
import { APIError } from 'openai';
import { missingPythonModule } from '../../backends/python/helpers.js';
import { OpenAiServer, post } from './helpers.js';

const noNumpy = missingPythonModule('numpy');

async function waitForFile(file: string): Promise<string> {
  for (let i = 0; i < 1000 && !existsSync(file); i++) await new Promise((r) => setTimeout(r, 10));
  return readFileSync(file, 'utf8');
}

describe('OpenAI streams from decoupled models', () => {
  let s: OpenAiServer;
  before(async () => {
    s = await OpenAiServer.start({ fixtures: ['stream_llm_js', 'held_llm', ...(noNumpy ? [] : ['stream_llm_py'])] });
  });
  after(() => s.stop());

  async function cancelAfterThreeChunks(model: string): Promise<void> {
    const stream = await s.client().completions.create({ model, prompt: 'forever', stream: true });
    let n = 0;
    for await (const chunk of stream) {
      assert.match(chunk.choices[0]!.text, /^ t\d+$/);
      if (++n === 3) break; // leaving the loop aborts the HTTP request
    }
    const marker = await waitForFile(s.marker(model));
    assert.match(marker, /^cancelled after \d+$/);
  }

  test('a client that disconnects cancels a JavaScript model (isCancelled())', () =>
    cancelAfterThreeChunks('stream_llm_js'));

  test('a client that disconnects cancels a Python model (is_cancelled())', { skip: noNumpy }, () =>
    cancelAfterThreeChunks('stream_llm_py'),
  );

  test('a client that disconnects from a stream of several prompts cancels every prompt', async () => {
    const tags = ['a', 'b', 'c'];
    const markers = tags.map((t) => `${s.marker('stream_llm_js')}.${t}`);
    const prompt = tags.map((t) => `forever ${t}`);
    const stream = await s.client().completions.create({ model: 'stream_llm_js', prompt, stream: true });
    const seen = tags.map(() => 0);
    for await (const chunk of stream) {
      for (const c of chunk.choices) seen[c.index]! += c.text.split(' t').length - 1;
      if (seen.every((n) => n >= 2)) break; // leaving the loop aborts the HTTP request
    }
    // Each prompt's own model request saw isCancelled() turn true.
    for (const marker of markers) assert.match(await waitForFile(marker), /^cancelled after \d+$/);
    // The server keeps serving, the same model included.
    const r = await post(s.httpPort, '/v1/completions', { model: 'stream_llm_js', prompt: 'still here' });
    assert.equal(r.status, 200);
    assert.equal(r.json['choices'][0]['text'], 'still here');
  });

  test('a model failing mid-stream ends the stream with an error chunk the client raises', async () => {
    const stream = await s
      .client()
      .completions.create({ model: 'stream_llm_js', prompt: 'fail after 2', stream: true });
    const texts: string[] = [];
    await assert.rejects(
      (async () => {
        for await (const chunk of stream) texts.push(chunk.choices[0]!.text);
      })(),
      (err: unknown) => err instanceof APIError && /failed mid-stream/.test(err.message),
    );
    assert.deepEqual(texts, [' t0', ' t1']);
  });

  test('an error in one of several prompts ends the stream and cancels the other prompts', async () => {
    rmSync(s.marker('stream_llm_js'), { force: true });
    const stream = await s
      .client()
      .completions.create({ model: 'stream_llm_js', prompt: ['forever', 'fail after 2'], stream: true });
    const texts = ['', ''];
    await assert.rejects(
      (async () => {
        for await (const chunk of stream) for (const c of chunk.choices) texts[c.index] += c.text;
      })(),
      (err: unknown) => err instanceof APIError && /failed mid-stream/.test(err.message),
    );
    assert.equal(texts[1], ' t0 t1');
    assert.match(await waitForFile(s.marker('stream_llm_js')), /^cancelled after \d+$/);
  });

  test('an error in one of several prompts fails a whole answer and cancels the other prompts', async () => {
    rmSync(s.marker('stream_llm_js'), { force: true });
    const body = { model: 'stream_llm_js', prompt: ['forever', 'fail after 1'] };
    const r = await post(s.httpPort, '/v1/completions', body);
    assert.equal(r.status, 500);
    assert.match(r.json['error']['message'], /failed mid-stream/);
    assert.match(await waitForFile(s.marker('stream_llm_js')), /^cancelled after \d+$/);
  });

  test('a model failing before its first token answers an HTTP error, not a stream', async () => {
    const r = await post(s.httpPort, '/v1/completions', {
      model: 'stream_llm_js',
      prompt: 'fail after 0',
      stream: true,
    });
    assert.equal(r.status, 500);
    assert.match(r.json['error']['message'], /failed mid-stream/);
    assert.equal(r.json['error']['type'], 'server_error');
  });

  test('a slow reader gets the whole answer in fewer chunks than tokens (pending tokens are joined)', async () => {
    const words = Array.from({ length: 40000 }, (_, i) => `w${i}`);
    const body = JSON.stringify({ model: 'stream_llm_js', prompt: words.join(' '), stream: true });
    const { text, chunks } = await new Promise<{ text: string; chunks: number }>((resolve, reject) => {
      const req = http.request(
        {
          host: '127.0.0.1',
          port: s.httpPort,
          path: '/v1/completions',
          method: 'POST',
          headers: { 'content-type': 'application/json' },
        },
        (res) => {
          res.pause(); // read nothing until the model has sent every token
          setTimeout(() => {
            let raw = '';
            res.setEncoding('utf8');
            res.on('data', (d: string) => (raw += d));
            res.on('end', () => {
              const events = raw.split('\n\n').filter((e) => e.startsWith('data: {'));
              const pieces = events.map(
                (e) => (JSON.parse(e.slice(6)) as { choices: Array<{ text: string }> }).choices[0]!.text,
              );
              resolve({ text: pieces.join(''), chunks: events.length });
            });
            res.resume();
          }, 1500);
        },
      );
      req.on('error', reject);
      req.end(body);
    });
    assert.equal(text, words.join(' '));
    // Without joining every token would be a chunk of its own.
    assert.ok(chunks < words.length, `${chunks} chunks for ${words.length} tokens`);
  });

  test('a full queue answers 429 rate_limit_error with Retry-After', async () => {
    const client = s.client();
    const pending: Promise<unknown>[] = [];
    let refused: APIError | undefined;
    for (let i = 0; i < 20 && refused === undefined; i++) {
      const p = client.completions.create({ model: 'held_llm', prompt: `q${i}` });
      pending.push(p);
      await Promise.race([
        p.catch((err: unknown) => (refused = err as APIError)),
        new Promise((r) => setTimeout(r, 50)),
      ]);
    }
    assert.ok(refused instanceof APIError, 'no request was refused');
    assert.equal(refused.status, 429);
    assert.equal(refused.type, 'rate_limit_error');
    assert.equal(refused.headers?.get('retry-after'), '1');
    writeFileSync(s.marker('held_llm'), 'go');
    const settled = await Promise.allSettled(pending);
    const answered = settled.filter((x) => x.status === 'fulfilled');
    assert.ok(answered.length >= 1);
    for (const a of answered)
      assert.equal(
        (a as PromiseFulfilledResult<{ choices: Array<{ text: string }> }>).value.choices[0]!.text,
        'released',
      );
  });
});

describe('OpenAI completions on Python and ensemble models', { skip: noNumpy }, () => {
  let s: OpenAiServer;
  before(async () => {
    s = await OpenAiServer.start({ fixtures: ['upper_llm_py', 'upper_llm_ensemble'] });
  });
  after(() => s.stop());

  for (const model of ['upper_llm_py', 'upper_llm_ensemble']) {
    test(`${model}: a completion, streamed and not`, async () => {
      const r = await s.client().completions.create({ model, prompt: 'make me loud please', max_tokens: 3 });
      assert.equal(r.choices[0]!.text, 'MAKE ME LOUD');
      // No tokenizer: completion tokens are the responses that carried text, prompt tokens the words.
      assert.deepEqual(r.usage, { prompt_tokens: 4, completion_tokens: 1, total_tokens: 5 });
      const stream = await s.client().completions.create({ model, prompt: 'all at once', stream: true });
      let text = '';
      for await (const chunk of stream) text += chunk.choices[0]?.text ?? '';
      assert.equal(text, 'ALL AT ONCE');
    });
  }
});
