/**
 * Model paging under a memory budget, against real `nereid serve` processes
 * and real ONNX models from the fixture builder. Budgets are set from what a
 * calibration server measured for the same models, so each scenario holds a
 * known number of models whatever this machine's figures are.
 */
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, mkdirSync, readFileSync, rmSync } from 'node:fs';
import path from 'node:path';
import * as grpc from '@grpc/grpc-js';
import { create } from '@bufbuild/protobuf';
import { buildAccumulatorModel, buildMlp } from '../helpers/onnx-builder.js';
import { processRssBytes } from '../../src/core/model-pager.js';
import { ModelInferRequestSchema, type RepositoryIndexResponse } from '../../src/gen/grpc_service_pb.js';
import { inferenceServiceDefinition } from '../../src/frontends/grpc/index.js';
import { pagedMlpConfig } from '../helpers/paging.js';
import { TempRepository } from '../helpers/repository.js';
import { callError, unary } from '../frontends/grpc/helpers.js';
import { LOOPBACK_PORTS, type ServePorts, type ServeProcess, startServe } from '../helpers/serve-process.js';
import { jsModel } from '../backends/javascript/fixtures.js';
import { PYTHON, fixtureDir } from '../backends/python/helpers.js';

/** ~41 MB of weights: each loads as about 57 MB, far above the measuring noise (up to about 20 MB here). */
const BIG_LAYERS = [256, 3072, 3072, 16];
const BIG = ['a', 'b', 'c'];
/**
 * Loaded and pinned at start: the process's one-time costs (about 30 MB) land on whichever of the two is measured
 * first, which differs from one process to another (they load together), so only their sum is the same in every
 * server. `z` (~19 MB of weights) is not like-sized to a, b or c: its figure never stands for theirs.
 */
const FIRST = ['warm', 'z'];
const Z_LAYERS = [256, 2048, 2048, 16];

const ACCUMULATOR = `name: "seq"
platform: "onnxruntime_onnx"
max_batch_size: 8
sequence_batching {
  max_sequence_idle_microseconds: 600000000
  oldest { max_candidate_sequences: 8 }
  state [ {
    input_name: "STATE_IN" output_name: "STATE_OUT" data_type: TYPE_FP32 dims: [ 4 ]
    initial_state: { data_type: TYPE_FP32 dims: [ 4 ] zero_data: true name: "zeros" }
  } ]
}
input [ { name: "INPUT" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "OUTPUT" data_type: TYPE_FP32 dims: [ 4 ] } ]
instance_group [ { kind: KIND_CPU count: 1 } ]
`;

/**
 * A javascript model that holds a request for IN[0] ms, writing a marker file when it starts (the test knows it
 * is running).
 */
const HOLD_CONFIG = `name: "hold"
backend: "javascript"
max_batch_size: 0
input [ { name: "IN" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
instance_group [ { kind: KIND_CPU count: 1 } ]
`;
const HOLD_MODEL = (marker: string) => `
import { writeFileSync } from 'node:fs';
export default class {
  async execute(requests) {
    const ms = new Int32Array(requests[0].inputs[0].data.buffer, requests[0].inputs[0].data.byteOffset, 1)[0];
    if (ms > 0) writeFileSync(${JSON.stringify(marker)}, 'running');
    await new Promise((r) => setTimeout(r, ms));
    const echo = (r) => ({ name: 'OUT', datatype: 'INT32', shape: r.inputs[0].shape, data: r.inputs[0].data });
    return requests.map((r) => ({ outputs: [echo(r)] }));
  }
}
`;

/** An ensemble of two add/sub steps (s1 then s2). */
const ENSEMBLE = `name: "e"
platform: "ensemble"
max_batch_size: 8
input [ { name: "A" data_type: TYPE_INT32 dims: [ 16 ] }, { name: "B" data_type: TYPE_INT32 dims: [ 16 ] } ]
output [ { name: "OUT0" data_type: TYPE_INT32 dims: [ 16 ] }, { name: "OUT1" data_type: TYPE_INT32 dims: [ 16 ] } ]
ensemble_scheduling {
  step [
    {
      model_name: "s1" model_version: -1
      input_map { key: "INPUT0" value: "A" } input_map { key: "INPUT1" value: "B" }
      output_map { key: "OUTPUT0" value: "X" } output_map { key: "OUTPUT1" value: "Y" }
    },
    {
      model_name: "s2" model_version: -1
      input_map { key: "INPUT0" value: "X" } input_map { key: "INPUT1" value: "Y" }
      output_map { key: "OUTPUT0" value: "OUT0" } output_map { key: "OUTPUT1" value: "OUT1" }
    }
  ]
}
`;

const BLS_CONFIG = `name: "bls"
backend: "javascript"
max_batch_size: 8
input [ { name: "A" data_type: TYPE_INT32 dims: [ 16 ] }, { name: "B" data_type: TYPE_INT32 dims: [ 16 ] } ]
output [ { name: "SUM" data_type: TYPE_INT32 dims: [ 16 ] }, { name: "DIFF" data_type: TYPE_INT32 dims: [ 16 ] } ]
instance_group [ { kind: KIND_CPU count: 1 } ]
`;
const BLS_MODEL = `
export default class {
  async initialize(args) { this.infer = args.infer; }
  async execute(requests) {
    return Promise.all(requests.map(async (r) => {
      const [a, b] = r.inputs;
      const inputs = [{ ...a, name: 'INPUT0' }, { ...b, name: 'INPUT1' }];
      const res = await this.infer({ model: 's1', inputs, outputs: ['OUTPUT0', 'OUTPUT1'] });
      return { outputs: [{ ...res.outputs[0], name: 'SUM' }, { ...res.outputs[1], name: 'DIFF' }] };
    }));
  }
}
`;

let repo: TempRepository;
const marker = () => path.join(repo.dir, 'hold-running');

before(() => {
  repo = new TempRepository();
  repo.addSub('warm').addSub('s1').addSub('s2');
  [...BIG, 'z'].forEach((name, i) => {
    repo.config(name, pagedMlpConfig(name));
    repo.file(name, '1/model.onnx', buildMlp(name === 'z' ? Z_LAYERS : BIG_LAYERS, 100 + i).builder.toBytes());
  });
  repo.config('seq', ACCUMULATOR).file('seq', '1/model.onnx', buildAccumulatorModel('FP32', 4).toBytes());
  jsModel(repo, 'hold', HOLD_CONFIG, HOLD_MODEL(path.join(repo.dir, 'hold-running')));
  jsModel(repo, 'bls', BLS_CONFIG, BLS_MODEL);
  repo.config('e', ENSEMBLE);
  mkdirSync(path.join(repo.dir, 'e', '1'), { recursive: true });
});

after(() => repo?.cleanup());

// ---- talking to a server ----------------------------------------------------

interface Reply {
  status: number;
  headers: Headers;
  body: unknown;
}

async function http(port: number, method: string, url: string, body?: unknown): Promise<Reply> {
  const res = await fetch(`http://127.0.0.1:${port}${url}`, {
    method,
    headers: body === undefined ? {} : { 'content-type': 'application/json' },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await res.text();
  return { status: res.status, headers: res.headers, body: text === '' ? undefined : (JSON.parse(text) as unknown) };
}

function tensorJson(name: string, datatype: string, shape: number[], data: number[]) {
  return { name, datatype, shape, data };
}

const REQUESTS: Record<string, (extra?: Record<string, unknown>) => unknown> = {
  big: () => ({ inputs: [tensorJson('input', 'FP32', [1, 256], Array.from({ length: 256 }, (_, i) => i / 256))] }),
  addSub: () => ({
    inputs: [
      tensorJson('A', 'INT32', [1, 16], Array.from({ length: 16 }, (_, i) => i)),
      tensorJson('B', 'INT32', [1, 16], Array.from({ length: 16 }, () => 1)),
    ],
  }),
  step: () => ({
    inputs: [
      tensorJson('INPUT0', 'INT32', [1, 16], Array.from({ length: 16 }, (_, i) => i)),
      tensorJson('INPUT1', 'INT32', [1, 16], Array.from({ length: 16 }, () => 1)),
    ],
  }),
  hold: (extra) => ({ inputs: [tensorJson('IN', 'INT32', [1], [Number(extra?.['ms'] ?? 0)])] }),
  seq: (extra) => ({ parameters: extra, inputs: [tensorJson('INPUT', 'FP32', [1, 4], [1, 2, 3, 4])] }),
};

function requestFor(model: string, extra?: Record<string, unknown>): unknown {
  if (BIG.includes(model)) return REQUESTS['big']!();
  if (model === 'e' || model === 'bls') return REQUESTS['addSub']!();
  if (model === 'hold' || model === 'seq') return REQUESTS[model]!(extra);
  return REQUESTS['step']!();
}

async function infer(port: number, model: string, extra?: Record<string, unknown>): Promise<Reply> {
  return http(port, 'POST', `/v2/models/${model}/infer`, requestFor(model, extra));
}

async function inferOk(port: number, model: string, extra?: Record<string, unknown>): Promise<void> {
  const r = await infer(port, model, extra);
  assert.equal(r.status, 200, `${model}: ${JSON.stringify(r.body)}`);
}

interface IndexEntry {
  name: string;
  version?: string;
  state?: string;
  reason?: string;
  memory_bytes?: number;
}

async function index(port: number): Promise<Map<string, IndexEntry>> {
  const r = await http(port, 'POST', '/v2/repository/index', {});
  assert.equal(r.status, 200);
  return new Map((r.body as IndexEntry[]).map((e) => [e.name, e]));
}

async function states(port: number, models: readonly string[]): Promise<Record<string, string>> {
  const idx = await index(port);
  const out: Record<string, string> = {};
  for (const m of models) {
    const e = idx.get(m);
    if (e?.state === undefined) out[m] = 'never loaded';
    else out[m] = e.state === 'UNAVAILABLE' ? `UNAVAILABLE (${e.reason})` : e.state;
  }
  return out;
}

async function metric(port: number, name: string, labels = ''): Promise<number | undefined> {
  const text = await (await fetch(`http://127.0.0.1:${port}/metrics`)).text();
  const line = text.split('\n').find((l) => l.startsWith(`${name}${labels === '' ? ' ' : `{${labels}} `}`));
  return line === undefined ? undefined : Number(line.slice(line.lastIndexOf(' ') + 1));
}

const InferenceClient = grpc.makeGenericClientConstructor(inferenceServiceDefinition, 'GRPCInferenceService');

function grpcClient(t: { after(fn: () => void): void }, port: number): grpc.Client {
  const client = new InferenceClient(`127.0.0.1:${port}`, grpc.credentials.createInsecure());
  t.after(() => client.close());
  return client;
}

function grpcInfer(client: grpc.Client, model: string): Promise<unknown> {
  const input = new Float32Array(256).fill(0.5);
  const request = create(ModelInferRequestSchema, {
    modelName: model,
    inputs: [{ name: 'input', datatype: 'FP32', shape: [1n, 256n] }],
    rawInputContents: [new Uint8Array(input.buffer)],
  });
  return unary(client, 'ModelInfer', request);
}

interface Running {
  proc: ServeProcess;
  ports: ServePorts;
}

async function serve(t: { after(fn: () => Promise<void>): void }, args: readonly string[]): Promise<Running> {
  const proc = startServe([
    `--model-repository=${repo.dir}`,
    '--model-control-mode=explicit',
    ...LOOPBACK_PORTS,
    ...args,
  ]);
  t.after(() => proc.stop());
  return { proc, ports: await proc.ports };
}

const EVICTED = `UNAVAILABLE (unloaded: memory budget)`;

/** The calibrated and the current figures, for a failure's message. */
async function figures(port: number): Promise<string> {
  const now = Object.fromEntries([...(await index(port))].map(([k, e]) => [k, e.memory_bytes]));
  return JSON.stringify({ calibrated: cost, now });
}

/** The models' states are `expected` (the figures in the message when not). */
async function expectStates(port: number, expected: Record<string, string>): Promise<void> {
  assert.deepEqual(await states(port, Object.keys(expected)), expected, await figures(port));
}

// ---- calibration ------------------------------------------------------------

/** Bytes each model measured on a server with room for all, loaded in the scenarios' order. */
let cost: Record<string, number>;
let bigCost: number;
/** The most a calibration load took above what it kept (the server's peak resident memory less its resident memory). */
let loadPeak = 0;

/** The peak resident memory (VmHWM) of a process, in bytes; the pager starts a new peak before each load. */
function peakRss(pid: number): number {
  return Number(/^VmHWM:\s+(\d+)\s+kB/m.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))![1]) * 1024;
}

before(async () => {
  const proc = startServe([
    `--model-repository=${repo.dir}`,
    '--model-control-mode=explicit',
    '--load-model=warm',
    '--load-model=z',
    ...LOOPBACK_PORTS,
    '--model-memory-budget=64GiB',
  ]);
  try {
    const { http: port } = await proc.ports;
    const whole = { sequence_id: 1, sequence_start: true, sequence_end: true };
    for (const m of [...BIG, 'hold', 'seq', 'e']) {
      await inferOk(port, m, m === 'seq' ? whole : undefined);
      loadPeak = Math.max(loadPeak, peakRss(proc.pid) - processRssBytes(proc.pid)!);
    }
    const idx = await index(port);
    cost = {};
    for (const [name, e] of idx) if (e.memory_bytes !== undefined) cost[name] = e.memory_bytes;
    bigCost = Math.max(...BIG.map((m) => cost[m]!));
  } finally {
    await proc.stop();
  }
});

/** Start-up flags of a scenario: `warm` and `z` loaded first and pinned. */
const PINNED_FIRST = ['--load-model=warm', '--load-model=z', '--model-pin=warm', '--model-pin=z'];

/**
 * A budget that holds the pinned `warm` and `z` and `fit`, with half of
 * `next` to spare, and room for a load's peak (`peak`): loading `next` as
 * well needs room (each figure as the calibration server measured it,
 * loaded in the same place in the order). Without room for the peak, one
 * unloaded model could not make room for both and two would go.
 */
function budgetFor(fit: readonly string[], next: string, peak = true): string {
  const figures = [...FIRST, ...fit].reduce((s, m) => s + cost[m]!, 0);
  return String(Math.round(figures + cost[next]! / 2 + (peak ? loadPeak : 0)));
}

// ---- scenarios --------------------------------------------------------------

test('each load is measured: memory_bytes in the index and the metrics; the sum follows the RSS', async (t) => {
  const { proc, ports } = await serve(t, ['--load-model=warm', '--model-memory-budget=64GiB']);
  const before = processRssBytes(proc.pid)!;
  for (const m of BIG) await inferOk(ports.http, m);
  const grown = processRssBytes(proc.pid)! - before;
  const idx = await index(ports.http);
  let sum = 0;
  for (const m of BIG) {
    const bytes = idx.get(m)!.memory_bytes!;
    // Three copies of ~41 MB of weights cannot cost less than their files.
    assert.ok(bytes > 41e6, `${m}: ${bytes}`);
    assert.equal(await metric(ports.metrics, 'nereid_model_memory_bytes', `model="${m}",version="1"`), bytes);
    sum += bytes;
  }
  // What the loads added to the process, as its own status file says, against the sum of the measurements.
  const near = Math.abs(sum - grown) < 0.2 * grown + 16e6;
  assert.ok(near, `measured ${sum} bytes for the three loads, the process grew ${grown}`);
  assert.equal(await metric(ports.metrics, 'nereid_model_memory_used_bytes'), sum + idx.get('warm')!.memory_bytes!);
  assert.equal(await metric(ports.metrics, 'nereid_model_memory_budget_bytes'), 64 * 2 ** 30);
  assert.equal(await metric(ports.metrics, 'nereid_model_evictions_total', 'model="a"'), undefined);
});

test('idle models go least frequently used first; an evicted one is UNAVAILABLE until requested', async (t) => {
  const { ports } = await serve(t, [...PINNED_FIRST, `--model-memory-budget=${budgetFor(['a', 'b'], 'c')}`]);
  await expectStates(ports.http, { a: 'never loaded', b: 'never loaded', c: 'never loaded' });
  await inferOk(ports.http, 'a');
  await inferOk(ports.http, 'b');
  await inferOk(ports.http, 'a');
  // b has been asked for once, a twice: c takes b's place.
  await inferOk(ports.http, 'c');
  await expectStates(ports.http, { a: 'READY', b: EVICTED, c: 'READY' });
  assert.equal(await metric(ports.metrics, 'nereid_model_evictions_total', 'model="b"'), 1);
  // Readiness: the server stays ready, the evicted model's own endpoint says not ready.
  assert.equal((await http(ports.http, 'GET', '/v2/health/ready')).status, 200);
  assert.notEqual((await http(ports.http, 'GET', '/v2/models/b/ready')).status, 200);
  assert.equal((await http(ports.http, 'GET', '/v2/models/a/ready')).status, 200);
  // b again (its second request): c, asked for once, goes, although a was used before it.
  await inferOk(ports.http, 'b');
  await expectStates(ports.http, { a: 'READY', b: 'READY', c: EVICTED });
  // c again (its second): a and b were asked for twice too, a longer ago, so its requests weigh less.
  await inferOk(ports.http, 'c');
  await expectStates(ports.http, { a: EVICTED, b: 'READY', c: 'READY' });
  const used = (await metric(ports.metrics, 'nereid_model_memory_used_bytes'))!;
  assert.ok(used <= Number(budgetFor(['a', 'b'], 'c')), `${used} used`);
  assert.equal((await index(ports.http)).get('warm')!.state, 'READY');
});

test('--model-memory-history: the scores outlive a restart, and the start keeps the most requested', async (t) => {
  const file = path.join(repo.dir, '..', `paging-history-${process.pid}.json`);
  t.after(() => rmSync(file, { force: true }));
  const budget = `--model-memory-budget=${budgetFor(['a', 'b'], 'c')}`;
  const first = await serve(t, [...PINNED_FIRST, budget, `--model-memory-history=${file}`]);
  // a is asked for three times, b twice, c once.
  for (const m of ['a', 'b', 'a', 'c', 'b', 'a']) await inferOk(first.ports.http, m);
  // A graceful stop (SIGTERM, as Kubernetes stops a pod) writes the scores.
  first.proc.signal('SIGTERM');
  assert.equal(await first.proc.exit, 0, first.proc.stderr());
  const scores = (JSON.parse(readFileSync(file, 'utf8')) as { scores: Record<string, number> }).scores;
  assert.deepEqual(Object.keys(scores), ['a', 'b', 'c'], JSON.stringify(scores));
  assert.ok(scores['a']! > 2.99 && scores['c']! < 1.01, JSON.stringify(scores));

  // a, b and c do not all fit: with the scores they load one at a time after the pinned models, least requested
  // first, so c goes when a loads. (Without scores they load together, and which goes depends on their timing.)
  const start = ['--load-model=a', '--load-model=b', '--load-model=c'];
  const second = await serve(t, [...PINNED_FIRST, ...start, budget, `--model-memory-history=${file}`]);
  await expectStates(second.ports.http, { a: 'READY', b: 'READY', c: EVICTED });
  // c's request unloads b, with fewer requests than a before the restart.
  await inferOk(second.ports.http, 'c');
  await expectStates(second.ports.http, { a: 'READY', b: EVICTED, c: 'READY' });
});

test('concurrent requests to an evicted model load it once, over HTTP and gRPC alike', async (t) => {
  const { proc, ports } = await serve(t, [...PINNED_FIRST, `--model-memory-budget=${budgetFor(['a'], 'b')}`]);
  await inferOk(ports.http, 'a');
  await inferOk(ports.http, 'b');
  await expectStates(ports.http, { a: EVICTED, b: 'READY' });
  const client = grpcClient(t, ports.grpc);
  const waitsBefore = (await metric(ports.metrics, 'nereid_model_load_wait_seconds_count'))!;
  const loadsOfA = () =>
    proc.stderr().split('\n').filter((l) => l.includes('"model":"a"') && l.includes('model version ready')).length;
  const loadsBefore = loadsOfA();
  const replies = await Promise.all([
    ...Array.from({ length: 6 }, () => infer(ports.http, 'a')),
    grpcInfer(client, 'a'),
    grpcInfer(client, 'a'),
  ]);
  for (const r of replies.slice(0, 6)) assert.equal((r as Reply).status, 200, JSON.stringify((r as Reply).body));
  const loads = loadsOfA();
  assert.equal(loads - loadsBefore, 1, 'a loaded once for eight requests');
  // Those that arrived while it loaded waited (a gRPC call still connecting may arrive after).
  const waited = (await metric(ports.metrics, 'nereid_model_load_wait_seconds_count'))! - waitsBefore;
  assert.ok(waited >= 1 && waited <= 8, `${waited} waits`);
  await expectStates(ports.http, { a: 'READY', b: EVICTED });
  // The gRPC index carries the same figure.
  const grpcIndex = await unary<RepositoryIndexResponse>(client, 'RepositoryIndex', {});
  const a = grpcIndex.models.find((m) => m.name === 'a')!;
  assert.equal(Number(a.memoryBytes), (await index(ports.http)).get('a')!.memory_bytes);
  assert.equal(grpcIndex.models.find((m) => m.name === 'b')!.reason, 'unloaded: memory budget');
});

test('pinned models (flag and parameter) stay; a load with no room left answers 503 with the sizes', async (t) => {
  const pinnedRepo = new TempRepository();
  t.after(() => pinnedRepo.cleanup());
  for (const [i, name] of [...BIG, 'z'].entries()) {
    const pinned = 'parameters { key: "nereid.pinned" value: { string_value: "true" } }\n';
    pinnedRepo.config(name, pagedMlpConfig(name, name === 'b' ? pinned : ''));
    pinnedRepo.file(name, '1/model.onnx', buildMlp(name === 'z' ? Z_LAYERS : BIG_LAYERS, 100 + i).builder.toBytes());
  }
  pinnedRepo.addSub('warm');
  const proc = startServe([
    `--model-repository=${pinnedRepo.dir}`,
    '--model-control-mode=explicit',
    ...LOOPBACK_PORTS,
    ...PINNED_FIRST,
    '--model-pin=a',
    `--model-memory-budget=${budgetFor(['a', 'b'], 'c', false)}`,
  ]);
  t.after(() => proc.stop());
  const { http: port, metrics } = await proc.ports;
  await inferOk(port, 'a');
  await inferOk(port, 'b');
  const r = await infer(port, 'c');
  assert.equal(r.status, 503, JSON.stringify(r.body));
  assert.match(
    (r.body as { error: string }).error,
    /model 'c' needs [\d.]+ MiB but the memory budget of [\d.]+ MiB has [\d.]+ MiB free/,
  );
  const now = await states(port, BIG);
  assert.deepEqual([now['a'], now['b']], ['READY', 'READY']);
  assert.match(now['c']!, /^UNAVAILABLE \(model 'c' needs/);
  assert.equal(await metric(metrics, 'nereid_model_evictions_total', 'model="a"'), undefined);
  assert.equal(await metric(metrics, 'nereid_model_evictions_total', 'model="b"'), undefined);
});

test('a model alone larger than the budget fails its load with its size and the budget', async (t) => {
  const { ports } = await serve(t, [`--model-memory-budget=${Math.round(bigCost / 3)}`]);
  const r = await http(ports.http, 'POST', '/v2/repository/models/a/load');
  assert.equal(r.status, 400);
  assert.match(
    (r.body as { error: string }).error,
    new RegExp(
      "load failed for model 'a': version 1 is at UNAVAILABLE state: model 'a' needs [\\d.]+ MiB of memory " +
        '\\(measured at load\\), more than the whole memory budget of [\\d.]+ MiB',
    ),
  );
  assert.equal((await index(ports.http)).get('a')!.state, 'UNAVAILABLE');
});

test('a model with a request running or a sequence open is never evicted, even when the coldest', async (t) => {
  const { ports } = await serve(t, [...PINNED_FIRST, `--model-memory-budget=${budgetFor(['hold', 'seq', 'a'], 'b')}`]);
  await inferOk(ports.http, 'seq', { sequence_id: 7, sequence_start: true });
  await inferOk(ports.http, 'hold', { ms: 0 });
  await inferOk(ports.http, 'a');
  // hold runs a long request; seq (asked for once) is the coldest, hold and a (twice each) are hotter.
  const long = infer(ports.http, 'hold', { ms: 4000 });
  while (!existsSync(marker())) await new Promise((r) => setTimeout(r, 20));
  await inferOk(ports.http, 'a');
  await inferOk(ports.http, 'b');
  await expectStates(ports.http, { seq: 'READY', hold: 'READY', a: EVICTED, b: 'READY' });
  assert.equal((await long).status, 200);
  // The sequence ends: seq is idle and the coldest (its first request is the oldest), and goes first.
  await inferOk(ports.http, 'seq', { sequence_id: 7, sequence_end: true });
  await inferOk(ports.http, 'hold', { ms: 0 });
  await inferOk(ports.http, 'b');
  await inferOk(ports.http, 'a');
  assert.equal((await states(ports.http, ['seq']))['seq'], EVICTED);
});

test("an ensemble keeps its steps loaded while it serves, and loads them with itself on demand", async (t) => {
  const budget = budgetFor(['s1', 's2', 'a'], 'b');
  const { ports } = await serve(t, [...PINNED_FIRST, '--model-pin=e', `--model-memory-budget=${budget}`]);
  // Never loaded (explicit mode): the ensemble's request loads it and both steps.
  const r = await infer(ports.http, 'e');
  assert.equal(r.status, 200, JSON.stringify(r.body));
  const out = (r.body as { outputs: Array<{ name: string; data: number[] }> }).outputs;
  // (A + B) + (A - B) = 2A
  assert.deepEqual(out.find((o) => o.name === 'OUT0')!.data, Array.from({ length: 16 }, (_, i) => 2 * i));
  await inferOk(ports.http, 'a');
  // s1 and s2 were used before a, but serve a loaded ensemble: a goes.
  await inferOk(ports.http, 'b');
  await expectStates(ports.http, { e: 'READY', s1: 'READY', s2: 'READY', a: EVICTED, b: 'READY' });
});

test('a model called from another model (BLS) loads on demand like any request', async (t) => {
  const { ports } = await serve(t, ['--model-memory-budget=64GiB']);
  await expectStates(ports.http, { bls: 'never loaded', s1: 'never loaded' });
  const r = await infer(ports.http, 'bls');
  assert.equal(r.status, 200, JSON.stringify(r.body));
  await expectStates(ports.http, { bls: 'READY', s1: 'READY' });
});

test('past --model-load-wait-ms: 503 (gRPC UNAVAILABLE) with Retry-After while the load goes on', async (t) => {
  const { ports } = await serve(t, ['--model-memory-budget=64GiB', '--model-load-wait-ms=1']);
  const r = await infer(ports.http, 'a');
  assert.equal(r.status, 503, JSON.stringify(r.body));
  assert.equal(r.headers.get('retry-after'), '1');
  assert.match(
    (r.body as { error: string }).error,
    /model 'a' is loading on demand and was not ready within --model-load-wait-ms \(1 ms\)/,
  );
  const err = await callError(grpcInfer(grpcClient(t, ports.grpc), 'b'));
  assert.equal(err.code, grpc.status.UNAVAILABLE);
  assert.deepEqual(err.metadata.get('retry-after'), ['1']);
  // The loads went on: both serve once they are done.
  for (const m of ['a', 'b']) {
    while ((await states(ports.http, [m]))[m] !== 'READY') await new Promise((res) => setTimeout(res, 50));
    await inferOk(ports.http, m);
  }
  assert.equal(await metric(ports.metrics, 'nereid_model_load_wait_seconds_count'), 2);
});

test('a bad nereid.pinned value fails the load, naming the parameter and the value', async (t) => {
  const badRepo = new TempRepository().addSub(
    'm',
    [1],
    `name: "m"
platform: "onnxruntime_onnx"
max_batch_size: 8
input [
  { name: "INPUT0" data_type: TYPE_INT32 dims: [ 16 ] },
  { name: "INPUT1" data_type: TYPE_INT32 dims: [ 16 ] }
]
output [
  { name: "OUTPUT0" data_type: TYPE_INT32 dims: [ 16 ] },
  { name: "OUTPUT1" data_type: TYPE_INT32 dims: [ 16 ] }
]
parameters { key: "nereid.pinned" value: { string_value: "yes" } }
`,
  );
  t.after(() => badRepo.cleanup());
  const proc = startServe([
    `--model-repository=${badRepo.dir}`,
    '--model-control-mode=explicit',
    ...LOOPBACK_PORTS,
    '--model-memory-budget=1GiB',
  ]);
  t.after(() => proc.stop());
  const { http: port } = await proc.ports;
  const r = await http(port, 'POST', '/v2/repository/models/m/load');
  assert.equal(r.status, 400);
  assert.match((r.body as { error: string }).error, /parameter 'nereid.pinned' must be "true" or "false", got "yes"/);
});

test("a Python model's figure includes its instance process's resident memory", async (t) => {
  const pyRepo = new TempRepository();
  t.after(() => pyRepo.cleanup());
  pyRepo.config(
    'py',
    `name: "py"
backend: "python"
max_batch_size: 0
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] } ]
instance_group [ { kind: KIND_CPU count: 1 } ]
`,
  );
  pyRepo.file('py', '1/model.py', readFileSync(path.join(fixtureDir('identity'), 'model.py')));
  const proc = startServe([
    `--model-repository=${pyRepo.dir}`,
    '--model-control-mode=explicit',
    ...LOOPBACK_PORTS,
    '--model-memory-budget=64GiB',
    `--backend-config=python,python-executable=${PYTHON}`,
  ]);
  t.after(() => proc.stop());
  const { http: port } = await proc.ports;
  assert.equal((await http(port, 'POST', '/v2/repository/models/py/load')).status, 200);
  const children = readFileSync(`/proc/${proc.pid}/task/${proc.pid}/children`, 'utf8').trim().split(/\s+/).map(Number);
  const pythonRss = children.map((pid) => processRssBytes(pid) ?? 0).reduce((a, b) => Math.max(a, b), 0);
  // The interpreter with numpy holds well over ten megabytes: the figure must include it.
  assert.ok(pythonRss > 10e6, `python child RSS ${pythonRss}`);
  const bytes = (await index(port)).get('py')!.memory_bytes!;
  assert.ok(bytes >= pythonRss, `memory_bytes ${bytes} < the instance process's RSS ${pythonRss}`);
});
