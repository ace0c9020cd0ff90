/**
 * A real `nereid serve` for the client's tests: Triton's "simple" ONNX
 * model, a JavaScript model echoing every datatype, a decoupled JavaScript
 * model, and a slow one that notes its cancellation in a file.
 */
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { TempRepository } from '../helpers/repository.js';
import { LOOPBACK_PORTS, startServe, type ServePorts, type ServeProcess } from '../helpers/serve-process.js';
import { ALL_TYPES_MODEL, allTypesConfig, jsModel } from '../backends/javascript/fixtures.js';

export const DECOUPLED_CONFIG = `backend: "javascript"
max_batch_size: 0
model_transaction_policy { decoupled: true }
input [ { name: "IN" data_type: TYPE_INT32 dims: [ -1 ] } ]
output [ { name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
instance_group [ { kind: KIND_CPU count: 1 } ]
`;

/**
 * One response per input element; with parameter mode "forever" it sends
 * until cancelled and then writes the file named by parameter marker.
 */
export const DECOUPLED_MODEL = `
import { writeFileSync } from 'node:fs';
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
export default class {
  execute(requests) {
    for (const request of requests) void this.run(request);
  }
  async run(request) {
    const sender = request.responseSender;
    if (request.parameters.mode === 'forever') {
      let i = 0;
      while (!request.isCancelled() && i < 20000) {
        sender.send({ outputs: [{ name: 'OUT', shape: [1], data: [i++] }] });
        await sleep(5);
      }
      if (request.isCancelled()) writeFileSync(request.parameters.marker, 'cancelled');
      sender.send(undefined, { final: true });
      return;
    }
    for (const v of Array.from(request.inputs[0].data)) {
      await sleep(1);
      sender.send({ outputs: [{ name: 'OUT', shape: [1], data: [v * 2] }] });
    }
    sender.send(undefined, { final: true });
  }
}
`;

/** Sleeps up to 20 s in steps, and writes the file named by parameter marker once it sees itself cancelled. */
export const SLOW_CONFIG = `backend: "javascript"
max_batch_size: 0
input [ { name: "IN" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
instance_group [ { kind: KIND_CPU count: 2 } ]
`;

export const SLOW_MODEL = `
import { writeFileSync } from 'node:fs';
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
export default class {
  async execute(requests) {
    const r = requests[0];
    for (let i = 0; i < 2000 && !r.isCancelled(); i++) await sleep(10);
    if (r.isCancelled() && r.parameters.marker) writeFileSync(r.parameters.marker, 'cancelled');
    return [{ outputs: [{ name: 'OUT', datatype: 'INT32', shape: [1], data: r.inputs[0].data }] }];
  }
}
`;

export interface ClientTestServer {
  readonly ports: ServePorts;
  readonly process: ServeProcess;
  /** A scratch folder for marker files. */
  readonly scratch: string;
  stop(): Promise<void>;
}

export async function startClientTestServer(extraArgs: readonly string[] = []): Promise<ClientTestServer> {
  const repo = new TempRepository().addSub('simple');
  jsModel(repo, 'all_types', allTypesConfig('all_types', false), ALL_TYPES_MODEL);
  jsModel(repo, 'decoupled', DECOUPLED_CONFIG, DECOUPLED_MODEL);
  jsModel(repo, 'slow', SLOW_CONFIG, SLOW_MODEL);
  const scratch = mkdtempSync(path.join(tmpdir(), 'nereid-client-'));
  const proc = startServe([
    `--model-repository=${repo.dir}`,
    '--model-control-mode=explicit',
    '--load-model=*',
    '--allow-client-shm=true',
    ...LOOPBACK_PORTS,
    ...extraArgs,
  ]);
  let ports: ServePorts;
  try {
    ports = await proc.ports;
  } catch (err) {
    await proc.stop();
    repo.cleanup();
    throw err;
  }
  return {
    ports,
    process: proc,
    scratch,
    async stop() {
      await proc.stop();
      repo.cleanup();
      rmSync(scratch, { recursive: true, force: true });
    },
  };
}

/** Waits until `file` exists (a model's marker), up to `ms`. */
export async function waitForFile(file: string, ms = 10_000): Promise<boolean> {
  const end = Date.now() + ms;
  while (Date.now() < end) {
    if (existsSync(file)) return true;
    await sleep(20);
  }
  return existsSync(file);
}
