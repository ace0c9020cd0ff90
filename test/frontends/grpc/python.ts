/** Running test/interop/grpc_client.py with stubs compiled from our protos. */
import { execFile } from 'node:child_process';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { repoRoot } from './helpers.js';

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

