/**
 * The CPU image, built for real by deploy/build-image.sh (podman, from deploy/Dockerfile) and run:
 * the examples served over HTTP, gRPC and metrics from inside the container, a Python model, a drain
 * on SIGTERM, and both variants' sizes against their targets. No skip: without podman this fails
 * and says why.
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { chmodSync, existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { create } from '@bufbuild/protobuf';
import * as grpc from '@grpc/grpc-js';
import { inferenceServiceDefinition } from '../../src/frontends/grpc/index.js';
import { ModelInferRequestSchema, type ModelInferResponse } from '../../src/gen/grpc_service_pb.js';
import { freePort } from '../helpers/processes.js';
import { TempRepository } from '../helpers/repository.js';
import { ROOT } from './helm.js';

const PKG = JSON.parse(readFileSync(path.join(ROOT, 'package.json'), 'utf8')) as {
  version: string;
  dependencies: Record<string, string>;
};
const TAG = `nereid:${PKG.version}`;
const NO_PYTHON = `${TAG}-no-python`;
const PODMAN_DIR = path.join(ROOT, '.tools', 'containers');
const MB = 1_000_000;

function podman(args: string[], timeoutMs = 120_000): { status: number | null; stdout: string; stderr: string } {
  const store = ['--root', path.join(PODMAN_DIR, 'storage'), '--runroot', path.join(PODMAN_DIR, 'run')];
  const r = spawnSync('podman', [...store, ...args], {
    encoding: 'utf8',
    timeout: timeoutMs,
    env: { ...process.env, CONTAINERS_CONF: path.join(PODMAN_DIR, 'containers.conf') },
  });
  if (r.error) throw new Error(`podman ${args[0]}: ${r.error.message}`);
  return { status: r.status, stdout: r.stdout, stderr: r.stderr };
}

function podmanOk(args: string[], timeoutMs?: number): string {
  const r = podman(args, timeoutMs);
  assert.equal(r.status, 0, `podman ${args.join(' ')}:\n${r.stdout}${r.stderr}`);
  return r.stdout.trim();
}

/** A container of the image with its three ports on 127.0.0.1; stopped and removed by stop(). */
async function runImage(image: string, name: string, extra: string[] = [], args: string[] = []) {
  const [http, grpcPort, metrics] = [await freePort(), await freePort(), await freePort()];
  podman(['rm', '--force', name]);
  const launched = Date.now();
  podmanOk([
    'run', '--detach', '--name', name,
    '-p', `127.0.0.1:${http}:8000`, '-p', `127.0.0.1:${grpcPort}:8001`, '-p', `127.0.0.1:${metrics}:8002`,
    ...extra, image, ...args,
  ]);
  const base = `http://127.0.0.1:${http}`;
  let ready = false;
  for (let i = 0; i < 600 && !ready; i++) {
    ready = await fetch(`${base}/v2/health/ready`).then((r) => r.status === 200, () => false);
    if (!ready) {
      if (podman(['inspect', '--format', '{{.State.Running}}', name]).stdout.trim() !== 'true') break;
      await sleep(50);
    }
  }
  const logs = (): string => {
    const r = podman(['logs', name]);
    return r.stdout + r.stderr;
  };
  assert.ok(ready, `${image} did not become ready:\n${logs()}`);
  const readyAt = Date.now();
  // From the container's start, as the runtime recorded it, to the first ready answer.
  const format = '{{.State.StartedAt.Format "2006-01-02T15:04:05.000Z07:00"}}';
  const startedAt = Date.parse(podmanOk(['inspect', '--format', format, name]));
  return {
    base,
    grpcTarget: `127.0.0.1:${grpcPort}`,
    metricsUrl: `http://127.0.0.1:${metrics}/metrics`,
    startToReadyMs: readyAt - startedAt,
    launchToReadyMs: readyAt - launched,
    logs,
    stop: () => void podman(['rm', '--force', '--time', '1', name]),
  };
}

const fraudBody = JSON.stringify({
  inputs: [
    {
      name: 'input_features',
      datatype: 'FP32',
      shape: [1, 10],
      data: [0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1],
    },
  ],
});

// Marks the start of each execution in /marks (a folder the test watches), then sleeps INPUT0[0] seconds.
const SLOW_MODEL = `import time
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            open("/marks/started", "w").close()
            time.sleep(float(x.reshape(-1)[0]))
            responses.append(pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor("OUTPUT0", x * 2)]))
        return responses
`;
const SLOW_CONFIG = `backend: "python"
max_batch_size: 0
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 1 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 1 ] } ]
`;

describe('the CPU image, built with podman and run', { timeout: 40 * 60_000 }, () => {
  let built = false;
  before(() => {
    const which = spawnSync('sh', ['-c', 'command -v podman && command -v runc && command -v mmdebstrap']);
    const needed = 'podman, runc and mmdebstrap are needed to build the image: run `sh scripts/system-deps.sh` as root';
    assert.equal(which.status, 0, needed);
    const started = Date.now();
    const r = spawnSync('sh', [path.join(ROOT, 'deploy', 'build-image.sh')], { encoding: 'utf8', maxBuffer: 256 * MB });
    assert.equal(r.status, 0, `deploy/build-image.sh failed:\n${(r.stdout + r.stderr).slice(-6000)}`);
    const summary = r.stdout.split('\n').filter((l) => /MB|bases ready|built in/.test(l)).join('\n');
    console.log(`deploy/build-image.sh (both variants): ${((Date.now() - started) / 1000).toFixed(0)} s\n${summary}`);
    built = true;
  });
  after(() => {
    if (built) podman(['rm', '--force', 'nereid-test-python', 'nereid-test-no-python', 'nereid-test-drain']);
  });

  test('both variants are within their size targets: 300 MB with the Python backend, 200 MB without', () => {
    const size = (image: string) => Number(podmanOk(['image', 'inspect', '--format', '{{.Size}}', image]));
    const withPython = size(TAG);
    const without = size(NO_PYTHON);
    const mb = (n: number) => `${(n / MB).toFixed(0)} MB`;
    console.log(`image sizes (uncompressed): ${TAG} ${mb(withPython)}, ${NO_PYTHON} ${mb(without)}`);
    assert.ok(withPython <= 300 * MB, `${TAG}: ${(withPython / MB).toFixed(0)} MB`);
    assert.ok(without <= 200 * MB, `${NO_PYTHON}: ${(without / MB).toFixed(0)} MB`);
    assert.ok(without < withPython);
    // The two share the server's and node's layers.
    const layers = (image: string) =>
      JSON.parse(podmanOk(['image', 'inspect', '--format', '{{json .RootFS.Layers}}', image])) as string[];
    assert.deepEqual(layers(NO_PYTHON).slice(0, 2), layers(TAG).slice(0, 2));
  });

  test('the image serves the examples over HTTP, gRPC and metrics, as a non-root user', async (t) => {
    const c = await runImage(TAG, 'nereid-test-python');
    t.after(() => c.stop());
    console.log(`${TAG}: start to ready ${c.startToReadyMs} ms inside the container ` +
      `(${c.launchToReadyMs} ms from podman run)`);

    const r = await fetch(`${c.base}/v2/models/fraud_detector/infer`, { method: 'POST', body: fraudBody });
    assert.equal(r.status, 200);
    const p = ((await r.json()) as { outputs: Array<{ data: number[] }> }).outputs[0]!.data[0]!;
    assert.ok(p > 0 && p < 1, `a sigmoid output, got ${p}`);

    const Client = grpc.makeGenericClientConstructor(inferenceServiceDefinition, 'GRPCInferenceService');
    const client = new Client(c.grpcTarget, grpc.credentials.createInsecure());
    t.after(() => client.close());
    const a = Array.from({ length: 16 }, (_, i) => i);
    const bytes = (v: number[]) => new Uint8Array(new Int32Array(v).buffer);
    const request = create(ModelInferRequestSchema, {
      modelName: 'simple',
      inputs: [
        { name: 'INPUT0', datatype: 'INT32', shape: [1n, 16n] },
        { name: 'INPUT1', datatype: 'INT32', shape: [1n, 16n] },
      ],
      rawInputContents: [bytes(a), bytes(a.map(() => 1))],
    });
    const res = await new Promise<ModelInferResponse>((resolve, reject) => {
      type Unary = (req: unknown, cb: (err: Error | null, out: ModelInferResponse) => void) => void;
      const call = (client as unknown as Record<string, Unary>)['ModelInfer']!.bind(client);
      call(request, (err, out) => (err ? reject(err) : resolve(out)));
    });
    const sum = res.outputs.findIndex((o) => o.name === 'OUTPUT0');
    assert.ok(sum >= 0, 'OUTPUT0 answered');
    assert.deepEqual([...new Int32Array(new Uint8Array(res.rawOutputContents[sum]!).buffer)], a.map((x) => x + 1));

    const metrics = await (await fetch(c.metricsUrl)).text();
    assert.match(metrics, /^nv_inference_request_success\{model="fraud_detector",version="1"\} 1$/m);
    assert.match(metrics, /^nv_inference_request_success\{model="simple",version="1"\} 1$/m);
    // The dashboard's files are in the image (the layout copies them beside the compiled code).
    for (const file of ['/dashboard', '/dashboard/uplot.js', '/dashboard/dashboard.css']) {
      assert.equal((await fetch(`${c.base}${file}`)).status, 200, file);
    }

    const exec = (cmd: string[]) => podmanOk(['exec', 'nereid-test-python', ...cmd]);
    // The user is the numeric 10001, and tini is PID 1 with nereid under it.
    assert.equal(exec(['busybox', 'id', '-u']), '10001');
    const pid1 = exec(['busybox', 'cat', '/proc/1/cmdline']).replaceAll('\0', ' ');
    assert.match(pid1, /^\/usr\/bin\/tini -- nereid serve/);
    // Every runtime dependency loads, including the cloud SDKs the examples do not touch.
    const deps = Object.keys(PKG.dependencies);
    const script = `Promise.all(${JSON.stringify(deps)}.map((d) => import(d))).then((m) => console.log(m.length))`;
    const loaded = exec(['node', '-e', script]);
    assert.equal(loaded, String(deps.length));
    assert.equal(exec(['python3', '-c', 'import numpy; print(numpy.float32(1.5) * 2)']), '3.0');
  });

  test('on SIGTERM the container drains: the request in flight is answered, then it exits 0', async (t) => {
    const repo = new TempRepository().config('slow', SLOW_CONFIG).file('slow', '1/model.py', SLOW_MODEL);
    t.after(() => repo.cleanup());
    chmodSync(repo.dir, 0o755); // readable by the image's user
    const marks = mkdtempSync(path.join(tmpdir(), 'nereid-marks-'));
    chmodSync(marks, 0o777);
    t.after(() => rmSync(marks, { recursive: true, force: true }));
    const mounts = ['-v', `${repo.dir}:/models:ro`, '-v', `${marks}:/marks`];
    const c = await runImage(TAG, 'nereid-test-drain', mounts, ['--model-repository=/models']);
    t.after(() => c.stop());
    const inFlight = fetch(`${c.base}/v2/models/slow/infer`, {
      method: 'POST',
      body: JSON.stringify({ inputs: [{ name: 'INPUT0', datatype: 'FP32', shape: [1], data: [2] }] }),
    });
    // Once the Python model is executing, stop the container.
    for (let i = 0; i < 400 && !existsSync(path.join(marks, 'started')); i++) await sleep(25);
    assert.ok(existsSync(path.join(marks, 'started')), `the slow model never started:\n${c.logs()}`);
    podmanOk(['kill', '--signal', 'TERM', 'nereid-test-drain']);
    const answered = await inFlight;
    assert.equal(answered.status, 200, await answered.clone().text());
    assert.deepEqual(((await answered.json()) as { outputs: Array<{ data: number[] }> }).outputs[0]!.data, [4]);
    assert.equal(podmanOk(['wait', 'nereid-test-drain'], 60_000), '0', c.logs());
  });

  test('the variant without Python serves the examples and has no interpreter', async (t) => {
    const c = await runImage(NO_PYTHON, 'nereid-test-no-python');
    t.after(() => c.stop());
    console.log(`${NO_PYTHON}: start to ready ${c.startToReadyMs} ms inside the container`);
    const r = await fetch(`${c.base}/v2/models/fraud_detector/infer`, { method: 'POST', body: fraudBody });
    assert.equal(r.status, 200);
    assert.notEqual(podman(['exec', 'nereid-test-no-python', 'python3', '--version']).status, 0);
  });
});
