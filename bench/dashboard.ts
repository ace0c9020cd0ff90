/**
 * `npm run bench -- dashboard` (bench/dashboard.ts): what an open dashboard
 * page costs the server. One `nereid serve` with the tiny MLP; wrk at
 * concurrency 32 with binary tensors, the page closed and open (real
 * Chromium through playwright-core, the page showing the model under load,
 * polling as it does). Each round gives each setting BENCH_SECONDS, in
 * slices of one second that take turns (closed, open, open, closed, ...), so a
 * drift in the machine's load reaches both alike; the page is opened afresh
 * for each open slice and settles a second before counting (the server rests
 * a second before a closed slice too). Per setting: the
 * median over rounds of requests/s and of the server's CPU per request; per
 * round the ratio open/closed of both. Also printed: the browser's CPU while
 * the page is open, and the state requests the page made and their size.
 *
 * Environment: BENCH_SECONDS (per setting and round, default 3), BENCH_ROUNDS
 * (default 4), BENCH_CONCURRENCY (default 32), NEREID_CHROMIUM (default
 * /usr/bin/chromium).
 */
import { readdirSync, readFileSync } from 'node:fs';
import { type Browser, type Page, chromium } from 'playwright-core';
import { binaryBody } from './bodies.js';
import { buildBenchModels } from './models.js';
import { cpuSeconds, startNereid } from './processes.js';
import { runWrk } from './wrk.js';

const SECONDS = Number(process.env.BENCH_SECONDS ?? 3);
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 4);
const CONCURRENCY = Number(process.env.BENCH_CONCURRENCY ?? 32);
const CHROMIUM = process.env.NEREID_CHROMIUM ?? '/usr/bin/chromium';

const fmt = (n: number, digits = 0) =>
  n.toLocaleString('en-US', { maximumFractionDigits: digits, minimumFractionDigits: digits });
const median = (xs: readonly number[]): number => {
  const s = [...xs].sort((a, b) => a - b);
  const m = s.length >> 1;
  return s.length % 2 ? s[m]! : (s[m - 1]! + s[m]!) / 2;
};

/** CPU seconds of every live process below `root` whose command is not excluded (the browser's, here). */
function treeCpuSeconds(root: number, exclude: ReadonlySet<number>): number {
  const parents = new Map<number, number>();
  for (const name of readdirSync('/proc')) {
    const pid = Number(name);
    if (!Number.isInteger(pid)) continue;
    try {
      const text = readFileSync(`/proc/${pid}/stat`, 'utf8');
      parents.set(pid, Number(text.slice(text.lastIndexOf(')') + 2).split(' ')[1]));
    } catch {
      // gone meanwhile
    }
  }
  const below = (pid: number): boolean => {
    for (let p = parents.get(pid); p !== undefined && p > 1; p = parents.get(p)) {
      if (exclude.has(p)) return false;
      if (p === root) return true;
    }
    return false;
  };
  let total = 0;
  for (const pid of parents.keys()) {
    if (exclude.has(pid) || !below(pid)) continue;
    try {
      if (readFileSync(`/proc/${pid}/comm`, 'utf8').trim() === 'wrk') continue;
      total += cpuSeconds(pid);
    } catch {
      // gone meanwhile
    }
  }
  return total;
}

interface Point {
  rps: number;
  cpuUsPerRequest: number;
  failed: number;
  browserCpu?: number;
  stateRequests?: number;
  stateBytes?: number;
}

/** A setting's slices of one round, added up. */
interface Tally {
  requests: number;
  seconds: number;
  serverCpu: number;
  failed: number;
  browserCpu: number;
  stateRequests: number;
  stateBytes: number;
}

const newTally = (): Tally =>
  ({ requests: 0, seconds: 0, serverCpu: 0, failed: 0, browserCpu: 0, stateRequests: 0, stateBytes: 0 });

function pointOf(t: Tally, open: boolean): Point {
  const p: Point = {
    rps: t.requests / t.seconds,
    cpuUsPerRequest: (t.serverCpu * 1e6) / Math.max(1, t.requests),
    failed: t.failed,
  };
  if (open) {
    p.browserCpu = t.browserCpu / t.seconds;
    p.stateRequests = t.stateRequests / t.seconds;
    p.stateBytes = t.stateRequests > 0 ? t.stateBytes / t.stateRequests : 0;
  }
  return p;
}

const tiny = (await buildBenchModels()).find((m) => m.plainName === 'mlp_tiny')!;
const model = tiny.plainName;
const nereid = await startNereid(tiny.repository, []);
const serverPid = nereid.proc.child.pid!;
const body = binaryBody(tiny.inputName, tiny.outputName, tiny.inputSize);
const url = `http://127.0.0.1:${nereid.http}/v2/models/${model}/infer`;
let browser: Browser | undefined;

/** Opens the dashboard showing the model under load; counts its state requests and their bytes. */
async function openDashboard(b: Browser): Promise<{ page: Page; counts: { requests: number; bytes: number } }> {
  const page = await b.newPage({ viewport: { width: 1280, height: 900 } });
  const counts = { requests: 0, bytes: 0 };
  page.on('response', (r) => {
    if (!r.url().includes('/dashboard/api/state')) return;
    counts.requests++;
    r.body().then((x) => (counts.bytes += x.byteLength), () => {});
  });
  page.on('pageerror', (e) => process.stderr.write(`dashboard page error: ${String(e)}\n`));
  await page.goto(`http://127.0.0.1:${nereid.http}/dashboard`);
  const pick = page.locator(`tr[data-model="${model}"] button`).first();
  await pick.waitFor({ timeout: 10_000 });
  await pick.click();
  await page.locator('#chart-rps').waitFor({ timeout: 10_000 });
  return { page, counts };
}

/** One slice of `seconds` with the page closed or open, added to `t`. */
async function slice(open: boolean, seconds: number, t: Tally): Promise<void> {
  let opened: Awaited<ReturnType<typeof openDashboard>> | undefined;
  if (open) opened = await openDashboard(browser!);
  // The page settles into its polling before counting; the server rests as long before a closed slice.
  await new Promise((r) => setTimeout(r, 1000));
  if (opened !== undefined) {
    opened.counts.requests = 0;
    opened.counts.bytes = 0;
  }
  const browserCpu0 = open ? treeCpuSeconds(process.pid, new Set([serverPid])) : 0;
  const cpu0 = cpuSeconds(serverPid);
  const w = await runWrk(url, body, CONCURRENCY, seconds);
  t.serverCpu += cpuSeconds(serverPid) - cpu0;
  t.requests += w.requests;
  t.seconds += w.seconds;
  t.failed += w.errors + w.non2xx;
  if (opened !== undefined) {
    t.browserCpu += treeCpuSeconds(process.pid, new Set([serverPid])) - browserCpu0;
    t.stateRequests += opened.counts.requests;
    t.stateBytes += opened.counts.bytes;
    await opened.page.close();
  }
}

const closed: Point[] = [];
const open: Point[] = [];
try {
  browser = await chromium.launch({ executablePath: CHROMIUM, args: ['--headless', '--no-sandbox', '--disable-gpu'] });
  // Warm-up: the model, and the page's first load.
  await runWrk(url, body, CONCURRENCY, 1);
  await (await openDashboard(browser)).page.close();
  for (let round = 0; round < ROUNDS; round++) {
    const c = newTally();
    const o = newTally();
    const slices = Math.max(1, Math.round(SECONDS));
    for (let i = 0; i < slices; i++) {
      // closed, open, open, closed, ...: neither setting always goes first.
      if (i % 2 === 0) {
        await slice(false, 1, c);
        await slice(true, 1, o);
      } else {
        await slice(true, 1, o);
        await slice(false, 1, c);
      }
    }
    closed.push(pointOf(c, false));
    open.push(pointOf(o, true));
  }
} finally {
  await browser?.close();
  await nereid.proc.stop();
}

const ratios = open.map((p, i) => p.rps / closed[i]!.rps);
const cpuRatios = open.map((p, i) => p.cpuUsPerRequest / closed[i]!.cpuUsPerRequest);
const rows = [
  ['page closed', closed],
  ['page open', open],
].map(([name, ps]) => {
  const points = ps as Point[];
  return [
    name as string,
    fmt(median(points.map((p) => p.rps))),
    fmt(median(points.map((p) => p.cpuUsPerRequest)), 1),
    String(points.reduce((n, p) => n + p.failed, 0)),
    points.map((p) => fmt(p.rps)).join(' '),
  ];
});
const head = ['setting', 'req/s', 'server CPU µs/req', 'failed', 'rounds req/s'];
const widths = head.map((h, i) => Math.max(h.length, ...rows.map((r) => r[i]!.length)));
const line = (cells: string[]) => cells.map((c, i) => c.padStart(widths[i]!)).join('  ');
process.stdout.write(
  `\ndashboard page open vs closed: ${tiny.label}, binary, concurrency ${CONCURRENCY}, ` +
    `${SECONDS}s per setting and round in 1s slices taking turns, ${ROUNDS} rounds (medians)\n` +
    `${line(head)}\n${widths.map((w) => '-'.repeat(w)).join('  ')}\n${rows.map(line).join('\n')}\n` +
    `open/closed requests/s: median ${fmt(median(ratios), 3)}x (rounds ${ratios.map((r) => fmt(r, 3)).join(' ')})\n` +
    `open/closed server CPU per request: median ${fmt(median(cpuRatios), 3)}x ` +
    `(rounds ${cpuRatios.map((r) => fmt(r, 3)).join(' ')})\n` +
    `with the page open: browser CPU ${fmt(100 * median(open.map((p) => p.browserCpu!)), 1)} % of a core, ` +
    `${fmt(median(open.map((p) => p.stateRequests!)), 2)} state requests/s of ` +
    `${fmt(median(open.map((p) => p.stateBytes!)))} bytes\n`,
);
