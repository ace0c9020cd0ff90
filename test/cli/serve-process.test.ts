import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { TempRepository } from '../helpers/repository.js';

const MAIN = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..', 'src', 'cli', 'main.js');

interface Started {
  exit: Promise<number | null>;
  ports: Promise<{ http: number; grpc: number; metrics: number }>;
  stderr: () => string;
  kill: (signal: NodeJS.Signals) => void;
}

function serve(args: string[]): Started {
  const child = spawn(process.execPath, [MAIN, 'serve', ...args], {
    stdio: ['ignore', 'ignore', 'pipe'],
    env: { ...process.env, NEREID_LOG_LEVEL: 'info' },
  });
  let err = '';
  let resolvePorts: (p: { http: number; grpc: number; metrics: number }) => void = () => {};
  const ports = new Promise<{ http: number; grpc: number; metrics: number }>((r) => (resolvePorts = r));
  child.stderr.on('data', (d: Buffer) => {
    err += d.toString();
    for (const line of err.split('\n')) {
      if (!line.includes('nereid is serving')) continue;
      try {
        const j = JSON.parse(line) as { http: number; grpc: number; metrics: number };
        resolvePorts({ http: j.http, grpc: j.grpc, metrics: j.metrics });
      } catch {
        // a partial line; wait for the rest
      }
    }
  });
  const exit = new Promise<number | null>((r) => child.on('exit', (code) => r(code)));
  return { exit, ports, stderr: () => err, kill: (s) => child.kill(s) };
}

const PORTS = [
  '--http-port=0',
  '--grpc-port=0',
  '--metrics-port=0',
  '--http-address=127.0.0.1',
  '--grpc-address=127.0.0.1',
];

test('nereid serve answers on its ports and exits 0 on SIGTERM after finishing in-flight requests', async (t) => {
  const repo = new TempRepository().addSub('simple');
  t.after(() => repo.cleanup());
  const s = serve([`--model-repository=${repo.dir}`, ...PORTS]);
  const ports = await s.ports;
  const ready = await fetch(`http://127.0.0.1:${ports.http}/v2/health/ready`);
  assert.equal(ready.status, 200);
  const metrics = await (await fetch(`http://127.0.0.1:${ports.metrics}/metrics`)).text();
  assert.match(metrics, /nv_inference_request_success\{model="simple",version="1"\} 0/);
  const body = JSON.stringify({
    inputs: [
      { name: 'INPUT0', datatype: 'INT32', shape: [1, 16], data: Array.from({ length: 16 }, (_, i) => i) },
      { name: 'INPUT1', datatype: 'INT32', shape: [1, 16], data: Array.from({ length: 16 }, () => 1) },
    ],
  });
  const inflight = Array.from({ length: 10 }, () =>
    fetch(`http://127.0.0.1:${ports.http}/v2/models/simple/infer`, { method: 'POST', body }),
  );
  s.kill('SIGTERM');
  const statuses = await Promise.all(inflight.map((p) => p.then((r) => r.status, () => 'refused')));
  assert.equal(await s.exit, 0, s.stderr());
  // Requests that reached the server before the signal were answered; none failed with a server error.
  assert.ok(statuses.every((x) => x === 200 || x === 'refused' || x === 503), String(statuses));
});

test('nereid serve refuses to start when a model fails and --exit-on-error is on (the default)', async (t) => {
  const repo = new TempRepository().addSub('good').addSub('broken').file('broken', '1/model.onnx', 'not onnx');
  t.after(() => repo.cleanup());
  const s = serve([`--model-repository=${repo.dir}`, ...PORTS]);
  assert.equal(await s.exit, 1);
  assert.match(s.stderr(), /failed to load all models.*'broken'/);
});

test('with --exit-on-error=false a broken model is UNAVAILABLE and the rest is served', async (t) => {
  const repo = new TempRepository().addSub('good').addSub('broken').file('broken', '1/model.onnx', 'not onnx');
  t.after(() => repo.cleanup());
  const s = serve([`--model-repository=${repo.dir}`, '--exit-on-error=false', ...PORTS]);
  t.after(async () => {
    s.kill('SIGTERM');
    await s.exit;
  });
  const ports = await s.ports;
  const index = (await (
    await fetch(`http://127.0.0.1:${ports.http}/v2/repository/index`, { method: 'POST' })
  ).json()) as Array<{ name: string; state: string }>;
  assert.deepEqual(
    index.map((e) => `${e.name}:${e.state}`),
    ['broken:UNAVAILABLE', 'good:READY'],
  );
  assert.equal((await fetch(`http://127.0.0.1:${ports.http}/v2/health/ready`)).status, 400);
  assert.equal((await fetch(`http://127.0.0.1:${ports.http}/v2/models/good/ready`)).status, 200);
});

test('a bad flag is a startup error naming the flag', async () => {
  const s = serve(['--http-port=abc']);
  assert.equal(await s.exit, 2);
  assert.match(s.stderr(), /--http-port' takes an integer/);
});
