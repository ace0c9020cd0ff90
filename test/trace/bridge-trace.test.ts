/**
 * The main thread's side of a traced request a frontend thread serves (FrontendBridge): the thread's receive stamps
 * come with the request, the answer says it was traced, the send stamps that follow end the trace; a thread gone
 * before it sent them ends its traces without them. Over real MessagePorts, to a real Triton trace file.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { MessageChannel, type MessagePort } from 'node:worker_threads';
import { FrontendBridge } from '../../src/frontends/threads/index.js';
import type { BridgeAnswer, BridgeRequest, WireTrace } from '../../src/frontends/threads/wire.js';
import { LEVEL_TIMESTAMPS, Tracer } from '../../src/trace/index.js';
import { nowNs } from '../../src/trace/clock.js';
import { EchoServer } from '../frontends/http/echo-server.js';
import { type TraceFileEntry, mergeTraces } from '../helpers/trace-summary.js';

function request(id: number, trace: WireTrace | undefined, model = 'echo'): BridgeRequest {
  const data = new Uint8Array(new Int32Array([id]).buffer);
  return {
    t: 'infer',
    id,
    model,
    version: undefined,
    requestId: `r${id}`,
    inputs: [{ name: 'INPUT0', datatype: 'INT32', shape: [1], data }],
    outputs: undefined,
    parameters: undefined,
    trace,
  };
}

/** The answers the bridge sends on `port`, flattened out of its batches. */
function answers(port: MessagePort): (n: number) => Promise<BridgeAnswer[]> {
  const got: BridgeAnswer[] = [];
  const waiting: Array<() => void> = [];
  const add = (a: BridgeAnswer): void => {
    if (a.t === 'batch') a.items.forEach(add);
    else got.push(a);
  };
  port.on('message', (a: BridgeAnswer) => {
    add(a);
    for (const w of waiting.splice(0)) w();
  });
  return async (n) => {
    while (got.length < n) await new Promise<void>((r) => waiting.push(r));
    return got.splice(0, n);
  };
}

test('a thread-served request: traced on the main thread with the stamps the thread took, in order', async () => {
  const dir = mkdtempSync(path.join(tmpdir(), 'nereid-bridge-trace-'));
  const file = path.join(dir, 'trace.json');
  const tracer = new Tracer({ mode: 'triton', file, level: LEVEL_TIMESTAMPS, rate: 1 });
  const core = new EchoServer();
  const bridge = new FrontendBridge(core, tracer, undefined, 'grpc');
  const line = new MessageChannel();
  const sync = new MessageChannel();
  bridge.attach(line.port1, sync.port1, new Int32Array(new SharedArrayBuffer(4)));
  const next = answers(line.port2);
  try {
    const recvStart = nowNs();
    const recvEnd = recvStart + 1000;
    const wire = { pick: undefined, recvStart, recvEnd, traceparent: undefined, tracestate: undefined };
    // Traced and sent; traced and its thread gone before it sent; not carrying a WireTrace (nothing to trace);
    // traced, its thread gone before the answer.
    const items = [request(1, wire), request(2, wire), request(3, undefined), request(4, wire, 'slow')];
    line.port2.postMessage({ t: 'batch', items });
    await core.slowArrived;
    const got = await next(3);
    const byId = new Map(got.map((a) => [(a as { id: number }).id, a]));
    assert.equal((byId.get(1) as { traced?: true }).traced, true);
    assert.equal((byId.get(2) as { traced?: true }).traced, true);
    assert.equal('traced' in byId.get(3)!, false, 'an untraced answer carries nothing more');
    const start = nowNs();
    line.port2.postMessage({ t: 'sent', id: 1, start, end: start + 500 } satisfies BridgeRequest);
    // The sent message is taken before the close (one port, in order); then the thread goes.
    await new Promise((r) => setTimeout(r, 20));
    line.port2.close();
    await new Promise((r) => setTimeout(r, 20));
    for (const release of core.slow) release();
    await new Promise((r) => setTimeout(r, 20));
  } finally {
    bridge.close();
    sync.port2.close();
    await tracer.close();
  }
  const entries = JSON.parse(readFileSync(file, 'utf8')) as TraceFileEntry[];
  rmSync(dir, { recursive: true, force: true });
  const traces = [...mergeTraces(entries, 'grpc').values()].sort((a, b) => a.id - b.id);
  assert.equal(traces.length, 3, 'three traces: the request without a WireTrace is not traced');
  const [sent, gone, late] = traces;
  assert.deepEqual(sent!.order, ['GRPC_WAITREAD_START', 'GRPC_WAITREAD_END', 'GRPC_SEND_START', 'GRPC_SEND_END']);
  const ns = (name: string) => sent!.timestamps.get(name)!;
  assert.equal(ns('GRPC_WAITREAD_END') - ns('GRPC_WAITREAD_START'), 1000, 'the thread\'s times as it sent them');
  assert.equal(ns('GRPC_SEND_END') - ns('GRPC_SEND_START'), 500);
  assert.ok(ns('GRPC_SEND_START') >= ns('GRPC_WAITREAD_END'));
  assert.deepEqual(gone!.order, ['GRPC_WAITREAD_START', 'GRPC_WAITREAD_END'], 'ended without send stamps');
  assert.deepEqual(late!.order, ['GRPC_WAITREAD_START', 'GRPC_WAITREAD_END'], 'answered after, ended then');
});
