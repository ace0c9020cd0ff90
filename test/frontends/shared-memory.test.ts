/**
 * Client system shared memory end to end: real /dev/shm objects created by
 * the test, registered over HTTP and gRPC, inputs read from and outputs
 * written into them by the real Server running Triton's "simple" add/sub
 * ONNX model; and every bad reference answered with Triton's status.
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { create } from '@bufbuild/protobuf';
import * as grpc from '@grpc/grpc-js';
import { ModelInferRequestSchema, type ModelInferResponse } from '../../src/gen/grpc_service_pb.js';
import { Server } from '../../src/core/server.js';
import { HttpFrontend } from '../../src/frontends/http/index.js';
import { silentLogger } from '../../src/logger.js';
import { buildAddSubModel } from '../helpers/onnx-builder.js';
import { TempRepository } from '../helpers/repository.js';
import { callError, startHarness, unary, type Harness } from './grpc/helpers.js';
import { call, json, type HttpReply } from './http/helpers.js';

const A = Array.from({ length: 16 }, (_, i) => i + 1);
const B = Array.from({ length: 16 }, (_, i) => 100 * i);
const SUM = A.map((a, i) => a + B[i]!);
const DIFF = A.map((a, i) => a - B[i]!);
const int32Bytes = (values: number[]) => Buffer.from(new Int32Array(values).buffer);
const int32At = (buf: Buffer, offset: number, n: number) => [
  ...new Int32Array(buf.buffer.slice(buf.byteOffset + offset, buf.byteOffset + offset + n * 4)),
];

const tag = `nereid-test-${process.pid}-${randomBytes(3).toString('hex')}`;
const inputKey = `/${tag}-in`;
const outputKey = `/${tag}-out`;
const shmFile = (key: string) => `/dev/shm${key}`;

let repo: TempRepository;
let server: Server;
let http: HttpFrontend;
let httpPort: number;
let grpcH: Harness;

const post = (path: string, body: unknown) => call(httpPort, 'POST', path, { body: JSON.stringify(body) });
const get = (path: string) => call(httpPort, 'GET', path);

function expectHttpError(r: HttpReply, status: number, message: string | RegExp): void {
  const doc = json(r) as { error: string };
  if (typeof message === 'string') assert.equal(doc.error, message);
  else assert.match(doc.error, message);
  assert.equal(r.status, status, doc.error);
}

/** An infer body for "simple" with both inputs in the input region and both outputs in the output region. */
function shmInferBody(
  overrides: { outputSize?: number; inputRegion?: string; inputOffset?: number; inputSize?: number } = {},
) {
  return {
    inputs: [
      {
        name: 'INPUT0',
        datatype: 'INT32',
        shape: [1, 16],
        parameters: {
          shared_memory_region: overrides.inputRegion ?? 'input_data',
          shared_memory_byte_size: overrides.inputSize ?? 64,
          shared_memory_offset: overrides.inputOffset ?? 0,
        },
      },
      {
        name: 'INPUT1',
        datatype: 'INT32',
        shape: [1, 16],
        parameters: { shared_memory_region: 'input_data', shared_memory_byte_size: 64, shared_memory_offset: 64 },
      },
    ],
    outputs: [
      {
        name: 'OUTPUT0',
        parameters: { shared_memory_region: 'output_data', shared_memory_byte_size: overrides.outputSize ?? 64 },
      },
      {
        name: 'OUTPUT1',
        parameters: { shared_memory_region: 'output_data', shared_memory_byte_size: 64, shared_memory_offset: 64 },
      },
    ],
  };
}

before(async () => {
  const simpleConfig = readFileSync(
    new URL('../../../examples/model_repository/simple/config.pbtxt', import.meta.url),
    'utf8',
  );
  repo = new TempRepository()
    .config('simple', simpleConfig)
    .file('simple', '1/model.onnx', buildAddSubModel('INT32', 16).toBytes());
  server = new Server({ modelRepositories: [repo.dir], logger: silentLogger, allowClientShm: true });
  await server.start();
  http = new HttpFrontend(server, { port: 0, address: '127.0.0.1', maxInputSize: 1 << 20, logger: silentLogger });
  httpPort = (await http.start()).port;
  grpcH = await startHarness(server);
  writeFileSync(shmFile(inputKey), Buffer.concat([int32Bytes(A), int32Bytes(B)]));
  // 16 bytes of guard after the two outputs: nothing may be written there.
  writeFileSync(shmFile(outputKey), Buffer.alloc(128 + 16, 0xee));
});

after(async () => {
  await grpcH?.close();
  await http?.stop();
  await server?.stop();
  repo?.cleanup();
  rmSync(shmFile(inputKey), { force: true });
  rmSync(shmFile(outputKey), { force: true });
});

describe('system shared memory over HTTP', () => {
  test('register, status, infer through regions, unregister one and all', async () => {
    assert.equal(
      (await post('/v2/systemsharedmemory/region/input_data/register', { key: inputKey, offset: 0, byte_size: 128 }))
        .status,
      200,
    );
    assert.equal(
      (await post('/v2/systemsharedmemory/region/output_data/register', { key: outputKey, byte_size: 128 })).status,
      200,
    );
    const status = json(await get('/v2/systemsharedmemory/status')) as unknown[];
    assert.deepEqual(
      status.sort((a, b) => String((a as { name: string }).name).localeCompare((b as { name: string }).name)),
      [
        { name: 'input_data', key: inputKey, offset: 0, byte_size: 128 },
        { name: 'output_data', key: outputKey, offset: 0, byte_size: 128 },
      ],
    );
    assert.deepEqual(json(await get('/v2/systemsharedmemory/region/input_data/status')), [
      { name: 'input_data', key: inputKey, offset: 0, byte_size: 128 },
    ]);

    // Twice: regions survive across requests.
    for (let round = 0; round < 2; round++) {
      const r = await post('/v2/models/simple/infer', shmInferBody());
      assert.equal(r.status, 200, r.body.toString());
      const doc = json(r) as { outputs: Array<Record<string, unknown>> };
      assert.deepEqual(doc.outputs, [
        { name: 'OUTPUT0', datatype: 'INT32', shape: [1, 16] },
        { name: 'OUTPUT1', datatype: 'INT32', shape: [1, 16] },
      ]);
      const out = readFileSync(shmFile(outputKey));
      assert.deepEqual(int32At(out, 0, 16), SUM);
      assert.deepEqual(int32At(out, 64, 16), DIFF);
      assert.ok(out.subarray(128).every((b) => b === 0xee), 'nothing written past the region');
    }

    assert.equal((await post('/v2/systemsharedmemory/region/input_data/unregister', {})).status, 200);
    expectHttpError(
      await get('/v2/systemsharedmemory/region/input_data/status'),
      404,
      "Unable to find system shared memory region: 'input_data'",
    );
    expectHttpError(
      await post('/v2/models/simple/infer', shmInferBody()),
      404,
      "Unable to find shared memory region: 'input_data'",
    );
    // Unknown names unregister without complaint, as in Triton.
    assert.equal((await post('/v2/systemsharedmemory/region/never/unregister', {})).status, 200);
    assert.equal((await post('/v2/systemsharedmemory/unregister', {})).status, 200);
    assert.equal((await get('/v2/systemsharedmemory/status')).body.toString(), '[]');
  });

  test('bad registrations: missing fields, unknown key, beyond the object, twice, reserved key', async () => {
    expectHttpError(
      await post('/v2/systemsharedmemory/region/r/register', { byte_size: 4 }),
      400,
      "Shared memory register request has no 'key' field",
    );
    expectHttpError(
      await post('/v2/systemsharedmemory/region/r/register', { key: inputKey }),
      400,
      "Shared memory register request has no 'byte_size' field",
    );
    expectHttpError(
      await post('/v2/systemsharedmemory/region/r/register', { key: '/no-such-object-here', byte_size: 4 }),
      500,
      "Unable to open shared memory region: '/no-such-object-here'",
    );
    const size = statSync(shmFile(inputKey)).size;
    expectHttpError(
      await post('/v2/systemsharedmemory/region/r/register', { key: inputKey, offset: 8, byte_size: size }),
      400,
      "failed to register shared memory region 'r': invalid args",
    );
    expectHttpError(
      await post('/v2/systemsharedmemory/region/r/register', {
        key: '/triton_python_backend_shm_region_1',
        byte_size: 4,
      }),
      400,
      "cannot register shared memory region 'r' with key '/triton_python_backend_shm_region_1' " +
      "as the key contains the reserved prefix 'triton_python_backend_shm_region_'",
    );
    assert.equal(
      (await post('/v2/systemsharedmemory/region/r/register', { key: inputKey, byte_size: 16 })).status,
      200,
    );
    expectHttpError(
      await post('/v2/systemsharedmemory/region/r/register', { key: inputKey, byte_size: 16 }),
      400,
      "shared memory region 'r' already in manager",
    );
    expectHttpError(
      await post('/v2/systemsharedmemory/register', { key: inputKey, byte_size: 16 }),
      400,
      "'region name' is necessary to register system shared memory region",
    );
    assert.equal((await post('/v2/systemsharedmemory/unregister', {})).status, 200);
  });

  test('bad windows in a request: offset, size, output too small; nothing is written', async () => {
    await post('/v2/systemsharedmemory/region/input_data/register', { key: inputKey, byte_size: 128 });
    await post('/v2/systemsharedmemory/region/output_data/register', { key: outputKey, byte_size: 128 });
    writeFileSync(shmFile(outputKey), Buffer.alloc(128 + 16, 0xee));
    expectHttpError(
      await post('/v2/models/simple/infer', shmInferBody({ inputOffset: 128 })),
      400,
      "Invalid offset for shared memory region: 'input_data'",
    );
    expectHttpError(
      await post('/v2/models/simple/infer', shmInferBody({ inputOffset: 100, inputSize: 64 })),
      400,
      "Invalid offset + byte size for shared memory region: 'input_data'",
    );
    expectHttpError(
      await post('/v2/models/simple/infer', shmInferBody({ inputSize: 60 })),
      400,
      /input byte size mismatch for input 'INPUT0' for model 'simple'. Expected 64, got 60/,
    );
    expectHttpError(
      await post('/v2/models/simple/infer', shmInferBody({ outputSize: 32 })),
      500,
      "shared memory size specified with the request for output 'OUTPUT0' " +
      "(32 bytes) should be at least 64 bytes to hold the results",
    );
    assert.ok(readFileSync(shmFile(outputKey)).every((b) => b === 0xee), 'a failed request writes nothing');
    // The server keeps serving.
    assert.equal((await post('/v2/models/simple/infer', shmInferBody())).status, 200);
    await post('/v2/systemsharedmemory/unregister', {});
  });

  test('CUDA shared memory: no GPU here', async () => {
    expectHttpError(
      await post('/v2/cudasharedmemory/region/c/register', { raw_handle: { b64: '' }, device_id: 0, byte_size: 4 }),
      400,
      "failed to register CUDA shared memory region: 'c', GPUs not supported",
    );
    assert.equal((await get('/v2/cudasharedmemory/status')).body.toString(), '[]');
    await post('/v2/systemsharedmemory/region/sys/register', { key: inputKey, byte_size: 4 });
    expectHttpError(
      await get('/v2/cudasharedmemory/region/sys/status'),
      404,
      "The region named 'sys' is registered as system shared memory, not CUDA shared memory",
    );
    await post('/v2/systemsharedmemory/unregister', {});
  });
});

describe('system shared memory over gRPC', () => {
  const shmParams = (region: string, size: number, offset = 0) => ({
    shared_memory_region: { parameterChoice: { case: 'stringParam' as const, value: region } },
    shared_memory_byte_size: { parameterChoice: { case: 'int64Param' as const, value: BigInt(size) } },
    shared_memory_offset: { parameterChoice: { case: 'int64Param' as const, value: BigInt(offset) } },
  });
  const request = (outputSize = 64) =>
    create(ModelInferRequestSchema, {
      modelName: 'simple',
      inputs: [
        { name: 'INPUT0', datatype: 'INT32', shape: [1n, 16n], parameters: shmParams('in', 64) },
        { name: 'INPUT1', datatype: 'INT32', shape: [1n, 16n], parameters: shmParams('in', 64, 64) },
      ],
      outputs: [
        { name: 'OUTPUT0', parameters: shmParams('out', outputSize) },
        { name: 'OUTPUT1', parameters: shmParams('out', 64, 64) },
      ],
    });

  test('register, status, infer through regions (unary and streaming), unregister', async () => {
    await unary(grpcH.client, 'SystemSharedMemoryRegister', { name: 'in', key: inputKey, offset: 0n, byteSize: 128n });
    await unary(grpcH.client, 'SystemSharedMemoryRegister', {
      name: 'out',
      key: outputKey,
      offset: 0n,
      byteSize: 128n,
    });
    const status = await unary<{
      regions: Record<string, { name: string; key: string; offset: bigint; byteSize: bigint }>;
    }>(grpcH.client, 'SystemSharedMemoryStatus', { name: 'in' });
    assert.deepEqual(Object.keys(status.regions), ['in']);
    assert.equal(status.regions['in']!.key, inputKey);
    assert.equal(status.regions['in']!.byteSize, 128n);

    writeFileSync(shmFile(outputKey), Buffer.alloc(128 + 16, 0xee));
    const res = await unary<ModelInferResponse>(grpcH.client, 'ModelInfer', request());
    assert.deepEqual(
      res.outputs.map((o) => [o.name, o.datatype, o.shape]),
      [
        ['OUTPUT0', 'INT32', [1n, 16n]],
        ['OUTPUT1', 'INT32', [1n, 16n]],
      ],
    );
    assert.deepEqual(
      res.rawOutputContents.map((c) => c.byteLength),
      [0, 0],
      'outputs in shared memory come back with empty contents',
    );
    let out = readFileSync(shmFile(outputKey));
    assert.deepEqual(int32At(out, 0, 16), SUM);
    assert.deepEqual(int32At(out, 64, 16), DIFF);
    assert.ok(out.subarray(128).every((b) => b === 0xee));

    writeFileSync(shmFile(outputKey), Buffer.alloc(128 + 16, 0));
    const streamed = await new Promise<unknown[]>((resolve, reject) => {
      const got: unknown[] = [];
      const s = (
        grpcH.client as unknown as { ModelStreamInfer(): grpc.ClientDuplexStream<unknown, unknown> }
      ).ModelStreamInfer();
      s.on('data', (m) => got.push(m));
      s.on('error', reject);
      s.on('end', () => resolve(got));
      s.write(request());
      s.end();
    });
    assert.equal(streamed.length, 1);
    assert.equal((streamed[0] as { errorMessage: string }).errorMessage, '');
    out = readFileSync(shmFile(outputKey));
    assert.deepEqual(int32At(out, 0, 16), SUM);

    const small = await callError(unary(grpcH.client, 'ModelInfer', request(16)));
    assert.equal(small.code, grpc.status.INTERNAL);
    assert.match(small.details, /output 'OUTPUT0' \(16 bytes\) should be at least 64 bytes/);

    await unary(grpcH.client, 'SystemSharedMemoryUnregister', { name: 'in' });
    const gone = await callError(unary(grpcH.client, 'ModelInfer', request()));
    assert.equal(gone.code, grpc.status.NOT_FOUND);
    assert.equal(gone.details, "Unable to find shared memory region: 'in'");
    await unary(grpcH.client, 'SystemSharedMemoryUnregister', { name: '' });
    const empty = await unary<{ regions: Record<string, unknown> }>(grpcH.client, 'SystemSharedMemoryStatus', {});
    assert.deepEqual(Object.keys(empty.regions), []);
  });

  test('errors: already registered, beyond the object, CUDA without a GPU', async () => {
    await unary(grpcH.client, 'SystemSharedMemoryRegister', { name: 'dup', key: inputKey, offset: 0n, byteSize: 8n });
    const dup = await callError(
      unary(grpcH.client, 'SystemSharedMemoryRegister', { name: 'dup', key: inputKey, offset: 0n, byteSize: 8n }),
    );
    assert.equal(dup.code, grpc.status.ALREADY_EXISTS);
    assert.equal(dup.details, "shared memory region 'dup' already in manager");
    const big = await callError(
      unary(grpcH.client, 'SystemSharedMemoryRegister', {
        name: 'big',
        key: inputKey,
        offset: 0n,
        byteSize: 1n << 20n,
      }),
    );
    assert.equal(big.code, grpc.status.INVALID_ARGUMENT);
    assert.equal(big.details, "failed to register shared memory region 'big': invalid args");
    const cuda = await callError(
      unary(grpcH.client, 'CudaSharedMemoryRegister', {
        name: 'c',
        rawHandle: new Uint8Array(64),
        deviceId: 0n,
        byteSize: 4n,
      }),
    );
    assert.equal(cuda.code, grpc.status.INVALID_ARGUMENT);
    assert.equal(cuda.details, "failed to register CUDA shared memory region: 'c', GPUs not supported");
    await unary(grpcH.client, 'SystemSharedMemoryUnregister', { name: '' });
  });
});

test('with client shared memory off (the default) registering answers 501 with the flag to pass', async () => {
  const off = new Server({ modelRepositories: [repo.dir], logger: silentLogger, modelControlMode: 'explicit' });
  await off.start();
  try {
    assert.throws(
      () => off.sharedMemory.registerSystem('r', inputKey, 0, 4),
      (e: { httpStatus: number; message: string }) =>
        e.httpStatus === 501 &&
        e.message === "Client shared memory is disabled. Start the server with '--allow-client-shm=true' to enable.",
    );
    assert.deepEqual(off.sharedMemory.systemStatus(), []);
  } finally {
    await off.stop();
  }
});
