/**
 * Ensembles with a decoupled step, served by a real Server with real Python
 * subprocesses: every response of the decoupled step flows on through the
 * steps after it, and the ensemble streams one response per set of outputs.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { Server } from '../../src/core/server.js';
import { Cancellation } from '../../src/types/cancellation.js';
import type { StreamResponse } from '../../src/types/api.js';
import { typedView } from '../../src/tensor/tensor.js';
import { decoupledRepository } from '../helpers/decoupled.js';
import { PYTHON, missingPythonModule } from '../backends/python/helpers.js';

const noNumpy = missingPythonModule('numpy');

const TIMES_TEN = `import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        out = []
        for r in requests:
            v = pb_utils.get_input_tensor_by_name(r, "IN").as_numpy()
            out.append(pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor("OUT", (v * 10).astype(np.int32))]))
        return out
`;

const TIMES_TEN_CONFIG = `name: "times_ten"
backend: "python"
max_batch_size: 0
input [ { name: "IN" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
instance_group [ { kind: KIND_CPU count: 1 } ]
`;

/** VALUES -> decoupled_repeat -> (value, POSITION); value -> times_ten -> SCALED. */
const PIPELINE = `name: "stream_pipeline"
platform: "ensemble"
max_batch_size: 0
input [ { name: "VALUES" data_type: TYPE_INT32 dims: [ -1 ] } ]
output [
  { name: "SCALED" data_type: TYPE_INT32 dims: [ 1 ] },
  { name: "POSITION" data_type: TYPE_UINT32 dims: [ 1 ] }
]
ensemble_scheduling {
  step [
    {
      model_name: "decoupled_repeat"
      model_version: -1
      input_map { key: "IN" value: "VALUES" }
      output_map { key: "OUT" value: "value" }
      output_map { key: "IDX" value: "POSITION" }
    },
    {
      model_name: "times_ten"
      model_version: -1
      input_map { key: "IN" value: "value" }
      output_map { key: "OUT" value: "SCALED" }
    }
  ]
}
`;

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

/** [SCALED, POSITION] of each response that carries outputs. */
function pairs(items: StreamResponse[]): number[][] {
  return items
    .filter((i) => i.response && i.response.outputs.length > 0)
    .map((i) =>
      ['SCALED', 'POSITION'].map((n) => Number(typedView(i.response!.outputs.find((o) => o.name === n)!)[0])),
    );
}

test('an ensemble with a decoupled step streams every response ' +
  'through the steps after it', { skip: noNumpy }, async (t) => {
  const repo = decoupledRepository();
  repo.file('times_ten', '1/model.py', TIMES_TEN);
  repo.config('times_ten', TIMES_TEN_CONFIG);
  repo.file('stream_pipeline', '1/.keep', '');
  repo.config('stream_pipeline', PIPELINE);
  const markers = mkdtempSync(path.join(tmpdir(), 'nereid-markers-'));
  t.after(() => {
    repo.cleanup();
    rmSync(markers, { recursive: true, force: true });
  });
  const server = new Server({
    modelRepositories: [repo.dir],
    backendConfig: { python: { 'python-executable': PYTHON } },
  });
  await server.start();
  t.after(() => server.stop());

  await t.test('the ensemble loads as decoupled, as Triton marks it', async () => {
    const index = await server.repositoryIndex();
    const entry = index.find((e) => e.name === 'stream_pipeline');
    assert.equal(entry?.state, 'READY', entry?.reason);
    assert.equal(server.modelConfig('stream_pipeline').modelTransactionPolicy?.decoupled, true);
  });

  await t.test('one ensemble response per decoupled response, joined ' +
    'across steps by origin, then the final flag', async () => {
    const items = await collect(
      server.inferStream({ model: 'stream_pipeline', id: 'p1', inputs: [int32s('VALUES', [4, 5, 6])] }),
    );
    assert.deepEqual(
      pairs(items).sort((a, b) => a[1]! - b[1]!),
      [
        [40, 0],
        [50, 1],
        [60, 2],
      ],
    );
    assert.equal(items.at(-1)!.final, true);
    assert.ok(items.slice(0, -1).every((i) => !i.final), 'only the last item is final');
    assert.ok(items.every((i) => i.error === undefined));
    assert.equal(items[0]!.response!.id, 'p1');
    assert.equal(items[0]!.response!.modelName, 'stream_pipeline');
  });

  await t.test('zero responses from the decoupled step: only the final flag', async () => {
    const items = await collect(server.inferStream({ model: 'stream_pipeline', inputs: [int32s('VALUES', [])] }));
    assert.equal(items.length, 1);
    assert.equal(items[0]!.final, true);
    assert.equal(items[0]!.response, undefined);
    assert.equal(items[0]!.error, undefined);
  });

  await t.test(
    'an error response of the decoupled step ends the ensemble with it, naming the ensemble and the step',
    async () => {
      const items = await collect(
        server.inferStream({
          model: 'stream_pipeline',
          inputs: [int32s('VALUES', [1, 2, 3])],
          parameters: { mode: 'error_response' },
        }),
      );
      const last = items.at(-1)!;
      assert.equal(last.final, true);
      assert.match(
        last.error!.message,
        /in ensemble 'stream_pipeline', step model 'decoupled_repeat' failed: element 1 is refused/,
      );
    },
  );

  await t.test('cancelling the ensemble request reaches the decoupled step: is_cancelled() turns true', async () => {
    const marker = path.join(markers, 'ensemble-cancel');
    const signal = new Cancellation();
    const stream = server.inferStream({
      model: 'stream_pipeline',
      inputs: [int32s('VALUES', [0])],
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
    assert.ok(seen >= 3);
    assert.equal(last!.final, true);
    assert.match(last!.error!.message, /cancelled/i);
    for (let i = 0; i < 200 && !existsSync(marker); i++) await new Promise((r) => setTimeout(r, 20));
    assert.match(readFileSync(marker, 'utf8'), /^cancelled after \d+$/);
  });

  await t.test('statistics: each ensemble request once, its steps each by their own count', async () => {
    const [ensemble] = server.modelStatistics('stream_pipeline');
    const [scaler] = server.modelStatistics('times_ten');
    assert.equal(ensemble!.inference_stats.success.count, 2, 'the two streams that ended well');
    assert.equal(ensemble!.inference_stats.fail.count, 2, 'the failed one and the cancelled one');
    assert.ok(scaler!.inference_stats.success.count >= 4, 'times_ten ran once per decoupled response');
  });

  await t.test('infer() takes the ensemble when it answers exactly once', async () => {
    const r = await server.infer({
      model: 'stream_pipeline',
      inputs: [int32s('VALUES', [7])],
      parameters: { mode: 'final_with_response' },
    });
    assert.equal(Number(typedView(r.outputs.find((o) => o.name === 'SCALED')!)[0]), 70);
    await assert.rejects(
      server.infer({ model: 'stream_pipeline', inputs: [int32s('VALUES', [1, 2])] }),
      /sent 2 responses/,
    );
  });
});
