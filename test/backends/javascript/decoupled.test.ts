/**
 * Decoupled JavaScript models: the same response-sender contract as the
 * Python backend's, through a real Server and worker threads.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { Server } from '../../../src/core/server.js';
import { Cancellation } from '../../../src/types/cancellation.js';
import type { StreamResponse } from '../../../src/types/api.js';
import { typedView } from '../../../src/tensor/tensor.js';
import { TempRepository } from '../../helpers/repository.js';
import { jsModel } from './fixtures.js';

const CONFIG = `backend: "javascript"
max_batch_size: 0
model_transaction_policy { decoupled: true }
input [ { name: "IN" data_type: TYPE_INT32 dims: [ -1 ] } ]
output [ { name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
instance_group [ { kind: KIND_CPU count: 1 } ]
`;

const MODEL = `
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
export default class {
  execute(requests) {
    for (const request of requests) void this.run(request);
  }
  async run(request) {
    const sender = request.responseSender;
    const mode = request.parameters.mode ?? 'normal';
    const values = Array.from(request.inputs[0].data);
    if (mode === 'until_cancelled') {
      let i = 0;
      while (!request.isCancelled() && i < 100000) {
        sender.send({ outputs: [{ name: 'OUT', shape: [1], data: [i++] }] });
        await sleep(2);
      }
      sender.send(undefined, { final: true });
      return;
    }
    for (let i = 0; i < values.length; i++) {
      await sleep(1);
      if (mode === 'crash' && i === 1) process.exit(7);
      if (mode === 'error_response' && i === 1) {
        sender.send({ error: 'element 1 is refused' });
        continue;
      }
      sender.send({ outputs: [{ name: 'OUT', shape: [1], data: [values[i]] }] });
    }
    sender.send(undefined, { final: true });
    if (mode === 'after_final') {
      try {
        sender.send({ outputs: [{ name: 'OUT', shape: [1], data: [0] }] });
      } catch (err) {
        console.log('after final: ' + err.message);
      }
    }
  }
}
`;

const RAISING = `export default class { execute() { throw new Error('execute refused the request'); } }`;
const RETURNING = `export default class { execute(requests) { return requests.map(() => ({ outputs: [] })); } }`;

function int32s(values: number[]) {
  return {
    name: 'IN',
    datatype: 'INT32' as const,
    shape: [values.length],
    data: new Uint8Array(new Int32Array(values).buffer),
  };
}

async function collect(it: AsyncIterable<StreamResponse>): Promise<StreamResponse[]> {
  const out: StreamResponse[] = [];
  for await (const item of it) out.push(item);
  return out;
}

const values = (items: StreamResponse[]) =>
  items.filter((i) => i.response).map((i) => Number(typedView(i.response!.outputs[0]!)[0]));

test('decoupled javascript models stream through a response sender', async (t) => {
  const repo = new TempRepository();
  jsModel(repo, 'js_stream', `name: "js_stream"\n${CONFIG}`, MODEL);
  jsModel(repo, 'js_raises', `name: "js_raises"\n${CONFIG}`, RAISING);
  jsModel(repo, 'js_returns', `name: "js_returns"\n${CONFIG}`, RETURNING);
  t.after(() => repo.cleanup());
  const server = new Server({ modelRepositories: [repo.dir] });
  await server.start();
  t.after(() => server.stop());

  await t.test('many, zero and error responses, each final flag in place', async () => {
    const many = await collect(server.inferStream({ model: 'js_stream', inputs: [int32s([3, 4, 5])] }));
    assert.deepEqual(values(many), [3, 4, 5]);
    assert.deepEqual(many.map((i) => i.final), [false, false, false, true]);
    const none = await collect(server.inferStream({ model: 'js_stream', inputs: [int32s([])] }));
    assert.equal(none.length, 1);
    assert.equal(none[0]!.final, true);
    const errs = await collect(
      server.inferStream({ model: 'js_stream', inputs: [int32s([1, 2, 3])], parameters: { mode: 'error_response' } }),
    );
    assert.deepEqual(values(errs), [1, 3]);
    assert.match(errs[1]!.error!.message, /element 1 is refused/);
    const after = await collect(
      server.inferStream({ model: 'js_stream', inputs: [int32s([1])], parameters: { mode: 'after_final' } }),
    );
    assert.deepEqual(values(after), [1]);
    assert.equal(after.at(-1)!.error, undefined);
  });

  await t.test('cancellation reaches the model through request.isCancelled()', async () => {
    const signal = new Cancellation();
    let seen = 0;
    let last: StreamResponse | undefined;
    for await (const item of server.inferStream({
      model: 'js_stream',
      inputs: [int32s([0])],
      parameters: { mode: 'until_cancelled' },
      signal,
    })) {
      last = item;
      if (item.response && ++seen === 3) signal.abort();
    }
    assert.match(last!.error!.message, /cancelled/);
    // The model stopped: a new request on the single instance is served promptly.
    const next = await collect(server.inferStream({ model: 'js_stream', inputs: [int32s([9])] }));
    assert.deepEqual(values(next), [9]);
  });

  await t.test('execute() that throws or returns responses ends the request with an error', async () => {
    const raised = await collect(server.inferStream({ model: 'js_raises', inputs: [int32s([1])] }));
    assert.equal(raised.length, 1);
    assert.match(raised[0]!.error!.message, /execute refused the request/);
    const returned = await collect(server.inferStream({ model: 'js_returns', inputs: [int32s([1])] }));
    assert.match(returned[0]!.error!.message, /must return nothing, its responses go through request.responseSender/);
  });

  await t.test('a worker thread that dies mid-stream ends the stream with an error', async () => {
    const items = await collect(
      server.inferStream({ model: 'js_stream', inputs: [int32s([1, 2, 3])], parameters: { mode: 'crash' } }),
    );
    assert.deepEqual(values(items), [1]);
    assert.equal(items.at(-1)!.final, true);
    assert.match(items.at(-1)!.error!.message, /exited with code 7/);
  });
});
