/**
 * --auth-keys over HTTP, gRPC and the metrics port, in front of a real
 * Server with real ONNX models: every scope against every API group, model
 * patterns, the probe-safe 403, lists filtered to the key's models, the
 * failure limit, oversized and non-Bearer credentials, and Triton's
 * restricted-API headers alongside.
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import * as grpc from '@grpc/grpc-js';
import { create } from '@bufbuild/protobuf';
import { AccessControl, API_GROUPS, createKey, parseKeysFile, type ApiGroup } from '../../src/auth/index.js';
import { Server } from '../../src/core/server.js';
import type { ServerApi } from '../../src/core/server-api.js';
import { HttpFrontend, LogSettings, TraceSettings } from '../../src/frontends/http/index.js';
import { GrpcFrontend, inferenceServiceDefinition } from '../../src/frontends/grpc/index.js';
import { ModelInferRequestSchema, type ModelStreamInferResponse } from '../../src/gen/grpc_service_pb.js';
import { Metrics, MetricsFrontend } from '../../src/metrics/index.js';
import { silentLogger } from '../../src/logger.js';
import { TempRepository } from '../helpers/repository.js';
import { call, json, type HttpReply } from '../frontends/http/helpers.js';

const MODEL = 'simple';
const OTHER = 'other';
const ONES = Array.from({ length: 16 }, () => 1);

const INFER_BODY = JSON.stringify({
  inputs: [
    { name: 'INPUT0', datatype: 'INT32', shape: [1, 16], data: ONES },
    { name: 'INPUT1', datatype: 'INT32', shape: [1, 16], data: ONES },
  ],
});

const grpcInfer = (model: string) =>
  create(ModelInferRequestSchema, {
    modelName: model,
    inputs: [
      { name: 'INPUT0', datatype: 'INT32', shape: [1n, 16n] },
      { name: 'INPUT1', datatype: 'INT32', shape: [1n, 16n] },
    ],
    rawInputContents: [new Uint8Array(new Int32Array(ONES).buffer), new Uint8Array(new Int32Array(ONES).buffer)],
  });

/** One call per API group, over HTTP and over gRPC, on model `simple` where the group names a model. */
const HTTP_CALLS: Array<[ApiGroup, string, string, string?]> = [
  ['health', 'GET', '/v2/health/ready'],
  ['metadata', 'GET', '/v2'],
  ['metadata', 'GET', `/v2/models/${MODEL}`],
  ['inference', 'POST', `/v2/models/${MODEL}/infer`, INFER_BODY],
  ['shared-memory', 'GET', '/v2/systemsharedmemory/status'],
  ['model-config', 'GET', `/v2/models/${MODEL}/config`],
  ['model-repository', 'POST', '/v2/repository/index', '{}'],
  ['statistics', 'GET', `/v2/models/${MODEL}/stats`],
  ['trace', 'GET', '/v2/trace/setting'],
  ['logging', 'GET', '/v2/logging'],
];

const GRPC_CALLS: Array<[ApiGroup, string, unknown]> = [
  ['health', 'ServerReady', {}],
  ['health', 'ModelReady', { name: MODEL }],
  ['metadata', 'ServerMetadata', {}],
  ['metadata', 'ModelMetadata', { name: MODEL }],
  ['inference', 'ModelInfer', grpcInfer(MODEL)],
  ['shared-memory', 'SystemSharedMemoryStatus', {}],
  ['model-config', 'ModelConfig', { name: MODEL }],
  ['model-repository', 'RepositoryIndex', {}],
  ['statistics', 'ModelStatistics', { name: MODEL }],
  ['trace', 'TraceSetting', {}],
  ['logging', 'LogSettings', {}],
];

/** A ServerApi that records which of its methods a request reached. */
function recording(server: ServerApi): { api: ServerApi; calls: string[] } {
  const calls: string[] = [];
  const api = new Proxy(server, {
    get(target, prop, receiver) {
      const value = Reflect.get(target, prop, receiver) as unknown;
      if (typeof value !== 'function') return value;
      return (...args: unknown[]) => {
        calls.push(String(prop));
        return (value as (...a: unknown[]) => unknown).apply(target, args);
      };
    },
  });
  return { api, calls };
}

interface Stack {
  http: number;
  grpc: grpc.Client;
  metrics: number;
  close(): Promise<void>;
}

async function startStack(
  server: ServerApi,
  access: AccessControl,
  extra: { restrictedApis?: string[]; restrictedProtocols?: string[] } = {},
): Promise<Stack> {
  const http = new HttpFrontend(server, {
    port: 0,
    address: '127.0.0.1',
    maxInputSize: 1 << 20,
    logger: silentLogger,
    access,
    restrictedApis: extra.restrictedApis,
  });
  const grpcFrontend = new GrpcFrontend(server, {
    port: 0,
    address: '127.0.0.1',
    access,
    logSettings: new LogSettings(),
    traceSettings: new TraceSettings(),
    restrictedProtocols: extra.restrictedProtocols,
  });
  const metrics = new Metrics({ allowCpuMetrics: false, allowGpuMetrics: false });
  const metricsFrontend = new MetricsFrontend(metrics, { port: 0, address: '127.0.0.1', access });
  const ports = {
    http: (await http.start()).port,
    grpc: (await grpcFrontend.start()).port,
    metrics: (await metricsFrontend.start()).port,
  };
  const Client = grpc.makeGenericClientConstructor(inferenceServiceDefinition, 'GRPCInferenceService');
  const client = new Client(`127.0.0.1:${ports.grpc}`, grpc.credentials.createInsecure());
  return {
    http: ports.http,
    grpc: client,
    metrics: ports.metrics,
    async close() {
      client.close();
      await Promise.all([http.stop(), grpcFrontend.stop(), metricsFrontend.stop()]);
      metrics.close();
    },
  };
}

function grpcCall<T = unknown>(
  client: grpc.Client,
  method: string,
  request: unknown,
  secret?: string | { raw: string },
): Promise<{ ok?: T; error?: grpc.ServiceError }> {
  const md = new grpc.Metadata();
  if (typeof secret === 'string') md.set('authorization', `Bearer ${secret}`);
  else if (secret !== undefined) md.set('authorization', secret.raw);
  return new Promise((resolve) => {
    const fn = (client as unknown as Record<string, (...args: unknown[]) => void>)[method]!;
    fn.call(client, request, md, (err: grpc.ServiceError | null, res: T) =>
      resolve(err ? { error: err } : { ok: res }),
    );
  });
}

const bearer = (secret: string | undefined): Record<string, string> =>
  secret === undefined ? {} : { Authorization: `Bearer ${secret}` };

let repo: TempRepository;
let core: Server;
let recorder: { api: ServerApi; calls: string[] };
let access: AccessControl;
let stack: Stack;
/** One key per scope, opening that group alone (on model `simple` for the model groups). */
const perScope = new Map<string, string>();
let narrow: string;
let wide: string;

before(async () => {
  repo = new TempRepository().addSub(MODEL).addSub(OTHER);
  core = new Server({
    modelRepositories: [repo.dir],
    modelControlMode: 'explicit',
    loadModels: [MODEL, OTHER],
    logger: silentLogger,
  });
  await core.start();
  recorder = recording(core);
  let entries = '';
  for (const group of API_GROUPS) {
    const scope =
      group === 'metadata' || group === 'inference' || group === 'model-config' || group === 'statistics'
        ? `${group}:${MODEL}`
        : group;
    const key = createKey(`only-${group}`, [scope]);
    perScope.set(group, key.secret);
    entries += key.entry;
  }
  const n = createKey('narrow', ['inference:sim*', 'metadata:s?mple', 'statistics:sim*', 'model-config:simple']);
  const w = createKey('wide', ['inference', 'statistics', 'metadata', 'model-config']);
  narrow = n.secret;
  wide = w.secret;
  access = new AccessControl(parseKeysFile('keys.yaml', `keys:\n${entries}${n.entry}${w.entry}`), { failureLimit: 0 });
  stack = await startStack(recorder.api, access);
});

after(async () => {
  await stack?.close();
  await core?.stop();
  repo?.cleanup();
});

describe('every scope opens its API group and no other', () => {
  test('HTTP: a key with one scope gets 403 elsewhere; no key gets 401 except for health', async () => {
    for (const [group, method, path, body] of HTTP_CALLS) {
      const anonymous = await call(stack.http, method, path, { body });
      assert.equal(
        anonymous.status,
        group === 'health' ? 200 : 401,
        `${method} ${path} without a key: ${anonymous.body}`,
      );
      if (anonymous.status === 401) assert.equal(anonymous.headers['www-authenticate'], 'Bearer');
      for (const scope of API_GROUPS) {
        const r = await call(stack.http, method, path, { body, headers: bearer(perScope.get(scope)) });
        const open = scope === group || group === 'health';
        assert.equal(r.status, open ? 200 : 403, `${method} ${path} with only '${scope}': ${r.body}`);
        if (!open)
          assert.match(
            String((json(r) as { error: string }).error),
            new RegExp(`^key 'only-${scope}' has no scope for '${group}'`),
          );
      }
    }
  });

  test('gRPC: the same, as PERMISSION_DENIED and UNAUTHENTICATED', async () => {
    for (const [group, method, request] of GRPC_CALLS) {
      const anonymous = await grpcCall(stack.grpc, method, request);
      if (group === 'health')
        assert.equal(anonymous.error, undefined, `${method} without a key: ${anonymous.error?.details}`);
      else assert.equal(anonymous.error?.code, grpc.status.UNAUTHENTICATED, `${method} without a key`);
      for (const scope of API_GROUPS) {
        const r = await grpcCall(stack.grpc, method, request, perScope.get(scope));
        if (scope === group || group === 'health')
          assert.equal(r.error, undefined, `${method} with only '${scope}': ${r.error?.details}`);
        else assert.equal(r.error?.code, grpc.status.PERMISSION_DENIED, `${method} with only '${scope}'`);
      }
    }
  });

  test('the metrics port opens to the metrics scope', async () => {
    assert.equal((await call(stack.metrics, 'GET', '/metrics')).status, 401);
    for (const scope of API_GROUPS) {
      const r = await call(stack.metrics, 'GET', '/metrics', { headers: bearer(perScope.get(scope)) });
      assert.equal(r.status, scope === 'metrics' ? 200 : 403, `with only '${scope}'`);
    }
  });
});

describe('model patterns', () => {
  test('a key narrowed by a glob reaches the models it matches', async () => {
    const ok = await call(stack.http, 'POST', `/v2/models/${MODEL}/infer`, {
      body: INFER_BODY,
      headers: bearer(narrow),
    });
    assert.equal(ok.status, 200, ok.body.toString());
    assert.deepEqual((json(ok) as { outputs: Array<{ data: number[] }> }).outputs[0]!.data, Array(16).fill(2));
    const other = await call(stack.http, 'POST', `/v2/models/${OTHER}/infer`, {
      body: INFER_BODY,
      headers: bearer(narrow),
    });
    assert.equal(other.status, 403);
    assert.equal(
      (json(other) as { error: string }).error,
      `key 'narrow' has no scope for 'inference' on model '${OTHER}'`,
    );
    assert.equal((await call(stack.http, 'GET', `/v2/models/${MODEL}`, { headers: bearer(narrow) })).status, 200);
    assert.equal((await call(stack.http, 'GET', `/v2/models/${OTHER}`, { headers: bearer(narrow) })).status, 403);
    assert.equal((await grpcCall(stack.grpc, 'ModelInfer', grpcInfer(MODEL), narrow)).error, undefined);
    assert.equal(
      (await grpcCall(stack.grpc, 'ModelInfer', grpcInfer(OTHER), narrow)).error?.code,
      grpc.status.PERMISSION_DENIED,
    );
    assert.equal(
      (await grpcCall(stack.grpc, 'ModelMetadata', { name: OTHER }, narrow)).error?.code,
      grpc.status.PERMISSION_DENIED,
    );
  });

  test('a model outside the scopes gets the same 403 whether it ' +
    'exists or not, and the server is never asked', async () => {
    const replies: HttpReply[] = [];
    const details: string[] = [];
    for (const model of [OTHER, 'no_such_model']) {
      recorder.calls.length = 0;
      for (const [path, body] of [
        [`/v2/models/${model}/infer`, INFER_BODY],
        [`/v2/models/${model}`, undefined],
        [`/v2/models/${model}/config`, undefined],
        [`/v2/models/${model}/stats`, undefined],
      ] as const) {
        const r = await call(stack.http, body === undefined ? 'GET' : 'POST', path, { body, headers: bearer(narrow) });
        replies.push(r);
      }
      for (const [method, request] of [
        ['ModelInfer', grpcInfer(model)],
        ['ModelMetadata', { name: model }],
        ['ModelConfig', { name: model }],
        ['ModelStatistics', { name: model }],
      ] as const) {
        const r = await grpcCall(stack.grpc, method, request, narrow);
        assert.equal(r.error?.code, grpc.status.PERMISSION_DENIED);
        details.push(r.error!.details.replace(model, 'M'));
      }
      assert.deepEqual(recorder.calls, [], `the server was asked about '${model}'`);
    }
    const shape = (r: HttpReply, model: string) => ({
      status: r.status,
      headers: { ...r.headers, date: '', 'content-length': '' },
      body: r.body.toString().replace(model, 'M'),
    });
    for (let i = 0; i < 4; i++) assert.deepEqual(shape(replies[i]!, OTHER), shape(replies[i + 4]!, 'no_such_model'));
    assert.deepEqual(details.slice(0, 4), details.slice(4));
    // Where the key opens the group, an unknown model is the server's own 404.
    assert.equal(
      (await call(stack.http, 'POST', '/v2/models/no_such_model/infer', { body: INFER_BODY, headers: bearer(wide) }))
        .status,
      404,
    );
  });

  test("every model's statistics list only the models in the key's scopes", async () => {
    const names = (r: HttpReply) =>
      (json(r) as { model_stats: Array<{ name: string }> }).model_stats.map((s) => s.name).sort();
    assert.deepEqual(names(await call(stack.http, 'GET', '/v2/models/stats', { headers: bearer(narrow) })), [MODEL]);
    assert.deepEqual(
      names(await call(stack.http, 'GET', '/v2/models/stats', { headers: bearer(wide) })),
      [OTHER, MODEL].sort(),
    );
    const g = await grpcCall<{ modelStats: Array<{ name: string }> }>(stack.grpc, 'ModelStatistics', {}, narrow);
    assert.deepEqual(g.ok?.modelStats.map((s) => s.name), [MODEL]);
    const all = await grpcCall<{ modelStats: Array<{ name: string }> }>(stack.grpc, 'ModelStatistics', {}, wide);
    assert.deepEqual(all.ok?.modelStats.map((s) => s.name).sort(), [OTHER, MODEL].sort());
  });

  test('a stream request for a model outside the scopes ends the stream with PERMISSION_DENIED', async () => {
    const run = (model: string) =>
      new Promise<{ messages: ModelStreamInferResponse[]; error?: grpc.ServiceError }>((resolve) => {
        const md = new grpc.Metadata();
        md.set('authorization', `Bearer ${narrow}`);
        const messages: ModelStreamInferResponse[] = [];
        const s = (
          stack.grpc as unknown as {
            ModelStreamInfer(md: grpc.Metadata): grpc.ClientDuplexStream<unknown, ModelStreamInferResponse>;
          }
        ).ModelStreamInfer(md);
        s.on('data', (m) => messages.push(m));
        s.on('error', (error: grpc.ServiceError) => resolve({ messages, error }));
        s.on('end', () => resolve({ messages }));
        s.write(grpcInfer(model));
        s.end();
      });
    const ok = await run(MODEL);
    assert.equal(ok.error, undefined);
    assert.equal(ok.messages.length, 1);
    assert.equal(ok.messages[0]!.errorMessage, '');
    const refused = await run(OTHER);
    assert.equal(refused.error?.code, grpc.status.PERMISSION_DENIED);
  });
});

describe('credentials that are not a key', () => {
  test('a non-Bearer scheme, an empty token and a huge token are 401 without a crash', async () => {
    for (const value of ['Basic dXNlcjpwYXNz', 'Bearer', 'Bearer ', 'Token abc', `Bearer ${'A'.repeat(15_000)}`]) {
      const r = await call(stack.http, 'GET', '/v2', { headers: { Authorization: value } });
      assert.equal(r.status, 401, value.slice(0, 20));
      assert.match((json(r) as { error: string }).error, /must be 'Bearer <secret>'/);
    }
    assert.equal((await call(stack.http, 'GET', '/v2', { headers: bearer('not-a-key') })).status, 401);
    const huge = await grpcCall(stack.grpc, 'ServerMetadata', {}, { raw: `Bearer ${'A'.repeat(6000)}` });
    assert.equal(huge.error?.code, grpc.status.UNAUTHENTICATED);
    assert.equal(
      (await grpcCall(stack.grpc, 'ServerMetadata', {}, { raw: 'Basic abc' })).error?.code,
      grpc.status.UNAUTHENTICATED,
    );
    // Still serving.
    assert.equal((await call(stack.http, 'GET', '/v2', { headers: bearer(wide) })).status, 200);
  });

  test('failures are counted by reason', () => {
    assert.ok(access.failures.malformed >= 7);
    assert.ok(access.failures.unknown >= 1);
    assert.ok(access.failures.scope > 0 && access.failures.missing > 0);
  });
});

describe('one gRPC connection', () => {
  test('its remembered key follows reloads: a removed key stops, another header is a key of its own', async () => {
    const a = createKey('a', ['inference', 'metadata']);
    const b = createKey('b', ['metadata']);
    const keys = new AccessControl(parseKeysFile('keys.yaml', `keys:\n${a.entry}${b.entry}`), { failureLimit: 0 });
    const s = await startStack(core, keys);
    try {
      // Every call below goes over the one connection of the one client.
      for (let i = 0; i < 3; i++) {
        assert.equal((await grpcCall(s.grpc, 'ModelInfer', grpcInfer(MODEL), a.secret)).error, undefined);
        assert.equal((await grpcCall(s.grpc, 'ServerMetadata', {}, a.secret)).error, undefined);
      }
      const other = await grpcCall(s.grpc, 'ModelInfer', grpcInfer(MODEL), b.secret);
      assert.equal(other.error?.code, grpc.status.PERMISSION_DENIED);
      assert.equal((await grpcCall(s.grpc, 'ModelInfer', grpcInfer(MODEL), `${a.secret}x`)).error?.code, 16);
      assert.equal((await grpcCall(s.grpc, 'ModelInfer', grpcInfer(MODEL), a.secret)).error, undefined);
      assert.ok(keys.rememberedPeers >= 1);
      keys.replaceKeys(parseKeysFile('keys.yaml', `keys:\n${b.entry}`));
      const removed = await grpcCall(s.grpc, 'ModelInfer', grpcInfer(MODEL), a.secret);
      assert.equal(removed.error?.code, grpc.status.UNAUTHENTICATED);
      assert.equal((await grpcCall(s.grpc, 'ServerMetadata', {}, a.secret)).error?.code, grpc.status.UNAUTHENTICATED);
      assert.equal((await grpcCall(s.grpc, 'ServerMetadata', {}, b.secret)).error, undefined);
      assert.deepEqual(keys.failures, { missing: 0, malformed: 0, unknown: 3, scope: 1, rate_limited: 0 });
    } finally {
      await s.close();
    }
  });
});

describe('the failure limit', () => {
  test('after N failures a minute the address gets 429 with Retry-After, on HTTP and gRPC', async () => {
    const key = createKey('k', ['metadata']);
    const limited = new AccessControl(parseKeysFile('keys.yaml', `keys:\n${key.entry}`), { failureLimit: 3 });
    const s = await startStack(core, limited);
    try {
      for (let i = 0; i < 3; i++)
        assert.equal((await call(s.http, 'GET', '/v2', { headers: bearer(`guess-${i}`) })).status, 401);
      const r = await call(s.http, 'GET', '/v2', { headers: bearer(key.secret) });
      assert.equal(r.status, 429);
      const wait = Number(r.headers['retry-after']);
      assert.ok(wait >= 1 && wait <= 60, String(r.headers['retry-after']));
      assert.match((json(r) as { error: string }).error, /too many failed key checks/);
      // Health needs no key and still answers.
      assert.equal((await call(s.http, 'GET', '/v2/health/ready')).status, 200);
      const g = await grpcCall(s.grpc, 'ServerMetadata', {}, key.secret);
      assert.equal(g.error?.code, grpc.status.RESOURCE_EXHAUSTED);
      assert.ok(Number(g.error?.metadata.get('retry-after')[0]) >= 1);
      // ModelInfer, whose handler checks the key itself, answers the same.
      const inferred = await grpcCall(s.grpc, 'ModelInfer', grpcInfer(MODEL), key.secret);
      assert.equal(inferred.error?.code, grpc.status.RESOURCE_EXHAUSTED);
      assert.ok(Number(inferred.error?.metadata.get('retry-after')[0]) >= 1);
      assert.equal(limited.failures.rate_limited, 3);
    } finally {
      await s.close();
    }
  });
});

describe("Triton's restricted-API headers", () => {
  test('keep working alongside keys: both are needed', async () => {
    const key = createKey('k', ['inference']);
    const both = new AccessControl(parseKeysFile('keys.yaml', `keys:\n${key.entry}`), { failureLimit: 0 });
    const s = await startStack(core, both, {
      restrictedApis: ['inference:x-team=blue'],
      restrictedProtocols: ['inference:team=blue'],
    });
    try {
      const path = `/v2/models/${MODEL}/infer`;
      assert.equal((await call(s.http, 'POST', path, { body: INFER_BODY, headers: { 'x-team': 'blue' } })).status, 401);
      const noHeader = await call(s.http, 'POST', path, { body: INFER_BODY, headers: bearer(key.secret) });
      assert.equal(noHeader.status, 403);
      assert.match((json(noHeader) as { error: string }).error, /This API is restricted, expecting header 'x-team'/);
      assert.equal(
        (await call(s.http, 'POST', path, { body: INFER_BODY, headers: { ...bearer(key.secret), 'x-team': 'blue' } }))
          .status,
        200,
      );
      const md = new grpc.Metadata();
      md.set('authorization', `Bearer ${key.secret}`);
      assert.equal(
        (await grpcCall(s.grpc, 'ModelInfer', grpcInfer(MODEL), key.secret)).error?.code,
        grpc.status.UNAVAILABLE,
      );
      const ok = await new Promise<grpc.ServiceError | null>((resolve) => {
        md.set('triton-grpc-protocol-team', 'blue');
        (s.grpc as unknown as Record<string, (...args: unknown[]) => void>)['ModelInfer']!.call(
          s.grpc,
          grpcInfer(MODEL),
          md,
          (err: grpc.ServiceError | null) => resolve(err),
        );
      });
      assert.equal(ok, null);
    } finally {
      await s.close();
    }
  });
});
