/**
 * `nereid perf` against the real Nereid Server with Triton's `simple` model
 * (INPUT0/INPUT1 INT32[16]), over HTTP and gRPC.
 */
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Server } from '../../../src/core/server.js';
import { DEFAULT_MAX_INPUT_SIZE, HttpFrontend } from '../../../src/frontends/http/index.js';
import { GrpcFrontend } from '../../../src/frontends/grpc/index.js';
import { silentLogger } from '../../../src/logger.js';
import { buildAddSubModel } from '../../helpers/onnx-builder.js';
import { runPerf } from '../../../src/cli/perf/index.js';
import { TempRepository } from '../../helpers/repository.js';
import { Capture } from './fake-v2-server.js';

let repo: TempRepository;
let server: Server;
let http: HttpFrontend;
let grpcFrontend: GrpcFrontend;
let httpPort: number;
let grpcPort: number;
const tmp = mkdtempSync(join(tmpdir(), 'nereid-perf-e2e-'));

before(async () => {
  const simpleConfig = readFileSync(
    new URL('../../../../examples/model_repository/simple/config.pbtxt', import.meta.url),
    'utf8',
  );
  repo = new TempRepository()
    .config('simple', simpleConfig)
    .file('simple', '1/model.onnx', buildAddSubModel('INT32', 16).toBytes());
  server = new Server({ modelRepositories: [repo.dir], logger: silentLogger });
  await server.start();
  http = new HttpFrontend(server, {
    port: 0,
    address: '127.0.0.1',
    maxInputSize: DEFAULT_MAX_INPUT_SIZE,
    logger: silentLogger,
  });
  ({ port: httpPort } = await http.start());
  grpcFrontend = new GrpcFrontend(server, { port: 0, address: '127.0.0.1' });
  ({ port: grpcPort } = await grpcFrontend.start());
});

after(async () => {
  await http?.stop();
  await grpcFrontend?.stop();
  await server?.stop();
  repo?.cleanup();
});

// Windows long enough that a loaded machine still completes requests in each (an empty window is perf's error, as in
// perf_analyzer).
const FAST = ['-p', '500', '-s', '1000000', '-r', '3'];

async function run(args: string[]): Promise<{ code: number; out: string; err: string }> {
  const stdout = new Capture();
  const stderr = new Capture();
  const code = await runPerf(args, { stdout, stderr });
  return { code, out: stdout.text, err: stderr.text };
}

function check(r: { code: number; out: string; err: string }, protocol: 'HTTP' | 'gRPC'): void {
  assert.equal(r.code, 0, r.out + r.err);
  assert.match(r.out, /Request concurrency: 2\n {2}Client: \n {4}Request count: [1-9]\d*\n/);
  assert.match(r.out, new RegExp(` {4}Avg ${protocol} time: \\d+ usec`));
  // The server's statistics moved by exactly the requests of the window(s): the Server block is there.
  assert.match(
    r.out,
    new RegExp(
      String.raw` {2}Server: \n {4}Inference count: [1-9]\d*\n {4}Execution count: [1-9]\d*\n {4}Successful request ` +
      String.raw`count: [1-9]\d*\n`,
    ),
  );
  assert.match(
    r.out,
    new RegExp(
      String.raw`Avg request latency: \d+ usec \(overhead \d+ usec \+ queue \d+ usec \+ compute input \d+ usec \+ ` +
      String.raw`compute infer \d+ usec \+ compute output \d+ usec\)`,
    ),
  );
  assert.match(r.out, /Concurrency: 2, throughput: [\d.e+]+ infer\/sec, latency \d+ usec\n/);
  const inference = Number(/Inference count: (\d+)/.exec(r.out)![1]);
  const success = Number(/Successful request count: (\d+)/.exec(r.out)![1]);
  assert.equal(inference, 4 * success); // batch 4
}

test('HTTP: simple model, batch 4, concurrency 2, CSV', async () => {
  const csv = join(tmp, 'http.csv');
  const r = await run([
    '-m',
    'simple',
    '-u',
    `127.0.0.1:${httpPort}`,
    '-b',
    '4',
    '--concurrency-range',
    '2',
    ...FAST,
    '-f',
    csv,
  ]);
  check(r, 'HTTP');
  const lines = readFileSync(csv, 'utf8').trimEnd().split('\n');
  assert.equal(lines.length, 2);
  assert.match(lines[1]!, /^2,/);
});

test('HTTP with JSON tensors', async () => {
  const r = await run([
    '-m',
    'simple',
    '-u',
    `127.0.0.1:${httpPort}`,
    '-b',
    '4',
    '--concurrency-range',
    '2',
    ...FAST,
    '--input-tensor-format',
    'json',
    '--output-tensor-format',
    'json',
  ]);
  check(r, 'HTTP');
});

test('gRPC: ModelInfer and ModelStreamInfer', async () => {
  const unary = await run([
    '-m',
    'simple',
    '-i',
    'grpc',
    '-u',
    `127.0.0.1:${grpcPort}`,
    '-b',
    '4',
    '--concurrency-range',
    '2',
    ...FAST,
  ]);
  check(unary, 'gRPC');
  const streaming = await run([
    '-m',
    'simple',
    '-i',
    'grpc',
    '--streaming',
    '-u',
    `127.0.0.1:${grpcPort}`,
    '-b',
    '4',
    '--concurrency-range',
    '2',
    ...FAST,
  ]);
  check(streaming, 'gRPC');
});

test('real server errors: unknown model and a batch over max_batch_size', async () => {
  const unknown = await run(['-m', 'nope', '-u', `127.0.0.1:${httpPort}`, ...FAST]);
  assert.equal(unknown.code, 99);
  assert.match(unknown.err, /Request for unknown model: 'nope'/);
  const tooBig = await run(['-m', 'simple', '-u', `127.0.0.1:${httpPort}`, '-b', '9', ...FAST]);
  assert.equal(tooBig.code, 99);
  assert.match(tooBig.err, /inference request failed: .*batch-size must be <= 8/);
  const grpcUnknown = await run(['-m', 'nope', '-i', 'grpc', '-u', `127.0.0.1:${grpcPort}`, ...FAST]);
  assert.equal(grpcUnknown.code, 99);
  assert.match(grpcUnknown.err, /Request for unknown model: 'nope'/);
});
