/**
 * OTLP/HTTP's protobuf body for traces (ExportTraceServiceRequest) written straight from finished spans into one
 * reused buffer, and its answer (ExportTraceServiceResponse) read back: the serializer the SDK's OTLP exporter
 * machinery runs on the export thread in place of its own, which costs several times more per span
 * (docs/tracing.md, "The OTLP serializer"). Same fields, order and defaults as the SDK's, so the same bytes.
 *
 * Field numbers: opentelemetry-proto, collector/trace/v1/trace_service.proto, trace/v1/trace.proto,
 * common/v1/common.proto, resource/v1/resource.proto.
 */
import type { AttributeValue, Attributes, HrTime, SpanContext } from '@opentelemetry/api';
import type { ReadableSpan } from '@opentelemetry/sdk-trace-base';
import { FinishedSpan, type WallClock } from './otel-spans.js';
import { STAMP_NAMES } from './stamp-codes.js';

/** The partial success a collector may answer with, as the SDK's exporter reads it. */
export interface TraceExportResponse {
  partialSuccess?: { rejectedSpans?: number; errorMessage?: string };
}

/** The serializer interface of @opentelemetry/otlp-exporter-base (its ISerializer). */
export interface TraceSerializer {
  serializeRequest(spans: ReadableSpan[]): Uint8Array | undefined;
  deserializeResponse(data: Uint8Array): TraceExportResponse;
}

// Tags as their byte, (field << 3) | wire type: 0 varint, 1 fixed64, 2 length-delimited, 5 fixed32.
const T_RESOURCE_SPANS = 0x0a; // ExportTraceServiceRequest.resource_spans = 1
const T_RS_RESOURCE = 0x0a; // ResourceSpans.resource = 1
const T_RS_SCOPE_SPANS = 0x12; // ResourceSpans.scope_spans = 2
const T_RS_SCHEMA_URL = 0x1a; // ResourceSpans.schema_url = 3
const T_RESOURCE_ATTRIBUTE = 0x0a; // Resource.attributes = 1
const T_RESOURCE_DROPPED = 0x10; // Resource.dropped_attributes_count = 2
const T_SS_SCOPE = 0x0a; // ScopeSpans.scope = 1
const T_SS_SPAN = 0x12; // ScopeSpans.spans = 2
const T_SS_SCHEMA_URL = 0x1a; // ScopeSpans.schema_url = 3
const T_SCOPE_NAME = 0x0a; // InstrumentationScope.name = 1
const T_SCOPE_VERSION = 0x12; // .version = 2
const T_SCOPE_ATTRIBUTE = 0x1a; // .attributes = 3
const T_SCOPE_DROPPED = 0x20; // .dropped_attributes_count = 4
const T_TRACE_ID = 0x0a; // Span.trace_id = 1 (also Link's)
const T_SPAN_ID = 0x12; // Span.span_id = 2 (also Link's)
const T_TRACE_STATE = 0x1a; // Span.trace_state = 3 (also Link's)
const T_PARENT_SPAN_ID = 0x22; // Span.parent_span_id = 4
const T_NAME = 0x2a; // Span.name = 5
const T_KIND = 0x30; // Span.kind = 6
const T_START = 0x39; // Span.start_time_unix_nano = 7
const T_END = 0x41; // Span.end_time_unix_nano = 8
const T_ATTRIBUTE = 0x4a; // Span.attributes = 9
const T_DROPPED_ATTRIBUTES = 0x50; // Span.dropped_attributes_count = 10
const T_EVENT = 0x5a; // Span.events = 11
const T_DROPPED_EVENTS = 0x60; // Span.dropped_events_count = 12
const T_LINK = 0x6a; // Span.links = 13
const T_DROPPED_LINKS = 0x70; // Span.dropped_links_count = 14
const T_STATUS = 0x7a; // Span.status = 15
const T_FLAGS_0 = 0x85; // Span.flags = 16, fixed32: two bytes of tag
const T_FLAGS_1 = 0x01;
const T_EVENT_TIME = 0x09; // Span.Event.time_unix_nano = 1
const T_EVENT_NAME = 0x12; // .name = 2
const T_EVENT_ATTRIBUTE = 0x1a; // .attributes = 3
const T_EVENT_DROPPED = 0x20; // .dropped_attributes_count = 4
const T_LINK_ATTRIBUTE = 0x22; // Span.Link.attributes = 4
const T_LINK_DROPPED = 0x28; // .dropped_attributes_count = 5
const T_LINK_FLAGS = 0x35; // .flags = 6, fixed32
const T_STATUS_MESSAGE = 0x12; // Status.message = 2
const T_STATUS_CODE = 0x18; // Status.code = 3
const T_KV_KEY = 0x0a; // KeyValue.key = 1
const T_KV_VALUE = 0x12; // KeyValue.value = 2
const T_STRING_VALUE = 0x0a; // AnyValue.string_value = 1
const T_BOOL_VALUE = 0x10; // .bool_value = 2
const T_INT_VALUE = 0x18; // .int_value = 3
const T_DOUBLE_VALUE = 0x21; // .double_value = 4
const T_ARRAY_VALUE = 0x2a; // .array_value = 5
const T_KVLIST_VALUE = 0x32; // .kvlist_value = 6
const T_BYTES_VALUE = 0x3a; // .bytes_value = 7
const T_VALUES = 0x0a; // ArrayValue.values = 1, KeyValueList.values = 1

/** Span.flags: the W3C trace flags, and whether the parent's remoteness is known and true (SpanFlags). */
const FLAGS_HAS_IS_REMOTE = 0x100;
const FLAGS_IS_REMOTE = 0x200;

const TWO_32 = 0x1_0000_0000;
const INT64_MIN = -(2 ** 63);
const INT64_END = 2 ** 63;

/** Hex digit values by character code; what is not a digit counts as 0. */
const HEX = new Uint8Array(128);
for (let i = 0; i < 10; i++) HEX[48 + i] = i;
for (let i = 0; i < 6; i++) HEX[97 + i] = HEX[65 + i] = 10 + i;

const varintSize = (n: number): number => (n < 0x80 ? 1 : n < 0x4000 ? 2 : n < 0x20_0000 ? 3 : n < 0x1000_0000 ? 4 : 5);

/** The last id written, its text and bytes (its length first). */
interface IdCache {
  text: string | undefined;
  readonly bytes: Uint8Array;
  size: number;
}
const idCache = (): IdCache => ({ text: undefined, bytes: new Uint8Array(64), size: 0 });

/**
 * A growing buffer that messages are written into once: a message's length goes in front of it, in the bytes
 * reserved for it when it started; when the length needs more or fewer, the message is moved (rarely: each kind
 * of message reserves what it usually needs).
 */
class Writer {
  buf = Buffer.allocUnsafeSlow(256 * 1024);
  pos = 0;

  /** Room for `n` more bytes. */
  room(n: number): void {
    if (this.pos + n <= this.buf.length) return;
    const grown = Buffer.allocUnsafeSlow(Math.max(2 * this.buf.length, this.pos + n));
    this.buf.copy(grown, 0, 0, this.pos);
    this.buf = grown;
  }

  byte(b: number): void {
    this.room(1);
    this.buf[this.pos++] = b;
  }

  /** A varint of an integer in [0, 2^32). */
  varint32(v: number): void {
    this.room(5);
    const buf = this.buf;
    let pos = this.pos;
    while (v >= 0x80) {
      buf[pos++] = (v & 0x7f) | 0x80;
      v >>>= 7;
    }
    buf[pos++] = v;
    this.pos = pos;
  }

  /** A varint as the SDK writes a number: past 2^32 from its two 32-bit halves, a negative one as int64 does. */
  varint(value: number): void {
    if (value >= 0 && value < TWO_32) {
      this.varint32(value >>> 0);
      return;
    }
    let low: number;
    let high: number;
    if (value >= 0) {
      low = value >>> 0;
      high = (value / TWO_32) >>> 0;
    } else {
      const abs = -value;
      low = (~(abs >>> 0) + 1) >>> 0;
      high = ~((abs / TWO_32) >>> 0) >>> 0;
      if (low === 0) high = (high + 1) >>> 0;
    }
    this.room(10);
    const buf = this.buf;
    while (high > 0 || low >= 0x80) {
      buf[this.pos++] = (low & 0x7f) | 0x80;
      low = ((low >>> 7) | (high << 25)) >>> 0;
      high >>>= 7;
    }
    buf[this.pos++] = low;
  }

  fixed32(v: number): void {
    this.room(4);
    this.buf.writeUInt32LE(v >>> 0, this.pos);
    this.pos += 4;
  }

  double(v: number): void {
    this.room(8);
    this.pos = this.buf.writeDoubleLE(v, this.pos);
  }

  /** A fixed64 from its two 32-bit halves, little-endian. */
  private fixed64(low: number, high: number): void {
    this.room(8);
    const buf = this.buf;
    const p = this.pos;
    buf[p] = low;
    buf[p + 1] = low >>> 8;
    buf[p + 2] = low >>> 16;
    buf[p + 3] = low >>> 24;
    buf[p + 4] = high;
    buf[p + 5] = high >>> 8;
    buf[p + 6] = high >>> 16;
    buf[p + 7] = high >>> 24;
    this.pos = p + 8;
  }

  /** The last seconds written by time(), and sec * 1e9 as two 32-bit halves: a batch's times share their seconds. */
  private sec = -1;
  private secLow = 0;
  private secHigh = 0;

  /**
   * An HrTime as fixed64 nanoseconds, exact: seconds split at 2^16 keep every product below 2^53. Beyond uint64
   * (year 2554) it wraps, as the SDK's does.
   */
  time(t: HrTime): void {
    const sec = t[0];
    if (sec !== this.sec) {
      const fromUpper = ((sec / 0x1_0000) >>> 0) * 1e9; // seconds = upper * 2^16 + lower; < 2^46
      const fromLower = (sec & 0xffff) * 1e9; // < 2^46
      const lowSum = (fromUpper & 0xffff) * 0x1_0000 + (fromLower % TWO_32); // < 2^33
      this.secLow = lowSum % TWO_32;
      const carry = lowSum >= TWO_32 ? 1 : 0;
      this.secHigh = (Math.floor(fromUpper / 0x1_0000) + Math.floor(fromLower / TWO_32) + carry) >>> 0;
      this.sec = sec;
    }
    const lowSum = this.secLow + t[1];
    const low = lowSum >>> 0;
    const high = lowSum >= TWO_32 ? (this.secHigh + Math.floor(lowSum / TWO_32)) >>> 0 : this.secHigh;
    this.fixed64(low, high);
  }

  /** A record's time (ns since the clock's base) as fixed64 nanoseconds since the epoch. */
  wall(clock: WallClock, rel: number): void {
    if (!(rel >= 0)) {
      this.time(clock.hrTime(rel));
      return;
    }
    // rel's halves without a double modulo (a call into the C library): division by 2^32 and the product are exact.
    const relHigh = Math.floor(rel / TWO_32);
    const lowSum = clock.low + (rel - relHigh * TWO_32);
    this.fixed64(lowSum >>> 0, (clock.high + relHigh + (lowSum >= TWO_32 ? 1 : 0)) >>> 0);
  }

  /** Bytes written before (a few dozen at most). */
  raw(bytes: Uint8Array): void {
    const n = bytes.length;
    this.room(n);
    const buf = this.buf;
    const p = this.pos;
    for (let i = 0; i < n; i++) buf[p + i] = bytes[i]!;
    this.pos = p + n;
  }

  /** A string's length and UTF-8 bytes (lone surrogates as U+FFFD, as TextEncoder writes them). */
  string(s: string): void {
    const n = s.length;
    const head = varintSize(n);
    this.room(head + n);
    const buf = this.buf;
    let p = this.pos + head;
    for (let i = 0; i < n; i++) {
      const c = s.charCodeAt(i);
      if (c >= 0x80) {
        this.utf8(s);
        return;
      }
      buf[p++] = c;
    }
    this.varint32(n);
    this.pos = p;
  }

  private utf8(s: string): void {
    const len = Buffer.byteLength(s, 'utf8');
    this.varint32(len);
    this.room(len);
    this.pos += this.buf.write(s, this.pos, len, 'utf8');
  }

  /** Hex text as its bytes, with their length (ids: 16 or 8 bytes). */
  hex(s: string): void {
    const n = s.length >>> 1;
    this.varint32(n);
    this.room(n);
    const buf = this.buf;
    let p = this.pos;
    for (let i = 0; i < 2 * n; i += 2) {
      buf[p++] = (HEX[s.charCodeAt(i) & 0x7f]! << 4) | HEX[s.charCodeAt(i + 1) & 0x7f]!;
    }
    this.pos = p;
  }

  /**
   * An id as hex(), `cache` holding the last one's text and bytes: a trace's spans share their trace id, and a
   * span's parent is most often the span written before it.
   */
  id(s: string, cache: IdCache): void {
    if (s !== cache.text) {
      const start = this.pos;
      this.hex(s);
      const size = this.pos - start;
      if (size > cache.bytes.length) cache.text = undefined;
      else {
        cache.text = s;
        const buf = this.buf;
        const bytes = cache.bytes;
        for (let i = 0; i < size; i++) bytes[i] = buf[start + i]!;
        cache.size = size;
      }
      return;
    }
    const size = cache.size;
    this.room(size);
    const buf = this.buf;
    const bytes = cache.bytes;
    const p = this.pos;
    for (let i = 0; i < size; i++) buf[p + i] = bytes[i]!;
    this.pos = p + size;
  }

  /** An id from its bytes, with their length. */
  idBytes(from: Uint8Array, at: number, n: number): void {
    this.room(n + 1);
    const buf = this.buf;
    let p = this.pos;
    buf[p++] = n;
    for (let i = 0; i < n; i++) buf[p + i] = from[at + i]!;
    this.pos = p + n;
  }

  bytes(b: Uint8Array): void {
    this.varint32(b.length);
    this.room(b.length);
    this.buf.set(b, this.pos);
    this.pos += b.length;
  }

  /** Starts a length-delimited message, reserving `reserve` bytes for its length; end() takes what this returns. */
  begin(reserve: number): number {
    this.room(reserve);
    this.pos += reserve;
    return this.pos;
  }

  /** Writes the length of the message started at `body`, moving the message where the length needs more or less. */
  end(body: number, reserve: number): void {
    const len = this.pos - body;
    const size = varintSize(len);
    let at = body - reserve;
    if (size !== reserve) {
      this.room(size - reserve);
      this.buf.copyWithin(at + size, body, this.pos);
      this.pos += size - reserve;
    }
    const buf = this.buf;
    let v = len;
    while (v >= 0x80) {
      buf[at++] = (v & 0x7f) | 0x80;
      v >>>= 7;
    }
    buf[at] = v;
  }
}

/** Bytes reserved for lengths: spans of 128 B to 16 KiB, events and attributes under 128 B, the rest up to 2 MiB. */
const SPAN_LEN = 2;
const SMALL_LEN = 1;
const LARGE_LEN = 3;

function writeAnyValue(w: Writer, value: AttributeValue | undefined | null | object): void {
  if (typeof value === 'string') {
    w.byte(T_STRING_VALUE);
    w.string(value);
  } else if (typeof value === 'boolean') {
    w.byte(T_BOOL_VALUE);
    w.byte(value ? 1 : 0);
  } else if (typeof value === 'number') {
    if (Number.isInteger(value) && value >= INT64_MIN && value < INT64_END) {
      w.byte(T_INT_VALUE);
      w.varint(value);
    } else {
      w.byte(T_DOUBLE_VALUE);
      w.double(value);
    }
  } else if (value instanceof Uint8Array) {
    w.byte(T_BYTES_VALUE);
    w.bytes(value);
  } else if (Array.isArray(value)) {
    w.byte(T_ARRAY_VALUE);
    const list = w.begin(SMALL_LEN);
    for (const item of value as unknown[]) {
      w.byte(T_VALUES);
      const one = w.begin(SMALL_LEN);
      writeAnyValue(w, item as AttributeValue);
      w.end(one, SMALL_LEN);
    }
    w.end(list, SMALL_LEN);
  } else if (typeof value === 'object' && value !== null) {
    w.byte(T_KVLIST_VALUE);
    const list = w.begin(SMALL_LEN);
    const entries = value as Record<string, AttributeValue>;
    for (const key in entries) {
      if (!Object.prototype.hasOwnProperty.call(entries, key)) continue;
      w.byte(T_VALUES);
      writeKeyValue(w, key, entries[key]);
    }
    w.end(list, SMALL_LEN);
  }
  // Anything else (undefined, null) is an empty AnyValue.
}

/** A KeyValue message, its tag already written. */
function writeKeyValue(w: Writer, key: string, value: AttributeValue | undefined): void {
  const kv = w.begin(SMALL_LEN);
  w.byte(T_KV_KEY);
  w.string(key);
  w.byte(T_KV_VALUE);
  const v = w.begin(SMALL_LEN);
  writeAnyValue(w, value);
  w.end(v, SMALL_LEN);
  w.end(kv, SMALL_LEN);
}

function writeAttributes(w: Writer, tag: number, attributes: Attributes): void {
  for (const key in attributes) {
    if (!Object.prototype.hasOwnProperty.call(attributes, key)) continue;
    w.byte(tag);
    writeKeyValue(w, key, attributes[key]);
  }
}

/** Span.flags and Span.Link.flags: the trace flags, and the remoteness of the parent (or of the linked span). */
const spanFlags = (traceFlags: number, isRemote: boolean | undefined): number =>
  (traceFlags & 0xff) | FLAGS_HAS_IS_REMOTE | (isRemote ? FLAGS_IS_REMOTE : 0);

/** The trace id last written; the span's own id; its parent's id, most often the id of the span written before. */
const traceIds = idCache();
let ownIds = idCache();
let parentIds = idCache();

/** A field's bytes: its tag, then a string's length and UTF-8 bytes. */
function stringField(tag: number, text: string, after: readonly number[] = []): Uint8Array {
  const bytes = Buffer.from(text, 'utf8');
  if (bytes.length >= 0x80) throw new Error(`${text}: too long for a field written ahead`);
  return Uint8Array.from([tag, bytes.length, ...bytes, ...after]);
}

/** Per stamp code, the end of its Span.Event after the time: the name and dropped_attributes_count 0. */
const EVENT_TAILS = STAMP_NAMES.map((name) => stringField(T_EVENT_NAME, name, [T_EVENT_DROPPED, 0]));
/** KeyValue.key of the Triton attributes of a model span, in the order the attributes object has them. */
const KEY_MODEL_NAME = stringField(T_KV_KEY, 'triton.model_name');
const KEY_MODEL_VERSION = stringField(T_KV_KEY, 'triton.model_version');
const KEY_TRACE_ID = stringField(T_KV_KEY, 'triton.trace_id');
const KEY_TRACE_PARENT_ID = stringField(T_KV_KEY, 'triton.trace_parent_id');
const KEY_REQUEST_ID = stringField(T_KV_KEY, 'triton.request_id');
/** A FinishedSpan's fields after its events: no dropped events or links, status UNSET, then flags' tag. */
const FINISHED_TAIL = Uint8Array.from([T_DROPPED_EVENTS, 0, T_DROPPED_LINKS, 0, T_STATUS, 2, T_STATUS_CODE, 0]);

function writeTritonAttribute(w: Writer, key: Uint8Array, value: AttributeValue): void {
  w.byte(T_ATTRIBUTE);
  const kv = w.begin(SMALL_LEN);
  w.raw(key);
  w.byte(T_KV_VALUE);
  const v = w.begin(SMALL_LEN);
  writeAnyValue(w, value);
  w.end(v, SMALL_LEN);
  w.end(kv, SMALL_LEN);
}

/** Span names (InferRequest, compute, the models') as a string field's length and UTF-8 bytes, made once each. */
const NAMES = new Map<string, Uint8Array>();
const MAX_NAMES = 1024;

function encodedName(name: string): Uint8Array {
  let bytes = NAMES.get(name);
  if (bytes === undefined) {
    const text = Buffer.from(name, 'utf8');
    const head: number[] = [];
    let n = text.length;
    for (; n >= 0x80; n >>>= 7) head.push((n & 0x7f) | 0x80);
    bytes = Uint8Array.from([...head, n, ...text]);
    if (NAMES.size >= MAX_NAMES) NAMES.clear();
    NAMES.set(name, bytes);
  }
  return bytes;
}

/** triton.model_name, from the span name's encoded bytes: writeTritonAttribute's bytes for that string. */
function writeNameAttribute(w: Writer, name: Uint8Array, text: string): void {
  const value = 1 + name.length; // AnyValue: the string's tag, length and bytes
  if (KEY_MODEL_NAME.length + 2 + value >= 0x80) {
    writeTritonAttribute(w, KEY_MODEL_NAME, text);
    return;
  }
  w.byte(T_ATTRIBUTE);
  w.byte(KEY_MODEL_NAME.length + 2 + value);
  w.raw(KEY_MODEL_NAME);
  w.byte(T_KV_VALUE);
  w.byte(value);
  w.byte(T_STRING_VALUE);
  w.raw(name);
}

/** A Triton attribute of an integer value: writeTritonAttribute's bytes, without measuring the messages after. */
function writeIntAttribute(w: Writer, key: Uint8Array, value: number): void {
  if (!(value >= 0 && value < TWO_32 && Number.isInteger(value))) {
    writeTritonAttribute(w, key, value);
    return;
  }
  const any = 1 + varintSize(value); // AnyValue: int_value's tag and varint
  w.byte(T_ATTRIBUTE);
  w.byte(key.length + 2 + any);
  w.raw(key);
  w.byte(T_KV_VALUE);
  w.byte(any);
  w.byte(T_INT_VALUE);
  w.varint32(value);
}

/** The fields every span starts with: its ids, trace state, parent and name. */
function writeSpanHead(w: Writer, context: SpanContext, parent: SpanContext | undefined, name: string): void {
  w.byte(T_TRACE_ID);
  w.id(context.traceId, traceIds);
  w.byte(T_SPAN_ID);
  w.id(context.spanId, ownIds);
  const traceState = context.traceState?.serialize();
  if (traceState) {
    w.byte(T_TRACE_STATE);
    w.string(traceState);
  }
  if (parent?.spanId) {
    w.byte(T_PARENT_SPAN_ID);
    w.id(parent.spanId, parentIds);
  }
  w.byte(T_NAME);
  w.string(name);
}

/** A span's id from its bytes or its hex; `cache` for hex (see Writer.id). */
function writeOwnId(w: Writer, span: FinishedSpan, cache: IdCache): void {
  if (span.idHex !== undefined) w.id(span.idHex, cache);
  else w.idBytes(span.group.ids, span.idAt, 8);
}

/**
 * A span of ours, from the numbers it keeps: the bytes writeSpan writes for it through the ReadableSpan fields,
 * without making the objects those fields are (the tests compare both with the SDK's).
 */
function writeFinishedSpan(w: Writer, span: FinishedSpan): void {
  const body = w.begin(SPAN_LEN);
  const group = span.group;
  const parent = span.parentSpanContext;
  w.byte(T_TRACE_ID);
  if (group.traceHex !== undefined) w.id(group.traceHex, traceIds);
  else w.idBytes(group.ids, group.traceAt, 16);
  w.byte(T_SPAN_ID);
  writeOwnId(w, span, ownIds);
  if (group.traceStateText) {
    w.byte(T_TRACE_STATE);
    w.string(group.traceStateText);
  }
  if (parent instanceof FinishedSpan) {
    w.byte(T_PARENT_SPAN_ID);
    writeOwnId(w, parent, parentIds);
  } else if (parent?.spanId) {
    w.byte(T_PARENT_SPAN_ID);
    w.id(parent.spanId, parentIds);
  }
  w.byte(T_NAME);
  const name = encodedName(span.name);
  w.raw(name);
  w.byte(T_KIND);
  w.byte(span.kind + 1);
  const clock = span.clock;
  w.byte(T_START);
  w.wall(clock, span.start);
  w.byte(T_END);
  w.wall(clock, span.end);
  if (span.model) {
    writeNameAttribute(w, name, span.name);
    writeIntAttribute(w, KEY_MODEL_VERSION, span.modelVersion);
    writeIntAttribute(w, KEY_TRACE_ID, span.tritonTraceId);
    writeIntAttribute(w, KEY_TRACE_PARENT_ID, span.tritonParentId);
    if (span.requestId !== undefined) writeTritonAttribute(w, KEY_REQUEST_ID, span.requestId);
  }
  w.byte(T_DROPPED_ATTRIBUTES);
  w.byte(0);
  // The span's events, among its group's (span index, stamp code, time) triples.
  const events = group.events;
  const index = span.index;
  for (let i = 0; i < events.length; i += 3) {
    if (events[i] !== index) continue;
    const tail = EVENT_TAILS[events[i + 1]!]!;
    w.byte(T_EVENT);
    w.byte(1 + 8 + tail.length);
    w.byte(T_EVENT_TIME);
    w.wall(clock, events[i + 2]!);
    w.raw(tail);
  }
  w.raw(FINISHED_TAIL);
  w.byte(T_FLAGS_0);
  w.byte(T_FLAGS_1);
  w.fixed32(spanFlags(span.traceFlags, parent?.isRemote));
  w.end(body, SPAN_LEN);
  const last = parentIds;
  parentIds = ownIds;
  ownIds = last;
}

function writeSpan(w: Writer, span: ReadableSpan): void {
  if (span instanceof FinishedSpan) {
    writeFinishedSpan(w, span);
    return;
  }
  const body = w.begin(SPAN_LEN);
  const context = span.spanContext();
  const parent = span.parentSpanContext;
  writeSpanHead(w, context, parent, span.name);
  // OTLP's SpanKind counts from UNSPECIFIED = 0, the API's from INTERNAL = 0.
  const kind = (span.kind as number | undefined) == null ? 0 : span.kind + 1;
  if (kind !== 0) {
    w.byte(T_KIND);
    w.varint(kind);
  }
  w.byte(T_START);
  w.time(span.startTime);
  w.byte(T_END);
  w.time(span.endTime);
  if (span.attributes) writeAttributes(w, T_ATTRIBUTE, span.attributes);
  w.byte(T_DROPPED_ATTRIBUTES);
  w.varint(span.droppedAttributesCount);
  for (const event of span.events) {
    w.byte(T_EVENT);
    const e = w.begin(SMALL_LEN);
    w.byte(T_EVENT_TIME);
    w.time(event.time);
    w.byte(T_EVENT_NAME);
    w.string(event.name);
    if (event.attributes) writeAttributes(w, T_EVENT_ATTRIBUTE, event.attributes);
    w.byte(T_EVENT_DROPPED);
    w.varint(event.droppedAttributesCount || 0);
    w.end(e, SMALL_LEN);
  }
  w.byte(T_DROPPED_EVENTS);
  w.varint(span.droppedEventsCount);
  for (const link of span.links) {
    w.byte(T_LINK);
    const l = w.begin(SMALL_LEN);
    const linked = link.context;
    w.byte(T_TRACE_ID);
    w.hex(linked.traceId);
    w.byte(T_SPAN_ID);
    w.hex(linked.spanId);
    const linkedState = linked.traceState?.serialize();
    if (linkedState) {
      w.byte(T_TRACE_STATE);
      w.string(linkedState);
    }
    if (link.attributes) writeAttributes(w, T_LINK_ATTRIBUTE, link.attributes);
    w.byte(T_LINK_DROPPED);
    w.varint(link.droppedAttributesCount || 0);
    w.byte(T_LINK_FLAGS);
    w.fixed32(spanFlags(linked.traceFlags, linked.isRemote));
    w.end(l, SMALL_LEN);
  }
  w.byte(T_DROPPED_LINKS);
  w.varint(span.droppedLinksCount);
  w.byte(T_STATUS);
  const status = w.begin(SMALL_LEN);
  if (span.status.message) {
    w.byte(T_STATUS_MESSAGE);
    w.string(span.status.message);
  }
  w.byte(T_STATUS_CODE);
  w.varint(span.status.code);
  w.end(status, SMALL_LEN);
  w.byte(T_FLAGS_0);
  w.byte(T_FLAGS_1);
  w.fixed32(spanFlags(context.traceFlags, parent?.isRemote));
  w.end(body, SPAN_LEN);
  const last = parentIds;
  parentIds = ownIds;
  ownIds = last;
}

function writeScopeSpans(w: Writer, spans: readonly ReadableSpan[]): void {
  const scope = spans[0]!.instrumentationScope;
  const body = w.begin(LARGE_LEN);
  w.byte(T_SS_SCOPE);
  const s = w.begin(SMALL_LEN);
  w.byte(T_SCOPE_NAME);
  w.string(scope.name);
  if (scope.version) {
    w.byte(T_SCOPE_VERSION);
    w.string(scope.version);
  }
  const extra = scope as { attributes?: Attributes; droppedAttributesCount?: number };
  if (extra.attributes) writeAttributes(w, T_SCOPE_ATTRIBUTE, extra.attributes);
  if (extra.droppedAttributesCount) {
    w.byte(T_SCOPE_DROPPED);
    w.varint(extra.droppedAttributesCount);
  }
  w.end(s, SMALL_LEN);
  for (const span of spans) {
    w.byte(T_SS_SPAN);
    writeSpan(w, span);
  }
  if (scope.schemaUrl) {
    w.byte(T_SS_SCHEMA_URL);
    w.string(scope.schemaUrl);
  }
  w.end(body, LARGE_LEN);
}

function writeResourceSpans(w: Writer, scopes: Iterable<readonly ReadableSpan[]>, first: ReadableSpan): void {
  const resource = first.resource;
  w.byte(T_RESOURCE_SPANS);
  const body = w.begin(LARGE_LEN);
  w.byte(T_RS_RESOURCE);
  const r = w.begin(SMALL_LEN);
  if (resource.attributes) writeAttributes(w, T_RESOURCE_ATTRIBUTE, resource.attributes);
  w.byte(T_RESOURCE_DROPPED);
  w.byte(0);
  w.end(r, SMALL_LEN);
  for (const spans of scopes) {
    w.byte(T_RS_SCOPE_SPANS);
    writeScopeSpans(w, spans);
  }
  if (resource.schemaUrl) {
    w.byte(T_RS_SCHEMA_URL);
    w.string(resource.schemaUrl);
  }
  w.end(body, LARGE_LEN);
}

const writer = new Writer();

/** The request's bytes: spans grouped by resource, then scope (the same objects), in the order first seen. */
export function serializeTraceRequest(spans: readonly ReadableSpan[]): Uint8Array {
  const w = writer;
  w.pos = 0;
  if (spans.length > 0) {
    const first = spans[0]!;
    let shared = true;
    for (let i = 1; i < spans.length && shared; i++) {
      shared = spans[i]!.resource === first.resource && spans[i]!.instrumentationScope === first.instrumentationScope;
    }
    if (shared) writeResourceSpans(w, [spans], first);
    else {
      const byResource = new Map<unknown, Map<unknown, ReadableSpan[]>>();
      for (const span of spans) {
        let byScope = byResource.get(span.resource);
        if (byScope === undefined) byResource.set(span.resource, (byScope = new Map()));
        const list = byScope.get(span.instrumentationScope);
        if (list === undefined) byScope.set(span.instrumentationScope, [span]);
        else list.push(span);
      }
      for (const byScope of byResource.values()) {
        writeResourceSpans(w, byScope.values(), byScope.values().next().value![0]!);
      }
    }
  }
  // A copy: the transport holds the body through its retries while the next export is written.
  const body = Buffer.allocUnsafeSlow(w.pos);
  w.buf.copy(body, 0, 0, w.pos);
  return body;
}

/** Reads a message's fields; what it does not know it skips, and a message cut short throws. */
class Reader {
  pos = 0;
  constructor(private readonly buf: Uint8Array) {}

  get done(): boolean {
    return this.pos >= this.buf.length;
  }

  varint(): number {
    let value = 0;
    let scale = 1;
    for (;;) {
      if (this.pos >= this.buf.length) throw new Error('OTLP response cut short inside a varint');
      const b = this.buf[this.pos++]!;
      value += (b & 0x7f) * scale;
      if (b < 0x80) return value;
      scale *= 0x80;
    }
  }

  bytes(): Uint8Array {
    const len = this.varint();
    if (this.pos + len > this.buf.length) {
      throw new Error(`OTLP response cut short: ${len} bytes at ${this.pos}, ${this.buf.length - this.pos} left`);
    }
    this.pos += len;
    return this.buf.subarray(this.pos - len, this.pos);
  }

  skip(wireType: number): void {
    if (wireType === 0) this.varint();
    else if (wireType === 1) this.pos += 8;
    else if (wireType === 2) this.bytes();
    else if (wireType === 5) this.pos += 4;
    else throw new Error(`OTLP response: wire type ${wireType} cannot be skipped`);
  }
}

const utf8 = new TextDecoder();

/** ExportTraceServiceResponse: partial_success (1) { rejected_spans (1, int64), error_message (2) }. */
export function deserializeTraceResponse(data: Uint8Array): TraceExportResponse {
  const response: TraceExportResponse = {};
  const r = new Reader(data);
  while (!r.done) {
    const tag = r.varint();
    if (tag !== 0x0a) {
      r.skip(tag & 7);
      continue;
    }
    const partial: NonNullable<TraceExportResponse['partialSuccess']> = {};
    const p = new Reader(r.bytes());
    while (!p.done) {
      const field = p.varint();
      if (field === 0x08) partial.rejectedSpans = p.varint();
      else if (field === 0x12) partial.errorMessage = utf8.decode(p.bytes());
      else p.skip(field & 7);
    }
    response.partialSuccess = partial;
  }
  return response;
}

/**
 * The serializer the exporter runs. `onAnswer` sees each answer the collector sent with a success status: one with
 * partial_success.rejected_spans names spans it refused (the SDK's exporter itself only logs it).
 */
export function traceSerializer(onAnswer?: (answer: TraceExportResponse) => void): TraceSerializer {
  return {
    serializeRequest: (spans) => serializeTraceRequest(spans),
    deserializeResponse: (data) => {
      const answer = deserializeTraceResponse(data);
      onAnswer?.(answer);
      return answer;
    },
  };
}
