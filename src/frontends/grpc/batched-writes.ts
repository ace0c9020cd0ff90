/**
 * grpc-js server streams are Writables with only `_write`: while one
 * message is on its way to HTTP/2, the next ones wait in the Writable's
 * buffer and then go out one per write completion, an event loop turn
 * each. Giving the stream a `_writev` lets the Writable hand over all the
 * messages that queued up meanwhile at once; HTTP/2 then sends them
 * together. Each message still goes through grpc-js's own framing.
 */
import type { Writable } from 'node:stream';

type WriteFn = (chunk: unknown, encoding: BufferEncoding, callback: (error?: Error | null) => void) => void;
type Chunk = { chunk: unknown; encoding: BufferEncoding };

function ignore(): void {}

/** Adds a `_writev` that passes each queued message to the stream's own `_write`. */
export function batchWrites(stream: Writable): void {
  const target = stream as Writable & { _write?: WriteFn; _writev?: unknown };
  const write = target._write;
  if (typeof write !== 'function' || typeof target._writev === 'function') return;
  target._writev = function writev(this: Writable, chunks: Chunk[], callback: (error?: Error | null) => void): void {
    const last = chunks.length - 1;
    for (let i = 0; i < last; i++) write.call(this, chunks[i]!.chunk, chunks[i]!.encoding, ignore);
    write.call(this, chunks[last]!.chunk, chunks[last]!.encoding, callback);
  };
}
