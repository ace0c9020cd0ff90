/**
 * Triton's `local` response cache: responses of models with
 * `response_cache { enable: true }` kept in memory up to a byte budget,
 * least recently used evicted first. Configured as tritonserver is:
 * `--cache-config local,size=<bytes>` (or the deprecated
 * `--response-cache-byte-size`).
 *
 * The key holds what Triton hashes (model name, version, each input by name
 * with its bytes, inputs in name order) plus each input's data type and
 * shape and the requested outputs, so that two requests whose bytes agree
 * but whose tensors differ never share an entry. Small requests are keyed
 * by those bytes themselves (no collisions at all), large ones by a
 * SHA-256 digest (none in practice, unlike a 64-bit hash).
 */
import { createHash } from 'node:crypto';
import { Errors } from '../errors.js';
import type { Tensor } from '../tensor/tensor.js';

type ParameterValue = string | number | boolean | bigint;

/** What a hit answers with: the outputs as the backend produced them (copied), and its parameters. */
export interface CachedResponse {
  readonly outputs: readonly Tensor[];
  readonly parameters?: Readonly<Record<string, ParameterValue>>;
}

/** Bookkeeping bytes charged per entry and per tensor, beyond the tensor bytes and names. */
const ENTRY_OVERHEAD_BYTES = 64;
const TENSOR_OVERHEAD_BYTES = 32;
/** The shortest key: a base64 SHA-256 digest or a short literal one. */
const KEY_BYTES = 45;
/** The smallest entry: one output of one byte with a one-letter name. */
export const MIN_ENTRY_BYTES = ENTRY_OVERHEAD_BYTES + KEY_BYTES + TENSOR_OVERHEAD_BYTES + 1 + 4 + 8 + 1;

let nextSerial = 1;

/** One stored response. */
export class CacheEntry {
  /** Unique per entry ever stored: a replay of a hit names the entry by key and serial without holding it. */
  readonly serial = nextSerial++;
  constructor(
    readonly response: CachedResponse,
    readonly bytes: number,
    /** "<model>\u0000<version>", so that an unloaded version's entries can go. */
    readonly owner: string,
  ) {}
}

/** Totals the nv_cache_* gauges read (durations in µs, as Triton's local cache reports them). */
export class CacheCounters {
  hits = 0;
  misses = 0;
  lookups = 0;
  evictions = 0;
  lookupUs = 0;
  insertionUs = 0;
}

export class ResponseCache {
  private readonly entries = new Map<string, CacheEntry>();
  private used = 0;
  readonly counters = new CacheCounters();

  constructor(
    /** The byte budget. */
    readonly size: number,
  ) {}

  get entryCount(): number {
    return this.entries.size;
  }

  /** Share of the budget in use, 0 to 1. */
  get utilization(): number {
    return this.size === 0 ? 0 : this.used / this.size;
  }

  /** The response under `key`, now the most recently used, or undefined. */
  lookup(key: string): CachedResponse | undefined {
    return this.lookupEntry(key)?.response;
  }

  /** The entry under `key`, now the most recently used, or undefined; counted as a lookup. */
  lookupEntry(key: string): CacheEntry | undefined {
    const c = this.counters;
    c.lookups += 1;
    const entry = this.entries.get(key);
    if (entry === undefined) {
      c.misses += 1;
      return undefined;
    }
    c.hits += 1;
    // Map order is insertion order: re-inserting marks it most recently used.
    this.entries.delete(key);
    this.entries.set(key, entry);
    return entry;
  }

  /**
   * A lookup of `key` that is known to find the entry numbered `serial`:
   * counted and marked most recently used as lookupEntry() would, and true,
   * when that entry is still stored; false (and nothing counted) when it was
   * evicted, replaced or dropped since.
   */
  lookupKnown(key: string, serial: number): boolean {
    const entry = this.entries.get(key);
    if (entry === undefined || entry.serial !== serial) return false;
    const c = this.counters;
    c.lookups += 1;
    c.hits += 1;
    this.entries.delete(key);
    this.entries.set(key, entry);
    return true;
  }

  /** Adds lookup time (ns) to the totals. */
  addLookupTime(ns: number): void {
    this.counters.lookupUs += ns / 1000;
  }

  /**
   * Stores a copy of `response` under `key`, evicting the least recently
   * used entries until it fits. A response larger than the whole budget is
   * not stored (returns false).
   */
  insert(key: string, response: CachedResponse, model: string, version: number): boolean {
    const started = process.hrtime.bigint();
    const bytes = entryBytes(key, response);
    let stored = false;
    if (bytes <= this.size) {
      const old = this.entries.get(key);
      if (old !== undefined) {
        this.entries.delete(key);
        this.used -= old.bytes;
      }
      while (this.used + bytes > this.size) {
        const oldest = this.entries.keys().next();
        if (oldest.done) break;
        const victim = this.entries.get(oldest.value)!;
        this.entries.delete(oldest.value);
        this.used -= victim.bytes;
        this.counters.evictions += 1;
      }
      this.entries.set(key, new CacheEntry(copyResponse(response), bytes, `${model}\u0000${version}`));
      this.used += bytes;
      stored = true;
    }
    this.counters.insertionUs += Number(process.hrtime.bigint() - started) / 1000;
    return stored;
  }

  /** Drops the entries of a model version that was unloaded (a reload may change its answers). */
  dropVersion(model: string, version: number): void {
    const owner = `${model}\u0000${version}`;
    for (const [key, entry] of this.entries) {
      if (entry.owner !== owner) continue;
      this.entries.delete(key);
      this.used -= entry.bytes;
    }
  }
}

function entryBytes(key: string, response: CachedResponse): number {
  let n = ENTRY_OVERHEAD_BYTES + key.length;
  for (const t of response.outputs) {
    n += TENSOR_OVERHEAD_BYTES + t.name.length + t.datatype.length + 8 * t.shape.length + t.data.byteLength;
  }
  if (response.parameters)
    n += JSON.stringify(response.parameters, (_k, v: unknown) => (typeof v === 'bigint' ? v.toString() : v)).length;
  return n;
}

/** Outputs may be views into buffers a backend reuses: an entry owns its bytes. */
function copyResponse(response: CachedResponse): CachedResponse {
  const outputs = response.outputs.map((t) => ({
    name: t.name,
    datatype: t.datatype,
    shape: [...t.shape],
    data: new Uint8Array(t.data),
  }));
  return response.parameters === undefined ? { outputs } : { outputs, parameters: { ...response.parameters } };
}

/** Requests up to this many key bytes use the bytes themselves as the key; larger ones a SHA-256 digest. */
const LITERAL_KEY_LIMIT = 1024;

function latin1(data: Uint8Array): string {
  const buf = Buffer.isBuffer(data) ? data : Buffer.from(data.buffer, data.byteOffset, data.byteLength);
  return buf.toString('latin1', 0, buf.byteLength);
}

function byName(a: Tensor, b: Tensor): number {
  return a.name < b.name ? -1 : a.name > b.name ? 1 : 0;
}

/**
 * The cache key of a request: model, version, inputs in name order (name,
 * type, shape, bytes), requested outputs. Small requests are keyed by those
 * bytes verbatim (one copy, no hashing); larger ones by their SHA-256.
 */
export function cacheKey(
  model: string,
  version: number,
  inputs: readonly Tensor[],
  requestedOutputs: readonly string[],
  load = 0,
): string {
  const ordered = inputs.length > 1 ? [...inputs].sort(byName) : inputs;
  const head = `${model}\u0000${version}\u0000${load}\u0000${requestedOutputs.join('\u0001')}\u0000`;
  let size = Buffer.byteLength(head);
  const meta = new Array<string>(ordered.length);
  for (let i = 0; i < ordered.length; i++) {
    const t = ordered[i]!;
    meta[i] = `${t.name}\u0000${t.datatype}\u0000${t.shape.join(',')}\u0000${t.data.byteLength}\u0000`;
    size += Buffer.byteLength(meta[i]!) + t.data.byteLength;
  }
  if (size <= LITERAL_KEY_LIMIT) {
    // The bytes as a one-byte string each, joined: no buffer to fill and read back.
    let key = 'k' + head;
    for (let i = 0; i < ordered.length; i++) key += meta[i]! + latin1(ordered[i]!.data);
    return key;
  }
  const h = createHash('sha256');
  h.update(head);
  for (let i = 0; i < ordered.length; i++) {
    h.update(meta[i]!);
    h.update(ordered[i]!.data);
  }
  return 'h' + h.digest('base64');
}

/**
 * Builds the cache from tritonserver's settings: cache name -> setting ->
 * value (`--cache-config <name>,<key>=<value>`). Undefined when none is
 * configured. Throws a start-up error for anything it cannot honour.
 */
export function createResponseCache(
  settings: Readonly<Record<string, Readonly<Record<string, string>>>> | undefined,
): ResponseCache | undefined {
  if (settings === undefined) return undefined;
  const names = Object.keys(settings);
  if (names.length === 0) return undefined;
  for (const name of names) {
    if (name !== 'local') {
      throw Errors.cacheConfig(
        `--cache-config: cache '${name}' is not available; the 'local' ` +
        `cache is the only one built in (--cache-config=local,size=<bytes>)`,
      );
    }
  }
  const local = settings['local']!;
  for (const key of Object.keys(local)) {
    if (key !== 'size')
      throw Errors.cacheConfig(
        `--cache-config: the local cache has no setting '${key}'; its only setting is 'size' (bytes)`,
      );
  }
  const raw = local['size'];
  if (raw === undefined) {
    throw Errors.cacheConfig(
      "Failed to initialize LocalCache: config didn't contain a " +
      "valid 'size' field. (--cache-config=local,size=<bytes>)",
    );
  }
  if (!/^\d+$/.test(raw.trim())) {
    throw Errors.cacheConfig(`--cache-config local,size=${raw}: the size must be a whole number of bytes`);
  }
  const size = Number(raw.trim());
  if (!Number.isSafeInteger(size)) throw Errors.cacheConfig(`--cache-config local,size=${raw}: the size is too large`);
  if (size < MIN_ENTRY_BYTES) {
    throw Errors.cacheConfig(
      `--cache-config local,size=${raw}: the cache could not hold a ` +
      `single response; the smallest entry takes ${MIN_ENTRY_BYTES} bytes`,
    );
  }
  return new ResponseCache(size);
}

/** Parses `--cache-config` values (`<name>,<key>=<value>`) with tritonserver's errors. */
export function parseCacheConfigFlags(values: readonly string[]): Record<string, Record<string, string>> {
  const out: Record<string, Record<string, string>> = {};
  for (const arg of values) {
    const comma = arg.indexOf(',');
    if (comma <= 0) {
      throw Errors.cacheConfig(
        `No cache specified. --cache-config option format is <cache name>,<setting>=<value>. Got ${arg}`,
      );
    }
    const eq = arg.indexOf('=', comma + 1);
    const setting = eq < 0 ? '' : arg.slice(comma + 1, eq);
    const value = eq < 0 ? '' : arg.slice(eq + 1);
    if (eq < 0 || setting === '' || value === '') {
      throw Errors.cacheConfig(`--cache-config option format is '<cache name>,<setting>=<value>'. Got ${arg}`);
    }
    (out[arg.slice(0, comma)] ??= {})[setting] = value;
  }
  return out;
}

/** The server-wide gauges of Triton's local cache: [name, help, read]. */
export function cacheGauges(cache: ResponseCache): Array<[string, string, () => number]> {
  const c = cache.counters;
  return [
    ['nv_cache_util', 'Share of the response cache budget in use, 0.0 to 1.0', () => cache.utilization],
    ['nv_cache_num_entries', 'Responses held in the response cache now', () => cache.entryCount],
    ['nv_cache_num_hits', 'Response cache lookups that found a response', () => c.hits],
    ['nv_cache_num_misses', 'Response cache lookups that found none', () => c.misses],
    ['nv_cache_num_lookups', 'Response cache lookups', () => c.lookups],
    ['nv_cache_num_evictions', 'Responses evicted from the response cache to make room', () => c.evictions],
    [
      'nv_cache_lookup_duration',
      'Time spent in response cache lookups (hits and misses), microseconds',
      () => Math.floor(c.lookupUs),
    ],
    [
      'nv_cache_insertion_duration',
      'Time spent storing responses in the response cache, microseconds',
      () => Math.floor(c.insertionUs),
    ],
  ];
}
