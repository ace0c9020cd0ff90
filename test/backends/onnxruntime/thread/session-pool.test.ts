import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { join } from 'node:path';
import type { SessionClient } from '../../../../src/backends/onnxruntime/thread/session-client.js';
import { SessionThreadPool, type SessionRequest } from '../../../../src/backends/onnxruntime/thread/session-pool.js';
import { RunFeed, type WireTensor } from '../../../../src/backends/onnxruntime/thread/worker-protocol.js';
import { OnnxModelBuilder, buildIdentityModel } from '../../../helpers/onnx-builder.js';
import { recordingLogger } from '../../../repository/cloud-scenarios.js';
import { TempDir } from '../fixtures.js';

let tmp: TempDir;
let identityPath: string;
let slowPath: string;
const clients: SessionClient[] = [];

before(async () => {
  tmp = await TempDir.create();
  identityPath = join(tmp.path, 'identity.onnx');
  await buildIdentityModel([{ name: 'INPUT0', datatype: 'FP32', shape: ['n'] }]).save(identityPath);
  // Eight chained [n,n] x [n,n] products: a run that takes seconds for a big n.
  const slow = new OnnxModelBuilder({ name: 'slow' }).input('X', 'FP32', ['n', 'n']).output('Y', 'FP32', ['n', 'n']);
  let last = 'X';
  for (let i = 0; i < 8; i++) {
    const out = i === 7 ? 'Y' : `P${i}`;
    slow.node('MatMul', [last, 'X'], [out]);
    last = out;
  }
  slowPath = join(tmp.path, 'slow.onnx');
  await slow.save(slowPath);
});

after(async () => {
  for (const c of clients) await c.close();
  await tmp.remove();
});

function request(
  label: string,
  affinityKey: string,
  logger = recordingLogger().logger,
  modelPath = identityPath,
): SessionRequest {
  return { modelPath, options: { intraOpNumThreads: 1 }, spinMicros: 0, label, affinityKey, shared: true, logger };
}

async function open(pool: SessionThreadPool, req: SessionRequest): Promise<SessionClient> {
  const c = await pool.open(req);
  clients.push(c);
  return c;
}

function feed(values: number[]): RunFeed {
  const a = new Float32Array(values);
  return new RunFeed('INPUT0', 'float32', [a.length], [new Uint8Array(a.buffer)], a.byteLength, undefined);
}

function floats(w: readonly WireTensor[]): number[] {
  return [...(w[0]!.data as Float32Array)];
}

async function echoes(c: SessionClient, v: number): Promise<void> {
  assert.deepEqual(floats(await c.run([feed([v, v + 1])], ['OUTPUT0'])), [v, v + 1]);
}

test('small models share the pool threads, and instances of one model never share a thread', async () => {
  const pool = new SessionThreadPool({ threads: 2, stallMs: 60_000 });
  const models = await Promise.all(
    Array.from({ length: 6 }, (_, i) => open(pool, request(`model 'm${i}' instance 'm${i}_0'`, `m${i}`))),
  );
  assert.equal(pool.threadCount, 2);
  const threads = new Set(models.map((c) => c.currentThread));
  assert.equal(threads.size, 2, 'six sessions on the two pool threads');
  for (const t of threads) assert.equal([...models].filter((c) => c.currentThread === t).length, 3, 'spread evenly');
  await Promise.all(models.map((c, i) => echoes(c, i * 10)));

  // Three instances of one model on a pool of two: the third gets a thread of its own.
  const instances = await Promise.all([0, 1, 2].map((i) => open(pool, request(`model 'x' instance 'x_${i}'`, 'x'))));
  const placed = instances.map((c) => c.currentThread);
  assert.equal(new Set(placed).size, 3);
  assert.equal(placed.filter((t) => threads.has(t)).length, 2);
  assert.equal(pool.threadCount, 2);
  await Promise.all(instances.map((c, i) => echoes(c, i)));

  // A session that may not share gets a thread of its own.
  const own = await open(pool, { ...request(`model 'big' instance 'big_0'`, 'big'), shared: false });
  assert.ok(!threads.has(own.currentThread));
  await echoes(own, 5);

  // Sessions released, the pool threads end.
  for (const c of [...models, ...instances, own]) await c.close();
  assert.equal(pool.threadCount, 0);
});

test('a session that fails to open on a shared thread leaves the others on it serving', async () => {
  const pool = new SessionThreadPool({ threads: 1, stallMs: 60_000 });
  const good = await open(pool, request(`model 'good' instance 'good_0'`, 'good'));
  const bad = join(tmp.path, 'corrupt.onnx');
  await (await import('node:fs/promises')).writeFile(bad, 'not an onnx model');
  await assert.rejects(
    pool.open(request(`model 'bad' instance 'bad_0'`, 'bad', undefined, bad)),
    (err: Error) => err.name === 'SessionWorkerError',
  );
  assert.equal(pool.threadCount, 1);
  await echoes(good, 3);
});

test('a shared thread that dies fails only its own sessions, logs ' +
  'each, and creates each again on a thread of its own', async () => {
  const { logger, records } = recordingLogger();
  const pool = new SessionThreadPool({ threads: 2, stallMs: 60_000 });
  const sessions = await Promise.all(
    Array.from({ length: 4 }, (_, i) => open(pool, request(`model 'd${i}' instance 'd${i}_0'`, `d${i}`, logger))),
  );
  const doomed = sessions[0]!.currentThread!;
  const onDoomed = sessions.filter((c) => c.currentThread === doomed);
  const others = sessions.filter((c) => c.currentThread !== doomed);
  assert.equal(onDoomed.length, 2);
  const otherThread = others[0]!.currentThread;

  const inFlight = onDoomed.map((c) => c.run([feed([1, 2])], ['OUTPUT0']));
  doomed.abandon('onnxruntime session thread stopped by the test');
  for (const r of inFlight) await assert.rejects(r, /stopped by the test/);
  for (const c of onDoomed) assert.equal(c.alive, false);
  // The sessions on the other thread never noticed.
  for (const c of others) {
    assert.equal(c.alive, true);
    assert.equal(c.currentThread, otherThread);
    await echoes(c, 7);
  }
  const died = records.find((r) => typeof r.msg === 'string' && r.msg.includes(`session thread ${doomed.number} died`));
  assert.ok(died, 'the death is logged');
  assert.deepEqual([...(died.sessions as string[])].sort(), onDoomed.map((c) => c.label).sort());
  assert.equal(died.level, 50);

  // Each comes back, alone on a new thread.
  for (let i = 0; i < 500 && !onDoomed.every((c) => c.alive); i++) await new Promise((r) => setTimeout(r, 20));
  assert.ok(onDoomed.every((c) => c.alive), 'the sessions were created again');
  const fresh = onDoomed.map((c) => c.currentThread);
  assert.equal(new Set(fresh).size, 2);
  for (const t of fresh) assert.ok(t !== doomed && t !== otherThread);
  for (const c of onDoomed) await echoes(c, 9);
  for (const c of onDoomed)
    assert.ok(
      records.some(
        (r) =>
          r.msg === `${c.label}: onnxruntime session created again on thread ${c.currentThread!.number} of its own`,
      ),
    );
  await doomed.whenExited();
});

test('a shared thread stuck on one run longer than the stall limit is stopped: the log names ' +
  'the run holding it, and every session on it comes back', { timeout: 120_000 }, async () => {
  const { logger, records } = recordingLogger();
  const pool = new SessionThreadPool({ threads: 1, stallMs: 300 });
  const slow = await open(pool, request(`model 'slow' instance 'slow_0'`, 'slow', logger, slowPath));
  const quick = await open(pool, request(`model 'quick' instance 'quick_0'`, 'quick', logger));
  assert.equal(slow.currentThread, quick.currentThread);
  const stuck = slow.currentThread!;

  const n = 2048;
  const x = new Float32Array(n * n).fill(0.001);
  const long = slow.run(
    [new RunFeed('X', 'float32', [n, n], [new Uint8Array(x.buffer)], x.byteLength, undefined)],
    ['Y'],
  );
  const behind = quick.run([feed([1, 2])], ['OUTPUT0']);
  await assert.rejects(long, /model 'slow' instance 'slow_0' was busy for more than 300 ms on a shared session thread/);
  await assert.rejects(behind, /was busy for more than 300 ms/);
  const died = records.find((r) => typeof r.msg === 'string' && r.msg.includes(`session thread ${stuck.number} died`));
  assert.ok(died, 'the stop is logged');
  assert.deepEqual([...(died.sessions as string[])].sort(), [quick.label, slow.label].sort());

  for (let i = 0; i < 500 && !(quick.alive && slow.alive); i++) await new Promise((r) => setTimeout(r, 20));
  assert.ok(quick.alive && slow.alive);
  assert.notEqual(quick.currentThread, slow.currentThread);
  await echoes(quick, 4);
  // On a thread of its own the slow model may take its time: no watchdog there.
  const small = new Float32Array(4).fill(1);
  const [y] = await slow.run(
    [new RunFeed('X', 'float32', [2, 2], [new Uint8Array(small.buffer)], small.byteLength, undefined)],
    ['Y'],
  );
  assert.deepEqual([...(y!.data as Float32Array)], [256, 256, 256, 256]);
  // The stalled thread ends by itself once its run returns.
  await stuck.whenExited();
});
