/**
 * `npm run bench -- cloud`: cold start of many small ONNX models from a local
 * folder and from an S3 server (a throwaway Ceph radosgw on this machine),
 * measured in the same run, then a restart from the warm download cache.
 * Each start runs in a fresh Node process: the time is from `new Server` to
 * every model READY (the server's modules are imported before the clock
 * starts; the S3 SDK, loaded on first use, is inside it).
 *
 * The starts alternate, BENCH_CLOUD_ROUNDS rounds (default 5): each round
 * runs a local start, an S3 start into an empty cache and an S3 start from
 * the cache it left, the local one first in even rounds and last in odd
 * ones. The ratio is that of the medians; the median of each round's own
 * ratio is printed beside it, and the ratio of the server's CPU time (all
 * its threads; radosgw's own is not in it), which swings less with the
 * machine's load than the time does. Each S3 cold start also reports its stages,
 * from its own log: until the first model's download begins (SDK import,
 * client, listing), until the last download ends, and until READY.
 * BENCH_CLOUD_MODELS sets the model count (default 100).
 *
 * Bars: local <= 3 s; S3 cold <= 2x local; a warm restart downloads nothing.
 */
import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { createRequire } from 'node:module';
import { loadavg, tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { Server } from '../src/core/server.js';
import { recordingLogger } from '../test/repository/cloud-scenarios.js';

interface StartResult {
  ms: number;
  /** CPU time (user + system, all threads) of the server's process over the same span, ms. */
  cpuMs: number;
  models: number;
  downloadedFiles: number;
  downloadedBytes: number;
  /** From `new Server` to the first 'downloading model' line, ms (cloud starts that download). */
  firstDownloadMs?: number;
  /** From `new Server` to the last 'downloaded model' line, ms. */
  lastDownloadMs?: number;
}

const self = fileURLToPath(import.meta.url);

/** Child mode: start a server on the repository, report, stop. */
async function child(repository: string, cacheDir: string): Promise<void> {
  const { logger, records } = recordingLogger();
  const loaded = Object.keys(createRequire(import.meta.url).cache).filter((f) => f.includes('@aws-sdk'));
  if (loaded.length > 0) throw new Error(`the AWS SDK is loaded before the clock starts: ${loaded[0]}`);
  const wallStart = Date.now();
  const started = performance.now();
  const cpuStart = process.cpuUsage();
  const server = new Server({ modelRepositories: [repository], modelCacheDir: cacheDir, logger });
  await server.start();
  const ms = performance.now() - started;
  const cpu = process.cpuUsage(cpuStart);
  const index = await server.repositoryIndex();
  await server.stop();
  const downloads = records.filter((r) => r.msg === `downloaded model '${String(r.model)}'`);
  const begun = records.filter((r) => r.msg === `downloading model '${String(r.model)}'`);
  const times = (rs: Array<Record<string, unknown>>) => rs.map((r) => Number(r.time) - wallStart);
  const result: StartResult = {
    ms,
    cpuMs: (cpu.user + cpu.system) / 1000,
    models: index.filter((e) => e.state === 'READY').length,
    downloadedFiles: downloads.reduce((n, r) => n + Number(r.files), 0),
    downloadedBytes: downloads.reduce((n, r) => n + Number(r.bytes), 0),
  };
  if (begun.length > 0) result.firstDownloadMs = Math.min(...times(begun));
  if (downloads.length > 0) result.lastDownloadMs = Math.max(...times(downloads));
  process.stdout.write(`${JSON.stringify(result)}\n`);
}

function startIn(repository: string, cacheDir: string, env: NodeJS.ProcessEnv): StartResult {
  const r = spawnSync(process.execPath, ['--no-warnings', self, 'child', repository, cacheDir], {
    encoding: 'utf8',
    env: { ...process.env, ...env, NEREID_LOG_LEVEL: 'silent' },
  });
  const line = r.stdout.trim().split('\n').pop() ?? '';
  if (r.status !== 0 || !line.startsWith('{'))
    throw new Error(`start of ${repository} failed: ${r.stderr.slice(-2000)}`);
  return JSON.parse(line) as StartResult;
}

function median(xs: number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  const mid = s.length >> 1;
  return s.length % 2 === 1 ? s[mid]! : (s[mid - 1]! + s[mid]!) / 2;
}

const secs = (ms: number) => (ms / 1000).toFixed(2);
const load = () => loadavg().map((x) => x.toFixed(2)).join(' ');

async function main(): Promise<void> {
  const count = Number(process.env.BENCH_CLOUD_MODELS ?? 100);
  const rounds = Math.max(1, Number(process.env.BENCH_CLOUD_ROUNDS ?? 5));
  // Imported here, not at the top: the S3 SDK they bring must not be loaded in the children before their clock starts.
  const { TempRepository } = await import('../test/helpers/repository.js');
  const { radosGatewayUnavailable, startRadosGateway } = await import('../test/helpers/ceph.js');
  const skip = radosGatewayUnavailable();
  if (skip) {
    process.stdout.write(`\ncloud: skipped, ${skip}\n`);
    return;
  }
  const repo = new TempRepository();
  for (let i = 0; i < count; i++) repo.addSub(`m${String(i).padStart(3, '0')}`);
  const rgw = await startRadosGateway();
  const caches: string[] = [];
  try {
    await rgw.createBucket('bench');
    const objects = await rgw.uploadDir(repo.dir, 'bench', 'repo');
    const env = { AWS_ACCESS_KEY_ID: rgw.accessKey, AWS_SECRET_ACCESS_KEY: rgw.secretKey, AWS_REGION: 'us-east-1' };
    const url = `s3://${rgw.hostPort}/bench/repo`;
    const loadBefore = load();
    // One start of each first, not counted: file caches and the server's modules warm up.
    const scratch = mkdtempSync(path.join(tmpdir(), 'nereid-bench-cache-'));
    caches.push(scratch);
    startIn(repo.dir, scratch, {});
    startIn(url, scratch, env);
    const local: StartResult[] = [];
    const cold: StartResult[] = [];
    const warm: StartResult[] = [];
    for (let round = 0; round < rounds; round++) {
      const cacheDir = mkdtempSync(path.join(tmpdir(), 'nereid-bench-cache-'));
      caches.push(cacheDir);
      if (round % 2 === 0) local.push(startIn(repo.dir, cacheDir, {}));
      cold.push(startIn(url, cacheDir, env));
      warm.push(startIn(url, cacheDir, env));
      if (round % 2 === 1) local.push(startIn(repo.dir, cacheDir, {}));
    }
    const loadAfter = load();
    const localMs = median(local.map((r) => r.ms));
    const coldMs = median(cold.map((r) => r.ms));
    const warmMs = median(warm.map((r) => r.ms));
    const ratio = coldMs / localMs;
    const roundRatio = median(cold.map((c, i) => c.ms / local[i]!.ms));
    process.stdout.write(
      `\nCold start of ${count} small ONNX models (${objects} objects), every ` +
      `model READY, one fresh process each, ${rounds} alternating rounds\n`,
    );
    process.stdout.write(`${'repository'.padEnd(20)}${'median'.padStart(9)}   each round (s), median server CPU\n`);
    const row = (name: string, rs: StartResult[], m: number) =>
      `${name.padEnd(20)}${secs(m).padStart(7)} s   ${rs.map((r) => secs(r.ms)).join(' ')} ` +
      `  CPU ${secs(median(rs.map((r) => r.cpuMs)))} s\n`;
    process.stdout.write(row('local folder', local, localMs));
    process.stdout.write(row('S3 (radosgw), cold', cold, coldMs));
    process.stdout.write(row('S3, warm cache', warm, warmMs));
    const cpuRatio = median(cold.map((r) => r.cpuMs)) / median(local.map((r) => r.cpuMs));
    process.stdout.write(
      `  S3 cold / local: ${ratio.toFixed(2)} (medians), server CPU ${cpuRatio.toFixed(2)}; per round ` +
      `${cold.map((c, i) => (c.ms / local[i]!.ms).toFixed(2)).join(' ')}, median ${roundRatio.toFixed(2)}\n`,
    );
    const stage = (f: (r: StartResult) => number | undefined) => secs(median(cold.map((r) => f(r) ?? Number.NaN)));
    process.stdout.write(
      `  S3 cold stages (medians): first download begins ` +
      `${stage((r) => r.firstDownloadMs)} s (SDK import, client, listing), ` +
        `last download ends ${stage((r) => r.lastDownloadMs)} s, READY ${secs(coldMs)} s\n`,
    );
    process.stdout.write(`  load average before ${loadBefore}, after ${loadAfter}\n`);
    const bars = [
      [`local <= 3 s`, localMs <= 3000],
      [`S3 cold <= 2x local`, ratio <= 2],
      [`warm restart downloads nothing`, warm.every((r) => r.downloadedFiles === 0)],
      [`every cold start downloads all ${objects} objects`, cold.every((r) => r.downloadedFiles === objects)],
      [`all ${count} models READY each time`, [...local, ...cold, ...warm].every((r) => r.models === count)],
    ] as const;
    for (const [what, ok] of bars) process.stdout.write(`  ${ok ? 'PASS' : 'FAIL'}  ${what}\n`);
  } finally {
    await rgw.stop();
    repo.cleanup();
    for (const dir of caches) rmSync(dir, { recursive: true, force: true });
  }
}

if (process.argv[2] === 'child') await child(process.argv[3]!, process.argv[4]!);
else await main();
