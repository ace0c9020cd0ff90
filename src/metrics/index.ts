export { Metrics, METRICS_CONTENT_TYPE, type AttachInfo, type MetricsOptions } from './metrics.js';
export { MetricsFrontend, type MetricsFrontendOptions } from './frontend.js';
export { parseMetricsConfig, type LatencySettings } from './config.js';
