/**
 * ensemble_scheduling { max_inflight_requests }: each step of an ensemble has
 * at most that many requests in flight, across every request to the
 * ensemble; the others wait in order, and a cancelled one is not held back.
 * The steps go to a caller that holds each call until the test answers it.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import type { BackendRequest, BackendResponse, InferenceCaller } from '../../src/backends/backend.js';
import { parseModelConfig } from '../../src/config/index.js';
import type { NereidError } from '../../src/errors.js';
import { EnsembleScheduler } from '../../src/scheduler/ensemble-scheduler.js';
import { ScheduledRequest } from '../../src/scheduler/scheduled-request.js';
import { StepLimiter } from '../../src/scheduler/step-limiter.js';
import { makeTensor, type Tensor } from '../../src/tensor/tensor.js';
import { Cancellation } from '../../src/types/cancellation.js';
import type { InferRequest, InferResponse } from '../../src/types/api.js';
import { ModelVersionStatistics } from '../../src/types/statistics.js';

const tensor = (name: string): Tensor => makeTensor(name, 'INT32', [1, 1], new Uint8Array(4));

/** first: IN -> MID; second: MID -> OUT. */
function chain(bound: number | undefined): EnsembleScheduler {
  const config = parseModelConfig(`name: "chain"
platform: "ensemble"
max_batch_size: 8
input [ { name: "IN" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
ensemble_scheduling {
  ${bound === undefined ? '' : `max_inflight_requests: ${bound}`}
  step [
    { model_name: "first" input_map { key: "X" value: "IN" } output_map { key: "Y" value: "MID" } },
    { model_name: "second" input_map { key: "X" value: "MID" } output_map { key: "Y" value: "OUT" } }
  ]
}
`,
    'chain/config.pbtxt',
  );
  return new EnsembleScheduler('chain', config, new ModelVersionStatistics('chain', '1'), held);
}

interface HeldCall {
  request: InferRequest;
  answer(): void;
}

/** Every step request waits here until the test answers it. */
const calls: HeldCall[] = [];
const held: InferenceCaller = {
  infer(request: InferRequest): Promise<InferResponse> {
    return new Promise((resolve) => {
      calls.push({
        request,
        answer: () =>
          resolve({ modelName: request.model, modelVersion: '1', id: request.id ?? '', outputs: [tensor('Y')] }),
      });
    });
  },
};

function open(model: string): HeldCall[] {
  return calls.filter((c) => c.request.model === model);
}

function answer(model: string): void {
  const i = calls.findIndex((c) => c.request.model === model);
  assert.ok(i >= 0, `no ${model} step is in flight`);
  calls.splice(i, 1)[0]!.answer();
}

const settle = () => new Promise((resolve) => setImmediate(resolve));

function send(scheduler: EnsembleScheduler, id: string, signal?: Cancellation): Promise<BackendResponse | NereidError> {
  return new Promise((resolve) => {
    const request: BackendRequest = {
      id,
      inputs: [tensor('IN')],
      requestedOutputs: ['OUT'],
      parameters: {},
      batchSize: 1,
      correlationId: 0n,
      flags: 0,
    };
    const stats = new ModelVersionStatistics('chain', '1');
    scheduler.enqueue(
      new ScheduledRequest(request, 0, 0, stats, (response, error) => resolve(error ?? response!), signal),
    );
  });
}

test('each step has at most max_inflight_requests in flight; the others go, in order, as those end', async () => {
  calls.length = 0;
  const scheduler = chain(2);
  const done = ['a', 'b', 'c', 'd'].map((id) => send(scheduler, id));
  await settle();
  assert.deepEqual(open('first').map((c) => c.request.id), ['a', 'b'], 'two first steps run, two wait');
  answer('first');
  await settle();
  // a's second step starts (its own bound), and c's first step takes a's place.
  assert.deepEqual(open('second').map((c) => c.request.id), ['a']);
  assert.deepEqual(open('first').map((c) => c.request.id), ['b', 'c']);
  answer('first');
  answer('first');
  await settle();
  assert.deepEqual(open('second').map((c) => c.request.id), ['a', 'b'], 'the second step is bounded too: c waits');
  assert.deepEqual(open('first').map((c) => c.request.id), ['d']);
  answer('first');
  while (calls.length > 0) {
    answer('second');
    await settle();
  }
  const results = await Promise.all(done);
  for (const r of results) assert.ok('outputs' in r && r.outputs !== undefined, String(r));
});

test('without max_inflight_requests every step is sent at once', async () => {
  calls.length = 0;
  const scheduler = chain(undefined);
  const done = ['a', 'b', 'c'].map((id) => send(scheduler, id));
  await settle();
  assert.equal(open('first').length, 3);
  while (calls.length > 0) {
    answer(calls[0]!.request.model);
    await settle();
  }
  await Promise.all(done);
});

test('a request cancelled while its step waits is not held back by the bound', async () => {
  calls.length = 0;
  const scheduler = chain(1);
  const first = send(scheduler, 'a');
  const cancel = new Cancellation();
  const second = send(scheduler, 'b', cancel);
  await settle();
  assert.deepEqual(open('first').map((c) => c.request.id), ['a']);
  cancel.abort();
  await settle();
  // Triton lets it through: its step is sent, marked cancelled, and the model refuses it at once.
  assert.deepEqual(open('first').map((c) => c.request.id), ['a', 'b']);
  assert.equal(open('first')[1]!.request.signal?.aborted, true);
  while (calls.length > 0) {
    answer(calls[0]!.request.model);
    await settle();
  }
  await Promise.all([first, second]);
});

test('StepLimiter: a bound of 0 holds nothing; release starts the oldest waiter', () => {
  const started: string[] = [];
  const free = new StepLimiter(0);
  for (const id of ['a', 'b', 'c']) free.acquire(undefined, () => started.push(id));
  assert.deepEqual(started, ['a', 'b', 'c']);
  started.length = 0;
  const one = new StepLimiter(1);
  for (const id of ['a', 'b', 'c']) one.acquire(undefined, () => started.push(id));
  assert.deepEqual(started, ['a']);
  assert.equal(one.queued, 2);
  one.release();
  assert.deepEqual(started, ['a', 'b']);
  one.release();
  one.release();
  assert.deepEqual(started, ['a', 'b', 'c']);
  assert.equal(one.active, 0);
});
