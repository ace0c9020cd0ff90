/** Shared builders for the python and pytorch backend tests: contexts, requests, fixture paths. */
import { spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { create } from '@bufbuild/protobuf';
import type { MessageInitShape } from '@bufbuild/protobuf';
import { ModelConfigSchema, type ModelConfig } from '../../../src/gen/model_config_pb.js';
import type {
  BackendRequest,
  ExecutionTimer,
  InferenceCaller,
  InstanceContext,
  ModelContext,
  ParameterValue,
} from '../../../src/backends/backend.js';
import { silentLogger } from '../../../src/logger.js';
import type { Datatype } from '../../../src/tensor/datatype.js';
import type { Tensor } from '../../../src/tensor/tensor.js';

/** The interpreter with numpy and torch (the one on PATH may lack them). */
export const PYTHON = process.env.NEREID_TEST_PYTHON ?? '/usr/bin/python3';

/** Why the tests needing `module` cannot run with PYTHON (undefined when they can). */
export function missingPythonModule(module: string): string | undefined {
  const r = spawnSync(PYTHON, [
    '-c',
    `import importlib.util, sys; sys.exit(importlib.util.find_spec('${module}') is None)`,
  ]);
  return r.status === 0 ? undefined : `${PYTHON} cannot import ${module} (set NEREID_TEST_PYTHON)`;
}

export function repoRoot(): string {
  let dir = dirname(fileURLToPath(import.meta.url));
  while (!existsSync(join(dir, 'package.json'))) {
    const parent = dirname(dir);
    if (parent === dir) throw new Error('package.json not found');
    dir = parent;
  }
  // dist/test/... compiles next to a dist/package.json-less tree; skip a dist folder
  return dir.endsWith('/dist') ? dirname(dir) : dir;
}

export function fixtureDir(name: string): string {
  return join(repoRoot(), 'test', 'fixtures', 'python_models', name);
}

export function modelConfig(init: MessageInitShape<typeof ModelConfigSchema>): ModelConfig {
  return create(ModelConfigSchema, init);
}

export const noServer: InferenceCaller = {
  infer: () => Promise.reject(new Error('no server in this test')),
};

export function modelContext(opts: {
  name: string;
  modelDir: string;
  versionDir?: string;
  config: ModelConfig;
  backendConfig?: Record<string, string>;
  server?: InferenceCaller;
}): ModelContext {
  return {
    modelName: opts.name,
    version: 1,
    modelDir: opts.modelDir,
    versionDir: opts.versionDir ?? opts.modelDir,
    config: opts.config,
    backendConfig: { 'python-executable': PYTHON, ...(opts.backendConfig ?? {}) },
    logger: silentLogger,
    server: opts.server ?? noServer,
  };
}

export function instanceContext(model: ModelContext, index = 0): InstanceContext {
  return { ...model, instanceName: `${model.modelName}_${index}`, kind: 'CPU', deviceId: 0 };
}

export class TestTimer implements ExecutionTimer {
  inputs = 0;
  infers = 0;
  inputDone(): void {
    this.inputs++;
  }
  inferDone(): void {
    this.infers++;
  }
  waited(): void {}
}

let nextId = 0;

export function request(
  inputs: Tensor[],
  opts: {
    outputs?: string[];
    parameters?: Record<string, ParameterValue>;
    batchSize?: number;
    correlationId?: bigint | string;
    flags?: number;
    id?: string;
  } = {},
): BackendRequest {
  return {
    id: opts.id ?? `r${nextId++}`,
    inputs,
    requestedOutputs: opts.outputs ?? [],
    parameters: opts.parameters ?? {},
    batchSize: opts.batchSize ?? 1,
    correlationId: opts.correlationId ?? 0n,
    flags: opts.flags ?? 0,
  };
}

export function tensor(name: string, datatype: Datatype, shape: number[], data: ArrayBufferView): Tensor {
  return { name, datatype, shape, data: new Uint8Array(data.buffer, data.byteOffset, data.byteLength) };
}

export function f32(name: string, shape: number[], values: number[]): Tensor {
  return tensor(name, 'FP32', shape, new Float32Array(values));
}

export function asF32(t: Tensor): number[] {
  const copy = new Uint8Array(t.data);
  return Array.from(new Float32Array(copy.buffer, 0, copy.byteLength / 4));
}

/** The outputs of a successful response (fails the test on an error response). */
export function ok(res: import('../../../src/backends/backend.js').BackendResponse | undefined): readonly Tensor[] {
  if (!res) throw new Error('no response');
  if (res.error) throw res.error;
  return res.outputs;
}
