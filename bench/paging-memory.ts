/**
 * `node dist/bench/paging-memory.js` (section `paging-memory` of bench/run.ts): what a paging server holds beyond
 * its models' figures, and whether a memory setting changes it. Modes (PAGING_MEMORY_MODES, default all three),
 * each on a fresh server:
 *   serial  BENCH_CHURN_LOADS (default 24) loads through a budget for 3.5 of the paging bench's models (built by
 *           bench/paging.ts), one request at a time;
 *   c8      the same loads from 8 clients at once;
 *   serve   8 models loaded one by one under a budget for 10, then 8 clients over them for BENCH_SECONDS
 *           (default 5): nothing unloaded, the models and the server only serve.
 * Per server: the mean figure of a loaded model (memory_bytes); what the process holds above its base beyond the
 * models' figures (RSS − base − figures), before and after a memory-reducing collection; the session threads'
 * JavaScript heaps and the main thread's (from bench/memory-probe.ts). Settings run in turns, BENCH_ROUNDS
 * (default 2) rounds; medians are printed.
 *
 * PAGING_MEMORY_VARIANTS: settings separated by ';', each a space-separated list of NAME=VALUE: environment
 * variables of the server, or `param.KEY=VALUE` for a parameter written into every model's configuration, or
 * `arg.=--flag=value` for a server flag. Default: the server as it is, then onnxruntime's arena off.
 */
import { existsSync, mkdirSync, readdirSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { benchModelsDir } from './models.js';
import { pagingModelsDir } from './paging-models.js';
import { startNereid } from './processes.js';

const LOADS = Number(process.env.BENCH_CHURN_LOADS ?? 24);
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 2);
const CONCURRENCY = 8;
const HOLD = 8;
const SERVE_SECONDS = Number(process.env.BENCH_SECONDS ?? 5);
const MODES = (process.env.PAGING_MEMORY_MODES ?? 'serial,c8,serve').split(',') as Mode[];
const MODELS = 12;
const VARIANTS = (process.env.PAGING_MEMORY_VARIANTS ?? 'default;param.enable_mem_arena=0')
  .split(';')
  .map((v) => v.trim())
  .filter((v) => v !== '');

const source = pagingModelsDir();
if (!existsSync(path.join(source, 'm11', '1', 'model.onnx')) || !existsSync(path.join(source, 'warm'))) {
  throw new Error(`run the paging bench once first: it builds the models under ${source}`);
}
const names = Array.from({ length: MODELS }, (_, i) => `m${String(i).padStart(2, '0')}`);
const BODY = JSON.stringify({
  inputs: [{ name: 'input', datatype: 'FP32', shape: [1, 256], data: Array.from({ length: 256 }, (_, i) => i / 256) }],
});

/** A repository of the paging models whose configurations carry `params`; the model files are links. */
function repository(index: number, params: Record<string, string>): string {
  const root = path.join(benchModelsDir(), `paging-memory-${index}`);
  rmSync(root, { recursive: true, force: true });
  for (const name of [...names, 'warm']) {
    mkdirSync(path.join(root, name, '1'), { recursive: true });
    symlinkSync(path.join(source, name, '1', 'model.onnx'), path.join(root, name, '1', 'model.onnx'));
    let config = readFileSync(path.join(source, name, 'config.pbtxt'), 'utf8');
    for (const [k, v] of Object.entries(params)) {
      config += `parameters { key: "${k}" value: { string_value: "${v}" } }\n`;
    }
    writeFileSync(path.join(root, name, 'config.pbtxt'), config);
  }
  return root;
}

function rssOf(pid: number): number {
  return Number(/^VmRSS:\s+(\d+)\s+kB/m.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))![1]) * 1024;
}

async function post(port: number, url: string, body = ''): Promise<number> {
  const res = await fetch(`http://127.0.0.1:${port}${url}`, { method: 'POST', body });
  await res.arrayBuffer();
  return res.status;
}

/** The READY models' figures, the warm-up model's (which holds the one-time costs) first. */
async function figures(port: number): Promise<number[]> {
  const res = await fetch(`http://127.0.0.1:${port}/v2/repository/index`, { method: 'POST', body: '{}' });
  const idx = (await res.json()) as Array<{ name: string; state?: string; memory_bytes?: number }>;
  const ready = idx.filter((e) => e.state === 'READY');
  ready.sort((a, b) => (a.name === 'warm' ? -1 : b.name === 'warm' ? 1 : 0));
  return ready.map((e) => e.memory_bytes ?? 0);
}

interface Sample {
  perModel: number;
  kept: number;
  keptAfterGc: number;
  failed: number;
  /** The session threads' JavaScript heaps (heapTotal, summed), from the memory probe. */
  workerHeaps: number;
}

type Mode = 'serial' | 'c8' | 'serve';

/** The main thread's heap and new space as its probe last wrote them. */
function mainHeap(memoryFile: string): string {
  try {
    const m = JSON.parse(readFileSync(memoryFile, 'utf8')) as { heapTotal: number; newSpace: number; external: number };
    return `main heap ${MB(m.heapTotal)} (new space ${MB(m.newSpace)}, external ${MB(m.external)}) MiB`;
  } catch {
    return 'main heap ?';
  }
}

/** The worker threads' heaps (or another figure of theirs) as their probes last wrote them. */
function workerHeaps(memoryFile: string, field: 'heapTotal' | 'external' = 'heapTotal'): number {
  const dir = path.dirname(memoryFile);
  let total = 0;
  for (const f of readdirSync(dir)) {
    if (!f.startsWith(`${path.basename(memoryFile)}.thread-`)) continue;
    try {
      const m = JSON.parse(readFileSync(path.join(dir, f), 'utf8')) as Record<string, number>;
      if (Date.now() - m.at! < 2000) total += m[field]!;
    } catch {
      // being written
    }
  }
  return total;
}

const MODEL_BYTES = 30 * 2 ** 20;
const MB = (n: number) => (n / 2 ** 20).toFixed(1);

async function churn(spec: string, repo: string, mode: Mode): Promise<Sample> {
  const env: Record<string, string | undefined> = {};
  const args: string[] = [];
  for (const kv of spec.split(/\s+/)) {
    const eq = kv.indexOf('=');
    if (kv === 'default' || eq < 0) continue;
    const [k, v] = [kv.slice(0, eq), kv.slice(eq + 1)];
    if (k === 'arg.') args.push(v);
    else if (!k.startsWith('param.')) env[k] = v;
  }
  const memoryFile = path.join(benchModelsDir(), `paging-memory-${process.pid}.json`);
  env.NEREID_BENCH_MEMORY_FILE = memoryFile;
  const s = await startNereid(
    repo,
    [
      '--model-control-mode=explicit',
      `--model-memory-budget=${Math.round((mode === 'serve' ? 10 : 4.5) * MODEL_BYTES)}`,
      '--model-pin=warm',
      ...args,
    ],
    { env, nodeArgs: ['--import', path.join(import.meta.dirname, 'memory-probe.js')] },
  );
  const pid = s.proc.child.pid!;
  try {
    const base = rssOf(pid);
    await post(s.http, '/v2/repository/models/warm/load');
    let failed = 0;
    let next = 0;
    const one = async () => {
      while (next < LOADS) {
        const m = names[next++ % MODELS]!;
        if ((await post(s.http, `/v2/models/${m}/infer`, BODY)) !== 200) failed++;
      }
    };
    const serve = async () => {
      // The serve mode: HOLD models loaded one by one, then requests from 8 clients over them for SERVE_SECONDS.
      for (const m of names.slice(0, HOLD)) if ((await post(s.http, `/v2/models/${m}/infer`, BODY)) !== 200) failed++;
      await new Promise((r) => setTimeout(r, 1000));
      const f0 = await figures(s.http);
      process.stdout.write(
        `  serve: after ${HOLD} loads, kept ${MB(rssOf(pid) - base - f0.reduce((a, b) => a + b, 0))} MiB, ` +
          `worker heaps ${MB(workerHeaps(memoryFile))} MiB (external ${MB(workerHeaps(memoryFile, 'external'))}), ` +
          `${mainHeap(memoryFile)}\n`,
      );
      const end = Date.now() + SERVE_SECONDS * 1000;
      let k = 0;
      const sampler = setInterval(() => {
        const kept = rssOf(pid) - base - f0.reduce((a, b) => a + b, 0);
        process.stdout.write(`  serve: ${k} requests, kept ${MB(kept)} MiB, ${mainHeap(memoryFile)}\n`);
      }, 3000);
      await Promise.all(
        Array.from({ length: CONCURRENCY }, async () => {
          while (Date.now() < end) {
            if ((await post(s.http, `/v2/models/${names[k++ % HOLD]!}/infer`, BODY)) !== 200) failed++;
          }
        }),
      );
      clearInterval(sampler);
    };
    if (mode === 'serve') await serve();
    else await Promise.all(Array.from({ length: mode === 'c8' ? CONCURRENCY : 1 }, one));
    await new Promise((r) => setTimeout(r, 1000));
    const heaps = workerHeaps(memoryFile);
    process.stdout.write(
      `  ${mode}: at the end ${mainHeap(memoryFile)}, worker external ${MB(workerHeaps(memoryFile, 'external'))} MiB\n`,
    );
    const f = await figures(s.http);
    const used = f.reduce((a, b) => a + b, 0);
    f.shift();
    const kept = rssOf(pid) - base - used;
    writeFileSync(`${memoryFile}.collect`, '');
    await new Promise((r) => setTimeout(r, 1500));
    const keptAfterGc = rssOf(pid) - base - used;
    process.stdout.write(`  ${mode}: after a collection ${mainHeap(memoryFile)}\n`);
    return { perModel: used / Math.max(1, f.length), kept, keptAfterGc, failed, workerHeaps: heaps };
  } finally {
    await s.proc.stop();
    for (const f of readdirSync(path.dirname(memoryFile))) {
      if (f.startsWith(path.basename(memoryFile))) rmSync(path.join(path.dirname(memoryFile), f), { force: true });
    }
  }
}

const median = (v: number[]) => [...v].sort((a, b) => a - b)[Math.floor(v.length / 2)]!;

const repos = VARIANTS.map((spec, i) => {
  const params: Record<string, string> = {};
  for (const kv of spec.split(/\s+/)) {
    const m = /^param\.([^=]+)=(.*)$/.exec(kv);
    if (m) params[m[1]!] = m[2]!;
  }
  return repository(i, params);
});
const results = VARIANTS.map(() => ({ serial: [] as Sample[], c8: [] as Sample[], serve: [] as Sample[] }));
for (let round = 0; round < ROUNDS; round++) {
  for (const [i, spec] of VARIANTS.entries()) {
    for (const mode of MODES) {
      const r = await churn(spec, repos[i]!, mode);
      results[i]![mode].push(r);
      process.stdout.write(
        `round ${round + 1} ${spec} ${mode}: per model ${MB(r.perModel)} MiB, ` +
          `kept ${MB(r.kept)} MiB, after a collection ${MB(r.keptAfterGc)} MiB, ` +
          `worker heaps ${MB(r.workerHeaps)} MiB, failed ${r.failed}\n`,
      );
    }
  }
}
process.stdout.write(`\nmedians over ${ROUNDS} rounds, ${LOADS} loads through room for about 3 models (MiB):\n`);
for (const [i, spec] of VARIANTS.entries()) {
  for (const kind of MODES) {
    const s = results[i]![kind];
    process.stdout.write(
      `${spec.padEnd(40)} ${kind.padEnd(10)} per model ${MB(median(s.map((x) => x.perModel)))}  ` +
        `kept ${MB(median(s.map((x) => x.kept)))}  after gc ${MB(median(s.map((x) => x.keptAfterGc)))}  ` +
        `worker heaps ${MB(median(s.map((x) => x.workerHeaps)))}\n`,
    );
  }
}
for (const i of VARIANTS.keys()) {
  rmSync(path.join(benchModelsDir(), `paging-memory-${i}`), { recursive: true, force: true });
}
