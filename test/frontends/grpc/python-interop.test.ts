/**
 * Interop: Python grpcio with stubs compiled from our .proto files (as a
 * Triton user would compile Triton's) calls ModelInfer, ModelStreamInfer
 * and the health service.
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { rmSync } from 'node:fs';
import type { ServerApi } from '../../../src/core/server-api.js';
import { EchoServer, startHarness, type Harness } from './helpers.js';
import { compileProtos, runPythonClient, type PythonResponse } from './python.js';

describe('Python grpcio client (echo ServerApi)', () => {
  let stubs: string;
  let h: Harness;
  before(async () => {
    stubs = await compileProtos();
    h = await startHarness(new EchoServer() as ServerApi);
  });
  after(async () => {
    await h.close();
    rmSync(stubs, { recursive: true, force: true });
  });

  test('ModelInfer, ModelStreamInfer and health answer a grpcio client', async () => {
    const r = await runPythonClient(stubs, h.port, 'echo');
    assert.equal(r.live, true);
    assert.equal(r.model_ready, true);
    assert.equal(r.infer.id, 'unary');
    assert.deepEqual(r.infer.outputs.INPUT0!.values, Array.from({ length: 16 }, (_, i) => i));
    assert.deepEqual(r.infer.outputs.INPUT0!.shape, [1, 16]);
    assert.equal(r.unknown_model?.code, 'NOT_FOUND');
    assert.equal(r.stream.length, 3);
    assert.equal((r.stream[0] as PythonResponse).outputs.INPUT0!.values[0], 100);
    assert.equal((r.stream[0] as PythonResponse).parameters.triton_final_response, true);
    assert.deepEqual(r.stream[1], { error: "Request for unknown model: 'no_such_model' is not found", id: 's1' });
    assert.equal((r.stream[2] as PythonResponse).outputs.INPUT0!.values[0], 200);
    assert.equal(r.health, 'SERVING');
  });
});
