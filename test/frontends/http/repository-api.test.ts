/**
 * The model repository extension over HTTP against the real Server: the
 * steps of Triton's simple_http_model_control example, file overrides, the
 * repository-name form, and every error with Triton's status and text.
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, readFileSync, readdirSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { Server } from '../../../src/core/server.js';
import { NereidError } from '../../../src/errors.js';
import { HttpFrontend } from '../../../src/frontends/http/index.js';
import { silentLogger } from '../../../src/logger.js';
import { buildAddSubModel } from '../../helpers/onnx-builder.js';
import { TempRepository } from '../../helpers/repository.js';
import { call, json, type HttpReply } from './helpers.js';

const A = Array.from({ length: 16 }, (_, i) => i + 1);

let repo: TempRepository;
let other: TempRepository;
let server: Server;
let frontend: HttpFrontend;
let port: number;

const post = (p: string, body?: unknown) =>
  call(port, 'POST', p, body === undefined ? {} : { body: typeof body === 'string' ? body : JSON.stringify(body) });
const get = (p: string) => call(port, 'GET', p);

function assertError(reply: HttpReply, status: number, message: RegExp): void {
  assert.equal(reply.status, status, reply.body.toString());
  assert.match((json(reply) as { error: string }).error, message);
}

async function inferSimple(model: string): Promise<HttpReply> {
  const body = {
    inputs: [
      { name: 'INPUT0', datatype: 'INT32', shape: [1, 16], data: A },
      { name: 'INPUT1', datatype: 'INT32', shape: [1, 16], data: A },
    ],
  };
  return post(`/v2/models/${model}/infer`, body);
}

function overrideFolders(): string[] {
  return readdirSync(tmpdir()).filter((n) => n.startsWith('nereid-override-'));
}

const ADD_SUB_CONFIG = JSON.stringify({
  platform: 'onnxruntime_onnx',
  max_batch_size: 8,
  input: [
    { name: 'INPUT0', data_type: 'TYPE_INT32', dims: [16] },
    { name: 'INPUT1', data_type: 'TYPE_INT32', dims: [16] },
  ],
  output: [
    { name: 'OUTPUT0', data_type: 'TYPE_INT32', dims: [16] },
    { name: 'OUTPUT1', data_type: 'TYPE_INT32', dims: [16] },
  ],
});

before(async () => {
  const simpleConfig = readFileSync(
    new URL('../../../../examples/model_repository/simple/config.pbtxt', import.meta.url),
    'utf8',
  );
  repo = new TempRepository()
    .config('simple', simpleConfig)
    .file('simple', '1/model.onnx', buildAddSubModel('INT32', 16).toBytes())
    .addSub('broken')
    .file('broken', '1/model.onnx', 'not an onnx file');
  other = new TempRepository().addSub('elsewhere');
  server = new Server({ modelRepositories: [repo.dir, other.dir], modelControlMode: 'explicit', logger: silentLogger });
  await server.start();
  frontend = new HttpFrontend(server, { port: 0, address: '127.0.0.1', maxInputSize: 1 << 20, logger: silentLogger });
  ({ port } = await frontend.start());
});

after(async () => {
  await frontend?.stop();
  await server?.stop();
  repo?.cleanup();
  other?.cleanup();
});

describe('model repository API over HTTP with the real Server', () => {
  test('the steps of simple_http_model_control', async () => {
    assert.equal((await post('/v2/repository/models/simple/load')).status, 200);
    assert.equal((await get('/v2/models/simple/ready')).status, 200);

    // A config override that is not JSON: "failed to load", and the model keeps serving.
    const bad = await post('/v2/repository/models/simple/load', {
      parameters: { config: '"parameters": {"config": {{"max_batch_size": "16"}}}' },
    });
    assertError(bad, 500, /^failed to load 'simple', failed to poll from model repository: Invalid config override: /);
    assert.equal((await inferSimple('simple')).status, 200);

    // A partial config: the rest is completed from the model file.
    assert.equal(
      (await post('/v2/repository/models/simple/load', { parameters: { config: '{"max_batch_size":"16"}' } })).status,
      200,
    );
    assert.equal((json(await get('/v2/models/simple/config')) as { max_batch_size: number }).max_batch_size, 16);

    assert.equal((await post('/v2/repository/models/simple/unload')).status, 200);
    assert.notEqual((await get('/v2/models/simple/ready')).status, 200);

    assertError(
      await post('/v2/repository/models/wrong_model_name/load'),
      500,
      /^failed to load 'wrong_model_name', failed to poll from model repository$/,
    );
  });

  test('a plain load after an override reloads from the repository', async () => {
    await post('/v2/repository/models/simple/load', { parameters: { config: '{"max_batch_size":"16"}' } });
    assert.equal((json(await get('/v2/models/simple/config')) as { max_batch_size: number }).max_batch_size, 16);
    assert.equal((await post('/v2/repository/models/simple/load')).status, 200);
    assert.equal((json(await get('/v2/models/simple/config')) as { max_batch_size: number }).max_batch_size, 8);
  });

  test('file overrides load a model from the given files alone, kept while it is loaded', async () => {
    const before = new Set(overrideFolders());
    const model = Buffer.from(buildAddSubModel('INT32', 16).toBytes()).toString('base64');
    const r = await post('/v2/repository/models/from_bytes/load', {
      parameters: { config: ADD_SUB_CONFIG, 'file:1/model.onnx': model },
    });
    assert.equal(r.status, 200, r.body.toString());
    const infer = await inferSimple('from_bytes');
    assert.equal(infer.status, 200);
    assert.deepEqual((json(infer) as { outputs: Array<{ data: number[] }> }).outputs[0]!.data, A.map((x) => 2 * x));
    const created = overrideFolders().filter((n) => !before.has(n));
    assert.equal(created.length, 1, 'one temporary folder holds the files');
    assert.ok(existsSync(path.join(tmpdir(), created[0]!, '1', 'model.onnx')));

    assert.equal((await post('/v2/repository/models/from_bytes/unload')).status, 200);
    assert.equal(existsSync(path.join(tmpdir(), created[0]!)), false, 'the folder goes with the model');
  });

  test('bad file overrides: each a clear error, nothing left behind, others keep serving', async () => {
    await post('/v2/repository/models/simple/load');
    const before = overrideFolders().length;
    const bytes = Buffer.from('abc').toString('base64');
    assertError(
      await post('/v2/repository/models/simple/load', { parameters: { 'file:1/model.onnx': bytes } }),
      500,
      new RegExp(
        String.raw`^failed to load 'simple', failed to poll from model repository: Load parameter 'config' must be ` +
        String.raw`specified for model file override$`,
      ),
    );
    assertError(
      await post('/v2/repository/models/simple/load', { parameters: { config: '{}', 'file:../escape.onnx': bytes } }),
      500,
      new RegExp(
        String.raw`failed to poll from model repository: Invalid file parameter 'file:\.\.\/escape\.onnx' with ` +
        String.raw`normalized path '.*' must stay within model directory\.`,
      ),
    );
    assertError(
      await post('/v2/repository/models/simple/load', {
        parameters: { config: '{}', [`file:${'A'.repeat(256)}`]: bytes },
      }),
      500,
      /failed to poll from model repository: Invalid file parameter 'file:A+': ENAMETOOLONG/,
    );
    assertError(
      await post('/v2/repository/models/simple/load', {
        parameters: { config: '{}', 'file:1': bytes, 'file:1/model.onnx': bytes },
      }),
      500,
      /Invalid file parameter 'file:1\/model\.onnx', directory has been created as a file/,
    );
    // Files that are not a model: the load fails with Triton's per-version text.
    assertError(
      await post('/v2/repository/models/junk/load', {
        parameters: { config: ADD_SUB_CONFIG, 'file:1/model.onnx': bytes },
      }),
      400,
      /^load failed for model 'junk': version 1 is at UNAVAILABLE state: /,
    );
    assert.equal(overrideFolders().length, before, 'no temporary folder is left behind');
    assert.equal((await inferSimple('simple')).status, 200);
  });

  test('a never-loaded model whose override is bad shows UNAVAILABLE with the reason in the index', async () => {
    const r = await post('/v2/repository/models/broken/load', { parameters: { config: '{not json' } });
    assertError(r, 500, /failed to poll from model repository: Invalid config override/);
    const index = json(await post('/v2/repository/index')) as Array<{ name: string; state?: string; reason?: string }>;
    const broken = index.find((e) => e.name === 'broken')!;
    assert.equal(broken.state, 'UNAVAILABLE');
    assert.match(broken.reason!, /Invalid config override/);
  });

  test('a model that fails to load: 400 with Triton per-version text', async () => {
    assertError(
      await post('/v2/repository/models/broken/load'),
      400,
      /^load failed for model 'broken': version 1 is at UNAVAILABLE state: .+;$/,
    );
  });

  test('the repository-name form: a repository by its folder name scopes index, load and unload', async () => {
    const name = path.basename(other.dir);
    const scoped = json(await post(`/v2/repository/${name}/index`)) as Array<{ name: string }>;
    assert.deepEqual(scoped.map((e) => e.name), ['elsewhere']);
    assert.equal((await post(`/v2/repository/${name}/models/elsewhere/load`)).status, 200);
    assert.equal((await get('/v2/models/elsewhere/ready')).status, 200);
    assertError(
      await post(`/v2/repository/${name}/models/simple/load`),
      500,
      /^failed to load 'simple', failed to poll from model repository$/,
    );
    assertError(
      await post('/v2/repository/nope/index'),
      400,
      /^no model repository named 'nope' \(the server's repositories: /,
    );
    assert.equal((await post(`/v2/repository/${name}/models/elsewhere/unload`)).status, 200);
    assert.notEqual((await get('/v2/models/elsewhere/ready')).status, 200);
  });

  test('model names are checked as Triton does', async () => {
    for (const [name, pattern] of [
      ['', /Model name cannot be empty/],
      ['..', /invalid model name '\.\.', model name must not contain path traversal characters/],
      ['a/b', /must not contain path traversal characters/],
    ] as const) {
      await assert.rejects(server.loadModel(name), (err: unknown) => {
        assert.ok(err instanceof NereidError);
        assert.equal(err.errorClass, 'INVALID_ARG');
        assert.match(err.message, pattern);
        return true;
      });
    }
  });
});
