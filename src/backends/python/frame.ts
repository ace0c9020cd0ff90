/**
 * Frames exchanged with the Python worker process (python/nereid_stub.py).
 *
 *   u32 LE body length | body
 *   body = u32 LE header length | header JSON | pad to 8 | buffer | pad to 8 | ...
 *
 * The header's `b` lists each buffer's byte length. Tensor bytes are sent as
 * they are (no per-element work); received buffers are views into the frame.
 */
import type { Socket } from 'node:net';

/** A tensor's description inside a header; `b` indexes the frame's buffers. */
export interface WireTensor {
  n: string;
  d: string;
  s: number[];
  b: number;
}

export interface FrameHeader {
  t: string;
  [key: string]: unknown;
}

export interface Frame {
  readonly header: FrameHeader;
  readonly buffers: readonly Buffer[];
}

const ZEROS = Buffer.alloc(8);
/** Frames smaller than this are copied into one buffer and written with one call. */
const COALESCE_LIMIT = 64 * 1024;

const pad8 = (n: number): number => (8 - (n & 7)) & 7;

/** Writes one frame; large tensor buffers are handed to the socket without copying. */
export function writeFrame(socket: Socket, header: FrameHeader, buffers: readonly Uint8Array[]): void {
  const lengths = new Array<number>(buffers.length);
  for (let i = 0; i < buffers.length; i++) lengths[i] = buffers[i]!.byteLength;
  header.b = lengths;
  const json = Buffer.from(JSON.stringify(header), 'utf8');
  let size = 4 + json.length;
  const headerPad = pad8(size);
  size += headerPad;
  const bufferPads = new Array<number>(buffers.length);
  for (let i = 0; i < buffers.length; i++) {
    const len = lengths[i]!;
    if (len === 0) {
      bufferPads[i] = 0;
      continue;
    }
    size += len;
    const p = pad8(size);
    bufferPads[i] = p;
    size += p;
  }
  if (size > 0xffffffff) throw new Error(`a message of ${size} bytes exceeds the 4 GiB frame limit`);

  if (size < COALESCE_LIMIT) {
    const out = Buffer.allocUnsafe(4 + size);
    out.writeUInt32LE(size, 0);
    out.writeUInt32LE(json.length, 4);
    json.copy(out, 8);
    let off = 8 + json.length;
    out.fill(0, off, off + headerPad);
    off += headerPad;
    for (let i = 0; i < buffers.length; i++) {
      const b = buffers[i]!;
      if (b.byteLength === 0) continue;
      out.set(b, off);
      off += b.byteLength;
      const p = bufferPads[i]!;
      if (p) out.fill(0, off, off + p);
      off += p;
    }
    socket.write(out);
    return;
  }

  const prefix = Buffer.allocUnsafe(8);
  prefix.writeUInt32LE(size, 0);
  prefix.writeUInt32LE(json.length, 4);
  socket.cork();
  socket.write(prefix);
  socket.write(json);
  if (headerPad) socket.write(ZEROS.subarray(0, headerPad));
  for (let i = 0; i < buffers.length; i++) {
    const b = buffers[i]!;
    if (b.byteLength === 0) continue;
    socket.write(b);
    const p = bufferPads[i]!;
    if (p) socket.write(ZEROS.subarray(0, p));
  }
  socket.uncork();
}

/** Reassembles frames from socket chunks. */
export class FrameDecoder {
  private readonly chunks: Buffer[] = [];
  private buffered = 0;
  private bodyLength = -1;

  constructor(private readonly onFrame: (frame: Frame) => void) {}

  push(chunk: Buffer): void {
    this.chunks.push(chunk);
    this.buffered += chunk.length;
    for (;;) {
      if (this.bodyLength < 0) {
        if (this.buffered < 4) return;
        this.bodyLength = this.take(4).readUInt32LE(0);
      }
      if (this.buffered < this.bodyLength) return;
      const body = this.take(this.bodyLength);
      this.bodyLength = -1;
      this.onFrame(parseBody(body));
    }
  }

  /** The next n bytes: a view when they lie in one chunk, else one copy. */
  private take(n: number): Buffer {
    this.buffered -= n;
    const first = this.chunks[0]!;
    if (first.length >= n) {
      if (first.length === n) this.chunks.shift();
      else this.chunks[0] = first.subarray(n);
      return first.subarray(0, n);
    }
    const out = Buffer.allocUnsafe(n);
    let off = 0;
    while (off < n) {
      const c = this.chunks[0]!;
      const want = n - off;
      if (c.length <= want) {
        c.copy(out, off);
        off += c.length;
        this.chunks.shift();
      } else {
        c.copy(out, off, 0, want);
        this.chunks[0] = c.subarray(want);
        off += want;
      }
    }
    return out;
  }
}

function parseBody(body: Buffer): Frame {
  const headerLength = body.readUInt32LE(0);
  const header = JSON.parse(body.toString('utf8', 4, 4 + headerLength)) as FrameHeader;
  let off = 4 + headerLength;
  off += pad8(off);
  const lengths = (header.b as number[] | undefined) ?? [];
  const buffers = new Array<Buffer>(lengths.length);
  for (let i = 0; i < lengths.length; i++) {
    const len = lengths[i]!;
    buffers[i] = body.subarray(off, off + len);
    if (len) {
      off += len;
      off += pad8(off);
    }
  }
  return { header, buffers };
}
