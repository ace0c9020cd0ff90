import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { Server } from '../../src/core/server.js';
import { NereidError } from '../../src/errors.js';
import { typedView } from '../../src/tensor/tensor.js';
import { TempRepository, int32Tensor } from '../helpers/repository.js';
import { PYTHON, fixtureDir, missingPythonModule } from '../backends/python/helpers.js';

const noNumpy = missingPythonModule('numpy');
const a = Array.from({ length: 16 }, (_, i) => i);

test('a python process dying mid-request fails only that request, restarts, ' +
  'and the restart shows in the index', { skip: noNumpy }, async (t) => {
  const repo = new TempRepository().addSub('simple');
  repo.file('crashy', '1/model.py', readFileSync(`${fixtureDir('crash_on_request')}/model.py`));
  repo.config(
    'crashy',
    `backend: "python"
max_batch_size: 4
input [ { name: "INPUT0" data_type: TYPE_INT32 dims: [ 16 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_INT32 dims: [ 16 ] } ]
instance_group [ { kind: KIND_CPU count: 1 } ]
`,
  );
  t.after(() => repo.cleanup());
  const server = new Server({
    modelRepositories: [repo.dir],
    backendConfig: { python: { 'python-executable': PYTHON } },
  });
  await server.start();
  t.after(() => server.stop());

  const ok = await server.infer({ model: 'crashy', inputs: [int32Tensor('INPUT0', a)] });
  assert.deepEqual(Array.from(typedView(ok.outputs[0]!) as Int32Array), a);

  // The crash fails this request with an error naming the model...
  const crash = server.infer({ model: 'crashy', inputs: [int32Tensor('INPUT0', a.map((x) => -1 - x))] }).then(
    () => undefined,
    (err: unknown) => err,
  );
  // ...while another model keeps answering.
  const other = await server.infer({
    model: 'simple',
    inputs: [int32Tensor('INPUT0', a), int32Tensor('INPUT1', a)],
  });
  assert.deepEqual(Array.from(typedView(other.outputs[0]!) as Int32Array), a.map((x) => 2 * x));
  const err = await crash;
  assert.ok(err instanceof NereidError, `the request failed with an error (got ${String(err)})`);
  assert.match(err.message, /model 'crashy'.*exited with code 17/);

  // The instance comes back by itself and serves again.
  let served = false;
  for (let i = 0; i < 100 && !served; i++) {
    try {
      await server.infer({ model: 'crashy', inputs: [int32Tensor('INPUT0', a)] });
      served = true;
    } catch {
      await new Promise((r) => setTimeout(r, 100));
    }
  }
  assert.ok(served, 'the restarted instance serves again');
  const entry = (await server.repositoryIndex()).find((e) => e.name === 'crashy');
  assert.equal(entry!.state, 'READY');
  assert.match(entry!.reason ?? '', /restarted 1 time/);
  assert.equal(server.isReady(), true);
});
