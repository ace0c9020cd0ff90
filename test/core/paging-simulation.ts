/**
 * A simulation of the paging benchmark's request flow (bench/paging.ts) for the policy tests: CLIENTS clients in a
 * closed loop, each waiting for its answer before it asks again, over a seeded Zipf(1.1) stream of MODELS models;
 * a request to a loaded model takes HIT_MS, a load LOAD_MS, one load at a time (as ModelPager measures them), each
 * first making room through PagingPolicy.choose exactly as ModelPager.makeRoom asks it (a poll every POLL_MS, the
 * busy grace, the longer wait for a newcomer colder than the model it would unload). Time is a whole number of
 * milliseconds; nothing runs on a clock.
 */
import { PagingPolicy } from '../../src/core/paging-policy.js';
import { seededRandom } from '../helpers/random.js';

export const MODELS = 30;
export const HOTTEST = 5;
const CLIENTS = 8;
const HIT_MS = 4;
const LOAD_MS = 450;
const POLL_MS = 10;

export interface SimulationOptions {
  readonly seed: number;
  /** Models that fit. */
  readonly places: number;
  /** Requests the clients send in all. */
  readonly requests: number;
  /** How long a load waits for a colder busy model before it unloads the coldest idle one. */
  readonly graceMs: number;
  /** How long a load waits, for a newcomer with fewer requests than the model it would unload (0: not at all). */
  readonly colderWaitMs: number;
  /** How long a model loaded for the first time is unloaded only when no other can go (0: not at all). */
  readonly freshMs: number;
  /** A load that finds no room within this fails its requests (--model-load-wait-ms). */
  readonly loadWaitMs: number;
  /** The policy to play (default: PagingPolicy as the server makes it); bench/paging-rules.ts passes others. */
  readonly policy?: () => PagingPolicy;
  /** Models loaded before the first request (default none: a cold start). */
  readonly loaded?: readonly string[];
}

/** An unload of one of the HOTTEST most requested models. */
export interface HotUnload {
  readonly model: string;
  /** Requests sent before it. */
  readonly request: number;
  /** Its requests so far, and the loaded models outside the HOTTEST that had more. */
  readonly count: number;
  readonly outrankedBy: readonly string[];
}

export interface SimulationResult {
  /** Unloads of the HOTTEST most requested models, each with how many requests had been sent before it. */
  readonly hotEvictions: number[];
  readonly hotUnloads: HotUnload[];
  readonly evictions: number;
  readonly failed: number;
  /** The longest a load waited for room (ms). */
  readonly longestRoomWait: number;
  /** The longest a request waited for its answer (ms), its model's load included. */
  readonly longestRequest: number;
  readonly requests: number;
}

interface Model {
  readonly name: string;
  state: 'out' | 'loading' | 'in';
  /** Clients waiting for or being served by this model, in order. */
  readonly queue: number[];
  /** When the request at the head of the queue ends (undefined: none running). */
  runningUntil: number | undefined;
  lastUse: number;
  firstLoadedAt: number | undefined;
}

/** The stream's model ranks: rank i + 1 is model i, Zipf(s) over MODELS. */
function zipf(seed: number, s = 1.1): () => number {
  const weights = Array.from({ length: MODELS }, (_, i) => 1 / (i + 1) ** s);
  const total = weights.reduce((a, b) => a + b, 0);
  const rand = seededRandom(seed);
  return () => {
    let u = rand() * total;
    for (const [i, w] of weights.entries()) if ((u -= w) < 0) return i;
    return MODELS - 1;
  };
}

export function simulate(o: SimulationOptions): SimulationResult {
  const policy = o.policy?.() ?? new PagingPolicy();
  const models: Model[] = Array.from({ length: MODELS }, (_, i) => ({
    name: `m${i}`,
    state: 'out',
    queue: [],
    runningUntil: undefined,
    lastUse: 0,
    firstLoadedAt: undefined,
  }));
  for (const m of models) if (o.loaded?.includes(m.name)) m.state = 'in';
  const next = zipf(o.seed);
  const loads: Model[] = [];
  let current: { model: Model; started: number; loadedAt?: number } | undefined;
  const waitingSince = new Map<number, number>();
  const counts = new Map<string, number>();
  const result = {
    hotEvictions: [] as number[],
    hotUnloads: [] as HotUnload[],
    evictions: 0,
    failed: 0,
    longestRoomWait: 0,
    longestRequest: 0,
    requests: 0,
  };
  let sent = 0;
  let t = 0;

  const ask = (client: number) => {
    if (sent >= o.requests) return;
    sent++;
    const m = models[next()]!;
    policy.recordUse(m.name);
    counts.set(m.name, (counts.get(m.name) ?? 0) + 1);
    m.queue.push(client);
    waitingSince.set(client, t);
    if (m.state === 'out' && !loads.includes(m) && current?.model !== m) loads.push(m);
  };
  for (let c = 0; c < CLIENTS; c++) ask(c);

  let lastPoll = -Infinity;
  while (sent < o.requests || models.some((m) => m.queue.length > 0)) {
    // Requests end and their clients ask again; loaded models start their next request.
    for (const m of models) {
      if (m.runningUntil !== undefined && m.runningUntil <= t) {
        const client = m.queue.shift()!;
        m.runningUntil = undefined;
        m.lastUse = t;
        result.requests++;
        result.longestRequest = Math.max(result.longestRequest, t - waitingSince.get(client)!);
        ask(client);
      }
      if (m.state === 'in' && m.runningUntil === undefined && m.queue.length > 0) m.runningUntil = t + HIT_MS;
    }
    // The load in progress: room first (polled), then LOAD_MS.
    if (current === undefined && loads.length > 0) current = { model: loads.shift()!, started: t };
    if (current !== undefined && current.loadedAt !== undefined && current.loadedAt <= t) {
      current.model.state = 'in';
      current.model.firstLoadedAt ??= t;
      current = undefined;
      continue;
    }
    if (current !== undefined && current.loadedAt === undefined && t - lastPoll >= POLL_MS) {
      lastPoll = t;
      const waited = t - current.started;
      for (;;) {
        const resident = models.filter((m) => m.state === 'in');
        if (resident.length < o.places) {
          current.model.state = 'loading';
          current.loadedAt = t + LOAD_MS;
          result.longestRoomWait = Math.max(result.longestRoomWait, waited);
          break;
        }
        if (waited >= o.loadWaitMs) {
          result.failed += current.model.queue.length;
          for (const client of current.model.queue.splice(0)) ask(client);
          current = undefined;
          break;
        }
        const fresh = (m: Model) => o.freshMs > 0 && m.firstLoadedAt !== undefined && t - m.firstLoadedAt < o.freshMs;
        let candidates = resident.map((m) => ({ name: m.name, idle: m.queue.length === 0, lastUse: m.lastUse }));
        // Rules tried against the policy as it is (docs/paging.md#which-model-goes): a model loaded moments ago
        // for the first time goes only when no other idle model can.
        if (resident.some((m) => m.queue.length === 0 && !fresh(m))) {
          candidates = candidates.filter((c) => !fresh(models.find((m) => m.name === c.name)!));
        }
        const decision = policy.choose(candidates, waited < o.graceMs);
        // ...and a newcomer with fewer requests than the model it would unload waits for a colder busy one.
        if (decision.evict !== undefined && waited < o.colderWaitMs) {
          const victim = policy.score(decision.evict);
          const colderBusy = candidates.some((c) => !c.idle && policy.score(c.name) < victim);
          if (colderBusy && policy.score(current.model.name) < victim) break;
        }
        if (decision.evict === undefined) break;
        const victim = models.find((m) => m.name === decision.evict)!;
        victim.state = 'out';
        result.evictions++;
        if (Number(victim.name.slice(1)) < HOTTEST) {
          result.hotEvictions.push(sent);
          const count = counts.get(victim.name) ?? 0;
          const outrankedBy = resident
            .filter((m) => Number(m.name.slice(1)) >= HOTTEST && (counts.get(m.name) ?? 0) > count)
            .map((m) => m.name);
          result.hotUnloads.push({ model: victim.name, request: sent, count, outrankedBy });
        }
      }
    }
    t++;
  }
  return result;
}
