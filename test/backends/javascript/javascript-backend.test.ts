/**
 * The javascript backend inside a real Server, with real worker threads and
 * real ONNX models for BLS.
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import ts from 'typescript';
import { Server } from '../../../src/core/server.js';
import { NereidError } from '../../../src/errors.js';
import { datatypeInfo, type Datatype } from '../../../src/tensor/datatype.js';
import { decodeBytesElements, encodeBytesElements, typedView, type Tensor } from '../../../src/tensor/tensor.js';
import { TempRepository, int32Tensor } from '../../helpers/repository.js';
import {
  ALL_TYPES,
  ALL_TYPES_MODEL,
  BATCHER_CONFIG,
  BATCHER_MODEL,
  BLS_MODEL,
  FAULTY_CONFIG,
  FAULTY_MODEL,
  Mode,
  allTypesConfig,
  blsConfig,
  jsModel,
} from './fixtures.js';

const EXPECTED_KIND: Record<Datatype, string> = {
  BOOL: 'Uint8Array',
  UINT8: 'Uint8Array',
  UINT16: 'Uint16Array',
  UINT32: 'Uint32Array',
  UINT64: 'BigUint64Array',
  INT8: 'Int8Array',
  INT16: 'Int16Array',
  INT32: 'Int32Array',
  INT64: 'BigInt64Array',
  FP16: 'Uint16Array',
  FP32: 'Float32Array',
  FP64: 'Float64Array',
  BYTES: 'Array of Uint8Array',
  BF16: 'Uint16Array',
};

/** Three elements of each datatype, with bytes that differ per type. */
function sampleTensor(datatype: Datatype, seed: number): Tensor {
  const name = `IN_${datatype}`;
  if (datatype === 'BYTES')
    return { name, datatype, shape: [3], data: encodeBytesElements(['', `seed ${seed}`, 'ünïcødé \u0000 bytes']) };
  const size = datatypeInfo(datatype).byteSize;
  const data = new Uint8Array(3 * size);
  for (let i = 0; i < data.length; i++) data[i] = (seed * 31 + i * 7) & 0xff;
  if (datatype === 'BOOL') for (let i = 0; i < 3; i++) data[i] = (seed + i) % 2;
  if (datatype === 'FP32' || datatype === 'FP64') {
    // Keep the floats finite (NaN payloads need not survive every copy).
    const Ctor = datatypeInfo(datatype).arrayType as Float64ArrayConstructor;
    new Ctor(data.buffer).set([seed + 0.5, -1e-3, 1234.25]);
  }
  return { name, datatype, shape: [3], data };
}

function mode(m: number): Tensor {
  return { name: 'MODE', datatype: 'INT32', shape: [1], data: new Uint8Array(new Int32Array([m]).buffer) };
}

function values(t: Tensor): number[] {
  return Array.from(typedView(t) as Int32Array, Number);
}

describe('javascript backend in a real server', () => {
  let repo: TempRepository;
  let server: Server;
  const markerDir = mkdtempSync(path.join(tmpdir(), 'nereid-js-marker-'));

  before(async () => {
    repo = new TempRepository().addSub('simple');
    jsModel(repo, 'all_types', allTypesConfig('all_types', false), ALL_TYPES_MODEL);
    jsModel(repo, 'all_types_copy', allTypesConfig('all_types_copy', true), ALL_TYPES_MODEL);
    jsModel(repo, 'batcher', BATCHER_CONFIG, BATCHER_MODEL);
    jsModel(repo, 'bls', blsConfig('bls', 'simple'), BLS_MODEL);
    jsModel(repo, 'bls_missing', blsConfig('bls_missing', 'no_such_model'), BLS_MODEL);
    jsModel(repo, 'faulty', FAULTY_CONFIG, FAULTY_MODEL);
    // Broken ones: the server serves everything else.
    jsModel(
      repo,
      'syntax_error',
      'backend: "javascript"\n',
      'export default class {\n  async execute(r) {\n    return r }\n  }\n}\n',
    );
    jsModel(
      repo,
      'helper_syntax_error',
      'backend: "javascript"\n',
      'import { helper } from "./lib/helper.mjs";\nexport default class { execute() { return helper(); } }\n',
    );
    repo.file('helper_syntax_error', '1/lib/helper.mjs', 'export function helper() {\n  return [;\n}\n');
    jsModel(
      repo,
      'top_level_throw',
      'backend: "javascript"\n',
      'const weights = null;\nthrow new Error(`weights missing: ${weights}`);\n',
    );
    jsModel(
      repo,
      'init_throws',
      'backend: "javascript"\n',
      'export default class {\n  async initialize() {\n    throw new ' +
      'Error("no weights");\n  }\n  execute() { return []; }\n}\n',
    );
    jsModel(repo, 'no_default', 'backend: "javascript"\n', 'export const x = 1;\n');
    jsModel(repo, 'no_execute', 'backend: "javascript"\n', 'export default class {}\n');
    jsModel(
      repo,
      'bad_timeout',
      'backend: "javascript"\nparameters: { key: "execute_timeout_ms" value: { string_value: "soon" } }\n',
      'export default class { execute(r) { return []; } }\n',
    );
    repo.config('no_file', 'backend: "javascript"\n').file('no_file', '1/README', 'nothing here');
    // Blocks its thread until the marker file appears.
    jsModel(
      repo,
      'blocker',
      `name: "blocker"
backend: "javascript"
max_batch_size: 0
input [ { name: "FLAG" data_type: TYPE_STRING dims: [ 1 ] } ]
output [ { name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
`,
      `import { existsSync } from 'node:fs';
export default class {
  execute(requests) {
    const flag = new TextDecoder().decode(requests[0].inputs[0].data[0]);
    while (!existsSync(flag)) {}
    return [{ outputs: [{ name: 'OUT', shape: [1], data: [7] }] }];
  }
}
`,
    );
    // finalize() leaves a file behind.
    jsModel(
      repo,
      'finalizer',
      `backend: "javascript"
parameters: { key: "MARKER" value: { string_value: "${path.join(markerDir, 'finalized')}" } }
input [ { name: "X" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "Y" data_type: TYPE_INT32 dims: [ 1 ] } ]
`,
      `import { writeFileSync } from 'node:fs';
export default class {
  initialize(args) { this.marker = args.modelConfig.parameters.MARKER.string_value; this.args = args; }
  execute(requests) {
    return requests.map((r) => ({ outputs: [{ name: 'Y', datatype: 'INT32', shape: [1], data: r.inputs[0].data }] }));
  }
  finalize() {
    writeFileSync(this.marker, this.args.modelName + ' ' + this.args.modelVersion + ' ' + this.args.instanceName);
  }
}
`,
    );
    // Compiled TypeScript, as ES module and as CommonJS, in model.js.
    const tsSource = `
interface Request { inputs: { name: string; datatype: string; shape: number[]; data: Int32Array }[] }
export default class Doubler {
  async execute(requests: Request[]): Promise<unknown[]> {
    return requests.map((r) => ({
      outputs: [{ name: 'Y', datatype: 'INT32', shape: r.inputs[0]!.shape, data: r.inputs[0]!.data.map((v) => v * 2) }],
    }));
  }
}
`;
    const tsConfig = (name: string) => `name: "${name}"
backend: "javascript"
${name === 'ts_esm' ? 'default_model_filename: "doubler.js"' : ''}
input [ { name: "X" data_type: TYPE_INT32 dims: [ 2 ] } ]
output [ { name: "Y" data_type: TYPE_INT32 dims: [ 2 ] } ]
`;
    // Compiled with the project (typed against Nereid's model types), as an ES module.
    jsModel(
      repo,
      'ts_esm',
      tsConfig('ts_esm'),
      readFileSync(new URL('./ts-model/doubler.js', import.meta.url), 'utf8'),
      'doubler.js',
    );
    // Compiled to CommonJS (exports.default).
    const cjs = ts.transpileModule(tsSource, {
      compilerOptions: { module: ts.ModuleKind.CommonJS, target: ts.ScriptTarget.ES2022, strict: true },
    }).outputText;
    jsModel(repo, 'ts_cjs', tsConfig('ts_cjs'), cjs, 'model.js');
    // auto_complete_config fills in what config.pbtxt leaves out.
    jsModel(
      repo,
      'completed',
      'backend: "javascript"\n',
      `export default class {
  static auto_complete_config(config) {
    config.max_batch_size = 4;
    config.input = [{ name: 'X', data_type: 'TYPE_FP32', dims: [3] }];
    config.output = [{ name: 'Y', data_type: 'TYPE_FP32', dims: [3] }];
    config.dynamic_batching = {};
    return config;
  }
  execute(requests) { return requests.map((r) => ({ outputs: [{ ...r.inputs[0], name: 'Y' }] })); }
}
`,
    );
    // An ensemble whose first step is a JavaScript model and whose second is the ONNX "simple".
    jsModel(
      repo,
      'doubler16',
      `name: "doubler16"
backend: "javascript"
max_batch_size: 8
input [ { name: "X" data_type: TYPE_INT32 dims: [ 16 ] } ]
output [ { name: "Y" data_type: TYPE_INT32 dims: [ 16 ] } ]
dynamic_batching { }
`,
      `export default class {
  execute(requests) {
    return requests.map((r) => ({
      outputs: [{ name: 'Y', shape: r.inputs[0].shape, data: r.inputs[0].data.map((v) => 2 * v) }],
    }));
  }
}
`,
    );
    repo.config(
      'triple',
      `name: "triple"
platform: "ensemble"
max_batch_size: 8
input [ { name: "A" data_type: TYPE_INT32 dims: [ 16 ] } ]
output [ { name: "TRIPLED" data_type: TYPE_INT32 dims: [ 16 ] } ]
ensemble_scheduling {
  step [
    { model_name: "doubler16" model_version: -1 input_map { key: "X" value: "A" }
      output_map { key: "Y" value: "doubled" } },
    {
      model_name: "simple" model_version: -1
      input_map { key: "INPUT0" value: "doubled" } input_map { key: "INPUT1" value: "A" }
      output_map { key: "OUTPUT0" value: "TRIPLED" }
    }
  ]
}
`,
    );
    mkdirSync(path.join(repo.dir, 'triple', '1'), { recursive: true });
    // A sequence model: a running sum per correlation id, reset by the START control input.
    jsModel(
      repo,
      'running_sum',
      `name: "running_sum"
backend: "javascript"
max_batch_size: 4
sequence_batching {
  control_input [ { name: "START" control [ { kind: CONTROL_SEQUENCE_START int32_false_true: [ 0, 1 ] } ] } ]
}
input [ { name: "INPUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "OUTPUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
`,
      `export default class {
  sums = new Map();
  execute(requests) {
    return requests.map((r) => {
      const value = r.inputs.find((t) => t.name === 'INPUT').data[0];
      const start = r.inputs.find((t) => t.name === 'START').data[0] === 1;
      if (start !== ((r.flags & 1) === 1)) return { error: 'START and flags disagree' };
      const key = String(r.correlationId);
      const sum = (start ? 0 : this.sums.get(key) ?? 0) + value;
      if (r.flags & 2) this.sums.delete(key);
      else this.sums.set(key, sum);
      return { outputs: [{ name: 'OUTPUT', shape: [1, 1], data: [sum] }] };
    });
  }
}
`,
    );
    server = new Server({
      modelRepositories: [repo.dir],
      modelControlMode: 'explicit',
      loadModels: ['*'],
      exitOnError: false,
    });
    await server.start();
  });

  after(async () => {
    await server.stop();
    repo.cleanup();
    rmSync(markerDir, { recursive: true, force: true });
  });

  test('every datatype goes through execute() and back unchanged, as the typed array that fits it', async () => {
    for (const model of ['all_types', 'all_types_copy']) {
      const inputs = ALL_TYPES.map((t, i) => sampleTensor(t.datatype, i + 1));
      const r = await server.infer({ model, inputs });
      const byName = new Map(r.outputs.map((o) => [o.name, o]));
      for (const input of inputs) {
        const out = byName.get(input.name.replace('IN_', 'OUT_'));
        assert.ok(out, `${model}: output for ${input.name}`);
        assert.equal(out.datatype, input.datatype);
        assert.deepEqual(out.shape, [3]);
        assert.deepEqual(Buffer.from(out.data), Buffer.from(input.data), `${model}: ${input.datatype} bytes`);
        // Returned inputs cross back by reference to the batch's shared buffer; arrays the model made are copied.
        assert.equal(
          out.data.buffer instanceof SharedArrayBuffer,
          model === 'all_types',
          `${model}: ${input.datatype} shared`,
        );
      }
      const kinds = decodeBytesElements(byName.get('KINDS')!.data).map((e) => Buffer.from(e).toString());
      assert.deepEqual(
        kinds,
        ALL_TYPES.map((t) => `IN_${t.datatype}:${EXPECTED_KIND[t.datatype]}`),
      );
    }
  });

  test('requests batched by the dynamic batcher reach one execute() and each gets its own response', async () => {
    const rows = [[1, 2], [3, 4], [5, 6, 7, 8]];
    const results = await Promise.all(
      rows.map((v) => server.infer({ model: 'batcher', inputs: [int32Tensor('IN', v, v.length / 2)] })),
    );
    results.forEach((r, i) => {
      assert.deepEqual(values(r.outputs[0]!), rows[i]!.map((x) => x * 10));
      assert.deepEqual(r.outputs[0]!.shape, [rows[i]!.length / 2, 2]);
      assert.deepEqual(
        values(r.outputs[1]!),
        new Array(rows[i]!.length / 2).fill(3),
        'three requests in one execute()',
      );
    });
    const stats = server.modelStatistics('batcher')[0]!;
    assert.equal(stats.execution_count, 1);
    assert.equal(stats.inference_count, 4, 'a batch of 4: two requests of 1 and one of 2');
    assert.deepEqual(stats.batch_stats.map((b) => [b.batch_size, b.compute_infer.count]), [[4, 1]]);
    assert.equal(stats.inference_stats.success.count, 3);
  });

  test('args.infer calls an ONNX model of the same server (BLS) ' +
    'and its tensors come back in the same form', async () => {
    const a = Array.from({ length: 16 }, (_, i) => i * 3);
    const b = Array.from({ length: 16 }, (_, i) => 100 - i);
    const r = await server.infer({ model: 'bls', inputs: [int32Tensor('A', a), int32Tensor('B', b)] });
    assert.deepEqual(r.outputs.map((o) => o.name), ['SUM', 'DIFF']);
    assert.deepEqual(values(r.outputs[0]!), a.map((x, i) => x + b[i]!));
    assert.deepEqual(values(r.outputs[1]!), a.map((x, i) => x - b[i]!));
    const stats = server.modelStatistics('simple')[0]!;
    assert.ok(stats.inference_count >= 1, 'the ONNX model counted the BLS request');

    const missing = await server
      .infer({ model: 'bls_missing', inputs: [int32Tensor('A', a), int32Tensor('B', b)] })
      .catch((e: unknown) => e);
    assert.ok(missing instanceof NereidError);
    assert.match(
      missing.message,
      /BLS failed: Request for unknown model: 'no_such_model' is not found \[NRD_MODEL_NOT_FOUND\]/,
    );
  });

  test('a sequence model sees each request\'s correlation id, flags and control inputs', async () => {
    const step = async (id: number | string, value: number, start = false, end = false) => {
      const parameters: Record<string, string | number | boolean> = { sequence_id: id };
      if (start) parameters.sequence_start = true;
      if (end) parameters.sequence_end = true;
      const r = await server.infer({ model: 'running_sum', inputs: [int32Tensor('INPUT', [value])], parameters });
      return values(r.outputs[0]!)[0];
    };
    assert.equal(await step(7, 1, true), 1);
    assert.equal(await step('abc', 10, true), 10);
    assert.equal(await step(7, 2), 3);
    assert.equal(await step('abc', 20), 30);
    assert.equal(await step(7, 3, false, true), 6);
    assert.equal(await step(7, 5, true), 5, 'a new sequence under the same id starts from zero');
  });

  test('a JavaScript model serves as an ensemble step next to an ONNX one', async () => {
    const a = Array.from({ length: 16 }, (_, i) => i - 4);
    const r = await server.infer({ model: 'triple', inputs: [int32Tensor('A', a)] });
    assert.deepEqual(r.outputs.map((o) => o.name), ['TRIPLED']);
    assert.deepEqual(values(r.outputs[0]!), a.map((x) => 3 * x));
  });

  test('initialize() may call args.infer too', async () => {
    jsModel(
      repo,
      'warm',
      `backend: "javascript"
output [ { name: "WARM" data_type: TYPE_INT32 dims: [ 16 ] } ]
input [ { name: "X" data_type: TYPE_INT32 dims: [ 1 ] } ]
`,
      `export default class {
  async initialize(args) {
    const ones = { datatype: 'INT32', shape: [1, 16], data: new Int32Array(16).fill(1) };
    const { outputs } = await args.infer({
      model: 'simple',
      inputs: [{ ...ones, name: 'INPUT0' }, { ...ones, name: 'INPUT1' }],
      outputs: ['OUTPUT0'],
    });
    this.warm = outputs[0].data.slice();
  }
  execute(requests) { return requests.map(() => ({ outputs: [{ name: 'WARM', shape: [16], data: this.warm }] })); }
}
`,
    );
    await server.loadModel('warm');
    const r = await server.infer({ model: 'warm', inputs: [{ ...int32Tensor('X', [0]), shape: [1] }] });
    assert.deepEqual(values(r.outputs[0]!), new Array(16).fill(2));
  });

  test('a model that misbehaves gets a clear error per request and keeps serving', async () => {
    const cases: [number, RegExp][] = [
      [Mode.throws, /model 'faulty' failed: execute\(\) threw TypeError: the model tripped \(at 1\/model\.mjs:7:\d+\)/],
      [Mode.wrongCount, /execute\(\) returned 0 responses for 1 request$/],
      [Mode.wrongDatatype, /output 'OUT' has datatype FP32, but the model configuration declares INT32/],
      [Mode.wrongShape, /output 'OUT' has shape \[2\], but the model configuration expects \[1\]/],
      [Mode.neverResolves, /execute\(\) did not finish within 300 ms \(model parameter execute_timeout_ms\)/],
      [Mode.errorResponse, /^model 'faulty' failed: custom failure$/],
      [Mode.unknownOutput, /output 'NOPE' is not an output in the model configuration \(outputs: 'OUT'\)/],
      [Mode.missingOutput, /requested output 'OUT' is missing/],
      [Mode.wrongSize, /output 'OUT' has 12 bytes of data, but shape \[1\] of INT32 needs 4/],
      [Mode.notAnArray, /execute\(\) returned an object, not an array with one response per request/],
    ];
    for (const [m, expected] of cases) {
      const err = await server.infer({ model: 'faulty', inputs: [mode(m)] }).then(
        () => assert.fail(`mode ${m} should fail`),
        (e: unknown) => e,
      );
      assert.ok(err instanceof NereidError, `mode ${m}`);
      assert.equal(err.code, 'NRD_MODEL_EXECUTION', `mode ${m}`);
      assert.equal(err.httpStatus, 500);
      assert.match(err.message, expected, `mode ${m}`);
      const ok = await server.infer({ model: 'faulty', inputs: [mode(Mode.ok)] });
      assert.deepEqual(values(ok.outputs[0]!), [42], `serving after mode ${m}`);
    }
    const stats = server.modelStatistics('faulty')[0]!;
    assert.equal(stats.inference_stats.fail.count, cases.length);
  });

  test('a worker that exits, throws from a timer or runs out of memory fails ' +
    'the requests it held, restarts, and the model serves again', async () => {
    const restartsBefore = () => server.readyVersions().find((v) => v.modelName === 'faulty')!.restartCount;
    const start = restartsBefore();
    for (const [m, expected] of [
      [Mode.exits, /the worker thread exited with code 3/],
      [Mode.throwsInTimer, /the worker thread failed: RangeError: timer went off \(at 1\/model\.mjs:18:\d+\)/],
      [Mode.outOfMemory, /the worker thread failed: .*JS heap out of memory/],
    ] as const) {
      // The second request waits inside the worker behind the first: it is in flight too.
      const crashing = server.infer({ model: 'faulty', inputs: [mode(m)] });
      const queued = server.infer({ model: 'faulty', inputs: [mode(Mode.ok)] });
      const other = server.infer({
        model: 'bls',
        inputs: [int32Tensor('A', new Array(16).fill(1)), int32Tensor('B', new Array(16).fill(2))],
      });
      for (const p of [crashing, queued]) {
        const err = await p.then(() => assert.fail('should fail'), (e: unknown) => e);
        assert.ok(err instanceof NereidError);
        assert.match(err.message, /^model 'faulty' failed: model 'faulty' instance 'faulty_0_0': /);
        assert.match(err.message, expected);
      }
      assert.deepEqual(values((await other).outputs[0]!), new Array(16).fill(3), 'other models are unaffected');
      // Sent after the crash: waits for the new thread.
      const after = await server.infer({ model: 'faulty', inputs: [mode(Mode.ok)] });
      assert.deepEqual(values(after.outputs[0]!), [42]);
    }
    assert.equal(restartsBefore() - start, 3);
    const entry = (await server.repositoryIndex()).find((e) => e.name === 'faulty');
    assert.equal(entry?.state, 'READY');
    assert.match(entry?.reason ?? '', /restarted \d+ times?/);
  });

  test('an execute() that blocks its thread past the timeout is stopped, and the thread restarted', async () => {
    const err = await server.infer({ model: 'faulty', inputs: [mode(Mode.blocks)] }).then(
      () => assert.fail('should fail'),
      (e: unknown) => e,
    );
    assert.ok(err instanceof NereidError);
    assert.match(
      err.message,
      new RegExp(
        String.raw`execute\(\) blocked the worker thread for more than 300 ms \(model parameter ` +
        String.raw`execute_timeout_ms\); the thread was stopped`,
      ),
    );
    const ok = await server.infer({ model: 'faulty', inputs: [mode(Mode.ok)] });
    assert.deepEqual(values(ok.outputs[0]!), [42]);
  });

  test('a model blocking its own thread does not stall the event loop or other models', async () => {
    const flag = path.join(markerDir, 'release-blocker');
    const blocked = server.infer({
      model: 'blocker',
      inputs: [{ name: 'FLAG', datatype: 'BYTES', shape: [1], data: encodeBytesElements([flag]) }],
    });
    let settled = false;
    void blocked.finally(() => (settled = true));
    // While blocker's thread spins, other models answer.
    const r = await server.infer({
      model: 'simple',
      inputs: [int32Tensor('INPUT0', new Array(16).fill(5)), int32Tensor('INPUT1', new Array(16).fill(1))],
    });
    assert.deepEqual(values(r.outputs[0]!), new Array(16).fill(6));
    await new Promise((resolve) => setTimeout(resolve, 20));
    assert.equal(settled, false, 'the blocker is still blocked');
    writeFileSync(flag, '');
    assert.deepEqual(values((await blocked).outputs[0]!), [7]);
  });

  test('models that cannot start are UNAVAILABLE with the module error and its line', async () => {
    const index = await server.repositoryIndex();
    const reason = (name: string) => {
      const e = index.find((x) => x.name === name);
      assert.equal(e?.state, 'UNAVAILABLE', name);
      return e?.reason ?? '';
    };
    assert.match(
      reason('syntax_error'),
      /cannot import 1\/model\.mjs: SyntaxError: Unexpected token '}' \(at 1\/model\.mjs:5\)/,
    );
    assert.match(
      reason('helper_syntax_error'),
      /cannot import 1\/model\.mjs: SyntaxError: Unexpected token ';' \(at 1\/lib\/helper\.mjs:2\)/,
    );
    assert.match(
      reason('top_level_throw'),
      /cannot import 1\/model\.mjs: Error: weights missing: null \(at 1\/model\.mjs:2:7\)/,
    );
    assert.match(reason('init_throws'), /initialize\(\) failed: Error: no weights \(at 1\/model\.mjs:3:11\)/);
    assert.match(reason('no_default'), /1\/model\.mjs has no default export/);
    assert.match(reason('no_execute'), /has no execute\(requests\) method/);
    assert.match(
      reason('bad_timeout'),
      /parameter 'execute_timeout_ms' must be a whole number from 1 to 86400000, got 'soon'/,
    );
    assert.match(reason('no_file'), /model file '1\/model\.mjs' or '1\/model\.js' not found/);
    for (const e of index.filter((x) => ['all_types', 'batcher', 'bls', 'faulty', 'simple'].includes(x.name)))
      assert.equal(e.state, 'READY', e.name);
  });

  test('compiled TypeScript serves, as an ES module (named by ' +
    'default_model_filename) and as CommonJS in model.js', async () => {
    for (const model of ['ts_esm', 'ts_cjs']) {
      const r = await server.infer({ model, inputs: [{ ...int32Tensor('X', [4, -5]), shape: [2] }] });
      assert.deepEqual(values(r.outputs[0]!), [8, -10], model);
    }
  });

  test('a static auto_complete_config completes the configuration', async () => {
    const config = server.modelConfig('completed');
    assert.equal(config.maxBatchSize, 4);
    assert.deepEqual(config.input.map((i) => [i.name, i.dims.map(Number)]), [['X', [3]]]);
    assert.equal(config.schedulingChoice.case, 'dynamicBatching');
    const x = new Float32Array([1.5, 2.5, -3]);
    const r = await server.infer({
      model: 'completed',
      inputs: [{ name: 'X', datatype: 'FP32', shape: [1, 3], data: new Uint8Array(x.buffer) }],
    });
    assert.deepEqual(Array.from(typedView(r.outputs[0]!) as Float32Array), [1.5, 2.5, -3]);
  });

  test('finalize() runs when the model is unloaded, with the args initialize() got', async () => {
    const r = await server.infer({ model: 'finalizer', inputs: [{ ...int32Tensor('X', [9]), shape: [1] }] });
    assert.deepEqual(values(r.outputs[0]!), [9]);
    await server.unloadModel('finalizer');
    const marker = path.join(markerDir, 'finalized');
    assert.ok(existsSync(marker));
    assert.equal(readFileSync(marker, 'utf8'), 'finalizer 1 finalizer_0');
  });
});
