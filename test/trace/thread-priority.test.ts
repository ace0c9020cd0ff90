import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync, readdirSync } from 'node:fs';
import { Worker } from 'node:worker_threads';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { traceThreadNice } from '../../src/trace/thread-priority.js';
import { Tracer } from '../../src/trace/tracer.js';

/** Field 19 of /proc/self/task/<tid>/stat: the thread's nice value (the name in field 2 may hold spaces). */
function niceOf(tid: number | string): number {
  const stat = readFileSync(`/proc/self/task/${tid}/stat`, 'utf8');
  return Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[16]);
}

test('lowerThisThread inside a worker changes that thread only', async () => {
  const before = new Map(readdirSync('/proc/self/task').map((t) => [t, niceOf(t)]));
  const source = `
    const { parentPort, workerData } = require('node:worker_threads');
    const { readFileSync } = require('node:fs');
    import(workerData.module).then(({ lowerThisThread }) => {
      const tid = readFileSync('/proc/thread-self/stat', 'utf8').split(' ')[0];
      const refused = lowerThisThread(13);
      parentPort.postMessage({ tid, refused });
      parentPort.once('message', () => process.exit(0));
    });
  `;
  const worker = new Worker(source, {
    eval: true,
    workerData: { module: new URL('../../src/trace/thread-priority.js', import.meta.url).href },
  });
  try {
    const msg = await new Promise<{ tid: string; refused: string | undefined }>((resolve, reject) => {
      worker.once('message', resolve);
      worker.once('error', reject);
    });
    assert.equal(msg.refused, undefined);
    assert.equal(niceOf(msg.tid), 13, 'the worker thread runs at nice 13');
    assert.equal(niceOf(process.pid), before.get(String(process.pid)), 'the main thread keeps its nice value');
    for (const t of readdirSync('/proc/self/task')) {
      if (t !== msg.tid && before.has(t)) assert.equal(niceOf(t), before.get(t), `thread ${t} keeps its nice value`);
    }
  } finally {
    worker.postMessage('exit');
    await new Promise((resolve) => worker.once('exit', resolve));
  }
});

test('NEREID_TRACE_THREAD_NICE: default, values, bad values named', () => {
  assert.equal(traceThreadNice(10, {}), 10);
  assert.equal(traceThreadNice(10, { NEREID_TRACE_THREAD_NICE: '0' }), 0);
  assert.equal(traceThreadNice(0, { NEREID_TRACE_THREAD_NICE: '19' }), 19);
  for (const bad of ['20', '-1', 'x', '1.5']) {
    assert.throws(() => traceThreadNice(0, { NEREID_TRACE_THREAD_NICE: bad }), /NEREID_TRACE_THREAD_NICE.*0 to 19/);
  }
});

/** Ids of this process's threads running at `nice`, once one appears (threads lower themselves as they start). */
async function threadsAt(nice: number): Promise<string[]> {
  for (let i = 0; i < 100; i++) {
    const found = readdirSync('/proc/self/task').filter((t) => {
      try {
        return niceOf(t) === nice;
      } catch {
        return false; // a thread that has just ended
      }
    });
    if (found.length > 0) return found;
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  return [];
}

test('the export thread runs at nice 10; both threads take NEREID_TRACE_THREAD_NICE', async () => {
  const dir = mkdtempSync(path.join(tmpdir(), 'nereid-nice-'));
  const saved = process.env.NEREID_TRACE_THREAD_NICE;
  const mainBefore = niceOf(process.pid);
  const tracers: Tracer[] = [];
  try {
    delete process.env.NEREID_TRACE_THREAD_NICE;
    const otlp = { url: 'http://127.0.0.1:1/v1/traces', resource: {}, bspMaxQueueSize: 16, bspScheduleDelayMs: 50,
      bspMaxExportBatchSize: 16 };
    const at10 = (await threadsAt(10)).length;
    tracers.push(new Tracer({ mode: 'opentelemetry', otel: otlp }));
    for (let i = 0; i < 100 && (await threadsAt(10)).length === at10; i++) await new Promise((r) => setTimeout(r, 50));
    assert.equal((await threadsAt(10)).length, at10 + 1, 'the export thread at nice 10 by default');
    process.env.NEREID_TRACE_THREAD_NICE = '11';
    tracers.push(new Tracer({ mode: 'opentelemetry', otel: otlp }));
    assert.equal((await threadsAt(11)).length, 1, 'one thread (the export thread) at nice 11');
    process.env.NEREID_TRACE_THREAD_NICE = '12';
    tracers.push(new Tracer({ mode: 'triton', file: path.join(dir, 'trace.json') }));
    assert.equal((await threadsAt(12)).length, 1, 'one thread (the trace file thread) at nice 12');
    assert.equal(niceOf(process.pid), mainBefore, 'the main thread keeps its nice value');
    process.env.NEREID_TRACE_THREAD_NICE = '20';
    assert.throws(() => new Tracer({ mode: 'opentelemetry', otel: otlp }), /NEREID_TRACE_THREAD_NICE/);
  } finally {
    if (saved === undefined) delete process.env.NEREID_TRACE_THREAD_NICE;
    else process.env.NEREID_TRACE_THREAD_NICE = saved;
    await Promise.all(tracers.map((t) => t.close()));
    rmSync(dir, { recursive: true, force: true });
  }
});
