/**
 * The public entry (`import { Server } from 'nereid'`, the package's own
 * name) and behaviours seen only end to end through it: output reshape,
 * classification with a label file, a model removed in poll mode, and a
 * request cancelled before it was sent.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { rmSync } from 'node:fs';
import path from 'node:path';
import { buildIdentityModel } from './helpers/onnx-builder.js';
import { TempRepository } from './helpers/repository.js';

// Resolved through package.json "exports", as an application resolves it; a variable keeps tsc from resolving it at
// build time.
const PACKAGE = 'nereid';
const nereid = (await import(PACKAGE)) as typeof import('../src/index.js');
const { Server, Errors, NereidError, makeTensor, typedView, decodeBytesElements } = nereid;

function identityRepo(model: string, shape: number[], config: string): TempRepository {
  const repo = new TempRepository();
  repo.file(
    model,
    '1/model.onnx',
    buildIdentityModel([{ name: 'x', datatype: 'FP32', shape: ['batch', ...shape] }]).toBytes(),
  );
  repo.config(model, config);
  return repo;
}

const fp32 = (name: string, shape: number[], values: number[]) =>
  makeTensor(name, 'FP32', shape, new Uint8Array(new Float32Array(values).buffer));

test("the package's own name resolves to the public API", () => {
  assert.equal(typeof Server, 'function');
  assert.equal(typeof Errors.modelNotFound, 'function');
  assert.ok(Errors.modelNotFound('m') instanceof NereidError);
  assert.match(nereid.NEREID_VERSION, /^\d+\.\d+\.\d+/);
});

test('output reshape: the model answers [batch, 4], the client sees the configured dims [batch, 2, 2]', async (t) => {
  const repo = identityRepo(
    'reshaper',
    [4],
    `name: "reshaper"
platform: "onnxruntime_onnx"
max_batch_size: 4
input [ { name: "x" data_type: TYPE_FP32 dims: [ 2, 2 ] reshape: { shape: [ 4 ] } } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 2, 2 ] reshape: { shape: [ 4 ] } } ]
`,
  );
  t.after(() => repo.cleanup());
  const server = new Server({ modelRepositories: [repo.dir] });
  await server.start();
  t.after(() => server.stop());
  const r = await server.infer({ model: 'reshaper', inputs: [fp32('x', [1, 2, 2], [1, 2, 3, 4])] });
  assert.deepEqual(r.outputs[0]!.shape, [1, 2, 2]);
  assert.deepEqual([...(typedView(r.outputs[0]!) as Float32Array)], [1, 2, 3, 4]);
  const metadata = server.modelMetadata('reshaper');
  assert.deepEqual(metadata.outputs[0]!.shape, [-1, 2, 2]);
});

test('classification names each class from label_filename', async (t) => {
  const repo = identityRepo(
    'classifier',
    [3],
    `name: "classifier"
platform: "onnxruntime_onnx"
max_batch_size: 4
input [ { name: "x" data_type: TYPE_FP32 dims: [ 3 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 3 ] label_filename: "labels.txt" } ]
`,
  );
  repo.file('classifier', 'labels.txt', 'cat\ndog\nbird\n');
  t.after(() => repo.cleanup());
  const server = new Server({ modelRepositories: [repo.dir] });
  await server.start();
  t.after(() => server.stop());
  const r = await server.infer({
    model: 'classifier',
    inputs: [fp32('x', [1, 3], [0.1, 0.7, 0.2])],
    outputs: [{ name: 'OUTPUT0', classification: 2 }],
  });
  const out = r.outputs[0]!;
  assert.equal(out.datatype, 'BYTES');
  assert.deepEqual(out.shape, [1, 2]);
  const entries = decodeBytesElements(out.data).map((b) => Buffer.from(b).toString());
  assert.deepEqual(entries, ['0.700000:1:dog', '0.200000:2:bird']);
});

test('poll mode: a model whose folder is removed is unloaded', async (t) => {
  const repo = new TempRepository().addSub('stays').addSub('goes');
  t.after(() => repo.cleanup());
  const server = new Server({ modelRepositories: [repo.dir], modelControlMode: 'poll', repositoryPollSecs: 1 });
  await server.start();
  t.after(() => server.stop());
  const ready = (model: string) => server.modelReady(model).catch(() => false);
  assert.equal(await ready('goes'), true);
  rmSync(path.join(repo.dir, 'goes'), { recursive: true, force: true });
  // Wait for a poll to notice (bounded: fail rather than hang); no claim about how fast it is.
  for (let i = 0; i < 600 && (await ready('goes')); i++) await new Promise((r) => setTimeout(r, 100));
  assert.equal(await ready('goes'), false);
  await assert.rejects(
    server.infer({ model: 'goes', inputs: [] }),
    (err: unknown) => err instanceof NereidError && err.errorClass === 'NOT_FOUND',
  );
  assert.equal(await ready('stays'), true);
  const index = await server.repositoryIndex();
  assert.ok(!index.some((e) => e.name === 'goes' && e.state === 'READY'), JSON.stringify(index));
});

test('a request whose signal is already aborted is refused as cancelled and never runs', async (t) => {
  const repo = new TempRepository().addSub('simple');
  t.after(() => repo.cleanup());
  const server = new Server({ modelRepositories: [repo.dir] });
  await server.start();
  t.after(() => server.stop());
  const controller = new AbortController();
  controller.abort();
  const a = makeTensor('INPUT0', 'INT32', [1, 16], new Uint8Array(64));
  const b = makeTensor('INPUT1', 'INT32', [1, 16], new Uint8Array(64));
  const before = server.modelStatistics('simple')[0]!;
  await assert.rejects(server.infer({ model: 'simple', inputs: [a, b], signal: controller.signal }), (err: unknown) => {
    assert.ok(err instanceof NereidError);
    assert.equal(err.code, 'NRD_CANCELLED');
    assert.equal(err.errorClass, 'CANCELLED');
    return true;
  });
  const after = server.modelStatistics('simple')[0]!;
  assert.equal(after.execution_count, before.execution_count, 'nothing was executed');
  // The server still serves.
  assert.equal((await server.infer({ model: 'simple', inputs: [a, b] })).outputs.length, 2);
});
