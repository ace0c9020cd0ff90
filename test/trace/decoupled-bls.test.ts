/**
 * A decoupled JavaScript model whose execute() returns at once and makes its
 * args.infer() call afterwards, from the work it left running: the call
 * still joins the request's trace (its trace's parent_id is the request's),
 * because the trace stays reachable until the request's final response.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { Server } from '../../src/core/server.js';
import { LEVEL_TIMESTAMPS, Tracer } from '../../src/trace/index.js';
import type { StreamResponse } from '../../src/types/api.js';
import { typedView } from '../../src/tensor/tensor.js';
import { TempRepository } from '../helpers/repository.js';
import { type TraceFileEntry, mergeTraces } from '../helpers/trace-summary.js';
import { jsModel } from '../backends/javascript/fixtures.js';

const CONFIG = `name: "late_bls"
backend: "javascript"
max_batch_size: 0
model_transaction_policy { decoupled: true }
input [ { name: "A" data_type: TYPE_INT32 dims: [ 1, 16 ] }, { name: "B" data_type: TYPE_INT32 dims: [ 1, 16 ] } ]
output [ { name: "SUM" data_type: TYPE_INT32 dims: [ 1, 16 ] } ]
instance_group [ { kind: KIND_CPU count: 1 } ]
`;

// execute() returns before the infer() call is made: it runs from a timer the model left behind.
const MODEL = `
export default class {
  async initialize(args) { this.infer = args.infer; }
  execute(requests) {
    for (const r of requests) setTimeout(() => void this.later(r), 20);
  }
  async later(r) {
    const [a, b] = r.inputs;
    const res = await this.infer({ model: 'simple', inputs: [{ ...a, name: 'INPUT0' }, { ...b, name: 'INPUT1' }] });
    const sum = res.outputs.find((o) => o.name === 'OUTPUT0');
    r.responseSender.send({ outputs: [{ ...sum, name: 'SUM' }] }, { final: true });
  }
}
`;

function int32s(name: string, values: number[]) {
  return { name, datatype: 'INT32' as const, shape: [1, 16], data: new Uint8Array(new Int32Array(values).buffer) };
}

test('an infer() call a decoupled JavaScript model makes after execute() returned joins the trace', async (t) => {
  const dir = mkdtempSync(path.join(tmpdir(), 'nereid-trace-'));
  const file = path.join(dir, 'trace.json');
  const repo = new TempRepository().addSub('simple');
  jsModel(repo, 'late_bls', CONFIG, MODEL);
  t.after(() => {
    repo.cleanup();
    rmSync(dir, { recursive: true, force: true });
  });
  const tracer = new Tracer({ mode: 'triton', file, level: LEVEL_TIMESTAMPS, rate: 1 });
  const server = new Server({ modelRepositories: [repo.dir] });
  await server.start();
  try {
    const a = Array.from({ length: 16 }, (_, i) => i);
    const trace = tracer.sample('late_bls')!;
    assert.ok(trace, 'rate=1 samples the request');
    const items: StreamResponse[] = [];
    for await (const item of server.inferStream({
      model: 'late_bls',
      id: 'late-1',
      inputs: [int32s('A', a), int32s('B', a)],
      trace,
    })) {
      items.push(item);
    }
    trace.end();
    const outputs = items.filter((i) => i.response).map((i) => i.response!.outputs[0]!);
    const sums = outputs.map((o) => Array.from(typedView(o) as Int32Array));
    assert.deepEqual(sums, [a.map((v) => 2 * v)]);
  } finally {
    await server.stop();
    await tracer.close();
  }
  const traces = [...mergeTraces(JSON.parse(readFileSync(file, 'utf8')) as TraceFileEntry[]).values()];
  const caller = traces.find((x) => x.request_id === 'late-1');
  assert.equal(caller?.model_name, 'late_bls');
  const children = traces.filter((x) => x.parent_id === caller!.id);
  assert.deepEqual(children.map((x) => x.model_name), ['simple'], 'the late call is a child of the request');
  const child = children[0]!;
  assert.ok(child.timestamps.get('REQUEST_START')! >= caller!.timestamps.get('COMPUTE_END')!,
    'the call was made after execute() returned');
  assert.ok(child.timestamps.get('REQUEST_END')! <= caller!.timestamps.get('REQUEST_END')!);
});
