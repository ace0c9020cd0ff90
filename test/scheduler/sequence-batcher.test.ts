/**
 * The sequence batcher against a slow fake backend that runs a batch only
 * when the test lets it: slot assignment and the backlog, ordering within a
 * sequence, control tensors, implicit state, the idle timeout, the oldest
 * strategy's batch formation and Triton's errors. No timing assertions.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { type MessageInitShape, create } from '@bufbuild/protobuf';
import type {
  BackendInstance,
  BackendRequest,
  BackendResponse,
  SchedulingHooks,
} from '../../src/backends/backend.js';
import { ModelVersionStatistics } from '../../src/types/statistics.js';
import type { NereidError } from '../../src/errors.js';
import {
  DataType,
  ModelSequenceBatchingSchema,
  ModelSequenceBatching_Control_Kind as Kind,
} from '../../src/gen/model_config_pb.js';
import { ScheduledRequest } from '../../src/scheduler/scheduled-request.js';
import { ModelInstance } from '../../src/scheduler/scheduler.js';
import { SequenceBatcher, type StateSpec } from '../../src/scheduler/sequence-batcher/index.js';
import type { Tensor } from '../../src/tensor/tensor.js';

const i32 = (t: Tensor | undefined): number[] => (t ? [...new Int32Array(t.data.slice().buffer)] : []);
const f32 = (t: Tensor | undefined): number[] => (t ? [...new Float32Array(t.data.slice().buffer)] : []);

/** Runs a batch only when the test says so; OUTPUT = STATE_IN + INPUT, which is also the new state. */
class SlowAccumulator implements BackendInstance {
  readonly scheduling: SchedulingHooks;
  constructor(maxInFlight = 1) {
    this.scheduling = { maxInFlight };
  }
  readonly batches: BackendRequest[][] = [];
  private readonly gates: Array<() => void> = [];
  private waiters: Array<() => void> = [];
  auto = false;

  execute(requests: readonly BackendRequest[]): Promise<BackendResponse[]> {
    this.batches.push([...requests]);
    for (const w of this.waiters.splice(0)) w();
    const answer = (): BackendResponse[] =>
      requests.map((r) => {
        const input = i32(r.inputs.find((t) => t.name === 'INPUT'))[0] ?? 0;
        const state = i32(r.inputs.find((t) => t.name === 'STATE_IN'))[0] ?? 0;
        const sum = new Uint8Array(new Int32Array([state + input]).buffer);
        const outputs: Tensor[] = [{ name: 'OUTPUT', datatype: 'INT32', shape: [1, 1], data: sum }];
        if (r.requestedOutputs.includes('STATE_OUT'))
          outputs.push({ name: 'STATE_OUT', datatype: 'INT32', shape: [1, 1], data: sum });
        return { outputs };
      });
    if (this.auto) return Promise.resolve(answer());
    return new Promise((resolve) => this.gates.push(() => resolve(answer())));
  }

  finishOne(): void {
    const g = this.gates.shift();
    if (!g) throw new Error('no batch is running');
    g();
  }

  async untilBatches(n: number): Promise<void> {
    while (this.batches.length < n) await new Promise<void>((r) => this.waiters.push(r));
  }

  async close(): Promise<void> {}
}

type SeqInit = MessageInitShape<typeof ModelSequenceBatchingSchema>;

const CONTROLS: SeqInit['controlInput'] = [
  { name: 'START', control: [{ kind: Kind.CONTROL_SEQUENCE_START, int32FalseTrue: [0, 1] }] },
  { name: 'END', control: [{ kind: Kind.CONTROL_SEQUENCE_END, fp32FalseTrue: [0, 1] }] },
  { name: 'READY', control: [{ kind: Kind.CONTROL_SEQUENCE_READY, boolFalseTrue: [false, true] }] },
  { name: 'CORRID', control: [{ kind: Kind.CONTROL_SEQUENCE_CORRID, dataType: DataType.TYPE_UINT64 }] },
];

const ACCUMULATOR_STATE: StateSpec = {
  inputName: 'STATE_IN',
  outputName: 'STATE_OUT',
  datatype: 'INT32',
  initial: { name: 'STATE_IN', datatype: 'INT32', shape: [1, 1], data: new Uint8Array(4) },
};

interface Outcome {
  id: string;
  output?: number;
  outputs?: string[];
  error?: NereidError;
}

class Harness {
  readonly stats = new ModelVersionStatistics('seq', '1');
  readonly backends: SlowAccumulator[];
  readonly batcher: SequenceBatcher;
  readonly outcomes: Outcome[] = [];
  private waiters: Array<() => void> = [];

  constructor(
    seq: SeqInit,
    options: {
      instances?: number;
      maxBatchSize?: number;
      states?: StateSpec[];
      maxInFlight?: number;
      policy?: 'adaptive' | 'fixed';
    } = {},
  ) {
    this.backends = Array.from({ length: options.instances ?? 1 }, () => new SlowAccumulator(options.maxInFlight));
    const instances = this.backends.map((b, i) => new ModelInstance(`seq_${i}`, b));
    this.batcher = new SequenceBatcher('seq', instances, this.stats, {
      maxBatchSize: options.maxBatchSize ?? 2,
      batching: create(ModelSequenceBatchingSchema, seq),
      states: options.states ?? [],
      policy: options.policy,
    });
  }

  send(id: string, correlationId: bigint | string, flags = 0, value = 1, batch = 1, timeoutUs = 0): void {
    const request: BackendRequest = {
      id,
      inputs: [
        {
          name: 'INPUT',
          datatype: 'INT32',
          shape: [batch, 1],
          data: new Uint8Array(new Int32Array(Array(batch).fill(value)).buffer),
        },
      ],
      requestedOutputs: ['OUTPUT'],
      parameters: {},
      batchSize: batch,
      correlationId,
      flags,
    };
    const item = new ScheduledRequest(
      request,
      0,
      timeoutUs,
      this.stats,
      (response, error) => {
        this.outcomes.push(
          error
            ? { id, error }
            : {
                id,
                output: i32(response!.outputs!.find((t) => t.name === 'OUTPUT'))[0],
                outputs: response!.outputs!.map((t) => t.name),
              },
        );
        for (const w of this.waiters.splice(0)) w();
      },
      undefined,
    );
    this.batcher.enqueue(item);
  }

  async untilOutcomes(n: number): Promise<void> {
    while (this.outcomes.length < n) await new Promise<void>((r) => this.waiters.push(r));
  }

  outcome(id: string): Outcome {
    const o = this.outcomes.find((x) => x.id === id);
    assert.ok(o, `no outcome for ${id}`);
    return o;
  }
}

const START = 1;
const END = 2;
const ids = (batch: BackendRequest[]) => batch.map((r) => r.id);

test('direct: a batch holds one request per sequence; requests of a sequence run in order', async () => {
  const h = new Harness({ strategyChoice: { case: 'direct', value: {} }, controlInput: CONTROLS });
  const b = h.backends[0]!;
  h.send('a1', 10n, START);
  h.send('a2', 10n);
  h.send('b1', 20n, START);
  h.send('a3', 10n, END);
  h.send('b2', 20n, END);
  await b.untilBatches(1);
  assert.deepEqual(ids(b.batches[0]!), ['a1', 'b1']);
  b.finishOne();
  await b.untilBatches(2);
  assert.deepEqual(ids(b.batches[1]!), ['a2', 'b2']);
  b.finishOne();
  await b.untilBatches(3);
  assert.deepEqual(ids(b.batches[2]!), ['a3']);
  b.finishOne();
  await h.untilOutcomes(5);
  assert.deepEqual(
    h.outcomes.map((o) => o.id),
    ['a1', 'b1', 'a2', 'b2', 'a3'],
  );
  assert.equal(h.batcher.sequenceCount, 0, 'ended sequences give their slots back');
  await h.batcher.drain();
  const stats = h.stats.toJSON();
  assert.equal(stats.inference_count, 5);
  assert.equal(stats.execution_count, 3);
});

test('control tensors: START and END only where flagged, READY ' +
  'always, CORRID as uint64, in their configured types', async () => {
  const h = new Harness({ strategyChoice: { case: 'direct', value: {} }, controlInput: CONTROLS });
  const b = h.backends[0]!;
  b.auto = true;
  h.send('s', 12345678901234n, START);
  h.send('m', 12345678901234n);
  h.send('e', 12345678901234n, END);
  await h.untilOutcomes(3);
  const byId = new Map(b.batches.flat().map((r) => [r.id, r]));
  const control = (id: string, name: string) => byId.get(id)!.inputs.find((t) => t.name === name)!;
  assert.deepEqual(i32(control('s', 'START')), [1]);
  assert.deepEqual(i32(control('m', 'START')), [0]);
  assert.deepEqual(f32(control('m', 'END')), [0]);
  assert.deepEqual(f32(control('e', 'END')), [1]);
  assert.deepEqual([...control('m', 'READY').data], [1]);
  assert.equal(control('s', 'READY').datatype, 'BOOL');
  assert.deepEqual(control('s', 'START').shape, [1, 1], 'control tensors carry the batch dimension');
  const corrid = control('e', 'CORRID');
  assert.equal(corrid.datatype, 'UINT64');
  assert.equal(new DataView(corrid.data.buffer, corrid.data.byteOffset).getBigUint64(0, true), 12345678901234n);
  assert.deepEqual(
    h.outcomes.map((o) => o.outputs),
    [['OUTPUT'], ['OUTPUT'], ['OUTPUT']],
  );
});

test('implicit state: each sequence accumulates its own state; ' +
  'START resets it; state outputs stay inside', async () => {
  const h = new Harness(
    { strategyChoice: { case: 'oldest', value: { maxCandidateSequences: 4 } } },
    { states: [ACCUMULATOR_STATE] },
  );
  h.backends[0]!.auto = true;
  h.send('a1', 1n, START, 5);
  h.send('b1', 'user-b', START, 100);
  h.send('a2', 1n, 0, 7);
  h.send('b2', 'user-b', 0, 1);
  h.send('a3', 1n, END, 3);
  h.send('b3', 'user-b', START, 9); // a new START reuses the slot and starts from the initial state
  await h.untilOutcomes(6);
  const out = (id: string) => h.outcome(id).output;
  assert.deepEqual([out('a1'), out('a2'), out('a3')], [5, 12, 15]);
  assert.deepEqual([out('b1'), out('b2'), out('b3')], [100, 101, 9]);
  assert.deepEqual(h.outcome('a2').outputs, ['OUTPUT'], 'the state output is not returned to the client');
  const firstA = h.backends[0]!.batches.flat().find((r) => r.id === 'a1')!;
  assert.deepEqual(firstA.requestedOutputs, ['OUTPUT', 'STATE_OUT']);
});

test('slots: a new sequence waits in the backlog while all slots ' +
  'are held, and takes the slot an ended one frees', async () => {
  const h = new Harness(
    { strategyChoice: { case: 'direct', value: {} }, controlInput: CONTROLS },
    { maxBatchSize: 2, instances: 1 },
  );
  const b = h.backends[0]!;
  h.send('a1', 1n, START);
  h.send('b1', 2n, START);
  h.send('c1', 3n, START);
  assert.deepEqual(h.batcher.slotOf(1n), { instance: 'seq_0', slot: 0 });
  assert.deepEqual(h.batcher.slotOf(2n), { instance: 'seq_0', slot: 1 });
  assert.equal(h.batcher.slotOf(3n), 'backlog');
  await b.untilBatches(1);
  assert.deepEqual(ids(b.batches[0]!), ['a1', 'b1']);
  h.send('a2', 1n, END);
  b.finishOne();
  await b.untilBatches(2);
  assert.deepEqual(ids(b.batches[1]!), ['a2']);
  b.finishOne();
  await b.untilBatches(3);
  assert.deepEqual(ids(b.batches[2]!), ['c1'], 'the backlogged sequence runs once a slot is free');
  assert.deepEqual(h.batcher.slotOf(3n), { instance: 'seq_0', slot: 0 });
  b.finishOne();
  await h.untilOutcomes(4);
});

test('slots: sequences spread over instances and stay pinned to theirs', async () => {
  const h = new Harness({ strategyChoice: { case: 'direct', value: {} } }, { maxBatchSize: 1, instances: 2 });
  for (const b of h.backends) b.auto = true;
  h.send('a1', 1n, START);
  h.send('b1', 2n, START);
  h.send('a2', 1n);
  h.send('b2', 2n);
  h.send('a3', 1n);
  await h.untilOutcomes(5);
  const seen = (backend: SlowAccumulator) => backend.batches.flat().map((r) => r.id);
  assert.deepEqual(seen(h.backends[0]!), ['a1', 'a2', 'a3']);
  assert.deepEqual(seen(h.backends[1]!), ['b1', 'b2']);
});

test('an instance that takes two executions gets a batch of other sequences behind ' +
  'the running one, never a second request of a running sequence', async () => {
  const h = new Harness(
    { strategyChoice: { case: 'oldest', value: { maxCandidateSequences: 4 } } },
    { maxBatchSize: 2, maxInFlight: 2, states: [ACCUMULATOR_STATE] },
  );
  const b = h.backends[0]!;
  h.send('a1', 1n, START, 1);
  await b.untilBatches(1);
  h.send('a2', 1n, 0, 10);
  h.send('b1', 2n, START, 5);
  await b.untilBatches(2);
  assert.deepEqual(ids(b.batches[1]!), ['b1'], 'a2 waits for a1 (it needs the state a1 leaves)');
  b.finishOne();
  await b.untilBatches(3);
  assert.deepEqual(ids(b.batches[2]!), ['a2']);
  b.finishOne();
  b.finishOne();
  await h.untilOutcomes(3);
  assert.equal(h.outcome('a2').output, 11);
});

test('oldest: a batch takes the sequences whose next request is oldest, up to max_batch_size', async () => {
  const h = new Harness(
    { strategyChoice: { case: 'oldest', value: { maxCandidateSequences: 4 } } },
    { maxBatchSize: 2 },
  );
  const b = h.backends[0]!;
  h.send('a1', 1n, START);
  await b.untilBatches(1);
  // While a1 runs: requests arrive for d, c, b (in that order) and another for a.
  h.send('d1', 4n, START);
  h.send('c1', 3n, START);
  h.send('b1', 2n, START);
  h.send('a2', 1n);
  b.finishOne();
  await b.untilBatches(2);
  assert.deepEqual(ids(b.batches[1]!), ['d1', 'c1']);
  b.finishOne();
  await b.untilBatches(3);
  assert.deepEqual(ids(b.batches[2]!), ['b1', 'a2']);
  b.finishOne();
  await h.untilOutcomes(5);
});

test('an idle sequence loses its slot after max_sequence_idle_microseconds; ' +
  'the id then needs START again', async (t) => {
  const h = new Harness(
    { strategyChoice: { case: 'direct', value: {} }, maxSequenceIdleMicroseconds: 2000n },
    { maxBatchSize: 1 },
  );
  h.backends[0]!.auto = true;
  // The reaper's timer does not hold the process open (a server's sockets do); this test's does.
  const keepAlive = setInterval(() => {}, 1000);
  t.after(() => clearInterval(keepAlive));
  h.send('a1', 7n, START);
  h.send('b1', 8n, START); // backlogged behind 7
  await h.untilOutcomes(1);
  assert.equal(h.batcher.slotOf(8n), 'backlog');
  // The reaper frees 7's slot; 8 runs in it.
  await h.untilOutcomes(2);
  assert.equal(h.outcome('b1').error, undefined);
  while (h.batcher.slotOf(7n) !== undefined) await new Promise((r) => setTimeout(r, 5));
  h.send('a2', 7n);
  await h.untilOutcomes(3);
  assert.equal(h.outcome('a2').error?.code, 'NRD_SEQUENCE_NOT_STARTED');
  assert.equal(
    h.outcome('a2').error?.message,
    "inference request for sequence 7 to model 'seq' must specify the START flag on the first request of the sequence",
  );
});

test("Triton's errors: no START, no correlation id, batch size > 1, a correlation id of the wrong type", async () => {
  const h = new Harness({ strategyChoice: { case: 'direct', value: {} }, controlInput: CONTROLS });
  h.send('x', 99n);
  h.send('zero', 0n, START);
  h.send('empty', '', START);
  h.send('big', 5n, START, 1, 2);
  h.send('str', 'abc', START);
  await h.untilOutcomes(5);
  assert.equal(h.outcome('x').error?.code, 'NRD_SEQUENCE_NOT_STARTED');
  assert.equal(
    h.outcome('zero').error?.message,
    "inference request to model 'seq' must specify a non-zero or non-empty correlation ID",
  );
  assert.equal(h.outcome('empty').error?.code, 'NRD_SEQUENCE_NO_CORRELATION_ID');
  assert.equal(
    h.outcome('big').error?.message,
    "inference request to model 'seq' must specify batch-size 1 due to requirements of sequence batcher",
  );
  assert.equal(
    h.outcome('str').error?.message,
    "[request id: str] sequence batching control 'CORRID' data-type is 'BYTES', but model 'seq' expects 'UINT64'",
  );
  for (const o of h.outcomes) assert.equal(o.error?.errorClass, 'INVALID_ARG');
  assert.equal(h.stats.toJSON().inference_stats.fail.count, 5);
  assert.equal(h.backends[0]!.batches.length, 0, 'nothing reached the backend');
});

test('iterative_sequence is refused at load instead of being served as a plain sequence model', () => {
  assert.throws(
    () => new Harness({ iterativeSequence: true }),
    (e: NereidError) => e.code === 'NRD_UNSUPPORTED' && /iterative_sequence is not supported/.test(e.message),
  );
});

test('oldest with a long max_queue_delay: a preferred batch size or a full batch starts at once', async () => {
  const h = new Harness(
    {
      strategyChoice: {
        case: 'oldest',
        value: { maxCandidateSequences: 8, preferredBatchSize: [2], maxQueueDelayMicroseconds: 600_000_000n },
      },
    },
    { maxBatchSize: 3 },
  );
  const b = h.backends[0]!;
  b.auto = true;
  h.send('a1', 1n, START);
  h.send('b1', 2n, START);
  await h.untilOutcomes(2); // would wait ten minutes if the preferred size did not count
  assert.deepEqual(ids(b.batches[0]!), ['a1', 'b1']);
  h.send('a2', 1n);
  h.send('b2', 2n);
  h.send('c1', 3n, START);
  await h.untilOutcomes(5); // a full batch (max_batch_size 3)
  assert.deepEqual(ids(b.batches[1]!), ['a2', 'b2', 'c1']);
});

test('oldest, adaptive: a lone request goes at once; fixed holds it for the delay', async () => {
  const oldest: SeqInit = {
    strategyChoice: {
      case: 'oldest',
      value: { maxCandidateSequences: 8, preferredBatchSize: [2], maxQueueDelayMicroseconds: 600_000_000n },
    },
  };
  const adaptive = new Harness(oldest, { maxBatchSize: 3, policy: 'adaptive' });
  adaptive.backends[0]!.auto = true;
  adaptive.send('a1', 1n, START);
  await adaptive.untilOutcomes(1); // would wait ten minutes under fixed
  assert.deepEqual(ids(adaptive.backends[0]!.batches[0]!), ['a1']);
  assert.deepEqual(adaptive.batcher.batching.dispatched, [0, 0, 1, 0]);
  assert.equal(adaptive.batcher.batching.delayNs, 600e9);

  const fixed = new Harness(oldest, { maxBatchSize: 3, policy: 'fixed' });
  fixed.backends[0]!.auto = true;
  fixed.send('a1', 1n, START);
  for (let i = 0; i < 5; i++) await new Promise((r) => setImmediate(r));
  assert.equal(fixed.backends[0]!.batches.length, 0, 'waits for the delay or a preferred size');
  fixed.send('b1', 2n, START);
  await fixed.untilOutcomes(2);
  assert.deepEqual(ids(fixed.backends[0]!.batches[0]!), ['a1', 'b1']);
  assert.deepEqual(fixed.batcher.batching.dispatched, [0, 1, 0, 0]);
});

test('direct with a long max_queue_delay: the batch starts once every active slot has a request', async () => {
  const h = new Harness(
    { strategyChoice: { case: 'direct', value: { maxQueueDelayMicroseconds: 600_000_000n } } },
    { maxBatchSize: 4 },
  );
  const b = h.backends[0]!;
  b.auto = true;
  h.send('a1', 1n, START);
  h.send('b1', 2n, START);
  await h.untilOutcomes(2);
  assert.deepEqual(ids(b.batches[0]!), ['a1', 'b1']);
});

test('a sequence waiting in the backlog past its request timeout is ' +
  'refused (UNAVAILABLE, rejected); one in a slot is not', async (t) => {
  const h = new Harness({ strategyChoice: { case: 'direct', value: {} } }, { maxBatchSize: 1 });
  const b = h.backends[0]!;
  // The timers do not hold the process open (a server's sockets do); this test's does.
  const keepAlive = setInterval(() => {}, 1000);
  t.after(() => clearInterval(keepAlive));
  // a holds the one slot (its request runs until the test lets it); it has a timeout too, which a slot ignores.
  h.send('a1', 1n, START, 1, 1, 1000);
  await b.untilBatches(1);
  h.send('b1', 2n, START, 1, 1, 2000); // backlogged, times out
  h.send('b2', 2n, 0, 1, 1, 0); // same sequence: refused with it
  h.send('c1', 3n, START); // backlogged, no timeout: waits
  await h.untilOutcomes(2);
  for (const id of ['b1', 'b2']) {
    const e = h.outcome(id).error;
    assert.equal(e?.code, 'NRD_SEQUENCE_BACKLOG_TIMEOUT');
    assert.equal(e?.errorClass, 'UNAVAILABLE');
    assert.equal(e?.message, 'timeout of the corresponding sequence has been expired');
  }
  assert.equal(h.batcher.slotOf(2n), undefined, 'the expired sequence is gone');
  assert.equal(h.batcher.slotOf(3n), 'backlog');
  assert.equal(h.stats.toJSON().inference_stats.fail.count, 2);
  // The expired id needs START again.
  h.send('b3', 2n);
  await h.untilOutcomes(3);
  assert.equal(h.outcome('b3').error?.code, 'NRD_SEQUENCE_NOT_STARTED');
  // a ends; c takes the slot and runs.
  h.send('a2', 1n, END);
  b.finishOne();
  await b.untilBatches(2);
  b.finishOne();
  await b.untilBatches(3);
  assert.deepEqual(ids(b.batches[2]!), ['c1']);
  b.finishOne();
  await h.untilOutcomes(6);
  assert.equal(h.outcome('a1').error, undefined);
  assert.equal(h.outcome('c1').error, undefined);
});

test('direct: a sequence keeps its slot index in every batch; slots ' +
  'below it with nothing to run get not-READY padding', async () => {
  const h = new Harness(
    { strategyChoice: { case: 'direct', value: {} }, controlInput: CONTROLS },
    { maxBatchSize: 4, states: [ACCUMULATOR_STATE] },
  );
  const b = h.backends[0]!;
  b.auto = true;
  const input = (r: BackendRequest, name: string) => r.inputs.find((t) => t.name === name);
  h.send('a1', 10n, START, 1);
  h.send('b1', 20n, START, 2);
  h.send('c1', 30n, START, 3);
  await h.untilOutcomes(3);
  assert.deepEqual(ids(b.batches[0]!), ['a1', 'b1', 'c1']);
  // Only the sequence in slot 2 has a request: slots 0 and 1 are padded.
  h.send('c2', 30n, 0, 5);
  await h.untilOutcomes(4);
  const batch = b.batches[1]!;
  assert.deepEqual(ids(batch), ['', '', 'c2']);
  for (const pad of batch.slice(0, 2)) {
    assert.deepEqual([...input(pad, 'READY')!.data], [0], 'padding is not ready');
    assert.deepEqual(i32(input(pad, 'START')), [0]);
    assert.deepEqual(f32(input(pad, 'END')), [0]);
    assert.deepEqual([...new BigUint64Array(input(pad, 'CORRID')!.data.slice().buffer)], [0n]);
    assert.deepEqual(i32(input(pad, 'INPUT')), [0]);
    assert.deepEqual(i32(input(pad, 'STATE_IN')), [0], 'padding gets the initial state, not a sequence state');
    assert.deepEqual(pad.requestedOutputs, [], 'nothing is asked of padding');
    assert.equal(pad.correlationId, 0n);
  }
  assert.deepEqual([...input(batch[2]!, 'READY')!.data], [1]);
  assert.deepEqual([...new BigUint64Array(input(batch[2]!, 'CORRID')!.data.slice().buffer)], [30n]);
  assert.equal(h.outcome('c2').output, 8, 'the state of slot 2 stays with its sequence');
  // Slot 1 alone: one padding below it, none above.
  h.send('b2', 20n, END, 1);
  await h.untilOutcomes(5);
  assert.deepEqual(ids(b.batches[2]!), ['', 'b2']);
  assert.equal(h.outcome('b2').output, 3);
  // Slot 0 alone: no padding.
  h.send('a2', 10n, END, 1);
  await h.untilOutcomes(6);
  assert.deepEqual(ids(b.batches[3]!), ['a2']);
  assert.equal(h.outcome('a2').output, 2);
  await h.batcher.drain();
  const stats = h.stats.toJSON();
  assert.equal(stats.inference_stats.success.count, 6, 'padding is not an inference request');
  assert.equal(stats.execution_count, 4);
  assert.equal(
    stats.inference_count,
    3 + 3 + 2 + 1,
    'padding counts in the executed batch sizes, as a backend reports them',
  );
});
