/**
 * Triton-mode trace files from a real server: HTTP and gRPC requests, an
 * ensemble (a trace per step with parent_id), a response-cache hit, a
 * decoupled stream, TENSORS entries and log-frequency rotation; each file
 * read the way Triton's trace_summary.py reads it.
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import * as grpc from '@grpc/grpc-js';
import { create } from '@bufbuild/protobuf';
import {
  ModelInferRequestSchema,
  type ModelInferResponse,
} from '../../src/gen/grpc_service_pb.js';
import type { RunningServer } from '../../src/cli/serve.js';
import { inferenceServiceDefinition } from '../../src/frontends/grpc/index.js';
import { serveInProcess } from '../helpers/in-process-server.js';
import { TempRepository } from '../helpers/repository.js';
import { A, B, CORE_ORDER, inferBody, PIPE_ENSEMBLE } from '../helpers/trace-models.js';
import { decoupledRepository } from '../helpers/decoupled.js';
import { type MergedTrace, type TraceFileEntry, mergeTraces, summarize } from '../helpers/trace-summary.js';
import { streamAll } from '../frontends/grpc/helpers.js';
import { call, int32Bytes, json } from '../frontends/http/helpers.js';

const CACHED = `name: "cached"
platform: "onnxruntime_onnx"
max_batch_size: 8
input [ { name: "INPUT0" data_type: TYPE_INT32 dims: [ 16 ] }, { name: "INPUT1" data_type: TYPE_INT32 dims: [ 16 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_INT32 dims: [ 16 ] }, { name: "OUTPUT1" data_type: TYPE_INT32 dims: [ 16 ]
  } ]
response_cache { enable: true }
`;

function grpcClient(port: number): grpc.Client {
  const Client = grpc.makeGenericClientConstructor(inferenceServiceDefinition, 'GRPCInferenceService');
  return new Client(`127.0.0.1:${port}`, grpc.credentials.createInsecure());
}

function modelInfer(client: grpc.Client, request: unknown): Promise<ModelInferResponse> {
  return new Promise((resolve, reject) => {
    (client as unknown as { ModelInfer: (...args: unknown[]) => void }).ModelInfer(
      request,
      new grpc.Metadata(),
      (err: Error | null, res: ModelInferResponse) => (err ? reject(err) : resolve(res)),
    );
  });
}

function assertOrdered(t: MergedTrace, names: readonly string[]): void {
  let last = -Infinity;
  for (const name of names) {
    const ns = t.timestamps.get(name);
    assert.ok(
      ns !== undefined,
      `trace ${t.id} (${t.model_name}) lacks ${name}: ${[...t.timestamps.keys()].join(', ')}`,
    );
    assert.ok(ns >= last, `trace ${t.id}: ${name} comes before the timestamp preceding it`);
    last = ns;
  }
}

async function serve(repo: TempRepository, traceFlags: string[]): Promise<RunningServer> {
  return serveInProcess(repo.dir, ['--cache-config=local,size=1048576', ...traceFlags]);
}

function readTrace(file: string): TraceFileEntry[] {
  const entries = JSON.parse(readFileSync(file, 'utf8')) as TraceFileEntry[];
  assert.ok(Array.isArray(entries), 'the trace file is one JSON array');
  return entries;
}

describe('Triton trace file', () => {
  const dir = mkdtempSync(path.join(tmpdir(), 'nereid-trace-'));
  const file = path.join(dir, 'trace.json');
  let repo: TempRepository;
  let entries: TraceFileEntry[];

  before(async () => {
    repo = decoupledRepository()
      .addSub('simple')
      .config('pipe', PIPE_ENSEMBLE)
      .file('pipe', '1/.keep', '')
      .addSub('cached', [1], CACHED);
    const running = await serve(repo, [
      `--trace-config=triton,file=${file}`,
      '--trace-config=level=TIMESTAMPS',
      '--trace-config=rate=1',
    ]);
    const http = running.ports.http!;
    try {
      assert.equal((await call(http, 'POST', '/v2/models/simple/infer', { body: inferBody('http-1') })).status, 200);
      assert.equal((await call(http, 'POST', '/v2/models/pipe/infer', { body: inferBody('ens-1') })).status, 200);
      for (let i = 0; i < 2; i++)
        assert.equal(
          (await call(http, 'POST', '/v2/models/cached/infer', { body: inferBody(`cache-${i}`) })).status,
          200,
        );
      const client = grpcClient(running.ports.grpc!);
      try {
        const res = await modelInfer(
          client,
          create(ModelInferRequestSchema, {
            modelName: 'simple',
            id: 'grpc-1',
            inputs: [
              { name: 'INPUT0', datatype: 'INT32', shape: [1n, 16n] },
              { name: 'INPUT1', datatype: 'INT32', shape: [1n, 16n] },
            ],
            rawInputContents: [int32Bytes(A), int32Bytes(B)],
          }),
        );
        assert.equal(res.modelName, 'simple');
        const streamed = await streamAll(client, [
          create(ModelInferRequestSchema, {
            modelName: 'decoupled_repeat',
            id: 'stream-1',
            inputs: [{ name: 'IN', datatype: 'INT32', shape: [3n] }],
            rawInputContents: [int32Bytes([4, 5, 6])],
          }),
        ]);
        assert.equal(streamed.length, 3);
      } finally {
        client.close();
      }
    } finally {
      await running.shutdown();
    }
    entries = readTrace(file);
  });

  after(() => {
    repo.cleanup();
    rmSync(dir, { recursive: true, force: true });
  });

  const byRequestId = (traces: Map<number, MergedTrace>, id: string) =>
    [...traces.values()].filter((t) => t.request_id === id);

  test('an HTTP request: model entry, then the frontend and core timestamps in order', () => {
    const traces = mergeTraces(entries, 'http');
    const [t] = byRequestId(traces, 'http-1');
    assert.ok(t, 'the HTTP request is traced');
    assert.equal(t.model_name, 'simple');
    assert.equal(t.model_version, 1);
    assert.equal(t.parent_id, undefined);
    assertOrdered(t, ['HTTP_RECV_START', 'HTTP_RECV_END', ...CORE_ORDER, 'HTTP_SEND_START', 'HTTP_SEND_END']);
    const summary = summarize(traces, 'http');
    assert.ok(summary.get('simple (1)')!.spans.get('COMPUTE_INFER')! >= 0);
  });

  test('a gRPC request: GRPC_ timestamps around the core ones', () => {
    const traces = mergeTraces(entries, 'grpc');
    const [t] = byRequestId(traces, 'grpc-1');
    assert.ok(t, 'the gRPC request is traced');
    assertOrdered(t, ['GRPC_WAITREAD_START', 'GRPC_WAITREAD_END', ...CORE_ORDER, 'GRPC_SEND_START', 'GRPC_SEND_END']);
    assert.ok(summarize(traces, 'grpc').has('simple (1)'));
  });

  test('an ensemble: one trace per step, each with the ensemble trace as parent_id', () => {
    const traces = mergeTraces(entries, 'http');
    const ensemble = byRequestId(traces, 'ens-1').find((t) => t.model_name === 'pipe');
    assert.ok(ensemble, 'the ensemble request is traced');
    assertOrdered(ensemble, [
      'HTTP_RECV_START',
      'HTTP_RECV_END',
      'REQUEST_START',
      'QUEUE_START',
      'REQUEST_END',
      'HTTP_SEND_START',
      'HTTP_SEND_END',
    ]);
    assert.equal(ensemble.timestamps.has('COMPUTE_START'), false, 'an ensemble computes nothing itself');
    const steps = [...traces.values()].filter((t) => t.parent_id === ensemble.id);
    assert.equal(steps.length, 2);
    for (const step of steps) {
      assert.equal(step.model_name, 'simple');
      assertOrdered(step, CORE_ORDER);
      assert.ok(step.timestamps.get('REQUEST_START')! >= ensemble.timestamps.get('REQUEST_START')!);
      assert.ok(step.timestamps.get('REQUEST_END')! <= ensemble.timestamps.get('REQUEST_END')!);
    }
    const [first, second] = steps.sort(
      (a, b) => a.timestamps.get('REQUEST_START')! - b.timestamps.get('REQUEST_START')!,
    );
    assert.ok(
      second!.timestamps.get('REQUEST_START')! >= first!.timestamps.get('REQUEST_END')!,
      "the second step reads the first one's outputs",
    );
  });

  test('a response-cache hit is traced without an execution', () => {
    const traces = mergeTraces(entries, 'http');
    const [miss] = byRequestId(traces, 'cache-0');
    const [hit] = byRequestId(traces, 'cache-1');
    assert.ok(miss && hit);
    assertOrdered(miss, CORE_ORDER);
    assertOrdered(hit, [
      'HTTP_RECV_START',
      'HTTP_RECV_END',
      'REQUEST_START',
      'REQUEST_END',
      'HTTP_SEND_START',
      'HTTP_SEND_END',
    ]);
    assert.equal(hit.timestamps.has('COMPUTE_START'), false);
  });

  test('a decoupled stream: one trace, a send per response, ' +
    'REQUEST_END after the execution and the last response', () => {
    const traces = mergeTraces(entries, 'grpc');
    const [t] = byRequestId(traces, 'stream-1');
    assert.ok(t, 'the streamed request is traced');
    assert.equal(t.model_name, 'decoupled_repeat');
    assertOrdered(t, ['GRPC_WAITREAD_START', 'GRPC_WAITREAD_END', ...CORE_ORDER]);
    assert.equal(t.order.filter((n) => n === 'GRPC_SEND_START').length, 3, 'each response is sent under the trace');
    assert.equal(t.order.filter((n) => n === 'GRPC_SEND_END').length, 3);
    assert.ok(t.timestamps.get('GRPC_SEND_START')! >= t.timestamps.get('REQUEST_START')!);
  });
});

describe('trace file options', () => {
  test('log-frequency=2 writes file.0 and file.1, each an array of two traces', async () => {
    const dir = mkdtempSync(path.join(tmpdir(), 'nereid-trace-'));
    const file = path.join(dir, 't.json');
    const repo = new TempRepository().addSub('simple');
    try {
      const running = await serve(repo, [
        `--trace-file=${file}`,
        '--trace-level=TIMESTAMPS',
        '--trace-rate=1',
        '--trace-log-frequency=2',
      ]);
      try {
        for (let i = 0; i < 4; i++)
          await call(running.ports.http!, 'POST', '/v2/models/simple/infer', { body: inferBody(`r${i}`) });
      } finally {
        await running.shutdown();
      }
      for (const [index, ids] of [[0, ['r0', 'r1']], [1, ['r2', 'r3']]] as const) {
        const traces = mergeTraces(readTrace(`${file}.${index}`));
        assert.deepEqual([...traces.values()].map((t) => t.request_id), ids);
      }
      assert.equal(existsSync(`${file}.2`), false);
      assert.equal(existsSync(file), false, 'with a log frequency nothing goes to the plain file');
    } finally {
      repo.cleanup();
      rmSync(dir, { recursive: true, force: true });
    }
  });

  test('TENSORS records the queued inputs and the outputs in ' +
    'Triton\'s text form; count bounds the traces', async () => {
    const dir = mkdtempSync(path.join(tmpdir(), 'nereid-trace-'));
    const file = path.join(dir, 't.json');
    const repo = new TempRepository().addSub('simple');
    try {
      const running = await serve(repo, [
        `--trace-config=triton,file=${file}`,
        '--trace-config=level=TENSORS',
        '--trace-config=rate=1',
        '--trace-config=count=1',
      ]);
      try {
        for (let i = 0; i < 3; i++)
          await call(running.ports.http!, 'POST', '/v2/models/simple/infer', { body: inferBody(`t${i}`) });
        const setting = json(await call(running.ports.http!, 'GET', '/v2/trace/setting')) as Record<string, unknown>;
        assert.equal(setting.trace_count, '0', 'the count left to take');
      } finally {
        await running.shutdown();
      }
      const traces = [...mergeTraces(readTrace(`${file}.0`)).values()];
      assert.equal(traces.length, 1);
      const t = traces[0]!;
      assert.equal(t.timestamps.size, 0, 'TENSORS alone records no timestamps');
      const queued = t.tensors.filter((x) => x.activity === 'TENSOR_QUEUE_INPUT');
      assert.deepEqual(
        queued.map((x) => x.tensor),
        [
          { name: 'INPUT0', data: A.join(','), shape: '1,16', dtype: 'INT32' },
          { name: 'INPUT1', data: B.join(','), shape: '1,16', dtype: 'INT32' },
        ],
      );
      const out = t.tensors.filter((x) => x.activity === 'TENSOR_BACKEND_OUTPUT').map((x) => x.tensor);
      assert.deepEqual(out.map((x) => [x.name, x.data]), [
        ['OUTPUT0', A.map((v) => v + 1).join(',')],
        ['OUTPUT1', A.map((v) => v - 1).join(',')],
      ]);
    } finally {
      repo.cleanup();
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
