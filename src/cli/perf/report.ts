/**
 * Console and CSV output in perf_analyzer's format (report_writer.cc,
 * inference_profiler.cc's Report*), so scripts that read its output keep
 * working.
 */
import type { PerfStatus } from './measurement.js';
import type { PerfOptions, Protocol } from './options.js';
import type { ServerSideStats } from './server-stats.js';
import { serverBreakdown } from './server-stats.js';
import type { GpuMetrics } from './metrics.js';
import { formatDouble } from './profiler.js';

const us = (ns: number) => Math.floor(ns / 1000);

export interface ReportContext {
  readonly protocol: Protocol;
  readonly percentile: number;
  readonly verbose: boolean;
  readonly includeServerStats: boolean;
  readonly responseCacheEnabled: boolean;
  readonly decoupled: boolean;
  readonly collectMetrics: boolean;
}

/** The "*** Measurement Settings ***" block. */
export function settingsText(o: PerfOptions, decoupled: boolean): string {
  const lines = ['*** Measurement Settings ***', `  Batch size: ${o.batchSize}`, '  Service Kind: Triton'];
  if (o.warmupRequestCount > 0) {
    lines.push(`  Sending ${o.warmupRequestCount} warmup request${o.warmupRequestCount > 1 ? 's' : ''}`);
  }
  if (o.requestCount !== 0) {
    lines.push(`  Sending ${o.requestCount} benchmark request${o.requestCount > 1 ? 's' : ''}`);
  } else {
    lines.push(`  Using "${o.measurementMode}" mode for stabilization`);
    const metric = o.async ? 'throughput' : 'latency and throughput';
    lines.push(
      o.percentile === -1 ? `  Stabilizing using average ${metric}` : `  Stabilizing using p${o.percentile} ${metric}`,
    );
    lines.push(
      o.measurementMode === 'time_windows'
        ? `  Measurement window: ${o.measurementIntervalMs} msec`
        : `  Minimum number of samples in each window: ${o.measurementRequestCount}`,
    );
  }
  if (o.loadMode === 'concurrency' && o.concurrencyRange.end !== 1) {
    lines.push(`  Latency limit: ${o.latencyThresholdMs} msec`);
    if (o.concurrencyRange.end !== 0) {
      lines.push(
        `  Concurrency limit: ${Math.max(o.concurrencyRange.start, o.concurrencyRange.end)} concurrent requests`,
      );
    }
  }
  if (o.loadMode === 'request_rate' && o.requestRateRange.end !== 1) {
    lines.push(`  Latency limit: ${o.latencyThresholdMs} msec`);
    if (o.requestRateRange.end !== 0) {
      lines.push(
        `  Request Rate limit: ` +
        `${formatDouble(Math.max(o.requestRateRange.start, o.requestRateRange.end))} requests per seconds`,
      );
    }
  }
  if (o.loadMode === 'request_rate') {
    lines.push(
      o.requestDistribution === 'poisson'
        ? '  Using poisson distribution on request generation'
        : '  Using uniform distribution on request generation',
    );
  }
  if (o.binarySearch) lines.push('  Using Binary Search algorithm');
  lines.push(o.async ? '  Using asynchronous calls for inference' : '  Using synchronous calls for inference');
  if (decoupled) lines.push('  Detected decoupled model, using the first response for measuring latency');
  return lines.join('\n') + '\n\n';
}

/** "Request concurrency: N" / "Request Rate: R inference requests per second". */
export function levelHeader(mode: 'concurrency' | 'request_rate', level: number): string {
  return mode === 'concurrency'
    ? `Request concurrency: ${level}\n`
    : `Request Rate: ${formatDouble(level)} inference requests per second\n`;
}

function clientText(s: PerfStatus, ctx: ReportContext): string[] {
  const c = s.client;
  const lines: string[] = ['  Client: ', `    Request count: ${c.requestCount}`];
  const delayPct = c.requestCount ? (c.delayedRequestCount / c.requestCount) * 100 : 0;
  if (delayPct > 1) {
    lines.push(`    Avg send request rate: ${s.sendRequestRate.toFixed(2)} infer/sec`);
    lines.push(
      `    [WARNING] Perf Analyzer was not able to keep up with the desired request rate. ${delayPct.toFixed(
        2,
      )}% of the requests were delayed. `,
    );
  }
  lines.push(`    Throughput: ${formatDouble(c.inferPerSec)} infer/sec`);
  if (ctx.percentile === -1) {
    lines.push(`    Avg latency: ${us(c.avgLatencyNs)} usec (standard deviation ${c.stdUs} usec)`);
  }
  for (const [p, ns] of c.percentileLatencyNs) lines.push(`    p${p} latency: ${us(ns)} usec`);
  if (!ctx.decoupled) {
    const req = us(c.avgRequestTimeNs);
    const send = us(c.avgSendTimeNs);
    const recv = us(c.avgReceiveTimeNs);
    const wait = req - send - recv;
    if (ctx.protocol === 'grpc') {
      lines.push(
        ctx.verbose
          ? `    Avg gRPC time: ${req} usec (marshal ${send} usec ` +
            `+ response wait ${wait} usec + unmarshal ${recv} usec)`
          : `    Avg gRPC time: ${req} usec ((un)marshal request/response ` +
            `${send + recv} usec + response wait ${wait} usec)`,
      );
    } else {
      lines.push(
        ctx.verbose
          ? `    Avg HTTP time: ${req} usec (send ${send} usec + response wait ${wait} usec + receive ${recv} usec)`
          : `    Avg HTTP time: ${req} usec (send/recv ${send + recv} usec + response wait ${wait} usec)`,
      );
    }
  }
  return lines;
}

function serverText(stats: ServerSideStats, ctx: ReportContext, depth: number): string[] {
  const ident = ' '.repeat(2 * depth);
  const lines: string[] = [];
  if (stats.successCount === 0) {
    lines.push(`${ident}  Request count: 0`);
    return lines;
  }
  const b = serverBreakdown(stats, ctx.responseCacheEnabled);
  lines.push(
    `${ident}  Inference count: ${stats.inferenceCount}`,
    `${ident}  Execution count: ${stats.executionCount}`,
  );
  if (ctx.responseCacheEnabled) {
    lines.push(
      `${ident}  Cache hit count: ${stats.cacheHitCount}`,
      `${ident}  Cache miss count: ${stats.cacheMissCount}`,
    );
  }
  lines.push(`${ident}  Successful request count: ${stats.successCount}`);
  if (stats.composing.length === 0) {
    if (ctx.responseCacheEnabled) {
      lines.push(
        `${ident}  Avg request latency: ${b.avgRequestUs} usec (overhead ${b.overheadUs} ` +
        `usec + queue ${b.queueUs} usec + cache hit/miss ${b.combinedCacheComputeUs} usec)`,
        `${ident}${ident}  Average Cache Hit Latency: ${b.cacheHitUs} usec`,
        `${ident}${ident}  Average Cache Miss Latency: ${b.cacheMissUs + b.computeUs} usec (cache lookup/insertion ` +
        `${b.cacheMissUs} usec + compute input ${b.computeInputUs} usec + compute ` +
        `infer ${b.computeInferUs} usec + compute output ${b.computeOutputUs} usec)`,
      );
    } else {
      lines.push(
        `${ident}  Avg request latency: ${b.avgRequestUs} usec (overhead ${b.overheadUs} usec + queue ${b.queueUs} ` +
        `usec + compute input ${b.computeInputUs} usec + compute infer ` +
        `${b.computeInferUs} usec + compute output ${b.computeOutputUs} usec)`,
      );
    }
    return lines;
  }
  // Ensemble: queue and compute are the sums over the composing models.
  let queue = 0;
  let compute = 0;
  for (const c of stats.composing) {
    const cb = serverBreakdown(c.stats, false);
    queue += cb.queueUs;
    compute += cb.computeUs;
  }
  const overhead = b.avgRequestUs > queue + compute ? b.avgRequestUs - queue - compute : 0;
  lines.push(
    `${ident}  Avg request latency: ${b.avgRequestUs} usec (overhead ` +
    `${overhead} usec + queue ${queue} usec + compute ${compute} usec)`,
    '',
    `${ident}Composing models: `,
  );
  for (const c of stats.composing) {
    lines.push(`${ident}${c.name}, version: ${c.version}`);
    lines.push(...serverText(c.stats, ctx, depth + 1));
  }
  return lines;
}

function metricsText(m: GpuMetrics): string[] {
  const lines = ['  Server Prometheus Metrics: '];
  if (m.utilization.size > 16) {
    return [
      ...lines,
      'Too many GPUs on system to print out individual Prometheus metrics, use the CSV output feature to see metrics.',
    ];
  }
  lines.push('    Avg GPU Utilization:');
  for (const [k, v] of m.utilization) lines.push(`      ${k} : ${formatDouble(v * 100)}%`);
  lines.push('    Avg GPU Power Usage:');
  for (const [k, v] of m.powerUsage) lines.push(`      ${k} : ${formatDouble(v)} watts`);
  lines.push('    Max GPU Memory Usage:');
  for (const [k, v] of m.memoryUsedBytes) lines.push(`      ${k} : ${v} bytes`);
  lines.push('    Total GPU Memory:');
  for (const [k, v] of m.memoryTotalBytes) lines.push(`      ${k} : ${v} bytes`);
  return lines;
}

/** The per-level "Client:" / "Server:" block. */
export function levelReportText(s: PerfStatus, ctx: ReportContext): string {
  const lines = clientText(s, ctx);
  if (ctx.includeServerStats && s.server) {
    lines.push('  Server: ');
    lines.push(...serverText(s.server, ctx, 1));
  }
  if (ctx.collectMetrics && s.metrics) lines.push(...metricsText(s.metrics));
  return lines.join('\n') + '\n';
}

/** The closing summary ("Concurrency: N, throughput: T infer/sec, latency L usec" per level). */
export function summaryText(
  statuses: readonly PerfStatus[],
  mode: 'concurrency' | 'request_rate',
  percentile: number,
): string {
  if (statuses.length === 0) return '';
  const lines = [
    `Inferences/Second vs. Client ${percentile === -1 ? 'Average Batch Latency' : `p${percentile} Batch Latency`}`,
  ];
  for (const s of statuses) {
    const head = mode === 'concurrency' ? `Concurrency: ${s.level}` : `Request Rate: ${formatDouble(s.level)}`;
    lines.push(
      `${head}, throughput: ${formatDouble(s.client.inferPerSec)} ` +
      `infer/sec, latency ${us(s.stabilizingLatencyNs)} usec`,
    );
  }
  return lines.join('\n') + '\n';
}

function gpuCsv(m: GpuMetrics | undefined): string {
  const col = (map: Map<string, number> | undefined) => {
    let s = '';
    for (const [k, v] of map ?? []) s += `${k}:${formatDouble(v)};`;
    return s;
  };
  return `,${col(m?.utilization)},${col(m?.powerUsage)},${col(m?.memoryUsedBytes)},${col(m?.memoryTotalBytes)}`;
}

export interface CsvOptions {
  readonly mode: 'concurrency' | 'request_rate';
  readonly includeServerStats: boolean;
  readonly responseCacheEnabled: boolean;
  readonly decoupled: boolean;
  readonly verboseCsv: boolean;
  readonly percentile: number;
  readonly withMetrics: boolean;
}

/** perf_analyzer's -f CSV: header plus one row per level, sorted by ascending throughput. Times in µs. */
export function csvText(statuses: readonly PerfStatus[], o: CsvOptions): { text: string; warnings: string[] } {
  const warnings: string[] = [];
  let header = o.mode === 'concurrency' ? 'Concurrency,' : 'Request Rate,';
  header += 'Inferences/Second,';
  if (o.decoupled) header += 'Response Throughput,';
  header += 'Client Send,';
  if (o.includeServerStats) {
    header += 'Network+Server Send/Recv,Server Queue,Server Compute Input,Server Compute Infer,Server Compute Output,';
    if (o.responseCacheEnabled) header += 'Server Cache Hit,Server Cache Miss,';
  }
  header += 'Client Recv';
  const percentiles = statuses[0] ? [...statuses[0].client.percentileLatencyNs.keys()] : [50, 90, 95, 99];
  for (const p of percentiles) header += `,p${p} latency`;
  if (o.verboseCsv) {
    if (o.percentile === -1) header += ',Avg latency';
    header += ',request/response,response wait';
    if (o.withMetrics) header += ',Avg GPU Utilization,Avg GPU Power Usage,Max GPU Memory Usage,Total GPU Memory';
  }
  const rows = [header];
  const sorted = [...statuses].sort((a, b) => a.client.inferPerSec - b.client.inferPerSec);
  for (const s of sorted) {
    const c = s.client;
    let row = `${o.mode === 'concurrency' ? s.level : formatDouble(s.level)},${formatDouble(c.inferPerSec)},`;
    if (o.decoupled) row += `${formatDouble(c.inferPerSec)},`;
    row += `${us(c.avgSendTimeNs)},`;
    if (o.includeServerStats) {
      const st = s.server!;
      const avg = (t: number, n: number) => (n > 0 ? Math.floor(t / n) : 0);
      const queueNs = avg(st.queueTimeNs, st.queueCount);
      const computeNs = avg(
        st.computeInputTimeNs + st.computeInferTimeNs + st.computeOutputTimeNs,
        st.computeInputCount,
      );
      const hitNs = avg(st.cacheHitTimeNs, st.cacheHitCount);
      const missNs = avg(st.cacheMissTimeNs, st.cacheMissCount);
      const clientWait = c.avgLatencyNs - c.avgSendTimeNs - c.avgReceiveTimeNs;
      const accounted = queueNs + computeNs + hitNs + missNs;
      const network = clientWait > accounted ? clientWait - accounted : 0;
      if (network === 0) {
        warnings.push(
          'Server average accounted time was larger than client average wait time due to small ' +
          'sample size. Increase the measurement interval with `--measurement-interval`.',
        );
      }
      row += `${us(network)},${us(queueNs)},${us(avg(st.computeInputTimeNs, st.computeInputCount))},${us(
        avg(st.computeInferTimeNs, st.computeInferCount),
      )},${us(avg(st.computeOutputTimeNs, st.computeOutputCount))},`;
      if (o.responseCacheEnabled) row += `${us(hitNs)},${us(missNs)},`;
    }
    row += `${us(c.avgReceiveTimeNs)}`;
    for (const p of percentiles) row += `,${us(c.percentileLatencyNs.get(p) ?? 0)}`;
    if (o.verboseCsv) {
      const send = us(c.avgSendTimeNs);
      const recv = us(c.avgReceiveTimeNs);
      if (o.percentile === -1) row += `,${us(c.avgLatencyNs)}`;
      row += `,${send + recv},${us(c.avgRequestTimeNs) - send - recv}`;
      if (o.withMetrics) row += gpuCsv(s.metrics);
    }
    rows.push(row);
  }
  return { text: rows.join('\n') + '\n', warnings };
}
