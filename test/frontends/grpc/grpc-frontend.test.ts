import { Cancellation } from '../../../src/types/cancellation.js';
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import http2 from 'node:http2';
import { gunzipSync, inflateSync } from 'node:zlib';
import { create, fromBinary, toBinary, type MessageInitShape } from '@bufbuild/protobuf';
import { FileDescriptorProtoSchema } from '@bufbuild/protobuf/wkt';
import * as grpc from '@grpc/grpc-js';
import {
  ModelInferRequestSchema,
  ModelInferResponseSchema,
  ModelStreamInferResponseSchema,
  type ModelInferRequest,
  type ModelInferResponse,
  type ModelStreamInferResponse,
} from '../../../src/gen/grpc_service_pb.js';
import {
  HealthCheckRequestSchema,
  HealthCheckResponse_ServingStatus,
  type HealthCheckResponse,
} from '../../../src/gen/health_pb.js';
import { callError, EchoServer, startHarness, unary, type Harness } from './helpers.js';
import type { LogSettings, LogSettingsStore, TraceSettingsStore } from '../../../src/frontends/grpc/index.js';

const S = grpc.status;

function int32Bytes(values: number[]): Uint8Array {
  return new Uint8Array(new Int32Array(values).buffer);
}

type RequestInit = MessageInitShape<typeof ModelInferRequestSchema>;

function inferRequest(init: RequestInit): ModelInferRequest {
  return create(ModelInferRequestSchema, init);
}

const simpleRequest = (id = 'r1', extra: RequestInit = {}) =>
  inferRequest({
    modelName: 'echo',
    id,
    inputs: [{ name: 'INPUT0', datatype: 'INT32', shape: [1n, 4n] }],
    rawInputContents: [int32Bytes([1, 2, 3, 4])],
    ...extra,
  });

/** Collects every message of a ModelStreamInfer call after writing `requests` and half-closing. */
function streamAll(
  client: grpc.Client,
  requests: Array<ModelInferRequest | Buffer>,
  metadata = new grpc.Metadata(),
): Promise<{ messages: ModelStreamInferResponse[]; error?: grpc.ServiceError }> {
  return new Promise((resolve) => {
    const messages: ModelStreamInferResponse[] = [];
    const call = (
      client as unknown as {
        ModelStreamInfer(md: grpc.Metadata): grpc.ClientDuplexStream<unknown, ModelStreamInferResponse>;
      }
    ).ModelStreamInfer(metadata);
    call.on('data', (m) => messages.push(m));
    call.on('error', (error: grpc.ServiceError) => resolve({ messages, error }));
    call.on('end', () => resolve({ messages }));
    for (const r of requests) call.write(r);
    call.end();
  });
}

describe('gRPC frontend against an in-memory ServerApi', () => {
  const server = new EchoServer();
  let h: Harness;
  before(async () => {
    h = await startHarness(server);
  });
  after(async () => {
    await h.close();
  });

  test('ServerLive, ServerReady and ServerMetadata', async () => {
    assert.equal((await unary<{ live: boolean }>(h.client, 'ServerLive', {})).live, true);
    assert.equal((await unary<{ ready: boolean }>(h.client, 'ServerReady', {})).ready, true);
    const md = await unary<{ name: string; version: string; extensions: string[] }>(h.client, 'ServerMetadata', {});
    assert.equal(md.name, 'triton');
    assert.ok(md.extensions.includes('model_repository'));
  });

  test('health Check is SERVING exactly when the server is ready', async () => {
    const check = () =>
      unary<HealthCheckResponse>(h.health, 'Check', create(HealthCheckRequestSchema, { service: 'anything' }));
    assert.equal((await check()).status, HealthCheckResponse_ServingStatus.SERVING);
    server.ready = false;
    try {
      assert.equal((await check()).status, HealthCheckResponse_ServingStatus.NOT_SERVING);
      assert.equal((await unary<{ ready: boolean }>(h.client, 'ServerReady', {})).ready, false);
    } finally {
      server.ready = true;
    }
  });

  test('ModelReady, ModelMetadata and ModelConfig map unknown models to NOT_FOUND', async () => {
    assert.equal((await unary<{ ready: boolean }>(h.client, 'ModelReady', { name: 'echo', version: '' })).ready, true);
    const md = await unary<{ name: string; inputs: Array<{ shape: bigint[] }> }>(h.client, 'ModelMetadata', {
      name: 'echo',
      version: '1',
    });
    assert.equal(md.name, 'echo');
    assert.deepEqual(md.inputs[0]!.shape, [-1n, 16n]);
    const cfg = await unary<{ config: { name: string; maxBatchSize: number } }>(h.client, 'ModelConfig', {
      name: 'echo',
    });
    assert.equal(cfg.config.name, 'echo');
    assert.equal(cfg.config.maxBatchSize, 8);
    for (const method of ['ModelReady', 'ModelMetadata', 'ModelConfig']) {
      const err = await callError(unary(h.client, method, { name: 'nope' }));
      assert.equal(err.code, S.NOT_FOUND, method);
      assert.match(err.details, /Request for unknown model: 'nope' is not found/);
    }
    const err = await callError(unary(h.client, 'ModelMetadata', { name: 'echo', version: '9' }));
    assert.equal(err.code, S.NOT_FOUND);
  });

  test('ModelStatistics carries Triton’s fields; unknown model is INVALID_ARGUMENT', async () => {
    // eslint-disable-next-line @typescript-eslint/no-explicit-any -- walks the statistics message freely
    const res = await unary<{ modelStats: Array<Record<string, any>> }>(h.client, 'ModelStatistics', { name: 'echo' });
    const s = res.modelStats[0]!;
    assert.equal(s.name, 'echo');
    assert.equal(s.inferenceCount, 7n);
    assert.equal(s.executionCount, 3n);
    assert.equal(s.lastInference, 1700000000000n);
    assert.deepEqual([s.inferenceStats.success.count, s.inferenceStats.success.ns], [7n, 7000n]);
    assert.equal(s.batchStats[0].batchSize, 2n);
    const err = await callError(unary(h.client, 'ModelStatistics', { name: 'nope' }));
    assert.equal(err.code, S.INVALID_ARGUMENT);
    assert.match(err.details, /requested model 'nope' is not available/);
  });

  test('repository index, load and unload go to the ServerApi with their parameters', async () => {
    const idx = await unary<{ models: Array<{ name: string; version: string; state: string }> }>(
      h.client,
      'RepositoryIndex',
      {},
    );
    assert.deepEqual(
      idx.models.map((m) => [m.name, m.version, m.state]),
      [
        ['echo', '1', 'READY'],
        ['never_loaded', '', ''],
      ],
    );
    const ready = await unary<{ models: unknown[] }>(h.client, 'RepositoryIndex', { ready: true });
    assert.equal(ready.models.length, 1);

    await unary(h.client, 'RepositoryModelLoad', {
      modelName: 'm1',
      parameters: {
        config: { parameterChoice: { case: 'stringParam', value: '{"backend":"onnxruntime"}' } },
        'file:1/model.onnx': { parameterChoice: { case: 'bytesParam', value: new Uint8Array([1, 2, 3]) } },
      },
    });
    const load = server.loads.at(-1)!;
    assert.equal(load.name, 'm1');
    assert.equal(load.options!.config, '{"backend":"onnxruntime"}');
    assert.deepEqual([...load.options!.files!['file:1/model.onnx']!], [1, 2, 3]);

    const badType = await callError(
      unary(h.client, 'RepositoryModelLoad', {
        modelName: 'm1',
        parameters: { config: { parameterChoice: { case: 'boolParam', value: true } } },
      }),
    );
    assert.equal(badType.code, S.INVALID_ARGUMENT);
    assert.match(badType.details, /expected string_param/);
    const unknownKey = await callError(
      unary(h.client, 'RepositoryModelLoad', {
        modelName: 'm1',
        parameters: { other: { parameterChoice: { case: 'stringParam', value: 'x' } } },
      }),
    );
    assert.match(unknownKey.details, /unrecognized load parameter 'other'/);
    const failed = await callError(unary(h.client, 'RepositoryModelLoad', { modelName: 'broken' }));
    assert.equal(failed.code, S.INVALID_ARGUMENT);
    assert.match(failed.details, /load failed for model 'broken'/);

    await unary(h.client, 'RepositoryModelUnload', {
      modelName: 'm1',
      parameters: { unload_dependents: { parameterChoice: { case: 'boolParam', value: true } } },
    });
    assert.deepEqual(server.unloads.at(-1), { name: 'm1', unloadDependents: true });

    // The repository-name form reaches the core, which knows its repositories.
    for (const method of ['RepositoryIndex', 'RepositoryModelLoad', 'RepositoryModelUnload']) {
      const err = await callError(unary(h.client, method, { repositoryName: 'r', modelName: 'm1' }));
      assert.equal(err.code, S.INVALID_ARGUMENT, method);
      assert.match(err.details, /no model repository named 'r'/);
      await unary(h.client, method, { repositoryName: 'models', modelName: 'm1' });
    }
    assert.equal(server.loads.at(-1)!.options!.repository, 'models');
  });

  test('shared-memory RPCs answer as Triton does with client shared memory disabled and no GPU', async () => {
    const sys = await unary<{ regions: Record<string, unknown> }>(h.client, 'SystemSharedMemoryStatus', {});
    assert.deepEqual(sys.regions, {});
    const cuda = await unary<{ regions: Record<string, unknown> }>(h.client, 'CudaSharedMemoryStatus', {});
    assert.deepEqual(cuda.regions, {});
    const named = await callError(unary(h.client, 'SystemSharedMemoryStatus', { name: 'r0' }));
    assert.equal(named.code, S.NOT_FOUND);
    for (const method of ['SystemSharedMemoryRegister', 'SystemSharedMemoryUnregister', 'CudaSharedMemoryUnregister']) {
      const err = await callError(unary(h.client, method, { name: 'r0', key: '/k', byteSize: 64n }));
      assert.equal(err.code, S.UNIMPLEMENTED, method);
      assert.match(err.details, /Client shared memory is disabled/);
    }
    const reg = await callError(unary(h.client, 'CudaSharedMemoryRegister', { name: 'g0', byteSize: 64n }));
    assert.equal(reg.code, S.INVALID_ARGUMENT);
    assert.match(reg.details, /GPUs not supported/);
  });

  test('trace and log settings without a store answer UNAVAILABLE', async () => {
    const t = await callError(unary(h.client, 'TraceSetting', {}));
    assert.equal(t.code, S.UNAVAILABLE);
    assert.match(t.details, /does not support trace/);
    const l = await callError(unary(h.client, 'LogSettings', {}));
    assert.equal(l.code, S.UNAVAILABLE);
  });

  test('ModelInfer with raw contents answers in raw_output_contents', async () => {
    const res = await unary<ModelInferResponse>(h.client, 'ModelInfer', simpleRequest('abc'));
    assert.equal(res.modelName, 'echo');
    assert.equal(res.modelVersion, '1');
    assert.equal(res.id, 'abc');
    assert.deepEqual(res.outputs.map((o) => [o.name, o.datatype, o.shape]), [['INPUT0', 'INT32', [1n, 4n]]]);
    assert.deepEqual([...new Int32Array(new Uint8Array(res.rawOutputContents[0]!).buffer)], [1, 2, 3, 4]);
    const seen = server.requests.at(-1)!;
    assert.equal(seen.model, 'echo');
    assert.equal(seen.version, '');
    assert.ok(
      seen.inputs[0]!.data.buffer.byteLength > seen.inputs[0]!.data.byteLength,
      'input is a view into the message',
    );
    assert.ok(seen.signal instanceof Cancellation);
  });

  test('a client that gives up aborts its pending request; a completed one is never aborted', async () => {
    await unary(h.client, 'ModelInfer', simpleRequest('done'));
    const completed = server.requests.at(-1)!;
    await new Promise((r) => setTimeout(r, 20));
    assert.equal(completed.signal!.aborted, false);

    const slow = simpleRequest('slow', {
      parameters: { delay_ms: { parameterChoice: { case: 'int64Param', value: 300n } } },
    });
    const err = await callError(
      new Promise((resolve, reject) =>
        (h.client as unknown as Record<string, (...args: unknown[]) => void>).ModelInfer!.call(
          h.client,
          slow,
          new grpc.Metadata(),
          { deadline: Date.now() + 50 },
          (e: Error | null, r: unknown) => (e ? reject(e) : resolve(r)),
        ),
      ),
    );
    assert.equal(err.code, S.DEADLINE_EXCEEDED);
    const pending = server.requests.at(-1)!;
    assert.equal(pending.id, 'slow');
    for (let i = 0; i < 50 && !pending.signal!.aborted; i++) await new Promise((r) => setTimeout(r, 10));
    assert.equal(pending.signal!.aborted, true);
  });

  test('ModelInfer with typed contents also answers in raw_output_contents', async () => {
    const res = await unary<ModelInferResponse>(
      h.client,
      'ModelInfer',
      inferRequest({
        modelName: 'echo',
        inputs: [{ name: 'F', datatype: 'FP32', shape: [2n], contents: { fp32Contents: [0.5, -1] } }],
      }),
    );
    assert.equal(res.outputs[0]!.contents, undefined);
    assert.deepEqual([...new Float32Array(new Uint8Array(res.rawOutputContents[0]!).buffer)], [0.5, -1]);
  });

  test('parameters, requested outputs and classification reach the core', async () => {
    await unary(
      h.client,
      'ModelInfer',
      simpleRequest('p', {
        parameters: {
          priority: { parameterChoice: { case: 'int64Param', value: 1n } },
          timeout: { parameterChoice: { case: 'int64Param', value: 5000n } },
          sequence_id: { parameterChoice: { case: 'int64Param', value: 42n } },
          sequence_start: { parameterChoice: { case: 'boolParam', value: true } },
          sequence_end: { parameterChoice: { case: 'boolParam', value: true } },
        },
        outputs: [
          { name: 'INPUT0', parameters: { classification: { parameterChoice: { case: 'int64Param', value: 2n } } } },
        ],
      }),
    );
    const seen = server.requests.at(-1)!;
    assert.deepEqual(seen.parameters, {
      priority: 1,
      timeout: 5000,
      sequence_id: 42,
      sequence_start: true,
      sequence_end: true,
    });
    assert.deepEqual(seen.outputs, [{ name: 'INPUT0', classification: 2, parameters: undefined }]);
  });

  test('a request above the default 4 MiB gRPC limit is accepted', async () => {
    const n = 2_000_000;
    const data = new Uint8Array(n * 4);
    data[data.length - 1] = 9;
    const res = await unary<ModelInferResponse>(
      h.client,
      'ModelInfer',
      inferRequest({
        modelName: 'echo',
        inputs: [{ name: 'X', datatype: 'INT32', shape: [BigInt(n)] }],
        rawInputContents: [data],
      }),
    );
    assert.equal(res.rawOutputContents[0]!.byteLength, data.byteLength);
    assert.equal(res.rawOutputContents[0]![data.length - 1], 9);
  });

  describe('bad ModelInfer input gets the right status and the server stays up', () => {
    const cases: Array<[string, () => ModelInferRequest, number, RegExp]> = [
      [
        'raw and typed contents together',
        () =>
          simpleRequest('x', {
            inputs: [{ name: 'INPUT0', datatype: 'INT32', shape: [1n], contents: { intContents: [1] } }],
          }),
        S.INVALID_ARGUMENT,
        /contents field must not be specified when using raw_input_contents for 'INPUT0'/,
      ],
      [
        'too few raw contents',
        () => simpleRequest('x', { rawInputContents: [] }),
        S.INVALID_ARGUMENT,
        /unable to find data for input tensor 'INPUT0' for model 'echo'/,
      ],
      [
        'too many raw contents',
        () => simpleRequest('x', { rawInputContents: [int32Bytes([1, 2, 3, 4]), int32Bytes([1])] }),
        S.INVALID_ARGUMENT,
        /expected 1 raw_input_contents .* but got 2/,
      ],
      [
        'unknown model',
        () => simpleRequest('x', { modelName: 'nope' }),
        S.NOT_FOUND,
        /Request for unknown model: 'nope'/,
      ],
      [
        'unknown version',
        () => simpleRequest('x', { modelVersion: '7' }),
        S.NOT_FOUND,
        /'echo' version 7 is not found/,
      ],
      [
        'bad parameter',
        () => simpleRequest('x', { parameters: { triton_x: { parameterChoice: { case: 'boolParam', value: true } } } }),
        S.INVALID_ARGUMENT,
        /reserved for Triton usage/,
      ],
      [
        'decoupled model',
        () => simpleRequest('x', { modelName: 'decoupled' }),
        S.UNIMPLEMENTED,
        /doesn't support models with decoupled transaction policy/,
      ],
      [
        'shared memory region that was never registered',
        () =>
          simpleRequest('x', {
            inputs: [
              {
                name: 'INPUT0',
                datatype: 'INT32',
                shape: [4n],
                parameters: {
                  shared_memory_region: { parameterChoice: { case: 'stringParam', value: 'r0' } },
                  shared_memory_byte_size: { parameterChoice: { case: 'int64Param', value: 16n } },
                },
              },
            ],
            rawInputContents: [],
          }),
        S.NOT_FOUND,
        /Unable to find shared memory region: 'r0'/,
      ],
      ['execution failure', () => simpleRequest('x', { modelName: 'fail' }), S.INTERNAL, /deliberate failure/],
    ];
    for (const [name, make, code, message] of cases) {
      test(name, async () => {
        const err = await callError(unary(h.client, 'ModelInfer', make()));
        assert.equal(err.code, code);
        assert.match(err.details, message);
        assert.equal((await unary<{ live: boolean }>(h.client, 'ServerLive', {})).live, true);
      });
    }

    test('malformed protobuf', async () => {
      const err = await callError(
        new Promise((resolve, reject) =>
          h.client.makeUnaryRequest(
            '/inference.GRPCInferenceService/ModelInfer',
            (b: Buffer) => b,
            (b: Buffer) => b,
            Buffer.from([0x0a, 0xff, 0xff, 0xff, 0x0f]),
            (err, res) => (err ? reject(err) : resolve(res)),
          ),
        ),
      );
      assert.equal(err.code, S.INVALID_ARGUMENT);
      assert.match(err.details, /failed to parse inference.ModelInferRequest/);
    });
  });

  test('ModelStreamInfer answers in request order, with errors in-stream and the stream kept open', async () => {
    const slow = simpleRequest('first', {
      parameters: { delay_ms: { parameterChoice: { case: 'int64Param', value: 80n } } },
    });
    const bad = simpleRequest('second', { modelName: 'nope' });
    const failing = simpleRequest('third', { modelName: 'fail' });
    const malformed = Buffer.from([0x0a, 0xff, 0xff, 0xff, 0x0f]);
    const fast = simpleRequest('fifth');
    // Write the malformed one raw, through a client whose serializer passes Buffers through.
    const rawClient = new grpc.Client(`127.0.0.1:${h.port}`, grpc.credentials.createInsecure());
    try {
      const call = rawClient.makeBidiStreamRequest(
        '/inference.GRPCInferenceService/ModelStreamInfer',
        (m: ModelInferRequest | Buffer) => (Buffer.isBuffer(m) ? m : Buffer.from(toBinary(ModelInferRequestSchema, m))),
        (b: Buffer) => fromBinary(ModelStreamInferResponseSchema, b),
      );
      const messages: ModelStreamInferResponse[] = [];
      const ended = new Promise<void>((resolve, reject) => {
        call.on('data', (m: ModelStreamInferResponse) => messages.push(m));
        call.on('end', resolve);
        call.on('error', reject);
      });
      for (const m of [slow, bad, failing, malformed, fast]) call.write(m);
      call.end();
      await ended;
      assert.equal(messages.length, 5);
      assert.deepEqual(
        messages.map((m) => [m.errorMessage === '' ? 'ok' : 'error', m.inferResponse?.id]),
        [
          ['ok', 'first'],
          ['error', 'second'],
          ['error', 'third'],
          ['error', ''],
          ['ok', 'fifth'],
        ],
      );
      assert.match(messages[1]!.errorMessage, /Request for unknown model: 'nope'/);
      assert.equal(messages[1]!.inferResponse!.modelName, '');
      assert.match(messages[2]!.errorMessage, /deliberate failure/);
      assert.equal(messages[2]!.inferResponse!.modelName, 'fail');
      assert.match(messages[3]!.errorMessage, /failed to parse/);
      for (const i of [0, 2, 4]) {
        assert.deepEqual(messages[i]!.inferResponse!.parameters.triton_final_response!.parameterChoice, {
          case: 'boolParam',
          value: true,
        });
      }
      assert.equal(messages[4]!.inferResponse!.rawOutputContents.length, 1);
    } finally {
      rawClient.close();
    }
  });

  test('with triton_grpc_error the first failure after the core ran ends the call with its status', async () => {
    const md = new grpc.Metadata();
    md.set('triton_grpc_error', 'true');
    const { messages, error } = await streamAll(
      h.client,
      [
        simpleRequest('a'),
        simpleRequest('b', { modelName: 'nope' }),
        simpleRequest('c', { modelName: 'fail' }),
        simpleRequest('d'),
      ],
      md,
    );
    // The unknown model is refused up front and still answered in-stream.
    assert.deepEqual(
      messages.map((m) => [m.inferResponse!.id, m.errorMessage === '']),
      [
        ['a', true],
        ['b', false],
      ],
    );
    assert.ok(error);
    assert.equal(error.code, S.INTERNAL);
    assert.match(error.details, /deliberate failure/);
  });

  test('server reflection lists the inference service and serves its file', async () => {
    const list = await reflect(h.port, listServicesRequest());
    assert.ok(list.services.includes('inference.GRPCInferenceService'), list.services.join(','));
    assert.ok(list.services.includes('grpc.health.v1.Health'));
    const files = await reflect(h.port, fileByNameRequest('grpc_service.proto'));
    const names = files.files.map((f) => fromBinary(FileDescriptorProtoSchema, f).name);
    assert.ok(names.includes('grpc_service.proto'), names.join(','));
    const svc = fromBinary(FileDescriptorProtoSchema, files.files[names.indexOf('grpc_service.proto')]!).service[0]!;
    assert.equal(svc.name, 'GRPCInferenceService');
    assert.ok(svc.method.some((m) => m.name === 'ModelStreamInfer' && m.clientStreaming && m.serverStreaming));
  });
});

describe('gRPC frontend options', () => {
  test('request compression from the client is accepted', async () => {
    const server = new EchoServer();
    const h = await startHarness(server, {}, { 'grpc.default_compression_algorithm': grpc.compressionAlgorithms.gzip });
    try {
      const res = await unary<ModelInferResponse>(h.client, 'ModelInfer', simpleRequest('gz'));
      assert.equal(res.id, 'gz');
    } finally {
      await h.close();
    }
  });

  test('response compression level low sends gzip-compressed infer responses', async () => {
    const server = new EchoServer();
    const h = await startHarness(server, { compressionLevel: 'low' });
    try {
      // grpc-js clients decompress transparently.
      const res = await unary<ModelInferResponse>(h.client, 'ModelInfer', simpleRequest('z'));
      assert.equal(res.id, 'z');
      assert.deepEqual([...new Int32Array(new Uint8Array(res.rawOutputContents[0]!).buffer)], [1, 2, 3, 4]);
      // On the wire: grpc-encoding gzip and the compressed flag set.
      const { headers, body } = await rawGrpcCall(
        h.port,
        '/inference.GRPCInferenceService/ModelInfer',
        toBinary(ModelInferRequestSchema, simpleRequest('w')),
      );
      assert.equal(headers['grpc-encoding'], 'gzip');
      assert.equal(body[0], 1);
      const msg = fromBinary(ModelInferResponseSchema, gunzipSync(body.subarray(5)));
      assert.equal(msg.id, 'w');
      // Other RPCs stay uncompressed.
      const live = await rawGrpcCall(h.port, '/inference.GRPCInferenceService/ServerLive', new Uint8Array(0));
      assert.equal(live.body[0], 0);
    } finally {
      await h.close();
    }
  });

  test('an unknown compression level is refused at start', async () => {
    const { GrpcFrontend } = await import('../../../src/frontends/grpc/index.js');
    const f = new GrpcFrontend(new EchoServer(), { port: 0, compressionLevel: 'extreme' });
    await assert.rejects(f.start(), /must be none, low, medium or high/);
  });

  test('trace and log settings use the stores given', async () => {
    let log: LogSettings = {
      log_file: '',
      log_info: true,
      log_warning: true,
      log_error: true,
      log_verbose_level: 0,
      log_format: 'default',
    };
    const logSettings: LogSettingsStore = {
      get: () => log,
      update: (c) => (log = { ...log, ...c }),
    };
    const traces: Record<string, string[]> = { trace_level: ['OFF'], trace_rate: ['1000'] };
    const traceSettings: TraceSettingsStore = {
      get: () => traces,
      update: (_m, c) => Object.assign(traces, c),
    };
    const h = await startHarness(new EchoServer(), { logSettings, traceSettings });
    try {
      const res = await unary<{ settings: Record<string, { parameterChoice: { case: string; value: unknown } }> }>(
        h.client,
        'LogSettings',
        {
          settings: {
            log_verbose_level: { parameterChoice: { case: 'uint32Param', value: 2 } },
            log_info: { parameterChoice: { case: 'boolParam', value: false } },
          },
        },
      );
      assert.deepEqual(res.settings.log_verbose_level!.parameterChoice, { case: 'uint32Param', value: 2 });
      assert.deepEqual(res.settings.log_info!.parameterChoice, { case: 'boolParam', value: false });
      assert.deepEqual(res.settings.log_file!.parameterChoice, { case: 'stringParam', value: '' });
      const badType = await callError(
        unary(h.client, 'LogSettings', {
          settings: { log_info: { parameterChoice: { case: 'stringParam', value: 'yes' } } },
        }),
      );
      assert.equal(badType.code, S.INVALID_ARGUMENT);
      assert.match(badType.details, /expect boolean for 'log_info'/);
      const file = await callError(
        unary(h.client, 'LogSettings', {
          settings: { log_file: { parameterChoice: { case: 'stringParam', value: 'x' } } },
        }),
      );
      assert.equal(file.code, S.UNIMPLEMENTED);

      const t = await unary<{ settings: Record<string, { value: string[] }> }>(h.client, 'TraceSetting', {
        settings: { trace_rate: { value: ['5'] } },
      });
      assert.deepEqual(t.settings.trace_rate!.value, ['5']);
      assert.deepEqual(t.settings.trace_level!.value, ['OFF']);
      const unknownModel = await callError(unary(h.client, 'TraceSetting', { modelName: 'nope' }));
      assert.equal(unknownModel.code, S.NOT_FOUND);
      const traceFile = await callError(
        unary(h.client, 'TraceSetting', { settings: { trace_file: { value: ['/tmp/x'] } } }),
      );
      assert.equal(traceFile.code, S.UNIMPLEMENTED);
    } finally {
      await h.close();
    }
  });
});

/** One gRPC call over a plain HTTP/2 session, returning the response headers and the raw message frame. */
function rawGrpcCall(
  port: number,
  path: string,
  message: Uint8Array,
  extraHeaders: Record<string, string> = {},
): Promise<{ headers: http2.IncomingHttpHeaders; body: Buffer }> {
  return new Promise((resolve, reject) => {
    const session = http2.connect(`http://127.0.0.1:${port}`);
    session.on('error', reject);
    const req = session.request({
      ':method': 'POST',
      ':path': path,
      'content-type': 'application/grpc',
      te: 'trailers',
      'grpc-accept-encoding': 'identity,deflate,gzip',
      ...extraHeaders,
    });
    let headers: http2.IncomingHttpHeaders = {};
    const chunks: Buffer[] = [];
    req.on('response', (h) => (headers = h));
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      session.close();
      resolve({ headers, body: Buffer.concat(chunks) });
    });
    req.on('error', reject);
    const frame = Buffer.alloc(5 + message.byteLength);
    frame.writeUInt32BE(message.byteLength, 1);
    frame.set(message, 5);
    req.end(frame);
  });
}

// --- a minimal reflection client (grpc.reflection.v1), encoded by hand ---

function lenField(field: number, bytes: Uint8Array): Buffer {
  const out: number[] = [(field << 3) | 2];
  let n = bytes.byteLength;
  while (n >= 128) {
    out.push((n & 127) | 128);
    n >>>= 7;
  }
  out.push(n);
  return Buffer.concat([Buffer.from(out), bytes]);
}
const listServicesRequest = () => lenField(7, Buffer.from(''));
const fileByNameRequest = (name: string) => lenField(3, Buffer.from(name));

/** Iterates the length-delimited fields of a message (the only kind the reflection replies we read use). */
function* fields(buf: Uint8Array): Generator<[number, Uint8Array]> {
  let pos = 0;
  const varint = () => {
    let v = 0;
    let shift = 0;
    for (;;) {
      const b = buf[pos++]!;
      v += (b & 127) * 2 ** shift;
      if (b < 128) return v;
      shift += 7;
    }
  };
  while (pos < buf.length) {
    const tag = varint();
    const wire = tag & 7;
    if (wire === 2) {
      const len = varint();
      yield [tag >>> 3, buf.subarray(pos, pos + len)];
      pos += len;
    } else if (wire === 0) varint();
    else throw new Error(`unexpected wire type ${wire}`);
  }
}

async function reflect(port: number, request: Buffer): Promise<{ services: string[]; files: Uint8Array[] }> {
  const client = new grpc.Client(`127.0.0.1:${port}`, grpc.credentials.createInsecure());
  try {
    const reply = await new Promise<Buffer>((resolve, reject) => {
      const call = client.makeBidiStreamRequest(
        '/grpc.reflection.v1.ServerReflection/ServerReflectionInfo',
        (b: Buffer) => b,
        (b: Buffer) => b,
      );
      call.on('data', (b: Buffer) => resolve(b));
      call.on('error', reject);
      call.write(request);
      call.end();
    });
    const services: string[] = [];
    const files: Uint8Array[] = [];
    for (const [field, value] of fields(reply)) {
      if (field === 6)
        for (const [f, svc] of fields(value))
          if (f === 1) for (const [g, name] of fields(svc)) if (g === 1) services.push(Buffer.from(name).toString());
      if (field === 4) for (const [f, file] of fields(value)) if (f === 1) files.push(file);
      if (field === 7) throw new Error(`reflection error: ${Buffer.from(value).toString()}`);
    }
    return { services, files };
  } finally {
    client.close();
  }
}

test('a port already in use is a clear start error', async () => {
  const h = await startHarness(new EchoServer());
  try {
    const { GrpcFrontend } = await import('../../../src/frontends/grpc/index.js');
    const second = new GrpcFrontend(new EchoServer(), { port: h.port, address: '127.0.0.1' });
    await assert.rejects(
      second.start(),
      new RegExp(`failed to start GRPC service: Socket '127.0.0.1:${h.port}' already in use`),
    );
  } finally {
    await h.close();
  }
});

describe('restricted protocols and header forwarding', () => {
  test('a restricted group needs its metadata; others stay open; compression still applies', async () => {
    const h = await startHarness(new EchoServer(), {
      restrictedProtocols: ['inference,model-config:infer-key=secret', 'shared-memory:admin=yes'],
      compressionLevel: 'medium',
    });
    try {
      const refused = await callError(unary(h.client, 'ModelInfer', simpleRequest('r')));
      assert.equal(refused.code, S.UNAVAILABLE);
      assert.equal(refused.details, "This protocol is restricted, expecting header 'triton-grpc-protocol-infer-key'");
      const wrong = new grpc.Metadata();
      wrong.set('triton-grpc-protocol-infer-key', 'guess');
      assert.equal((await callError(unary(h.client, 'ModelConfig', { name: 'echo' }, wrong))).code, S.UNAVAILABLE);
      const md = new grpc.Metadata();
      md.set('triton-grpc-protocol-infer-key', 'secret');
      assert.equal((await unary<ModelInferResponse>(h.client, 'ModelInfer', simpleRequest('ok'), md)).id, 'ok');
      const raw = await rawGrpcCall(
        h.port,
        '/inference.GRPCInferenceService/ModelInfer',
        toBinary(ModelInferRequestSchema, simpleRequest('d')),
        {
          'triton-grpc-protocol-infer-key': 'secret',
        },
      );
      assert.equal(raw.headers['grpc-encoding'], 'deflate');
      assert.equal(fromBinary(ModelInferResponseSchema, inflateSync(raw.body.subarray(5))).id, 'd');
      const stream = await streamAll(h.client, [simpleRequest('s')]);
      assert.equal(stream.error?.code, S.UNAVAILABLE);
      assert.equal((await unary<{ live: boolean }>(h.client, 'ServerLive', {})).live, true);
      const shm = await callError(unary(h.client, 'SystemSharedMemoryStatus', {}));
      assert.match(shm.details, /triton-grpc-protocol-admin/);
    } finally {
      await h.close();
    }
  });

  test('malformed restricted-protocol values are refused at start', async () => {
    const { GrpcFrontend } = await import('../../../src/frontends/grpc/index.js');
    for (const [value, message] of [
      ['inference', /option format is/],
      ['telepathy:k=v', /unknown restricted protocol 'telepathy'/],
    ] as const) {
      const f = new GrpcFrontend(new EchoServer(), { port: 0, restrictedProtocols: [value] });
      await assert.rejects(f.start(), message);
    }
    const twice = new GrpcFrontend(new EchoServer(), { port: 0, restrictedProtocols: ['health:a=1', 'health:b=2'] });
    await assert.rejects(twice.start(), /can not be specified in multiple config groups/);
  });

  test('matching metadata becomes string parameters; reserved names are refused', async () => {
    const server = new EchoServer();
    const h = await startHarness(server, { headerForwardPattern: '^x-' });
    try {
      const md = new grpc.Metadata();
      md.set('X-Tenant', 'acme');
      md.set('other', 'ignored');
      await unary(h.client, 'ModelInfer', simpleRequest('h'), md);
      assert.deepEqual(server.requests.at(-1)!.parameters, { 'x-tenant': 'acme' });
      const s = await streamAll(h.client, [simpleRequest('hs')], md);
      assert.equal(s.messages[0]!.errorMessage, '');
      assert.equal(server.requests.at(-1)!.parameters!['x-tenant'], 'acme');
    } finally {
      await h.close();
    }
    const h2 = await startHarness(new EchoServer(), { headerForwardPattern: 'priority' });
    try {
      const md = new grpc.Metadata();
      md.set('priority', '1');
      const err = await callError(unary(h2.client, 'ModelInfer', simpleRequest('h'), md));
      assert.equal(err.code, S.INVALID_ARGUMENT);
      assert.match(err.details, /Header 'priority' is reserved for Triton usage/);
    } finally {
      await h2.close();
    }
  });
});

test('TLS and mutual TLS with --grpc-use-ssl style options', async () => {
  const { execFileSync } = await import('node:child_process');
  const { mkdtempSync, readFileSync, rmSync } = await import('node:fs');
  const { tmpdir } = await import('node:os');
  const path = await import('node:path');
  const dir = mkdtempSync(path.join(tmpdir(), 'nereid-grpc-tls-'));
  const cert = path.join(dir, 'cert.pem');
  const key = path.join(dir, 'key.pem');
  try {
    execFileSync('openssl', [
      'req', '-x509', '-newkey', 'rsa:2048', '-nodes', '-days', '1', '-subj', '/CN=localhost',
      '-addext', 'subjectAltName=DNS:localhost,IP:127.0.0.1', '-keyout', key, '-out', cert,
    ], { stdio: 'ignore' });
    const { GrpcFrontend, inferenceServiceDefinition } = await import('../../../src/frontends/grpc/index.js');
    const Client = grpc.makeGenericClientConstructor(inferenceServiceDefinition, 'GRPCInferenceService');
    const pem = readFileSync(cert);
    for (const mutual of [false, true]) {
      const f = new GrpcFrontend(new EchoServer(), {
        port: 0,
        address: '127.0.0.1',
        ssl: { serverCert: cert, serverKey: key, rootCert: cert, mutual },
      });
      const { port } = await f.start();
      try {
        const withCert = new Client(`localhost:${port}`, grpc.credentials.createSsl(pem, readFileSync(key), pem));
        assert.equal((await unary<{ live: boolean }>(withCert, 'ServerLive', {})).live, true);
        withCert.close();
        const plain = new Client(`localhost:${port}`, grpc.credentials.createInsecure());
        assert.equal((await callError(unary(plain, 'ServerLive', {}))).code, S.UNAVAILABLE);
        plain.close();
        if (mutual) {
          const noClientCert = new Client(`localhost:${port}`, grpc.credentials.createSsl(pem));
          assert.notEqual((await callError(unary(noClientCert, 'ServerLive', {}))).code, S.OK);
          noClientCert.close();
        }
      } finally {
        await f.stop();
      }
    }
    const missing = new GrpcFrontend(new EchoServer(), {
      port: 0,
      ssl: { serverCert: path.join(dir, 'nope.pem'), serverKey: key },
    });
    await assert.rejects(missing.start(), /--grpc-server-cert: cannot read/);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
