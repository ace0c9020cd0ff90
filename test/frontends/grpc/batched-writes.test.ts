import { test } from 'node:test';
import assert from 'node:assert/strict';
import { Writable } from 'node:stream';
import { batchWrites } from '../../../src/frontends/grpc/batched-writes.js';

/** A Writable with only _write, like grpc-js's server streams: each write completes an event-loop turn later. */
function slowSink(): { sink: Writable; seen: Array<{ chunk: string; turn: number }> } {
  const seen: Array<{ chunk: string; turn: number }> = [];
  let turn = 0;
  const sink = new Writable({
    objectMode: true,
    write(chunk: string, _enc, callback) {
      seen.push({ chunk, turn });
      setImmediate(() => {
        turn++;
        callback();
      });
    },
  });
  return { sink, seen };
}

async function writeFive(sink: Writable): Promise<void> {
  for (const c of ['a', 'b', 'c', 'd', 'e']) sink.write(c);
  await new Promise<void>((resolve) => sink.end(resolve));
}

test('without batching, messages queued behind a pending write go out one per write completion', async () => {
  const { sink, seen } = slowSink();
  await writeFive(sink);
  assert.deepEqual(seen.map((s) => s.turn), [0, 1, 2, 3, 4]);
});

test('batchWrites hands every message queued behind a pending write to _write at once, in order', async () => {
  const { sink, seen } = slowSink();
  batchWrites(sink);
  await writeFive(sink);
  assert.deepEqual(seen.map((s) => s.chunk), ['a', 'b', 'c', 'd', 'e']);
  assert.deepEqual(seen.map((s) => s.turn), [0, 1, 1, 1, 1]);
});

test('batchWrites leaves a stream that already has _writev alone', () => {
  const writev = (): void => {};
  const sink = new Writable({ write: (_c, _e, cb) => cb(), writev });
  batchWrites(sink);
  assert.equal((sink as unknown as { _writev: unknown })._writev, writev);
});
