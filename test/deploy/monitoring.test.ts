import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { chmodSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { parse } from 'yaml';
import { LOOPBACK_PORTS, startServe } from '../helpers/serve-process.js';
import { CHART, only, render, valuesFiles } from './helm.js';

const FILES = path.join(CHART, 'files');

function promtool(args: string[]): { status: number | null; out: string } {
  const r = spawnSync('promtool', args, { encoding: 'utf8', cwd: FILES });
  if (r.error)
    throw new Error(
      `promtool is missing (Debian package prometheus, installed by scripts/system-deps.sh): ${r.error.message}`,
    );
  return { status: r.status, out: r.stdout + r.stderr };
}

test('promtool check rules accepts the recording rules and alerts', () => {
  const r = promtool(['check', 'rules', 'prometheus-rules.yaml']);
  assert.equal(r.status, 0, r.out);
  assert.match(r.out, /SUCCESS: 14 rules found/);
});

test('promtool test rules: queue vs compute, error ratio, quantiles, ' +
  'batch size and the four alerts behave as specified', () => {
  const r = promtool(['test', 'rules', 'prometheus-rules.test.yaml']);
  assert.equal(r.status, 0, r.out);
  assert.match(r.out, /SUCCESS/);
});

interface RuleGroup {
  rules: Array<{ record?: string; alert?: string; expr: string }>;
}

/** Every PromQL expression the monitoring files and templates ship, with where it comes from. */
function shippedQueries(): Array<[string, string]> {
  const out: Array<[string, string]> = [];
  const rules = parse(readFileSync(path.join(FILES, 'prometheus-rules.yaml'), 'utf8')) as { groups: RuleGroup[] };
  for (const g of rules.groups) for (const r of g.rules) out.push([`rule ${r.record ?? r.alert}`, r.expr]);
  const adapter = parse(readFileSync(path.join(FILES, 'prometheus-adapter-values.yaml'), 'utf8')) as {
    rules: { custom: Array<{ seriesQuery: string; metricsQuery: string }> };
  };
  for (const r of adapter.rules.custom) {
    out.push(
      ['adapter seriesQuery', r.seriesQuery],
      ['adapter metricsQuery', r.metricsQuery.replace(/<<\.\w+>>/g, '')],
    );
  }
  const walk = (node: unknown, where: string): void => {
    if (Array.isArray(node)) node.forEach((x, i) => walk(x, `${where}[${i}]`));
    else if (node && typeof node === 'object') {
      for (const [k, v] of Object.entries(node)) {
        if ((k === 'expr' || k === 'definition') && typeof v === 'string') out.push([`dashboard ${where}`, v]);
        else walk(v, `${where}.${k}`);
      }
    }
  };
  walk(JSON.parse(readFileSync(path.join(FILES, 'grafana-dashboard.json'), 'utf8')), '');
  const v = valuesFiles('keda: { enabled: true }');
  try {
    const scaled = only(render(v.args), 'ScaledObject').spec as { triggers: Array<{ metadata: { query: string } }> };
    out.push(['KEDA trigger', scaled.triggers[0]!.metadata.query]);
  } finally {
    v.cleanup();
  }
  return out;
}

test('every metric the dashboard, rules, adapter rule and KEDA trigger ' +
  'name exists in the /metrics of a running Nereid', async (t) => {
  // This machine has no GPU: a stand-in prints nvidia-smi's CSV answer so the GPU gauges appear.
  const bin = mkdtempSync(path.join(tmpdir(), 'nereid-fake-smi-'));
  t.after(() => rmSync(bin, { recursive: true, force: true }));
  writeFileSync(
    path.join(bin, 'nvidia-smi'),
    '#!/bin/sh\necho "GPU-0d3c0c8e-0000-4000-8000-000000000001, 37, 81559, 2048, 71.5, 700.00"\n',
  );
  chmodSync(path.join(bin, 'nvidia-smi'), 0o755);
  const s = startServe(LOOPBACK_PORTS, { env: { PATH: `${bin}:${process.env.PATH}` } });
  t.after(() => s.stop());
  const ports = await s.ports;
  const infer = await fetch(`http://127.0.0.1:${ports.http}/v2/models/fraud_detector/infer`, {
    method: 'POST',
    body: JSON.stringify({
      inputs: [
        {
          name: 'input_features',
          datatype: 'FP32',
          shape: [1, 10],
          data: [0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1],
        },
      ],
    }),
  });
  assert.equal(infer.status, 200, await infer.text());
  const exposition = await (await fetch(`http://127.0.0.1:${ports.metrics}/metrics`)).text();
  const exposed = new Set(
    exposition
      .split('\n')
      .filter((l) => l !== '' && !l.startsWith('#'))
      .map((l) => /^[a-zA-Z_:][a-zA-Z0-9_:]*/.exec(l)![0]),
  );
  const rules = parse(readFileSync(path.join(FILES, 'prometheus-rules.yaml'), 'utf8')) as { groups: RuleGroup[] };
  const recorded = new Set(rules.groups.flatMap((g) => g.rules.flatMap((r) => (r.record ? [r.record] : []))));

  const named = new Map<string, string>();
  for (const [where, query] of shippedQueries()) {
    // Identifiers outside label matchers and strings: label values such as "BACKEND" are not metric names.
    const bare = query.replace(/\{[^}]*\}/g, '{}').replace(/"[^"]*"/g, '""');
    for (const [name] of bare.matchAll(/[a-zA-Z_:][a-zA-Z0-9_:]*/g)) {
      if (name.includes(':') || /^(nv|nereid)_/.test(name)) named.set(name, where);
    }
  }
  assert.ok(named.size >= 20, `found only ${named.size} metric names`);
  const missing = [...named].filter(([name]) => (name.includes(':') ? !recorded.has(name) : !exposed.has(name)));
  assert.deepEqual(missing, [], 'named but neither exposed by Nereid nor recorded by the rules');
  for (const needed of [
    'nv_inference_queue_duration_us',
    'nereid_request_duration_seconds_bucket',
    'nv_inference_batch_size_bucket',
    'nv_gpu_utilization',
    'nv_cpu_utilization',
    'nereid_server_ready',
  ]) {
    assert.ok(named.has(needed), `${needed} is used somewhere`);
  }
});

/** Runs `promtool test rules` on one generated test of `expr` over `series`, expecting `samples`. */
function promqlTest(
  series: Array<[string, string]>,
  expr: string,
  evalTime: string,
  samples: Array<[string, number]>,
): { status: number | null; out: string } {
  const dir = mkdtempSync(path.join(tmpdir(), 'nereid-promql-'));
  try {
    writeFileSync(path.join(dir, 'none.yaml'), 'groups: []\n');
    const test = {
      rule_files: ['none.yaml'],
      evaluation_interval: '1m',
      tests: [
        {
          interval: '1m',
          input_series: series.map(([s, values]) => ({ series: s, values })),
          promql_expr_test: [
            { expr, eval_time: evalTime, exp_samples: samples.map(([labels, value]) => ({ labels, value })) },
          ],
        },
      ],
    };
    writeFileSync(path.join(dir, 'test.yaml'), JSON.stringify(test));
    const r = spawnSync('promtool', ['test', 'rules', 'test.yaml'], { encoding: 'utf8', cwd: dir });
    if (r.error) throw new Error(`promtool is missing: ${r.error.message}`);
    return { status: r.status, out: r.stdout + r.stderr };
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

// Pod a: model m queues 60 ms per request at 2 req/s and model n 0 ms at 2 req/s (30 ms on average);
// pod b: 10 ms per request; pod c: no traffic.
const QUEUE_SERIES: Array<[string, string]> = [
  ['nv_inference_queue_duration_us{namespace="ml",pod="nereid-a",model="m",version="1"}', '0+7200000x10'],
  ['nv_inference_request_success{namespace="ml",pod="nereid-a",model="m",version="1"}', '0+120x10'],
  ['nv_inference_queue_duration_us{namespace="ml",pod="nereid-a",model="n",version="1"}', '0x10'],
  ['nv_inference_request_success{namespace="ml",pod="nereid-a",model="n",version="1"}', '0+120x10'],
  ['nv_inference_queue_duration_us{namespace="ml",pod="nereid-b",model="m",version="1"}', '0+600000x10'],
  ['nv_inference_request_success{namespace="ml",pod="nereid-b",model="m",version="1"}', '0+60x10'],
  ['nv_inference_queue_duration_us{namespace="ml",pod="nereid-c",model="m",version="1"}', '0x10'],
  ['nv_inference_request_success{namespace="ml",pod="nereid-c",model="m",version="1"}', '0x10'],
];

test('the prometheus-adapter rule gives each pod its average ' +
  'queue microseconds per request (0 without traffic)', () => {
  const adapter = parse(readFileSync(path.join(FILES, 'prometheus-adapter-values.yaml'), 'utf8')) as {
    rules: { custom: Array<{ name: { as: string }; metricsQuery: string }> };
  };
  const rule = adapter.rules.custom[0]!;
  assert.equal(rule.name.as, 'nv_inference_queue_duration_us', 'the name the HPA asks for');
  // What the adapter substitutes when the HPA asks for the pods of namespace ml.
  const query = rule.metricsQuery
    .replaceAll('<<.GroupBy>>', 'pod')
    .replaceAll('<<.LabelMatchers>>', 'namespace="ml",pod=~"nereid-a|nereid-b|nereid-c"');
  const r = promqlTest(QUEUE_SERIES, query, '8m', [
    ['{pod="nereid-a"}', 30000],
    ['{pod="nereid-b"}', 10000],
    ['{pod="nereid-c"}', 0],
  ]);
  assert.equal(r.status, 0, r.out);
});

test('the KEDA trigger gives the average queue microseconds per request over all of the release\'s pods', () => {
  const v = valuesFiles('keda: { enabled: true }');
  let query: string;
  try {
    query = (only(render(v.args), 'ScaledObject').spec as { triggers: Array<{ metadata: { query: string } }> })
      .triggers[0]!.metadata.query;
  } finally {
    v.cleanup();
  }
  // 7.2e6 + 0 + 6e5 µs per minute over 120 + 120 + 60 requests per minute.
  const r = promqlTest(QUEUE_SERIES, query, '8m', [['{}', 26000]]);
  assert.equal(r.status, 0, r.out);
});
