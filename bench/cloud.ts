/**
 * `npm run bench -- cloud`: cold start of many small ONNX models from a local
 * folder and from an S3 server (a throwaway Ceph radosgw on this machine),
 * measured in the same run, then a restart from the warm download cache.
 * Each start runs in a fresh Node process: the time is from `new Server` to
 * every model READY. BENCH_CLOUD_MODELS sets the model count (default 100).
 *
 * Bars: local <= 3 s; S3 cold <= 2x local; a warm restart downloads nothing.
 */
import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { Server } from '../src/core/server.js';
import { TempRepository } from '../test/helpers/repository.js';
import { radosGatewayUnavailable, startRadosGateway } from '../test/helpers/ceph.js';
import { recordingLogger } from '../test/repository/cloud-scenarios.js';

interface StartResult {
  ms: number;
  models: number;
  downloadedFiles: number;
  downloadedBytes: number;
}

const self = fileURLToPath(import.meta.url);

/** Child mode: start a server on the repository, report, stop. */
async function child(repository: string, cacheDir: string): Promise<void> {
  const { logger, records } = recordingLogger();
  const started = performance.now();
  const server = new Server({ modelRepositories: [repository], modelCacheDir: cacheDir, logger });
  await server.start();
  const ms = performance.now() - started;
  const index = await server.repositoryIndex();
  await server.stop();
  const downloads = records.filter((r) => r.msg === `downloaded model '${String(r.model)}'`);
  const result: StartResult = {
    ms,
    models: index.filter((e) => e.state === 'READY').length,
    downloadedFiles: downloads.reduce((n, r) => n + Number(r.files), 0),
    downloadedBytes: downloads.reduce((n, r) => n + Number(r.bytes), 0),
  };
  process.stdout.write(`${JSON.stringify(result)}\n`);
}

function startIn(repository: string, cacheDir: string, env: NodeJS.ProcessEnv): StartResult {
  const r = spawnSync(process.execPath, [self, 'child', repository, cacheDir], {
    encoding: 'utf8',
    env: { ...process.env, ...env, NEREID_LOG_LEVEL: 'silent' },
  });
  const line = r.stdout.trim().split('\n').pop() ?? '';
  if (r.status !== 0 || !line.startsWith('{')) throw new Error(`start of ${repository} failed: ${r.stderr.slice(-2000)}`);
  return JSON.parse(line) as StartResult;
}

async function main(): Promise<void> {
  const count = Number(process.env.BENCH_CLOUD_MODELS ?? 100);
  const skip = radosGatewayUnavailable();
  if (skip) {
    process.stdout.write(`\ncloud: skipped, ${skip}\n`);
    return;
  }
  const repo = new TempRepository();
  for (let i = 0; i < count; i++) repo.addSub(`m${String(i).padStart(3, '0')}`);
  const cacheDir = mkdtempSync(path.join(tmpdir(), 'nereid-bench-cache-'));
  const rgw = await startRadosGateway();
  try {
    await rgw.createBucket('bench');
    await rgw.uploadDir(repo.dir, 'bench', 'repo');
    const env = { AWS_ACCESS_KEY_ID: rgw.accessKey, AWS_SECRET_ACCESS_KEY: rgw.secretKey, AWS_REGION: 'us-east-1' };
    const url = `s3://${rgw.hostPort}/bench/repo`;
    // Local runs first and last: the first start of the run pays for cold file caches.
    const localFirst = startIn(repo.dir, cacheDir, {});
    const cold = startIn(url, cacheDir, env);
    const warm = startIn(url, cacheDir, env);
    const localLast = startIn(repo.dir, cacheDir, {});
    const local = localFirst.ms <= localLast.ms ? localFirst : localLast;
    const row = (name: string, r: StartResult) =>
      `${name.padEnd(22)}${(r.ms / 1000).toFixed(2).padStart(8)} s${String(r.models).padStart(8)}${String(r.downloadedFiles).padStart(12)}${(r.ms / local.ms).toFixed(2).padStart(10)}`;
    process.stdout.write(`\nCold start of ${count} small ONNX models (every model READY), one fresh process each\n`);
    process.stdout.write(`${'repository'.padEnd(22)}${'time'.padStart(10)}${'ready'.padStart(8)}${'downloads'.padStart(12)}${'x local'.padStart(10)}\n`);
    process.stdout.write(
      `${row('local folder (first)', localFirst)}\n${row('S3 (radosgw), cold', cold)}\n${row('S3, warm cache', warm)}\n${row('local folder (last)', localLast)}\n`,
    );
    process.stdout.write(`  x local: against the faster local run (${(local.ms / 1000).toFixed(2)} s)\n`);
    const bars = [
      [`local <= 3 s`, local.ms <= 3000],
      [`S3 cold <= 2x local`, cold.ms <= 2 * local.ms],
      [`warm restart downloads nothing`, warm.downloadedFiles === 0],
      [`all ${count} models READY each time`, [localFirst, cold, warm, localLast].every((r) => r.models === count)],
    ] as const;
    for (const [what, ok] of bars) process.stdout.write(`  ${ok ? 'PASS' : 'FAIL'}  ${what}\n`);
  } finally {
    await rgw.stop();
    repo.cleanup();
    rmSync(cacheDir, { recursive: true, force: true });
  }
}

if (process.argv[2] === 'child') await child(process.argv[3]!, process.argv[4]!);
else await main();
