/**
 * Interop: Python grpcio with stubs compiled from our .proto files (as a
 * Triton user would compile Triton's) calls ModelInfer, ModelStreamInfer
 * and the health service.
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import type { ServerApi } from '../../../src/core/server-api.js';
import { EchoServer, repoRoot, startHarness, type Harness } from './helpers.js';

const run = promisify(execFile);
const PYTHON = '/usr/bin/python3';

export interface PythonResult {
  live: boolean;
  model_ready: boolean;
  infer: PythonResponse;
  unknown_model: { code: string; details: string } | null;
  stream: Array<PythonResponse | { error: string; id: string }>;
  health: string;
}
export interface PythonResponse {
  model_name: string;
  model_version: string;
  id: string;
  parameters: Record<string, unknown>;
  outputs: Record<string, { datatype: string; shape: number[]; values: number[] }>;
}

/** Compiles our protos into a temp dir; returns it (caller removes it). */
export async function compileProtos(): Promise<string> {
  const out = mkdtempSync(path.join(tmpdir(), 'nereid-grpc-py-'));
  await run(PYTHON, [
    '-m',
    'grpc_tools.protoc',
    `-I${path.join(repoRoot, 'proto')}`,
    `--python_out=${out}`,
    `--grpc_python_out=${out}`,
    'model_config.proto',
    'grpc_service.proto',
    'health.proto',
  ]);
  return out;
}

/** Runs the Python client against a port; the server must be served from this process. */
export async function runPythonClient(stubs: string, port: number, model: string): Promise<PythonResult> {
  const { stdout } = await run(PYTHON, [path.join(repoRoot, 'test/interop/grpc_client.py'), String(port), model], {
    env: { ...process.env, PYTHONPATH: stubs },
    timeout: 60_000,
  });
  return JSON.parse(stdout) as PythonResult;
}

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
