/**
 * An open-loop HTTP/1.1 load generator, run as its own process so that its
 * work never shares an event loop with the benchmark's bookkeeping:
 * requests leave on a clock (rate per second) whether or not earlier ones
 * were answered, over keep-alive connections, each carrying one request at a
 * time. The connections are opened, and each is used once (a GET of
 * `warmPath`), before the clock starts: a client storm of new connections in
 * the middle of the measurement would charge the kernel's accept queue to
 * the first request on each of them (Node accepts one connection per
 * event-loop turn, so under load hundreds of connections wait there for
 * seconds), and that is not what an overload bar about queued requests
 * means. Should every connection be busy, more are opened (up to a bound)
 * and counted apart. The request bytes are built once; responses are parsed
 * just enough (status, Content-Length, Retry-After). Latency runs from the
 * moment a request is written to the last byte of its response, so the
 * generator's own lag is reported apart (how many requests left late, and
 * the worst delay), not charged to the server; the accepted requests' p99
 * counted from the instant each was due is printed beside it (what a client
 * with no bound on its connections would have seen).
 *
 * With `closed` set, the same generator runs a closed loop instead: that many
 * connections, each sending its next request as soon as its last was
 * answered (as wrk does), so a capacity and the overload beyond it are
 * measured by the same client, with the same cost per request on the same
 * cores.
 *
 * With `poisson` set, the open loop's requests leave at exponentially
 * distributed gaps (a Poisson process at `rate`, seeded) instead of on an
 * even clock, and the generator polls the clock on every event-loop turn
 * while the next one is due within a millisecond (so sub-millisecond gaps
 * are kept, at the cost of a busy generator).
 *
 * With `excessPort` and `excessShare` set (an open loop on an even clock),
 * that share of the due requests goes to another server instead (one that
 * refuses everything), on as many connections of its own: the generator does
 * the work of the whole load while the server gets only the rest; the
 * control of an overload point (bench/overload-control.ts). Those requests
 * are counted apart (excessSent, excessRefused, excessDropped: due while
 * every connection to that server was busy).
 *
 * Usage: node open-loop.js <config JSON>, where the config is
 *   { port, path, headers, bodyBase64, rate, seconds, connections, maxConnections, warmPath, closed?, poisson?,
 *   excessPort?, excessShare? }.
 * Prints one JSON line: sent, ok, okInWindow (answered before the clock stopped), refused, retryAfter, otherErrors,
 * okP50us, okP99us, okP99FromDueUs, okMeanUs, refusedP99us, late, maxLagUs, connections, openedDuringRun,
 * warmFailed (connections whose warm-up failed), seconds, cpuSeconds (the generator's own CPU over the run).
 */
import net from 'node:net';
import { seededRandom } from '../test/helpers/random.js';

interface Config {
  port: number;
  path: string;
  headers: Record<string, string>;
  bodyBase64: string;
  rate: number;
  seconds: number;
  /** Opened and warmed before the clock starts. */
  connections: number;
  maxConnections: number;
  /** A cheap GET that warms each connection (e.g. /v2/health/live). */
  warmPath: string;
  /** Closed loop: every one of `connections` sends its next request when the last is answered; `rate` is unused. */
  closed?: boolean;
  /** Open loop: exponential gaps (Poisson arrivals) rather than an even clock. */
  poisson?: boolean;
  /** Even-clock open loop: `excessShare` of the due requests go to this port instead, on connections of its own. */
  excessPort?: number;
  excessShare?: number;
}

const config = JSON.parse(process.argv[2]!) as Config;
const body = Buffer.from(config.bodyBase64, 'base64');
const requestTo = (port: number): Buffer => {
  const head =
    `POST ${config.path} HTTP/1.1\r\nHost: 127.0.0.1:${port}\r\nContent-Length: ${body.byteLength}\r\n` +
    Object.entries(config.headers)
      .map(([k, v]) => `${k}: ${v}\r\n`)
      .join('') +
    '\r\n';
  return Buffer.concat([Buffer.from(head, 'latin1'), body]);
};
const warmTo = (port: number): Buffer =>
  Buffer.from(`GET ${config.warmPath} HTTP/1.1\r\nHost: 127.0.0.1:${port}\r\n\r\n`, 'latin1');
const excessShare = config.excessPort === undefined ? 0 : (config.excessShare ?? 0);
const excessPort = config.excessPort ?? config.port;
const request = requestTo(config.port);
const warmRequest = warmTo(config.port);
const excessRequest = requestTo(excessPort);
const excessWarmRequest = warmTo(excessPort);
const excessCounts = { excessSent: 0, excessRefused: 0, excessDropped: 0 };

const okLatencies: number[] = [];
/** The same, from the instant each request was due (its lag in the generator included). */
const okFromDue: number[] = [];
const refusedLatencies: number[] = [];
const counts = { sent: 0, ok: 0, okInWindow: 0, refused: 0, retryAfter: 0, otherErrors: 0, late: 0 };
let maxLagUs = 0;
/** Requests due so far (open loop), or sent (closed loop). */
let scheduled = 0;
let outstanding = 0;
let opened = 0;
/** Requests due while every connection was busy, with their due time (ns), first at `backlogHead`. */
const backlog: bigint[] = [];
let backlogHead = 0;
let warming = true;
let warmed = 0;
let openedDuringRun = 0;

const HEADER_END = Buffer.from('\r\n\r\n');

class Connection {
  private readonly socket: net.Socket;
  private ready = false;
  private busy = false;
  private sentNs = 0n;
  private dueNs = 0n;
  private pending: Buffer | undefined;

  /** `excess`: a connection to `excessPort`. */
  constructor(private readonly excess = false) {
    if (!excess) opened++;
    this.socket = net.connect({ port: excess ? excessPort : config.port, host: '127.0.0.1', noDelay: true });
    this.socket.on('connect', () => {
      this.ready = true;
      if (warming) {
        this.warm();
        return;
      }
      this.pool.push(this);
      pump();
    });
    this.socket.on('data', (chunk: Buffer) => this.onData(chunk));
    this.socket.on('error', () => this.lost());
    this.socket.on('close', () => this.lost());
  }

  private get pool(): Connection[] {
    return this.excess ? excessIdle : idle;
  }

  send(dueNs: bigint): void {
    this.busy = true;
    outstanding++;
    this.dueNs = dueNs;
    this.sentNs = process.hrtime.bigint();
    this.socket.write(this.excess ? excessRequest : request);
  }

  warm(): void {
    this.busy = true;
    this.socket.write(this.excess ? excessWarmRequest : warmRequest);
  }

  private onData(chunk: Buffer): void {
    let buf = this.pending === undefined ? chunk : Buffer.concat([this.pending, chunk]);
    for (;;) {
      const end = buf.indexOf(HEADER_END);
      if (end === -1) break;
      const headText = buf.toString('latin1', 0, end).toLowerCase();
      const status = Number(headText.slice(9, 12));
      const m = /\r\ncontent-length: *(\d+)/.exec(headText);
      const length = m === null ? 0 : Number(m[1]);
      if (buf.byteLength < end + 4 + length) break;
      buf = buf.subarray(end + 4 + length);
      this.complete(status, headText.includes('\r\nretry-after:'));
    }
    this.pending = buf.byteLength === 0 ? undefined : buf;
  }

  private complete(status: number, retryAfter: boolean): void {
    if (warming) {
      this.busy = false;
      if (status === 200) warmed++;
      else counts.otherErrors++;
      this.pool.push(this);
      return;
    }
    const now = process.hrtime.bigint();
    const us = Number(now - this.sentNs) / 1000;
    outstanding--;
    this.busy = false;
    if (this.excess) {
      if (status === 503) excessCounts.excessRefused++;
      else counts.otherErrors++;
      if (sending) excessIdle.push(this);
      return;
    }
    if (status === 200) {
      counts.ok++;
      if (sending) counts.okInWindow++;
      okLatencies.push(us);
      okFromDue.push(Number(now - this.dueNs) / 1000);
    } else if (status === 503) {
      counts.refused++;
      refusedLatencies.push(us);
      if (retryAfter) counts.retryAfter++;
    } else {
      counts.otherErrors++;
    }
    if (!sending) return;
    if (config.closed === true) {
      sendNext(this, now);
      return;
    }
    idle.push(this);
    pump();
  }

  private lost(): void {
    if (!this.ready) return;
    this.ready = false;
    if (this.busy) {
      this.busy = false;
      outstanding--;
      counts.otherErrors++;
    }
    const i = this.pool.indexOf(this);
    if (i !== -1) this.pool.splice(i, 1);
    if (!this.excess) opened--;
  }

  close(): void {
    this.socket.destroy();
  }
}

const idle: Connection[] = [];
const excessIdle: Connection[] = [];
const all: Connection[] = [];
let sending = true;

function sendOne(dueNs: bigint): void {
  const c = idle.pop();
  if (c === undefined) {
    backlog.push(dueNs);
    if (opened < config.maxConnections) {
      all.push(new Connection());
      openedDuringRun++;
    }
    return;
  }
  const lagUs = Number(process.hrtime.bigint() - dueNs) / 1000;
  if (lagUs > 2000) counts.late++;
  if (lagUs > maxLagUs) maxLagUs = lagUs;
  counts.sent++;
  c.send(dueNs);
}

/** An even clock's due request `index`: to the server, or, for its share, to `excessPort`. */
function dispatch(dueNs: bigint, index: number): void {
  if (excessShare === 0 || Math.floor((index + 1) * excessShare) === Math.floor(index * excessShare)) {
    sendOne(dueNs);
    return;
  }
  const c = excessIdle.pop();
  if (c === undefined) {
    excessCounts.excessDropped++;
    return;
  }
  excessCounts.excessSent++;
  c.send(dueNs);
}

/** Closed loop: the connection that was just answered sends again at once. */
function sendNext(c: Connection, now: bigint): void {
  counts.sent++;
  scheduled++;
  c.send(now);
}

/** Sends what waits for a connection first. */
function pump(): void {
  while (backlogHead < backlog.length && idle.length > 0) sendOne(backlog[backlogHead++]!);
  if (backlogHead === backlog.length) {
    backlog.length = 0;
    backlogHead = 0;
  }
}

for (let i = 0; i < config.connections; i++) all.push(new Connection());
const excessConnections = excessShare > 0 ? config.connections : 0;
for (let i = 0; i < excessConnections; i++) all.push(new Connection(true));
const toWarm = config.connections + excessConnections;
const warmEnd = Date.now() + 30_000;
while (warmed + counts.otherErrors < toWarm && Date.now() < warmEnd) await new Promise((r) => setTimeout(r, 5));
// A handful lost while a thousand connect at once (an accept queue overflowing) leaves the rest to measure with; the
// count goes out with the figures. More than 1 % lost is a setup that cannot give the offered rate.
const warmFailed = toWarm - warmed;
if (warmFailed > toWarm / 100) throw new Error(`only ${warmed} of ${toWarm} connections warmed up`);
warming = false;
counts.otherErrors = 0;
const cpu0 = process.cpuUsage();
const t0 = process.hrtime.bigint();
const periodNs = 1e9 / config.rate;
const endNs = t0 + BigInt(Math.round(config.seconds * 1e9));
if (config.closed === true) {
  for (const c of idle.splice(0)) sendNext(c, process.hrtime.bigint());
  await new Promise((r) => setTimeout(r, config.seconds * 1000));
} else if (config.poisson === true) await new Promise<void>((resolve) => {
  // A fixed seed: every variant of a comparison sees the same arrival pattern.
  const random = seededRandom(0x2545f491);
  const meanGapNs = 1e9 / config.rate;
  let nextDue = t0 + BigInt(Math.round(-Math.log(1 - random()) * meanGapNs));
  const tick = (): void => {
    const now = process.hrtime.bigint();
    const limit = now < endNs ? now : endNs;
    while (nextDue <= limit) {
      sendOne(nextDue);
      scheduled++;
      nextDue += BigInt(Math.round(-Math.log(1 - random()) * meanGapNs));
    }
    if (now >= endNs) resolve();
    else if (nextDue - now < 1_500_000n) setImmediate(tick);
    else setTimeout(tick, 1);
  };
  tick();
});
else await new Promise<void>((resolve) => {
  const tick = (): void => {
    const now = process.hrtime.bigint();
    const limit = now < endNs ? now : endNs;
    while (t0 + BigInt(Math.round(scheduled * periodNs)) <= limit) {
      dispatch(t0 + BigInt(Math.round(scheduled * periodNs)), scheduled);
      scheduled++;
    }
    if (now >= endNs) resolve();
    else setTimeout(tick, 1);
  };
  tick();
});
sending = false;
const seconds = Number(process.hrtime.bigint() - t0) / 1e9;
const unsent = backlog.length - backlogHead;
backlog.length = 0;
backlogHead = 0;
const cpu = process.cpuUsage(cpu0);
const drainEnd = Date.now() + 15_000;
while (outstanding > 0 && Date.now() < drainEnd) await new Promise((r) => setTimeout(r, 5));
for (const c of all) c.close();

function percentile(xs: number[], p: number): number {
  if (xs.length === 0) return NaN;
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor((p / 100) * s.length))]!;
}
process.stdout.write(
  `${JSON.stringify({
    ...counts,
    ...excessCounts,
    scheduled,
    unsent,
    okP50us: percentile(okLatencies, 50),
    okP99us: percentile(okLatencies, 99),
    okP99FromDueUs: percentile(okFromDue, 99),
    okMeanUs: okLatencies.length === 0 ? NaN : okLatencies.reduce((a, b) => a + b, 0) / okLatencies.length,
    refusedP99us: percentile(refusedLatencies, 99),
    maxLagUs,
    connections: all.length,
    openedDuringRun,
    warmFailed,
    seconds,
    cpuSeconds: (cpu.user + cpu.system) / 1e6,
  })}\n`,
);
