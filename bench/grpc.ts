/**
 * gRPC ModelInfer load with h2load (nghttp2), one pre-framed request body
 * sent over and over, against three servers in the same run:
 *
 *   grpc-js ceiling   a bare @grpc/grpc-js server answering with a fixed,
 *                     pre-encoded response (no protobuf work at all): the
 *                     most any grpc-js server can do on this machine, and a
 *                     check that h2load itself is not the bottleneck;
 *   frontend only     Nereid's GrpcFrontend over a ServerApi that answers
 *                     instantly (decode, validate, encode: the frontend's cost);
 *   nereid            `nereid serve` on a real model (the whole path).
 *
 * h2load counts HTTP statuses, not grpc-status, so every run is checked:
 * one call through a grpc-js client first, and for Nereid the model's
 * success count must grow by the number of requests h2load completed.
 *
 * Standalone: `node dist/bench/grpc.js` (BENCH_SECONDS, BENCH_CONCURRENCY
 * as "clients x streams" pairs, e.g. "1x1,4x8").
 */
import { spawn } from 'node:child_process';
import { SharedMemoryRegistry } from '../src/core/shared-memory.js';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { create, fromBinary, toBinary } from '@bufbuild/protobuf';
import * as grpc from '@grpc/grpc-js';
import {
  ModelInferRequestSchema,
  type ModelInferResponse,
  type ModelStatisticsResponse,
} from '../src/gen/grpc_service_pb.js';
import { GrpcFrontend, inferenceServiceDefinition } from '../src/frontends/grpc/index.js';
import { encodeInferResponse } from '../src/frontends/grpc/infer-encode.js';
import type { ServerApi } from '../src/core/server-api.js';
import { ModelConfigSchema } from '../src/gen/model_config_pb.js';
import type { InferRequest, InferResponse } from '../src/types/api.js';
import { type BenchModel, buildBenchModels } from './models.js';
import { startNereid } from './processes.js';

const MODEL_INFER_PATH = '/inference.GRPCInferenceService/ModelInfer';

export interface H2loadResult {
  requestsPerSec: number;
  meanUs: number;
  maxUs: number;
  /** Requests h2load completed with HTTP 2xx. */
  succeeded: number;
  failed: number;
}

/** A message with gRPC's 5-byte length prefix (uncompressed). */
export function grpcFrame(message: Uint8Array): Buffer {
  const frame = Buffer.allocUnsafe(message.byteLength + 5);
  frame.writeUInt8(0, 0);
  frame.writeUInt32BE(message.byteLength, 1);
  frame.set(message, 5);
  return frame;
}

/** A framed ModelInferRequest: one FP32 [1, size] input in raw_input_contents. */
export function modelInferBody(model: string, input: string, output: string, size: number): Buffer {
  const values = new Float32Array(size);
  for (let i = 0; i < size; i++) values[i] = (i % 7) / 7;
  const msg = create(ModelInferRequestSchema, {
    modelName: model,
    inputs: [{ name: input, datatype: 'FP32', shape: [1n, BigInt(size)] }],
    outputs: [{ name: output }],
    rawInputContents: [new Uint8Array(values.buffer)],
  });
  return grpcFrame(toBinary(ModelInferRequestSchema, msg));
}

function toUs(value: string, unit: string): number {
  const v = Number(value);
  return unit === 'us' ? v : unit === 'ms' ? v * 1000 : v * 1e6;
}

export function parseH2load(out: string): H2loadResult {
  const rate = /finished in [\d.]+m?s, ([\d.]+) req\/s/.exec(out);
  const reqs = /requests: \d+ total, \d+ started, \d+ done, (\d+) succeeded, (\d+) failed/.exec(out);
  const time = /time for request:\s+([\d.]+)(us|ms|s)\s+([\d.]+)(us|ms|s)\s+([\d.]+)(us|ms|s)/.exec(out);
  if (!rate || !reqs || !time) throw new Error(`unexpected h2load output:\n${out}`);
  return {
    requestsPerSec: Number(rate[1]),
    succeeded: Number(reqs[1]),
    failed: Number(reqs[2]),
    maxUs: toUs(time[3]!, time[4]!),
    meanUs: toUs(time[5]!, time[6]!),
  };
}

/** h2load's arguments (one thread) for posting the framed request in `file` to ModelInfer on `port`. */
export function h2loadArgs(
  port: number,
  file: string,
  clients: number,
  streams: number,
  seconds: number,
  extra: readonly string[] = [],
): string[] {
  return [
    '-t1',
    `-c${clients}`,
    `-m${streams}`,
    `-D${seconds}`,
    ...extra,
    `-d${file}`,
    '-H',
    'content-type: application/grpc',
    '-H',
    'te: trailers',
    `http://127.0.0.1:${port}${MODEL_INFER_PATH}`,
  ];
}

/** Runs h2load (one thread) posting `body` to ModelInfer on `port`. */
export function runH2load(
  port: number,
  body: Buffer,
  clients: number,
  streams: number,
  seconds: number,
): Promise<H2loadResult> {
  const dir = mkdtempSync(path.join(tmpdir(), 'nereid-h2load-'));
  const file = path.join(dir, 'body.bin');
  writeFileSync(file, body);
  const args = h2loadArgs(port, file, clients, streams, seconds, ['--warm-up-time=1']);
  return new Promise((resolve, reject) => {
    const child = spawn('h2load', args, { stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    child.stdout.on('data', (c: Buffer) => (out += c.toString()));
    child.stderr.on('data', (c: Buffer) => (out += c.toString()));
    child.on('error', reject);
    child.on('exit', () => {
      rmSync(dir, { recursive: true, force: true });
      try {
        resolve(parseH2load(out));
      } catch (e) {
        reject(e);
      }
    });
  });
}

/** A bare grpc-js server whose ModelInfer answers `reply` (already encoded) without decoding the request. */
export async function startCeilingServer(reply: Buffer): Promise<{ port: number; close(): void }> {
  const server = new grpc.Server({ 'grpc.max_receive_message_length': -1, 'grpc.max_send_message_length': -1 });
  const identity = (b: Buffer) => b;
  server.addService(
    {
      ModelInfer: {
        ...inferenceServiceDefinition.ModelInfer!,
        requestDeserialize: identity,
        responseSerialize: identity,
      },
    },
    { ModelInfer: (_call: unknown, cb: grpc.sendUnaryData<Buffer>) => cb(null, reply) },
  );
  const port = await new Promise<number>((resolve, reject) =>
    server.bindAsync('127.0.0.1:0', grpc.ServerCredentials.createInsecure(), (e, p) => (e ? reject(e) : resolve(p))),
  );
  return { port, close: () => server.forceShutdown() };
}

/** A ServerApi that answers every request at once with a fixed response (frontend cost only). */
function instantServer(response: InferResponse): ServerApi {
  const fail = (): never => {
    throw new Error('not used by the benchmark');
  };
  return {
    controlMode: 'none',
    sharedMemory: new SharedMemoryRegistry(false),
    start: async () => {},
    stop: async () => {},
    isLive: () => true,
    isReady: () => true,
    metadata: () => ({ name: 'triton', version: 'bench', extensions: [] }),
    modelMetadata: fail,
    modelConfig: () => create(ModelConfigSchema, { name: response.modelName }),
    modelConfigJson: fail,
    modelReady: async () => true,
    infer: (_r: InferRequest) => Promise.resolve(response),
    modelStatistics: () => [],
    repositoryIndex: async () => [],
    loadModel: fail,
    unloadModel: fail,
  };
}

function grpcCall<T>(port: number, method: string, request: unknown): Promise<T> {
  const Client = grpc.makeGenericClientConstructor(inferenceServiceDefinition, 'GRPCInferenceService');
  const client = new Client(`127.0.0.1:${port}`, grpc.credentials.createInsecure());
  return new Promise<T>((resolve, reject) => {
    (client as unknown as Record<string, (...args: unknown[]) => void>)[method]!.call(
      client,
      request,
      (err: Error | null, res: T) => {
        client.close();
        if (err) reject(err);
        else resolve(res);
      },
    );
  });
}

async function successCount(port: number, model: string): Promise<bigint> {
  const s = await grpcCall<ModelStatisticsResponse>(port, 'ModelStatistics', { name: model });
  return s.modelStats[0]?.inferenceStats?.success?.count ?? 0n;
}

function fmt(n: number, digits = 0): string {
  return n.toLocaleString('en-US', { maximumFractionDigits: digits, minimumFractionDigits: digits });
}

/** Measures the three servers for one model and prints a table. */
export async function grpcSection(
  models: BenchModel[],
  seconds: number,
  points: Array<[number, number]>,
): Promise<void> {
  for (const model of models) {
    const body = modelInferBody(model.plainName, model.inputName, model.outputName, model.inputSize);
    const fixed: InferResponse = {
      modelName: model.plainName,
      modelVersion: '1',
      id: '',
      outputs: [
        {
          name: model.outputName,
          datatype: 'FP32',
          shape: [1, model.outputSize],
          data: new Uint8Array(model.outputSize * 4),
        },
      ],
    };
    const ceiling = await startCeilingServer(encodeInferResponse(fixed));
    const frontend = new GrpcFrontend(instantServer(fixed), { port: 0, address: '127.0.0.1' });
    const { port: frontendPort } = await frontend.start();
    const nereid = await startNereid(model.repository, []);
    const rows: string[][] = [];
    try {
      const check = await grpcCall<ModelInferResponse>(
        nereid.grpc,
        'ModelInfer',
        fromBinary(ModelInferRequestSchema, body.subarray(5)),
      );
      if (check.rawOutputContents[0]?.byteLength !== model.outputSize * 4)
        throw new Error('Nereid returned an unexpected ModelInfer response');
      for (const [clients, streams] of points) {
        const c = await runH2load(ceiling.port, body, clients, streams, seconds);
        const f = await runH2load(frontendPort, body, clients, streams, seconds);
        const before = await successCount(nereid.grpc, model.plainName);
        const n = await runH2load(nereid.grpc, body, clients, streams, seconds);
        const grown = Number((await successCount(nereid.grpc, model.plainName)) - before);
        // Warm-up requests count on the server but not in h2load's total.
        const unverified = grown < n.succeeded ? n.succeeded - grown : 0;
        rows.push([
          `${clients}x${streams}`,
          fmt(c.requestsPerSec),
          fmt(c.meanUs),
          fmt(f.requestsPerSec),
          fmt(f.meanUs),
          fmt(n.requestsPerSec),
          fmt(n.meanUs),
          fmt(n.requestsPerSec / c.requestsPerSec, 2),
          String(c.failed + f.failed + n.failed + unverified),
        ]);
      }
    } finally {
      ceiling.close();
      await frontend.stop();
      await nereid.proc.stop();
    }
    const widths = [8, 12, 8, 12, 8, 12, 8, 8, 7];
    const header = [
      'c x m',
      'grpc-js/s',
      'mean us',
      'frontend/s',
      'mean us',
      'nereid/s',
      'mean us',
      'x ceil',
      'errors',
    ];
    const line = (cells: string[]) => cells.map((s, i) => s.padStart(widths[i]!)).join('  ');
    process.stdout.write(
      `\n${model.label}: gRPC ModelInfer, h2load -t1 (clients x streams), ${seconds}s ` +
      `per point\n${line(header)}\n${widths.map((w) => '-'.repeat(w)).join('  ')}\n`,
    );
    for (const r of rows) process.stdout.write(`${line(r)}\n`);
  }
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const seconds = Number(process.env.BENCH_SECONDS ?? 5);
  const points = (process.env.BENCH_CONCURRENCY ?? '1x1,1x8,4x8')
    .split(',')
    .map((p) => p.split('x').map(Number) as [number, number]);
  const models = await buildBenchModels();
  await grpcSection(models.filter((m) => m.label.startsWith('tiny')), seconds, points);
}
