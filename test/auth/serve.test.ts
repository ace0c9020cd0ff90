/**
 * `nereid serve --auth-keys` and `nereid keys create` as real processes:
 * a key made by the command works, failures show in
 * nereid_auth_failures_total, a bad keys file stops the start naming
 * file:line and field, and the file reloads under load (HTTP and gRPC) with
 * no failed request for a key that did not change.
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import http from 'node:http';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { createKey, secretDigest } from '../../src/auth/index.js';
import {
  LOOPBACK_PORTS,
  NEREID_MAIN,
  startServe,
  type ServePorts,
  type ServeProcess,
} from '../helpers/serve-process.js';
import { TempRepository } from '../helpers/repository.js';
import { call } from '../frontends/http/helpers.js';
import * as grpc from '@grpc/grpc-js';
import { create } from '@bufbuild/protobuf';
import { ModelInferRequestSchema } from '../../src/gen/grpc_service_pb.js';
import { inferenceServiceDefinition } from '../../src/frontends/grpc/index.js';
import { unary } from '../frontends/grpc/helpers.js';

const ONES = Array.from({ length: 16 }, () => 1);
const INFER = JSON.stringify({
  inputs: [
    { name: 'INPUT0', datatype: 'INT32', shape: [1, 16], data: ONES },
    { name: 'INPUT1', datatype: 'INT32', shape: [1, 16], data: ONES },
  ],
});

function keysCreate(...args: string[]): { status: number | null; stdout: string; stderr: string } {
  const r = spawnSync(process.execPath, [NEREID_MAIN, 'keys', 'create', ...args], { encoding: 'utf8' });
  return { status: r.status, stdout: r.stdout, stderr: r.stderr };
}

/** Writes the keys file whole, as a deployment should (rename over the old one). */
function writeKeys(file: string, entries: string): void {
  writeFileSync(`${file}.new`, `keys:\n${entries}`);
  renameSync(`${file}.new`, file);
}

const bearer = (secret: string) => ({ Authorization: `Bearer ${secret}` });

describe('nereid serve --auth-keys', () => {
  const dir = mkdtempSync(path.join(tmpdir(), 'nereid-serve-keys-'));
  const keysFile = path.join(dir, 'keys.yaml');
  let repo: TempRepository;
  let serve: ServeProcess;
  let ports: ServePorts;
  let client: { secret: string; entry: string };
  const monitor = createKey('monitor', ['metrics']);

  before(async () => {
    const made = keysCreate('--name', 'client', '--scopes', 'inference:simple,metadata:simple', '--scopes', 'health');
    assert.equal(made.status, 0, made.stderr);
    const secret = /^ {2}(nrd_\S+)$/m.exec(made.stdout)?.[1];
    assert.ok(secret, made.stdout);
    const entry = made.stdout.slice(made.stdout.indexOf('- name:')).replace(/^ {2}/gm, '');
    assert.match(entry, new RegExp(`sha256: ${secretDigest(secret)}`));
    assert.ok(!entry.includes(secret), 'the entry holds the hash, not the secret');
    client = { secret, entry };
    writeKeys(keysFile, client.entry + monitor.entry);
    repo = new TempRepository().addSub('simple');
    serve = startServe([
      `--model-repository=${repo.dir}`,
      `--auth-keys=${keysFile}`,
      '--auth-failure-limit=0',
      ...LOOPBACK_PORTS,
    ]);
    ports = await serve.ports;
  });

  after(async () => {
    await serve?.stop();
    repo?.cleanup();
    rmSync(dir, { recursive: true, force: true });
  });

  test('a key made by nereid keys create opens its scopes; failures count by reason', async () => {
    assert.equal(
      (await call(ports.http, 'POST', '/v2/models/simple/infer', { body: INFER, headers: bearer(client.secret) }))
        .status,
      200,
    );
    assert.equal(
      (await call(ports.http, 'GET', '/v2/models/simple/config', { headers: bearer(client.secret) })).status,
      403,
    );
    assert.equal((await call(ports.http, 'GET', '/v2/models/simple', { headers: bearer('guess') })).status, 401);
    assert.equal((await call(ports.http, 'GET', '/v2/models/simple')).status, 401);
    const scrape = await call(ports.metrics, 'GET', '/metrics', { headers: bearer(monitor.secret) });
    assert.equal(scrape.status, 200);
    const text = scrape.body.toString();
    assert.match(text, /^# TYPE nereid_auth_failures_total counter$/m);
    assert.match(text, /^nereid_auth_failures_total\{reason="scope"\} 1$/m);
    assert.match(text, /^nereid_auth_failures_total\{reason="unknown"\} 1$/m);
    assert.match(text, /^nereid_auth_failures_total\{reason="missing"\} 1$/m);
    assert.match(text, /^nereid_auth_failures_total\{reason="rate_limited"\} 0$/m);
  });

  test('the file reloads under load: an unchanged key never fails, an ' +
    'added key starts and a removed key stops working', async () => {
    const agent = new http.Agent({ keepAlive: true, maxSockets: 8 });
    const statuses = new Map<number, number>();
    let stop = false;
    // A bounded loop: 8 clients, each at most 400 requests, ending early once the file work is done.
    const loop = async () => {
      for (let i = 0; i < 400 && !stop; i++) {
        const r = await call(ports.http, 'POST', '/v2/models/simple/infer', {
          body: INFER,
          headers: bearer(client.secret),
          agent,
        });
        statuses.set(r.status, (statuses.get(r.status) ?? 0) + 1);
      }
    };
    const clients = Array.from({ length: 8 }, loop);
    const until = async (what: string, ok: () => Promise<boolean>) => {
      const end = Date.now() + 15_000;
      while (!(await ok())) {
        if (Date.now() > end) assert.fail(`${what} within 15 s`);
        await new Promise((r) => setTimeout(r, 25));
      }
    };
    const newcomer = createKey('newcomer', ['inference:simple']);
    const works = async (secret: string) =>
      (await call(ports.http, 'POST', '/v2/models/simple/infer', { body: INFER, headers: bearer(secret) })).status ===
      200;
    for (let round = 0; round < 3; round++) {
      writeKeys(keysFile, client.entry + monitor.entry + newcomer.entry);
      await until('the added key working', () => works(newcomer.secret));
      writeKeys(keysFile, client.entry + monitor.entry);
      await until('the removed key refused', async () => !(await works(newcomer.secret)));
    }
    stop = true;
    await Promise.all(clients);
    agent.destroy();
    assert.deepEqual([...statuses.keys()], [200], JSON.stringify([...statuses]));
    assert.ok(statuses.get(200)! >= 8);
  });

  test('over gRPC too: the file reloads under load, an unchanged key never fails, ' +
    'an added key starts and a removed key stops working', async () => {
    const Client = grpc.makeGenericClientConstructor(inferenceServiceDefinition, 'GRPCInferenceService');
    const grpcClient = new Client(`127.0.0.1:${ports.grpc}`, grpc.credentials.createInsecure());
    const ones = new Uint8Array(Int32Array.from(ONES).buffer);
    const request = create(ModelInferRequestSchema, {
      modelName: 'simple',
      inputs: [
        { name: 'INPUT0', datatype: 'INT32', shape: [1n, 16n] },
        { name: 'INPUT1', datatype: 'INT32', shape: [1n, 16n] },
      ],
      rawInputContents: [ones, ones],
    });
    const inferWith = async (secret: string): Promise<string> => {
      const md = new grpc.Metadata();
      md.set('authorization', `Bearer ${secret}`);
      try {
        await unary(grpcClient, 'ModelInfer', request, md);
        return 'OK';
      } catch (err) {
        return grpc.status[(err as grpc.ServiceError).code] ?? String(err);
      }
    };
    const outcomes = new Map<string, number>();
    let stop = false;
    // 8 clients on one channel, each at most 400 calls, ending early once the file work is done.
    const loop = async () => {
      for (let i = 0; i < 400 && !stop; i++) {
        const outcome = await inferWith(client.secret);
        outcomes.set(outcome, (outcomes.get(outcome) ?? 0) + 1);
      }
    };
    const clients = Array.from({ length: 8 }, loop);
    const until = async (what: string, ok: () => Promise<boolean>) => {
      const end = Date.now() + 15_000;
      while (!(await ok())) {
        if (Date.now() > end) assert.fail(`${what} within 15 s`);
        await new Promise((r) => setTimeout(r, 25));
      }
    };
    const newcomer = createKey('grpc-newcomer', ['inference:simple']);
    try {
      assert.equal(await inferWith(newcomer.secret), 'UNAUTHENTICATED');
      for (let round = 0; round < 3; round++) {
        writeKeys(keysFile, client.entry + monitor.entry + newcomer.entry);
        await until('the added key working', async () => (await inferWith(newcomer.secret)) === 'OK');
        writeKeys(keysFile, client.entry + monitor.entry);
        await until('the removed key refused', async () => (await inferWith(newcomer.secret)) === 'UNAUTHENTICATED');
      }
    } finally {
      stop = true;
      await Promise.all(clients);
      grpcClient.close();
    }
    assert.deepEqual([...outcomes.keys()], ['OK'], JSON.stringify([...outcomes]));
    assert.ok(outcomes.get('OK')! >= 8);
  });

  test('a request admitted before its key is removed finishes', async () => {
    const leaving = createKey('leaving', ['inference:simple']);
    writeKeys(keysFile, client.entry + monitor.entry + leaving.entry);
    const ready = async () =>
      (await call(ports.http, 'GET', '/v2/models/simple', { headers: bearer(client.secret) })).status === 200;
    const works = async () =>
      (await call(ports.http, 'POST', '/v2/models/simple/infer', { body: INFER, headers: bearer(leaving.secret) }))
        .status === 200;
    for (let i = 0; !(await works()); i++) {
      assert.ok(i < 600, 'the key was not taken');
      await new Promise((r) => setTimeout(r, 25));
    }
    assert.ok(await ready());
    // Headers and half the body now; the key is checked when the headers arrive.
    const body = Buffer.from(INFER);
    const reply = new Promise<number>((resolve, reject) => {
      const req = http.request(
        {
          host: '127.0.0.1',
          port: ports.http,
          method: 'POST',
          path: '/v2/models/simple/infer',
          headers: { ...bearer(leaving.secret), 'Content-Length': String(body.byteLength) },
        },
        (res) => {
          res.resume();
          res.on('end', () => resolve(res.statusCode ?? 0));
        },
      );
      req.on('error', reject);
      req.write(body.subarray(0, 10));
      void (async () => {
        writeKeys(keysFile, client.entry + monitor.entry);
        for (let i = 0; await works(); i++) {
          assert.ok(i < 600, 'the key was not removed');
          await new Promise((r) => setTimeout(r, 25));
        }
        req.end(body.subarray(10));
      })().catch(reject);
    });
    assert.equal(await reply, 200);
  });
});

describe('bad keys files and bad flags stop the start', () => {
  const dir = mkdtempSync(path.join(tmpdir(), 'nereid-bad-keys-'));
  after(() => rmSync(dir, { recursive: true, force: true }));

  const start = async (args: string[]) => {
    const p = startServe([...args, `--model-repository=${dir}`, ...LOOPBACK_PORTS]);
    const code = await p.exit;
    return { code, stderr: p.stderr() };
  };

  test('each problem names the file, the line and the field', async () => {
    const h = createKey('a', ['health']).entry;
    const cases: Array<[string, string]> = [
      ['missing.yaml', 'missing.yaml:1: cannot read the keys file'],
      ['notyaml.yaml', 'notyaml.yaml:3: not valid YAML or JSON'],
      ['dup.yaml', 'dup.yaml:6: keys[1].name: duplicate name'],
      ['hash.yaml', 'hash.yaml:3: keys[0].sha256: expected 64 hexadecimal digits (a SHA-256)'],
      ['scope.yaml', "scope.yaml:4: keys[0].scopes[0]: unknown scope 'inferance'"],
    ];
    writeFileSync(path.join(dir, 'notyaml.yaml'), 'keys: [\n  {name: a\n');
    writeFileSync(
      path.join(dir, 'dup.yaml'),
      `keys:\n${h}${h}`.replace(/sha256: \S+\n(?=[^]*sha256)/, `sha256: ${'a'.repeat(64)}\n`),
    );
    writeFileSync(path.join(dir, 'hash.yaml'), 'keys:\n- name: a\n  sha256: xyz\n  scopes: [health]\n');
    writeFileSync(
      path.join(dir, 'scope.yaml'),
      `keys:\n- name: a\n  sha256: ${'b'.repeat(64)}\n  scopes: [inferance]\n`,
    );
    for (const [name, expected] of cases) {
      const file = path.join(dir, name);
      const r = await start([`--auth-keys=${file}`]);
      assert.equal(r.code, 1, r.stderr);
      assert.ok(r.stderr.includes(`--auth-keys: ${path.join(dir, expected)}`), `${name}: ${r.stderr}`);
    }
  });

  test('--auth-failure-limit needs --auth-keys and a count', async () => {
    assert.match((await start(['--auth-failure-limit=5'])).stderr, /--auth-failure-limit needs --auth-keys/);
    assert.match(
      (await start([`--auth-keys=${path.join(dir, 'x')}`, '--auth-failure-limit=-1'])).stderr,
      /--auth-failure-limit must be 0/,
    );
  });

  test('keys create refuses a bad name or scope, and needs a name and a scope', () => {
    assert.match(keysCreate('--name', 'a b', '--scopes', 'health').stderr, /not a key name/);
    assert.match(keysCreate('--name', 'a', '--scopes', 'health:x').stderr, /takes no model pattern/);
    assert.match(keysCreate('--scopes', 'health').stderr, /--name is required/);
    assert.match(keysCreate('--name', 'a').stderr, /at least one scope/);
    assert.equal(keysCreate('--name', 'a').status, 2);
  });
});
