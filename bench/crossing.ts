/**
 * `node dist/bench/crossing.js` (section `crossing` of bench/run.ts): how a frontend thread's request and its
 * answer cross to the main thread and back, two ways in the same run, alternated, medians of BENCH_ROUNDS:
 * - postMessage: the request as an object with its tensor in a transferred ArrayBuffer (what the threads do), the
 *   answer the same way;
 * - ring: a single-producer single-consumer ring in a SharedArrayBuffer each way, the header as JSON bytes in the
 *   ring and the tensor in a shared slab (offset and length in the header), the sleeping side woken with
 *   Atomics.notify and waiting with Atomics.waitAsync (no thread ever blocks).
 * Both copy the tensor once on the way in (as a body is assembled) and once on the way out (as the outputs are
 * packed); neither copies while crossing. Printed: the round-trip p50 one at a time, and with CROSSING_DEPTH
 * (default 32) in flight the messages per second and the process's CPU (all threads) per round trip.
 * Environment: BENCH_SECONDS (per point, default 2), BENCH_ROUNDS (default 3), CROSSING_BYTES (default
 * "64,4096,65536").
 */
import { MessageChannel, type MessagePort, Worker } from 'node:worker_threads';

const SECONDS = Number(process.env.BENCH_SECONDS ?? 2);
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 3);
const DEPTH = Number(process.env.CROSSING_DEPTH ?? 32);
const SIZES = (process.env.CROSSING_BYTES ?? '64,4096,65536').split(',').map(Number);
/** Bytes of one ring's message area; the slabs hold DEPTH slots of the largest tensor. */
const RING_BYTES = 1 << 20;

/**
 * Shared by both sides (the worker gets it as source): a ring of length-prefixed messages. Control words: 0 the
 * write position, 1 the read position, 2 set while the reader sleeps. Positions only grow (mod 2^31 is far away).
 */
const RING_SOURCE = `
class Ring {
  constructor(sab) {
    this.ctrl = new Int32Array(sab, 0, 4);
    this.data = Buffer.from(sab, 16);
    this.cap = this.data.length;
    this.read = 0;
    this.write = 0;
  }
  send(text) {
    const len = Buffer.byteLength(text);
    if (this.write + 4 + len - Atomics.load(this.ctrl, 1) > this.cap) throw new Error('ring full');
    const head = Buffer.allocUnsafe(4);
    head.writeUInt32LE(len);
    this.put(head, this.write);
    const bytes = Buffer.from(text);
    this.put(bytes, this.write + 4);
    this.write += 4 + len;
    Atomics.store(this.ctrl, 0, this.write);
    if (Atomics.load(this.ctrl, 2) === 1) Atomics.notify(this.ctrl, 0);
  }
  put(bytes, pos) {
    const at = pos % this.cap;
    const first = Math.min(bytes.length, this.cap - at);
    bytes.copy(this.data, at, 0, first);
    if (first < bytes.length) bytes.copy(this.data, 0, first);
  }
  take(pos, len) {
    const at = pos % this.cap;
    if (at + len <= this.cap) return this.data.toString('utf8', at, at + len);
    return Buffer.concat([this.data.subarray(at), this.data.subarray(0, len - (this.cap - at))]).toString('utf8');
  }
  async run(onMessage) {
    for (;;) {
      const w = Atomics.load(this.ctrl, 0);
      while (this.read !== w) {
        const at = this.read % this.cap;
        let len = 0;
        for (let i = 3; i >= 0; i--) len = len * 256 + this.data[(at + i) % this.cap];
        onMessage(JSON.parse(this.take(this.read + 4, len)));
        this.read += 4 + len;
      }
      Atomics.store(this.ctrl, 1, this.read);
      Atomics.store(this.ctrl, 2, 1);
      if (Atomics.load(this.ctrl, 0) === this.read) {
        const r = Atomics.waitAsync(this.ctrl, 0, this.read);
        if (r.async) await r.value;
      }
      Atomics.store(this.ctrl, 2, 0);
    }
  }
}
`;

/** The main thread's model of it (same code, evaluated here). */
interface RingLike {
  send(text: string): void;
  run(onMessage: (m: RingMessage) => void): Promise<void>;
}
interface RingMessage {
  t: string;
  id: number;
  slot: number;
  len: number;
  name: string;
  datatype: string;
  shape: number[];
  model?: string;
}
type RingConstructor = new (sab: SharedArrayBuffer) => RingLike;
const RingClass = new Function('Buffer', `${RING_SOURCE}; return Ring;`)(Buffer) as RingConstructor;

/**
 * postMessage one message at a time, or (batched) what one event-loop turn sent as one message, as the threads'
 * Coalescer does (src/frontends/threads/wire.ts).
 */
const COALESCER_SOURCE = `
class Coalescer {
  constructor(port, batched) {
    this.port = port;
    this.batched = batched;
    this.items = [];
    this.transfer = [];
    this.flush = () => {
      const items = this.items;
      const transfer = this.transfer;
      this.items = [];
      this.transfer = [];
      this.port.postMessage(items.length === 1 ? items[0] : { t: 'batch', items }, transfer);
    };
  }
  send(m, buffer) {
    if (!this.batched) return this.port.postMessage(m, [buffer]);
    this.items.push(m);
    this.transfer.push(buffer);
    if (this.items.length === 1) setImmediate(this.flush);
  }
}
`;
interface CoalescerLike {
  send(m: unknown, buffer: ArrayBuffer): void;
}
type CoalescerConstructor = new (port: MessagePort, batched: boolean) => CoalescerLike;
const CoalescerClass = new Function(`${COALESCER_SOURCE}; return Coalescer;`)() as CoalescerConstructor;

/** The main thread's side, in a worker: answers each request with an output as large as its input. */
const ECHO_SOURCE = `
const { parentPort, workerData } = require('node:worker_threads');
${RING_SOURCE}
${COALESCER_SOURCE}
if (workerData.mode !== 'ring') {
  parentPort.once('message', (port) => {
    const out = new Coalescer(port, workerData.mode === 'batched');
    const answer = (m) => {
      const input = m.inputs[0].data;
      const bytes = new Uint8Array(new ArrayBuffer(input.byteLength));
      bytes.set(input);
      const output = { name: 'OUT', datatype: m.inputs[0].datatype, shape: m.inputs[0].shape, data: bytes };
      const response = { modelName: m.model, modelVersion: '1', id: '', outputs: [output] };
      out.send({ t: 'answer', id: m.id, response }, bytes.buffer);
    };
    port.on('message', (m) => (m.t === 'batch' ? m.items.forEach(answer) : answer(m)));
  });
} else {
  const { toMain, fromMain, inSlab, outSlab, slotBytes } = workerData;
  // A pending Atomics.waitAsync does not keep a thread alive (a server's sockets would); the main thread is kept
  // alive by the worker.
  setInterval(() => {}, 1 << 30);
  const ring = new Ring(toMain);
  const inBytes = new Uint8Array(inSlab);
  const outBytes = new Uint8Array(outSlab);
  void new Ring(fromMain).run((m) => {
    const input = inBytes.subarray(m.slot * slotBytes, m.slot * slotBytes + m.len);
    outBytes.set(input, m.slot * slotBytes);
    ring.send(JSON.stringify({ t: 'answer', id: m.id, slot: m.slot, len: m.len, name: 'OUT', datatype: m.datatype,
      shape: m.shape, modelName: m.model, modelVersion: '1' }));
  });
}
`;

interface Channel {
  /** Sends request `id` (slot `slot`) and calls back with its answer's bytes. */
  send(id: number, slot: number, payload: Uint8Array, done: (out: Uint8Array) => void): void;
  close(): Promise<void>;
}

interface Answer {
  t: string;
  id: number;
  response: { outputs: { data: Uint8Array }[] };
  items: Answer[];
}

function postChannel(batched: boolean): Channel {
  const worker = new Worker(ECHO_SOURCE, { eval: true, workerData: { mode: batched ? 'batched' : 'post' } });
  const { port1, port2 } = new MessageChannel();
  worker.postMessage(port2, [port2]);
  const waiting = new Map<number, (out: Uint8Array) => void>();
  const out = new CoalescerClass(port1, batched);
  const answer = (m: Answer): void => {
    const done = waiting.get(m.id)!;
    waiting.delete(m.id);
    done(m.response.outputs[0]!.data);
  };
  port1.on('message', (m: Answer) => (m.t === 'batch' ? m.items.forEach(answer) : answer(m)));
  return {
    send(id, _slot, payload, done) {
      waiting.set(id, done);
      const data = new Uint8Array(new ArrayBuffer(payload.byteLength));
      data.set(payload);
      const input = { name: 'IN', datatype: 'FP32', shape: [1, payload.byteLength / 4], data };
      const request = { t: 'infer', id, model: 'm', version: undefined, requestId: '', inputs: [input] };
      out.send(request, data.buffer);
    },
    async close() {
      port1.close();
      await worker.terminate();
    },
  };
}

function ringChannel(slotBytes: number): Channel {
  const fromMain = new SharedArrayBuffer(16 + RING_BYTES);
  const toMain = new SharedArrayBuffer(16 + RING_BYTES);
  const inSlab = new SharedArrayBuffer(slotBytes * DEPTH);
  const outSlab = new SharedArrayBuffer(slotBytes * DEPTH);
  const worker = new Worker(ECHO_SOURCE, {
    eval: true,
    workerData: { mode: 'ring', fromMain, toMain, inSlab, outSlab, slotBytes },
  });
  const out = new RingClass(fromMain);
  const inBytes = new Uint8Array(inSlab);
  const outBytes = new Uint8Array(outSlab);
  const waiting = new Map<number, (out: Uint8Array) => void>();
  void new RingClass(toMain).run((m) => {
    const done = waiting.get(m.id)!;
    waiting.delete(m.id);
    done(outBytes.subarray(m.slot * slotBytes, m.slot * slotBytes + m.len));
  });
  return {
    send(id, slot, payload, done) {
      waiting.set(id, done);
      inBytes.set(payload, slot * slotBytes);
      const header = { t: 'infer', id, slot, len: payload.byteLength, model: 'm', name: 'IN', datatype: 'FP32' };
      out.send(JSON.stringify({ ...header, shape: [1, payload.byteLength / 4] }));
    },
    async close() {
      await worker.terminate();
    },
  };
}

interface Point {
  p50us: number;
  perSec: number;
  cpuUs: number;
}

/** One at a time for SECONDS/2 (p50), then DEPTH in flight for SECONDS/2 (rate and CPU per round trip). */
async function measure(channel: Channel, bytes: number): Promise<Point> {
  const payload = new Uint8Array(bytes).fill(7);
  let id = 0;
  const trip = (slot: number): Promise<Uint8Array> =>
    new Promise((resolve) => channel.send(++id, slot, payload, resolve));
  for (let i = 0; i < 2000; i++) await trip(0);
  const times: number[] = [];
  const seqEnd = Date.now() + (SECONDS * 1000) / 2;
  while (Date.now() < seqEnd) {
    const t0 = process.hrtime.bigint();
    const outBytes = await trip(0);
    times.push(Number(process.hrtime.bigint() - t0) / 1000);
    if (outBytes.byteLength !== bytes) throw new Error(`answer of ${outBytes.byteLength} bytes, sent ${bytes}`);
  }
  times.sort((a, b) => a - b);
  let trips = 0;
  const cpu0 = process.cpuUsage();
  const t0 = process.hrtime.bigint();
  const end = Date.now() + (SECONDS * 1000) / 2;
  await Promise.all(
    Array.from({ length: DEPTH }, async (_, slot) => {
      while (Date.now() < end) {
        await trip(slot);
        trips++;
      }
    }),
  );
  const wall = Number(process.hrtime.bigint() - t0) / 1e9;
  const cpu = process.cpuUsage(cpu0);
  return { p50us: times[Math.floor(times.length / 2)]!, perSec: trips / wall, cpuUs: (cpu.user + cpu.system) / trips };
}

function median(xs: number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.floor(s.length / 2)]!;
}

function fmt(n: number, digits = 0): string {
  return n.toLocaleString('en-US', { maximumFractionDigits: digits, minimumFractionDigits: digits });
}

const MODES = ['postMessage', 'postMessage, one per turn', 'ring'] as const;
type Mode = (typeof MODES)[number];

function open(mode: Mode, bytes: number): Channel {
  if (mode === 'ring') return ringChannel(bytes);
  return postChannel(mode !== 'postMessage');
}

const rows: string[][] = [];
for (const bytes of SIZES) {
  const points = new Map<Mode, Point[]>(MODES.map((m) => [m, []]));
  for (let round = 0; round < ROUNDS; round++) {
    for (const mode of round % 2 === 0 ? MODES : [...MODES].reverse()) {
      const channel = open(mode, bytes);
      try {
        points.get(mode)!.push(await measure(channel, bytes));
      } finally {
        await channel.close();
      }
    }
  }
  const med = (mode: Mode, key: keyof Point): number => median(points.get(mode)!.map((p) => p[key]));
  for (const mode of MODES) {
    rows.push([
      String(bytes),
      mode,
      fmt(med(mode, 'p50us'), 1),
      fmt(med(mode, 'perSec')),
      fmt(med(mode, 'cpuUs'), 1),
      fmt(med(mode, 'cpuUs') / med('ring', 'cpuUs'), 2),
    ]);
  }
}
const header = ['bytes', 'crossing', 'p50 µs, 1 at a time', `trips/s, ${DEPTH} in flight`, 'CPU µs/trip', 'CPU × ring'];
const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => r[i]!.length)));
const pad = (c: string, i: number): string => (i === 1 ? c.padEnd(widths[i]!) : c.padStart(widths[i]!));
const line = (cells: string[]): string => cells.map(pad).join('  ');
process.stdout.write(
  `\nthe crossing, request and answer: postMessage (transferred buffers) vs a SharedArrayBuffer ring ` +
    `(Atomics.waitAsync), ${SECONDS} s per point × ${ROUNDS} rounds, alternated (medians)\n`,
);
process.stdout.write(`${line(header)}\n${widths.map((w) => '-'.repeat(w)).join('  ')}\n`);
for (const r of rows) process.stdout.write(`${line(r)}\n`);
