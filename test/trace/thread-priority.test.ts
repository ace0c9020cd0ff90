import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync, readdirSync } from 'node:fs';
import { Worker } from 'node:worker_threads';
import { DEFAULT_TRACE_THREAD_NICE, traceThreadNice } from '../../src/trace/thread-priority.js';

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
  assert.equal(traceThreadNice({}), DEFAULT_TRACE_THREAD_NICE);
  assert.equal(traceThreadNice({ NEREID_TRACE_THREAD_NICE: '0' }), 0);
  assert.equal(traceThreadNice({ NEREID_TRACE_THREAD_NICE: '19' }), 19);
  for (const bad of ['20', '-1', 'x', '1.5']) {
    assert.throws(() => traceThreadNice({ NEREID_TRACE_THREAD_NICE: bad }), /NEREID_TRACE_THREAD_NICE.*0 to 19/);
  }
});
