/**
 * `node dist/bench/paging-rules.js` (section `paging-rules` of bench/run.ts): which model to unload for room,
 * played through the simulation of the paging benchmark's request flow (test/core/paging-simulation.ts) for the
 * policy as it is and for rules that weigh recency more (docs/paging.md#which-model-goes). Per rule and number of
 * places: unloads of the five hottest over PAGING_RULES_SEEDS streams (default 24) of 3,000 requests, those after
 * request 1,000, the worst stream, the benchmark's own stream (seed 7), and all unloads. No server, no clock: the
 * figures are the same on every run.
 */
import { PagingPolicy, type PagingCandidate } from '../src/core/paging-policy.js';
import { simulate } from '../test/core/paging-simulation.js';

const SEEDS = Number(process.env.PAGING_RULES_SEEDS ?? 24);
const BENCH_SEED = 7;
const AFTER = 1000;

/** Scores within `factor` of the coldest idle candidate's count as equal: least recently used first among them. */
class Banded extends PagingPolicy {
  constructor(private readonly factor: number) {
    super();
  }

  override rank(candidates: readonly PagingCandidate[]): PagingCandidate[] {
    const scored = candidates.map((c) => ({ c, s: this.score(c.name) }));
    const coldest = Math.min(...scored.filter((x) => x.c.idle).map((x) => x.s));
    const band = (s: number): number => (s <= coldest * this.factor ? 0 : 1);
    scored.sort((x, y) => band(x.s) - band(y.s) || (band(x.s) === 0 ? x.c.lastUse - y.c.lastUse : x.s - y.s));
    return scored.map((x) => x.c);
  }
}

/** As 2Q: models with a score under `below` (asked for about once) go first, then least recently used. */
class TwoQueues extends PagingPolicy {
  constructor(private readonly below: number) {
    super();
  }

  override rank(candidates: readonly PagingCandidate[]): PagingCandidate[] {
    const once = (c: PagingCandidate): number => (this.score(c.name) < this.below ? 0 : 1);
    return [...candidates].sort((x, y) => once(x) - once(y) || x.lastUse - y.lastUse);
  }
}

/** Whole request counts; equal counts: the model first requested most recently goes first (hot ones come early). */
class NewestFirst extends PagingPolicy {
  private readonly counts = new Map<string, number>();
  private readonly first = new Map<string, number>();
  private n = 0;

  override recordUse(model: string): void {
    super.recordUse(model);
    this.counts.set(model, (this.counts.get(model) ?? 0) + 1);
    if (!this.first.has(model)) this.first.set(model, this.n);
    this.n++;
  }

  override rank(candidates: readonly PagingCandidate[]): PagingCandidate[] {
    const k = (c: PagingCandidate): number => this.counts.get(c.name) ?? 0;
    const f = (c: PagingCandidate): number => this.first.get(c.name) ?? Infinity;
    return [...candidates].sort((x, y) => k(x) - k(y) || f(y) - f(x));
  }
}

const rules: Array<[string, () => PagingPolicy]> = [
  ['the policy as it is (half-life 2,000)', () => new PagingPolicy()],
  ['half-life 500 requests', () => new PagingPolicy(500)],
  ['half-life 200 requests', () => new PagingPolicy(200)],
  ['half-life 100 requests', () => new PagingPolicy(100)],
  ['within 1.3x of the coldest: LRU', () => new Banded(1.3)],
  ['within 2x of the coldest: LRU', () => new Banded(2)],
  ['score under 1.5 first, then LRU', () => new TwoQueues(1.5)],
  ['counts; ties: newest first-seen first', () => new NewestFirst()],
];

process.stdout.write(
  `\npaging rules: the simulation, ${SEEDS} streams of 3,000 requests; unloads of the five hottest ` +
    `(after request ${AFTER}), worst stream, the benchmark's stream (seed ${BENCH_SEED}), all unloads\n`,
);
for (const places of [8, 9, 10]) {
  for (const [label, policy] of rules) {
    let hot = 0;
    let late = 0;
    let worst = 0;
    let bench = 0;
    let unloads = 0;
    let failed = 0;
    for (let seed = 1; seed <= SEEDS; seed++) {
      const r = simulate({
        seed, places, requests: 3000, graceMs: 500, colderWaitMs: 0, freshMs: 0, loadWaitMs: 30_000, policy,
      });
      hot += r.hotEvictions.length;
      late += r.hotEvictions.filter((n) => n > AFTER).length;
      worst = Math.max(worst, r.hotEvictions.length);
      if (seed === BENCH_SEED) bench = r.hotEvictions.length;
      unloads += r.evictions;
      failed += r.failed;
    }
    process.stdout.write(
      `${String(places).padStart(2)} places  ${label.padEnd(40)} hot ${String(hot).padStart(5)} ` +
        `(${String(late).padStart(4)})  worst ${String(worst).padStart(3)}  seed ${BENCH_SEED} ` +
        `${String(bench).padStart(3)}  unloads ${unloads}  failed ${failed}\n`,
    );
  }
}
