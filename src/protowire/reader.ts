/**
 * The protobuf wire primitives of the hand-written message readers (the
 * server's ModelInferRequest reader, the client's ModelInferResponse reader):
 * varints, length-delimited fields, strings and the InferParameter map both
 * messages carry. A reader reads the common case only; anything it does not
 * expect throws UNSUPPORTED, and the caller then decodes with protobuf-es's
 * fromBinary, which gives the exact result or error text.
 */
import type { InferParameter } from '../gen/grpc_service_pb.js';

/** Thrown inside a reader to leave the fast path; the reader's entry point turns it into undefined. */
export const UNSUPPORTED: unknown = new (class Unsupported {})();

/** Varints are read as numbers up to 7 bytes (49 bits); longer ones (negative numbers among them) are UNSUPPORTED. */
const MAX_VARINT_BYTES = 7;

/** proto3 strings must be valid UTF-8 (fromBinary refuses others); a leading U+FEFF is text. */
const utf8 = new TextDecoder('utf-8', { fatal: true, ignoreBOM: true });

const PARAMETER = 'inference.InferParameter';
const EMPTY = new Uint8Array(0);

/** An InferParameter as fromBinary builds it, with no value set. */
export const emptyParameter = (): InferParameter =>
  ({ $typeName: PARAMETER, parameterChoice: { case: undefined } }) as unknown as InferParameter;

/** A cursor over one message's bytes: each reader keeps one and reads a message with `run`. */
export class WireReader {
  buf: Uint8Array = EMPTY;
  pos = 0;

  /** Runs `read` over `bytes`: what it returns, or undefined where it met something UNSUPPORTED. */
  run<T>(bytes: Uint8Array, read: (limit: number) => T | undefined): T | undefined {
    this.buf = bytes;
    this.pos = 0;
    try {
      return read(bytes.length);
    } catch (e) {
      if (e === UNSUPPORTED) return undefined;
      throw e;
    } finally {
      this.buf = EMPTY;
    }
  }

  varint(): number {
    const buf = this.buf;
    let pos = this.pos;
    let result = 0;
    let scale = 1;
    for (let i = 0; i < MAX_VARINT_BYTES; i++) {
      if (pos >= buf.length) throw UNSUPPORTED;
      const b = buf[pos++]!;
      result += (b & 0x7f) * scale;
      if (b < 0x80) {
        this.pos = pos;
        return result;
      }
      scale *= 128;
    }
    throw UNSUPPORTED;
  }

  /** The end of a length-delimited field whose length comes next; past `limit` is UNSUPPORTED. */
  lengthEnd(limit: number): number {
    const len = this.varint();
    const end = this.pos + len;
    if (end > limit) throw UNSUPPORTED;
    return end;
  }

  /** Fails unless the field that ends at `end` was read to its end exactly. */
  expectEnd(end: number): void {
    if (this.pos !== end) throw UNSUPPORTED;
  }

  /** A string: short ASCII read directly, anything else through a strict TextDecoder as protobuf-es does. */
  string(limit: number): string {
    const end = this.lengthEnd(limit);
    const start = this.pos;
    this.pos = end;
    if (end - start < 64) {
      const buf = this.buf;
      let s = '';
      for (let i = start; i < end; i++) {
        const c = buf[i]!;
        if (c >= 0x80) return this.decodeUtf8(start, end);
        s += String.fromCharCode(c);
      }
      return s;
    }
    return this.decodeUtf8(start, end);
  }

  private decodeUtf8(start: number, end: number): string {
    try {
      return utf8.decode(this.buf.subarray(start, end));
    } catch {
      throw UNSUPPORTED;
    }
  }

  /** A `bytes` field as a view into the message. */
  bytes(limit: number): Uint8Array {
    const end = this.lengthEnd(limit);
    const view = this.buf.subarray(this.pos, end);
    this.pos = end;
    return view;
  }

  /** An InferParameter message. */
  parameter(limit: number): InferParameter {
    const end = this.lengthEnd(limit);
    const p = emptyParameter();
    while (this.pos < end) {
      const tag = this.varint();
      if (tag === 0x08) p.parameterChoice = { case: 'boolParam', value: this.varint() !== 0 };
      else if (tag === 0x10) p.parameterChoice = { case: 'int64Param', value: BigInt(this.varint()) };
      else if (tag === 0x1a) p.parameterChoice = { case: 'stringParam', value: this.string(end) };
      else if (tag === 0x21) {
        if (this.pos + 8 > end) throw UNSUPPORTED;
        const view = new DataView(this.buf.buffer, this.buf.byteOffset + this.pos, 8);
        p.parameterChoice = { case: 'doubleParam', value: view.getFloat64(0, true) };
        this.pos += 8;
      } else if (tag === 0x28) p.parameterChoice = { case: 'uint64Param', value: BigInt(this.varint()) };
      else throw UNSUPPORTED;
    }
    this.expectEnd(end);
    return p;
  }

  /** One entry of a map<string, InferParameter> into `map` (a later entry for a key replaces an earlier one). */
  mapEntry(map: Record<string, InferParameter>, limit: number): void {
    const end = this.lengthEnd(limit);
    let key = '';
    let value: InferParameter | undefined;
    while (this.pos < end) {
      const tag = this.varint();
      if (tag === 0x0a) key = this.string(end);
      else if (tag === 0x12) value = this.parameter(end);
      else throw UNSUPPORTED;
    }
    // An own key named __proto__ is left to the generic decoder's handling.
    if (this.pos !== end || key === '__proto__') throw UNSUPPORTED;
    map[key] = value ?? emptyParameter();
  }

  /** A packed repeated int64 (a shape's dims) appended to `out`, as bigints (as fromBinary gives them) or numbers. */
  packed(out: (number | bigint)[], limit: number, asBigint: boolean): void {
    const end = this.lengthEnd(limit);
    while (this.pos < end) {
      const v = this.varint();
      out.push(asBigint ? BigInt(v) : v);
    }
    this.expectEnd(end);
  }

  /**
   * Reads field `tag` into `head` when it is one of the fields 1 to 4 that ModelInferRequest and
   * ModelInferResponse share (model_name, model_version, id, parameters); false for any other field.
   */
  head(tag: number, head: InferHead, limit: number): boolean {
    switch (tag) {
      case 0x0a:
        head.modelName = this.string(limit);
        return true;
      case 0x12:
        head.modelVersion = this.string(limit);
        return true;
      case 0x1a:
        head.id = this.string(limit);
        return true;
      case 0x22:
        this.mapEntry(head.parameters, limit);
        return true;
      default:
        return false;
    }
  }

  /**
   * A request's InferInputTensor or a response's InferOutputTensor: both are name, datatype, shape and
   * parameters (fields 1 to 4); typed contents (field 5) and anything else are UNSUPPORTED.
   */
  tensor(limit: number, typeName: string, bigintShape: boolean): WireTensor {
    const end = this.lengthEnd(limit);
    let name = '';
    let datatype = '';
    const shape: (number | bigint)[] = [];
    const parameters: Record<string, InferParameter> = {};
    while (this.pos < end) {
      const tag = this.varint();
      if (tag === 0x0a) name = this.string(end);
      else if (tag === 0x12) datatype = this.string(end);
      else if (tag === 0x18) {
        const v = this.varint();
        shape.push(bigintShape ? BigInt(v) : v);
      } else if (tag === 0x1a) this.packed(shape, end, bigintShape);
      else if (tag === 0x22) this.mapEntry(parameters, end);
      else throw UNSUPPORTED;
    }
    this.expectEnd(end);
    return { $typeName: typeName, name, datatype, shape, parameters };
  }
}

/** Fields 1 to 4 of ModelInferRequest and ModelInferResponse alike. */
export class InferHead {
  modelName = '';
  modelVersion = '';
  id = '';
  parameters: Record<string, InferParameter> = {};
}

/** A tensor's fields as `tensor` reads them; shape holds bigints or numbers as asked. */
export interface WireTensor {
  $typeName: string;
  name: string;
  datatype: string;
  shape: (number | bigint)[];
  parameters: Record<string, InferParameter>;
}
