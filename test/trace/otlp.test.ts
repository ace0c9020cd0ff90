/**
 * OpenTelemetry mode against a real OTLP/HTTP endpoint: the spans Triton
 * makes (InferRequest, one per model, compute), their attributes and
 * events, W3C context joined from HTTP headers and gRPC metadata, ensemble
 * steps nested, the resource; a malformed traceparent counted; a collector
 * that is down or a full queue never failing a request, the drops counted.
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import * as grpc from '@grpc/grpc-js';
import { create } from '@bufbuild/protobuf';
import { ModelInferRequestSchema, type ModelInferResponse } from '../../src/gen/grpc_service_pb.js';
import type { RunningServer } from '../../src/cli/serve.js';
import { inferenceServiceDefinition } from '../../src/frontends/grpc/index.js';
import { serveInProcess } from '../helpers/in-process-server.js';
import { TempRepository } from '../helpers/repository.js';
import { A, B, inferBody, PIPE_ENSEMBLE } from '../helpers/trace-models.js';
import { OtlpReceiver, type ReceivedSpan } from '../helpers/otlp-receiver.js';
import { call, int32Bytes, json } from '../frontends/http/helpers.js';

const BODY = inferBody();
const CALLER_TRACE = '4bf92f3577b34da6a3ce929d0e0e4736';
const CALLER_SPAN = '00f067aa0ba902b7';

async function serve(repo: TempRepository, flags: string[]): Promise<RunningServer> {
  return serveInProcess(repo.dir, [
    '--trace-config=mode=opentelemetry',
    '--trace-config=level=TIMESTAMPS',
    '--trace-config=rate=1',
    ...flags,
  ]);
}

function metric(text: string, name: string, label: string): number {
  const line = text.split('\n').find((l) => l.startsWith(`${name}{${label}}`));
  return line === undefined ? NaN : Number(line.split(' ').at(-1));
}

async function metrics(running: RunningServer): Promise<string> {
  return (await call(running.ports.metrics!, 'GET', '/metrics')).body.toString();
}

function children(spans: readonly ReceivedSpan[], parent: ReceivedSpan): ReceivedSpan[] {
  return spans.filter((s) => s.parentSpanId === parent.spanId && s.traceId === parent.traceId);
}

describe('OpenTelemetry export', () => {
  const receiver = new OtlpReceiver();
  const repo = new TempRepository().addSub('simple').config('pipe', PIPE_ENSEMBLE).file('pipe', '1/.keep', '');
  let spans: ReceivedSpan[];
  let invalidCounted: number;
  let setting: Record<string, unknown>;

  before(async () => {
    await receiver.start();
    const running = await serve(repo, [
      `--trace-config=opentelemetry,url=${receiver.url}`,
      '--trace-config=opentelemetry,resource=deployment.environment=test',
      '--trace-config=opentelemetry,bsp_schedule_delay=50',
    ]);
    try {
      const http = running.ports.http!;
      const traceparent = `00-${CALLER_TRACE}-${CALLER_SPAN}-01`;
      const joined = await call(http, 'POST', '/v2/models/simple/infer', {
        body: BODY,
        headers: { traceparent, tracestate: 'vendor=1' },
      });
      assert.equal(joined.status, 200);
      assert.equal((await call(http, 'POST', '/v2/models/pipe/infer', { body: BODY })).status, 200);
      const bad = await call(http, 'POST', '/v2/models/simple/infer', {
        body: BODY,
        headers: { traceparent: '00-xyz-00f067aa0ba902b7-01' },
      });
      assert.equal(bad.status, 200, 'a malformed traceparent is ignored and the request served');
      const Client = grpc.makeGenericClientConstructor(inferenceServiceDefinition, 'GRPCInferenceService');
      const client = new Client(`127.0.0.1:${running.ports.grpc}`, grpc.credentials.createInsecure());
      try {
        const md = new grpc.Metadata();
        md.set('traceparent', `00-${CALLER_TRACE}-${'1'.repeat(16)}-01`);
        const request = create(ModelInferRequestSchema, {
          modelName: 'simple',
          id: 'grpc-otel',
          inputs: [
            { name: 'INPUT0', datatype: 'INT32', shape: [1n, 16n] },
            { name: 'INPUT1', datatype: 'INT32', shape: [1n, 16n] },
          ],
          rawInputContents: [int32Bytes(A), int32Bytes(B)],
        });
        await new Promise<ModelInferResponse>((resolve, reject) =>
          (client as unknown as { ModelInfer: (...args: unknown[]) => void }).ModelInfer(
            request,
            md,
            (err: Error | null, res: ModelInferResponse) => (err ? reject(err) : resolve(res)),
          ),
        );
      } finally {
        client.close();
      }
      invalidCounted = metric(await metrics(running), 'nereid_trace_context_invalid_total', 'header="traceparent"');
      setting = json(await call(http, 'GET', '/v2/trace/setting')) as Record<string, unknown>;
    } finally {
      await running.shutdown();
    }
    spans = receiver.spans;
  });

  after(async () => {
    await receiver.stop();
    repo.cleanup();
  });

  test('a request with a traceparent joins the caller\'s trace: InferRequest, the model span, compute', () => {
    const roots = spans.filter((s) => s.name === 'InferRequest' && s.parentSpanId === CALLER_SPAN);
    assert.equal(roots.length, 1);
    const root = roots[0]!;
    assert.equal(root.traceId, CALLER_TRACE);
    assert.equal(root.kind, 2, 'SERVER');
    assert.deepEqual(
      root.events.map((e) => e.name),
      ['HTTP_RECV_START', 'HTTP_RECV_END', 'HTTP_SEND_START', 'HTTP_SEND_END'],
    );
    const [model] = children(spans, root);
    assert.ok(model);
    assert.equal(model.name, 'simple');
    assert.equal(model.kind, 2);
    assert.deepEqual(
      { ...model.attributes, 'triton.trace_id': typeof model.attributes['triton.trace_id'] },
      {
        'triton.model_name': 'simple',
        'triton.model_version': 1,
        'triton.trace_id': 'number',
        'triton.trace_parent_id': 0,
      },
    );
    assert.deepEqual(model.events.map((e) => e.name), ['REQUEST_START', 'QUEUE_START', 'REQUEST_END']);
    const [compute] = children(spans, model);
    assert.ok(compute);
    assert.equal(compute.name, 'compute');
    assert.deepEqual(
      compute.events.map((e) => e.name),
      ['COMPUTE_START', 'COMPUTE_INPUT_END', 'COMPUTE_OUTPUT_START', 'COMPUTE_END'],
    );
    assert.ok(
      root.startNs <= model.startNs &&
        model.startNs <= compute.startNs &&
        compute.endNs <= model.endNs &&
        model.endNs <= root.endNs,
    );
    assert.equal(model.resource['service.name'], 'nereid');
    assert.equal(model.resource['deployment.environment'], 'test');
  });

  test('gRPC metadata carries the context too; the request id is an attribute', () => {
    const root = spans.find((s) => s.name === 'InferRequest' && s.parentSpanId === '1'.repeat(16));
    assert.ok(root, 'the gRPC request joined the caller');
    assert.equal(root.traceId, CALLER_TRACE);
    assert.deepEqual(
      root.events.map((e) => e.name),
      ['GRPC_WAITREAD_START', 'GRPC_WAITREAD_END', 'GRPC_SEND_START', 'GRPC_SEND_END'],
    );
    const [model] = children(spans, root);
    assert.equal(model!.attributes['triton.request_id'], 'grpc-otel');
  });

  test('ensemble steps nest under the ensemble\'s span, with its trace id as parent id', () => {
    const ensemble = spans.find((s) => s.name === 'pipe');
    assert.ok(ensemble);
    const root = spans.find((s) => s.spanId === ensemble.parentSpanId);
    assert.equal(root?.name, 'InferRequest');
    assert.equal(root?.parentSpanId, '', 'no caller context: a new trace');
    const steps = children(spans, ensemble);
    assert.deepEqual(steps.map((s) => s.name), ['simple', 'simple']);
    for (const step of steps) {
      assert.equal(step.attributes['triton.trace_parent_id'], ensemble.attributes['triton.trace_id']);
      assert.equal(children(spans, step)[0]?.name, 'compute');
    }
  });

  test('a malformed traceparent starts a trace of its own and is counted', () => {
    assert.equal(invalidCounted, 1);
    const own = spans.filter((s) => s.name === 'InferRequest' && s.parentSpanId === '' && s.traceId !== CALLER_TRACE);
    assert.equal(own.length, 2, 'the ensemble request and the one with the malformed header');
  });

  test('trace/setting shows the mode and its OpenTelemetry settings', () => {
    assert.equal(setting['trace_mode'], 'opentelemetry');
    assert.equal(setting['url'], receiver.url);
    assert.equal(setting['bsp_max_queue_size'], '2048');
    assert.equal(setting['bsp_schedule_delay'], '50');
    assert.equal(setting['bsp_max_export_batch_size'], '512');
    assert.equal(setting['trace_file'], undefined);
  });
});

describe('OpenTelemetry export when the collector is down or slow', () => {
  test('requests are served; spans the collector did not take are counted', async () => {
    const down = await new OtlpReceiver().start();
    await down.stop(); // a port nobody listens on any more
    const repo = new TempRepository().addSub('simple');
    // The exporter retries a refused connection until its timeout (the SDK's standard variable): shortened here.
    process.env.OTEL_EXPORTER_OTLP_TRACES_TIMEOUT = '300';
    const running = await serve(repo, [
      `--trace-config=opentelemetry,url=${down.url}`,
      '--trace-config=opentelemetry,bsp_schedule_delay=20',
    ]);
    delete process.env.OTEL_EXPORTER_OTLP_TRACES_TIMEOUT;
    try {
      for (let i = 0; i < 5; i++)
        assert.equal((await call(running.ports.http!, 'POST', '/v2/models/simple/infer', { body: BODY })).status, 200);
      let dropped = 0;
      for (let tries = 0; tries < 400 && dropped < 15; tries++) {
        dropped = metric(await metrics(running), 'nereid_trace_spans_dropped_total', 'reason="export_failed"');
        if (dropped < 15) await new Promise((r) => setTimeout(r, 50));
      }
      assert.equal(dropped, 15, 'three spans per request');
    } finally {
      await running.shutdown();
      repo.cleanup();
    }
  });

  test('spans a collector takes and then rejects (partial success) are counted as failed', async () => {
    const receiver = await new OtlpReceiver().start();
    receiver.partialSuccess = { rejectedSpans: 2, errorMessage: 'two spans too many' };
    const repo = new TempRepository().addSub('simple');
    const running = await serve(repo, [
      `--trace-config=opentelemetry,url=${receiver.url}`,
      '--trace-config=opentelemetry,bsp_max_export_batch_size=3',
      '--trace-config=opentelemetry,bsp_schedule_delay=20',
    ]);
    try {
      for (let i = 0; i < 4; i++)
        assert.equal((await call(running.ports.http!, 'POST', '/v2/models/simple/infer', { body: BODY })).status, 200);
      let dropped = 0;
      for (let tries = 0; tries < 400 && (receiver.spans.length < 12 || dropped < 2 * receiver.requests); tries++) {
        dropped = metric(await metrics(running), 'nereid_trace_spans_dropped_total', 'reason="export_failed"');
        await new Promise((r) => setTimeout(r, 20));
      }
      assert.equal(receiver.spans.length, 12);
      assert.ok(receiver.requests >= 4, `three spans per export: ${receiver.requests} exports`);
      assert.equal(dropped, 2 * receiver.requests, 'the rejected spans of every answer');
    } finally {
      await running.shutdown();
      await receiver.stop();
      repo.cleanup();
    }
  });

  test('past bsp_max_queue_size spans are dropped and counted while the collector is slow', async () => {
    const receiver = await new OtlpReceiver().start();
    receiver.holdReplies = true;
    const repo = new TempRepository().addSub('simple');
    const running = await serve(repo, [
      `--trace-config=opentelemetry,url=${receiver.url}`,
      '--trace-config=opentelemetry,bsp_max_queue_size=4',
      '--trace-config=opentelemetry,bsp_max_export_batch_size=4',
      '--trace-config=opentelemetry,bsp_schedule_delay=600000',
    ]);
    try {
      // 12 spans: the first 4 go out in an export the collector does not answer, 4 wait in the queue, 4 are dropped.
      for (let i = 0; i < 4; i++)
        assert.equal((await call(running.ports.http!, 'POST', '/v2/models/simple/infer', { body: BODY })).status, 200);
      // With frontend threads a trace ends once its thread says the reply went out, just after the client has it.
      let dropped = 0;
      for (let tries = 0; tries < 100 && dropped < 4; tries++) {
        dropped = metric(await metrics(running), 'nereid_trace_spans_dropped_total', 'reason="queue_full"');
        if (dropped < 4) await new Promise((r) => setTimeout(r, 20));
      }
      assert.equal(dropped, 4);
      receiver.releaseReplies();
    } finally {
      await running.shutdown();
      await receiver.stop();
      repo.cleanup();
    }
    assert.equal(receiver.spans.length, 8, 'the exported batch and the queued one');
  });
});
