import { test } from 'node:test';
import { pino } from 'pino';
import assert from 'node:assert/strict';
import {
  AccessControl,
  AccessReplica,
  type AccessUpdate,
  MAX_PEER_CONNECTIONS,
  MAX_TOKEN_LENGTH,
  bearerToken,
  createKey,
  parseKeysFile,
  secretDigest,
  type AuthFailure,
} from '../../src/auth/index.js';

const FRAUD = 'fraud-secret';
const ADMIN = 'admin-secret';

function table(extra = '') {
  return parseKeysFile(
    'k.yaml',
    `keys:
  - name: fraud
    sha256: ${secretDigest(FRAUD)}
    scopes: ["inference:fraud_*", "metadata:fraud_*", "health"]
  - name: admin
    sha256: ${secretDigest(ADMIN)}
    scopes: ["*"]
${extra}`,
  );
}

const bearer = (s: string): string => `Bearer ${s}`;

test('the Bearer scheme is read case-insensitively; anything ' +
  'else, an empty or an oversized token is not a token', () => {
  assert.equal(bearerToken('Bearer abc'), 'abc');
  assert.equal(bearerToken('bearer abc'), 'abc');
  assert.equal(bearerToken('BEARER abc'), 'abc');
  assert.equal(bearerToken('Basic YWxhZGRpbjpvcGVuc2VzYW1l'), undefined);
  assert.equal(bearerToken('Bearer '), undefined);
  assert.equal(bearerToken('Bearer'), undefined);
  assert.equal(bearerToken('Bearer  abc'), undefined);
  assert.equal(bearerToken('Bearer a b'), undefined);
  assert.equal(bearerToken(`Bearer ${'x'.repeat(MAX_TOKEN_LENGTH)}`), 'x'.repeat(MAX_TOKEN_LENGTH));
  assert.equal(bearerToken(`Bearer ${'x'.repeat(MAX_TOKEN_LENGTH + 1)}`), undefined);
  assert.equal(bearerToken(`Bearer ${'x'.repeat(10_000_000)}`), undefined);
});

test('401 without a key or with an unknown one, 403 for a key without the scope, nothing for one with it', () => {
  const access = new AccessControl(table(), { failureLimit: 0 });
  const code = (f: AuthFailure | undefined): string | undefined => f?.code;
  assert.equal(access.check(undefined, 'a', 'health'), undefined);
  assert.equal(code(access.check(undefined, 'a', 'metadata', 'fraud_a')), 'NRD_AUTH_MISSING_KEY');
  assert.equal(code(access.check('', 'a', 'inference', 'fraud_a')), 'NRD_AUTH_MISSING_KEY');
  assert.equal(code(access.check(bearer('nope'), 'a', 'inference', 'fraud_a')), 'NRD_AUTH_UNKNOWN_KEY');
  assert.equal(code(access.check('Basic Zm9vOmJhcg==', 'a', 'inference', 'fraud_a')), 'NRD_AUTH_MALFORMED');
  assert.equal(access.check(bearer(FRAUD), 'a', 'inference', 'fraud_a'), undefined);
  const refused = access.check(bearer(FRAUD), 'a', 'inference', 'credit_a')!;
  assert.equal(refused.httpStatus, 403);
  assert.equal(refused.grpcStatus, 7);
  assert.equal(refused.message, "key 'fraud' has no scope for 'inference' on model 'credit_a'");
  assert.equal(code(access.check(bearer(FRAUD), 'a', 'model-repository')), 'NRD_AUTH_FORBIDDEN');
  assert.equal(access.check(bearer(ADMIN), 'a', 'model-repository'), undefined);
  // A wrong key is refused even where no key is needed.
  assert.equal(code(access.check(bearer('nope'), 'a', 'health')), 'NRD_AUTH_UNKNOWN_KEY');
  assert.deepEqual(access.failures, { missing: 2, malformed: 1, unknown: 2, scope: 2, rate_limited: 0 });
});

test('after N failures a minute an address gets 429 with the seconds to wait, other addresses do not', () => {
  let now = 1_000_000;
  const warnings: Array<Record<string, unknown>> = [];
  const write = (line: string): number => warnings.push(JSON.parse(line) as Record<string, unknown>);
  const logger = pino({ level: 'warn' }, { write });
  const access = new AccessControl(table(), { failureLimit: 3, now: () => now, logger });
  for (let i = 0; i < 3; i++)
    assert.equal(access.check(bearer(`guess${i}`), '10.0.0.1', 'inference', 'fraud_a')?.httpStatus, 401);
  now += 20_000;
  const limited = access.check(bearer(FRAUD), '10.0.0.1', 'inference', 'fraud_a')!;
  assert.equal(limited.httpStatus, 429);
  assert.equal(limited.grpcStatus, 8);
  assert.equal(limited.retryAfterSecs, 40);
  assert.equal(access.check(undefined, '10.0.0.1', 'inference', 'fraud_a')?.httpStatus, 429);
  // What needs no key still answers; another address is not limited.
  assert.equal(access.check(undefined, '10.0.0.1', 'health'), undefined);
  assert.equal(access.check(bearer(FRAUD), '10.0.0.2', 'inference', 'fraud_a'), undefined);
  now += 40_000;
  assert.equal(access.check(bearer(FRAUD), '10.0.0.1', 'inference', 'fraud_a'), undefined);
  assert.equal(access.failures.rate_limited, 2);
  assert.equal(access.failures.unknown, 3);
  // Logged once, when the address reached the limit, with the address and never a secret.
  assert.equal(warnings.length, 1);
  assert.equal(warnings[0]!.address, '10.0.0.1');
  assert.ok(!JSON.stringify(warnings).includes('guess'));
});

test('a table swapped in applies to checks from then on', () => {
  const access = new AccessControl(table(), { failureLimit: 0 });
  const extra = createKey('late', ['statistics:fraud_a']);
  assert.equal(access.check(bearer(extra.secret), 'a', 'statistics', 'fraud_a')?.httpStatus, 401);
  access.replaceKeys(parseKeysFile('k.yaml', `keys:\n${extra.entry}`));
  assert.equal(access.check(bearer(extra.secret), 'a', 'statistics', 'fraud_a'), undefined);
  assert.equal(access.check(bearer(extra.secret), 'a', 'statistics', 'fraud_b')?.httpStatus, 403);
  assert.equal(access.check(bearer(FRAUD), 'a', 'inference', 'fraud_a')?.httpStatus, 401);
});

test("a connection's repeated key is not hashed again, yet a reload or another header is checked afresh", () => {
  const access = new AccessControl(table(), { failureLimit: 0 });
  const connection = {};
  assert.equal(access.check(bearer(FRAUD), 'a', 'inference', 'fraud_a', connection), undefined);
  // The same header on the same connection: the key it named, with that key's scopes.
  assert.equal(access.check(bearer(FRAUD), 'a', 'inference', 'fraud_a', connection), undefined);
  assert.equal(access.check(bearer(FRAUD), 'a', 'inference', 'credit_a', connection)?.httpStatus, 403);
  // Another header on that connection is a key of its own (a proxy's connection carries many clients).
  assert.equal(access.check(bearer('fraud-secreT'), 'a', 'inference', 'fraud_a', connection)?.httpStatus, 401);
  assert.equal(access.check(bearer(ADMIN), 'a', 'model-repository', undefined, connection), undefined);
  assert.equal(access.check(bearer(FRAUD), 'a', 'model-repository', undefined, connection)?.httpStatus, 403);
  // A reload drops what the connection's last key named.
  access.replaceKeys(parseKeysFile('k.yaml', `keys:\n${createKey('other', ['*']).entry}`));
  assert.equal(access.check(bearer(FRAUD), 'a', 'inference', 'fraud_a', connection)?.httpStatus, 401);
  assert.deepEqual(access.failures, { missing: 0, malformed: 0, unknown: 2, scope: 2, rate_limited: 0 });
});

test('a connection known by its peer string (gRPC) skips the hash for its repeated key, within a bound', () => {
  const access = new AccessControl(table(), { failureLimit: 0 });
  const peer = '127.0.0.1:40001';
  assert.equal(access.check(bearer(FRAUD), '127.0.0.1', 'inference', 'fraud_a', peer), undefined);
  // Taken out of the table behind the check's back: only the peer's remembered key still names it.
  const byHash = access.keys.byHash as Map<string, unknown>;
  const fraudEntry = byHash.get(secretDigest(FRAUD));
  byHash.delete(secretDigest(FRAUD));
  assert.equal(access.check(bearer(FRAUD), '127.0.0.1', 'inference', 'fraud_a', peer), undefined);
  assert.equal(access.check(bearer(FRAUD), '127.0.0.1', 'inference', 'credit_a', peer)?.httpStatus, 403);
  assert.equal(access.check(bearer(FRAUD), '127.0.0.1', 'inference', 'fraud_a', '127.0.0.1:40002')?.httpStatus, 401);
  assert.equal(access.check(bearer(FRAUD), '127.0.0.1', 'inference', 'fraud_a')?.httpStatus, 401);
  byHash.set(secretDigest(FRAUD), fraudEntry);
  // The peer string back on a new connection with another header: that header's own key, hashed.
  assert.equal(access.check(bearer(ADMIN), '127.0.0.1', 'model-repository', undefined, peer), undefined);
  assert.equal(access.check(bearer('admin-secreT'), '127.0.0.1', 'model-repository', undefined, peer)?.httpStatus, 401);
  assert.equal(access.check(bearer(FRAUD), '127.0.0.1', 'model-repository', undefined, peer)?.httpStatus, 403);
  // Unknown keys are not remembered; known ones are, up to the bound, the longest unhashed forgotten first.
  assert.equal(access.rememberedPeers, 1);
  for (let port = 0; port < MAX_PEER_CONNECTIONS + 50; port++) {
    assert.equal(access.check(bearer(ADMIN), '10.0.0.1', 'health', undefined, `10.0.0.1:${port}`), undefined);
  }
  assert.equal(access.rememberedPeers, MAX_PEER_CONNECTIONS);
  // A reload forgets them all: a removed key stops working on a connection that used it.
  access.replaceKeys(parseKeysFile('k.yaml', `keys:\n${createKey('other', ['*']).entry}`));
  assert.equal(access.rememberedPeers, 0);
  assert.equal(access.check(bearer(ADMIN), '10.0.0.1', 'health', undefined, '10.0.0.1:1')?.httpStatus, 401);
});

test('refuseLimited: the 429 for an address at the failure limit, counted; nothing below it', () => {
  let now = 5_000_000;
  const access = new AccessControl(table(), { failureLimit: 3, now: () => now });
  assert.equal(access.refuseLimited('10.1.1.1'), undefined);
  for (let i = 0; i < 2; i++) access.check(bearer(`guess${i}`), '10.1.1.1', 'inference', 'fraud_a');
  assert.equal(access.refuseLimited('10.1.1.1'), undefined);
  access.check(bearer('guess2'), '10.1.1.1', 'inference', 'fraud_a');
  const limited = access.refuseLimited('10.1.1.1')!;
  assert.equal(limited.httpStatus, 429);
  assert.equal(limited.grpcStatus, 8);
  assert.equal(limited.retryAfterSecs, 60);
  assert.equal(access.refuseLimited('10.1.1.2'), undefined);
  assert.equal(access.failures.rate_limited, 1);
  now += 60_000;
  assert.equal(access.refuseLimited('10.1.1.1'), undefined);
});

test("a replica admits what the original would, and follows its reloads and limited addresses", () => {
  let now = 1_000_000;
  const access = new AccessControl(table(), { failureLimit: 2, now: () => now });
  const updates: AccessUpdate[] = [];
  access.subscribe((u) => updates.push(u));
  const replica = new AccessReplica(access.snapshot(), () => now);
  const cases: Array<[string | undefined, 'inference' | 'health' | 'model-repository', string | undefined]> = [
    [bearer(FRAUD), 'inference', 'fraud_a'],
    [bearer(FRAUD), 'inference', 'credit_a'],
    [bearer(FRAUD), 'health', undefined],
    [bearer(ADMIN), 'model-repository', undefined],
    [undefined, 'health', undefined],
    [undefined, 'inference', 'fraud_a'],
    ['Basic abc', 'health', undefined],
  ];
  const fresh = () => new AccessControl(access.keys, { failureLimit: 0 });
  for (const [header, group, model] of cases) {
    const expected = fresh().check(header, 'b', group, model) === undefined;
    assert.equal(replica.admits(header, 'b', group, model), expected, `${header} ${group} ${model}`);
  }
  // Only the original counts: the replica's refusals are left to it.
  assert.deepEqual(updates, []);
  const late = createKey('late', ['inference:credit_*']);
  access.replaceKeys(parseKeysFile('k.yaml', `keys:\n${late.entry}`));
  assert.equal(updates.length, 1);
  assert.equal(replica.admits(bearer(late.secret), 'b', 'inference', 'credit_a'), false);
  replica.apply(updates[0]!);
  assert.equal(replica.admits(bearer(late.secret), 'b', 'inference', 'credit_a'), true);
  assert.equal(replica.admits(bearer(FRAUD), 'b', 'inference', 'fraud_a'), false);
  // An address at the limit: its keys are refused (the original answers 429), anonymous requests are not.
  for (let i = 0; i < 2; i++) access.check(bearer(`guess${i}`), '10.0.0.9', 'inference', 'credit_a');
  assert.deepEqual(updates[1], { t: 'limited', address: '10.0.0.9', untilMs: 1_000_000 + 60_000 });
  replica.apply(updates[1]!);
  assert.equal(replica.admits(bearer(late.secret), '10.0.0.9', 'inference', 'credit_a'), false);
  assert.equal(access.check(bearer(late.secret), '10.0.0.9', 'inference', 'credit_a')?.httpStatus, 429);
  assert.equal(replica.admits(undefined, '10.0.0.9', 'health'), true);
  assert.equal(replica.admits(bearer(late.secret), '10.0.0.8', 'inference', 'credit_a'), true);
  // A replica made now starts with the limited address; both let it through once its minute is over.
  const joined = new AccessReplica(access.snapshot(), () => now);
  assert.equal(joined.admits(bearer(late.secret), '10.0.0.9', 'inference', 'credit_a'), false);
  now += 60_000;
  assert.equal(replica.admits(bearer(late.secret), '10.0.0.9', 'inference', 'credit_a'), true);
  assert.equal(access.check(bearer(late.secret), '10.0.0.9', 'inference', 'credit_a'), undefined);
});

test('keys create makes a 256-bit secret whose entry parses back to the same grants', () => {
  const a = createKey('svc', ['inference:m?', 'health']);
  const b = createKey('svc', ['inference:m?', 'health']);
  assert.notEqual(a.secret, b.secret);
  assert.match(a.secret, /^nrd_[A-Za-z0-9_-]{43}$/);
  assert.ok(!a.entry.includes(a.secret));
  const parsed = parseKeysFile('k.yaml', `keys:\n${a.entry}`);
  const key = parsed.byHash.get(secretDigest(a.secret))!;
  assert.equal(key.name, 'svc');
  assert.ok(key.grants.allows('inference', 'm1'));
  assert.ok(!key.grants.allows('inference', 'm12'));
  assert.throws(() => createKey('svc', ['inference:m', 'admin']), /unknown scope 'admin'/);
  assert.throws(() => createKey('a b', ['health']), /not a key name/);
  assert.throws(() => createKey('svc', []), /at least one scope/);
});
