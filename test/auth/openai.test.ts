/**
 * --auth-keys on the OpenAI routes, through `nereid serve`'s start-up and
 * the official OpenAI client, whose api_key is the key's secret: the
 * `openai` scope narrowed to a model, the model in the JSON body checked
 * before it is looked up, and the model list filtered to the key's models.
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import OpenAI from 'openai';
import { createKey } from '../../src/auth/index.js';
import { OpenAiServer, post } from '../frontends/openai/helpers.js';

describe('the openai scope', () => {
  const dir = mkdtempSync(path.join(tmpdir(), 'nereid-openai-keys-'));
  const embedder = createKey('embedder', ['openai:text_*']);
  const everything = createKey('everything', ['openai', 'inference']);
  let s: OpenAiServer;
  const client = (apiKey: string) =>
    new OpenAI({ baseURL: `http://127.0.0.1:${s.httpPort}/v1`, apiKey, maxRetries: 0 });

  before(async () => {
    const file = path.join(dir, 'keys.yaml');
    writeFileSync(file, `keys:\n${embedder.entry}${everything.entry}`);
    s = await OpenAiServer.start({ args: [`--auth-keys=${file}`] });
  });
  after(async () => {
    await s?.stop();
    rmSync(dir, { recursive: true, force: true });
  });

  test('a key narrowed to some models reaches them, and lists only them', async () => {
    const r = await client(embedder.secret).embeddings.create({ model: 'text_embedder', input: ['hello'] });
    assert.equal(r.data.length, 1);
    const ids: string[] = [];
    for await (const m of client(embedder.secret).models.list()) ids.push(m.id);
    assert.deepEqual(ids, ['text_embedder']);
    const all: string[] = [];
    for await (const m of client(everything.secret).models.list()) all.push(m.id);
    assert.deepEqual(all, ['text_embedder', 'tiny_llm']);
  });

  test('a model outside the scope, in the body or the path, is 403 whether it exists or not', async () => {
    const answers: Array<{ status: number; body: unknown }> = [];
    for (const model of ['tiny_llm', 'no_such_model']) {
      const r = await post(
        s.httpPort,
        '/v1/chat/completions',
        { model, messages: [{ role: 'user', content: 'hi' }] },
        { Authorization: `Bearer ${embedder.secret}` },
      );
      answers.push({ status: r.status, body: r.text.replace(model, 'M') });
      await assert.rejects(
        client(embedder.secret).models.retrieve(model),
        (err: unknown) => err instanceof OpenAI.PermissionDeniedError,
      );
    }
    assert.equal(answers[0]!.status, 403);
    assert.deepEqual(answers[0], answers[1]);
    assert.match(String(answers[0]!.body), /"type":"permission_error".*"code":"insufficient_scope"/);
    // With the scope, an unknown model is the frontend's own 404.
    await assert.rejects(
      client(everything.secret).models.retrieve('no_such_model'),
      (err: unknown) => err instanceof OpenAI.NotFoundError,
    );
  });

  test('no key or a wrong key is 401; the openai scope does not open /v2', async () => {
    await assert.rejects(client('wrong').models.list(), (err: unknown) => err instanceof OpenAI.AuthenticationError);
    const none = await fetch(`http://127.0.0.1:${s.httpPort}/v1/models`);
    assert.equal(none.status, 401);
    assert.equal(((await none.json()) as { error: { code: string } }).error.code, 'invalid_api_key');
    const v2 = await fetch(`http://127.0.0.1:${s.httpPort}/v2/models/text_embedder`, {
      headers: { Authorization: `Bearer ${embedder.secret}` },
    });
    assert.equal(v2.status, 403);
    const ready = await fetch(`http://127.0.0.1:${s.httpPort}/v2/health/ready`);
    assert.equal(ready.status, 200);
  });
});
