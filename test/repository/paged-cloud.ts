/**
 * Model paging over a cloud repository: a model unloaded for room and loaded
 * again on demand comes from the download cache. A proxy in front of the S3
 * server records every request, so the test sees what reached the store.
 */
import assert from 'node:assert/strict';
import http from 'node:http';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import type { RadosGateway } from '../helpers/ceph.js';
import { buildMlp } from '../helpers/onnx-builder.js';
import { pagedMlpConfig, post } from '../helpers/paging.js';
import { TempRepository } from '../helpers/repository.js';
import { LOOPBACK_PORTS, type ServeProcess, startServe } from '../helpers/serve-process.js';

/** ~41 MB of weights, about 100 MB loaded: far above the measuring noise of a fresh server. */
const LAYERS = [256, 3072, 3072, 16];

/** A pass-through proxy to `target` that records each request's method and path (with its query). */
async function recordingProxy(target: string): Promise<{ port: number; seen: string[]; close(): Promise<void> }> {
  const to = new URL(target);
  const seen: string[] = [];
  const server = http.createServer((req, res) => {
    seen.push(`${req.method} ${req.url}`);
    // The Host header is passed on as the client signed it.
    const out = http.request(
      { host: to.hostname, port: to.port, method: req.method, path: req.url, headers: req.headers },
      (up) => {
        res.writeHead(up.statusCode ?? 502, up.headers);
        up.pipe(res);
      },
    );
    out.on('error', () => res.destroy());
    req.pipe(out);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const port = (server.address() as { port: number }).port;
  return {
    port,
    seen,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}

async function inferOk(port: number, model: string): Promise<void> {
  const data = Array.from({ length: 256 }, (_, i) => (i % 7) / 7);
  const r = await post(port, `/v2/models/${model}/infer`, {
    inputs: [{ name: 'input', datatype: 'FP32', shape: [1, 256], data }],
  });
  assert.equal(r.status, 200, `${model}: ${r.text}`);
}

async function index(port: number): Promise<Map<string, { state?: string; reason?: string; memory_bytes?: number }>> {
  const r = await post(port, '/v2/repository/index', {});
  const list = JSON.parse(r.text) as Array<{ name: string; state?: string; reason?: string; memory_bytes?: number }>;
  return new Map(list.map((e) => [e.name, e]));
}

async function serve(args: readonly string[], env: NodeJS.ProcessEnv): Promise<{ proc: ServeProcess; port: number }> {
  const proc = startServe(['--model-control-mode=explicit', ...LOOPBACK_PORTS, ...args], { env });
  try {
    return { proc, port: (await proc.ports).http };
  } catch (err) {
    await proc.stop();
    throw err;
  }
}

export async function pagedModelComesFromTheCache(
  rgw: RadosGateway,
  bucket: string,
  env: NodeJS.ProcessEnv,
): Promise<void> {
  const prefix = 'budget-reload';
  const repo = new TempRepository().addSub('warm');
  for (const [i, m] of ['a', 'b'].entries()) {
    repo.config(m, pagedMlpConfig(m)).file(m, '1/model.onnx', buildMlp(LAYERS, 50 + i).builder.toBytes());
  }
  const cacheDir = mkdtempSync(path.join(tmpdir(), 'nereid-cache-'));
  const proxy = await recordingProxy(rgw.endpoint);
  try {
    // What each model costs, measured by a server on the local folder: the budget holds `warm` and one MLP.
    const calibration = await serve([`--model-repository=${repo.dir}`, '--model-memory-budget=64GiB'], env);
    let budget: number;
    try {
      assert.equal((await post(calibration.port, '/v2/repository/models/warm/load', {})).status, 200);
      for (const m of ['a', 'b']) await inferOk(calibration.port, m);
      const idx = await index(calibration.port);
      const bytes = (m: string) => idx.get(m)!.memory_bytes!;
      budget = Math.round(bytes('warm') + 1.5 * Math.max(bytes('a'), bytes('b')));
    } finally {
      await calibration.proc.stop();
    }

    await rgw.uploadDir(repo.dir, bucket, prefix);
    const { proc, port } = await serve(
      [
        `--model-repository=s3://127.0.0.1:${proxy.port}/${bucket}/${prefix}`,
        `--model-cache-dir=${cacheDir}`,
        `--model-memory-budget=${budget}`,
        '--load-model=warm',
        '--model-pin=warm',
      ],
      env,
    );
    try {
      const objectGets = (model: string) =>
        proxy.seen.filter((r) => r.startsWith(`GET /${bucket}/${prefix}/${model}/`) && !r.includes('list-type'));
      await inferOk(port, 'a');
      assert.ok(objectGets('a').length >= 2, `a's first load downloads its files: ${JSON.stringify(proxy.seen)}`);
      await inferOk(port, 'b');
      let idx = await index(port);
      assert.equal(idx.get('a')?.state, 'UNAVAILABLE', `a makes room for b: ${JSON.stringify([...idx])}`);
      assert.equal(idx.get('a')?.reason, 'unloaded: memory budget');
      const before = proxy.seen.length;
      await inferOk(port, 'a');
      idx = await index(port);
      assert.equal(idx.get('a')?.state, 'READY');
      assert.equal(idx.get('b')?.state, 'UNAVAILABLE', 'b made room for a in turn');
      const again = proxy.seen.slice(before).filter((r) => r.startsWith('GET ') && !r.includes('list-type'));
      assert.deepEqual(again, [], 'loading a again downloaded nothing');
    } finally {
      await proc.stop();
    }
  } finally {
    await proxy.close();
    repo.cleanup();
    rmSync(cacheDir, { recursive: true, force: true });
  }
}
