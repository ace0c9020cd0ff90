/**
 * Loading on demand under a memory budget through the doors the scenarios of
 * paging.test.ts do not take: a gRPC stream (ModelStreamInfer), HTTP generate
 * and generate_stream, the OpenAI route, warm-up on every on-demand load, and
 * the poll control mode. Real servers (the `nereid serve` start-up, in
 * process), real ONNX, JavaScript and tokenizer models.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import * as grpc from '@grpc/grpc-js';
import { create } from '@bufbuild/protobuf';
import type { RunningServer } from '../../src/cli/serve.js';
import { ModelInferRequestSchema } from '../../src/gen/grpc_service_pb.js';
import { inferenceServiceDefinition } from '../../src/frontends/grpc/index.js';
import { streamAll } from '../frontends/grpc/helpers.js';
import { post } from '../helpers/paging.js';
import { serveInProcess } from '../helpers/in-process-server.js';
import { TempRepository } from '../helpers/repository.js';
import { jsModel } from '../backends/javascript/fixtures.js';
import { OpenAiServer } from '../frontends/openai/helpers.js';
import { LOOPBACK_PORTS, startServe } from '../helpers/serve-process.js';

const EVICTED = 'UNAVAILABLE (unloaded: memory budget)';

/** A `nereid serve` process on loopback ports; its HTTP port. */
async function serveProcess(t: { after(fn: () => Promise<void>): void }, repo: TempRepository, args: string[]) {
  const proc = startServe([`--model-repository=${repo.dir}`, ...LOOPBACK_PORTS, ...args]);
  t.after(() => proc.stop());
  return { proc, port: (await proc.ports).http };
}

/** The figure (memory_bytes) the index shows for a loaded model. */
async function figureOf(port: number, model: string): Promise<number> {
  const index = JSON.parse((await post(port, '/v2/repository/index', {})).text) as Array<{
    name: string;
    memory_bytes?: number;
  }>;
  const bytes = index.find((e) => e.name === model)?.memory_bytes;
  assert.ok(bytes !== undefined && bytes > 40 * 2 ** 20, `${model}: ${bytes}`);
  return bytes;
}

async function serve(
  t: { after(fn: () => Promise<void>): void },
  repo: TempRepository,
  args: readonly string[],
): Promise<RunningServer> {
  const running = await serveInProcess(repo.dir, args);
  t.after(() => running.shutdown());
  return running;
}

/** Each model's state as the repository index shows it ('never loaded' without one). */
async function states(port: number, models: readonly string[]): Promise<Record<string, string>> {
  const r = await post(port, '/v2/repository/index', {});
  assert.equal(r.status, 200, r.text);
  const index = JSON.parse(r.text) as Array<{ name: string; state?: string; reason?: string }>;
  const out: Record<string, string> = {};
  for (const m of models) {
    const e = index.find((x) => x.name === m);
    if (e?.state === undefined) out[m] = 'never loaded';
    else out[m] = e.state === 'UNAVAILABLE' ? `UNAVAILABLE (${e.reason})` : e.state;
  }
  return out;
}

const A = Array.from({ length: 16 }, (_, i) => i);
const B = Array.from({ length: 16 }, () => 3);
const int32Bytes = (values: readonly number[]) => new Uint8Array(Int32Array.from(values).buffer);

test('a gRPC stream, generate and generate_stream each load a model on demand and get its answer', async (t) => {
  const repo = new TempRepository().addSub('streamed').addSub('generated').addSub('sse');
  t.after(() => repo.cleanup());
  const running = await serve(t, repo, ['--model-control-mode=explicit', '--model-memory-budget=64GiB']);
  const port = running.ports.http!;
  assert.deepEqual(await states(port, ['streamed', 'generated', 'sse']), {
    streamed: 'never loaded',
    generated: 'never loaded',
    sse: 'never loaded',
  });

  const Client = grpc.makeGenericClientConstructor(inferenceServiceDefinition, 'GRPCInferenceService');
  const client = new Client(`127.0.0.1:${running.ports.grpc!}`, grpc.credentials.createInsecure());
  t.after(() => client.close());
  const streamed = await streamAll(client, [
    create(ModelInferRequestSchema, {
      modelName: 'streamed',
      id: 'on-demand',
      inputs: [
        { name: 'INPUT0', datatype: 'INT32', shape: [1n, 16n] },
        { name: 'INPUT1', datatype: 'INT32', shape: [1n, 16n] },
      ],
      rawInputContents: [int32Bytes(A), int32Bytes(B)],
    }),
  ]);
  assert.equal(streamed.length, 1);
  assert.equal(streamed[0]!.errorMessage, '');
  const response = streamed[0]!.inferResponse!;
  assert.equal(response.id, 'on-demand');
  const sum = response.outputs.findIndex((o) => o.name === 'OUTPUT0');
  const raw = response.rawOutputContents[sum]!;
  assert.deepEqual(
    [...new Int32Array(raw.buffer.slice(raw.byteOffset, raw.byteOffset + raw.byteLength))],
    A.map((a) => a + 3),
  );

  const generated = await post(port, '/v2/models/generated/generate', { INPUT0: A, INPUT1: B });
  assert.equal(generated.status, 200, generated.text);
  assert.deepEqual((JSON.parse(generated.text) as { OUTPUT1: number[] }).OUTPUT1, A.map((a) => a - 3));

  const sse = await post(port, '/v2/models/sse/generate_stream', { INPUT0: A, INPUT1: B });
  assert.equal(sse.status, 200, sse.text);
  const events = sse.text.split('\n').filter((l) => l.startsWith('data: '));
  assert.equal(events.length, 1, sse.text);
  assert.deepEqual((JSON.parse(events[0]!.slice(6)) as { OUTPUT0: number[] }).OUTPUT0, A.map((a) => a + 3));

  assert.deepEqual(await states(port, ['streamed', 'generated', 'sse']), {
    streamed: 'READY',
    generated: 'READY',
    sse: 'READY',
  });
});

test('the OpenAI route loads its model on demand', async (t) => {
  const server = await OpenAiServer.start({ args: ['--model-control-mode=explicit', '--model-memory-budget=64GiB'] });
  t.after(() => server.stop());
  assert.deepEqual(await states(server.httpPort, ['text_embedder', 'tiny_llm']), {
    text_embedder: 'never loaded',
    tiny_llm: 'never loaded',
  });
  const embedded = await server.client().embeddings.create({ model: 'text_embedder', input: ['paging on demand'] });
  assert.equal(embedded.data.length, 1);
  assert.ok(embedded.data[0]!.embedding.length > 0);
  const completion = await server.client().completions.create({ model: 'tiny_llm', prompt: 'hello', max_tokens: 3 });
  assert.equal(completion.model, 'tiny_llm');
  assert.equal(completion.choices.length, 1);
  assert.deepEqual(await states(server.httpPort, ['text_embedder', 'tiny_llm']), {
    text_embedder: 'READY',
    tiny_llm: 'READY',
  });
});

/** A javascript model that appends a line to `log` for each request it executes (warm-up samples included). */
const LOGGING_CONFIG = (name: string) => `name: "${name}"
backend: "javascript"
max_batch_size: 0
input [ { name: "IN" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
instance_group [ { kind: KIND_CPU count: 1 } ]
model_warmup [
  { name: "zeros" batch_size: 1 inputs { key: "IN" value: { data_type: TYPE_INT32 dims: [ 1 ] zero_data: true } } }
]
`;
const LOGGING_MODEL = (log: string) => `
import { appendFileSync } from 'node:fs';
export default class {
  async initialize() {
    // 48 MiB written: the model's figure is well above the measuring noise.
    this.ballast = Buffer.alloc(48 * 1024 * 1024, 1);
  }
  async execute(requests) {
    return requests.map((r) => {
      const v = new Int32Array(r.inputs[0].data.buffer, r.inputs[0].data.byteOffset, 1)[0];
      appendFileSync(${JSON.stringify(log)}, v + '\\n');
      return { outputs: [{ name: 'OUT', datatype: 'INT32', shape: r.inputs[0].shape, data: r.inputs[0].data }] };
    });
  }
}
`;

test('warm-up samples run on every on-demand load, the first and one after an eviction', async (t) => {
  const repo = new TempRepository();
  t.after(() => repo.cleanup());
  const logs = { w1: path.join(repo.dir, 'w1.log'), w2: path.join(repo.dir, 'w2.log') };
  for (const [name, log] of Object.entries(logs)) {
    writeFileSync(log, '');
    jsModel(repo, name, LOGGING_CONFIG(name), LOGGING_MODEL(log));
  }
  const lines = (m: keyof typeof logs) => readFileSync(logs[m], 'utf8').split('\n').filter(Boolean);
  // Measure one model, then set a budget that holds one of them and not two.
  const probe = await serveProcess(t, repo, [
    '--model-control-mode=explicit',
    '--load-model=w1',
    '--model-memory-budget=64GiB',
  ]);
  const figure = await figureOf(probe.port, 'w1');
  await probe.proc.stop();
  for (const log of Object.values(logs)) writeFileSync(log, '');
  const budget = `--model-memory-budget=${Math.round(figure * 1.5)}`;
  const { port } = await serveProcess(t, repo, ['--model-control-mode=explicit', budget]);
  const infer = async (m: string, v: number) => {
    const r = await post(port, `/v2/models/${m}/infer`, {
      inputs: [{ name: 'IN', datatype: 'INT32', shape: [1], data: [v] }],
    });
    assert.equal(r.status, 200, r.text);
  };
  await infer('w1', 5);
  // The warm-up sample (zeros) ran before the request.
  assert.deepEqual(lines('w1'), ['0', '5']);
  await infer('w2', 6);
  assert.deepEqual(await states(port, ['w1', 'w2']), { w1: EVICTED, w2: 'READY' });
  assert.deepEqual(lines('w2'), ['0', '6']);
  await infer('w1', 8);
  assert.deepEqual(lines('w1'), ['0', '5', '0', '8']);
});

test('poll mode under a budget: polling leaves an evicted model alone, a request loads it', async (t) => {
  const repo = new TempRepository();
  t.after(() => repo.cleanup());
  const logs = { p1: path.join(repo.dir, 'p1.log'), p2: path.join(repo.dir, 'p2.log') };
  for (const [name, log] of Object.entries(logs)) {
    writeFileSync(log, '');
    jsModel(repo, name, LOGGING_CONFIG(name), LOGGING_MODEL(log));
  }
  const probe = await serveProcess(t, repo, [
    '--model-control-mode=explicit',
    '--load-model=p1',
    '--model-memory-budget=64GiB',
  ]);
  const figure = await figureOf(probe.port, 'p1');
  await probe.proc.stop();
  const { port } = await serveProcess(t, repo, [
    '--model-control-mode=poll',
    '--repository-poll-secs=1',
    `--model-memory-budget=${Math.round(figure * 1.5)}`,
  ]);
  // Both were loaded at start, one after the other: the second made room by unloading the first.
  const atStart = await states(port, ['p1', 'p2']);
  assert.deepEqual(Object.values(atStart).sort(), [EVICTED, 'READY'].sort(), JSON.stringify(atStart));
  const evicted = atStart['p1'] === 'READY' ? 'p2' : 'p1';
  const other = evicted === 'p1' ? 'p2' : 'p1';
  assert.equal((await fetch(`http://127.0.0.1:${port}/v2/health/ready`)).status, 200);
  // Polls go by: the evicted model is not loaded again by them.
  await new Promise((r) => setTimeout(r, 2500));
  assert.deepEqual(await states(port, [evicted, other]), { [evicted]: EVICTED, [other]: 'READY' });
  // A request loads it, unloading the other.
  const r = await post(port, `/v2/models/${evicted}/infer`, {
    inputs: [{ name: 'IN', datatype: 'INT32', shape: [1], data: [4] }],
  });
  assert.equal(r.status, 200, r.text);
  assert.deepEqual(await states(port, [evicted, other]), { [evicted]: 'READY', [other]: EVICTED });
  await new Promise((r) => setTimeout(r, 2500));
  assert.deepEqual(await states(port, [evicted, other]), { [evicted]: 'READY', [other]: EVICTED });
});
