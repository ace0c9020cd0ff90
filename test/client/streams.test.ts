/**
 * Streams of a decoupled model, cancellation with AbortSignal and timeouts,
 * against a real `nereid serve`, over HTTP (generate_stream) and gRPC
 * (ModelStreamInfer). The models note a cancellation they saw in a file, so
 * the tests know the server was told.
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import path from 'node:path';
import { AbortError, InferenceClient, TimeoutError, type InferResult } from '../../src/client/index.js';
import { startClientTestServer, waitForFile, type ClientTestServer } from './helpers.js';

let server: ClientTestServer;

before(async () => {
  server = await startClientTestServer();
});

after(async () => {
  await server?.stop();
});

const PROTOCOLS = [
  { label: 'HTTP', url: () => `http://127.0.0.1:${server.ports.http}` },
  { label: 'gRPC', url: () => `grpc://127.0.0.1:${server.ports.grpc}` },
] as const;

let markers = 0;
const marker = () => path.join(server.scratch, `cancelled-${++markers}`);

for (const p of PROTOCOLS) {
  describe(`streams and cancellation over ${p.label}`, () => {
    let client: InferenceClient;
    before(() => {
      client = new InferenceClient({ url: p.url() });
    });
    after(() => client.close());

    test('a decoupled model streams one result per response, in order', async () => {
      const results: InferResult[] = [];
      for await (const r of client.stream({
        model: 'decoupled',
        id: 's1',
        inputs: [{ name: 'IN', datatype: 'INT32', shape: [4], data: [1, 2, 3, 4] }],
      })) {
        results.push(r);
      }
      assert.deepEqual(
        results.map((r) => [...(r.outputs[0]!.data as Int32Array)]),
        [[2], [4], [6], [8]],
      );
      for (const r of results) {
        assert.equal(r.model, 'decoupled');
        assert.equal(r.version, '1');
        assert.equal(r.outputs[0]!.name, 'OUT');
        assert.equal(r.outputs[0]!.datatype, 'INT32');
        assert.deepEqual(r.outputs[0]!.shape, [1]);
      }
      assert.equal(results[0]!.id, 's1');
    });

    test('a model that is not decoupled streams its one result', async () => {
      const results: InferResult[] = [];
      const inputs = [
        { name: 'INPUT0', datatype: 'INT32', shape: [1, 16], data: new Int32Array(16).fill(5) },
        { name: 'INPUT1', datatype: 'INT32', shape: [1, 16], data: new Int32Array(16).fill(2) },
      ] as const;
      for await (const r of client.stream({ model: 'simple', inputs })) results.push(r);
      assert.equal(results.length, 1);
      const sum = results[0]!.outputs.find((o) => o.name === 'OUTPUT0')!;
      assert.deepEqual([...(sum.data as Int32Array)], new Array(16).fill(7));
      if (p.label === 'gRPC') assert.equal(results[0]!.final, true);
    });

    test('an error of the server ends the stream with its message', async () => {
      await assert.rejects(
        async () => {
          for await (const r of client.stream({
            model: 'decoupled',
            inputs: [{ name: 'IN', datatype: 'FP32', shape: [1], data: [1.5] }],
          }))
            void r;
        },
        (err: unknown) => {
          assert.equal((err as Error).name, 'InferenceServerError');
          assert.match((err as Error).message, /IN|datatype|FP32|INT32/);
          return true;
        },
      );
    });

    test('leaving the loop early cancels the request on the server', async () => {
      const file = marker();
      let n = 0;
      for await (const r of client.stream({
        model: 'decoupled',
        inputs: [{ name: 'IN', datatype: 'INT32', shape: [1], data: [0] }],
        parameters: { mode: 'forever', marker: file },
      })) {
        assert.equal((r.outputs[0]!.data as Int32Array)[0], n);
        if (++n === 3) break;
      }
      assert.equal(await waitForFile(file), true, 'the model never saw its request cancelled');
    });

    test('aborting the signal ends a stream with AbortError and cancels it on the server', async () => {
      const file = marker();
      const controller = new AbortController();
      let n = 0;
      await assert.rejects(
        async () => {
          for await (const r of client.stream({
            model: 'decoupled',
            inputs: [{ name: 'IN', datatype: 'INT32', shape: [1], data: [0] }],
            parameters: { mode: 'forever', marker: file },
            signal: controller.signal,
          })) {
            void r;
            if (++n === 2) controller.abort(new Error('enough'));
          }
        },
        (err: unknown) => {
          assert.ok(err instanceof AbortError, String(err));
          assert.equal(err.code, 'CANCELLED');
          assert.equal((err.cause as Error).message, 'enough');
          return true;
        },
      );
      assert.equal(await waitForFile(file), true, 'the model never saw its request cancelled');
    });

    test('aborting an inference rejects it at once and cancels it on the server', async () => {
      const file = marker();
      const controller = new AbortController();
      const call = client.infer({
        model: 'slow',
        inputs: [{ name: 'IN', datatype: 'INT32', shape: [1], data: [9] }],
        parameters: { marker: file },
        signal: controller.signal,
      });
      setTimeout(() => controller.abort(), 200);
      await assert.rejects(call, (err: unknown) => err instanceof AbortError && err.code === 'CANCELLED');
      assert.equal(await waitForFile(file), true, 'the model never saw its request cancelled');
    });

    test('a signal aborted before the call fails it without sending', async () => {
      await assert.rejects(
        client.infer({ model: 'simple', inputs: [], signal: AbortSignal.abort() }),
        (err: unknown) => err instanceof AbortError,
      );
    });

    test('a timeout rejects with TimeoutError', async () => {
      const file = marker();
      await assert.rejects(
        client.infer({
          model: 'slow',
          inputs: [{ name: 'IN', datatype: 'INT32', shape: [1], data: [1] }],
          parameters: { marker: file },
          timeout: 300,
        }),
        (err: unknown) => {
          assert.ok(err instanceof TimeoutError, String(err));
          assert.equal(err.code, 'DEADLINE_EXCEEDED');
          assert.match(err.message, /timed out after 300 ms/);
          return true;
        },
      );
      assert.equal(await waitForFile(file), true, 'the model never saw its request cancelled');
    });
  });
}
