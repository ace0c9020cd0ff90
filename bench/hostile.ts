/**
 * Memory under hostile input: a storm of malformed HTTP requests (gzip bombs,
 * huge headers, deeply nested JSON, broken JSON, wrong types), then a soak of
 * valid requests, reporting the server's RSS before, after and while settling,
 * and whether the two bars are met: RSS 10 s after the storm within 10 % of the
 * start, and under 5 % growth over the soak. The start is read after a warm-up
 * that sends the storm's own mix at low volume (so one-time allocations, the
 * loaded model, JIT code and pools, are part of the start and not counted as
 * growth), a quiet time and one full garbage collection asked of the probe
 * inside the server (so the start holds no garbage: V8 shrinks its young
 * generation in a collection after a few quiet seconds, 15 to 30 MiB of RSS,
 * and whether its own timers had done so decided a reading otherwise). The
 * settled reading is the server's own doing; one after a collection asked of
 * the probe follows it, to tell garbage from memory the allocator kept.
 *
 *   node dist/bench/hostile.js
 *   HOSTILE_REQUESTS=20000 HOSTILE_CONCURRENCY=16 SOAK_SECONDS=600 node dist/bench/hostile.js
 *
 * HOSTILE_REQUESTS, HOSTILE_CONCURRENCY: the storm's size; SOAK_SECONDS; SOAK_RPS
 * (unset: 80 % of a closed-loop rate measured just before the soak);
 * SOAK_SECONDS=0 skips the soak; HOSTILE_WARMUP: rounds of the mix in the warm-up (default 4);
 * HOSTILE_KINDS=kind,kind: only those kinds (also 'small', 'new connection' and 'valid',
 * which are not in the default mix); HOSTILE_SMAPS=1: which mappings grew;
 * HOSTILE_NODE_ARGS: extra node options for the server (--heapsnapshot-signal=SIGUSR2
 * takes a snapshot at the start and after the storm). MALLOC_*, GLIBC_TUNABLES and
 * NEREID_MALLOC_TUNING pass through; the server is started as `nereid serve` is, so on a
 * Node with process.execve it runs with the malloc tunables and the young generation's cap that
 * sets (the first line says which; a --max-semi-space-size in HOSTILE_NODE_ARGS or NODE_OPTIONS
 * replaces the cap, =0 for V8's own sizing).
 */
import { existsSync, readFileSync, readdirSync, writeFileSync } from 'node:fs';
import http from 'node:http';
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import { deflateSync, gzipSync } from 'node:zlib';
import { NEREID_TUNABLES } from '../src/cli/allocator.js';
import { buildAddSubModel } from '../test/helpers/onnx-builder.js';
import { TempRepositoryForBench } from './hostile-repo.js';
import { DIST, startNereid } from './processes.js';

const REQUESTS = Number(process.env.HOSTILE_REQUESTS ?? 20000);
const CONCURRENCY = Number(process.env.HOSTILE_CONCURRENCY ?? 16);
const SOAK_SECONDS = Number(process.env.SOAK_SECONDS ?? 30);
/** Rounds of the storm's mix (each kind once per round) sent before the start is read. */
const WARMUP_ROUNDS = Number(process.env.HOSTILE_WARMUP ?? 4);
/** How long the server is left alone after the storm before the settled reading. */
const SETTLE_MS = 10_000;
/**
 * How long the server is left alone after the warm-up before the collection (V8 shrinks its young generation after 5 s
 * of low allocation).
 */
const START_QUIET_MS = 7000;
/** Requests per second in the soak; unset: 80 % of the rate measured closed-loop just before it. */
const SOAK_RPS = process.env.SOAK_RPS === undefined ? undefined : Number(process.env.SOAK_RPS);
/** Comma-separated kinds to send (default all), to tell which kind leaves memory behind. */
const KINDS = process.env.HOSTILE_KINDS?.split(',').map((k) => k.trim());
/** Extra node options for the server, e.g. --heapsnapshot-signal=SIGUSR2 or --expose-gc. */
const SERVER_NODE_ARGS = (process.env.HOSTILE_NODE_ARGS ?? '').split(' ').filter((a) => a !== '');
/** The storm's bar: RSS settled after it, within this fraction of the start. */
const STORM_BAR = 0.1;
/** The soak's bar: RSS growth from its start to its end under this fraction. */
const SOAK_BAR = 0.05;

interface MemorySample {
  readonly rss: number;
  readonly anon: number;
  readonly file: number;
  /** From the probe inside the server (MiB), when it has written one. */
  readonly heapUsed?: number;
  readonly heapTotal?: number;
  readonly external?: number;
  readonly arrayBuffers?: number;
  /** The main isolate's new space (MiB), committed. */
  readonly newSpace?: number;
  /** Worker threads' isolates: heap used/total summed (MiB), and how many wrote. */
  readonly workers?: { readonly heapUsed: number; readonly heapTotal: number; readonly count: number };
}

interface Probe {
  heapUsed: number;
  heapTotal: number;
  external: number;
  arrayBuffers: number;
  newSpace?: number;
}

const MiB = 1024 * 1024;

function statusKiB(status: string, field: string): number {
  return Number(new RegExp(`${field}:\\s+(\\d+) kB`).exec(status)?.[1] ?? 0);
}

function readProbe(file: string): Probe | undefined {
  try {
    return JSON.parse(readFileSync(file, 'utf8')) as Probe;
  } catch {
    return undefined; // not written yet, or caught mid-write
  }
}

function memory(pid: number, probeFile: string): MemorySample {
  const status = readFileSync(`/proc/${pid}/status`, 'utf8');
  const sample = {
    rss: statusKiB(status, 'VmRSS') / 1024,
    anon: statusKiB(status, 'RssAnon') / 1024,
    file: statusKiB(status, 'RssFile') / 1024,
  };
  const probe = readProbe(probeFile);
  if (probe === undefined) return sample;
  const prefix = `${path.basename(probeFile)}.thread-`;
  const workers = readdirSync(path.dirname(probeFile))
    .filter((f) => f.startsWith(prefix))
    .map((f) => readProbe(path.join(path.dirname(probeFile), f)))
    .filter((p): p is Probe => p !== undefined);
  return {
    ...sample,
    heapUsed: probe.heapUsed / MiB,
    heapTotal: probe.heapTotal / MiB,
    external: probe.external / MiB,
    arrayBuffers: probe.arrayBuffers / MiB,
    newSpace: (probe.newSpace ?? 0) / MiB,
    workers: {
      heapUsed: workers.reduce((a, w) => a + w.heapUsed, 0) / MiB,
      heapTotal: workers.reduce((a, w) => a + w.heapTotal, 0) / MiB,
      count: workers.length,
    },
  };
}

function describe(label: string, m: MemorySample, base?: MemorySample): string {
  const delta =
    base === undefined ? '' : ` (${signed(m.rss - base.rss)} MiB, ${signed(((m.rss - base.rss) / base.rss) * 100)} %)`;
  const js =
    m.heapUsed === undefined
      ? ''
      : `  heap ${m.heapUsed.toFixed(1)}/${m.heapTotal!.toFixed(1)} (new ${m.newSpace!.toFixed(1)}) ` +
        `external ${m.external!.toFixed(1)} arrayBuffers ${m.arrayBuffers!.toFixed(1)}` +
        (m.workers!.count === 0
          ? ''
          : `  workers' heap ${m.workers!.heapUsed.toFixed(1)}/` +
            `${m.workers!.heapTotal.toFixed(1)} (${m.workers!.count})`);
  return `${label.padEnd(22)}RSS ${m.rss.toFixed(1)} MiB${delta} ` +
    ` [anon ${m.anon.toFixed(1)} file ${m.file.toFixed(1)}]${js}`;
}

interface Mapping {
  readonly range: string;
  readonly start: number;
  readonly perms: string;
  readonly name: string;
  readonly size: number;
  rss: number;
}

function mappings(pid: number): Mapping[] {
  const rows: Mapping[] = [];
  let current: Mapping | undefined;
  for (const line of readFileSync(`/proc/${pid}/smaps`, 'utf8').split('\n')) {
    const head = /^([0-9a-f]+)-([0-9a-f]+) (\S+) \S+ \S+ \S+\s*(.*)$/.exec(line);
    if (head !== null) {
      const start = parseInt(head[1]!, 16);
      current = {
        range: `${head[1]}-${head[2]}`,
        start,
        perms: head[3]!,
        name: head[4] || '[anon]',
        size: (parseInt(head[2]!, 16) - start) / MiB,
        rss: 0,
      };
      rows.push(current);
    } else if (current !== undefined && line.startsWith('Rss:')) {
      current.rss = Number(/(\d+)/.exec(line)?.[1] ?? 0) / 1024;
    }
  }
  return rows;
}

/**
 * Where resident memory grew between two readings of /proc/PID/smaps
 * (HOSTILE_SMAPS=1): the brk heap, thread arenas (64 MiB anonymous
 * mappings), V8's pages, the libraries. Mappings are matched by address.
 */
/**
 * Resident MiB by kind of mapping: the brk heap; glibc's arenas of other threads
 * (a 64 MiB-aligned anonymous mapping whose unused rest follows it as PROT_NONE,
 * together 64 MiB); other anonymous memory (V8's heap pages, large malloc chunks
 * mapped on their own, thread stacks); file-backed (code, the model file).
 */
function mappingKinds(list: readonly Mapping[]): Record<'heap' | 'arenas' | 'anon' | 'file', number> {
  const out = { heap: 0, arenas: 0, anon: 0, file: 0 };
  const ARENA = 64 * MiB;
  list.forEach((m, i) => {
    const next = list[i + 1];
    if (m.name === '[heap]') out.heap += m.rss;
    else if (m.name.startsWith('/')) out.file += m.rss;
    else if (
      m.name === '[anon]' &&
      m.start % ARENA === 0 &&
      (m.size * MiB === ARENA ||
        (next !== undefined &&
          next.perms.startsWith('---') &&
          next.name === '[anon]' &&
          Math.round((m.size + next.size) * MiB) === ARENA))
    )
      out.arenas += m.rss;
    else out.anon += m.rss;
  });
  return out;
}

function kindsGrowth(before: readonly Mapping[], after: readonly Mapping[]): string {
  const a = mappingKinds(before);
  const b = mappingKinds(after);
  const keys = ['heap', 'arenas', 'anon', 'file'] as const;
  return `  resident by kind (MiB, start -> settled): ` +
    `${keys.map((k) => `${k} ${a[k].toFixed(1)} -> ${b[k].toFixed(1)} (${signed(b[k] - a[k])})`).join(', ')}`;
}

function mappingGrowth(before: readonly Mapping[], after: readonly Mapping[], n = 10): string {
  const key = (m: Mapping): string => (m.name === '[heap]' ? m.name : m.range);
  const old = new Map(before.map((m) => [key(m), m.rss]));
  const rows = after.map((m) => ({ ...m, growth: m.rss - (old.get(key(m)) ?? 0) })).sort((a, b) => b.growth - a.growth);
  const anonCount = (list: readonly Mapping[]): number => list.filter((m) => m.name === '[anon]').length;
  return [
    `  mappings ${before.length} -> ${after.length} (anonymous ` +
    `${anonCount(before)} -> ${anonCount(after)}); most grown:`,
    ...rows
      .slice(0, n)
      .map(
        (r) =>
          `    ${signed(r.growth).padStart(7)} MiB to ${r.rss.toFixed(1).padStart(6)} of ` +
          `${r.size.toFixed(1).padStart(7)} MiB  ${r.name}${old.has(key(r)) ? '' : ' (new)'}`,
      ),
  ].join('\n');
}

/**
 * The malloc variables the server started with (after a re-execution by nereid serve, what it set; glibc cuts
 * GLIBC_TUNABLES at its first ':' there).
 */
function mallocSetting(pid: number): string {
  const vars = readFileSync(`/proc/${pid}/environ`, 'utf8')
    .split('\0')
    .filter((v) => v.startsWith('MALLOC_') || v.startsWith('GLIBC_TUNABLES=') || v.startsWith('NEREID_MALLOC_'));
  if (vars.some((v) => v.startsWith('NEREID_MALLOC_TUNED=')))
    return `set by nereid serve: GLIBC_TUNABLES=${NEREID_TUNABLES}`;
  return vars.length === 0 ? 'glibc defaults' : vars.join(' ');
}

/**
 * The young generation's sizing options on the server's command line (after a re-execution by nereid serve, what it
 * added).
 */
function youngGenerationSetting(pid: number): string {
  const args = readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0');
  const opts = args.filter((a) => /^--(?:(?:max|min)[-_]semi[-_]space[-_]size|max[-_]heap[-_]size)/.test(a));
  const fromEnv = readFileSync(`/proc/${pid}/environ`, 'utf8')
    .split('\0')
    .find((v) => v.startsWith('NODE_OPTIONS='));
  return [...opts, ...(fromEnv === undefined ? [] : [fromEnv])].join(' ') || "V8's own sizing";
}

function signed(v: number): string {
  return (v >= 0 ? '+' : '') + v.toFixed(1);
}

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

interface Hostile {
  readonly kind: string;
  readonly path: string;
  readonly headers: Record<string, string>;
  readonly body: Buffer;
  /** Sent on a connection of its own, closed after the response. */
  readonly fresh?: boolean;
}

/** Not in the default mix; sent only when HOSTILE_KINDS names them. */
const EXTRA_KINDS = new Set(['small', 'new connection', 'valid']);

function hostileRequests(): Hostile[] {
  const infer = '/v2/models/simple/infer';
  const spaces = Buffer.alloc(96 * 1024 * 1024, 0x20);
  const bomb = gzipSync(spaces); // ~96 KiB that inflates past the 64 MiB limit
  // The same bomb with a trailer that claims 1,000 bytes, and a zlib one (no trailer): both must be inflated to the
  // limit to be refused.
  const liar = Buffer.from(bomb);
  liar.writeUInt32LE(1000, liar.byteLength - 4);
  const deflateBomb = deflateSync(spaces);
  const deep = Buffer.from(`{"inputs":${'['.repeat(200_000)}${']'.repeat(200_000)}}`);
  const bigHeader = 'x'.repeat(60 * 1024);
  const manyInputs = Buffer.from(
    JSON.stringify({
      inputs: Array.from({ length: 5000 }, (_, i) => ({ name: `IN${i}`, datatype: 'INT32', shape: [1], data: [i] })),
    }),
  );
  return [
    {
      kind: 'gzip bomb',
      path: infer,
      headers: { 'content-encoding': 'gzip', 'content-type': 'application/json' },
      body: bomb,
    },
    {
      kind: 'lying bomb',
      path: infer,
      headers: { 'content-encoding': 'gzip', 'content-type': 'application/json' },
      body: liar,
    },
    {
      kind: 'deflate bomb',
      path: infer,
      headers: { 'content-encoding': 'deflate', 'content-type': 'application/json' },
      body: deflateBomb,
    },
    { kind: 'deep JSON', path: infer, headers: { 'content-type': 'application/json' }, body: deep },
    { kind: 'huge header', path: infer, headers: { 'x-filler': bigHeader }, body: Buffer.from('{}') },
    { kind: 'broken JSON', path: infer, headers: {}, body: Buffer.from('{"inputs":[{"name":"INPUT0",'.repeat(2000)) },
    { kind: 'many inputs', path: infer, headers: {}, body: manyInputs },
    {
      kind: 'wrong type',
      path: infer,
      headers: {},
      body: Buffer.from('{"inputs":[{"name":"INPUT0","datatype":"INT32","shape":[1,16],"data":["a"]}]}'),
    },
    {
      kind: 'overflow',
      path: infer,
      headers: {},
      body: Buffer.from(`{"inputs":[{"name":"INPUT0","datatype":"FP64","shape":[1],"data":[1e309]}]}`),
    },
    {
      kind: 'bad binary',
      path: infer,
      headers: { 'inference-header-content-length': '99999999' },
      body: Buffer.from('{"inputs":[]}'),
    },
    { kind: 'small', path: infer, headers: {}, body: Buffer.from('{"inputs":[') },
    {
      kind: 'new connection',
      path: infer,
      headers: { connection: 'close' },
      body: Buffer.from('{"inputs":['),
      fresh: true,
    },
    { kind: 'valid', path: infer, headers: { 'content-type': 'application/json' }, body: validBody },
  ];
}

function send(
  port: number,
  agent: http.Agent,
  r: { path: string; headers: Record<string, string>; body: Buffer; fresh?: boolean },
): Promise<number> {
  return new Promise((resolve) => {
    const req = http.request(
      {
        host: '127.0.0.1',
        port,
        method: 'POST',
        path: r.path,
        agent: r.fresh === true ? false : agent,
        headers: { ...r.headers, 'content-length': String(r.body.byteLength) },
      },
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

/** Asks the probe in the server for one full collection and waits until it has run and a reading followed. */
async function probeCollection(probeFile: string): Promise<void> {
  writeFileSync(`${probeFile}.collect`, '');
  for (let i = 0; i < 100 && existsSync(`${probeFile}.collect`); i++) await sleep(100);
  await sleep(1500);
}

/** Closed loop at `concurrency` for `seconds`: the rate the server sustains for valid requests. */
async function capacity(
  port: number,
  agent: http.Agent,
  valid: Parameters<typeof send>[2],
  seconds: number,
): Promise<number> {
  const end = Date.now() + seconds * 1000;
  let done = 0;
  await Promise.all(
    Array.from({ length: CONCURRENCY }, async () => {
      while (Date.now() < end) {
        await send(port, agent, valid);
        done++;
      }
    }),
  );
  return done / seconds;
}

async function main(): Promise<void> {
  const repo = new TempRepositoryForBench();
  repo.model('simple', buildAddSubModel('INT32', 16).toBytes());
  const probeFile = path.join(repo.dir, 'memory.json');
  const server = await startNereid(repo.dir, [], {
    env: { NEREID_BENCH_MEMORY_FILE: probeFile },
    nodeArgs: ['--import', pathToFileURL(path.join(DIST, 'bench', 'memory-probe.js')).href, ...SERVER_NODE_ARGS],
  });
  const pid = server.proc.child.pid!;
  console.log(
    `server: Node ${process.versions.node}, malloc ${mallocSetting(pid)}, ` +
    `young generation ${youngGenerationSetting(pid)}`,
  );
  const agent = new http.Agent({ keepAlive: true, maxSockets: CONCURRENCY });
  const snapshot = (): void => {
    if (SERVER_NODE_ARGS.some((a) => a.startsWith('--heapsnapshot-signal'))) process.kill(pid, 'SIGUSR2');
  };
  try {
    const valid = { path: '/v2/models/simple/infer', headers: { 'content-type': 'application/json' }, body: validBody };
    const all = hostileRequests();
    const kinds =
      KINDS === undefined ? all.filter((k) => !EXTRA_KINDS.has(k.kind)) : all.filter((k) => KINDS.includes(k.kind));
    if (kinds.length === 0)
      throw new Error(`HOSTILE_KINDS names no known kind; known: ${all.map((k) => k.kind).join(', ')}`);
    console.log(describe('loaded', memory(pid, probeFile)));
    // Warm-up: valid requests, then the storm's mix a few times at concurrency 2, so what the
    // server allocates once (code, pools, the first of each path) is in the start.
    for (let i = 0; i < 200; i++) await send(server.http, agent, valid);
    const warm = Array.from({ length: WARMUP_ROUNDS }, () => kinds).flat();
    await Promise.all(
      [0, 1].map(async (lane) => {
        for (let i = lane; i < warm.length; i += 2) await send(server.http, agent, warm[i]!);
      }),
    );
    await sleep(START_QUIET_MS);
    await probeCollection(probeFile);
    const start = memory(pid, probeFile);
    const startMappings = process.env.HOSTILE_SMAPS === '1' ? mappings(pid) : [];
    console.log(describe(`start (warm-up ${warm.length})`, start));
    snapshot();

    const statuses = new Map<string, Map<number, number>>();
    let next = 0;
    let peak = start.rss;
    const peakTimer = setInterval(() => (peak = Math.max(peak, memory(pid, probeFile).rss)), 200);
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
          if ((i + 1) % 2000 === 0) console.log(describe(`  after ${i + 1}`, memory(pid, probeFile), start));
        }
      }),
    );
    clearInterval(peakTimer);
    const stormSecs = (Date.now() - t0) / 1000;
    console.log(
      `hostile storm: ${REQUESTS} requests (${kinds.map((k) => k.kind).join(', ')}), ` +
      `concurrency ${CONCURRENCY}, ${stormSecs.toFixed(1)} s`,
    );
    for (const [kind, m] of statuses)
      console.log(`  ${kind.padEnd(12)} ${[...m].map(([c, n]) => `${c}x${n}`).join(' ')}`);
    const afterStorm = memory(pid, probeFile);
    console.log(describe('after storm', afterStorm, start));
    console.log(`peak during storm      RSS ${peak.toFixed(1)} MiB`);
    for (const at of [2000, 5000]) {
      await sleep(at - (at === 2000 ? 0 : 2000));
      console.log(describe(`${at / 1000} s later`, memory(pid, probeFile), start));
    }
    await sleep(SETTLE_MS - 5000);
    const settled = memory(pid, probeFile);
    console.log(describe(`${SETTLE_MS / 1000} s later`, settled, start));
    if (process.env.HOSTILE_SMAPS === '1') {
      const now = mappings(pid);
      console.log(kindsGrowth(startMappings, now));
      console.log(mappingGrowth(startMappings, now));
    }
    await probeCollection(probeFile);
    console.log(describe('after a collection', memory(pid, probeFile), start));
    snapshot();
    const stillServes = await send(server.http, agent, valid);
    console.log(`valid request after    ${stillServes}`);
    const stormRatio = (settled.rss - start.rss) / start.rss;
    const stormBar = (): void =>
      console.log(
        `bar: storm  ${start.rss.toFixed(1)} -> ${settled.rss.toFixed(1)} MiB settled, ${signed(stormRatio * 100)} ` +
        `% (bar < ${STORM_BAR * 100} %): ${stormRatio < STORM_BAR ? 'met' : 'NOT met'}`,
      );
    if (SOAK_SECONDS <= 0) {
      stormBar();
      return;
    }

    // Soak: valid requests at a steady rate, open loop (a tick's requests go out whether or not the last tick's came
    // back).
    const measured = SOAK_RPS === undefined ? await capacity(server.http, agent, valid, 5) : undefined;
    const rps = SOAK_RPS ?? Math.max(10, Math.round(0.8 * measured!));
    if (measured !== undefined)
      console.log(`capacity (closed loop, concurrency ${CONCURRENCY}) ${measured.toFixed(0)} req/s; soak at 80 %`);
    await sleep(2000);
    const soakStart = memory(pid, probeFile);
    console.log(describe('soak start', soakStart, start));
    const soakEnd = Date.now() + SOAK_SECONDS * 1000;
    let sent = 0;
    let failed = 0;
    const inFlight = new Set<Promise<void>>();
    const samples: number[] = [soakStart.rss];
    let lastSample = Date.now();
    const perTick = rps / 10;
    let owed = 0;
    while (Date.now() < soakEnd) {
      const tick = Date.now();
      owed += perTick;
      for (; owed >= 1; owed--) {
        sent++;
        const p = send(server.http, agent, valid).then((c) => {
          if (c !== 200) failed++;
          inFlight.delete(p);
        });
        inFlight.add(p);
      }
      if (Date.now() - lastSample >= 30_000) {
        const m = memory(pid, probeFile);
        samples.push(m.rss);
        console.log(
          describe(`  soak ${Math.round((Date.now() - (soakEnd - SOAK_SECONDS * 1000)) / 1000)} s`, m, soakStart),
        );
        lastSample = Date.now();
      }
      const wait = 100 - (Date.now() - tick);
      if (wait > 0) await sleep(wait);
    }
    await Promise.all(inFlight);
    const soakFinal = memory(pid, probeFile);
    samples.push(soakFinal.rss);

    console.log(`soak: ${SOAK_SECONDS} s at ${rps} req/s, ${sent} sent, ${failed} not 200`);
    console.log(describe('soak end', soakFinal, soakStart));
    console.log(`RSS samples (MiB)      ${samples.map((s) => s.toFixed(0)).join(' ')}`);
    const soakRatio = (soakFinal.rss - soakStart.rss) / soakStart.rss;
    stormBar();
    console.log(
      `bar: soak   ${soakStart.rss.toFixed(1)} -> ${soakFinal.rss.toFixed(1)} MiB over ${SOAK_SECONDS} s, ` +
      `${signed(soakRatio * 100)} % (bar < ${SOAK_BAR * 100} %): ${soakRatio < SOAK_BAR ? 'met' : 'NOT met'}`,
    );
  } finally {
    agent.destroy();
    await server.proc.stop();
    repo.cleanup();
  }
}

await main();
