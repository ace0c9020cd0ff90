/**
 * Access control for `--auth-keys`: which key a request carries
 * (`Authorization: Bearer <secret>`, the same in gRPC metadata), whether its
 * scopes open the API group and model asked for, and the failures that
 * answer otherwise (401, 403, 429). Frontends call `check` before a
 * handler runs; the keys table is swapped whole when the file is re-read,
 * so a request checked against the old table finishes as admitted.
 *
 * Constant time: the presented token is hashed once with SHA-256 and the
 * digest is looked up in a map of the keys' digests. How long the lookup
 * takes depends on the digest, which tells an attacker nothing usable about
 * any secret (finding a secret from how close its digest comes to another
 * digest is SHA-256 preimage search), and no secret is ever compared byte by
 * byte. Tokens longer than MAX_TOKEN_LENGTH are refused before hashing.
 */
import { hash } from 'node:crypto';
import { readFileSync, statSync } from 'node:fs';
import type { Logger } from 'pino';
import { Errors } from '../errors.js';
import { FailureLimiter } from './failure-limiter.js';
import {
  ANONYMOUS,
  type KeyEntry,
  type KeyTable,
  type Principal,
  KeysFileError,
  MAX_KEYS_FILE_BYTES,
  parseKeysFile,
} from './keys-file.js';
import { type ApiGroup, Grants } from './scopes.js';

/** Longer than any secret `nereid keys create` makes (47 characters); longer tokens are refused unhashed. */
export const MAX_TOKEN_LENGTH = 512;
/** `--auth-failure-limit`'s default: failed checks a minute per client address before 429. */
export const DEFAULT_FAILURE_LIMIT = 20;

export type AuthFailureReason = 'missing' | 'malformed' | 'unknown' | 'scope' | 'rate_limited';
export const AUTH_FAILURE_REASONS: readonly AuthFailureReason[] = [
  'missing',
  'malformed',
  'unknown',
  'scope',
  'rate_limited',
];

/** Why a request is refused, with its HTTP and gRPC status. */
export interface AuthFailure {
  readonly code: string;
  readonly reason: AuthFailureReason;
  readonly httpStatus: 401 | 403 | 429;
  /** google.rpc.Code: UNAUTHENTICATED (16), PERMISSION_DENIED (7), RESOURCE_EXHAUSTED (8). */
  readonly grpcStatus: 16 | 7 | 8;
  readonly message: string;
  /** For 429: seconds until a key is checked again for this address. */
  readonly retryAfterSecs?: number;
}

export function isAuthFailure(x: Principal | AuthFailure): x is AuthFailure {
  return (x as AuthFailure).httpStatus !== undefined;
}

/**
 * The codes of refused keys: the auth module's own, beside the errors catalogue, because their statuses
 * (401, 429) are none of Triton's error classes.
 */
export const AUTH_FAILURE_CODES: readonly string[] = [
  'NRD_AUTH_MISSING_KEY',
  'NRD_AUTH_MALFORMED',
  'NRD_AUTH_UNKNOWN_KEY',
  'NRD_AUTH_FORBIDDEN',
  'NRD_AUTH_RATE_LIMITED',
];

const MISSING: AuthFailure = {
  code: 'NRD_AUTH_MISSING_KEY',
  reason: 'missing',
  httpStatus: 401,
  grpcStatus: 16,
  message: "this API needs a key: send the header 'Authorization: Bearer <secret>'",
};
const MALFORMED: AuthFailure = {
  code: 'NRD_AUTH_MALFORMED',
  reason: 'malformed',
  httpStatus: 401,
  grpcStatus: 16,
  message: `the Authorization header must be 'Bearer <secret>' with a secret of 1 to ${MAX_TOKEN_LENGTH} characters`,
};
const UNKNOWN: AuthFailure = {
  code: 'NRD_AUTH_UNKNOWN_KEY',
  reason: 'unknown',
  httpStatus: 401,
  grpcStatus: 16,
  message: 'unknown key',
};

function forbidden(keyName: string, group: ApiGroup, model: string | undefined): AuthFailure {
  const what = model === undefined ? `'${group}'` : `'${group}' on model '${model}'`;
  return {
    code: 'NRD_AUTH_FORBIDDEN',
    reason: 'scope',
    httpStatus: 403,
    grpcStatus: 7,
    message: `key '${keyName}' has no scope for ${what}`,
  };
}

function rateLimited(retryAfterSecs: number): AuthFailure {
  return {
    code: 'NRD_AUTH_RATE_LIMITED',
    reason: 'rate_limited',
    httpStatus: 429,
    grpcStatus: 8,
    message: `too many failed key checks from this address; retry in ${retryAfterSecs} s`,
    retryAfterSecs,
  };
}

/**
 * The token of a `Bearer` credential (scheme case-insensitive, one space),
 * or undefined when the header is not one or the token is empty or too long.
 * Looks at no more than the bounded prefix of an oversized header.
 */
export function bearerToken(header: string): string | undefined {
  if (header.length <= 7 || header.length > 7 + MAX_TOKEN_LENGTH) return undefined;
  if (header.charCodeAt(6) !== 0x20 || !BEARER.test(header)) return undefined;
  const token = header.slice(7);
  return WHITESPACE.test(token) ? undefined : token;
}
const BEARER = /^bearer /i;
const WHITESPACE = /\s/;

/** The hex SHA-256 of a secret as the keys file holds it. */
export function secretDigest(secret: string): string {
  return hash('sha256', secret, 'hex');
}

export interface AccessControlOptions {
  /** Failures a minute per client address before 429; 0: no limit. */
  readonly failureLimit?: number;
  readonly logger?: Logger;
  /** Clock for the failure limiter (tests). */
  readonly now?: () => number;
}

/**
 * A key table as plain data (names, hashes, scope texts), for another thread to compile its own copy: a frontend
 * thread checks keys itself (src/frontends/threads).
 */
export interface KeysSnapshot {
  readonly keys: ReadonlyArray<{ readonly name: string; readonly sha256: string; readonly scopes: readonly string[] }>;
  readonly anonymous: readonly string[];
  readonly anonymousGiven: boolean;
}

export function snapshotKeys(table: KeyTable): KeysSnapshot {
  return {
    keys: [...table.byHash.values()].map((k) => ({ name: k.name, sha256: k.sha256, scopes: k.grants.scopes })),
    anonymous: table.anonymous.grants.scopes,
    anonymousGiven: table.anonymousGiven,
  };
}

export function keysFromSnapshot(snapshot: KeysSnapshot): KeyTable {
  const byHash = new Map<string, KeyEntry>();
  for (const k of snapshot.keys) {
    byHash.set(k.sha256, { name: k.name, sha256: k.sha256, grants: new Grants(k.scopes), anonymous: false });
  }
  const anonymous = { name: ANONYMOUS, grants: new Grants(snapshot.anonymous), anonymous: true };
  return { byHash, anonymous, anonymousGiven: snapshot.anonymousGiven };
}

/** What changes in an AccessControl after it is made: the keys (a reload), an address reaching the failure limit. */
export type AccessUpdate =
  | { readonly t: 'keys'; readonly keys: KeysSnapshot }
  | { readonly t: 'limited'; readonly address: string; readonly untilMs: number };

/**
 * Connections known by a string (a gRPC peer, `address:port`) whose last key is remembered: the oldest is forgotten
 * past this many.
 */
export const MAX_PEER_CONNECTIONS = 4096;

/** The last key a connection presented and what it named: a request repeating it skips the hash. */
interface Presented {
  readonly header: string;
  readonly table: KeyTable;
  readonly who: Principal;
}

export class AccessControl {
  private table: KeyTable;
  private readonly limiter: FailureLimiter;
  private readonly logger: Logger | undefined;
  private readonly listeners = new Set<(update: AccessUpdate) => void>();
  private readonly presented = new WeakMap<object, Presented>();
  /**
   * The same for connections known by their peer string (grpc-js shows no connection object to a handler). A
   * peer string outlives its connection and may come back on a new one: harmless, since an entry is used only for
   * a header equal to the one it was made for, which names the same key whichever connection sends it.
   */
  private readonly presentedByPeer = new Map<string, Presented>();
  /** Failed checks since start, by reason (`nereid_auth_failures_total{reason}`). */
  readonly failures: Record<AuthFailureReason, number> = {
    missing: 0,
    malformed: 0,
    unknown: 0,
    scope: 0,
    rate_limited: 0,
  };

  constructor(table: KeyTable, options: AccessControlOptions = {}) {
    this.table = table;
    this.limiter = new FailureLimiter(options.failureLimit ?? DEFAULT_FAILURE_LIMIT, options.now);
    this.logger = options.logger;
  }

  /** Reads and parses the keys file at start-up; a problem is a configuration error naming file, line and field. */
  static fromFile(file: string, options: AccessControlOptions = {}): AccessControl {
    return new AccessControl(readKeysFile(file), options);
  }

  /** Swaps in a new table: checks from now on use it, those already made stand. */
  replaceKeys(table: KeyTable): void {
    this.table = table;
    // Every entry names keys of the old table (and would be passed over): let them go.
    this.presentedByPeer.clear();
    if (this.listeners.size > 0) this.emit({ t: 'keys', keys: snapshotKeys(table) });
  }

  /** Calls `listener` on every change of the keys and every address reaching the failure limit; returns `off`. */
  subscribe(listener: (update: AccessUpdate) => void): () => void {
    this.listeners.add(listener);
    return () => void this.listeners.delete(listener);
  }

  /** The keys and the addresses refused now, as data: what a copy on another thread starts from. */
  snapshot(): { keys: KeysSnapshot; limited: Array<[address: string, untilMs: number]> } {
    return { keys: snapshotKeys(this.table), limited: this.limiter.limited() };
  }

  private emit(update: AccessUpdate): void {
    for (const l of this.listeners) l(update);
  }

  get keys(): KeyTable {
    return this.table;
  }

  /**
   * undefined when the request may go on; else the failure to answer. No
   * header means anonymous; a header that does not name a key is refused
   * even where anonymous would be let through.
   */
  check(
    authorization: string | undefined,
    address: string | undefined,
    group: ApiGroup,
    model?: string,
    connection?: object | string,
  ): AuthFailure | undefined {
    const who = this.authenticate(authorization, address, connection);
    return isAuthFailure(who) ? who : this.authorize(who, address, group, model);
  }

  /**
   * Who the header says the request is (anonymous without one), or why it is refused. `connection` (an HTTP
   * request's socket, a gRPC call's peer string): a request that repeats the header the connection's last key came
   * in is not hashed again.
   */
  authenticate(
    authorization: string | undefined,
    address: string | undefined,
    connection?: object | string,
  ): Principal | AuthFailure {
    if (authorization === undefined || authorization === '') return this.table.anonymous;
    const addr = address ?? '';
    const wait = this.limiter.retryAfterSecs(addr);
    if (wait > 0) {
      this.failures.rate_limited++;
      return rateLimited(wait);
    }
    if (connection !== undefined) {
      const last =
        typeof connection === 'string' ? this.presentedByPeer.get(connection) : this.presented.get(connection);
      // Compared with what this connection sent before, in constant time all the same (a proxy's connection
      // carries many clients' keys).
      if (last !== undefined && last.table === this.table && sameText(last.header, authorization)) return last.who;
    }
    const token = bearerToken(authorization);
    if (token === undefined) return this.fail(addr, MALFORMED);
    const who = this.table.byHash.get(secretDigest(token));
    if (who === undefined) return this.fail(addr, UNKNOWN);
    if (connection !== undefined) this.remember(connection, { header: authorization, table: this.table, who });
    return who;
  }

  private remember(connection: object | string, presented: Presented): void {
    if (typeof connection !== 'string') {
      this.presented.set(connection, presented);
      return;
    }
    const peers = this.presentedByPeer;
    // Re-inserted at the end: the first entry is the one hashed longest ago, the one to forget.
    peers.delete(connection);
    if (peers.size >= MAX_PEER_CONNECTIONS) peers.delete(peers.keys().next().value!);
    peers.set(connection, presented);
  }

  /** Connections known by their peer string whose last key is remembered (tests: the bound). */
  get rememberedPeers(): number {
    return this.presentedByPeer.size;
  }

  /**
   * The 429 (counted) for a request with a key from an address at the failure limit, else undefined: the main
   * thread's last word on an infer a frontend thread admitted, in case the address reached the limit meanwhile.
   */
  refuseLimited(address: string): AuthFailure | undefined {
    const wait = this.limiter.retryAfterSecs(address);
    if (wait <= 0) return undefined;
    this.failures.rate_limited++;
    return rateLimited(wait);
  }

  /**
   * Whether `who` may use `group` (for `model`, when the group is narrowed
   * by models): undefined, or 401 for anonymous and 403 for a key. The
   * answer depends on the scopes alone, never on whether the model exists.
   */
  authorize(who: Principal, address: string | undefined, group: ApiGroup, model?: string): AuthFailure | undefined {
    if (who.grants.allows(group, model)) return undefined;
    // A key opens what anonymous gets too: a client that sends its key everywhere still passes the health probes.
    if (!who.anonymous && this.table.anonymous.grants.allows(group, model)) return undefined;
    return this.fail(address, who.anonymous ? MISSING : forbidden(who.name, group, model));
  }

  /**
   * For a list of every model (statistics of all models): the test a model
   * must pass to be listed for this request, or undefined when it sees all.
   */
  modelFilter(authorization: string | undefined, group: ApiGroup): ((model: string) => boolean) | undefined {
    const who = this.authenticate(authorization, undefined);
    if (isAuthFailure(who)) return () => false;
    const anonymous = this.table.anonymous.grants;
    if (who.grants.allowsEveryModel(group) || anonymous.allowsEveryModel(group)) return undefined;
    return (model) => who.grants.allows(group, model) || anonymous.allows(group, model);
  }

  private fail(address: string | undefined, failure: AuthFailure): AuthFailure {
    const addr = address ?? '';
    const wait = this.limiter.retryAfterSecs(addr);
    if (wait > 0) {
      this.failures.rate_limited++;
      return rateLimited(wait);
    }
    this.failures[failure.reason]++;
    if (this.limiter.record(addr)) {
      this.logger?.warn(
        { address: addr, limit: this.limiter.limit, last: failure.reason },
        'too many failed key checks from one address: its requests get 429 for up to a minute',
      );
      if (this.listeners.size > 0) this.emit({ t: 'limited', address: addr, untilMs: this.limiter.limitedUntil(addr) });
    }
    return failure;
  }
}

/** Whether two strings are equal, in a time that depends on their length alone. */
function sameText(a: string, b: string): boolean {
  if (a.length !== b.length) return false;
  let diff = 0;
  for (let i = 0; i < a.length; i++) diff |= a.charCodeAt(i) ^ b.charCodeAt(i);
  return diff === 0;
}

/** Reads and parses a keys file; errors are NereidError (config) naming the file, line and field. */
export function readKeysFile(file: string): KeyTable {
  return parseKeysFile(file, readKeysText(file));
}

/** The file's text, refused when missing, unreadable or larger than MAX_KEYS_FILE_BYTES. */
export function readKeysText(file: string): string {
  let size: number;
  try {
    size = statSync(file).size;
  } catch (err) {
    throw new KeysFileError(file, 1, '', `cannot read the keys file: ${(err as Error).message}`);
  }
  if (size > MAX_KEYS_FILE_BYTES) {
    throw new KeysFileError(
      file,
      1,
      '',
      `the keys file is ${size} bytes, more than the ${MAX_KEYS_FILE_BYTES} accepted`,
    );
  }
  try {
    return readFileSync(file, 'utf8');
  } catch (err) {
    throw new KeysFileError(file, 1, '', `cannot read the keys file: ${(err as Error).message}`);
  }
}

/** A KeysFileError as the configuration error start-up reports. */
export function keysFileConfigError(err: unknown): Error {
  return err instanceof KeysFileError ? Errors.config(`--auth-keys: ${err.message}`) : (err as Error);
}
