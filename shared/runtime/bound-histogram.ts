// A histogram whose series are bound to their labels once. prom-client's own, even through a
// child from labels(), validates and hashes the labels and makes a closure on every observation:
// in the purchase path's profile that was most of what recording a request's latency cost. Each
// series here is a few numbers; /metrics formats them through the registry like any other metric,
// in the same text as prom-client's Histogram.
import type { Registry } from 'prom-client';

type Labels = Record<string, string>;

export class HistogramSeries {
  /** counts[i]: observations in (buckets[i-1], buckets[i]]; the last one is above every bucket. */
  readonly counts: Float64Array;
  sum = 0;
  count = 0;

  constructor(
    readonly labels: Labels,
    private readonly buckets: readonly number[],
  ) {
    this.counts = new Float64Array(buckets.length + 1);
  }

  clear(): void {
    this.counts.fill(0);
    this.sum = 0;
    this.count = 0;
  }

  observe(value: number): void {
    const b = this.buckets;
    let i = 0;
    while (i < b.length && value > b[i]!) i++;
    this.counts[i]!++;
    this.sum += value;
    this.count++;
  }
}

// Shaped as prom-client's Histogram shapes its own (bounds as numbers, an exemplar slot).
interface Value {
  labels: Record<string, string | number>;
  sharedLabels: Labels;
  value: number;
  metricName: string;
  exemplar: null | undefined;
}

export class BoundHistogram {
  readonly type = 'histogram';
  readonly aggregator = 'sum';
  private readonly series = new Map<string, HistogramSeries>();

  constructor(
    readonly name: string,
    readonly help: string,
    readonly labelNames: readonly string[],
    readonly buckets: readonly number[],
    registry: Registry,
  ) {
    registry.registerMetric(this as never);
  }

  /** The series of these label values, in labelNames' order: made once, then the same object. */
  of(...values: string[]): HistogramSeries {
    const key = values.join('\n');
    let s = this.series.get(key);
    if (s === undefined) {
      const labels = Object.fromEntries(this.labelNames.map((n, i) => [n, values[i] ?? '']));
      this.series.set(key, (s = new HistogramSeries(labels, this.buckets)));
    }
    return s;
  }

  /**
   * Empties every series in place, so a series bound before (request-metrics.ts keeps them) still
   * counts afterwards. As prom-client's, a series shows in /metrics only once it has observed.
   */
  reset(): void {
    for (const s of this.series.values()) s.clear();
  }

  /** What the registry formats: per series, the cumulative buckets, +Inf, sum and count (as prom-client's Histogram gives). */
  async getForPromString(): Promise<{ name: string; help: string; type: string; aggregator: string; values: Value[] }> {
    const values: Value[] = [];
    for (const s of this.series.values()) {
      if (s.count === 0) continue;
      let acc = 0;
      this.buckets.forEach((le, i) => {
        acc += s.counts[i]!;
        values.push({
          labels: { le },
          sharedLabels: s.labels,
          value: acc,
          metricName: `${this.name}_bucket`,
          exemplar: null,
        });
      });
      values.push(
        {
          labels: { le: '+Inf' },
          sharedLabels: s.labels,
          value: s.count,
          metricName: `${this.name}_bucket`,
          exemplar: null,
        },
        { labels: {}, sharedLabels: s.labels, value: s.sum, metricName: `${this.name}_sum`, exemplar: undefined },
        { labels: {}, sharedLabels: s.labels, value: s.count, metricName: `${this.name}_count`, exemplar: undefined },
      );
    }
    return { name: this.name, help: this.help, type: this.type, aggregator: this.aggregator, values };
  }

  async get(): Promise<{
    name: string;
    help: string;
    type: string;
    aggregator: string;
    values: Omit<Value, 'sharedLabels'>[];
  }> {
    const data = await this.getForPromString();
    return {
      ...data,
      values: data.values.map(({ labels, sharedLabels, ...v }) => ({ ...v, labels: { ...labels, ...sharedLabels } })),
    };
  }
}
