/** JavaScript models over the real gRPC frontend: raw tensor contents both ways, and errors as gRPC statuses. */
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { create } from '@bufbuild/protobuf';
import * as grpc from '@grpc/grpc-js';
import { ModelInferRequestSchema, type ModelInferResponse } from '../../../src/gen/grpc_service_pb.js';
import { Server } from '../../../src/core/server.js';
import { silentLogger } from '../../../src/logger.js';
import { decodeBytesElements, encodeBytesElements } from '../../../src/tensor/tensor.js';
import { TempRepository } from '../../helpers/repository.js';
import { callError, startHarness, unary, type Harness } from '../../frontends/grpc/helpers.js';
import { FAULTY_CONFIG, FAULTY_MODEL, Mode, jsModel } from './fixtures.js';

let repo: TempRepository;
let server: Server;
let h: Harness;

before(async () => {
  repo = new TempRepository();
  jsModel(
    repo,
    'echo_js',
    `name: "echo_js"
backend: "javascript"
max_batch_size: 4
input [ { name: "X" data_type: TYPE_FP32 dims: [ 3 ] }, { name: "S" data_type: TYPE_STRING dims: [ 2 ] } ]
output [ { name: "X2" data_type: TYPE_FP32 dims: [ 3 ] }, { name: "S" data_type: TYPE_STRING dims: [ 2 ] } ]
`,
    `export default class {
  execute(requests) {
    return requests.map((r) => {
      const [x, s] = r.inputs;
      return { outputs: [{ name: 'X2', shape: x.shape, data: x.data.map((v) => v * 2) }, { ...s }] };
    });
  }
}
`,
  );
  jsModel(repo, 'faulty', FAULTY_CONFIG, FAULTY_MODEL);
  server = new Server({ modelRepositories: [repo.dir], logger: silentLogger });
  await server.start();
  h = await startHarness(server);
});

after(async () => {
  await h?.close();
  await server?.stop();
  repo?.cleanup();
});

test('ModelInfer with raw contents reaches a JavaScript model and its outputs come back raw', async () => {
  const x = new Float32Array([1.5, -2, 8, 0.25, 0, 3]);
  const strings = ['α', '', 'beta', 'γγ'];
  const res = await unary<ModelInferResponse>(
    h.client,
    'ModelInfer',
    create(ModelInferRequestSchema, {
      modelName: 'echo_js',
      inputs: [
        { name: 'X', datatype: 'FP32', shape: [2n, 3n] },
        { name: 'S', datatype: 'BYTES', shape: [2n, 2n] },
      ],
      rawInputContents: [new Uint8Array(x.buffer), encodeBytesElements(strings)],
    }),
  );
  assert.deepEqual(res.outputs.map((o) => [o.name, o.datatype, o.shape.map(Number)]), [
    ['X2', 'FP32', [2, 3]],
    ['S', 'BYTES', [2, 2]],
  ]);
  assert.deepEqual([...new Float32Array(new Uint8Array(res.rawOutputContents[0]!).buffer)], [...x].map((v) => v * 2));
  assert.deepEqual(decodeBytesElements(res.rawOutputContents[1]!).map((e) => Buffer.from(e).toString()), strings);
});

test('a failing JavaScript model answers gRPC INTERNAL with its message', async () => {
  const err = await callError(
    unary(
      h.client,
      'ModelInfer',
      create(ModelInferRequestSchema, {
        modelName: 'faulty',
        inputs: [{ name: 'MODE', datatype: 'INT32', shape: [1n] }],
        rawInputContents: [new Uint8Array(new Int32Array([Mode.wrongCount]).buffer)],
      }),
    ),
  );
  assert.equal(err.code, grpc.status.INTERNAL);
  assert.match(err.details, /model 'faulty' failed: execute\(\) returned 0 responses for 1 request/);
});
