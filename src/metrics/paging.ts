/** The model paging metrics (--model-memory-budget; docs/paging.md). */
import { Counter, Gauge, Histogram, type Registry } from 'prom-client';
import type { ModelPager } from '../core/model-pager.js';
import type { Metrics } from './metrics.js';

/** Seconds a request waited for its model to load: from a warm reload to past the default 30 s wait. */
const LOAD_WAIT_BUCKETS = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60];

export function registerPagingMetrics(metrics: Metrics, pager: ModelPager): void {
  metrics.addFamilies((registry: Registry) => {
    const registers = [registry];
    new Gauge({
      name: 'nereid_model_memory_bytes',
      help: 'Memory a loaded model version holds, as measured when it loaded (bytes)',
      labelNames: ['model', 'version'],
      registers,
      collect() {
        this.reset();
        for (const [v, bytes] of pager.residentVersions()) {
          this.set({ model: v.modelName, version: String(v.version) }, bytes);
        }
      },
    });
    new Gauge({
      name: 'nereid_model_memory_budget_bytes',
      help: 'The memory budget of loaded models (--model-memory-budget, bytes)',
      registers,
      collect() {
        this.set(pager.budgetBytes);
      },
    });
    new Gauge({
      name: 'nereid_model_memory_used_bytes',
      help: 'Memory the loaded models hold, the sum of nereid_model_memory_bytes (bytes)',
      registers,
      collect() {
        this.set(pager.usedBytes());
      },
    });
    new Gauge({
      name: 'nereid_model_memory_retained_bytes',
      help: 'Resident memory above the base that no loaded model accounts for, as found at the last load (bytes)',
      registers,
      collect() {
        this.set(pager.retainedBytes);
      },
    });
    new Counter({
      name: 'nereid_model_memory_collections_total',
      help: 'Garbage collections run before unloading a model for memory the process kept (docs/paging.md)',
      registers,
      collect() {
        this.reset();
        this.inc(pager.collections);
      },
    });
    const evictions = new Counter({
      name: 'nereid_model_evictions_total',
      help: 'Models unloaded to make room under the memory budget',
      labelNames: ['model'],
      registers,
    });
    for (const [model, n] of pager.evictions) evictions.inc({ model }, n);
    pager.on('evicted', (model) => evictions.inc({ model }));
    const waits = new Histogram({
      name: 'nereid_model_load_wait_seconds',
      help: 'Time requests waited for their model to load on demand (seconds)',
      buckets: LOAD_WAIT_BUCKETS,
      registers,
    });
    pager.on('loadWait', (seconds) => waits.observe(seconds));
  });
}
