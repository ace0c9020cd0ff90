/**
 * Which model goes when a load needs room under a memory budget: the least
 * frequently used, with frequencies that decay as the server's traffic goes
 * on (docs/paging.md#which-model-goes). Pure bookkeeping, no clock: the
 * decay counts requests, so a decision depends only on the request stream.
 */

/** After this many requests to the server, an earlier request weighs half as much in its model's score. */
export const DEFAULT_HALF_LIFE_REQUESTS = 2000;
/** Weights are kept as multiples of a growing scale; past this it is folded back into the weights. */
const RESCALE_AT = 2 ** 500;

/** A model that could be unloaded for room. */
export interface PagingCandidate {
  readonly name: string;
  /** No request queued or running and no sequence open: it can go now. */
  readonly idle: boolean;
  /** When it was last used, on any increasing clock: breaks ties between equal scores. */
  readonly lastUse: number;
}

/** What to do for room: unload `evict`, or wait for a colder model that is busy (`wait`), or neither (no candidate). */
export interface PagingDecision {
  readonly evict?: string;
  readonly wait: boolean;
}

export class PagingPolicy {
  /** Each model's weight, in units of `scale` at the time of each request. */
  private readonly weights = new Map<string, number>();
  private scale = 1;
  private readonly growth: number;
  private recorded = 0;

  constructor(readonly halfLifeRequests = DEFAULT_HALF_LIFE_REQUESTS) {
    if (!(halfLifeRequests > 0)) throw new RangeError(`half-life must be above 0 requests, got ${halfLifeRequests}`);
    this.growth = 2 ** (1 / halfLifeRequests);
  }

  /** Requests recorded so far (the index of the next one). */
  get requests(): number {
    return this.recorded;
  }

  /** A request to `model`: it counts 1 now, and every earlier request of every model decays by one step. */
  recordUse(model: string): void {
    this.recorded++;
    this.scale *= this.growth;
    this.weights.set(model, (this.weights.get(model) ?? 0) + this.scale);
    if (this.scale > RESCALE_AT) {
      for (const [name, w] of this.weights) this.weights.set(name, w / this.scale);
      this.scale = 1;
    }
  }

  /** The model's decayed request count (0 for a model never requested). */
  score(model: string): number {
    return (this.weights.get(model) ?? 0) / this.scale;
  }

  /** Every model's score, leaving out those under `least` (a model long unrequested): what a restart restores. */
  scores(least = 1e-3): Map<string, number> {
    const out = new Map<string, number>();
    for (const name of this.weights.keys()) {
      const s = this.score(name);
      if (s >= least) out.set(name, s);
    }
    return out;
  }

  /**
   * Adds scores kept from before a restart (docs/paging.md#after-a-restart): each counts as that many requests
   * already decayed to now, so a model popular before the restart keeps its standing from the first request.
   */
  restore(scores: Iterable<readonly [string, number]>): void {
    for (const [name, s] of scores) {
      if (!(Number.isFinite(s) && s >= 0)) throw new RangeError(`score of '${name}' must be 0 or more, got ${s}`);
      this.weights.set(name, (this.weights.get(name) ?? 0) + s * this.scale);
    }
  }

  /** Coldest first: lowest score, then least recently used, then by name. */
  rank(candidates: readonly PagingCandidate[]): PagingCandidate[] {
    const scored = candidates.map((c) => ({ c, s: this.score(c.name) }));
    scored.sort((x, y) => x.s - y.s || x.c.lastUse - y.c.lastUse || (x.c.name < y.c.name ? -1 : 1));
    return scored.map((x) => x.c);
  }

  /**
   * The model to unload for room: the coldest idle candidate. While a
   * candidate colder than that one is busy, and `mayWait` (the grace for it
   * has not run out), the decision is to wait for it instead, so that a
   * short request on a cold model does not cost a hot model its place.
   */
  choose(candidates: readonly PagingCandidate[], mayWait: boolean): PagingDecision {
    const ranked = this.rank(candidates);
    const coldestIdle = ranked.findIndex((c) => c.idle);
    if (coldestIdle < 0) return { wait: ranked.length > 0 };
    if (coldestIdle > 0 && mayWait) return { wait: true };
    return { evict: ranked[coldestIdle]!.name, wait: false };
  }
}
