/**
 * --auth-keys on two frontend threads: a thread checks keys itself and serves an infer whose key opens the model
 * (the main thread's frontend never sees it); every refusal is the main thread's (401, 403 the same for an unknown
 * and a forbidden model, 429), a reload reaches the threads before their next request, and the failure limit is
 * one per server, not one per thread.
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import net from 'node:net';
import * as grpc from '@grpc/grpc-js';
import { create } from '@bufbuild/protobuf';
import { AccessControl, createKey, parseKeysFile } from '../../src/auth/index.js';
import { HttpFrontend } from '../../src/frontends/http/index.js';
import { GrpcFrontend, inferenceServiceDefinition } from '../../src/frontends/grpc/index.js';
import { ModelInferRequestSchema, type ModelInferResponse } from '../../src/gen/grpc_service_pb.js';
import type { ServerApi } from '../../src/core/server-api.js';
import { silentLogger } from '../../src/logger.js';
import { EchoServer } from '../frontends/http/echo-server.js';
import { call, json, type HttpReply } from '../frontends/http/helpers.js';
import { callError, unary } from '../frontends/grpc/helpers.js';

const InferenceClient = grpc.makeGenericClientConstructor(inferenceServiceDefinition, 'GRPCInferenceService');
const INPUTS = JSON.stringify({ inputs: [{ name: 'INPUT0', datatype: 'INT32', shape: [1], data: [7] }] });

/** One infer on a connection of its own: the kernel spreads new connections over the threads. */
function infer(port: number, model: string, secret?: string): Promise<HttpReply> {
  const headers: Record<string, string> = { Connection: 'close' };
  if (secret !== undefined) headers['Authorization'] = `Bearer ${secret}`;
  return call(port, 'POST', `/v2/models/${model}/infer`, { body: INPUTS, headers });
}

const grpcRequest = (model: string) =>
  create(ModelInferRequestSchema, {
    modelName: model,
    inputs: [{ name: 'INPUT0', datatype: 'INT32', shape: [1n] }],
    rawInputContents: [new Uint8Array(new Int32Array([7]).buffer)],
  });

/** A ModelInfer on a client (so a connection) of its own. */
async function grpcInfer(port: number, model: string, secret?: string): Promise<ModelInferResponse> {
  const client = new InferenceClient(`127.0.0.1:${port}`, grpc.credentials.createInsecure());
  const md = new grpc.Metadata();
  if (secret !== undefined) md.set('authorization', `Bearer ${secret}`);
  try {
    return await unary<ModelInferResponse>(client, 'ModelInfer', grpcRequest(model), md);
  } finally {
    client.close();
  }
}

interface Stack {
  core: EchoServer;
  access: AccessControl;
  http: HttpFrontend;
  grpc: GrpcFrontend;
  httpPort: number;
  grpcPort: number;
  /** Infer requests the main thread's frontends served themselves (they ask for admission; a thread does not). */
  servedOnMain: number;
  /** Configurations asked for, by a thread or the main thread. */
  configsAsked: string[];
  /** When (performance.now()) the server ran each infer, whichever thread admitted it. */
  inferredAt: number[];
  close(): Promise<void>;
}

async function startStack(keysYaml: string, failureLimit: number, now?: () => number): Promise<Stack> {
  const core = new EchoServer();
  const access = new AccessControl(parseKeysFile('keys.yaml', keysYaml), { failureLimit, ...(now ? { now } : {}) });
  const stack = { core, access, servedOnMain: 0, configsAsked: [] as string[], inferredAt: [] as number[] } as Stack;
  const run = core.infer.bind(core);
  core.infer = (request) => {
    stack.inferredAt.push(performance.now());
    return run(request);
  };
  const api: ServerApi = core;
  api.admissionError = () => void stack.servedOnMain++;
  const modelConfig = core.modelConfig.bind(core);
  core.modelConfig = (name, version) => {
    stack.configsAsked.push(name);
    return modelConfig(name, version);
  };
  const common = { port: 0, address: '127.0.0.1', threads: 2, access };
  stack.http = new HttpFrontend(core, { ...common, maxInputSize: 1 << 20, logger: silentLogger });
  stack.grpc = new GrpcFrontend(core, common);
  stack.httpPort = (await stack.http.start()).port;
  stack.grpcPort = (await stack.grpc.start()).port;
  stack.close = () => Promise.all([stack.http.stop(), stack.grpc.stop()]).then(() => undefined);
  return stack;
}

describe('--auth-keys on two frontend threads', () => {
  const client = createKey('client', ['inference:ech?']);
  const elsewhere = createKey('elsewhere', ['inference:other_*', 'health']);
  let s: Stack;
  before(async () => {
    s = await startStack(`keys:\n${client.entry}${elsewhere.entry}`, 0);
  });
  after(() => s.close());

  test('an infer whose key opens the model is served on a thread, over HTTP and gRPC', async () => {
    assert.equal(s.http.threads?.size, 2);
    for (let i = 0; i < 12; i++) {
      const r = await infer(s.httpPort, 'echo', client.secret);
      assert.equal(r.status, 200, r.body.toString());
      assert.deepEqual((json(r) as { outputs: Array<{ data: number[] }> }).outputs[0]!.data, [7]);
    }
    for (let i = 0; i < 6; i++) assert.equal((await grpcInfer(s.grpcPort, 'echo', client.secret)).modelName, 'echo');
    assert.equal(s.servedOnMain, 0);
    assert.equal(s.core.lastRequest?.model, 'echo');
  });

  test('refusals are the main thread\'s: 401, and the same 403 for a forbidden and an unknown model', async () => {
    const asked = s.configsAsked.length;
    const missing = await infer(s.httpPort, 'echo');
    assert.equal(missing.status, 401);
    assert.equal(missing.headers['www-authenticate'], 'Bearer');
    assert.equal((await infer(s.httpPort, 'echo', 'not-a-key')).status, 401);
    const forbidden = await infer(s.httpPort, 'echo', elsewhere.secret);
    const unknown = await infer(s.httpPort, 'no_such_model', elsewhere.secret);
    assert.equal(forbidden.status, 403);
    assert.equal(
      (json(forbidden) as { error: string }).error,
      "key 'elsewhere' has no scope for 'inference' on model 'echo'",
    );
    assert.equal(
      (json(unknown) as { error: string }).error.replace('no_such_model', 'echo'),
      (json(forbidden) as { error: string }).error,
    );
    assert.equal((await callError(grpcInfer(s.grpcPort, 'echo'))).code, grpc.status.UNAUTHENTICATED);
    const g = await callError(grpcInfer(s.grpcPort, 'no_such_model', elsewhere.secret));
    assert.equal(g.code, grpc.status.PERMISSION_DENIED);
    assert.equal(g.details, "key 'elsewhere' has no scope for 'inference' on model 'no_such_model'");
    // Neither the threads nor the main thread looked a model up for a key that may not use it.
    assert.deepEqual(s.configsAsked.slice(asked), []);
    assert.ok(s.access.failures.scope >= 3 && s.access.failures.missing >= 2 && s.access.failures.unknown >= 1);
  });

  test('a reload reaches the threads before their next request: a new key works, a removed one stops', async () => {
    const fresh = createKey('fresh', ['inference']);
    s.access.replaceKeys(parseKeysFile('keys.yaml', `keys:\n${fresh.entry}${elsewhere.entry}`));
    const before = s.servedOnMain;
    for (let i = 0; i < 8; i++) {
      assert.equal((await infer(s.httpPort, 'echo', fresh.secret)).status, 200);
      assert.equal((await infer(s.httpPort, 'echo', client.secret)).status, 401);
    }
    assert.equal((await grpcInfer(s.grpcPort, 'echo', fresh.secret)).modelName, 'echo');
    assert.equal((await callError(grpcInfer(s.grpcPort, 'echo', client.secret))).code, grpc.status.UNAUTHENTICATED);
    // The new key's requests were served on the threads.
    assert.equal(s.servedOnMain, before);
    s.access.replaceKeys(parseKeysFile('keys.yaml', `keys:\n${client.entry}${elsewhere.entry}`));
  });
});

test('the failure limit is one per server, however many threads see the failures', async () => {
  const key = createKey('k', ['inference']);
  const s = await startStack(`keys:\n${key.entry}`, 4);
  try {
    assert.equal((await infer(s.httpPort, 'echo', key.secret)).status, 200);
    // On connections of their own, so both threads see some of them.
    for (let i = 0; i < 4; i++) assert.equal((await infer(s.httpPort, 'echo', `guess-${i}`)).status, 401);
    assert.equal(s.access.failures.unknown, 4);
    // The limit is reached: even the right key is refused, on whichever thread its connection lands.
    for (let i = 0; i < 6; i++) {
      const r = await infer(s.httpPort, 'echo', key.secret);
      assert.equal(r.status, 429, r.body.toString());
      assert.ok(Number(r.headers['retry-after']) >= 1);
    }
    assert.equal((await callError(grpcInfer(s.grpcPort, 'echo', key.secret))).code, grpc.status.RESOURCE_EXHAUSTED);
    assert.equal(s.access.failures.unknown, 4);
    assert.equal(s.access.failures.rate_limited, 7);
    // Without a key a request is anonymous, which the limit does not touch (health stays open).
    assert.equal((await call(s.httpPort, 'GET', '/v2/health/ready', { headers: { Connection: 'close' } })).status, 200);
  } finally {
    await s.close();
  }
});

/** Resolves once `cond` holds (checked every 5 ms), or fails after `ms`. */
async function until(cond: () => boolean, what: string, ms = 10_000): Promise<void> {
  const end = Date.now() + ms;
  while (!cond()) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 5));
  }
}

test('a request a thread admitted before its address reached the failure limit, run after it, gets 429', async () => {
  const key = createKey('k', ['inference']);
  const s = await startStack(`keys:\n${key.entry}`, 3);
  const socket = net.connect(s.httpPort, '127.0.0.1');
  try {
    await new Promise<void>((resolve, reject) => socket.once('connect', resolve).once('error', reject));
    let reply = '';
    socket.on('data', (d: Buffer) => (reply += d.toString('latin1')));
    const closed = new Promise<void>((resolve) => socket.once('close', resolve));
    // The headers and half the body: the thread checks the key on the headers, then waits for the rest.
    socket.write(
      `POST /v2/models/echo/infer HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${key.secret}\r\n` +
        `Content-Type: application/json\r\nContent-Length: ${INPUTS.length}\r\nConnection: close\r\n\r\n` +
        INPUTS.slice(0, 10),
    );
    // The thread asks for the model's configuration only once it has admitted the key.
    await until(() => s.configsAsked.includes('echo'), 'the thread to admit the request');
    for (let i = 0; i < 3; i++) assert.equal((await infer(s.httpPort, 'echo', `guess-${i}`)).status, 401);
    socket.write(INPUTS.slice(10));
    // Connection: close: the server closes once it has answered.
    await closed;
    assert.match(reply, /^HTTP\/1\.1 429 /, reply);
    assert.match(reply, /\r\nretry-after: \d+\r\n/i, reply);
    assert.match(reply, /too many failed key checks from this address/);
    assert.deepEqual(s.inferredAt, []);
    assert.equal(s.access.failures.rate_limited, 1);
  } finally {
    socket.destroy();
    await s.close();
  }
});

test('under load on both threads, no keyed request from a limited address runs until its minute ends', async () => {
  const key = createKey('k', ['inference']);
  let offset = 0;
  const s = await startStack(`keys:\n${key.entry}`, 5, () => Date.now() + offset);
  let limitedAt = Infinity;
  s.access.subscribe((u) => {
    if (u.t === 'limited') limitedAt = Math.min(limitedAt, performance.now());
  });
  try {
    let stop = false;
    /** Every keyed infer sent while the failures mount: when it was sent, and its answer. */
    const answers: Array<{ sentAt: number; status: number | string; via: string }> = [];
    const httpLoop = async (): Promise<void> => {
      while (!stop) {
        const sentAt = performance.now();
        const r = await infer(s.httpPort, 'echo', key.secret);
        answers.push({ sentAt, status: r.status, via: 'http' });
        if (r.status === 429) assert.ok(Number(r.headers['retry-after']) >= 1);
      }
    };
    const grpcLoop = async (): Promise<void> => {
      while (!stop) {
        const sentAt = performance.now();
        const status = await grpcInfer(s.grpcPort, 'echo', key.secret).then(
          () => 'OK',
          (e: grpc.ServiceError) => grpc.status[e.code],
        );
        answers.push({ sentAt, status, via: 'grpc' });
      }
    };
    const loops = [httpLoop(), httpLoop(), httpLoop(), grpcLoop(), grpcLoop()];
    await until(() => answers.length >= 10, 'the load to start');
    for (let i = 0; i < 5; i++) assert.equal((await infer(s.httpPort, 'echo', `guess-${i}`)).status, 401);
    const limitSeen = performance.now();
    const after = (via: string): number => answers.filter((a) => a.via === via && a.sentAt > limitSeen).length;
    await until(() => after('http') >= 20 && after('grpc') >= 4, 'requests after the limit');
    stop = true;
    await Promise.all(loops);
    assert.ok(limitedAt <= limitSeen, 'the fifth failure reached the limit');
    // Nothing ran after the limit was reached, whichever thread had admitted it.
    assert.deepEqual(s.inferredAt.filter((t) => t >= limitedAt), []);
    for (const a of answers) {
      const ok: Array<number | string> = a.via === 'http' ? [200, 429] : ['OK', 'RESOURCE_EXHAUSTED'];
      assert.ok(ok.includes(a.status), `${a.via} answered ${a.status}`);
      if (a.sentAt > limitSeen) assert.ok(a.status === 429 || a.status === 'RESOURCE_EXHAUSTED', JSON.stringify(a));
    }
    // The minute over: the key works again, over both protocols.
    offset = 61_000;
    assert.equal((await infer(s.httpPort, 'echo', key.secret)).status, 200);
    assert.equal((await grpcInfer(s.grpcPort, 'echo', key.secret)).modelName, 'echo');
  } finally {
    await s.close();
  }
});
