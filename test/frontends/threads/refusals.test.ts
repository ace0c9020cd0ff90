/**
 * Refusals for a full queue on a frontend thread: a turn's refusals cross to the main thread as one count per model
 * and version, and the main thread adds the count to the statistics whatever the queue's state by then.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { once } from 'node:events';
import { MessageChannel } from 'node:worker_threads';
import { Errors } from '../../../src/errors.js';
import { RemoteServer } from '../../../src/frontends/worker/remote.js';
import { admissionKey, SharedSlot, toWireError } from '../../../src/frontends/threads/wire.js';
import { Server } from '../../../src/core/server.js';
import { silentLogger } from '../../../src/logger.js';
import { TempRepository } from '../../helpers/repository.js';
import { jsModel } from '../../backends/javascript/fixtures.js';

test('a turn\'s refusals on a thread cross as one count, the next turn\'s as another', async () => {
  const bridge = new MessageChannel();
  const sync = new MessageChannel();
  const shared = new Int32Array(new SharedArrayBuffer(SharedSlot.Count * 4));
  const remote = new RemoteServer(bridge.port1, sync.port1, new Int32Array(new SharedArrayBuffer(4)), shared);
  try {
    assert.equal(remote.admissionError('m', undefined), undefined, 'nothing is refused before the main thread says so');
    const told = once(bridge.port1, 'message');
    const error = toWireError(Errors.maxQueueSizeExceeded(''));
    bridge.port2.postMessage({ t: 'full', key: admissionKey('m', undefined), error });
    await told;

    const answers = once(bridge.port2, 'message');
    for (let i = 0; i < 5; i++) {
      assert.equal(remote.admissionError('m', undefined)?.message, 'Exceeds maximum queue size');
    }
    assert.equal(remote.admissionError('m', '2'), undefined, 'another version is not full');
    assert.deepEqual((await answers)[0], { t: 'refused', model: 'm', version: undefined, count: 5 });

    const next = once(bridge.port2, 'message');
    remote.admissionError('m', undefined);
    remote.admissionError('m', undefined);
    assert.deepEqual((await next)[0], { t: 'refused', model: 'm', version: undefined, count: 2 });
  } finally {
    bridge.port1.close();
    sync.port1.close();
  }
});

test('Server.countRefusals counts every refusal as a failed request, full queue or not', async () => {
  const repo = new TempRepository();
  jsModel(
    repo,
    'echo',
    `name: "echo"
backend: "javascript"
max_batch_size: 1
input [ { name: "IN" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
dynamic_batching { default_queue_policy { max_queue_size: 1 } }
`,
    `export default class {
  execute(requests) {
    return requests.map((r) => ({ outputs: [{ name: 'OUT', datatype: 'INT32', shape: r.inputs[0].shape,
      data: r.inputs[0].data }] }));
  }
}
`,
  );
  const server = new Server({ modelRepositories: [repo.dir], logger: silentLogger });
  await server.start();
  try {
    assert.equal(server.queueFull('echo'), false);
    server.countRefusals('echo', undefined, 3);
    server.countRefusals('echo', '1', 2);
    server.countRefusals('unknown', undefined, 4); // a model gone meanwhile: nothing to count
    const stats = server.modelStatistics('echo')[0]!;
    assert.equal(Number(stats.inference_stats.fail.count), 5);
  } finally {
    await server.stop();
    repo.cleanup();
  }
});
