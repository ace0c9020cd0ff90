/**
 * The protobuf wire primitives of the hand-written message writers (the
 * server's ModelInferResponse, the client's ModelInferRequest): sizes are
 * computed first, then the message is written into one buffer. Tags are
 * given as their byte, `(field << 3) | wire type`, all of them below 128.
 */

const VARINT = 0;
const I64 = 1;
const LEN = 2;
const TWO_POW_63 = 2 ** 63;
const INT64_MAX = (1n << 63n) - 1n;

/** The bytes of `n` (an integer >= 0) as a varint. */
export function varintSize(n: number): number {
  let size = 1;
  while (n >= 128) {
    n = Math.floor(n / 128);
    size++;
  }
  return size;
}

/** The bytes of an int64 as protobuf writes it (a negative one takes 10; a bigint is taken modulo 2^64). */
export function int64Size(v: number | bigint): number {
  if (typeof v === 'number') return v < 0 ? 10 : varintSize(v);
  let u = BigInt.asUintN(64, v);
  let size = 1;
  while (u >= 128n) {
    u >>= 7n;
    size++;
  }
  return size;
}

/** A length-delimited field of `len` bytes with a one-byte tag. */
export const lenField = (len: number): number => 1 + varintSize(len) + len;

/** A string field of `byteLen` bytes, or nothing for an empty one (proto3 leaves defaults out). */
export const stringField = (byteLen: number): number => (byteLen === 0 ? 0 : lenField(byteLen));

export class WireWriter {
  readonly buf: Buffer;
  pos = 0;
  constructor(size: number) {
    this.buf = Buffer.allocUnsafe(size);
  }
  byte(b: number): void {
    this.buf[this.pos++] = b;
  }
  varint(n: number): void {
    const buf = this.buf;
    while (n >= 128) {
      buf[this.pos++] = (n % 128) | 0x80;
      n = Math.floor(n / 128);
    }
    buf[this.pos++] = n;
  }
  int64(v: number | bigint): void {
    if (typeof v === 'number' && v >= 0) {
      this.varint(v);
      return;
    }
    let u = BigInt.asUintN(64, BigInt(v));
    const buf = this.buf;
    while (u >= 128n) {
      buf[this.pos++] = Number(u & 127n) | 0x80;
      u >>= 7n;
    }
    buf[this.pos++] = Number(u);
  }
  /** A length-delimited field's tag and length. */
  lenHead(tag: number, len: number): void {
    this.buf[this.pos++] = tag;
    this.varint(len);
  }
  /** A string field of `byteLen` UTF-8 bytes. */
  string(tag: number, s: string, byteLen: number): void {
    this.lenHead(tag, byteLen);
    this.pos += this.buf.write(s, this.pos, byteLen, 'utf8');
  }
  bytes(tag: number, b: Uint8Array): void {
    this.lenHead(tag, b.byteLength);
    this.buf.set(b, this.pos);
    this.pos += b.byteLength;
  }
  /** Fails unless exactly the computed size was written: the sizes and the writing must agree. */
  expectFull(what: string): Buffer {
    if (this.pos !== this.buf.length) throw new Error(`${what} encoder: wrote ${this.pos} bytes of ${this.buf.length}`);
    return this.buf;
  }
}

const isInt64 = (v: number): boolean => Number.isInteger(v) && v < TWO_POW_63 && v >= -TWO_POW_63;

/**
 * One map<string, InferParameter> entry, sized once and then written: integers go as int64 (a bigint past int64 as
 * uint64; a number past int64's range as double), other numbers as double.
 */
export class WireParameter {
  private readonly keyLen: number;
  private readonly valueLen: number;
  private readonly stringLen: number;
  /** The entry's bytes without its own tag and length. */
  readonly entryLen: number;
  constructor(
    readonly key: string,
    readonly value: string | number | boolean | bigint,
  ) {
    this.keyLen = Buffer.byteLength(key);
    let stringLen = 0;
    let valueLen: number;
    if (typeof value === 'boolean') valueLen = 2;
    else if (typeof value === 'string') {
      stringLen = Buffer.byteLength(value);
      valueLen = lenField(stringLen);
    } else if (typeof value === 'bigint' || isInt64(value)) valueLen = 1 + int64Size(value);
    else valueLen = 9;
    this.stringLen = stringLen;
    this.valueLen = valueLen;
    this.entryLen = lenField(this.keyLen) + lenField(valueLen);
  }
  /** The whole entry with its tag and length. */
  size(): number {
    return lenField(this.entryLen);
  }
  /** The entry as field `tag` (length-delimited) of the message being written. */
  write(w: WireWriter, tag: number): void {
    w.lenHead(tag, this.entryLen);
    w.string(0x0a, this.key, this.keyLen);
    w.lenHead(0x12, this.valueLen);
    const v = this.value;
    if (typeof v === 'boolean') {
      w.byte((1 << 3) | VARINT);
      w.byte(v ? 1 : 0);
    } else if (typeof v === 'string') {
      w.string((3 << 3) | LEN, v, this.stringLen);
    } else if (typeof v === 'bigint' || isInt64(v)) {
      // Values past int64's range can only be a uint64.
      w.byte(((typeof v === 'bigint' && v > INT64_MAX ? 5 : 2) << 3) | VARINT);
      w.int64(v);
    } else {
      w.byte((4 << 3) | I64);
      w.buf.writeDoubleLE(v, w.pos);
      w.pos += 8;
    }
  }
}
