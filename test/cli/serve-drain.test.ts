import { test } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import http2 from 'node:http2';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { buildServeConfig } from '../../src/cli/serve.js';
import { TempRepository } from '../helpers/repository.js';
import { LOOPBACK_PORTS, startServe } from '../helpers/serve-process.js';

const PYTHON = process.env.NEREID_TEST_PYTHON ?? '/usr/bin/python3';

// Marks the start of each execution with a file beside the model, then sleeps INPUT0[0] seconds.
const MARKING_SLOW_MODEL = `import os, time
import triton_python_backend_utils as pb_utils

HERE = os.path.dirname(os.path.abspath(__file__))

class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            open(os.path.join(HERE, "started"), "w").close()
            time.sleep(float(x.reshape(-1)[0]))
            responses.append(pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor("OUTPUT0", x)]))
        return responses
`;

const SLOW_CONFIG = `name: "slow"
backend: "python"
max_batch_size: 0
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 1 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 1 ] } ]
instance_group [ { kind: KIND_CPU count: 1 } ]
`;

const inferBody = (seconds: number) =>
  JSON.stringify({ inputs: [{ name: 'INPUT0', datatype: 'FP32', shape: [1], data: [seconds] }] });

async function until(what: string, check: () => Promise<boolean> | boolean): Promise<void> {
  for (let i = 0; i < 400; i++) {
    if (await check()) return;
    await sleep(50);
  }
  assert.fail(`gave up waiting for ${what}`);
}

const statusOf = (url: string, init?: RequestInit) => fetch(url, init).then((r) => r.status);

test('on SIGTERM readiness turns false at once while liveness ' +
  'stays true and the in-flight request finishes', async (t) => {
  const repo = new TempRepository().config('slow', SLOW_CONFIG).file('slow', '1/model.py', MARKING_SLOW_MODEL);
  t.after(() => repo.cleanup());
  const s = startServe([
    `--model-repository=${repo.dir}`,
    `--backend-config=python,python-executable=${PYTHON}`,
    '--exit-timeout-secs=60',
    ...LOOPBACK_PORTS,
  ]);
  t.after(() => s.stop());
  const { http, grpc, metrics } = await s.ports;
  const base = `http://127.0.0.1:${http}`;
  const readyGauge = async () =>
    /^nereid_server_ready (\d)$/m.exec(await (await fetch(`http://127.0.0.1:${metrics}/metrics`)).text())?.[1];
  assert.equal(await statusOf(`${base}/v2/health/ready`), 200);
  assert.equal(await readyGauge(), '1');

  let slowDone = false;
  const slow = fetch(`${base}/v2/models/slow/infer`, { method: 'POST', body: inferBody(6) }).then(async (r) => {
    slowDone = true;
    return { status: r.status, body: (await r.json()) as { outputs: Array<{ data: number[] }> } };
  });
  await until('the slow request to start executing', () => existsSync(path.join(repo.dir, 'slow', '1', 'started')));

  // A gRPC client connected before the signal is told to go elsewhere.
  const session = http2.connect(`http://127.0.0.1:${grpc}`);
  t.after(() => session.destroy());
  session.on('error', () => {});
  await new Promise<void>((resolve) => session.once('connect', () => resolve()));
  const goaway = new Promise<boolean>((resolve) => {
    session.once('goaway', () => resolve(true));
    session.once('close', () => resolve(false));
  });

  s.signal('SIGTERM');
  await until('readiness to turn false', async () => (await statusOf(`${base}/v2/health/ready`)) === 400);
  assert.equal(await goaway, true, 'GOAWAY on SIGTERM');
  assert.equal(slowDone, false, 'the drain is still running');
  assert.equal(await statusOf(`${base}/v2/health/live`), 200);
  assert.equal(await readyGauge(), '0');
  const refused = await fetch(`${base}/v2/models/slow/infer`, { method: 'POST', body: inferBody(0) });
  assert.equal(refused.status, 503);
  assert.equal(refused.headers.get('connection'), 'close', 'draining responses end keep-alive');
  assert.match(((await refused.json()) as { error: string }).error, /stopping/);
  assert.equal(slowDone, false, 'the checks above ran during the drain');

  const answered = await slow;
  assert.equal(answered.status, 200);
  assert.deepEqual(answered.body.outputs[0]!.data, [6]);
  assert.equal(await s.exit, 0, s.stderr());
});

test('--grpc-max-connection-age makes the server send GOAWAY to a connected HTTP/2 client', async (t) => {
  const repo = new TempRepository().addSub('simple');
  t.after(() => repo.cleanup());
  const s = startServe([
    `--model-repository=${repo.dir}`,
    '--grpc-max-connection-age=300',
    '--grpc-max-connection-age-grace=200',
    ...LOOPBACK_PORTS,
  ]);
  t.after(() => s.stop());
  const { grpc } = await s.ports;
  const session = http2.connect(`http://127.0.0.1:${grpc}`);
  t.after(() => session.destroy());
  session.on('error', () => {});
  const goaway = await new Promise<number>((resolve, reject) => {
    session.once('goaway', (code: number) => resolve(code));
    session.once('close', () => reject(new Error('closed without GOAWAY')));
  });
  assert.equal(goaway, http2.constants.NGHTTP2_NO_ERROR);
});

test('connection ageing flags: 0 leaves the limit unset as in ' +
  'tritonserver, a negative age is an error naming the flag', () => {
  const unset = buildServeConfig(['--grpc-max-connection-age=0', '--grpc-max-connection-age-grace=0']);
  assert.equal(unset.grpc.maxConnectionAgeMs, undefined);
  assert.equal(unset.grpc.maxConnectionAgeGraceMs, undefined);
  const set = buildServeConfig(['--grpc-max-connection-age=60000', '--grpc-max-connection-age-grace=10000']);
  assert.equal(set.grpc.maxConnectionAgeMs, 60000);
  assert.equal(set.grpc.maxConnectionAgeGraceMs, 10000);
  assert.throws(
    () => buildServeConfig(['--grpc-max-connection-age-grace=-5']),
    /--grpc-max-connection-age-grace must be 0 \(no limit\) or a positive number/,
  );
});
