/**
 * Inline execution against the session thread and the naive wrapper, over
 * HTTP binary: the same server binary started twice (inline_execution auto,
 * and off: every run on the session thread), and the naive node:http +
 * onnxruntime-node wrapper, driven in turns (every point of a round on each
 * server before the next round), so a busy machine slows all three alike.
 * Prints the median of the rounds: requests/s, p50, and the server's CPU
 * (user + system time over wall time, in % of one core); beside them the
 * median and range of each round's own ratio to naive (both measured in the
 * same round, so a round slowed by the machine slows both: steadier than the
 * ratio of the medians on a shared machine).
 *
 * Usage: node dist/bench/inline.js
 * Environment: BENCH_SECONDS (per point, default 3), BENCH_ROUNDS (default 3),
 * BENCH_MODELS (e.g. "tiny"), BENCH_POINTS (e.g. "u1,b1,u8,b8,u32,b32": u the
 * default scheduler, b dynamic batching, then the concurrency; default
 * u1,u8,b8,b32), BENCH_BASELINE (the dist folder of another build, e.g. one
 * of the previous commit: its server joins the turns as "baseline", with
 * inline_execution auto, so a change is measured against what it replaces in
 * the same run).
 */
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import { binaryBody } from './bodies.js';
import { buildBenchModels } from './models.js';
import { type Proc, startNaive, startNereid } from './processes.js';
import { runWrk } from './wrk.js';

const SECONDS = Number(process.env.BENCH_SECONDS ?? 3);
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 3);
const onlyModels = process.env.BENCH_MODELS?.split(',');

/** The points measured per model: which variant, at which concurrency. */
const POINTS: ReadonlyArray<{ batched: boolean; c: number }> = (process.env.BENCH_POINTS ?? 'u1,u8,b8,b32')
  .split(',')
  .map((p) => {
    const m = /^([ub])(\d+)$/.exec(p.trim());
    if (!m) throw new Error(`BENCH_POINTS: '${p}' is not u<concurrency> or b<concurrency>`);
    return { batched: m[1] === 'b', c: Number(m[2]) };
  });
/** Another build's dist folder, whose server is measured in the same turns. */
const BASELINE = process.env.BENCH_BASELINE;
const startBaseline: typeof startNereid | undefined = BASELINE
  ? (
      (await import(pathToFileURL(path.join(path.resolve(BASELINE), 'bench', 'processes.js')).href)) as {
        startNereid: typeof startNereid;
      }
    ).startNereid
  : undefined;

/** CPU seconds (user + system) a process used so far, from /proc. */
function cpuSeconds(pid: number): number {
  const fields = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]!.split(' ');
  return (Number(fields[11]) + Number(fields[12])) / 100;
}

/** The 1, 5 and 15 minute load averages, as /proc/loadavg gives them. */
const loadAverage = (): string => readFileSync('/proc/loadavg', 'utf8').split(' ').slice(0, 3).join(' ');
const median = (xs: number[]): number => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
const fmt = (n: number, d = 0): string =>
  n.toLocaleString('en-US', { maximumFractionDigits: d, minimumFractionDigits: d });

/** The median of the per-round ratios a[r] / b[r], and their range. */
const perRound = (a: number[], b: number[]): string => {
  const r = a.map((v, i) => v / b[i]!).sort((x, y) => x - y);
  return `${fmt(median(r), 2)} (${fmt(r[0]!, 2)}-${fmt(r[r.length - 1]!, 2)})`;
};

interface Sample {
  rps: number[];
  p50: number[];
  cpu: number[];
}

const selected = (m: { plainName: string }) => !onlyModels || onlyModels.some((o) => m.plainName.includes(o));
for (const model of (await buildBenchModels()).filter(selected)) {
  const auto = await startNereid(model.repository, []);
  const off = await startNereid(model.repository, ['--backend-config=onnxruntime,inline_execution=off']);
  const baseline = startBaseline ? await startBaseline(model.repository, []) : undefined;
  const naive = await startNaive(model.onnxFile);
  const servers: Array<{ label: string; proc: Proc; url: (batched: boolean) => string }> = [
    ...(baseline
      ? [
          {
            label: 'baseline',
            proc: baseline.proc,
            url: (b: boolean) =>
              `http://127.0.0.1:${baseline.http}/v2/models/${b ? model.batchedName : model.plainName}/infer`,
          },
        ]
      : []),
    {
      label: 'inline auto',
      proc: auto.proc,
      url: (b) => `http://127.0.0.1:${auto.http}/v2/models/${b ? model.batchedName : model.plainName}/infer`,
    },
    {
      label: 'thread (off)',
      proc: off.proc,
      url: (b) => `http://127.0.0.1:${off.http}/v2/models/${b ? model.batchedName : model.plainName}/infer`,
    },
    { label: 'naive', proc: naive.proc, url: () => `http://127.0.0.1:${naive.port}/` },
  ];
  const body = binaryBody(model.inputName, model.outputName, model.inputSize);
  const samples = new Map<string, Sample>();
  let errors = 0;
  const loads = [loadAverage()];
  try {
    // Warm-up: the first runs are timed on the threads before any goes inline.
    for (const s of servers) for (const b of [false, true]) await runWrk(s.url(b), body, 4, 1);
    for (let r = 0; r < ROUNDS; r++) {
      for (const p of POINTS) {
        // Every other round in the reverse order, so no server always follows the same one.
        for (const s of r % 2 === 0 ? servers : [...servers].reverse()) {
          const pid = s.proc.child.pid!;
          const cpu0 = cpuSeconds(pid);
          const t0 = performance.now();
          const w = await runWrk(s.url(p.batched), body, p.c, SECONDS);
          const cpu = ((cpuSeconds(pid) - cpu0) / ((performance.now() - t0) / 1000)) * 100;
          errors += w.errors + w.non2xx;
          const key = `${p.batched}|${p.c}|${s.label}`;
          const x = samples.get(key) ?? { rps: [], p50: [], cpu: [] };
          x.rps.push(w.requestsPerSec);
          x.p50.push(w.p50us);
          x.cpu.push(cpu);
          samples.set(key, x);
        }
      }
    }
    loads.push(loadAverage());
  } finally {
    for (const s of servers) await s.proc.stop();
  }
  const header = [
    'model',
    'conc',
    'server',
    'req/s',
    'p50us',
    'cpu%',
    'x naive',
    'Δp50us',
    'x naive per round',
    'rounds req/s',
  ];
  const rows: string[][] = [];
  for (const p of POINTS) {
    const nv = samples.get(`${p.batched}|${p.c}|naive`)!;
    for (const s of servers) {
      const x = samples.get(`${p.batched}|${p.c}|${s.label}`)!;
      rows.push([
        s.label === 'naive' ? 'naive' : p.batched ? model.batchedName : model.plainName,
        String(p.c),
        s.label,
        fmt(median(x.rps)),
        fmt(median(x.p50)),
        fmt(median(x.cpu)),
        fmt(median(x.rps) / median(nv.rps), 2),
        fmt(median(x.p50) - median(nv.p50)),
        perRound(x.rps, nv.rps),
        x.rps.map((v) => fmt(v)).join(' / '),
      ]);
    }
  }
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => r[i]!.length)));
  const line = (cells: string[]): string => cells.map((c, i) => c.padStart(widths[i]!)).join('  ');
  process.stdout.write(
    `\n${model.label}: inline execution vs the session thread vs naive, HTTP binary, wrk -t1, median ` +
    `of ${ROUNDS} rounds of ${SECONDS}s, errors ${errors}, load average ${loads.join(' -> ')}\n`,
  );
  process.stdout.write(`${line(header)}\n${widths.map((w) => '-'.repeat(w)).join('  ')}\n`);
  for (const r of rows) process.stdout.write(`${line(r)}\n`);
}
