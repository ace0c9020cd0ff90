/** Spelling suggestions for unknown names. */

/** The candidate nearest in spelling, when it is near enough to be a likely typo. */
export function closestName(name: string, candidates: readonly string[], maxDistance?: number): string | undefined {
  let best: string | undefined;
  let bestDistance = Infinity;
  for (const c of candidates) {
    const d = editDistance(name.toLowerCase(), c.toLowerCase());
    if (d < bestDistance) {
      best = c;
      bestDistance = d;
    }
  }
  if (best === undefined) return undefined;
  const limit = maxDistance ?? Math.max(2, Math.floor(name.length / 3));
  if (bestDistance <= limit) return best;
  if (maxDistance !== undefined) return undefined;
  const prefix = candidates.find((c) => c.startsWith(name) || name.startsWith(c));
  return prefix;
}

function editDistance(a: string, b: string): number {
  const row = Array.from({ length: b.length + 1 }, (_, i) => i);
  for (let i = 1; i <= a.length; i++) {
    let diagonal = row[0]!;
    row[0] = i;
    for (let j = 1; j <= b.length; j++) {
      const above = row[j]!;
      row[j] = Math.min(above + 1, row[j - 1]! + 1, diagonal + (a[i - 1] === b[j - 1] ? 0 : 1));
      diagonal = above;
    }
  }
  return row[b.length]!;
}
