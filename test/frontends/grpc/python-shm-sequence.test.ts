/**
 * Interop: a Python grpcio client with stubs compiled from our .proto files
 * runs the flows of Triton's shared-memory and sequence client examples
 * against the real Server: POSIX shared memory created by the client
 * process, and a ModelStreamInfer sequence on simple_sequence.
 */
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { readFileSync, rmSync } from 'node:fs';
import path from 'node:path';
import { promisify } from 'node:util';
import { Server } from '../../../src/core/server.js';
import { silentLogger } from '../../../src/logger.js';
import { buildAddSubModel, buildSequenceControlModel } from '../../helpers/onnx-builder.js';
import { TempRepository } from '../../helpers/repository.js';
import { repoRoot, startHarness, type Harness } from './helpers.js';
import { compileProtos } from './python.js';

const run = promisify(execFile);

const SIMPLE_SEQUENCE = `platform: "onnxruntime_onnx"
max_batch_size: 8
sequence_batching {
  control_input [
    { name: "START" control [ { kind: CONTROL_SEQUENCE_START int32_false_true: [ 0, 1 ] } ] },
    { name: "READY" control [ { kind: CONTROL_SEQUENCE_READY int32_false_true: [ 0, 1 ] } ] }
  ]
}
input [ { name: "INPUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "OUTPUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
`;

let repo: TempRepository;
let server: Server;
let h: Harness;
let stubs: string;

before(async () => {
  const simpleConfig = readFileSync(path.join(repoRoot, 'examples/model_repository/simple/config.pbtxt'), 'utf8');
  repo = new TempRepository()
    .config('simple', simpleConfig)
    .file('simple', '1/model.onnx', buildAddSubModel('INT32', 16).toBytes())
    .config('simple_sequence', SIMPLE_SEQUENCE)
    .file('simple_sequence', '1/model.onnx', buildSequenceControlModel(false).toBytes());
  server = new Server({ modelRepositories: [repo.dir], logger: silentLogger, allowClientShm: true });
  await server.start();
  h = await startHarness(server);
  stubs = await compileProtos();
});

after(async () => {
  await h?.close();
  await server?.stop();
  repo?.cleanup();
  if (stubs) rmSync(stubs, { recursive: true, force: true });
});

test("Triton's shared-memory and sequence client flows from a Python grpcio client", async () => {
  const { stdout } = await run(
    '/usr/bin/python3',
    [path.join(repoRoot, 'test/interop/shm_sequence_client.py'), String(h.port)],
    {
      env: { ...process.env, PYTHONPATH: stubs },
      timeout: 60_000,
    },
  );
  const r = JSON.parse(stdout) as {
    shm: {
      regions: string[];
      raw_sizes: number[];
      shapes: number[][];
      sum: number[];
      difference: number[];
      duplicate: { code: string; details: string } | null;
      after_unregister: number;
    };
    sequence: unknown[];
  };
  assert.deepEqual(r.shm.regions, ['input_data', 'output_data']);
  assert.deepEqual(r.shm.raw_sizes, [0, 0]);
  assert.deepEqual(r.shm.shapes, [
    [1, 16],
    [1, 16],
  ]);
  assert.deepEqual(r.shm.sum, Array.from({ length: 16 }, (_, i) => i + 1));
  assert.deepEqual(r.shm.difference, Array.from({ length: 16 }, (_, i) => i - 1));
  assert.deepEqual(r.shm.duplicate, {
    code: 'ALREADY_EXISTS',
    details: "shared memory region 'input_data' already in manager",
  });
  assert.equal(r.shm.after_unregister, 0);
  assert.deepEqual(r.sequence, [1, 11, 7, 5, 3, 2, 0, 1]);
});
