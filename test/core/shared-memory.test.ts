/**
 * Inputs left in client shared-memory regions: the onnxruntime session
 * thread reads them from the region's file itself (nothing is read when the
 * request is decoded), batched with inputs in memory; a region unregistered
 * while a request uses it stays open until the request is done; a region
 * whose object shrank fails the request and the server keeps serving.
 * Real /dev/shm objects and the real add/sub ONNX model.
 */
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { readlinkSync, rmSync, truncateSync, writeFileSync } from 'node:fs';
import { Server } from '../../src/core/server.js';
import { RequestSharedMemory } from '../../src/core/shared-memory.js';
import { silentLogger } from '../../src/logger.js';
import { buildAddSubModel } from '../helpers/onnx-builder.js';
import type { Tensor } from '../../src/tensor/tensor.js';
import { TempRepository } from '../helpers/repository.js';

const N = 16;
const int32Bytes = (values: number[]) => Buffer.from(new Int32Array(values).buffer);
const int32s = (t: Tensor | undefined) => [
  ...new Int32Array(t!.data.buffer.slice(t!.data.byteOffset, t!.data.byteOffset + t!.data.byteLength)),
];
const A = Array.from({ length: N }, (_, i) => i + 1);
const B = Array.from({ length: N }, (_, i) => 1000 * i);
const C = Array.from({ length: N }, (_, i) => -7 * i);

const key = `/nereid-test-${process.pid}-${randomBytes(3).toString('hex')}-core`;
const file = `/dev/shm${key}`;

let repo: TempRepository;
let server: Server;

function memoryInput(name: string, values: number[]): Tensor {
  return { name, datatype: 'INT32', shape: [1, N], data: int32Bytes(values) };
}

function writeRegionFile(): void {
  // A at 0, B at 64, C at 128.
  writeFileSync(file, Buffer.concat([int32Bytes(A), int32Bytes(B), int32Bytes(C)]));
}

before(async () => {
  const config = `platform: "onnxruntime_onnx"
max_batch_size: 8
dynamic_batching { max_queue_delay_microseconds: 100000 preferred_batch_size: [ 2 ] }
input [ { name: "INPUT0" data_type: TYPE_INT32 dims: [ ${N} ] }, { name: "INPUT1" data_type: TYPE_INT32 dims: [ ${N} ]
  } ]
output [ { name: "OUTPUT0" data_type: TYPE_INT32 dims: [ ${N} ] },
  { name: "OUTPUT1" data_type: TYPE_INT32 dims: [ ${N} ] } ]
instance_group [ { kind: KIND_CPU count: 1 } ]
`;
  repo = new TempRepository()
    .config('add_sub', config)
    .file('add_sub', '1/model.onnx', buildAddSubModel('INT32', N).toBytes());
  server = new Server({ modelRepositories: [repo.dir], logger: silentLogger, allowClientShm: true });
  await server.start();
  writeRegionFile();
  server.sharedMemory.registerSystem('abc', key, 0, 3 * 4 * N);
});

after(async () => {
  await server?.stop();
  repo?.cleanup();
  rmSync(file, { force: true });
});

test('inputs in a region are read by the session thread, in one batch with inputs in memory', async () => {
  const executionsBefore = server.modelStatistics('add_sub')[0]!.execution_count;
  // Counts the buffers taken for reads on this thread: none may be.
  let mainThreadReads = 0;
  const registry = server.sharedMemory;
  const shm = new RequestSharedMemory({
    allowed: true,
    registerSystem: registry.registerSystem.bind(registry),
    registerCuda: registry.registerCuda.bind(registry),
    systemStatus: registry.systemStatus.bind(registry),
    cudaStatus: registry.cudaStatus.bind(registry),
    unregister: registry.unregister.bind(registry),
    acquire: registry.acquire.bind(registry),
    takeBuffer: (size) => {
      mainThreadReads += 1;
      return registry.takeBuffer(size);
    },
    giveBuffer: registry.giveBuffer.bind(registry),
  });
  try {
    // Request 1: INPUT0 = B from the region, INPUT1 = C in memory. Request 2: INPUT0 in memory, INPUT1 = A and
    // request 3 both from the region, so the batch's feeds interleave parts in memory and parts in the file.
    const fromRegion = (name: string, offset: number) =>
      shm.inputTensor(name, 'INT32', [1, N], { region: 'abc', offset, byteSize: 4 * N });
    const r1 = server.infer({ model: 'add_sub', inputs: [fromRegion('INPUT0', 64), memoryInput('INPUT1', C)] });
    const r2 = server.infer({ model: 'add_sub', inputs: [memoryInput('INPUT0', C), fromRegion('INPUT1', 0)] });
    const [a, b] = await Promise.all([r1, r2]);
    assert.deepEqual(int32s(a.outputs[0]), B.map((x, i) => x + C[i]!));
    assert.deepEqual(int32s(a.outputs[1]), B.map((x, i) => x - C[i]!));
    assert.deepEqual(int32s(b.outputs[0]), C.map((x, i) => x + A[i]!));
    assert.deepEqual(int32s(b.outputs[1]), C.map((x, i) => x - A[i]!));
    // preferred_batch_size 2: both requests ran as one batch.
    assert.equal(server.modelStatistics('add_sub')[0]!.execution_count, executionsBefore + 1);
    assert.equal(mainThreadReads, 0, 'the region was read by the session thread, not here');
  } finally {
    shm.release();
  }
});

test('a region unregistered while a request uses it stays open until the request lets go of it', async () => {
  server.sharedMemory.registerSystem('going', key, 0, 3 * 4 * N);
  const shm = new RequestSharedMemory(server.sharedMemory);
  const input0 = shm.inputTensor('INPUT0', 'INT32', [1, N], { region: 'going', offset: 0, byteSize: 4 * N });
  const input1 = shm.inputTensor('INPUT1', 'INT32', [1, N], { region: 'going', offset: 128, byteSize: 4 * N });
  const fd = input0.file!.fd;
  const pending = server.infer({ model: 'add_sub', inputs: [input0, input1] });
  // Unregistered before the session thread has read anything.
  server.sharedMemory.unregister('system', 'going');
  assert.deepEqual(server.sharedMemory.systemStatus().map((r) => r.name), ['abc']);
  const r = await pending;
  assert.deepEqual(int32s(r.outputs[0]), A.map((x, i) => x + C[i]!));
  assert.deepEqual(int32s(r.outputs[1]), A.map((x, i) => x - C[i]!));
  // Still open: the request has not let go.
  assert.equal(readlinkSync(`/proc/self/fd/${fd}`), file);
  shm.release();
  let after: string | undefined;
  try {
    after = readlinkSync(`/proc/self/fd/${fd}`);
  } catch {
    after = undefined;
  }
  assert.notEqual(after, file, 'the unregistered region is closed once its last request is done');
  // Bytes read after the request let go are refused, not read from a closed descriptor.
  assert.throws(() => input0.data, /was read after its request let go of it/);
});

test('a region whose object shrank after registering fails the request; the server keeps serving', async () => {
  const shm = new RequestSharedMemory(server.sharedMemory);
  try {
    const input0 = shm.inputTensor('INPUT0', 'INT32', [1, N], { region: 'abc', offset: 128, byteSize: 4 * N });
    const input1 = shm.inputTensor('INPUT1', 'INT32', [1, N], { region: 'abc', offset: 0, byteSize: 4 * N });
    truncateSync(file, 100);
    await assert.rejects(
      server.infer({ model: 'add_sub', inputs: [input0, input1] }),
      /input 'INPUT0': the file holding it ended after 0 of its 64 bytes/,
    );
  } finally {
    shm.release();
    writeRegionFile();
  }
  const shm2 = new RequestSharedMemory(server.sharedMemory);
  try {
    const input0 = shm2.inputTensor('INPUT0', 'INT32', [1, N], { region: 'abc', offset: 128, byteSize: 4 * N });
    const r = await server.infer({ model: 'add_sub', inputs: [input0, memoryInput('INPUT1', A)] });
    assert.deepEqual(int32s(r.outputs[0]), C.map((x, i) => x + A[i]!));
  } finally {
    shm2.release();
  }
});

test('a tensor read on the main thread (another backend, the response cache) gets the same bytes', () => {
  const shm = new RequestSharedMemory(server.sharedMemory);
  try {
    const t = shm.inputTensor('INPUT0', 'INT32', [1, N], { region: 'abc', offset: 64, byteSize: 4 * N });
    assert.deepEqual(int32s(t), B);
    // A copy made by spreading keeps the bytes.
    const copy = { ...t };
    assert.deepEqual(int32s(copy), B);
  } finally {
    shm.release();
  }
});
