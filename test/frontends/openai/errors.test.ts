/**
 * Bad input on the OpenAI endpoints: each an OpenAI-shaped error with
 * OpenAI's status, raised by the official client as its error classes, and
 * the server keeps serving. Also the --openai-port listener and
 * --openai-restricted-api.
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI, { APIError } from 'openai';
import { OpenAiServer, post } from './helpers.js';

const TINY_LLM_NO_TEMPLATE = (name: string) => `name: "${name}"
backend: "javascript"
max_batch_size: 0
model_transaction_policy { decoupled: true }
input [ { name: "text_input" data_type: TYPE_STRING dims: [ 1 ] },
  { name: "max_tokens" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "text_output" data_type: TYPE_STRING dims: [ 1 ] } ]
instance_group [ { kind: KIND_CPU count: 1 } ]
`;

async function rejectsWith(
  p: Promise<unknown>,
  status: number,
  param: string | null,
  message: RegExp,
): Promise<APIError> {
  try {
    await p;
  } catch (err) {
    assert.ok(err instanceof OpenAI.APIError, `not an APIError: ${String(err)}`);
    assert.equal(err.status, status, err.message);
    assert.equal(err.param ?? null, param, err.message);
    assert.match(err.message, message);
    assert.equal(typeof err.type, 'string');
    return err;
  }
  assert.fail('the request did not fail');
}

describe('OpenAI errors', () => {
  let s: OpenAiServer;
  before(async () => {
    s = await OpenAiServer.start({
      args: ['--http-max-input-size=4096', '--openai-port=0'],
      prepare: (repo) => {
        repo.addSub('simple');
        const model = `export default class { execute(requests) { for (const r of requests) r.responseSender.send({ ` +
          `outputs: [{ name: 'text_output', shape: [1], data: ['ok'] }] }, { final: true }); } }`;
        repo.file('no_template', '1/model.mjs', model).config('no_template', TINY_LLM_NO_TEMPLATE('no_template'));
        repo.file('bad_template', '1/model.mjs', model).config('bad_template', TINY_LLM_NO_TEMPLATE('bad_template'));
        repo.file(
          'bad_template',
          'tokenizer_config.json',
          JSON.stringify({
            chat_template: '{% for m in messages %}\n{{ m.content }}\n{{ m.content | shout }}\n{% endfor %}',
          }),
        );
        repo
          .file('broken_template', '1/model.mjs', model)
          .config('broken_template', TINY_LLM_NO_TEMPLATE('broken_template'));
        repo.file(
          'broken_template',
          'tokenizer_config.json',
          JSON.stringify({ chat_template: 'line one\n{{ messages[0].content }\n' }),
        );
      },
    });
  });
  after(() => s.stop());
  const chat = (model: string, extra: Record<string, unknown> = {}) =>
    s.client().chat.completions.create({ model, messages: [{ role: 'user', content: 'hi' }], ...extra } as never);

  test('an unknown model is 404 model_not_found', async () => {
    const e = await rejectsWith(
      s.client().completions.create({ model: 'nope', prompt: 'x' }),
      404,
      'model',
      /'nope' does not exist/,
    );
    assert.equal(e.code, 'model_not_found');
    assert.ok(e instanceof OpenAI.NotFoundError);
    await rejectsWith(s.client().models.retrieve('nope'), 404, 'model', /nope/);
    await rejectsWith(s.client().embeddings.create({ model: 'nope', input: 'x' }), 404, 'model', /nope/);
  });

  test('a model that fits no contract, or the other one, is refused with the reason', async () => {
    await rejectsWith(
      s.client().completions.create({ model: 'simple', prompt: 'x' }),
      400,
      'model',
      /'simple' cannot serve completions: its inputs fit neither/,
    );
    await rejectsWith(
      s.client().embeddings.create({ model: 'tiny_llm', input: 'x' }),
      400,
      'model',
      /generation model and cannot serve embeddings/,
    );
    await rejectsWith(
      s.client().completions.create({ model: 'text_embedder', prompt: 'x' }),
      400,
      'model',
      /embedding model and cannot serve completions/,
    );
    await rejectsWith(s.client().models.retrieve('simple'), 404, 'model', /not served on \/v1/);
  });

  test('bad prompt arrays are refused naming the prompt at fault', async () => {
    const completion = (prompt: unknown) => s.client().completions.create({ model: 'tiny_llm', prompt } as never);
    await rejectsWith(completion([]), 400, 'prompt', /'prompt' is an empty array/);
    await rejectsWith(completion(['one', [1, 2]]), 400, 'prompt[1]', /all strings or all token ids/);
    await rejectsWith(completion([[1, 2], 'two']), 400, 'prompt[1]', /all strings or all token ids/);
    await rejectsWith(completion(['one', '']), 400, 'prompt[1]', /'prompt\[1\]' is empty/);
    await rejectsWith(completion([[1, 2], []]), 400, 'prompt[1]', /empty array of token ids/);
    await rejectsWith(completion([[1, -2]]), 400, 'prompt[0]', /'prompt\[0\]\[1\]' must be a token id/);
    await rejectsWith(completion(['one', 7]), 400, 'prompt[1]', /must be a string or an array of token ids/);
    await rejectsWith(completion([1, 'two']), 400, 'prompt', /'prompt\[1\]' must be a token id/);
    await rejectsWith(completion({ text: 'x' }), 400, 'prompt', /must be a non-empty string/);
    // The server keeps serving.
    const r = await s.client().completions.create({ model: 'tiny_llm', prompt: ['still', 'here'] });
    assert.deepEqual(r.choices.map((c) => c.text), ['still', 'here']);
  });

  test('fields the server cannot honour are refused by name', async () => {
    await rejectsWith(
      s.client().completions.create({ model: 'tiny_llm', prompt: 'x', n: 2 }),
      400,
      'n',
      /'n' is not supported/,
    );
    await rejectsWith(
      s.client().completions.create({ model: 'tiny_llm', prompt: 'x', logprobs: 2 }),
      400,
      'logprobs',
      /not supported/,
    );
    await rejectsWith(
      chat('tiny_llm', { tools: [{ type: 'function', function: { name: 'f' } }] }),
      400,
      'tools',
      /tool calling/,
    );
    await rejectsWith(
      chat('tiny_llm', { response_format: { type: 'json_object' } }),
      400,
      'response_format',
      /only text/,
    );
    await rejectsWith(
      s.client().embeddings.create({ model: 'text_embedder', input: 'x', dimensions: 8 }),
      400,
      'dimensions',
      /32-dimensional/,
    );
    await rejectsWith(
      chat('tiny_llm', { frobnicate: 1 }),
      400,
      'frobnicate',
      /Unrecognized request argument supplied: frobnicate/,
    );
  });

  test('a sampling field the model has no input for is refused, naming it', async () => {
    await rejectsWith(chat('tiny_llm', { temperature: 0.5 }), 400, 'temperature', /does not take 'temperature'/);
    await rejectsWith(chat('tiny_llm', { seed: 3 }), 400, 'seed', /does not take 'seed'/);
    await rejectsWith(chat('no_template', { stream: true }), 400, 'messages', /no chat template/);
  });

  test('max_tokens negative, zero or not an integer is a 400', async () => {
    await rejectsWith(
      s.client().completions.create({ model: 'tiny_llm', prompt: 'x', max_tokens: -1 }),
      400,
      'max_tokens',
      /at least 1/,
    );
    await rejectsWith(
      s.client().completions.create({ model: 'tiny_llm', prompt: 'x', max_tokens: 1.5 }),
      400,
      'max_tokens',
      /integer/,
    );
    await rejectsWith(chat('tiny_llm', { max_completion_tokens: 0 }), 400, 'max_completion_tokens', /at least 1/);
  });

  test('malformed messages and inputs, and empty ones, name what is wrong', async () => {
    await rejectsWith(
      s.client().chat.completions.create({ model: 'tiny_llm', messages: [] }),
      400,
      'messages',
      /non-empty array/,
    );
    await rejectsWith(
      s.client().chat.completions.create({ model: 'tiny_llm', messages: [{ role: 'wizard', content: 'x' }] } as never),
      400,
      'messages[0].role',
      /must be one of/,
    );
    await rejectsWith(
      s
        .client()
        .chat.completions.create({
          model: 'tiny_llm',
          messages: [{ role: 'user', content: [{ type: 'image_url', image_url: { url: 'x' } }] }],
        }),
      400,
      'messages[0].content[0]',
      /text part/,
    );
    await rejectsWith(s.client().embeddings.create({ model: 'text_embedder', input: '' }), 400, 'input', /empty/);
    await rejectsWith(s.client().embeddings.create({ model: 'text_embedder', input: [] }), 400, 'input', /empty/);
    await rejectsWith(
      s.client().embeddings.create({ model: 'text_embedder', input: ['ok', ''] }),
      400,
      'input[1]',
      /empty/,
    );
    await rejectsWith(
      s.client().embeddings.create({ model: 'text_embedder', input: [[1, -2]] }),
      400,
      'input[0]',
      /token id/,
    );
    await rejectsWith(s.client().completions.create({ model: 'tiny_llm', prompt: '' }), 400, 'prompt', /empty/);
    const r = await post(s.httpPort, '/v1/completions', '{"model": "tiny_llm", ');
    assert.equal(r.status, 400);
    assert.equal(r.json['error']['type'], 'invalid_request_error');
    assert.equal(r.json['error']['code'], 'invalid_json');
  });

  test('an input longer than the model takes is refused (context_length_exceeded)', async () => {
    const long = Array.from({ length: 200 }, () => 'word').join(' ');
    const e = await rejectsWith(
      s.client().embeddings.create({ model: 'text_embedder', input: long }),
      400,
      'input',
      /maximum context length is 128 tokens/,
    );
    assert.equal(e.code, 'context_length_exceeded');
  });

  test('a body over --http-max-input-size is refused with 413', async () => {
    const e = await rejectsWith(
      s.client().completions.create({ model: 'tiny_llm', prompt: 'x'.repeat(5000) }),
      413,
      null,
      /--http-max-input-size/,
    );
    assert.equal(e.code, 'request_too_large');
  });

  test("a template that fails names the model, the file and the template's line", async () => {
    await rejectsWith(
      chat('bad_template'),
      400,
      'messages',
      /model 'bad_template': the chat template \(tokenizer_config\.json, line 3\) failed to render: .*shout/,
    );
    await rejectsWith(
      chat('broken_template'),
      400,
      'messages',
      /model 'broken_template': the chat template \(tokenizer_config\.json, line 2\) cannot be parsed/,
    );
  });

  test('unknown /v1 paths are 404 and wrong methods 405, in OpenAI form', async () => {
    const r = await post(s.httpPort, '/v1/nothing', {});
    assert.equal(r.status, 404);
    assert.equal(r.json['error']['code'], 'unknown_url');
    const g = await fetch(`http://127.0.0.1:${s.httpPort}/v1/completions`);
    assert.equal(g.status, 405);
    assert.equal(g.headers.get('allow'), 'POST');
  });

  test('the server keeps serving after all of the above', async () => {
    const r = await s.client().completions.create({ model: 'tiny_llm', prompt: 'still here' });
    assert.equal(r.choices[0]!.text, 'still here');
  });

  test('--openai-port serves the same API on its own listener', async () => {
    const port = s.running.ports.openai!;
    assert.ok(port > 0 && port !== s.httpPort);
    const r = await s
      .client({ port })
      .embeddings.create({ model: 'text_embedder', input: 'on its own port', encoding_format: 'float' });
    assert.equal(r.data[0]!.embedding.length, 32);
    const ready = await fetch(`http://127.0.0.1:${port}/health/ready`);
    assert.equal(ready.status, 200);
    const v2 = await fetch(`http://127.0.0.1:${port}/v2/health/ready`);
    assert.equal(v2.status, 404);
  });
});

describe('--openai-restricted-api', () => {
  let s: OpenAiServer;
  before(async () => {
    s = await OpenAiServer.start({
      args: [
        '--openai-restricted-api',
        'inference,embedding',
        'infer-key',
        'secret',
        '--openai-restricted-api=model-repository:admin-key=root',
      ],
    });
  });
  after(() => s.stop());

  test('a restricted API without its header is 401 authentication_error', async () => {
    const e = await rejectsWith(
      s.client().completions.create({ model: 'tiny_llm', prompt: 'x' }),
      401,
      null,
      /expecting header 'infer-key'/,
    );
    assert.ok(e instanceof OpenAI.AuthenticationError);
    assert.equal(e.code, 'invalid_auth');
    await rejectsWith(
      s.client({ headers: { 'infer-key': 'wrong' } }).embeddings.create({ model: 'text_embedder', input: 'x' }),
      401,
      null,
      /infer-key/,
    );
    await rejectsWith(s.client().models.list(), 401, null, /admin-key/);
  });

  test('with the header the request goes through, and other groups are not asked for it', async () => {
    const client = s.client({ headers: { 'infer-key': 'secret' } });
    const r = await client.completions.create({ model: 'tiny_llm', prompt: 'let me in' });
    assert.equal(r.choices[0]!.text, 'let me in');
    await rejectsWith(client.models.list(), 401, null, /admin-key/);
    const models = await s.client({ headers: { 'admin-key': 'root' } }).models.list();
    assert.ok(models.data.some((m) => m.id === 'tiny_llm'));
  });
});
