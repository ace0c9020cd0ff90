import { test } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { Server } from '../../src/core/server.js';
import { Cancellation } from '../../src/types/cancellation.js';
import { Metrics } from '../../src/metrics/index.js';
import { sample } from '../metrics/exposition.js';
import type { StreamResponse } from '../../src/types/api.js';
import { typedView } from '../../src/tensor/tensor.js';
import { TempRepository } from '../helpers/repository.js';
import { decoupledRepository } from '../helpers/decoupled.js';
import { PYTHON, missingPythonModule } from '../backends/python/helpers.js';

const noNumpy = missingPythonModule('numpy');

function int32s(name: string, values: number[]) {
  return {
    name,
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

function outValues(items: StreamResponse[]): number[] {
  return items
    .filter((i) => i.response && i.response.outputs.length > 0)
    .map((i) => Number(typedView(i.response!.outputs.find((o) => o.name === 'OUT')!)[0]));
}

test('decoupled python models stream zero, one and many responses, ' +
  'then the final flag', { skip: noNumpy }, async (t) => {
  const repo = decoupledRepository(['decoupled_async']);
  const markers = mkdtempSync(path.join(tmpdir(), 'nereid-markers-'));
  t.after(() => {
    repo.cleanup();
    rmSync(markers, { recursive: true, force: true });
  });
  const server = new Server({
    modelRepositories: [repo.dir],
    backendConfig: { python: { 'python-executable': PYTHON } },
  });
  const metrics = new Metrics({ allowCpuMetrics: false, allowGpuMetrics: false });
  server.on('versionReady', (v) =>
    metrics.attach(v.stats, { pendingCount: () => 0, metricTags: {}, loadDurationSecs: v.loadDurationSecs }),
  );
  await server.start();
  t.after(() => server.stop());

  await t.test('many responses, in order, each with triton-style final flag semantics', async () => {
    const items = await collect(
      server.inferStream({ model: 'decoupled_repeat', id: 'r1', inputs: [int32s('IN', [4, 5, 6])] }),
    );
    assert.deepEqual(outValues(items), [4, 5, 6]);
    assert.deepEqual(items.map((i) => i.final), [false, false, false, true]);
    const last = items.at(-1)!;
    assert.equal(last.response, undefined, 'a bare final flag carries no response');
    assert.equal(items[0]!.response!.id, 'r1');
    assert.equal(items[0]!.response!.modelName, 'decoupled_repeat');
  });

  await t.test('zero responses: only the final flag', async () => {
    const items = await collect(server.inferStream({ model: 'decoupled_repeat', inputs: [int32s('IN', [])] }));
    assert.equal(items.length, 1);
    assert.equal(items[0]!.final, true);
    assert.equal(items[0]!.response, undefined);
    assert.equal(items[0]!.error, undefined);
  });

  await t.test('one response carrying the final flag', async () => {
    const items = await collect(
      server.inferStream({
        model: 'decoupled_repeat',
        inputs: [int32s('IN', [9])],
        parameters: { mode: 'final_with_response' },
      }),
    );
    assert.equal(items.length, 1);
    assert.equal(items[0]!.final, true);
    assert.deepEqual(outValues(items), [9]);
    // infer() accepts a decoupled model that answers exactly once
    const single = await server.infer({
      model: 'decoupled_repeat',
      inputs: [int32s('IN', [7])],
      parameters: { mode: 'final_with_response' },
    });
    assert.equal(Number(typedView(single.outputs[0]!)[0]), 7);
    await assert.rejects(
      server.infer({ model: 'decoupled_repeat', inputs: [int32s('IN', [1, 2])] }),
      /sent 2 responses/,
    );
  });

  await t.test('delayed responses from a thread and from async def execute', async () => {
    const items = await collect(
      server.inferStream({ model: 'decoupled_repeat', inputs: [int32s('IN', [1, 2])], parameters: { delay_ms: 30 } }),
    );
    assert.deepEqual(outValues(items), [1, 2]);
    const asyncItems = await collect(
      server.inferStream({
        model: 'decoupled_repeat',
        inputs: [int32s('IN', [3, 4])],
        parameters: { mode: 'async', delay_ms: 5 },
      }),
    );
    assert.deepEqual(outValues(asyncItems), [3, 4]);
    assert.equal(asyncItems.at(-1)!.final, true);
  });

  await t.test('an error response in the middle of the stream; the stream goes on', async () => {
    const items = await collect(
      server.inferStream({
        model: 'decoupled_repeat',
        inputs: [int32s('IN', [1, 2, 3])],
        parameters: { mode: 'error_response' },
      }),
    );
    assert.deepEqual(outValues(items), [1, 3]);
    assert.match(items[1]!.error!.message, /element 1 is refused/);
    assert.equal(items[1]!.final, false);
    assert.equal(items.at(-1)!.final, true);
  });

  await t.test('a sender released without the final flag ends the stream with an error', async () => {
    const items = await collect(
      server.inferStream({
        model: 'decoupled_repeat',
        id: 'nf',
        inputs: [int32s('IN', [1, 2])],
        parameters: { mode: 'no_final' },
      }),
    );
    assert.deepEqual(outValues(items), [1, 2]);
    const last = items.at(-1)!;
    assert.equal(last.final, true);
    assert.match(
      last.error!.message,
      /released the response sender of request 'nf' without sending TRITONSERVER_RESPONSE_COMPLETE_FINAL/,
    );
  });

  await t.test('sending after the final flag raises in the model; the client saw a clean end', async () => {
    const marker = path.join(markers, 'after_final');
    const items = await collect(
      server.inferStream({
        model: 'decoupled_repeat',
        inputs: [int32s('IN', [1])],
        parameters: { mode: 'after_final', marker },
      }),
    );
    assert.deepEqual(outValues(items), [1]);
    assert.equal(items.at(-1)!.error, undefined);
    for (let i = 0; i < 100 && !existsSync(marker); i++) await new Promise((r) => setTimeout(r, 20));
    assert.equal(readFileSync(marker, 'utf8'), 'Unable to send response. Response sender has been closed.');
  });

  await t.test('execute() raising ends every request with the error', async () => {
    const items = await collect(
      server.inferStream({ model: 'decoupled_repeat', inputs: [int32s('IN', [1])], parameters: { mode: 'raise' } }),
    );
    assert.equal(items.length, 1);
    assert.equal(items[0]!.final, true);
    assert.match(
      items[0]!.error!.message,
      /Failed to process the request\(s\) for model 'decoupled_repeat', message: .*execute refused the request/,
    );
  });

  await t.test('cancellation reaches the model: is_cancelled() turns true and the model stops', async () => {
    const marker = path.join(markers, 'cancelled');
    const signal = new Cancellation();
    const stream = server.inferStream({
      model: 'decoupled_repeat',
      inputs: [int32s('IN', [0])],
      parameters: { mode: 'until_cancelled', marker, delay_ms: 5 },
      signal,
    });
    let seen = 0;
    let last: StreamResponse | undefined;
    for await (const item of stream) {
      last = item;
      if (item.response) seen += 1;
      if (seen === 3) signal.abort();
    }
    assert.equal(last!.final, true);
    assert.match(last!.error!.message, /cancelled/i);
    for (let i = 0; i < 200 && !existsSync(marker); i++) await new Promise((r) => setTimeout(r, 20));
    assert.match(readFileSync(marker, 'utf8'), /^cancelled after \d+$/);
  });

  await t.test('a request cancelled once execute() has it counts as the backend ' +
    'reports it; one cancelled while queued counts as CANCELED', async () => {
    const labels = { model: 'decoupled_repeat', version: '1' };
    const before = server.modelStatistics('decoupled_repeat')[0]!;
    const canceledBefore = sample(await metrics.render(), 'nv_inference_request_failure', {
      ...labels,
      reason: 'CANCELED',
    });
    const marker = path.join(markers, 'inline-cancelled');
    // A: execute() itself streams until it sees the cancellation, so the only instance stays busy.
    const signalA = new Cancellation();
    const a = server.inferStream({
      model: 'decoupled_repeat',
      inputs: [int32s('IN', [0])],
      parameters: { mode: 'inline_until_cancelled', marker, delay_ms: 5 },
      signal: signalA,
    });
    const first = await a.next();
    assert.equal(first.done, false);
    assert.ok(first.value.response, 'A is executing');
    // B waits in the queue behind A and is cancelled there.
    const signalB = new Cancellation();
    const b = server.inferStream({ model: 'decoupled_repeat', inputs: [int32s('IN', [1])], signal: signalB });
    const bItem = b.next();
    signalB.abort();
    const bFirst = await bItem;
    assert.equal(bFirst.done, false);
    assert.equal(bFirst.value.final, true);
    assert.match(bFirst.value.error!.message, /cancelled/i);
    signalA.abort();
    const aItems = await collect(a);
    assert.equal(aItems.at(-1)!.final, true);
    assert.match(aItems.at(-1)!.error!.message, /cancelled/i);
    for (let i = 0; i < 200 && !existsSync(marker); i++) await new Promise((r) => setTimeout(r, 20));
    assert.match(
      readFileSync(marker, 'utf8'),
      /^cancelled after \d+$/,
      'the model saw is_cancelled() inside execute()',
    );
    // execute() returns after the marker: A is recorded then, as a success.
    let after = server.modelStatistics('decoupled_repeat')[0]!;
    for (let i = 0; i < 200 && after.inference_stats.success.count === before.inference_stats.success.count; i++) {
      await new Promise((r) => setTimeout(r, 20));
      after = server.modelStatistics('decoupled_repeat')[0]!;
    }
    assert.equal(after.inference_stats.success.count - before.inference_stats.success.count, 1, 'A: a success');
    assert.equal(after.inference_stats.fail.count - before.inference_stats.fail.count, 1, 'B: a failure');
    assert.equal(after.execution_count - before.execution_count, 1, 'only A executed');
    const canceledAfter = sample(await metrics.render(), 'nv_inference_request_failure', {
      ...labels,
      reason: 'CANCELED',
    });
    assert.equal(canceledAfter - canceledBefore, 1, 'B counts as CANCELED');
  });

  await t.test('async def execute: coroutines of one instance run at ' +
    'the same time, as on Triton\'s stub event loop', async () => {
    const waiting = server.inferStream({
      model: 'decoupled_async',
      inputs: [int32s('IN', [])],
      parameters: { role: 'wait' },
    });
    const first = waiting.next();
    // Only the second request can release the first: with one instance, they overlap or the first times out.
    const release = await collect(
      server.inferStream({ model: 'decoupled_async', inputs: [int32s('IN', [])], parameters: { role: 'release' } }),
    );
    assert.deepEqual(outValues(release), [2]);
    const released = await first;
    assert.equal(released.done, false);
    assert.equal(released.value.error, undefined, released.value.error?.message);
    assert.deepEqual(outValues([released.value]), [1]);
    assert.equal(released.value.final, true);
  });

  await t.test('async def execute: BLS from the coroutine, awaited and blocking, streams back', async () => {
    const items = await collect(
      server.inferStream({ model: 'decoupled_async', inputs: [int32s('IN', [5, 6, 7])], parameters: { role: 'bls' } }),
    );
    assert.equal(items.at(-1)!.error, undefined, items.at(-1)!.error?.message);
    assert.deepEqual(outValues(items), [5, 6, 7, 5, 6, 7]);
  });

  await t.test('async def execute raising after execute returned ends the request with the error', async () => {
    const items = await collect(
      server.inferStream({ model: 'decoupled_async', inputs: [int32s('IN', [])], parameters: { role: 'raise' } }),
    );
    assert.equal(items.length, 1);
    assert.equal(items[0]!.final, true);
    assert.match(
      items[0]!.error!.message,
      /Failed to process the request\(s\) for model 'decoupled_async', message: .*the coroutine gave up/,
    );
    // and the instance serves on
    const again = await collect(
      server.inferStream({ model: 'decoupled_async', inputs: [int32s('IN', [])], parameters: { role: 'release' } }),
    );
    assert.deepEqual(outValues(again), [2]);
  });

  await t.test('BLS exec(decoupled=True) iterates every response', async () => {
    const r = await server.infer({ model: 'bls_decoupled_caller', inputs: [int32s('IN', [1, 2, 3, 4])] });
    const byName = new Map(r.outputs.map((o) => [o.name, Number(typedView(o)[0])]));
    assert.equal(byName.get('SUM'), 10);
    assert.equal(byName.get('COUNT'), 5, 'four responses and the empty final one');
  });

  await t.test('a process that dies mid-stream ends the stream with an error, and the model serves again', async () => {
    const items = await collect(
      server.inferStream({
        model: 'decoupled_repeat',
        inputs: [int32s('IN', [1, 2, 3])],
        parameters: { mode: 'crash' },
      }),
    );
    assert.deepEqual(outValues(items), [1]);
    const last = items.at(-1)!;
    assert.equal(last.final, true);
    assert.match(last.error!.message, /exited with code 3/);
    const again = await collect(server.inferStream({ model: 'decoupled_repeat', inputs: [int32s('IN', [8])] }));
    assert.deepEqual(outValues(again), [8]);
  });

  await t.test('statistics and metrics count decoupled requests alike', async () => {
    const [s] = server.modelStatistics('decoupled_repeat');
    assert.ok(s!.inference_stats.success.count >= 8);
    assert.ok(s!.inference_stats.fail.count >= 1);
    assert.ok(s!.execution_count >= s!.inference_stats.success.count);
    const text = await metrics.render();
    const labels = { model: 'decoupled_repeat', version: '1' };
    assert.equal(sample(text, 'nv_inference_request_success', labels), s!.inference_stats.success.count);
    assert.equal(sample(text, 'nv_inference_exec_count', labels), s!.execution_count);
    const failures = ['REJECTED', 'CANCELED', 'BACKEND', 'OTHER'].reduce(
      (n, reason) => n + sample(text, 'nv_inference_request_failure', { ...labels, reason }),
      0,
    );
    assert.equal(failures, s!.inference_stats.fail.count);
  });
});

test('onnxruntime models refuse the decoupled transaction policy at load', async (t) => {
  const repo = new TempRepository().addSub('simple_dec', [1], `name: "simple_dec"
platform: "onnxruntime_onnx"
max_batch_size: 8
model_transaction_policy { decoupled: true }
input [ { name: "INPUT0" data_type: TYPE_INT32 dims: [ 16 ] }, { name: "INPUT1" data_type: TYPE_INT32 dims: [ 16 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_INT32 dims: [ 16 ] }, { name: "OUTPUT1" data_type: TYPE_INT32 dims: [ 16 ]
  } ]
`);
  t.after(() => repo.cleanup());
  const server = new Server({ modelRepositories: [repo.dir], exitOnError: false });
  await server.start();
  t.after(() => server.stop());
  const [entry] = await server.repositoryIndex();
  assert.equal(entry!.state, 'UNAVAILABLE');
  assert.match(entry!.reason!, /onnxruntime backend does not support models with the decoupled transaction policy/);
});
