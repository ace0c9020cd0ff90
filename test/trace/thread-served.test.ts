/**
 * Traced requests served by the frontend threads (docs/tracing.md, "Frontend threads"): a real server with
 * `--frontend-threads=2`, HTTP and gRPC infer requests traced to a Triton trace file and over OTLP to a real
 * receiver, each served on a thread (the main thread's frontends never see them) with its frontend timestamps
 * taken there, in Triton's order around the core's.
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import * as grpc from '@grpc/grpc-js';
import { create } from '@bufbuild/protobuf';
import {
  InferParameterSchema,
  type ModelInferRequest,
  ModelInferRequestSchema,
  type ModelInferResponse,
} from '../../src/gen/grpc_service_pb.js';
import type { RunningServer } from '../../src/cli/serve.js';
import { inferenceServiceDefinition } from '../../src/frontends/grpc/index.js';
import { serveInProcess } from '../helpers/in-process-server.js';
import { TempRepository } from '../helpers/repository.js';
import { A, B, CORE_ORDER, inferBody, PIPE_ENSEMBLE } from '../helpers/trace-models.js';
import { OtlpReceiver, type ReceivedSpan } from '../helpers/otlp-receiver.js';
import { type MergedTrace, type TraceFileEntry, mergeTraces, summarize } from '../helpers/trace-summary.js';
import { call, int32Bytes } from '../frontends/http/helpers.js';

const HTTP = ['HTTP_RECV_START', 'HTTP_RECV_END', 'HTTP_SEND_START', 'HTTP_SEND_END'];
const GRPC = ['GRPC_WAITREAD_START', 'GRPC_WAITREAD_END', 'GRPC_SEND_START', 'GRPC_SEND_END'];

function repository(): TempRepository {
  return new TempRepository().addSub('simple').config('pipe', PIPE_ENSEMBLE).file('pipe', '1/.keep', '');
}

/**
 * A server on two frontend threads per protocol, counting the infer requests its main-thread frontends serve: they
 * ask the server for admission first (HTTP and gRPC), which a request a thread serves never does on the main thread.
 */
async function serve(
  repo: TempRepository,
  flags: string[],
  threads = 2,
): Promise<{ running: RunningServer; onMain: () => number }> {
  const running = await serveInProcess(repo.dir, [
    `--frontend-threads=${threads}`,
    '--trace-config=level=TIMESTAMPS',
    '--trace-config=rate=1',
    ...flags,
  ]);
  const server = running.server;
  const admission = server.admissionError.bind(server);
  let onMain = 0;
  server.admissionError = (...args: Parameters<typeof admission>) => {
    onMain += 1;
    return admission(...args);
  };
  return { running, onMain: () => onMain };
}

function grpcInfer(
  port: number,
  id: string,
  metadata = new grpc.Metadata(),
  parameters: ModelInferRequest['parameters'] = {},
): Promise<ModelInferResponse> {
  const Client = grpc.makeGenericClientConstructor(inferenceServiceDefinition, 'GRPCInferenceService');
  const client = new Client(`127.0.0.1:${port}`, grpc.credentials.createInsecure());
  const request = create(ModelInferRequestSchema, {
    modelName: 'simple',
    id,
    inputs: [
      { name: 'INPUT0', datatype: 'INT32', shape: [1n, 16n] },
      { name: 'INPUT1', datatype: 'INT32', shape: [1n, 16n] },
    ],
    rawInputContents: [int32Bytes(A), int32Bytes(B)],
    parameters,
  });
  return new Promise<ModelInferResponse>((resolve, reject) =>
    (client as unknown as { ModelInfer: (...args: unknown[]) => void }).ModelInfer(
      request,
      metadata,
      (err: Error | null, res: ModelInferResponse) => (err ? reject(err) : resolve(res)),
    ),
  ).finally(() => client.close());
}

/** The trace's names in file order are exactly `names`, and their times never go back. */
function assertStamps(t: MergedTrace, names: readonly string[]): void {
  assert.deepEqual(t.order, names, `trace ${t.id} (${t.model_name})`);
  let last = -Infinity;
  for (const name of names) {
    const ns = t.timestamps.get(name)!;
    assert.ok(ns >= last, `trace ${t.id}: ${name} comes before the timestamp preceding it`);
    last = ns;
  }
}

describe('a trace file, requests served on frontend threads', () => {
  const dir = mkdtempSync(path.join(tmpdir(), 'nereid-thread-trace-'));
  const file = path.join(dir, 'trace.json');
  const repo = repository();
  let entries: TraceFileEntry[];
  let onMain = -1;

  before(async () => {
    const served = await serve(repo, [`--trace-config=triton,file=${file}`]);
    const { running } = served;
    try {
      const http = running.ports.http!;
      assert.equal((await call(http, 'POST', '/v2/models/simple/infer', { body: inferBody('http-1') })).status, 200);
      assert.equal((await call(http, 'POST', '/v2/models/pipe/infer', { body: inferBody('ens-1') })).status, 200);
      assert.equal((await grpcInfer(running.ports.grpc!, 'grpc-1')).id, 'grpc-1');
      onMain = served.onMain();
    } finally {
      await running.shutdown();
    }
    entries = JSON.parse(readFileSync(file, 'utf8')) as TraceFileEntry[];
  });

  after(() => {
    repo.cleanup();
    rmSync(dir, { recursive: true, force: true });
  });

  test('every request was served on a thread', () => {
    assert.equal(onMain, 0, 'no infer request reached the main thread\'s frontends');
  });

  test('HTTP: the thread\'s receive and send stamps around the core\'s, in Triton\'s order', () => {
    const traces = mergeTraces(entries, 'http');
    const [t] = [...traces.values()].filter((x) => x.request_id === 'http-1');
    assert.ok(t, 'the HTTP request is traced');
    assert.equal(t.model_name, 'simple');
    assert.equal(t.model_version, 1);
    assert.equal(t.parent_id, undefined);
    assertStamps(t, [HTTP[0]!, HTTP[1]!, ...CORE_ORDER, HTTP[2]!, HTTP[3]!]);
    // Triton's summary script reads it.
    assert.ok(summarize(traces, 'http').get('simple (1)')!.spans.get('COMPUTE_INFER')! >= 0);
  });

  test('an ensemble: its steps\' traces name the ensemble\'s as parent_id', () => {
    const traces = [...mergeTraces(entries, 'http').values()];
    const ensemble = traces.find((t) => t.model_name === 'pipe');
    assert.ok(ensemble);
    assert.equal(ensemble.request_id, 'ens-1');
    assert.equal(ensemble.order[0], 'HTTP_RECV_START');
    assert.equal(ensemble.order.at(-1), 'HTTP_SEND_END');
    const steps = traces.filter((t) => t.parent_id === ensemble.id);
    assert.equal(steps.length, 2);
    for (const s of steps) {
      assert.equal(s.model_name, 'simple');
      assertStamps(s, CORE_ORDER);
      assert.ok(s.timestamps.get('REQUEST_START')! >= ensemble.timestamps.get('HTTP_RECV_END')!);
      assert.ok(s.timestamps.get('REQUEST_END')! <= ensemble.timestamps.get('HTTP_SEND_START')!);
    }
    const ids = new Set(entries.map((e) => e.id));
    assert.equal(ids.size, 5, 'one id per trace: three requests, two steps');
  });

  test('gRPC: GRPC_ stamps from the thread around the core\'s', () => {
    const [t] = [...mergeTraces(entries, 'grpc').values()].filter((x) => x.request_id === 'grpc-1');
    assert.ok(t, 'the gRPC request is traced');
    assert.equal(t.model_name, 'simple');
    assertStamps(t, [GRPC[0]!, GRPC[1]!, ...CORE_ORDER, GRPC[2]!, GRPC[3]!]);
  });
});

describe('OTLP spans, requests served on frontend threads', () => {
  const CALLER_TRACE = '0af7651916cd43dd8448eb211c80319c';
  const HTTP_CALLER = 'b7ad6b7169203331';
  const GRPC_CALLER = '1111111111111111';
  const receiver = new OtlpReceiver();
  const repo = repository();
  let spans: ReceivedSpan[];
  let onMain = -1;

  before(async () => {
    await receiver.start();
    // rate=1000: only the requests carrying a context are traced, decided on the main thread.
    const served = await serve(repo, [
      '--trace-config=mode=opentelemetry',
      '--trace-config=rate=1000',
      `--trace-config=opentelemetry,url=${receiver.url}`,
      '--trace-config=opentelemetry,bsp_schedule_delay=50',
    ]);
    const { running } = served;
    try {
      const http = running.ports.http!;
      const traceparent = `00-${CALLER_TRACE}-${HTTP_CALLER}-01`;
      const joined = await call(http, 'POST', '/v2/models/simple/infer', {
        body: inferBody('http-otel'),
        headers: { traceparent, tracestate: 'vendor=7' },
      });
      assert.equal(joined.status, 200);
      const md = new grpc.Metadata();
      md.set('traceparent', `00-${CALLER_TRACE}-${GRPC_CALLER}-01`);
      assert.equal((await grpcInfer(running.ports.grpc!, 'grpc-otel', md)).id, 'grpc-otel');
      onMain = served.onMain();
    } finally {
      await running.shutdown();
    }
    spans = receiver.spans;
  });

  after(async () => {
    await receiver.stop();
    repo.cleanup();
  });

  test('every request was served on a thread', () => {
    assert.equal(onMain, 0);
  });

  for (const [protocol, caller, events, id] of [
    ['HTTP', HTTP_CALLER, HTTP, 'http-otel'],
    ['gRPC', GRPC_CALLER, GRPC, 'grpc-otel'],
  ] as const) {
    test(`${protocol}: the InferRequest span joins the caller's trace, the thread's stamps its events`, () => {
      const root = spans.find((s) => s.name === 'InferRequest' && s.parentSpanId === caller);
      assert.ok(root, `a root span under the caller's span: ${spans.map((s) => s.name).join(', ')}`);
      assert.equal(root.traceId, CALLER_TRACE);
      assert.equal(root.kind, 2);
      assert.deepEqual(
        root.events.map((e) => e.name),
        events,
      );
      const times = root.events.map((e) => e.ns);
      for (let i = 1; i < times.length; i++) assert.ok(times[i]! >= times[i - 1]!, 'events in time order');
      assert.ok(root.startNs <= times[0]!, 'the span starts at the thread\'s receive start');
      assert.ok(root.endNs >= times.at(-1)!, 'and ends after the reply went out');
      const model = spans.find((s) => s.parentSpanId === root.spanId && s.traceId === CALLER_TRACE);
      assert.equal(model?.name, 'simple');
      assert.equal(model.attributes['triton.request_id'], id);
      assert.ok(model.startNs >= times[1]!, 'the model span begins after the request was read');
      assert.ok(model.endNs <= times[2]!, 'and ends before the reply is sent');
      const compute = spans.find((s) => s.parentSpanId === model.spanId);
      assert.equal(compute?.name, 'compute');
    });
  }
});

describe('a request refused while it is read: traced alike on the main thread and on a thread', () => {
  const orders = new Map<number, { http: string[][]; grpc: string[][] }>();
  const repo = repository();
  const dir = mkdtempSync(path.join(tmpdir(), 'nereid-thread-trace-bad-'));

  before(async () => {
    for (const threads of [1, 2]) {
      const file = path.join(dir, `trace-${threads}.json`);
      const { running } = await serve(repo, [`--trace-config=triton,file=${file}`], threads);
      try {
        const bad = await call(running.ports.http!, 'POST', '/v2/models/simple/infer', { body: '{' });
        assert.match(bad.body.toString(), /failed to parse the request JSON/);
        const priority = create(InferParameterSchema, { parameterChoice: { case: 'int64Param', value: -1n } });
        await assert.rejects(grpcInfer(running.ports.grpc!, 'bad', undefined, { priority }), /priority/);
      } finally {
        await running.shutdown();
      }
      const entries = JSON.parse(readFileSync(file, 'utf8')) as TraceFileEntry[];
      const order = (frontend: 'http' | 'grpc') => [...mergeTraces(entries, frontend).values()].map((t) => t.order);
      orders.set(threads, { http: order('http'), grpc: order('grpc') });
    }
  });

  after(() => {
    repo.cleanup();
    rmSync(dir, { recursive: true, force: true });
  });

  test('HTTP: the receive start and the error reply\'s send stamps', () => {
    assert.deepEqual(orders.get(1)!.http, [['HTTP_RECV_START', 'HTTP_SEND_START', 'HTTP_SEND_END']]);
    assert.deepEqual(orders.get(2)!.http, orders.get(1)!.http);
  });

  test('gRPC: the wait-read start alone', () => {
    assert.deepEqual(orders.get(1)!.grpc, [['GRPC_WAITREAD_START']]);
    assert.deepEqual(orders.get(2)!.grpc, orders.get(1)!.grpc);
  });
});
