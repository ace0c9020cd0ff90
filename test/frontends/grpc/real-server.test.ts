/**
 * The gRPC frontend in front of the real Server with real ONNX models:
 * Triton's "simple" example (INPUT0/INPUT1 INT32[16] → sum, difference) and
 * a BYTES identity model, over grpc-js and over Python grpcio.
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync, rmSync } from 'node:fs';
import { create, type MessageInitShape } from '@bufbuild/protobuf';
import * as grpc from '@grpc/grpc-js';
import {
  ModelInferRequestSchema,
  type ModelInferResponse,
  type ModelStreamInferResponse,
} from '../../../src/gen/grpc_service_pb.js';
import { Server } from '../../../src/core/server.js';
import { silentLogger } from '../../../src/logger.js';
import { buildAddSubModel, buildIdentityModel } from '../../helpers/onnx-builder.js';
import { TempRepository } from '../../helpers/repository.js';
import { callError, startHarness, unary, type Harness } from './helpers.js';
import { compileProtos, runPythonClient, type PythonResponse } from './python.js';

const S = grpc.status;
const A = Array.from({ length: 16 }, (_, i) => i + 1);
const B = Array.from({ length: 16 }, () => 1);

const int32Bytes = (values: number[]) => new Uint8Array(new Int32Array(values).buffer);
const int32Values = (bytes: Uint8Array) => [...new Int32Array(new Uint8Array(bytes).buffer)];

type RequestInit = MessageInitShape<typeof ModelInferRequestSchema>;

function simpleRequest(extra: RequestInit = {}) {
  return create(ModelInferRequestSchema, {
    modelName: 'simple',
    id: 'req',
    inputs: [
      { name: 'INPUT0', datatype: 'INT32', shape: [1n, 16n] },
      { name: 'INPUT1', datatype: 'INT32', shape: [1n, 16n] },
    ],
    rawInputContents: [int32Bytes(A), int32Bytes(B)],
    ...extra,
  });
}

let repo: TempRepository;
let server: Server;
let h: Harness;

before(async () => {
  const simpleConfig = readFileSync(
    new URL('../../../../examples/model_repository/simple/config.pbtxt', import.meta.url),
    'utf8',
  );
  repo = new TempRepository()
    .config('simple', simpleConfig)
    .file('simple', '1/model.onnx', buildAddSubModel('INT32', 16).toBytes())
    .config(
      'strings',
      `name: "strings"
platform: "onnxruntime_onnx"
max_batch_size: 4
input [ { name: "INPUT0" data_type: TYPE_STRING dims: [ 2 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_STRING dims: [ 2 ] } ]
`,
    )
    .file('strings', '1/model.onnx', buildIdentityModel([{ name: 'INPUT0', datatype: 'BYTES', shape: ['batch', 2] }])
      .toBytes())
    .addSub('later');
  server = new Server({
    modelRepositories: [repo.dir],
    modelControlMode: 'explicit',
    loadModels: ['simple', 'strings'],
    logger: silentLogger,
  });
  await server.start();
  h = await startHarness(server);
});

after(async () => {
  await h?.close();
  await server?.stop();
  repo?.cleanup();
});

describe('gRPC frontend with the real Server', () => {
  test('ModelInfer on simple returns the sum and the difference', async () => {
    const res = await unary<ModelInferResponse>(h.client, 'ModelInfer', simpleRequest());
    assert.equal(res.modelName, 'simple');
    assert.equal(res.modelVersion, '1');
    assert.equal(res.id, 'req');
    assert.deepEqual(res.outputs.map((o) => [o.name, o.datatype, o.shape]), [
      ['OUTPUT0', 'INT32', [1n, 16n]],
      ['OUTPUT1', 'INT32', [1n, 16n]],
    ]);
    assert.deepEqual(int32Values(res.rawOutputContents[0]!), A.map((a, i) => a + B[i]!));
    assert.deepEqual(int32Values(res.rawOutputContents[1]!), A.map((a, i) => a - B[i]!));
  });

  test('typed int_contents and a requested output', async () => {
    const res = await unary<ModelInferResponse>(
      h.client,
      'ModelInfer',
      simpleRequest({
        inputs: [
          { name: 'INPUT0', datatype: 'INT32', shape: [1n, 16n], contents: { intContents: A } },
          { name: 'INPUT1', datatype: 'INT32', shape: [1n, 16n], contents: { intContents: B } },
        ],
        rawInputContents: [],
        outputs: [{ name: 'OUTPUT1' }],
      }),
    );
    assert.deepEqual(res.outputs.map((o) => o.name), ['OUTPUT1']);
    assert.deepEqual(int32Values(res.rawOutputContents[0]!), A.map((a) => a - 1));
  });

  test('BYTES in both forms come back length-prefixed in raw_output_contents', async () => {
    const raw = Buffer.from([1, 0, 0, 0, 0x61, 2, 0, 0, 0, 0x62, 0x63]);
    for (const input of [
      { rawInputContents: [raw], contents: undefined },
      { rawInputContents: [], contents: { bytesContents: [Buffer.from('a'), Buffer.from('bc')] } },
    ]) {
      const res = await unary<ModelInferResponse>(h.client, 'ModelInfer', {
        modelName: 'strings',
        inputs: [{ name: 'INPUT0', datatype: 'BYTES', shape: [1n, 2n], contents: input.contents }],
        rawInputContents: input.rawInputContents,
      });
      assert.equal(res.outputs[0]!.datatype, 'BYTES');
      assert.deepEqual(Buffer.from(res.rawOutputContents[0]!), raw);
    }
  });

  test('classification turns an output into BYTES "value:index" entries', async () => {
    const res = await unary<ModelInferResponse>(
      h.client,
      'ModelInfer',
      simpleRequest({
        outputs: [
          { name: 'OUTPUT0', parameters: { classification: { parameterChoice: { case: 'int64Param', value: 2n } } } },
        ],
      }),
    );
    assert.equal(res.outputs[0]!.datatype, 'BYTES');
    const text = Buffer.from(res.rawOutputContents[0]!).toString('latin1');
    assert.match(text, /17:15/);
    assert.match(text, /16:14/);
  });

  test('core validation errors map to Triton’s gRPC codes and the server stays ready', async () => {
    const cases: Array<[RequestInit, number, RegExp]> = [
      [
        {
          rawInputContents: [int32Bytes(A.slice(1)), int32Bytes(B)],
          inputs: [
            { name: 'INPUT0', datatype: 'INT32', shape: [1n, 16n] },
            { name: 'INPUT1', datatype: 'INT32', shape: [1n, 16n] },
          ],
        },
        S.INVALID_ARGUMENT,
        /input byte size mismatch for input 'INPUT0' for model 'simple'. Expected 64, got 60/,
      ],
      [
        {
          inputs: [
            { name: 'INPUT0', datatype: 'FP32', shape: [1n, 16n] },
            { name: 'INPUT1', datatype: 'INT32', shape: [1n, 16n] },
          ],
        },
        S.INVALID_ARGUMENT,
        /data-type is 'FP32', but model 'simple' expects 'INT32'/,
      ],
      [
        {
          inputs: [
            { name: 'INPUT0', datatype: 'INT32', shape: [1n, 8n] },
            { name: 'INPUT1', datatype: 'INT32', shape: [1n, 16n] },
          ],
        },
        S.INVALID_ARGUMENT,
        /unexpected shape for input 'INPUT0'/,
      ],
      [{ modelName: 'missing' }, S.NOT_FOUND, /Request for unknown model: 'missing' is not found/],
      [{ modelVersion: '9' }, S.NOT_FOUND, /'simple' version 9 is not found/],
      [{ outputs: [{ name: 'NOPE' }] }, S.INVALID_ARGUMENT, /unexpected inference output 'NOPE' for model 'simple'/],
    ];
    for (const [extra, code, message] of cases) {
      const err = await callError(unary(h.client, 'ModelInfer', simpleRequest(extra)));
      assert.equal(err.code, code, message.source);
      assert.match(err.details, message);
    }
    assert.equal((await unary<{ ready: boolean }>(h.client, 'ServerReady', {})).ready, true);
  });

  test('metadata, config, statistics and readiness of simple', async () => {
    const md = await unary<{ platform: string; inputs: Array<{ name: string; shape: bigint[] }> }>(
      h.client,
      'ModelMetadata',
      { name: 'simple' },
    );
    assert.equal(md.platform, 'onnxruntime_onnx');
    assert.deepEqual(md.inputs.map((i) => [i.name, i.shape]), [
      ['INPUT0', [-1n, 16n]],
      ['INPUT1', [-1n, 16n]],
    ]);
    const cfg = await unary<{ config: { name: string; maxBatchSize: number } }>(h.client, 'ModelConfig', {
      name: 'simple',
    });
    assert.equal(cfg.config.name, 'simple');
    assert.equal(cfg.config.maxBatchSize, 8);
    const stats = await unary<{ modelStats: Array<{ name: string; inferenceCount: bigint }> }>(
      h.client,
      'ModelStatistics',
      { name: 'simple' },
    );
    assert.equal(stats.modelStats[0]!.name, 'simple');
    assert.ok(stats.modelStats[0]!.inferenceCount > 0n);
    assert.equal((await unary<{ ready: boolean }>(h.client, 'ModelReady', { name: 'simple' })).ready, true);
  });

  test('explicit load and unload over gRPC', async () => {
    await unary(h.client, 'RepositoryModelLoad', { modelName: 'later' });
    assert.equal((await unary<{ ready: boolean }>(h.client, 'ModelReady', { name: 'later' })).ready, true);
    await unary(h.client, 'RepositoryModelUnload', { modelName: 'later' });
    // As Triton's simple_grpc_model_control expects: an unloaded model is not ready (not an error).
    assert.equal((await unary<{ ready: boolean }>(h.client, 'ModelReady', { name: 'later' })).ready, false);
    const err = await callError(unary(h.client, 'ModelReady', { name: 'no_such_model' }));
    assert.equal(err.code, S.NOT_FOUND);
  });

  test('the steps of simple_grpc_model_control: error codes and texts', async () => {
    const invalid = await callError(
      unary(h.client, 'RepositoryModelLoad', {
        modelName: 'later',
        parameters: {
          config: {
            parameterChoice: { case: 'stringParam', value: '"parameters": {"config": {{"max_batch_size": "16"}}}' },
          },
        },
      }),
    );
    assert.equal(invalid.code, S.INTERNAL);
    assert.match(invalid.details, /failed to load 'later'/);
    const long = await callError(
      unary(h.client, 'RepositoryModelLoad', {
        modelName: 'simple',
        parameters: {
          config: { parameterChoice: { case: 'stringParam', value: '{}' } },
          [`file:${'A'.repeat(256)}`]: { parameterChoice: { case: 'bytesParam', value: new Uint8Array([97]) } },
        },
      }),
    );
    assert.equal(long.code, S.INTERNAL);
    assert.match(long.details, /failed to poll from model repository/);
    const wrong = await callError(unary(h.client, 'RepositoryModelLoad', { modelName: 'wrong_model_name' }));
    assert.match(wrong.details, /failed to load/);
    assert.equal(
      (await unary<{ ready: boolean }>(h.client, 'ModelReady', { name: 'simple' })).ready,
      true,
      'still serving',
    );
  });

  test('ModelStreamInfer keeps order and reports a bad request in-stream', async () => {
    const messages = await new Promise<ModelStreamInferResponse[]>((resolve, reject) => {
      const out: ModelStreamInferResponse[] = [];
      const call = (
        h.client as unknown as { ModelStreamInfer(): grpc.ClientDuplexStream<unknown, ModelStreamInferResponse> }
      ).ModelStreamInfer();
      call.on('data', (m) => out.push(m));
      call.on('end', () => resolve(out));
      call.on('error', reject);
      call.write(simpleRequest({ id: 'a' }));
      call.write(simpleRequest({ id: 'b', modelName: 'missing' }));
      call.write(simpleRequest({ id: 'c' }));
      call.end();
    });
    assert.deepEqual(messages.map((m) => [m.errorMessage === '', m.inferResponse!.id]), [
      [true, 'a'],
      [false, 'b'],
      [true, 'c'],
    ]);
    assert.deepEqual(int32Values(messages[2]!.inferResponse!.rawOutputContents[0]!), A.map((a) => a + 1));
  });

  test('Python grpcio client against the real Server', async () => {
    const stubs = await compileProtos();
    try {
      const r = await runPythonClient(stubs, h.port, 'simple');
      assert.equal(r.model_ready, true);
      assert.deepEqual(r.infer.outputs.OUTPUT0!.values, Array.from({ length: 16 }, (_, i) => i + 1));
      assert.deepEqual(r.infer.outputs.OUTPUT1!.values, Array.from({ length: 16 }, (_, i) => i - 1));
      assert.equal(r.unknown_model?.code, 'NOT_FOUND');
      assert.equal(r.stream.length, 3);
      assert.equal((r.stream[0] as PythonResponse).outputs.OUTPUT0!.values[0], 101);
      assert.equal((r.stream[1] as { id: string }).id, 's1');
      assert.equal((r.stream[2] as PythonResponse).outputs.OUTPUT0!.values[0], 201);
      // Health follows the server's readiness (which an explicit unload above may have changed).
      assert.equal(r.health, server.isReady() ? 'SERVING' : 'NOT_SERVING');
    } finally {
      rmSync(stubs, { recursive: true, force: true });
    }
  });
});
