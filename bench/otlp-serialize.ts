/**
 * `node dist/bench/otlp-serialize.js` (section `otlpserialize` of bench/run.ts): the OTLP protobuf body of one
 * export (512 spans, the batch span processor's default batch) written by the SDK's serializer
 * (@opentelemetry/otlp-transformer's ProtobufTraceSerializer) and by ours (src/trace/otlp-protobuf.ts), on one
 * thread, alternated round by round; medians of the rounds, µs per export and per traced request (3 spans), the
 * ratio, and whether the two bodies are the same bytes. The spans are built from records as the export thread
 * builds them: a traced HTTP request to one model, its InferRequest, model and compute spans with their events.
 *
 * Environment: BENCH_SECONDS (per variant and round, default 1), BENCH_ROUNDS (default 7), OTLP_SPANS (default 512).
 */
import { ProtobufTraceSerializer } from '@opentelemetry/otlp-transformer';
import { resourceFromAttributes } from '@opentelemetry/resources';
import type { ReadableSpan } from '@opentelemetry/sdk-trace-base';
import {
  NONE,
  OP_END,
  OP_EVENT,
  SPAN_COMPUTE,
  SPAN_MODEL,
  SPAN_ROOT,
  STAMP_NAMES,
  type SpanBatch,
} from '../src/trace/otel-record.js';
import { SpanBuilder } from '../src/trace/otel-spans.js';
import { serializeTraceRequest } from '../src/trace/otlp-protobuf.js';

const SECONDS = Number(process.env.BENCH_SECONDS ?? 1);
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 7);
const SPANS = Number(process.env.OTLP_SPANS ?? 512);
const code = (name: string): number => STAMP_NAMES.indexOf(name as (typeof STAMP_NAMES)[number]);

/** Records of `requests` traced HTTP requests to the tiny MLP, 50 µs apart, as the event loop writes them. */
function records(requests: number): SpanBatch {
  const nums: number[] = [];
  for (let r = 0; r < requests; r++) {
    const t = 5e9 + r * 50_000;
    nums.push(3, NONE, NONE, NONE, 0);
    nums.push(SPAN_ROOT, NONE, NONE, t, t + 40_000);
    nums.push(SPAN_MODEL, 0, NONE, 0, t + 9_000, t + 30_000, 1, r + 1, 0, NONE);
    nums.push(SPAN_COMPUTE, NONE, 1, t + 12_000, t + 25_000);
    const event = (span: number, name: string, at: number) => nums.push(OP_EVENT, span, code(name), t + at);
    event(0, 'HTTP_RECV_START', 0);
    event(0, 'HTTP_RECV_END', 8_000);
    event(1, 'REQUEST_START', 9_000);
    event(1, 'QUEUE_START', 10_000);
    event(2, 'COMPUTE_START', 12_000);
    event(2, 'COMPUTE_INPUT_END', 14_000);
    event(2, 'COMPUTE_OUTPUT_START', 23_000);
    event(2, 'COMPUTE_END', 25_000);
    event(1, 'REQUEST_END', 30_000);
    event(0, 'HTTP_SEND_START', 32_000);
    event(0, 'HTTP_SEND_END', 40_000);
    nums.push(OP_END);
  }
  const array = Float64Array.from(nums);
  const names = ['mlp_tiny'];
  return { t: 'spans', groups: requests, spans: 3 * requests, nums: array, length: array.length, strings: [], names };
}

const resource = resourceFromAttributes({ 'service.name': 'nereid' });
const builder = new SpanBuilder(resource, { name: 'triton-server' }, 1_764_912_000, 123_456_789);
const spans: ReadableSpan[] = builder.spans(records(Math.ceil(SPANS / 3))).slice(0, SPANS);

const variants: Array<[string, (s: ReadableSpan[]) => Uint8Array | undefined]> = [
  ['SDK ProtobufTraceSerializer', (s) => ProtobufTraceSerializer.serializeRequest(s)],
  ['ours (otlp-protobuf.ts)', (s) => serializeTraceRequest(s)],
];

const sdkBytes = Buffer.from(variants[0]![1](spans)!);
const ourBytes = Buffer.from(variants[1]![1](spans)!);
const same = sdkBytes.equals(ourBytes);

/** µs per export over about SECONDS of exports, CPU time of this thread (GC included). */
function round(serialize: (s: ReadableSpan[]) => Uint8Array | undefined): number {
  let n = 0;
  let bytes = 0;
  const start = process.cpuUsage();
  const until = performance.now() + SECONDS * 1000;
  while (performance.now() < until) {
    for (let i = 0; i < 10; i++) bytes += serialize(spans)!.length;
    n += 10;
  }
  const used = process.cpuUsage(start);
  if (bytes === 0) throw new Error('nothing written');
  return (used.user + used.system) / n;
}

for (const [, serialize] of variants) round(serialize); // warm-up
const results = variants.map(() => [] as number[]);
for (let r = 0; r < ROUNDS; r++) {
  const order = r % 2 === 0 ? [0, 1] : [1, 0];
  for (const v of order) results[v]!.push(round(variants[v]![1]));
}
const median = (values: readonly number[]): number => [...values].sort((a, b) => a - b)[values.length >> 1]!;
const out = process.stdout;
out.write(`OTLP body of ${spans.length} spans (${sdkBytes.length} bytes), ${ROUNDS} rounds of ${SECONDS} s, medians\n`);
const head = `${'µs/export'.padStart(11)}${'µs/span'.padStart(9)}${'µs/request'.padStart(12)}`;
out.write(`${'serializer'.padEnd(30)}${head}\n`);
for (let v = 0; v < variants.length; v++) {
  const us = median(results[v]!);
  out.write(
    `${variants[v]![0].padEnd(30)}${us.toFixed(0).padStart(11)}${(us / spans.length).toFixed(3).padStart(9)}` +
      `${((3 * us) / spans.length).toFixed(2).padStart(12)}\n`,
  );
}
out.write(`ours / SDK: ${(median(results[1]!) / median(results[0]!)).toFixed(3)} of the time\n`);
out.write(`same bytes as the SDK's: ${same ? 'yes' : 'NO'}\n`);
if (!same) process.exitCode = 1;
