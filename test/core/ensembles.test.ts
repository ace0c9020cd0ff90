/**
 * The lifecycle of ensembles in a real Server with real ONNX step models:
 * Triton's load-time checks and texts, loading what an ensemble needs in
 * explicit mode, readiness that follows the step models, unload_dependents,
 * and a step reloaded under load.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdirSync, utimesSync } from 'node:fs';
import path from 'node:path';
import { Server } from '../../src/core/server.js';
import { NereidError } from '../../src/errors.js';
import { silentLogger } from '../../src/logger.js';
import { typedView } from '../../src/tensor/tensor.js';
import { TempRepository, int32Tensor } from '../helpers/repository.js';
import { defaultExamplesDir } from '../../scripts/build-examples.js';

const A = Array.from({ length: 16 }, (_, i) => i);
const B = Array.from({ length: 16 }, () => 3);
const INT16 = (name: string, type = 'TYPE_INT32') => `{ name: "${name}" data_type: ${type} dims: [ 16 ] }`;

interface Step {
  model: string;
  version?: number;
  inputs: Record<string, string>;
  outputs: Record<string, string>;
}

const map = (m: Record<string, string>) =>
  `[ ${Object.entries(m).map(([k, v]) => `{ key: "${k}" value: "${v}" }`).join(', ')} ]`;

function ensembleConfig(
  name: string,
  steps: Step[],
  opts: { inputs?: string[]; outputs?: string[]; inputType?: string } = {},
): string {
  const inputs = opts.inputs ?? ['A', 'B'];
  const outputs = opts.outputs ?? ['OUT0', 'OUT1'];
  return `name: "${name}"
platform: "ensemble"
max_batch_size: 8
input [ ${inputs.map((n) => INT16(n, opts.inputType)).join(', ')} ]
output [ ${outputs.map((n) => INT16(n)).join(', ')} ]
ensemble_scheduling {
  step [
${steps.map((s) => `    { model_name: "${s.model}" model_version: ${s.version ?? -1}
      input_map ${map(s.inputs)} output_map ${map(s.outputs)} }`).join(',\n')}
  ]
}
`;
}

/** One add/sub step: OUT0 = A + B, OUT1 = A - B. */
const addSub = (model: string, version?: number): Step => ({
  model,
  version,
  inputs: { INPUT0: 'A', INPUT1: 'B' },
  outputs: { OUTPUT0: 'OUT0', OUTPUT1: 'OUT1' },
});

function ensemble(repo: TempRepository, name: string, config: string): void {
  repo.config(name, config);
  mkdirSync(path.join(repo.dir, name, '1'), { recursive: true });
}

function request(model: string) {
  return { model, inputs: [int32Tensor('A', A), int32Tensor('B', B)] };
}

async function answers(server: Server, model: string): Promise<void> {
  const r = await server.infer(request(model));
  assert.deepEqual(Array.from(typedView(r.outputs[0]!) as Int32Array), A.map((x) => x + 3));
}

async function states(server: Server): Promise<Map<string, { state?: string; reason?: string }>> {
  return new Map((await server.repositoryIndex()).map((e) => [e.name, e]));
}

test("load-time checks with Triton's texts; the good ensemble serves beside the broken ones", async (t) => {
  const repo = new TempRepository().addSub('simple').addSub('broken');
  repo.file('broken', '1/model.onnx', 'not an onnx file');
  ensemble(repo, 'good', ensembleConfig('good', [addSub('simple')]));
  ensemble(repo, 'unknown_step', ensembleConfig('unknown_step', [addSub('nope')]));
  ensemble(repo, 'cycle_a', ensembleConfig('cycle_a', [addSub('cycle_b')]));
  ensemble(repo, 'cycle_b', ensembleConfig('cycle_b', [addSub('cycle_a')]));
  ensemble(repo, 'self_cycle', ensembleConfig('self_cycle', [addSub('self_cycle')]));
  ensemble(repo, 'no_version', ensembleConfig('no_version', [addSub('simple', 2)]));
  ensemble(repo, 'step_failed', ensembleConfig('step_failed', [addSub('broken')]));
  ensemble(repo, 'wrong_type', ensembleConfig('wrong_type', [addSub('simple')], { inputType: 'TYPE_FP32' }));
  ensemble(
    repo,
    'unmapped',
    ensembleConfig('unmapped', [{ ...addSub('simple'), inputs: { INPUT0: 'A' } }], { inputs: ['A'] }),
  );
  ensemble(
    repo,
    'twice_written',
    ensembleConfig('twice_written', [
      addSub('simple'),
      { ...addSub('simple'), outputs: { OUTPUT0: 'OUT0', OUTPUT1: 'OUT2' } },
    ]),
  );
  ensemble(
    repo,
    'no_step',
    'name: "no_step"\nplatform: "ensemble"\nmax_batch_size: 8\ninput [ ' +
      INT16('A') +
      ' ]\noutput [ ' +
      INT16('B') +
      ' ]\nensemble_scheduling { }\n',
  );
  ensemble(
    repo,
    'no_scheduling',
    'name: "no_scheduling"\nplatform: "ensemble"\nmax_batch_size: 8\ninput [ ' +
      INT16('A') +
      ' ]\noutput [ ' +
      INT16('B') +
      ' ]\n',
  );
  ensemble(
    repo,
    'nested',
    ensembleConfig('nested', [
      { ...addSub('good'), inputs: { A: 'A', B: 'B' }, outputs: { OUT0: 'OUT0', OUT1: 'OUT1' } },
    ]),
  );
  t.after(() => repo.cleanup());
  const server = new Server({ modelRepositories: [repo.dir], exitOnError: false, logger: silentLogger });
  await server.start();
  t.after(() => server.stop());

  const index = await states(server);
  const reason = (name: string) => {
    const e = index.get(name)!;
    assert.equal(e.state, 'UNAVAILABLE', `${name} should not load`);
    return e.reason ?? '';
  };
  assert.equal(index.get('good')!.state, 'READY');
  assert.equal(index.get('nested')!.state, 'READY');
  assert.match(
    reason('unknown_step'),
    /ensemble unknown_step contains models that are not available or ambiguous: nope/,
  );
  // Either model of the loop may be found first (Triton's QA accepts both orders too).
  for (const name of ['cycle_a', 'cycle_b']) {
    assert.match(
      reason(name),
      new RegExp(
        String.raw`circular dependency between ensembles: (cycle_a -> \.\.\. -> cycle_b -> cycle_a|cycle_b -> \.\.\. ` +
        String.raw`-> cycle_a -> cycle_b)`,
      ),
    );
  }
  assert.match(
    reason('self_cycle'),
    /circular dependency between ensembles: self_cycle -> \.\.\. -> self_cycle -> self_cycle/,
  );
  assert.match(
    reason('no_version'),
    /ensemble 'no_version' depends on 'simple' whose required version 2 is not loaded\./,
  );
  assert.match(
    reason('step_failed'),
    new RegExp(
      String.raw`ensemble 'step_failed' depends on 'broken' which has no loaded version\. Model 'broken' loading ` +
      String.raw`failed with error: `,
    ),
  );
  assert.match(
    reason('wrong_type'),
    new RegExp(
      String.raw`in ensemble wrong_type, ensemble tensor A: inconsistent data type: TYPE_FP32 is inferred from model ` +
      String.raw`wrong_type while TYPE_INT32 is inferred from model simple`,
    ),
  );
  assert.match(
    reason('unmapped'),
    /in ensemble unmapped, input INPUT1 in model simple is not mapped to any ensemble tensors/,
  );
  assert.match(
    reason('twice_written'),
    /ensemble tensor 'OUT0' can appear in an output map only once for ensemble 'twice_written' step 1/,
  );
  assert.match(reason('no_step'), /must specify 'step' for ensemble 'no_step'/);
  assert.match(
    reason('no_scheduling'),
    /ensemble scheduling must be set for ensemble no_scheduling whose platform is ensemble/,
  );

  await answers(server, 'good');
  await answers(server, 'nested');
  const r = await server.infer(request('nested'));
  assert.equal(r.modelName, 'nested');
  await assert.rejects(
    server.infer(request('cycle_a')),
    (err: unknown) => err instanceof NereidError && err.code === 'NRD_MODEL_NO_VERSIONS',
  );
});

test('explicit mode: loading an ensemble loads its steps; its readiness follows ' +
  'them; unload_dependents takes down what was loaded for it', async (t) => {
  const repo = new TempRepository().addSub('simple');
  ensemble(repo, 'pipe', ensembleConfig('pipe', [addSub('simple')]));
  ensemble(
    repo,
    'outer',
    ensembleConfig('outer', [
      { ...addSub('pipe'), inputs: { A: 'A', B: 'B' }, outputs: { OUT0: 'OUT0', OUT1: 'OUT1' } },
    ]),
  );
  t.after(() => repo.cleanup());
  const server = new Server({ modelRepositories: [repo.dir], modelControlMode: 'explicit', logger: silentLogger });
  await server.start();
  t.after(() => server.stop());

  await server.loadModel('outer');
  let index = await states(server);
  for (const name of ['simple', 'pipe', 'outer']) assert.equal(index.get(name)!.state, 'READY', name);
  await answers(server, 'outer');
  assert.equal(await server.modelReady('outer'), true);

  // A step model is unloaded: every ensemble above it stops being ready ('unloaded', as Triton says).
  await server.unloadModel('simple');
  index = await states(server);
  assert.equal(index.get('pipe')!.state, 'UNAVAILABLE');
  assert.equal(index.get('pipe')!.reason, 'unloaded');
  assert.equal(index.get('outer')!.state, 'UNAVAILABLE');
  assert.equal(index.get('outer')!.reason, 'unloaded');
  await assert.rejects(
    server.infer(request('outer')),
    (err: unknown) => err instanceof NereidError && err.code === 'NRD_MODEL_NO_VERSIONS',
  );
  assert.throws(() => server.modelMetadata('outer'), NereidError);

  // It comes back: so do they.
  await server.loadModel('simple');
  index = await states(server);
  assert.equal(index.get('pipe')!.state, 'READY');
  assert.equal(index.get('outer')!.state, 'READY');
  await answers(server, 'outer');

  // Without unload_dependents the steps stay; with it, what was loaded only for the ensemble goes too.
  await server.unloadModel('outer');
  index = await states(server);
  assert.equal(index.get('outer')!.state, 'UNAVAILABLE');
  assert.equal(index.get('pipe')!.state, 'READY');
  await server.loadModel('outer');
  await server.unloadModel('outer', { unloadDependents: true });
  index = await states(server);
  assert.equal(index.get('outer')!.state, 'UNAVAILABLE');
  assert.equal(index.get('pipe')!.state, 'UNAVAILABLE', 'pipe was loaded only for outer');
  assert.equal(index.get('simple')!.state, 'READY', 'simple was loaded explicitly');
});

test('explicit mode: unload_dependents unloads the steps an ensemble loaded, ' +
  'not those another ensemble still uses or the user asked for', async (t) => {
  const repo = new TempRepository().addSub('simple').addSub('other').addSub('kept');
  ensemble(repo, 'fourth', ensembleConfig('fourth', [addSub('kept')]));
  ensemble(repo, 'first', ensembleConfig('first', [addSub('simple')]));
  ensemble(repo, 'second', ensembleConfig('second', [addSub('simple')]));
  ensemble(repo, 'third', ensembleConfig('third', [addSub('other')]));
  t.after(() => repo.cleanup());
  const server = new Server({
    modelRepositories: [repo.dir],
    modelControlMode: 'explicit',
    loadModels: ['fourth', 'first', 'second', 'third', 'kept'],
    logger: silentLogger,
  });
  await server.start();
  t.after(() => server.stop());
  await server.unloadModel('first', { unloadDependents: true });
  let index = await states(server);
  assert.equal(index.get('simple')!.state, 'READY', 'second still uses it');
  await answers(server, 'second');
  await server.unloadModel('third', { unloadDependents: true });
  index = await states(server);
  assert.equal(index.get('other')!.state, 'UNAVAILABLE');
  assert.equal(index.get('other')!.reason, 'unloaded');
  await server.unloadModel('fourth', { unloadDependents: true });
  assert.equal((await states(server)).get('kept')!.state, 'READY', 'kept was asked for at start');
});

test('reloading a step model keeps the ensemble serving: no request fails during the swap', async (t) => {
  const repo = new TempRepository().addSub('simple');
  ensemble(repo, 'pipe', ensembleConfig('pipe', [addSub('simple')]));
  t.after(() => repo.cleanup());
  const server = new Server({
    modelRepositories: [repo.dir],
    modelControlMode: 'explicit',
    loadModels: ['pipe'],
    logger: silentLogger,
  });
  await server.start();
  t.after(() => server.stop());

  let stop = false;
  let served = 0;
  const failures: unknown[] = [];
  const load = async () => {
    while (!stop) {
      try {
        await answers(server, 'pipe');
        served++;
      } catch (err) {
        failures.push(err);
      }
    }
  };
  const clients = [load(), load(), load()];
  for (let i = 0; i < 3; i++) {
    const file = path.join(repo.dir, 'simple', '1', 'model.onnx');
    const later = new Date(Date.now() + (i + 1) * 5000);
    utimesSync(file, later, later); // a changed file makes the explicit load a reload
    await server.loadModel('simple');
  }
  stop = true;
  await Promise.all(clients);
  assert.deepEqual(failures, []);
  assert.ok(served > 0);
  assert.equal((await states(server)).get('pipe')!.state, 'READY');
});

test('the example repository: fraud_pipeline answers what fraud_preprocess ' +
  'then fraud_detector answer, loading only those', async (t) => {
  const examples = defaultExamplesDir();
  const server = new Server({
    modelRepositories: [examples],
    modelControlMode: 'explicit',
    loadModels: ['fraud_pipeline'],
    logger: silentLogger,
  });
  await server.start();
  t.after(() => server.stop());
  const ready = (await server.repositoryIndex(true)).map((e) => e.name).sort();
  assert.deepEqual(ready, ['fraud_detector', 'fraud_pipeline', 'fraud_preprocess']);
  const raw = Float32Array.from({ length: 2 * 10 }, (_, i) => 100 * Math.sin(i));
  const rawTensor = {
    name: 'raw_features',
    datatype: 'FP32' as const,
    shape: [2, 10],
    data: new Uint8Array(raw.buffer),
  };
  const viaPipeline = await server.infer({ model: 'fraud_pipeline', inputs: [rawTensor] });
  const standardized = await server.infer({ model: 'fraud_preprocess', inputs: [rawTensor] });
  const direct = await server.infer({ model: 'fraud_detector', inputs: [standardized.outputs[0]!] });
  assert.equal(viaPipeline.outputs[0]!.name, 'fraud_probability');
  assert.deepEqual(viaPipeline.outputs[0]!.shape, [2, 1]);
  assert.deepEqual(
    Array.from(typedView(viaPipeline.outputs[0]!) as Float32Array),
    Array.from(typedView(direct.outputs[0]!) as Float32Array),
  );
});

test("an ensemble wrong in two ways gets Triton's first error: its " +
  "steps are checked before its inputs and outputs", async (t) => {
  const repo = new TempRepository().addSub('simple');
  // Triton (auto-complete on, its default) checks an ensemble's own input and output
  // dims only when it creates the model, after checking it against its step models.
  const badOutput = (name: string, maxBatch: number) =>
    ensembleConfig(name, [addSub('simple')]).replace('max_batch_size: 8', `max_batch_size: ${maxBatch}`).replace(
      `${INT16('OUT1')} ]`,
      '{ name: "OUT1" data_type: TYPE_INT32 dims: [ -2 ] } ]',
    );
  ensemble(repo, 'batch_and_dims', badOutput('batch_and_dims', 16));
  ensemble(repo, 'shape_and_dims', badOutput('shape_and_dims', 8));
  t.after(() => repo.cleanup());
  const server = new Server({ modelRepositories: [repo.dir], exitOnError: false, logger: silentLogger });
  await server.start();
  t.after(() => server.stop());
  const index = await states(server);
  assert.equal(index.get('batch_and_dims')?.state, 'UNAVAILABLE');
  assert.match(
    index.get('batch_and_dims')!.reason!,
    new RegExp(
      String.raw`ensemble batch_and_dims allows maximum batch size 16, but it contains model simple which only ` +
      String.raw`allows maximum batch size to be 8`,
    ),
  );
  assert.equal(index.get('shape_and_dims')?.state, 'UNAVAILABLE');
  assert.match(
    index.get('shape_and_dims')!.reason!,
    new RegExp(
      String.raw`in ensemble shape_and_dims, ensemble tensor OUT1: inconsistent shape: \[-1,-2\] is inferred from ` +
      String.raw`model shape_and_dims while \[-1,16\] is inferred from model simple`,
    ),
  );
});
