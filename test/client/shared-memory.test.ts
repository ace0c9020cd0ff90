/**
 * System shared memory made from Node: a region created under /dev/shm,
 * registered with a real `nereid serve`, read for inputs and written with
 * outputs by the server, over HTTP and gRPC.
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import {
  InferenceClient,
  InferenceServerError,
  InvalidInputError,
  SystemSharedMemoryRegion,
} from '../../src/client/index.js';
import { startClientTestServer, type ClientTestServer } from './helpers.js';

let server: ClientTestServer;

before(async () => {
  server = await startClientTestServer();
});

after(async () => {
  await server?.stop();
});

const PROTOCOLS = [
  { label: 'HTTP', url: () => `http://127.0.0.1:${server.ports.http}` },
  { label: 'gRPC', url: () => `grpc://127.0.0.1:${server.ports.grpc}` },
] as const;

for (const p of PROTOCOLS) {
  describe(`system shared memory over ${p.label}`, () => {
    let client: InferenceClient;
    before(() => {
      client = new InferenceClient({ url: p.url() });
    });
    after(() => client.close());

    test('inputs read from and an output written to a region made from Node', async () => {
      const key = `/nereid_client_test_${process.pid}_${p.label}`;
      const region = SystemSharedMemoryRegion.create(key, 256);
      try {
        const a = Int32Array.from({ length: 16 }, (_, i) => i);
        const b = Int32Array.from({ length: 16 }, (_, i) => 2 * i);
        assert.equal(region.writeTensor('INT32', a, 0), 64);
        assert.equal(region.writeTensor('INT32', b, 64), 64);
        await client.registerSystemSharedMemory('io', region.key, region.byteSize);
        assert.deepEqual(await client.systemSharedMemoryStatus('io'), [{ name: 'io', key, offset: 0, byteSize: 256 }]);
        const r = await client.infer({
          model: 'simple',
          inputs: [
            { name: 'INPUT0', datatype: 'INT32', shape: [1, 16], sharedMemory: { region: 'io', byteSize: 64 } },
            {
              name: 'INPUT1',
              datatype: 'INT32',
              shape: [1, 16],
              sharedMemory: { region: 'io', byteSize: 64, offset: 64 },
            },
          ],
          outputs: [
            { name: 'OUTPUT0', sharedMemory: { region: 'io', byteSize: 64, offset: 128 } },
            { name: 'OUTPUT1' },
          ],
        });
        const [sum, diff] = r.outputs;
        assert.deepEqual(sum!.sharedMemory, { region: 'io', byteSize: 64, offset: 128 });
        assert.equal((sum!.data as Int32Array).length, 0);
        assert.deepEqual(sum!.shape, [1, 16]);
        assert.deepEqual(
          [...(region.readTensor('INT32', sum!.shape, { offset: 128 }) as Int32Array)],
          [...a].map((v, i) => v + b[i]!),
        );
        assert.deepEqual([...(diff!.data as Int32Array)], [...a].map((v, i) => v - b[i]!));
        await client.unregisterSystemSharedMemory('io');
        assert.deepEqual(await client.systemSharedMemoryStatus(), []);
      } finally {
        await client.unregisterSystemSharedMemory().catch(() => undefined);
        region.destroy();
      }
      assert.equal(existsSync(`/dev/shm${key}`), false);
    });

    test('a region beyond the object and an unknown region are the server errors', async () => {
      const key = `/nereid_client_small_${process.pid}_${p.label}`;
      const region = SystemSharedMemoryRegion.create(key, 16);
      try {
        await assert.rejects(
          client.registerSystemSharedMemory('big', key, 1 << 20),
          (err: unknown) => err instanceof InferenceServerError,
        );
        await assert.rejects(
          client.infer({
            model: 'simple',
            inputs: [
              { name: 'INPUT0', datatype: 'INT32', shape: [1, 16], sharedMemory: { region: 'nowhere', byteSize: 64 } },
              { name: 'INPUT1', datatype: 'INT32', shape: [1, 16], data: new Int32Array(16) },
            ],
          }),
          (err: unknown) => {
            assert.ok(err instanceof InferenceServerError);
            assert.match(err.message, /nowhere/);
            return true;
          },
        );
      } finally {
        region.destroy();
      }
    });
  });
}

test('regions refuse writes and reads outside them, and keys that are not one name', () => {
  const region = SystemSharedMemoryRegion.create(`/nereid_client_bounds_${process.pid}`, 8);
  try {
    assert.throws(
      () => region.write(new Uint8Array(9)),
      (err: unknown) => err instanceof InvalidInputError && /does not fit region/.test(err.message),
    );
    assert.throws(() => region.read(4, 6), /does not fit region/);
    region.writeTensor('BYTES', ['ab']);
    assert.deepEqual(region.readTensor('BYTES', [1], { byteSize: 8, bytesAsStrings: true }), ['ab']);
    assert.throws(() => SystemSharedMemoryRegion.create(`/nereid_client_bounds_${process.pid}`, 8), /EEXIST/);
  } finally {
    region.destroy();
  }
  assert.throws(() => SystemSharedMemoryRegion.create('/a/b', 8), /must be one name/);
  assert.throws(() => SystemSharedMemoryRegion.create('/ok', 0), /size must be an integer > 0/);
});
