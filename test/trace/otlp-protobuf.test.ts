/**
 * Our OTLP protobuf serializer (src/trace/otlp-protobuf.ts) against the SDK's (ProtobufTraceSerializer of
 * @opentelemetry/otlp-transformer, what the exporter used before): the same bytes for the same spans, and both
 * decoded with the official OTLP protobuf definitions to the same messages; spans built from records as the export
 * thread builds them, then spans of every shape the ReadableSpan interface allows. The collector's answer is read
 * as the SDK reads it.
 */
import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { createRequire } from 'node:module';
import { type Attributes, type HrTime, type SpanContext, SpanKind } from '@opentelemetry/api';
import { TraceState } from '@opentelemetry/core';
import { ProtobufTraceSerializer } from '@opentelemetry/otlp-transformer';
import { type Resource, resourceFromAttributes } from '@opentelemetry/resources';
import type { ReadableSpan, TimedEvent } from '@opentelemetry/sdk-trace-base';
import { parseTraceFlags } from '../../src/trace/config.js';
import {
  NONE,
  OP_END,
  OP_EVENT,
  SPAN_COMPUTE,
  SPAN_MODEL,
  SPAN_ROOT,
  STAMP_NAMES,
  type SpanBatch,
} from '../../src/trace/otel-record.js';
import { SpanBuilder } from '../../src/trace/otel-spans.js';
import { deserializeTraceResponse, serializeTraceRequest } from '../../src/trace/otlp-protobuf.js';
import { decodeTraces } from '../helpers/otlp-receiver.js';

const require = createRequire(import.meta.url);
interface ProtoType {
  decode(bytes: Uint8Array): unknown;
  toObject(message: unknown, options: Record<string, unknown>): Record<string, unknown>;
  encode(message: object): { finish(): Uint8Array };
  fromObject(object: object): unknown;
}
const v1 = (
  require('otlp-transformer-0.57/build/src/generated/root.js') as {
    opentelemetry: {
      proto: {
        collector: { trace: { v1: { ExportTraceServiceRequest: ProtoType; ExportTraceServiceResponse: ProtoType } } };
      };
    };
  }
).opentelemetry.proto.collector.trace.v1;

/** A body decoded by the official definitions, every field spelled out (bytes as base64, 64-bit as text). */
function decoded(body: Uint8Array): Record<string, unknown> {
  const message = v1.ExportTraceServiceRequest.decode(body);
  return v1.ExportTraceServiceRequest.toObject(message, {
    longs: String,
    enums: Number,
    bytes: String,
    defaults: true,
    arrays: true,
    objects: true,
  });
}

/**
 * Ours and the SDK's serializer on the same spans: the same message decoded, and the same bytes (which also covers
 * the fields newer than these definitions, such as Span.flags).
 */
function sameAsSdk(spans: ReadableSpan[]): Uint8Array {
  const ours = serializeTraceRequest(spans);
  const sdk = ProtobufTraceSerializer.serializeRequest(spans)!;
  assert.deepEqual(decoded(ours), decoded(sdk));
  assert.ok(Buffer.from(ours).equals(Buffer.from(sdk)), 'the same bytes as the SDK serializer');
  return ours;
}

const code = (name: string): number => STAMP_NAMES.indexOf(name as (typeof STAMP_NAMES)[number]);

interface SpanRecord {
  kind: typeof SPAN_ROOT | typeof SPAN_MODEL | typeof SPAN_COMPUTE;
  /** Index into the batch's model names (model spans). */
  model?: number;
  id?: string;
  /** Span index in the group; NONE: the remote parent or none. */
  parent: number;
  start: number;
  end: number;
  version?: number;
  traceId?: number;
  parentTraceId?: number;
  requestId?: string;
}

/** Records as the event loop writes them (otel-record.ts), one group per traced request. */
class Records {
  private readonly nums: number[] = [];
  private readonly strings: string[] = [];
  private groups = 0;
  private spans = 0;
  constructor(private readonly names: string[]) {}

  private string(s: string | undefined): number {
    return s === undefined ? NONE : this.strings.push(s) - 1;
  }

  group(
    head: { traceId?: string; traceState?: string; remoteSpanId?: string; remoteFlags?: number },
    spans: SpanRecord[],
    events: Array<[span: number, name: string, time: number]>,
  ): this {
    const n = this.nums;
    n.push(spans.length, this.string(head.traceId), this.string(head.traceState), this.string(head.remoteSpanId));
    n.push(head.remoteFlags ?? 0);
    for (const s of spans) {
      n.push(s.kind);
      if (s.kind === SPAN_MODEL) n.push(s.model!);
      n.push(this.string(s.id), s.parent, s.start, s.end);
      if (s.kind === SPAN_MODEL) n.push(s.version!, s.traceId!, s.parentTraceId!, this.string(s.requestId));
    }
    for (const [span, name, time] of events) n.push(OP_EVENT, span, code(name), time);
    n.push(OP_END);
    this.groups += 1;
    this.spans += spans.length;
    return this;
  }

  batch(): SpanBatch {
    const nums = Float64Array.from(this.nums);
    return {
      t: 'spans',
      groups: this.groups,
      spans: this.spans,
      nums,
      length: nums.length,
      strings: this.strings,
      names: this.names,
    };
  }
}

/** A traced HTTP request to one model: InferRequest, the model's span, compute; at `t` ns. */
function request(records: Records, t: number, requestId?: string): Records {
  return records.group(
    {},
    [
      { kind: SPAN_ROOT, parent: NONE, start: t, end: t + 40_000 },
      {
        kind: SPAN_MODEL,
        model: 0,
        parent: 0,
        start: t + 9_000,
        end: t + 30_000,
        version: 1,
        traceId: 7,
        parentTraceId: 0,
        requestId,
      },
      { kind: SPAN_COMPUTE, parent: 1, start: t + 12_000, end: t + 25_000 },
    ],
    [
      [0, 'HTTP_RECV_START', t],
      [0, 'HTTP_RECV_END', t + 8_000],
      [1, 'REQUEST_START', t + 9_000],
      [1, 'QUEUE_START', t + 10_000],
      [2, 'COMPUTE_START', t + 12_000],
      [2, 'COMPUTE_INPUT_END', t + 14_000],
      [2, 'COMPUTE_OUTPUT_START', t + 23_000],
      [2, 'COMPUTE_END', t + 25_000],
      [1, 'REQUEST_END', t + 30_000],
      [0, 'HTTP_SEND_START', t + 32_000],
      [0, 'HTTP_SEND_END', t + 40_000],
    ],
  );
}

const SCOPE = { name: 'triton-server' };
const CALLER_TRACE = '4bf92f3577b34da6a3ce929d0e0e4736';
const CALLER_SPAN = '00f067aa0ba902b7';

/** The resource as the server makes it from its flags and OTEL_RESOURCE_ATTRIBUTES. */
function serverResource(): Resource {
  const { options } = parseTraceFlags(
    {
      config: [
        'mode=opentelemetry',
        'opentelemetry,resource=deployment.environment=prod',
        'opentelemetry,resource=k8s.pod.name=nereid-0',
      ],
      level: [],
    },
    { OTEL_RESOURCE_ATTRIBUTES: 'service.name=edge,team=vision,host.name=n%C3%A9reid' },
  );
  return resourceFromAttributes({ ...options.otel!.resource });
}

describe('OTLP protobuf serializer', () => {
  test('writes the SDK serializer’s bytes for the spans of traced requests', () => {
    const resource = serverResource();
    const builder = new SpanBuilder(resource, SCOPE, 1_764_912_000, 123_456_789);
    const records = new Records(['simple', 'modèle-日本-🚀', 'pipe']);
    request(records, 5e9, 'r-1');
    request(records, 5e9 + 50_000); // no request id
    // A caller's context with a tracestate; an ensemble whose step (a non-ASCII model name) nests in it.
    records.group(
      { traceId: CALLER_TRACE, traceState: 'vendor=a1,other=b2', remoteSpanId: CALLER_SPAN, remoteFlags: 1 },
      [
        { kind: SPAN_ROOT, id: 'a1b2c3d4e5f60718', parent: NONE, start: 6e9, end: 6e9 + 90_000 },
        { kind: SPAN_MODEL, model: 2, parent: 0, start: 6e9 + 1_000, end: 6e9 + 80_000, version: 3, traceId: 9,
          parentTraceId: 0, requestId: 'ензо' },
        { kind: SPAN_MODEL, model: 1, parent: 1, start: 6e9 + 2_000, end: 6e9 + 70_000, version: 1, traceId: 10,
          parentTraceId: 9 },
        { kind: SPAN_COMPUTE, parent: 2, start: 6e9 + 3_000, end: 6e9 + 60_000 },
      ],
      [
        [0, 'GRPC_WAITREAD_START', 6e9],
        [1, 'REQUEST_START', 6e9 + 1_000],
        [2, 'REQUEST_START', 6e9 + 2_000],
        [3, 'COMPUTE_START', 6e9 + 3_000],
        [3, 'COMPUTE_END', 6e9 + 60_000],
        [2, 'REQUEST_END', 6e9 + 70_000],
        [1, 'REQUEST_END', 6e9 + 80_000],
        [0, 'GRPC_SEND_END', 6e9 + 90_000],
      ],
    );
    const spans = builder.spans(records.batch());
    assert.equal(spans.length, 10);
    const body = sameAsSdk(spans);

    const got = decodeTraces(body);
    assert.deepEqual(got[0]!.resource, {
      'service.name': 'edge',
      team: 'vision',
      'host.name': 'néreid',
      'deployment.environment': 'prod',
      'k8s.pod.name': 'nereid-0',
    });
    const [root, model, compute] = got;
    assert.equal(root!.name, 'InferRequest');
    assert.equal(root!.parentSpanId, '');
    assert.equal(model!.parentSpanId, root!.spanId);
    assert.equal(compute!.parentSpanId, model!.spanId);
    assert.equal(model!.traceId, root!.traceId);
    assert.equal(root!.kind, 2);
    assert.deepEqual(model!.attributes, {
      'triton.model_name': 'simple',
      'triton.model_version': 1,
      'triton.trace_id': 7,
      'triton.trace_parent_id': 0,
      'triton.request_id': 'r-1',
    });
    assert.equal('triton.request_id' in got[4]!.attributes, false);
    assert.deepEqual(
      root!.events.map((e) => e.name),
      ['HTTP_RECV_START', 'HTTP_RECV_END', 'HTTP_SEND_START', 'HTTP_SEND_END'],
    );
    assert.equal(root!.startNs, 1_764_912_000_000_000_000n + 123_456_789n + 5_000_000_000n);
    const [joined, ensemble, step, stepCompute] = got.slice(6);
    assert.equal(joined!.traceId, CALLER_TRACE);
    assert.equal(joined!.parentSpanId, CALLER_SPAN);
    assert.equal(joined!.spanId, 'a1b2c3d4e5f60718');
    assert.equal(ensemble!.attributes['triton.request_id'], 'ензо');
    assert.equal(step!.name, 'modèle-日本-🚀');
    assert.equal(step!.attributes['triton.model_name'], 'modèle-日本-🚀');
    assert.equal(step!.parentSpanId, ensemble!.spanId);
    assert.equal(stepCompute!.parentSpanId, step!.spanId);
    const raw = decoded(body) as {
      resourceSpans: Array<{ scopeSpans: Array<{ spans: Array<{ traceState: string }> }> }>;
    };
    assert.equal(raw.resourceSpans[0]!.scopeSpans[0]!.spans[6]!.traceState, 'vendor=a1,other=b2');
  });

  test('writes times from zero to past 2^64 ns as the SDK does', () => {
    const cases: Array<[baseSec: number, baseNsec: number, rel: number]> = [
      [0, 0, 0],
      [0, 0, 1],
      [1_764_912_000, 999_999_999, 1],
      [2 ** 32 - 1, 999_999_999, 86_400e9], // the day after 2106-02-07
      [2 ** 33, 5, 0], // past 2^32 s
      [18_446_744_073, 709_551_615, 0], // the last ns of uint64
      [18_446_744_073, 709_551_615, 1], // wraps, as the SDK's does
    ];
    for (const [sec, nsec, rel] of cases) {
      const builder = new SpanBuilder(resourceFromAttributes({}), SCOPE, sec, nsec);
      const spans = builder.spans(request(new Records(['m']), rel).batch());
      const body = sameAsSdk(spans);
      const expected = BigInt.asUintN(64, BigInt(sec) * 1_000_000_000n + BigInt(nsec) + BigInt(rel));
      assert.equal(decodeTraces(body)[0]!.startNs, expected, `${sec} s ${nsec} ns + ${rel}`);
    }
  });

  test('writes every attribute value, event, link, status and kind as the SDK does', () => {
    const resource = resourceFromAttributes({ 'service.name': 'x', n: 3, ok: true }, { schemaUrl: 'https://s/1' });
    const longText = 'ü'.repeat(100) + 'x'.repeat(300);
    const attributes: Attributes = {
      text: 'plain',
      empty: '',
      long: longText,
      lone: 'a\ud800b',
      pair: '𝄞',
      yes: true,
      no: false,
      int: 42,
      zero: 0,
      negative: -7,
      big: 2 ** 40 + 3,
      int64Min: -(2 ** 63),
      past: 2 ** 63,
      double: 1.5,
      nan: NaN,
      inf: -Infinity,
      strings: ['a', 'b'],
      none: undefined,
    };
    // Values the API's types leave out and the SDK still writes.
    (attributes as Record<string, unknown>).mixed = [1, 'two', true, 2.5, null, undefined];
    (attributes as Record<string, unknown>).bytes = new Uint8Array([0, 1, 255]);
    (attributes as Record<string, unknown>).nested = { a: 1, b: { c: 'd' } };
    const context = (traceId: string, spanId: string, extra: Partial<SpanContext> = {}): SpanContext => ({
      traceId,
      spanId,
      traceFlags: 1,
      ...extra,
    });
    const span = (name: string, more: Partial<ReadableSpan> & { context: SpanContext }): ReadableSpan => {
      const { context: ctx, ...rest } = more;
      return {
        name,
        kind: SpanKind.INTERNAL,
        spanContext: () => ctx,
        parentSpanContext: undefined,
        startTime: [1_764_912_000, 1] as HrTime,
        endTime: [1_764_912_001, 2] as HrTime,
        status: { code: 0 },
        attributes: {},
        links: [],
        events: [],
        duration: [1, 1] as HrTime,
        ended: true,
        resource,
        instrumentationScope: { name: 's', version: '1.2.3', schemaUrl: 'https://scope/1' },
        droppedAttributesCount: 0,
        droppedEventsCount: 0,
        droppedLinksCount: 0,
        ...rest,
      };
    };
    const manyEvents: TimedEvent[] = Array.from({ length: 400 }, (_, i) => ({
      name: `event ${i}`,
      time: [1_764_912_000, i] as HrTime,
      attributes: { i },
      droppedAttributesCount: i % 3,
    }));
    const spans: ReadableSpan[] = [
      span('every attribute', {
        context: context(CALLER_TRACE, CALLER_SPAN, { traceState: new TraceState('a=1') }),
        attributes,
        kind: SpanKind.CLIENT,
        status: { code: 2, message: 'it failed: ✗' },
        droppedAttributesCount: 2,
        droppedEventsCount: 3,
        droppedLinksCount: 4,
        events: [
          { name: 'plain', time: [1, 2] },
          { name: 'with attributes', time: [3, 4], attributes: { k: 'v', n: -1 }, droppedAttributesCount: 1 },
        ],
        links: [
          { context: context('0af7651916cd43dd8448eb211c80319c', 'b7ad6b7169203331', { isRemote: true }) },
          {
            context: context('0af7651916cd43dd8448eb211c80319c', 'c7ad6b7169203332', {
              traceFlags: 0,
              traceState: new TraceState('z=9'),
            }),
            attributes: { why: 'because' },
            droppedAttributesCount: 5,
          },
        ],
      }),
      // Small (under 128 bytes) and large (over 16 KiB) spans: their lengths take one and three bytes.
      span('', { context: context('00000000000000000000000000000001', '0000000000000001'), kind: undefined as never }),
      span('large', {
        context: context('ffffffffffffffffffffffffffffffff', 'ffffffffffffffff'),
        parentSpanContext: context('ffffffffffffffffffffffffffffffff', 'FFFFFFFFFFFFFFFE', { isRemote: false }),
        kind: SpanKind.SERVER,
        events: manyEvents,
      }),
      span('consumer', {
        context: context('ffffffffffffffffffffffffffffffff', '1111111111111111'),
        kind: SpanKind.CONSUMER,
        parentSpanContext: context('ffffffffffffffffffffffffffffffff', 'ffffffffffffffff'),
      }),
    ];
    sameAsSdk(spans);
  });

  test('groups spans by resource and scope as the SDK does, in the order first seen', () => {
    const r1 = resourceFromAttributes({ 'service.name': 'a' });
    const r2 = resourceFromAttributes({ 'service.name': 'b' });
    const s1 = { name: 'triton-server' };
    const s2 = { name: 'other', version: '2', schemaUrl: 'https://scope/2' };
    const spans: ReadableSpan[] = [];
    for (const [resource, scope] of [[r2, s1], [r1, s1], [r2, s2], [r1, s2], [r2, s1]] as const) {
      spans.push(...new SpanBuilder(resource, scope, 1_764_912_000, 0).spans(request(new Records(['m']), 0).batch()));
    }
    const body = sameAsSdk(spans);
    const raw = decoded(body) as { resourceSpans: Array<{ scopeSpans: Array<{ spans: unknown[] }> }> };
    assert.deepEqual(
      raw.resourceSpans.map((r) => r.scopeSpans.map((s) => s.spans.length)),
      [[6, 3], [3, 3]],
    );
  });

  test('writes an empty request for no spans, as the SDK does', () => {
    assert.equal(serializeTraceRequest([]).length, 0);
    assert.equal(ProtobufTraceSerializer.serializeRequest([])!.length, 0);
  });

  test('each body is its own copy: the next export does not overwrite it', () => {
    const builder = new SpanBuilder(resourceFromAttributes({}), SCOPE, 1_764_912_000, 0);
    const first = serializeTraceRequest(builder.spans(request(new Records(['first']), 0).batch()));
    const copy = Buffer.from(first);
    serializeTraceRequest(builder.spans(request(new Records([]), 1e9, 'another request').batch()));
    assert.ok(Buffer.from(first).equals(copy));
  });

  test('reads the collector’s answer as the SDK does', () => {
    const encode = (o: object): Uint8Array =>
      v1.ExportTraceServiceResponse.encode(v1.ExportTraceServiceResponse.fromObject(o) as object).finish();
    const answers = [
      new Uint8Array(0),
      encode({}),
      encode({ partialSuccess: {} }),
      encode({ partialSuccess: { rejectedSpans: 3, errorMessage: 'queue full: 3 spans rejected ✗' } }),
      encode({ partialSuccess: { rejectedSpans: 2 ** 40 } }),
      // Fields this version does not know are skipped: a varint, fixed64, fixed32 and bytes after the message.
      Buffer.concat([encode({ partialSuccess: { errorMessage: 'x' } }), Buffer.from([0x10, 0x05, 0x19]),
        Buffer.alloc(8), Buffer.from([0x25, 1, 2, 3, 4, 0x2a, 0x01, 0x00])]),
      // And inside partial_success too.
      Buffer.from([0x0a, 0x06, 0x18, 0x01, 0x08, 0x07, 0x20, 0x00]),
    ];
    for (const answer of answers) {
      assert.deepEqual(deserializeTraceResponse(answer), ProtobufTraceSerializer.deserializeResponse(answer));
    }
    assert.deepEqual(deserializeTraceResponse(answers[3]!), {
      partialSuccess: { rejectedSpans: 3, errorMessage: 'queue full: 3 spans rejected ✗' },
    });
    // Cut short: both refuse (the exporter then logs and still counts the export as done).
    for (const cut of [Buffer.from([0x0a, 0x05, 0x08]), Buffer.from([0x0a, 0x02, 0x08, 0x80])]) {
      assert.throws(() => deserializeTraceResponse(cut), /cut short/);
      assert.throws(() => ProtobufTraceSerializer.deserializeResponse(cut));
    }
  });
});
