/**
 * A metric family whose series are read at scrape time from plain numbers
 * kept by each model's reporter. Registered in a prom-client Registry, which
 * formats it. Unlike prom-client's own metrics, each series may carry its own
 * label set (models add `_<tag>` labels from their metric_tags).
 */
export type Labels = Record<string, string | number>;

/** One sample line, as prom-client's registry formats it. */
export interface SeriesValue {
  metricName?: string;
  labels: Labels;
  value: number;
}

export type FamilyType = 'counter' | 'gauge' | 'histogram' | 'summary';

export interface FamilySnapshot {
  name: string;
  help: string;
  type: FamilyType;
  values: SeriesValue[];
  aggregator: 'sum';
}

export interface SeriesSource<R> {
  /** The reporters whose series this family shows. */
  sources(): Iterable<R>;
}

export type SeriesReader<R> = (source: R, out: SeriesValue[]) => void | Promise<void>;

export class Family<R> {
  readonly aggregator = 'sum' as const;

  constructor(
    readonly name: string,
    readonly help: string,
    readonly type: FamilyType,
    private readonly from: SeriesSource<R>,
    private readonly read: SeriesReader<R>,
  ) {}

  async get(): Promise<FamilySnapshot> {
    const values: SeriesValue[] = [];
    for (const source of this.from.sources()) {
      const pending = this.read(source, values);
      if (pending) await pending;
    }
    return { name: this.name, help: this.help, type: this.type, values, aggregator: this.aggregator };
  }

  /** prom-client calls this on reset; our numbers live in the reporters. */
  reset(): void {}
}

/** A histogram with fixed upper bounds, kept as plain counts (cumulated at scrape). */
export class FixedHistogram {
  private readonly counts: Float64Array;
  sum = 0;
  count = 0;

  constructor(readonly bounds: readonly number[]) {
    this.counts = new Float64Array(bounds.length);
  }

  observe(value: number): void {
    this.sum += value;
    this.count += 1;
    const bounds = this.bounds;
    for (let i = 0; i < bounds.length; i++) {
      if (value <= bounds[i]!) {
        this.counts[i]! += 1;
        return;
      }
    }
  }

  /** Appends the _bucket, _sum and _count series with `labels`. */
  export(name: string, labels: Labels, out: SeriesValue[]): void {
    let cumulative = 0;
    for (let i = 0; i < this.bounds.length; i++) {
      cumulative += this.counts[i]!;
      out.push({ metricName: `${name}_bucket`, labels: { ...labels, le: this.bounds[i]! }, value: cumulative });
    }
    out.push({ metricName: `${name}_bucket`, labels: { ...labels, le: '+Inf' }, value: this.count });
    out.push({ metricName: `${name}_sum`, labels, value: this.sum });
    out.push({ metricName: `${name}_count`, labels, value: this.count });
  }
}
