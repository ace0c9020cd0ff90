/**
 * The paging policy's decisions on synthetic request streams: which model a
 * load unloads for room, with a cache of 8 places over 30 models and a
 * Zipf(1.1) stream (the paging benchmark's shape), against plain LRU on the
 * same stream. Decisions only; no clock.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { type PagingCandidate, PagingPolicy } from '../../src/core/paging-policy.js';
import { simulate } from './paging-simulation.js';

const MODELS = Array.from({ length: 30 }, (_, i) => `m${i}`);
const PLACES = 8;
const HOTTEST = MODELS.slice(0, 5);

/** A seeded Zipf(s) stream over MODELS: model i has rank i + 1. */
function zipfStream(s: number, seed: number, length: number): string[] {
  const weights = MODELS.map((_, i) => 1 / (i + 1) ** s);
  const total = weights.reduce((a, b) => a + b, 0);
  let state = seed >>> 0;
  const rand = () => {
    // xorshift32: a fixed stream for a fixed seed.
    state = (state ^ (state << 13)) >>> 0;
    state = (state ^ (state >>> 17)) >>> 0;
    state = (state ^ (state << 5)) >>> 0;
    return state / 2 ** 32;
  };
  return Array.from({ length }, () => {
    let u = rand() * total;
    for (const [i, w] of weights.entries()) if ((u -= w) < 0) return MODELS[i]!;
    return MODELS.at(-1)!;
  });
}

/** Requests before which a frequency cannot yet tell the 5th hottest model from the 6th to 8th (see below). */
const WARM_UP = 1000;

interface Replay {
  /** Unloads per model after the first WARM_UP requests. */
  evicted: Map<string, number>;
  /** Unloads of the five hottest in the first WARM_UP requests. */
  hotEarly: number;
  misses: number;
}

/**
 * Plays a stream through a cache of PLACES models, every resident model idle when a miss needs room: each request
 * is first told to `request`, then a miss with no place left unloads the model `pick` names.
 */
function replay(
  stream: readonly string[],
  request: (model: string) => void,
  pick: (candidates: PagingCandidate[]) => string,
): Replay {
  const lastUse = new Map<string, number>();
  const resident = new Set<string>();
  const result: Replay = { evicted: new Map(), hotEarly: 0, misses: 0 };
  stream.forEach((model, t) => {
    request(model);
    if (!resident.has(model)) {
      result.misses++;
      if (resident.size >= PLACES) {
        const candidates = [...resident].map((name) => ({ name, idle: true, lastUse: lastUse.get(name)! }));
        const victim = pick(candidates);
        assert.ok(resident.delete(victim), `${victim} was not resident`);
        if (t >= WARM_UP) result.evicted.set(victim, (result.evicted.get(victim) ?? 0) + 1);
        else if (HOTTEST.includes(victim)) result.hotEarly++;
      }
      resident.add(model);
    }
    lastUse.set(model, t);
  });
  return result;
}

const hotEvictions = (r: Replay) => HOTTEST.reduce((n, m) => n + (r.evicted.get(m) ?? 0), 0);

function frequencyReplay(stream: readonly string[]): Replay {
  const policy = new PagingPolicy();
  return replay(
    stream,
    (m) => policy.recordUse(m),
    (candidates) => {
      const decision = policy.choose(candidates, true);
      assert.equal(decision.wait, false, 'every candidate is idle: nothing to wait for');
      return decision.evict!;
    },
  );
}

function lruReplay(stream: readonly string[]): Replay {
  return replay(
    stream,
    () => undefined,
    (candidates) => candidates.reduce((a, b) => (b.lastUse < a.lastUse ? b : a)).name,
  );
}

// In the first few hundred requests the 5th hottest model (5 % of them) and the 6th to 8th (4 to 3 %) have
// been asked for a similar number of times, and any frequency may rank them wrongly: the hot models' places are
// asserted once WARM_UP requests have given them their lead.
test('on a Zipf(1.1) stream the five hottest models are never unloaded after warm-up; LRU unloads them', () => {
  for (const seed of [1, 7, 42, 87_109, 102_947]) {
    const stream = zipfStream(1.1, seed, 20_000);
    const frequent = frequencyReplay(stream);
    const lru = lruReplay(stream);
    assert.equal(hotEvictions(frequent), 0, `seed ${seed}: ${JSON.stringify([...frequent.evicted])}`);
    // The stream is one where recency alone fails, else the assertion above would prove nothing.
    assert.ok(hotEvictions(lru) > 100, `seed ${seed}: LRU unloaded ${hotEvictions(lru)} hot models`);
    assert.ok(frequent.hotEarly < 10, `seed ${seed}: ${frequent.hotEarly} hot models unloaded during warm-up`);
    assert.ok(frequent.misses < lru.misses, `seed ${seed}: ${frequent.misses} misses against LRU's ${lru.misses}`);
  }
});

// From a cold start, with requests in flight: a request keeps its model busy for the next few requests, a load
// that needs room asks the policy, and a wait lets the requests in flight finish. The policy may only unload the
// idle model with the fewest (decayed) requests, so a model is protected as soon as its requests outnumber another
// resident's; a load waits for a colder busy model at most for the grace, then the coldest idle model goes.
test('from a cold start a load unloads no model more requested than one kept, and waits at most the grace', () => {
  const GRACE = 5;
  const IN_FLIGHT = 3;
  for (const seed of [1, 7, 42]) {
    const policy = new PagingPolicy();
    const busyUntil = new Map<string, number>();
    const lastUse = new Map<string, number>();
    const resident = new Set<string>();
    let now = 0;
    let waits = 0;
    let hotLate = 0;
    for (const [t, model] of zipfStream(1.1, seed, 5000).entries()) {
      now++;
      policy.recordUse(model);
      if (!resident.has(model)) {
        let waited = 0;
        while (resident.size >= PLACES) {
          const candidates = [...resident].map((name) => ({
            name,
            idle: (busyUntil.get(name) ?? 0) <= now,
            lastUse: lastUse.get(name)!,
          }));
          const decision = policy.choose(candidates, waited < GRACE);
          if (decision.evict === undefined) {
            assert.ok(decision.wait, `seed ${seed}, request ${t}: neither an unload nor a wait`);
            assert.ok(waited < GRACE, `seed ${seed}, request ${t}: waited past the grace with idle models`);
            waited++;
            waits++;
            now++; // the requests in flight move on
            continue;
          }
          const victim = decision.evict;
          for (const c of candidates) {
            if (c.idle && c.name !== victim) {
              assert.ok(
                policy.score(c.name) >= policy.score(victim),
                `seed ${seed}, request ${t}: unloaded ${victim} (${policy.score(victim)}) kept ${c.name} ` +
                  `(${policy.score(c.name)})`,
              );
            }
          }
          if (waited < GRACE) {
            // Within the grace nothing colder is busy: the victim is the coldest of all candidates.
            for (const c of candidates) assert.ok(policy.score(c.name) >= policy.score(victim) || c.idle);
          }
          resident.delete(victim);
          if (t >= WARM_UP && HOTTEST.includes(victim)) hotLate++;
        }
        resident.add(model);
      }
      busyUntil.set(model, now + IN_FLIGHT);
      lastUse.set(model, now);
    }
    assert.ok(waits > 0, `seed ${seed}: no load ever found a colder model busy, the grace went untested`);
    assert.equal(hotLate, 0, `seed ${seed}: the five hottest were unloaded ${hotLate} times after warm-up`);
  }
});

test('scores decay with traffic: a model that stops being requested gives way to the newly popular', () => {
  const policy = new PagingPolicy(1000);
  for (let i = 0; i < 100; i++) policy.recordUse('old');
  assert.ok(Math.abs(policy.score('old') - 100) < 5, String(policy.score('old')));
  // 5000 requests later (five half-lives) the hundred weigh about 100 / 32.
  for (let i = 0; i < 5000; i++) policy.recordUse(i % 2 === 0 ? 'a' : 'b');
  assert.ok(Math.abs(policy.score('old') - 100 / 32) < 0.2, String(policy.score('old')));
  for (let i = 0; i < 5; i++) policy.recordUse('new');
  const candidates = ['old', 'new'].map((name, i) => ({ name, idle: true, lastUse: i }));
  assert.deepEqual(policy.choose(candidates, true), { evict: 'old', wait: false });
  // Decay is kept in bounds however long the server runs: scores stay finite and ordered.
  for (let i = 0; i < 600_000; i++) policy.recordUse('a');
  assert.ok(Number.isFinite(policy.score('a')) && policy.score('a') > policy.score('new'));
  assert.ok(policy.score('a') < 1000 / Math.LN2 + 1, String(policy.score('a')));
});

test('equal scores go least recently used first; a model never requested is the coldest', () => {
  const policy = new PagingPolicy();
  policy.recordUse('x');
  policy.recordUse('y');
  const ranked = policy.rank([
    { name: 'y', idle: true, lastUse: 5 },
    { name: 'x', idle: true, lastUse: 9 },
    { name: 'never', idle: true, lastUse: 10 },
  ]);
  // x was requested before y, so its request has decayed one step more.
  assert.deepEqual(
    ranked.map((c) => c.name),
    ['never', 'x', 'y'],
  );
  const tie = new PagingPolicy();
  assert.deepEqual(
    tie.rank([
      { name: 'p', idle: true, lastUse: 7 },
      { name: 'q', idle: true, lastUse: 3 },
    ]).map((c) => c.name),
    ['q', 'p'],
  );
});

test('a busy colder model is waited for during the grace, then the coldest idle one goes', () => {
  const policy = new PagingPolicy();
  for (const [m, n] of [['cold', 1], ['warm', 10], ['hot', 100]] as const) {
    for (let i = 0; i < n; i++) policy.recordUse(m);
  }
  const busyCold = [
    { name: 'hot', idle: true, lastUse: 1 },
    { name: 'cold', idle: false, lastUse: 2 },
    { name: 'warm', idle: true, lastUse: 3 },
  ];
  assert.deepEqual(policy.choose(busyCold, true), { wait: true });
  assert.deepEqual(policy.choose(busyCold, false), { evict: 'warm', wait: false });
  // Nothing colder is busy: no reason to wait.
  const idleCold = busyCold.map((c) => ({ ...c, idle: c.name !== 'hot' }));
  assert.deepEqual(policy.choose(idleCold, true), { evict: 'cold', wait: false });
  // Every candidate busy: nothing can go now; none at all: nothing to wait for either.
  assert.deepEqual(policy.choose(busyCold.map((c) => ({ ...c, idle: false })), false), { wait: true });
  assert.deepEqual(policy.choose([], true), { wait: false });
});

test('a half-life that is not a positive number is refused', () => {
  assert.throws(() => new PagingPolicy(0), /half-life must be above 0 requests, got 0/);
  assert.throws(() => new PagingPolicy(Number.NaN), /half-life/);
});

// The benchmark's flow from a cold start (paging-simulation.ts): 8 clients each waiting for its answer, loads of
// 450 ms one at a time, requests of 4 ms. In the first requests the 5th hottest model (4.9 % of requests) is asked
// for about as often as the 6th to 10th (4.0 to 2.3 %) and may be unloaded for one of them; once the counts part,
// it is not. Across these streams the last such unload came before request 860 with 8 places and before 1,800
// with 7 (docs/paging.md#which-model-goes); no load waits for room longer than the busy grace.
test('simulated cold start: the five hottest are not unloaded after the first 1,000 requests with 8 places', () => {
  for (const [places, after] of [[8, 1000], [7, 2000]] as const) {
    for (let seed = 1; seed <= 16; seed++) {
      const options = { seed, places, requests: 3000, graceMs: 500, colderWaitMs: 0, freshMs: 0, loadWaitMs: 30_000 };
      const r = simulate(options);
      const late = r.hotEvictions.filter((n) => n > after);
      assert.deepEqual(late, [], `${places} places, seed ${seed}: the five hottest unloaded at requests ${late}`);
      assert.equal(r.failed, 0, `${places} places, seed ${seed}`);
      assert.equal(r.requests, 3000, `${places} places, seed ${seed}: every request answered`);
      assert.ok(r.longestRoomWait <= 500, `${places} places, seed ${seed}: a load waited ${r.longestRoomWait} ms`);
      assert.ok(r.longestRequest < 10_000, `${places} places, seed ${seed}: a request waited ${r.longestRequest} ms`);
      // Models were unloaded all along: the stream does page.
      assert.ok(r.evictions > 500, `${places} places, seed ${seed}: only ${r.evictions} unloads`);
    }
  }
});

// Two rules tried against the policy as it is, in the same simulation: they must not be kept unless they do better.
test('simulated cold start: waiting for a colder model or protecting first loads unloads the hot ones no less', () => {
  const hot = (o: { colderWaitMs: number; freshMs: number }) => {
    let n = 0;
    for (let seed = 1; seed <= 8; seed++) {
      n += simulate({ seed, places: 7, requests: 2000, graceMs: 500, loadWaitMs: 30_000, ...o }).hotEvictions.length;
    }
    return n;
  };
  const plain = hot({ colderWaitMs: 0, freshMs: 0 });
  assert.ok(plain > 0, 'the cold start unloads a hot model at times, else nothing is compared');
  assert.ok(hot({ colderWaitMs: 5000, freshMs: 0 }) >= plain);
  assert.ok(hot({ colderWaitMs: 0, freshMs: 1000 }) > plain);
});

// The paging benchmark's own stream (bench/paging.ts: Zipf(1.1) seeded with 7, the same picks as this simulation's
// seed 7). It unloads the five hottest more often than most streams (8 times with 8 places, against 0 to 5 for the
// other seeds up to 16): in its first few hundred requests its 5th hottest model, m4, was asked for less than the
// 6th to 9th. Each time it went, a loaded model outside the five had had more requests, so a policy ranking models by
// the requests seen so far could keep it only by unloading a model asked for more (docs/paging.md#which-model-goes).
test("the benchmark's stream: a hot model goes only with fewer requests than a loaded tail model", () => {
  const options = { seed: 7, requests: 3000, graceMs: 500, colderWaitMs: 0, freshMs: 0, loadWaitMs: 30_000 };
  const byPlaces = new Map<number, number>();
  for (const places of [8, 9, 10]) {
    const r = simulate({ ...options, places });
    byPlaces.set(places, r.hotUnloads.length);
    for (const u of r.hotUnloads) {
      assert.ok(u.outrankedBy.length > 0, `${places} places: ${u.model} at request ${u.request} (${u.count} requests)`);
      assert.ok(u.request < 400, `${places} places: ${u.model} unloaded at request ${u.request}`);
    }
  }
  // More places, fewer such unloads: the places the budget really holds decide how many there are.
  const [eight, nine, ten] = [8, 9, 10].map((p) => byPlaces.get(p)!);
  assert.ok(eight! > nine! && nine! > ten!, JSON.stringify([...byPlaces]));
  assert.ok(ten! > 0);
  // Across the seeded streams it is the same: no hot unload while its requests outnumbered every loaded tail model's.
  for (let seed = 1; seed <= 16; seed++) {
    for (const u of simulate({ ...options, seed, places: 8 }).hotUnloads) {
      assert.ok(u.outrankedBy.length > 0, `seed ${seed}: ${u.model} at request ${u.request} (${u.count} requests)`);
    }
  }
});
