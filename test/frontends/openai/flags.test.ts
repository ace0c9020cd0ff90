/** The OpenAI flags of `nereid serve`: --openai-port, --openai-tokenizer and --openai-restricted-api in its forms. */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { buildServeConfig } from '../../../src/cli/serve.js';
import { joinRestrictedApiArgs, parseOpenAiRestrictedApis } from '../../../src/frontends/openai/index.js';

test('--openai-restricted-api takes Triton three-word form, one argument with spaces, or api:header=value', () => {
  const parsed = parseOpenAiRestrictedApis(['inference,embedding api-key s3cret', 'model-repository:admin-key=root']);
  assert.deepEqual([...parsed.keys()], ['inference', 'embedding', 'model-repository']);
  assert.equal(parsed.get('embedding')!.header, 'api-key');
  assert.equal(parsed.get('model-repository')!.value, 'root');
  assert.deepEqual(joinRestrictedApiArgs(['--openai-restricted-api', 'inference', 'k', 'v', '--http-port=1']), [
    '--openai-restricted-api=inference k v',
    '--http-port=1',
  ]);
  const cfg = buildServeConfig(['--openai-restricted-api', 'inference', 'k', 'v', '--openai-port=9000']);
  assert.deepEqual(cfg.openai.restrictedApis, ['inference k v']);
  assert.equal(cfg.openai.port, 9000);
  assert.equal(buildServeConfig([]).openai.port, undefined, 'no listener of its own unless asked');
});

test('bad --openai-* values are refused at start, naming what is wrong', () => {
  const parse = (...values: string[]) => () => parseOpenAiRestrictedApis(values);
  assert.throws(parse('inference api-key'), /option format is '<api>,<api>\.\.\. <header> <value>'/);
  assert.throws(parse('chat k v'), /Unknown API 'chat'.*inference, embedding, model-repository, health/);
  assert.throws(parse('inference a b', 'inference c d'), /'inference' can not be specified in multiple config groups/);
  assert.throws(() => parseOpenAiRestrictedApis(['metrics k v']), /metrics-port/);
  assert.throws(() => buildServeConfig(['--openai-restricted-api=bogus k v']), /Unknown API 'bogus'/);
  assert.throws(
    () => buildServeConfig(['--openai-tokenizer=/does/not/exist']),
    /--openai-tokenizer: folder '\/does\/not\/exist' does not exist/,
  );
  assert.throws(() => buildServeConfig(['--openai-port=8000']), /the HTTP and OpenAI ports are both 8000/);
});
