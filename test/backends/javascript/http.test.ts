/**
 * JavaScript models over a real HTTP server: the branching fraud_router of
 * examples/model_repository (BLS into two ONNX models, and an early return),
 * and a misbehaving model's errors as HTTP replies.
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { cpSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { buildExampleModels, defaultExamplesDir } from '../../../scripts/build-examples.js';
import { Server } from '../../../src/core/server.js';
import { HttpFrontend } from '../../../src/frontends/http/index.js';
import { silentLogger } from '../../../src/logger.js';
import { TempRepository } from '../../helpers/repository.js';
import { call, json } from '../../frontends/http/helpers.js';
import { FAULTY_CONFIG, FAULTY_MODEL, Mode, jsModel } from './fixtures.js';

type Output = { name: string; datatype: string; shape: number[]; data: unknown[] };

const FEATURES = [0.3, -1.2, 0.8, 2.5, -0.4, 0.1, 1.7, -2.2, 0.05, 0.9];

describe('fraud_router, the branching example, over HTTP', () => {
  let dir: string;
  let server: Server;
  let frontend: HttpFrontend;
  let port: number;

  before(async () => {
    // The committed example with freshly built ONNX models beside it.
    dir = mkdtempSync(path.join(tmpdir(), 'nereid-examples-'));
    for (const m of ['fraud_router', 'fraud_detector', 'fraud_detector_large']) {
      cpSync(path.join(defaultExamplesDir(), m), path.join(dir, m), {
        recursive: true,
        filter: (f) => !f.endsWith('.onnx'),
      });
    }
    await buildExampleModels(dir);
    server = new Server({
      modelRepositories: [dir],
      modelControlMode: 'explicit',
      loadModels: ['fraud_router', 'fraud_detector', 'fraud_detector_large'],
      logger: silentLogger,
    });
    await server.start();
    frontend = new HttpFrontend(server, { port: 0, address: '127.0.0.1', maxInputSize: 1 << 20, logger: silentLogger });
    ({ port } = await frontend.start());
  });

  after(async () => {
    await frontend?.stop();
    await server?.stop();
    rmSync(dir, { recursive: true, force: true });
  });

  async function post(model: string, body: unknown): Promise<{ status: number; body: unknown }> {
    const r = await call(port, 'POST', `/v2/models/${model}/infer`, { body: JSON.stringify(body) });
    return { status: r.status, body: json(r) };
  }

  async function route(amount: number): Promise<{ probability: number; route: string }> {
    const r = await post('fraud_router', {
      inputs: [
        { name: 'input_features', datatype: 'FP32', shape: [10], data: FEATURES },
        { name: 'amount', datatype: 'FP32', shape: [1], data: [amount] },
      ],
    });
    assert.equal(r.status, 200, JSON.stringify(r.body));
    const outputs = (r.body as { outputs: Output[] }).outputs;
    const byName = new Map(outputs.map((o) => [o.name, o]));
    return {
      probability: byName.get('fraud_probability')!.data[0] as number,
      route: byName.get('route')!.data[0] as string,
    };
  }

  async function direct(model: string): Promise<number> {
    const r = await post(model, {
      inputs: [{ name: 'input_features', datatype: 'FP32', shape: [1, 10], data: FEATURES }],
    });
    assert.equal(r.status, 200, JSON.stringify(r.body));
    return (r.body as { outputs: Output[] }).outputs[0]!.data[0] as number;
  }

  const count = (model: string) => server.modelStatistics(model)[0]!.inference_count;

  test('a small payment returns early without running a model', async () => {
    const before = [count('fraud_detector'), count('fraud_detector_large')];
    assert.deepEqual(await route(5), { probability: 0, route: 'skipped' });
    assert.deepEqual([count('fraud_detector'), count('fraud_detector_large')], before);
  });

  test('other payments are scored by the model their amount picks, with that model\'s own answer', async () => {
    const small = await direct('fraud_detector');
    const large = await direct('fraud_detector_large');
    assert.notEqual(small, large, 'the two models answer differently');
    const mid = await route(250);
    assert.equal(mid.route, 'fraud_detector');
    assert.equal(mid.probability, small);
    const big = await route(5000);
    assert.equal(big.route, 'fraud_detector_large');
    assert.equal(big.probability, large);
    assert.ok(big.probability > 0 && big.probability < 1);
  });

  test('the router fails with the step\'s error when a model it routes to is not loaded', async () => {
    await server.unloadModel('fraud_detector_large');
    try {
      const r = await post('fraud_router', {
        inputs: [
          { name: 'input_features', datatype: 'FP32', shape: [10], data: FEATURES },
          { name: 'amount', datatype: 'FP32', shape: [1], data: [5000] },
        ],
      });
      assert.equal(r.status, 500);
      assert.match(
        (r.body as { error: string }).error,
        /^model 'fraud_router' failed: scoring with fraud_detector_large failed: .*fraud_detector_large/,
      );
      assert.equal((await route(250)).route, 'fraud_detector', 'the other branch still serves');
    } finally {
      await server.loadModel('fraud_detector_large');
    }
  });
});

describe('a misbehaving JavaScript model over HTTP', () => {
  let repo: TempRepository;
  let server: Server;
  let frontend: HttpFrontend;
  let port: number;

  before(async () => {
    repo = new TempRepository();
    jsModel(repo, 'faulty', FAULTY_CONFIG, FAULTY_MODEL);
    server = new Server({ modelRepositories: [repo.dir], logger: silentLogger });
    await server.start();
    frontend = new HttpFrontend(server, { port: 0, address: '127.0.0.1', maxInputSize: 1 << 20, logger: silentLogger });
    ({ port } = await frontend.start());
  });

  after(async () => {
    await frontend?.stop();
    await server?.stop();
    repo?.cleanup();
  });

  const infer = (mode: number) =>
    call(port, 'POST', '/v2/models/faulty/infer', {
      body: JSON.stringify({ inputs: [{ name: 'MODE', datatype: 'INT32', shape: [1], data: [mode] }] }),
    });

  test('errors come back as HTTP 500 with the message, and the next request is answered', async () => {
    for (const [mode, expected] of [
      [
        Mode.throws,
        /^model 'faulty' failed: execute\(\) threw TypeError: the model tripped \(at 1\/model\.mjs:7:\d+\)$/,
      ],
      [Mode.wrongShape, /output 'OUT' has shape \[2\], but the model configuration expects \[1\]/],
      [Mode.exits, /the worker thread exited with code 3/],
    ] as const) {
      const r = await infer(mode);
      assert.equal(r.status, 500);
      assert.match((json(r) as { error: string }).error, expected);
      const ok = await infer(Mode.ok);
      assert.equal(ok.status, 200, ok.body.toString());
      assert.deepEqual((json(ok) as { outputs: Output[] }).outputs[0]!.data, [42]);
    }
  });

  test('wrong inputs are refused before the model runs, with the core\'s message', async () => {
    const r = await call(port, 'POST', '/v2/models/faulty/infer', {
      body: JSON.stringify({ inputs: [{ name: 'MODE', datatype: 'FP32', shape: [1], data: [1] }] }),
    });
    assert.equal(r.status, 400);
    assert.match(
      (json(r) as { error: string }).error,
      /inference input 'MODE' data-type is 'FP32', but model 'faulty' expects 'INT32'/,
    );
  });
});
