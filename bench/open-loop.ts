/**
 * An open-loop HTTP/1.1 load generator, run as its own process so that its
 * work never shares an event loop with the benchmark's bookkeeping:
 * requests leave on a clock (rate per second) whether or not earlier ones
 * were answered, over keep-alive connections opened as needed (up to a
 * bound), each carrying one request at a time. The request bytes are built
 * once; responses are parsed just enough (status, Content-Length,
 * Retry-After). Latency runs from the moment a request is written to the
 * last byte of its response, so the generator's own lag is reported apart
 * (how many requests left late, and the worst delay), not charged to the
 * server.
 *
 * Usage: node open-loop.js <config JSON>, where the config is
 *   { port, path, headers, bodyBase64, rate, seconds, maxConnections }.
 * Prints one JSON line: sent, ok, refused, retryAfter, otherErrors,
 * okP50us, okP99us, refusedP99us, late, maxLagUs, connections, seconds.
 */
import net from 'node:net';

interface Config {
  port: number;
  path: string;
  headers: Record<string, string>;
  bodyBase64: string;
  rate: number;
  seconds: number;
  maxConnections: number;
}

const config = JSON.parse(process.argv[2]!) as Config;
const body = Buffer.from(config.bodyBase64, 'base64');
const head =
  `POST ${config.path} HTTP/1.1\r\nHost: 127.0.0.1:${config.port}\r\nContent-Length: ${body.byteLength}\r\n` +
  Object.entries(config.headers)
    .map(([k, v]) => `${k}: ${v}\r\n`)
    .join('') +
  '\r\n';
const request = Buffer.concat([Buffer.from(head, 'latin1'), body]);

const okLatencies: number[] = [];
const refusedLatencies: number[] = [];
const counts = { sent: 0, ok: 0, refused: 0, retryAfter: 0, otherErrors: 0, late: 0 };
let maxLagUs = 0;
let outstanding = 0;
let opened = 0;
/** Requests due while every connection was busy, with their due time (ns). */
const backlog: bigint[] = [];

const HEADER_END = Buffer.from('\r\n\r\n');

class Connection {
  private readonly socket: net.Socket;
  private ready = false;
  private busy = false;
  private sentNs = 0n;
  private pending: Buffer | undefined;

  constructor() {
    opened++;
    this.socket = net.connect({ port: config.port, host: '127.0.0.1', noDelay: true });
    this.socket.on('connect', () => {
      this.ready = true;
      idle.push(this);
      pump();
    });
    this.socket.on('data', (chunk: Buffer) => this.onData(chunk));
    this.socket.on('error', () => this.lost());
    this.socket.on('close', () => this.lost());
  }

  send(): void {
    this.busy = true;
    outstanding++;
    this.sentNs = process.hrtime.bigint();
    this.socket.write(request);
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
    const us = Number(process.hrtime.bigint() - this.sentNs) / 1000;
    outstanding--;
    this.busy = false;
    if (status === 200) {
      counts.ok++;
      okLatencies.push(us);
    } else if (status === 503) {
      counts.refused++;
      refusedLatencies.push(us);
      if (retryAfter) counts.retryAfter++;
    } else {
      counts.otherErrors++;
    }
    if (sending) {
      idle.push(this);
      pump();
    }
  }

  private lost(): void {
    if (!this.ready) return;
    this.ready = false;
    if (this.busy) {
      this.busy = false;
      outstanding--;
      counts.otherErrors++;
    }
    const i = idle.indexOf(this);
    if (i !== -1) idle.splice(i, 1);
    opened--;
  }

  close(): void {
    this.socket.destroy();
  }
}

const idle: Connection[] = [];
const all: Connection[] = [];
let sending = true;

function sendOne(dueNs: bigint): void {
  const c = idle.pop();
  if (c === undefined) {
    backlog.push(dueNs);
    if (opened < config.maxConnections) all.push(new Connection());
    return;
  }
  const lagUs = Number(process.hrtime.bigint() - dueNs) / 1000;
  if (lagUs > 2000) counts.late++;
  if (lagUs > maxLagUs) maxLagUs = lagUs;
  counts.sent++;
  c.send();
}

/** Sends what waits for a connection first. */
function pump(): void {
  while (backlog.length > 0 && idle.length > 0) {
    const due = backlog.shift()!;
    sendOne(due);
  }
}

const t0 = process.hrtime.bigint();
const periodNs = 1e9 / config.rate;
const endNs = t0 + BigInt(Math.round(config.seconds * 1e9));
let scheduled = 0;
await new Promise<void>((resolve) => {
  const tick = (): void => {
    const now = process.hrtime.bigint();
    const limit = now < endNs ? now : endNs;
    while (t0 + BigInt(Math.round(scheduled * periodNs)) <= limit) {
      sendOne(t0 + BigInt(Math.round(scheduled * periodNs)));
      scheduled++;
    }
    if (now >= endNs) resolve();
    else setTimeout(tick, 1);
  };
  tick();
});
sending = false;
const seconds = Number(process.hrtime.bigint() - t0) / 1e9;
const unsent = backlog.length;
backlog.length = 0;
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
    scheduled,
    unsent,
    okP50us: percentile(okLatencies, 50),
    okP99us: percentile(okLatencies, 99),
    refusedP99us: percentile(refusedLatencies, 99),
    maxLagUs,
    connections: all.length,
    seconds,
  })}\n`,
);
