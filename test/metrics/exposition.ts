/** Reads samples and metadata back out of Prometheus text exposition, for assertions. */

export interface Sample {
  name: string;
  labels: Record<string, string>;
  value: number;
}

export function parseExposition(text: string): { samples: Sample[]; types: Map<string, string> } {
  const samples: Sample[] = [];
  const types = new Map<string, string>();
  for (const line of text.split('\n')) {
    if (line === '') continue;
    if (line.startsWith('# TYPE ')) {
      const [, , name, type] = line.split(' ');
      types.set(name!, type!);
      continue;
    }
    if (line.startsWith('#')) continue;
    const m = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$/.exec(line);
    if (!m) throw new Error(`unparseable sample line: ${line}`);
    const labels: Record<string, string> = {};
    for (const lm of (m[2] ?? '').matchAll(/([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"/g)) labels[lm[1]!] = lm[2]!;
    const raw = m[3]!;
    samples.push({ name: m[1]!, labels, value: raw === '+Inf' ? Infinity : raw === '-Inf' ? -Infinity : Number(raw) });
  }
  return { samples, types };
}

/** The one sample named `name` whose labels include `labels`; throws when there is not exactly one. */
export function sample(text: string, name: string, labels: Record<string, string> = {}): number {
  const found = parseExposition(text).samples.filter(
    (s) => s.name === name && Object.entries(labels).every(([k, v]) => s.labels[k] === v),
  );
  if (found.length !== 1) throw new Error(`expected one ${name}${JSON.stringify(labels)}, found ${found.length}`);
  return found[0]!.value;
}

export function names(text: string): Set<string> {
  return new Set(parseExposition(text).samples.map((s) => s.name));
}
