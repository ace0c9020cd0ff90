import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { RunTimes, SessionClient } from '../../../../src/backends/onnxruntime/thread/session-client.js';
import {
  C_DONE,
  MERGED_FIRST,
  MERGED_LATER,
  MERGED_NOT,
  RING_SIZE,
  RunFeed,
  SLICE_FORMAT,
  TextPlan,
  TextRequest,
  arenaTypeCode,
  sliceWord,
  type WireTensor,
} from '../../../../src/backends/onnxruntime/thread/worker-protocol.js';
import { DATATYPES } from '../../../../src/tensor/datatype.js';
import { encodeJsonTensorData } from '../../../../src/tensor/json-codec.js';
import { OnnxModelBuilder, buildIdentityModel } from '../../../helpers/onnx-builder.js';
import { TempDir } from '../fixtures.js';

let tmp: TempDir;
const clients: SessionClient[] = [];

before(async () => {
  tmp = await TempDir.create();
});

after(async () => {
  for (const c of clients) await c.close();
  await tmp.remove();
});

async function start(name: string, builder: OnnxModelBuilder, spinMicros = 50): Promise<SessionClient> {
  const modelPath = join(tmp.path, `${name}.onnx`);
  await builder.save(modelPath);
  const client = await SessionClient.start(modelPath, {}, spinMicros);
  clients.push(client);
  return client;
}

function bytes(a: ArrayBufferView): Uint8Array {
  return new Uint8Array(a.buffer, a.byteOffset, a.byteLength);
}

function f32Feed(name: string, values: Float32Array, dims: readonly number[] = [values.length]): RunFeed {
  return new RunFeed(name, 'float32', dims, [bytes(values)], values.byteLength, undefined);
}

function floats(w: WireTensor | undefined): number[] {
  assert.ok(w, 'missing output');
  assert.ok(w.data instanceof Float32Array, `expected Float32Array, got ${w.data.constructor.name}`);
  return [...w.data];
}

function ramp(n: number, from: number): Float32Array {
  const a = new Float32Array(n);
  for (let i = 0; i < n; i++) a[i] = from + i;
  return a;
}

test('an input far bigger than a fresh arena runs, and so do smaller ones after it', async () => {
  const client = await start('identity_big', buildIdentityModel([{ name: 'INPUT0', datatype: 'FP32', shape: ['n'] }]));
  for (const n of [3, 200_000, 5]) {
    const x = ramp(n, n);
    const [y] = await client.run([f32Feed('INPUT0', x)], ['OUTPUT0']);
    assert.deepEqual(y!.dims, [n]);
    assert.deepEqual(floats(y), [...x]);
  }
});

test('an output bigger than the arena comes back whole, on the first run and on later ones', async () => {
  const b = new OnnxModelBuilder();
  b.input('x', 'FP32', ['n']);
  b.output('y', 'FP32', [null]);
  b.initializer('repeats', 'INT64', [1], new BigInt64Array([100n]));
  b.node('Tile', ['x', 'repeats'], ['y']);
  const client = await start('tile', b);
  const x = ramp(1000, 1);
  const expected = [];
  for (let r = 0; r < 100; r++) expected.push(...x);
  for (let round = 0; round < 3; round++) {
    const [y] = await client.run([f32Feed('x', x)], ['y']);
    assert.deepEqual(y!.dims, [100_000]);
    assert.deepEqual(floats(y), expected);
  }
});

test('outputs stay as they were after later runs (they are not views into reused memory)', async () => {
  const client = await start('identity_keep', buildIdentityModel([{ name: 'INPUT0', datatype: 'FP32', shape: ['n'] }]));
  const [first] = await client.run([f32Feed('INPUT0', ramp(4, 10))], ['OUTPUT0']);
  await client.run([f32Feed('INPUT0', ramp(4, 90))], ['OUTPUT0']);
  await client.run([f32Feed('INPUT0', ramp(8, -5))], ['OUTPUT0']);
  assert.deepEqual(floats(first), [10, 11, 12, 13]);
});

test('runs handed over together each get their own outputs', async () => {
  const client = await start('identity_many', buildIdentityModel([{ name: 'INPUT0', datatype: 'FP32', shape: ['n'] }]));
  const runs = [];
  for (let i = 0; i < 6; i++) runs.push(client.run([f32Feed('INPUT0', ramp(i + 1, i * 100))], ['OUTPUT0']));
  const results = await Promise.all(runs);
  for (let i = 0; i < 6; i++) assert.deepEqual(floats(results[i]![0]), [...ramp(i + 1, i * 100)]);
});

test('parts are placed back to back, and several inputs and outputs keep their names and order', async () => {
  const client = await start(
    'identity_two',
    buildIdentityModel([
      { name: 'A', datatype: 'INT64', shape: ['b', 2] },
      { name: 'B', datatype: 'FP32', shape: ['b', 3] },
    ]),
  );
  const a1 = new BigInt64Array([1n, -2n]);
  const a2 = new BigInt64Array([3n, 1n << 40n]);
  const bb = ramp(6, 0.5);
  const out = await client.run(
    [
      new RunFeed('A', 'int64', [2, 2], [bytes(a1), bytes(a2)], 32, undefined),
      new RunFeed('B', 'float32', [2, 3], [bytes(bb.subarray(0, 3)), bytes(bb.subarray(3))], 24, undefined),
    ],
    ['OUTPUT1', 'OUTPUT0'],
  );
  assert.deepEqual(out.map((o) => o.name), ['OUTPUT1', 'OUTPUT0']);
  assert.deepEqual(out[0]!.dims, [2, 3]);
  assert.deepEqual(floats(out[0]), [...bb]);
  assert.deepEqual(out[1]!.dims, [2, 2]);
  assert.ok(out[1]!.data instanceof BigInt64Array);
  assert.deepEqual([...out[1]!.data], [1n, -2n, 3n, 1n << 40n]);
});

test('string inputs and outputs travel alongside numeric ones', async () => {
  const client = await start(
    'identity_strings',
    buildIdentityModel([
      { name: 'S', datatype: 'BYTES', shape: ['n'] },
      { name: 'X', datatype: 'FP32', shape: ['n'] },
    ]),
  );
  const out = await client.run(
    [new RunFeed('S', 'string', [2], [], 0, ['héllo', '']), f32Feed('X', ramp(2, 7))],
    ['OUTPUT0', 'OUTPUT1'],
  );
  assert.deepEqual(out[0]!.data, ['héllo', '']);
  assert.deepEqual(floats(out[1]), [7, 8]);
});

test('a run onnxruntime refuses rejects, and the next run still works', async () => {
  const client = await start('identity_fixed', buildIdentityModel([{ name: 'INPUT0', datatype: 'FP32', shape: [4] }]));
  await assert.rejects(
    client.run([f32Feed('INPUT0', ramp(3, 0))], ['OUTPUT0']),
    (err: Error) => err.name === 'SessionWorkerError',
  );
  const [y] = await client.run([f32Feed('INPUT0', ramp(4, 0))], ['OUTPUT0']);
  assert.deepEqual(floats(y), [0, 1, 2, 3]);
});

test('runs handed over while the thread is busy start in order, and their timestamps are ordered', async () => {
  const client = await start(
    'identity_times',
    buildIdentityModel([{ name: 'INPUT0', datatype: 'FP32', shape: ['n'] }]),
  );
  const times = Array.from({ length: 20 }, () => new RunTimes());
  const before = Number(process.hrtime.bigint());
  const runs = times.map((t, i) => client.run([f32Feed('INPUT0', ramp(3, i))], ['OUTPUT0'], t));
  const results = await Promise.all(runs);
  const after = Number(process.hrtime.bigint());
  for (let i = 0; i < 20; i++) {
    assert.deepEqual(floats(results[i]![0]), [...ramp(3, i)]);
    const t = times[i]!;
    assert.ok(
      before <= t.postedNs && t.postedNs <= t.pickedNs,
      `run ${i}: posted ${t.postedNs} <= picked ${t.pickedNs}`,
    );
    assert.ok(t.pickedNs <= t.startNs && t.startNs <= t.endNs && t.endNs <= after, `run ${i}: picked <= start <= end`);
    // One session thread: each run starts after the one before it ended.
    if (i > 0) assert.ok(t.startNs >= times[i - 1]!.endNs, `run ${i} started after run ${i - 1} ended`);
  }
});

test('a thread that has gone to sleep is woken by the next run, with and without busy-waiting', async () => {
  for (const spin of [0, 50]) {
    const client = await start(
      `identity_sleep_${spin}`,
      buildIdentityModel([{ name: 'INPUT0', datatype: 'FP32', shape: ['n'] }]),
      spin,
    );
    for (let round = 0; round < 3; round++) {
      const [y] = await client.run([f32Feed('INPUT0', ramp(2, round))], ['OUTPUT0']);
      assert.deepEqual(floats(y), [...ramp(2, round)]);
      // Longer than the busy-wait and the doze together: the thread sleeps until woken.
      await new Promise((r) => setTimeout(r, 20));
    }
  }
});

test('more runs in flight than the ring has slots wait for a slot, and ' +
  'all finish with their own outputs', { timeout: 60_000 }, async () => {
  const client = await start(
    'identity_overflow',
    buildIdentityModel([{ name: 'INPUT0', datatype: 'FP32', shape: ['n'] }]),
    0,
  );
  const n = RING_SIZE + 76;
  // A big run first keeps the thread busy while the small ones are handed over.
  const big = new Float32Array(16_000_000).fill(1.5);
  const runs = [client.run([f32Feed('INPUT0', big)], ['OUTPUT0'])];
  for (let i = 0; i < n; i++) runs.push(client.run([f32Feed('INPUT0', ramp(2, i))], ['OUTPUT0']));
  const results = await Promise.all(runs);
  assert.equal((results[0]![0]!.data as Float32Array).length, big.length);
  for (let i = 0; i < n; i++) assert.deepEqual(floats(results[i + 1]![0]), [...ramp(2, i)], `run ${i}`);
});

test('collectFinished takes in a finished run before the event loop ' +
  'turns: its promise settles in the microtasks that follow', async () => {
  const client = await start(
    'identity_collect',
    buildIdentityModel([{ name: 'INPUT0', datatype: 'FP32', shape: ['n'] }]),
  );
  const thread = client.currentThread!;
  for (let round = 0; round < 3; round++) {
    const doneBefore = Atomics.load(thread.control, C_DONE);
    let outputs: readonly WireTensor[] | undefined;
    const run = client.run([f32Feed('INPUT0', ramp(6, round))], ['OUTPUT0']).then((o) => (outputs = o));
    // Nothing settles without a turn of the event loop: wait on the worker's counter without one.
    const end = Date.now() + 20_000;
    while (Atomics.load(thread.control, C_DONE) === doneBefore && Date.now() < end);
    assert.notEqual(Atomics.load(thread.control, C_DONE), doneBefore, 'the worker finished an entry');
    for (let i = 0; i < 5; i++) await Promise.resolve();
    assert.equal(outputs, undefined, 'without collectFinished the answer waits for the event loop');
    // (The counter may have moved for the entry that opened the session, finished just after it answered.)
    while (outputs === undefined && Date.now() < end) {
      thread.collectFinished();
      for (let i = 0; i < 5; i++) await Promise.resolve();
    }
    assert.deepEqual(floats(outputs?.[0]), [...ramp(6, round)]);
    await run;
    // Taken in once: the message the event loop reaches later is not delivered a second time.
    thread.collectFinished();
  }
  // And the ordinary path still answers the next run.
  const [y] = await client.run([f32Feed('INPUT0', ramp(3, 7))], ['OUTPUT0']);
  assert.deepEqual(floats(y), [7, 8, 9]);
});

/** y = x + [10, 20, 30] over rows of 3 (batched along dim 0). */
function addRowModel(): OnnxModelBuilder {
  const b = new OnnxModelBuilder();
  b.input('x', 'FP32', ['n', 3]);
  b.output('y', 'FP32', ['n', 3]);
  b.initializer('c', 'FP32', [3], new Float32Array([10, 20, 30]));
  b.node('Add', ['x', 'c'], ['y']);
  return b;
}

function rowsFeed(rows: number, from: number): RunFeed {
  return f32Feed('x', ramp(rows * 3, from), [rows, 3]);
}

function plusRow(x: Float32Array): number[] {
  return [...x].map((v, i) => v + [10, 20, 30][i % 3]!);
}

/**
 * Hands the thread a long run, then `runs` more right behind it (in one
 * synchronous stretch, while the long one runs); resolves with each later
 * run's outputs and times.
 */
async function queuedBehindLongRun(
  client: SessionClient,
  runs: Array<{ feed: RunFeed; texts?: TextPlan }>,
  mergeRows: number,
): Promise<Array<{ out: readonly WireTensor[]; times: RunTimes }>> {
  const long = client.run([rowsFeed(200_000, 0)], ['y'], undefined, undefined, mergeRows);
  const later = runs.map(({ feed, texts }) => {
    const times = new RunTimes();
    return client.run([feed], ['y'], times, texts, mergeRows).then((out) => ({ out, times }));
  });
  await long;
  return Promise.all(later);
}

test('runs queued behind each other are merged into one session run, each getting its own rows', async () => {
  const client = await start('add_row_merge', addRowModel());
  const inputs = [2, 1, 3, 2].map((rows, k) => ramp(rows * 3, 100 * k));
  let merged = false;
  for (let attempt = 0; attempt < 10 && !merged; attempt++) {
    const got = await queuedBehindLongRun(
      client,
      inputs.map((x) => ({ feed: f32Feed('x', x, [x.length / 3, 3]) })),
      64,
    );
    got.forEach(({ out }, k) => {
      assert.deepEqual(out[0]!.dims, [inputs[k]!.length / 3, 3]);
      assert.deepEqual(floats(out[0]), plusRow(inputs[k]!));
    });
    const flags = got.map(({ times }) => times.merged);
    if (flags.some((f) => f !== MERGED_NOT)) {
      merged = true;
      // The first of a merge carries its time, the others are marked as later; all share one session run.
      const first = flags.indexOf(MERGED_FIRST);
      assert.ok(first >= 0);
      for (let k = first + 1; k < flags.length && flags[k] === MERGED_LATER; k++)
        assert.equal(got[k]!.times.startNs, got[first]!.times.startNs);
    }
  }
  assert.ok(merged, 'runs queued behind a long one merged at least once in ten tries');
});

test('runs are not merged without mergeRows, nor beyond it, nor with other shapes', async () => {
  const client = await start('add_row_nomerge', addRowModel());
  const alone = await queuedBehindLongRun(
    client,
    [{ feed: rowsFeed(2, 0) }, { feed: rowsFeed(2, 6) }, { feed: rowsFeed(2, 12) }],
    0,
  );
  assert.deepEqual(alone.map(({ times }) => times.merged), [MERGED_NOT, MERGED_NOT, MERGED_NOT]);

  // At most 4 rows per session run: 3 + 3 never merge, 2 + 2 may.
  for (let attempt = 0; attempt < 3; attempt++) {
    const got = await queuedBehindLongRun(
      client,
      [{ feed: rowsFeed(3, 0) }, { feed: rowsFeed(3, 9) }, { feed: rowsFeed(2, 18) }, { feed: rowsFeed(2, 24) }],
      4,
    );
    const runs = new Map<number, number>();
    got.forEach(({ times }, k) => runs.set(times.startNs, (runs.get(times.startNs) ?? 0) + [3, 3, 2, 2][k]!));
    for (const rows of runs.values()) assert.ok(rows <= 4, `a session run of ${rows} rows`);
    assert.deepEqual(floats(got[3]!.out[0]), plusRow(ramp(6, 24)));
  }

  // Another input shape after the batch dim never joins.
  const other = await start(
    'identity_merge_shapes',
    buildIdentityModel([{ name: 'x', datatype: 'FP32', shape: ['n', 'k'] }]),
  );
  const a = ramp(4, 0);
  const b = ramp(6, 50);
  const [ra, rb] = await Promise.all([
    other.run([f32Feed('x', a, [2, 2])], ['OUTPUT0'], undefined, undefined, 64),
    other.run([f32Feed('x', b, [2, 3])], ['OUTPUT0'], undefined, undefined, 64),
  ]);
  assert.deepEqual(ra![0]!.dims, [2, 2]);
  assert.deepEqual(floats(ra![0]), [...a]);
  assert.deepEqual(rb![0]!.dims, [2, 3]);
  assert.deepEqual(floats(rb![0]), [...b]);
});

test('a merged run whose outputs are not batched along dim 0 is made again run by run', async () => {
  const b = new OnnxModelBuilder();
  b.input('x', 'FP32', ['n', 3]);
  b.output('y', 'FP32', [1, 3]);
  b.initializer('axes', 'INT64', [1], new BigInt64Array([0n]));
  b.node('ReduceSum', ['x', 'axes'], ['y'], { keepdims: { i: 1 } });
  const client = await start('reduce_rows', b);
  const inputs = [ramp(6, 0), ramp(3, 40), ramp(9, 7)];
  const sums = inputs.map((x) => [0, 1, 2].map((c) => [...x].filter((_, i) => i % 3 === c).reduce((s, v) => s + v, 0)));
  const long = client.run([f32Feed('x', ramp(300_000, 0), [100_000, 3])], ['y'], undefined, undefined, 64);
  const got = await Promise.all(
    inputs.map((x) => client.run([f32Feed('x', x, [x.length / 3, 3])], ['y'], undefined, undefined, 64)),
  );
  await long;
  got.forEach((out, k) => {
    assert.deepEqual(out[0]!.dims, [1, 3]);
    assert.deepEqual(floats(out[0]), sums[k]);
  });
});

test('each run of a merge gets the JSON texts it asked for, of its own rows', async () => {
  const client = await start('add_row_texts', addRowModel());
  const fp32 = DATATYPES.findIndex((d) => d.name === 'FP32');
  const plan = (rows: number) =>
    new TextPlan([new TextRequest(0, fp32, arenaTypeCode('float32'), true, [sliceWord(rows, SLICE_FORMAT)])], 16384);
  const inputs = [ramp(6, 0.5), ramp(3, 7.25), ramp(9, -3)];
  const got = await queuedBehindLongRun(
    client,
    inputs.map((x) => ({ feed: f32Feed('x', x, [x.length / 3, 3]), texts: plan(x.length / 3) })),
    64,
  );
  got.forEach(({ out }, k) => {
    const expected = encodeJsonTensorData('y', 'FP32', bytes(new Float32Array(plusRow(inputs[k]!))), inputs[k]!.length);
    assert.deepEqual(out[0]!.texts, [expected]);
  });
});
