/**
 * Cancellation of a request whose execute() is running (a model that is not
 * decoupled): the client goes away, the model sees it through
 * request.isCancelled(), through a real Server and worker thread.
 */
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { Server } from '../../../src/core/server.js';
import { NereidError } from '../../../src/errors.js';
import { Cancellation } from '../../../src/types/cancellation.js';
import { typedView } from '../../../src/tensor/tensor.js';
import { TempRepository } from '../../helpers/repository.js';
import { jsModel } from './fixtures.js';

const CONFIG = `backend: "javascript"
max_batch_size: 0
input [ { name: "IN" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "OUT" data_type: TYPE_INT32 dims: [ 4 ] } ]
instance_group [ { kind: KIND_CPU count: 1 } ]
`;

/**
 * mode "wait": writes the file named by parameter "started", then waits (up to
 * 30 s) for the client to go away; mode "queued": notes whether it was
 * cancelled when its execute() began; mode "report": answers [cancellations
 * seen by "wait" requests, "queued" requests found cancelled, "queued"
 * requests run, isCancelled() of this request].
 */
const MODEL = `
import { writeFileSync } from 'node:fs';
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
export default class {
  seen = 0;
  queuedCancelled = 0;
  queuedRuns = 0;
  async execute(requests) {
    const out = [];
    for (const request of requests) {
      if (request.parameters.mode === 'wait') {
        writeFileSync(request.parameters.started, '');
        const end = Date.now() + 30000;
        while (!request.isCancelled() && Date.now() < end) await sleep(2);
        if (request.isCancelled()) this.seen++;
      }
      if (request.parameters.mode === 'queued') {
        this.queuedRuns++;
        if (request.isCancelled()) this.queuedCancelled++;
      }
      const data = [this.seen, this.queuedCancelled, this.queuedRuns, request.isCancelled() ? 1 : 0];
      out.push({ outputs: [{ name: 'OUT', shape: [4], data }] });
    }
    return out;
  }
}
`;

let repo: TempRepository;
let server: Server;
let scratch: string;

before(async () => {
  repo = new TempRepository();
  jsModel(repo, 'js_cancel', CONFIG, MODEL);
  scratch = mkdtempSync(path.join(tmpdir(), 'nereid-js-cancel-'));
  server = new Server({ modelRepositories: [repo.dir], exitOnError: false });
  await server.start();
});

after(async () => {
  await server.stop();
  repo.cleanup();
  rmSync(scratch, { recursive: true, force: true });
});

const one = (v: number) => ({
  name: 'IN',
  datatype: 'INT32' as const,
  shape: [1],
  data: new Uint8Array(new Int32Array([v]).buffer),
});
const values = (r: Awaited<ReturnType<Server['infer']>>) => Array.from(typedView(r.outputs[0]!) as Int32Array);

async function waitForFile(file: string): Promise<void> {
  for (let i = 0; i < 3000 && !existsSync(file); i++) await new Promise((r) => setTimeout(r, 5));
  assert.ok(existsSync(file), `execute() did not start (${file})`);
}

test('a request that is not cancelled reads isCancelled() as false', async () => {
  assert.deepEqual(
    values(await server.infer({ model: 'js_cancel', inputs: [one(1)], parameters: { mode: 'report' } })),
    [0, 0, 0, 0],
  );
  // With a signal that is never aborted, too.
  const signal = new Cancellation();
  assert.deepEqual(
    values(await server.infer({ model: 'js_cancel', inputs: [one(1)], parameters: { mode: 'report' }, signal })),
    [0, 0, 0, 0],
  );
});

test('a client that goes away while execute() runs: the model sees request.isCancelled() turn true', async () => {
  for (let round = 1; round <= 2; round++) {
    const started = path.join(scratch, `started-${round}`);
    const signal = new Cancellation();
    const pending = server.infer({
      model: 'js_cancel',
      inputs: [one(1)],
      parameters: { mode: 'wait', started },
      signal,
    });
    const outcome = pending.catch((e: unknown) => e);
    await waitForFile(started);
    signal.abort();
    const err = await outcome;
    assert.ok(err instanceof NereidError, 'the cancelled request fails');
    assert.match(err.message, /cancelled/);
    // The single instance is free again once the model returned; the next request reports what it saw.
    assert.deepEqual(
      values(await server.infer({ model: 'js_cancel', inputs: [one(1)], parameters: { mode: 'report' } })),
      [round, 0, 0, 0],
    );
  }
});

test('a request whose batch waits in the worker behind another ' +
  'is seen cancelled when its execute() begins', async () => {
  const started = path.join(scratch, 'started-queued');
  const first = new Cancellation();
  const second = new Cancellation();
  const a = server
    .infer({ model: 'js_cancel', inputs: [one(1)], parameters: { mode: 'wait', started }, signal: first })
    .catch((e: unknown) => e);
  await waitForFile(started);
  // The instance takes several executions at once: the second waits in the worker's queue.
  const b = server
    .infer({ model: 'js_cancel', inputs: [one(2)], parameters: { mode: 'queued' }, signal: second })
    .catch((e: unknown) => e);
  await new Promise((r) => setTimeout(r, 500));
  second.abort();
  first.abort();
  assert.match(String(await a), /cancelled/);
  assert.match(String(await b), /cancelled/);
  // Seen by the waiting one (the third "wait" of this file), and the queued one ran and found itself cancelled.
  assert.deepEqual(
    values(await server.infer({ model: 'js_cancel', inputs: [one(1)], parameters: { mode: 'report' } })),
    [3, 1, 1, 0],
  );
});
