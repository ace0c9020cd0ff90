/**
 * The trace file's bytes (EntryBuffer): what its byte writer produces is the
 * JSON Triton writes, checked against entries built with JSON.stringify,
 * including ids and timestamps at the edges of its digit arithmetic, names
 * that JSON must escape, tensors and entries moved between buffers.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { EntryBuffer } from '../../src/trace/triton-format.js';
import { Trace, TraceGroup } from '../../src/trace/trace.js';
import { LEVEL_TENSORS, LEVEL_TIMESTAMPS } from '../../src/trace/settings.js';
import type { TraceStampName } from '../../src/types/api.js';

const sink = { finished: () => undefined };

function makeTrace(parent?: Trace, level = LEVEL_TIMESTAMPS): Trace {
  const group = parent?.group ?? new TraceGroup(level, sink, undefined, undefined);
  return new Trace(group, parent);
}

/** The entries of `trace` as Triton writes them, built the plain way. */
function expectedEntries(trace: Trace): string[] {
  const out: string[] = [];
  if (trace.modelName !== '') {
    const version = /^-?\d+$/.test(trace.modelVersion) ? trace.modelVersion : '-1';
    let head = `{"id":${trace.id},"model_name":${JSON.stringify(trace.modelName)},"model_version":${version}`;
    if (trace.requestId !== '') head += `,"request_id":${JSON.stringify(trace.requestId)}`;
    if (trace.parent !== undefined) head += `,"parent_id":${trace.parent.id}`;
    out.push(`${head}}`);
  }
  let t = 0;
  const tensors = trace.tensorEntries ?? [];
  for (let i = 0; i < trace.stampNames.length; i++) {
    for (; t < tensors.length && trace.tensorAfter![t] === i; t++) out.push(tensors[t]!);
    out.push(`{"id":${trace.id},"timestamps":[{"name":"${trace.stampNames[i]}","ns":${trace.stampNs(i)}}]}`);
  }
  for (; t < tensors.length; t++) out.push(tensors[t]!);
  return out;
}

const EDGES = [
  0n,
  1n,
  9n,
  10n,
  99_999_999n,
  100_000_000n,
  100_000_001n,
  1_000_000_000n,
  3_140_984_813_847n,
  10_000_000_000_000_000n / 1000n,
  BigInt(Number.MAX_SAFE_INTEGER),
  BigInt(Number.MAX_SAFE_INTEGER) + 1n,
  2n ** 64n - 1n,
];
const NAMES: TraceStampName[] = ['REQUEST_START', 'QUEUE_START', 'COMPUTE_OUTPUT_START', 'REQUEST_END'];

test('timestamps at the edges of the digit arithmetic are written exactly', () => {
  const buf = new EntryBuffer(16); // small: every append grows it
  const traces: Trace[] = [];
  for (let i = 0; i < EDGES.length; i++) {
    const trace = makeTrace();
    if (i % 2 === 0) trace.setModel('simple', String(i), '');
    trace.stamp(NAMES[i % NAMES.length]!, EDGES[i]!);
    trace.stamp('REQUEST_END', EDGES[EDGES.length - 1 - i]!);
    buf.append(trace);
    traces.push(trace);
  }
  const text = buf.take().toString('utf8');
  assert.equal(text, `[${traces.flatMap(expectedEntries).join(',')}]`);
  assert.ok(text.includes('"ns":18446744073709551615}'));
  assert.ok(text.includes('"ns":9007199254740992}'));
});

test('ids of any size, parent ids, request ids and names JSON must escape', () => {
  const buf = new EntryBuffer();
  const root = makeTrace();
  root.setModel('ens "quoted"\n\u0001é', '', 'r"1\\\u2028');
  const child = root.spawn() as Trace;
  child.setModel('step', 'x', '');
  const ids = [1, 9, 10, 99_999_999, 100_000_000, 123_456_789_012, Number.MAX_SAFE_INTEGER];
  for (const [i, id] of ids.entries()) {
    const t = i === 0 ? child : makeTrace(root);
    (t as { id: number }).id = id;
    if (i > 0) t.setModel('m', '-1', `id${i}`);
    t.stamp('COMPUTE_START', BigInt(id));
    buf.append(t);
  }
  buf.append(root);
  const text = buf.take().toString('utf8');
  const all = [child, ...root.group.traces.filter((t) => t !== root && t !== child), root];
  assert.equal(text, `[${all.flatMap(expectedEntries).join(',')}]`);
  const parsed = JSON.parse(text) as Array<Record<string, unknown>>;
  const rootHead = parsed.find((e) => e.model_name !== undefined && e.id === root.id)!;
  assert.equal(rootHead.model_name, 'ens "quoted"\n\u0001é');
  assert.equal(rootHead.request_id, 'r"1\\\u2028');
  assert.equal(rootHead.model_version, -1);
  assert.equal(parsed.filter((e) => e.parent_id === root.id).length, ids.length);
});

test('tensor entries keep their place among the timestamps', () => {
  const buf = new EntryBuffer();
  const trace = makeTrace(undefined, LEVEL_TIMESTAMPS | LEVEL_TENSORS);
  trace.setModel('t', '1', '');
  trace.tensorEntries = ['{"id":1,"activity":"TENSOR_QUEUE_INPUT","tensor":{"name":"ü","data":"1,2"}}', '{"x":2}'];
  trace.tensorAfter = [1, 2];
  trace.stamp('REQUEST_START', 5n);
  trace.stamp('QUEUE_START', 6n);
  buf.append(trace);
  assert.equal(buf.take().toString('utf8'), `[${expectedEntries(trace).join(',')}]`);
});

test('entries moved into another buffer stay one JSON array; an emptied buffer starts again', () => {
  const a = new EntryBuffer(8);
  const b = new EntryBuffer(8);
  const [t1, t2, t3] = [makeTrace(), makeTrace(), makeTrace()];
  for (const [i, t] of [t1!, t2!, t3!].entries()) {
    t.setModel(`m${i}`, '1', '');
    t.stamp('REQUEST_START', BigInt(i));
  }
  a.append(t1!);
  b.append(t2!);
  b.append(t3!);
  a.appendEntries(b);
  assert.ok(b.empty);
  assert.equal(a.take().toString('utf8'), `[${[t1!, t2!, t3!].flatMap(expectedEntries).join(',')}]`);
  assert.ok(a.empty);
  a.append(t3!);
  assert.equal(a.take().toString('utf8'), `[${expectedEntries(t3!).join(',')}]`);
});
