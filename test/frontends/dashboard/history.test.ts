/**
 * The dashboard's sampler and latency windows against a real Server with a
 * real ONNX model: samples per second from the statistics, quantiles from
 * the window, the ring's bound, and the state endpoint's rules.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { LatencyWindow } from '../../../src/types/latency-window.js';
import { DashboardHistory } from '../../../src/frontends/dashboard/history.js';
import { DashboardRoute, loadDashboardAssets } from '../../../src/frontends/dashboard/route.js';
import { Server } from '../../../src/core/server.js';
import { silentLogger } from '../../../src/logger.js';
import { TempRepository, int32Tensor } from '../../helpers/repository.js';

test('a latency window gives quantiles within one bucket (19 %) and empties when taken', () => {
  const w = new LatencyWindow();
  for (let i = 1; i <= 1000; i++) w.add(i * 1000); // 1..1000 µs
  const s = w.take();
  assert.equal(s.count, 1000);
  assert.ok(s.p50Us >= 500 && s.p50Us <= 500 * 1.19 + 1, `p50 ${s.p50Us}`);
  assert.ok(s.p99Us >= 990 && s.p99Us <= 990 * 1.19 + 1, `p99 ${s.p99Us}`);
  assert.deepEqual(w.take(), { count: 0, p50Us: 0, p99Us: 0 });
});

test('samples count a second of requests per model, and the ring keeps its length', async (t) => {
  const repo = new TempRepository().addSub('ident');
  t.after(() => repo.cleanup());
  const server = new Server({ modelRepositories: [repo.dir], logger: silentLogger });
  await server.start();
  t.after(() => server.stop());
  const history = new DashboardHistory(server, { ports: { http: 1 }, ringLength: 3 });
  history.sample(1_000_000);
  const ones = Array.from({ length: 16 }, () => 1);
  const inputs = [int32Tensor('INPUT0', ones), int32Tensor('INPUT1', ones)];
  for (let i = 0; i < 10; i++) await server.infer({ model: 'ident', inputs });
  history.sample(1_002_000); // two seconds later
  const state = await history.state();
  const series = (state['series'] as Record<string, Array<Record<string, unknown>>>)['ident']!;
  const last = series[series.length - 1]!;
  assert.equal(last['requestsPerSec'], 5);
  assert.equal(last['failuresPerSec'], 0);
  assert.ok((last['p50Us'] as number) > 0);
  assert.ok((last['computeUs'] as number) > 0);
  const executions = Object.values(last['batches'] as Record<string, number>).reduce((a, b) => a + b, 0);
  assert.equal(executions, 10);
  for (let i = 0; i < 5; i++) history.sample(1_003_000 + i * 1000);
  const again = await history.state();
  assert.equal((again['series'] as Record<string, unknown[]>)['ident']!.length, 3);
  const since = await history.state(1_006_000);
  assert.equal((since['series'] as Record<string, unknown[]>)['ident']!.length, 1);
  const models = state['models'] as Array<Record<string, unknown>>;
  assert.deepEqual(models.map((m) => m['name']), ['ident']);
  assert.equal(models[0]!['backend'], 'onnxruntime');
});

test('the state endpoint takes GET only, checks `since`, and is guarded; the page is not', async (t) => {
  const history = new DashboardHistory(
    {
      readyVersions: () => [],
      repositoryIndex: () => Promise.resolve([{ name: '<img src=x onerror=alert(1)>', state: 'UNAVAILABLE' }]),
      isLive: () => true,
      isReady: () => true,
      metadata: () => ({ name: 'nereid', version: '0', extensions: [] }),
    },
    { ports: {} },
  );
  const route = new DashboardRoute(history, loadDashboardAssets());
  let refuse = false;
  const srv = http.createServer((req, res) => {
    const [p, q] = (req.url ?? '').split('?');
    route.handle(req, res, p!, q ?? '', (_req, r) => {
      if (!refuse) return false;
      r.statusCode = 401;
      r.end();
      return true;
    });
  });
  await new Promise<void>((resolve) => srv.listen(0, '127.0.0.1', resolve));
  t.after(() => srv.close());
  const port = (srv.address() as AddressInfo).port;
  const get = async (path: string, method = 'GET') => {
    const r = await fetch(`http://127.0.0.1:${port}${path}`, { method });
    const headers = r.headers;
    return { status: r.status, text: await r.text(), allow: headers.get('allow'), cache: headers.get('cache-control') };
  };
  assert.equal((await get('/dashboard/api/state', 'POST')).status, 405);
  assert.equal((await get('/dashboard/api/state', 'POST')).allow, 'GET, HEAD');
  assert.equal((await get('/dashboard/api/state?since=abc')).status, 400);
  assert.equal((await get('/dashboard/nothing')).status, 404);
  const ok = await get('/dashboard/api/state');
  assert.equal(ok.status, 200);
  assert.equal(ok.cache, 'no-store');
  const parsed = JSON.parse(ok.text) as { models: Array<{ name: string }> };
  assert.equal(parsed.models[0]!.name, '<img src=x onerror=alert(1)>');
  refuse = true;
  assert.equal((await get('/dashboard/api/state')).status, 401);
  assert.equal((await get('/dashboard')).status, 200);
});

test('the page weighs at most 200 KB gzipped, uPlot included', () => {
  let total = 0;
  for (const [url, asset] of loadDashboardAssets()) if (url !== '/dashboard/') total += asset.gzip.length;
  assert.ok(total <= 200 * 1024, `${total} bytes`);
  assert.ok(total > 10_000, 'uPlot is bundled');
});
