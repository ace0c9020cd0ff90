import { test } from 'node:test';
import assert from 'node:assert/strict';
import type { Socket } from 'node:net';
import { FrameDecoder, writeFrame, type Frame } from '../../../src/backends/python/frame.js';

/** Collects what writeFrame hands to a socket. */
class CaptureSocket {
  chunks: Buffer[] = [];
  corked = 0;
  cork(): void {
    this.corked++;
  }
  uncork(): void {
    this.corked--;
  }
  write(b: Uint8Array): boolean {
    this.chunks.push(Buffer.from(b));
    return true;
  }
  bytes(): Buffer {
    return Buffer.concat(this.chunks);
  }
}

function roundTrip(buffers: Uint8Array[], chunkSize: number): Frame[] {
  const sock = new CaptureSocket();
  writeFrame(sock as unknown as Socket, { t: 'one', x: 1 }, buffers);
  writeFrame(sock as unknown as Socket, { t: 'two' }, []);
  assert.equal(sock.corked, 0);
  const wire = sock.bytes();
  const frames: Frame[] = [];
  const decoder = new FrameDecoder((f) => frames.push(f));
  for (let off = 0; off < wire.length; off += chunkSize) decoder.push(wire.subarray(off, off + chunkSize));
  return frames;
}

test('frames come back whole with their buffers, however the bytes are chunked', () => {
  const small = [new Uint8Array([1, 2, 3]), new Uint8Array(0), Buffer.from('hello world')];
  const big = new Uint8Array(300 * 1024).map((_, i) => i % 251);
  for (const buffers of [small, [big, new Uint8Array([9])]]) {
    for (const chunk of [1, 7, 4096, 1 << 20]) {
      const frames = roundTrip(buffers, chunk);
      assert.equal(frames.length, 2);
      assert.equal(frames[0]!.header.t, 'one');
      assert.equal(frames[0]!.header.x, 1);
      assert.deepEqual(frames[0]!.buffers.map((b) => Buffer.from(b)), buffers.map((b) => Buffer.from(b)));
      assert.equal(frames[1]!.header.t, 'two');
      assert.equal(frames[1]!.buffers.length, 0);
    }
  }
});

test('buffers inside a frame start at 8-byte aligned offsets', () => {
  const sock = new CaptureSocket();
  writeFrame(sock as unknown as Socket, { t: 'a' }, [new Uint8Array(3), new Uint8Array(5)]);
  const wire = sock.bytes();
  const frames: Frame[] = [];
  new FrameDecoder((f) => frames.push(f)).push(wire);
  const [b0, b1] = frames[0]!.buffers;
  // offsets relative to the body (which starts 4 bytes into the wire data)
  assert.equal((b0!.byteOffset - wire.byteOffset - 4) % 8, 0);
  assert.equal((b1!.byteOffset - wire.byteOffset - 4) % 8, 0);
});
