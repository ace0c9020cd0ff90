/**
 * `node dist/bench/overload-model.js` (section `overloadmodel` of
 * bench/run.ts): the scheduling half of the overload bar, free of the
 * machine's load. The real DynamicBatcher, configured as bench/overload.ts
 * configures its model (max_batch_size 64, max_queue_size 64, one instance
 * that takes a second batch while it runs one, arrivals coalesced per
 * event-loop turn), is driven in virtual time: a batch of n requests runs for
 * a + c·n ms on the instance, requests arrive at turn boundaries, and every
 * latency is counted in virtual milliseconds. First the capacity, from 32
 * closed loops (as wrk -c32), then an open loop at twice it. Printed for a few
 * cost models: goodput against capacity, the accepted p99 against the p99 at
 * capacity, the most requests the model held and the mean batch.
 *
 * What it leaves out is what bench/overload.ts measures: HTTP parsing, the
 * cost of each refusal on the event loop, the crossing to the session thread.
 * Here the capacity's latency has no spread, so the p99 ratio is the ratio of
 * waits; a real p99 at capacity has a tail, which only lowers the ratio.
 */
import { create } from '@bufbuild/protobuf';
import type { BackendInstance, BackendRequest, BackendResponse } from '../src/backends/backend.js';
import { ModelDynamicBatchingSchema, ModelQueuePolicySchema } from '../src/gen/model_config_pb.js';
import { DynamicBatcher } from '../src/scheduler/dynamic-batcher.js';
import { ScheduledRequest } from '../src/scheduler/scheduled-request.js';
import { ModelInstance } from '../src/scheduler/scheduler.js';
import { ModelVersionStatistics } from '../src/types/statistics.js';

const SECONDS = 10;
const WARMUP_MS = 1000;
const MAX_BATCH = 64;
const MAX_QUEUE = 64;

interface CostModel {
  /** ms per batch, and per request in it. */
  perBatchMs: number;
  perRequestMs: number;
  /** Length of an event-loop turn, ms: arrivals within one are batched together. */
  turnMs: number;
}

/** Virtual time, ms. */
let now = 0;

interface Run {
  readonly size: number;
  readonly done: () => void;
  endMs: number;
}

/**
 * An instance that runs batches one after another, each for a + c·n virtual ms, and takes a second while it runs one.
 */
class TimedInstance implements BackendInstance {
  readonly scheduling = { maxInFlight: 2 };
  private readonly waiting: Run[] = [];
  private running: Run | undefined;

  constructor(private readonly cost: CostModel) {}

  execute(requests: readonly BackendRequest[]): Promise<BackendResponse[]> {
    return new Promise((resolve) => {
      this.waiting.push({
        size: requests.length,
        done: () => resolve(requests.map(() => ({ outputs: [], parameters: {} }))),
        endMs: 0,
      });
      this.startNext();
    });
  }

  async close(): Promise<void> {}

  get nextEndMs(): number {
    return this.running === undefined ? Infinity : this.running.endMs;
  }

  finish(): void {
    const run = this.running!;
    this.running = undefined;
    run.done();
    this.startNext();
  }

  private startNext(): void {
    if (this.running !== undefined) return;
    const run = this.waiting.shift();
    if (run === undefined) return;
    run.endMs = now + this.cost.perBatchMs + this.cost.perRequestMs * run.size;
    this.running = run;
  }
}

const request: BackendRequest = {
  id: '',
  inputs: [{ name: 'input', datatype: 'FP32', shape: [1, 4], data: new Uint8Array(16) }],
  requestedOutputs: [],
  parameters: {},
  batchSize: 1,
  correlationId: 0n,
  flags: 0,
} as unknown as BackendRequest;

/** Lets the batcher's promise callbacks and its end-of-turn batch formation run. */
const settle = (): Promise<void> => new Promise((resolve) => setImmediate(resolve));

interface Outcome {
  okPerSec: number;
  p99Ms: number;
  mostHeld: number;
  meanBatch: number;
}

/** `closed`: `load` loops sending again as soon as answered; `open`: `load` requests per second. */
async function drive(cost: CostModel, mode: 'closed' | 'open', load: number): Promise<Outcome> {
  now = 0;
  const instance = new TimedInstance(cost);
  const stats = new ModelVersionStatistics('model', '1');
  const batching = create(ModelDynamicBatchingSchema, {
    preferredBatchSize: [MAX_BATCH],
    defaultQueuePolicy: create(ModelQueuePolicySchema, { maxQueueSize: MAX_QUEUE }),
  });
  const batcher = new DynamicBatcher('model', [new ModelInstance('model_0', instance)], stats, {
    maxBatchSize: MAX_BATCH,
    batching,
    raggedInputs: new Set(),
    coalesceArrivals: true,
  });
  const latencies: number[] = [];
  let held = 0;
  let mostHeld = 0;
  let resend = mode === 'closed' ? load : 0;
  const submit = (): void => {
    const sentMs = now;
    held++;
    mostHeld = Math.max(mostHeld, held);
    const item = new ScheduledRequest(request, 0, 0, stats, (_response, error) => {
      held--;
      if (error === undefined && sentMs >= WARMUP_MS) latencies.push(now - sentMs);
      if (mode === 'closed') resend++;
    }, undefined);
    batcher.enqueue(item);
  };
  const endMs = WARMUP_MS + SECONDS * 1000;
  let turnMs = 0;
  let nextArrivalMs = 0;
  while (now < endMs) {
    if (instance.nextEndMs <= turnMs + cost.turnMs) {
      now = instance.nextEndMs;
      instance.finish();
    } else {
      now = turnMs = turnMs + cost.turnMs;
      if (mode === 'open') {
        for (; nextArrivalMs <= now; nextArrivalMs += 1000 / load) submit();
      } else {
        const n = resend;
        resend = 0;
        for (let i = 0; i < n; i++) submit();
      }
    }
    await settle();
  }
  latencies.sort((a, b) => a - b);
  const json = stats.toJSON();
  return {
    okPerSec: latencies.length / SECONDS,
    p99Ms: latencies[Math.min(latencies.length - 1, Math.floor(latencies.length * 0.99))] ?? NaN,
    mostHeld,
    meanBatch: Number(json.inference_count) / Math.max(1, Number(json.execution_count)),
  };
}

function fmt(n: number, digits = 0): string {
  return n.toLocaleString('en-US', { maximumFractionDigits: digits, minimumFractionDigits: digits });
}

const costs: CostModel[] = [
  { perBatchMs: 0.3, perRequestMs: 0.1, turnMs: 1 },
  { perBatchMs: 0.3, perRequestMs: 0.1, turnMs: 0.2 },
  { perBatchMs: 1, perRequestMs: 0.05, turnMs: 1 },
  { perBatchMs: 0.05, perRequestMs: 0.1, turnMs: 1 },
];
const rows: string[][] = [];
for (const cost of costs) {
  const cap = await drive(cost, 'closed', 32);
  const over = await drive(cost, 'open', 2 * cap.okPerSec);
  rows.push([
    `${cost.perBatchMs} + ${cost.perRequestMs}·n ms, turn ${cost.turnMs} ms`,
    `${fmt(cap.okPerSec)}/s, p99 ${fmt(cap.p99Ms, 1)} ms, batch ${fmt(cap.meanBatch, 1)}`,
    `${fmt(over.okPerSec)}/s, p99 ${fmt(over.p99Ms, 1)} ms, batch ${fmt(over.meanBatch, 1)}, held ≤ ${over.mostHeld}`,
    fmt(over.okPerSec / cap.okPerSec, 2),
    fmt(over.p99Ms / cap.p99Ms, 2),
  ]);
}
const header = ['batch cost', 'capacity (32 closed loops)', '2x open loop', 'goodput/cap', 'p99/p99 cap'];
const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => r[i]!.length)));
const line = (cells: string[]): string => cells.map((c, i) => c.padStart(widths[i]!)).join('  ');
process.stdout.write(
  `\nThe dynamic batcher alone, in virtual time (max_batch_size ${MAX_BATCH}, max_queue_size ` +
  `${MAX_QUEUE}, one instance taking a second batch; bars: goodput ≥ 0.9, p99 ≤ 3)\n`,
);
process.stdout.write(`${line(header)}\n`);
for (const r of rows) process.stdout.write(`${line(r)}\n`);
