/**
 * Self time per function from V8 CPU profiles (`node --cpu-prof`), counted only inside given windows of the
 * monotonic clock (V8's profile timestamps and process.hrtime share it on Linux), and the difference of two
 * such accounts per request: which functions a slower build spends its extra time in (bench/ab.ts, AB_PROFILE).
 */
import { readFileSync } from 'node:fs';
import path from 'node:path';

interface ProfileNode {
  readonly id: number;
  readonly callFrame: { readonly functionName: string; readonly url: string; readonly lineNumber: number };
}
interface CpuProfile {
  readonly nodes: readonly ProfileNode[];
  readonly startTime: number;
  readonly samples: readonly number[];
  readonly timeDeltas: readonly number[];
}

/** A window of the monotonic clock, in µs. */
export interface Window {
  readonly fromUs: number;
  readonly toUs: number;
}

/** The monotonic clock in µs, as V8's profiles stamp their samples. */
export function monotonicUs(): number {
  return Number(process.hrtime.bigint() / 1000n);
}

/** Function (name, file) → self µs within the windows. Names only: line numbers differ between builds. */
export function selfTimes(file: string, windows: readonly Window[]): Map<string, number> {
  const profile = JSON.parse(readFileSync(file, 'utf8')) as CpuProfile;
  const keyOf = new Map<number, string>();
  for (const n of profile.nodes) {
    const f = n.callFrame;
    const where = f.url === '' ? '' : ` ${path.basename(f.url)}`;
    keyOf.set(n.id, `${f.functionName === '' ? '(anonymous)' : f.functionName}${where}`);
  }
  const out = new Map<string, number>();
  let t = profile.startTime;
  for (let i = 0; i < profile.samples.length; i++) {
    t += profile.timeDeltas[i]!;
    // A sample stands for the time until the next one.
    const next = profile.timeDeltas[i + 1] ?? 0;
    if (!windows.some((w) => t >= w.fromUs && t < w.toUs)) continue;
    const key = keyOf.get(profile.samples[i]!)!;
    out.set(key, (out.get(key) ?? 0) + next);
  }
  return out;
}

/** Rows of µs per request for two accounts, the largest differences first (this − base), `top` of them. */
export function diffRows(
  base: Map<string, number>,
  baseRequests: number,
  cur: Map<string, number>,
  curRequests: number,
  top: number,
): string[][] {
  const keys = new Set([...base.keys(), ...cur.keys()]);
  const rows = [...keys].map((k) => {
    const b = (base.get(k) ?? 0) / Math.max(1, baseRequests);
    const c = (cur.get(k) ?? 0) / Math.max(1, curRequests);
    return { k, b, c, d: c - b };
  });
  const total = (m: Map<string, number>, n: number) => [...m.values()].reduce((a, x) => a + x, 0) / Math.max(1, n);
  rows.sort((x, y) => Math.abs(y.d) - Math.abs(x.d));
  const f = (n: number) => n.toFixed(2);
  return [
    ['all samples', f(total(base, baseRequests)), f(total(cur, curRequests)), f(total(cur, curRequests) -
      total(base, baseRequests))],
    ...rows.slice(0, top).map((r) => [r.k, f(r.b), f(r.c), f(r.d)]),
  ];
}
