/**
 * Memory under hostile input: a storm of malformed HTTP requests (gzip bombs,
 * huge headers, deeply nested JSON, broken JSON, wrong types), then a soak of
 * valid requests, reporting the server's RSS before, after and while settling.
 *
 *   node dist/bench/hostile.js
 *   HOSTILE_REQUESTS=20000 HOSTILE_CONCURRENCY=16 SOAK_SECONDS=600 SOAK_RPS=200 node dist/bench/hostile.js
 */
import { readFileSync } from 'node:fs';
import http from 'node:http';
import { gzipSync } from 'node:zlib';
import { buildAddSubModel } from '../src/onnx/builder.js';
import { TempRepositoryForBench } from './hostile-repo.js';
import { startNereid } from './processes.js';

const REQUESTS = Number(process.env.HOSTILE_REQUESTS ?? 20000);
const CONCURRENCY = Number(process.env.HOSTILE_CONCURRENCY ?? 16);
const SOAK_SECONDS = Number(process.env.SOAK_SECONDS ?? 30);
const SOAK_RPS = Number(process.env.SOAK_RPS ?? 200);

function rssMiB(pid: number): number {
  const status = readFileSync(`/proc/${pid}/status`, 'utf8');
  const kb = Number(/VmRSS:\s+(\d+) kB/.exec(status)?.[1] ?? 0);
  return kb / 1024;
}

interface Hostile {
  readonly kind: string;
  readonly path: string;
  readonly headers: Record<string, string>;
  readonly body: Buffer;
}

function hostileRequests(): Hostile[] {
  const infer = '/v2/models/simple/infer';
  const bomb = gzipSync(Buffer.alloc(96 * 1024 * 1024, 0x20)); // ~96 KiB that inflates past the 64 MiB limit
  const deep = Buffer.from(`{"inputs":${'['.repeat(200_000)}${']'.repeat(200_000)}}`);
  const bigHeader = 'x'.repeat(60 * 1024);
  const manyInputs = Buffer.from(
    JSON.stringify({ inputs: Array.from({ length: 5000 }, (_, i) => ({ name: `IN${i}`, datatype: 'INT32', shape: [1], data: [i] })) }),
  );
  return [
    { kind: 'gzip bomb', path: infer, headers: { 'content-encoding': 'gzip', 'content-type': 'application/json' }, body: bomb },
    { kind: 'deep JSON', path: infer, headers: { 'content-type': 'application/json' }, body: deep },
    { kind: 'huge header', path: infer, headers: { 'x-filler': bigHeader }, body: Buffer.from('{}') },
    { kind: 'broken JSON', path: infer, headers: {}, body: Buffer.from('{"inputs":[{"name":"INPUT0",'.repeat(2000)) },
    { kind: 'many inputs', path: infer, headers: {}, body: manyInputs },
    { kind: 'wrong type', path: infer, headers: {}, body: Buffer.from('{"inputs":[{"name":"INPUT0","datatype":"INT32","shape":[1,16],"data":["a"]}]}') },
    { kind: 'overflow', path: infer, headers: {}, body: Buffer.from(`{"inputs":[{"name":"INPUT0","datatype":"FP64","shape":[1],"data":[1e309]}]}`) },
    { kind: 'bad binary', path: infer, headers: { 'inference-header-content-length': '99999999' }, body: Buffer.from('{"inputs":[]}') },
  ];
}

function send(port: number, agent: http.Agent, r: { path: string; headers: Record<string, string>; body: Buffer }): Promise<number> {
  return new Promise((resolve) => {
    const req = http.request(
      { host: '127.0.0.1', port, method: 'POST', path: r.path, agent, headers: { ...r.headers, 'content-length': String(r.body.byteLength) } },
      (res) => {
        res.resume();
        res.on('end', () => resolve(res.statusCode ?? 0));
        res.on('error', () => resolve(-1));
      },
    );
    req.on('error', () => resolve(-1));
    req.end(r.body);
  });
}

const validBody = Buffer.from(
  JSON.stringify({
    inputs: [
      { name: 'INPUT0', datatype: 'INT32', shape: [1, 16], data: Array.from({ length: 16 }, (_, i) => i) },
      { name: 'INPUT1', datatype: 'INT32', shape: [1, 16], data: Array.from({ length: 16 }, () => 1) },
    ],
  }),
);

async function main(): Promise<void> {
  const repo = new TempRepositoryForBench();
  repo.model('simple', buildAddSubModel('INT32', 16).toBytes());
  const server = await startNereid(repo.dir);
  const pid = server.proc.child.pid!;
  const agent = new http.Agent({ keepAlive: true, maxSockets: CONCURRENCY });
  try {
    const valid = { path: '/v2/models/simple/infer', headers: { 'content-type': 'application/json' }, body: validBody };
    for (let i = 0; i < 200; i++) await send(server.http, agent, valid);
    await new Promise((r) => setTimeout(r, 2000));
    const start = rssMiB(pid);

    const kinds = hostileRequests();
    const statuses = new Map<string, Map<number, number>>();
    let next = 0;
    const t0 = Date.now();
    await Promise.all(
      Array.from({ length: CONCURRENCY }, async () => {
        for (;;) {
          const i = next++;
          if (i >= REQUESTS) return;
          const h = kinds[i % kinds.length]!;
          const code = await send(server.http, agent, h);
          const m = statuses.get(h.kind) ?? new Map<number, number>();
          m.set(code, (m.get(code) ?? 0) + 1);
          statuses.set(h.kind, m);
        }
      }),
    );
    const stormSecs = (Date.now() - t0) / 1000;
    const afterStorm = rssMiB(pid);
    await new Promise((r) => setTimeout(r, 10_000));
    const settled = rssMiB(pid);
    const stillServes = await send(server.http, agent, valid);

    // Soak: valid requests at a steady rate.
    const soakStart = rssMiB(pid);
    const soakEnd = Date.now() + SOAK_SECONDS * 1000;
    let sent = 0;
    let failed = 0;
    const samples: number[] = [soakStart];
    let lastSample = Date.now();
    while (Date.now() < soakEnd) {
      const tick = Date.now();
      const batch = Math.max(1, Math.round(SOAK_RPS / 10));
      const codes = await Promise.all(Array.from({ length: batch }, () => send(server.http, agent, valid)));
      sent += batch;
      failed += codes.filter((c) => c !== 200).length;
      if (Date.now() - lastSample > 5000) {
        samples.push(rssMiB(pid));
        lastSample = Date.now();
      }
      const wait = 100 - (Date.now() - tick);
      if (wait > 0) await new Promise((r) => setTimeout(r, wait));
    }
    const soakFinal = rssMiB(pid);

    console.log(`hostile storm: ${REQUESTS} requests, concurrency ${CONCURRENCY}, ${stormSecs.toFixed(1)} s`);
    for (const [kind, m] of statuses) console.log(`  ${kind.padEnd(12)} ${[...m].map(([c, n]) => `${c}x${n}`).join(' ')}`);
    console.log(`RSS before storm      ${start.toFixed(1)} MiB`);
    console.log(`RSS after storm       ${afterStorm.toFixed(1)} MiB (${(afterStorm - start >= 0 ? '+' : '') + (afterStorm - start).toFixed(1)} MiB)`);
    console.log(`RSS 10 s later        ${settled.toFixed(1)} MiB (${(((settled - start) / start) * 100).toFixed(1)} % above the start)`);
    console.log(`valid request after   ${stillServes}`);
    console.log(`soak: ${SOAK_SECONDS} s at ~${SOAK_RPS} req/s, ${sent} sent, ${failed} not 200`);
    console.log(`RSS soak start/end    ${soakStart.toFixed(1)} -> ${soakFinal.toFixed(1)} MiB (${(((soakFinal - soakStart) / soakStart) * 100).toFixed(1)} % growth)`);
    console.log(`RSS soak samples      ${samples.map((s) => s.toFixed(0)).join(' ')}`);
  } finally {
    agent.destroy();
    await server.proc.stop();
    repo.cleanup();
  }
}

await main();
