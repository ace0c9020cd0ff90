import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { parse } from 'yaml';
import { CHART, type K8sObject, helm, only, render, validateObject, valuesFiles } from './helm.js';

const TRITON_VALUES = path.join(CHART, 'ci', 'triton-values.yaml');

interface Container {
  image: string;
  args: string[];
  ports: Array<{ name: string; containerPort: number }>;
  readinessProbe: Record<string, unknown>;
  livenessProbe: { httpGet: { path: string; port: string } };
  startupProbe: { httpGet: { path: string }; periodSeconds: number; failureThreshold: number };
  resources?: Record<string, unknown>;
  env: Array<{ name: string; value?: string }>;
  envFrom?: Array<{ secretRef: { name: string } }>;
  lifecycle?: { preStop: { exec: { command: string[] } } };
}

interface PodSpec {
  containers: Container[];
  terminationGracePeriodSeconds: number;
  tolerations?: Array<{ key: string }>;
  volumes: Array<{ name: string; secret?: { secretName: string } }>;
}

function podSpec(objects: K8sObject[]): PodSpec {
  return (only(objects, 'Deployment').spec as { template: { spec: PodSpec } }).template.spec;
}

function flag(c: Container, name: string): string | undefined {
  return c.args.find((a) => a.startsWith(`--${name}=`))?.slice(name.length + 3);
}

test('helm lint --strict passes with the defaults, the guide values file, and every optional object on', () => {
  const everything = valuesFiles(
    'serviceMonitor: { enabled: true }\nprometheusRule: { enabled: true }\ngrafanaDashboard: { ' +
    'enabled: true }\nprometheusAdapter: { configMap: { enabled: true } }\nkeda: { enabled: true }\n',
  );
  try {
    for (const args of [[], ['-f', TRITON_VALUES], everything.args]) {
      const r = helm(['lint', CHART, '--strict', ...args]);
      assert.equal(r.status, 0, r.stdout + r.stderr);
    }
  } finally {
    everything.cleanup();
  }
});

test('the guide values file renders unchanged into valid objects: ' +
  'GPU image, probes, rolling update, drain budget, HPA', () => {
  const guide = parse(readFileSync(TRITON_VALUES, 'utf8')) as {
    resources: Record<string, unknown>;
    readinessProbe: Record<string, unknown>;
    autoscaling: { minReplicas: number; maxReplicas: number; metrics: unknown[] };
  };
  const objects = render(['-f', TRITON_VALUES]);
  for (const o of objects) validateObject(o);
  assert.deepEqual(objects.map((o) => o.kind).sort(), [
    'Deployment',
    'HorizontalPodAutoscaler',
    'PodDisruptionBudget',
    'Service',
    'ServiceAccount',
  ]);

  const deployment = only(objects, 'Deployment').spec as { replicas?: number; strategy: unknown };
  assert.equal(deployment.replicas, undefined, 'the HPA owns the replica count');
  assert.deepEqual(deployment.strategy, { type: 'RollingUpdate', rollingUpdate: { maxUnavailable: 0, maxSurge: 1 } });

  const pod = podSpec(objects);
  const c = pod.containers[0]!;
  assert.match(c.image, /:0\.1\.0-cuda$/, 'a GPU request selects the CUDA image; the Triton tag maps to our release');
  assert.equal(flag(c, 'model-repository'), 's3://ml-models-prod/triton-repo');
  assert.deepEqual(
    c.ports.map((p) => [p.name, p.containerPort]),
    [['http', 8000], ['grpc', 8001], ['metrics', 8002]],
  );
  assert.deepEqual(c.resources, guide.resources);
  // The guide's probe, plus the chart's own defaults for the fields it leaves out.
  assert.deepEqual(c.readinessProbe, { ...guide.readinessProbe, failureThreshold: 3, timeoutSeconds: 5 });
  assert.deepEqual(c.livenessProbe.httpGet, { path: '/v2/health/live', port: 'http' });
  assert.equal(c.startupProbe.periodSeconds * c.startupProbe.failureThreshold, 300);
  const exitTimeout = Number(flag(c, 'exit-timeout-secs'));
  const preStop = Number(c.lifecycle!.preStop.exec.command[1]);
  assert.ok(
    pod.terminationGracePeriodSeconds > exitTimeout + preStop,
    `${pod.terminationGracePeriodSeconds} > ${exitTimeout} + ${preStop}`,
  );
  assert.equal(flag(c, 'grpc-max-connection-age'), '300000');
  assert.deepEqual(pod.tolerations?.map((t) => t.key), ['nvidia.com/gpu']);

  const hpa = only(objects, 'HorizontalPodAutoscaler');
  assert.equal(hpa.apiVersion, 'autoscaling/v2');
  const spec = hpa.spec as {
    minReplicas: number;
    maxReplicas: number;
    metrics: unknown[];
    scaleTargetRef: { name: string };
  };
  assert.equal(spec.minReplicas, guide.autoscaling.minReplicas);
  assert.equal(spec.maxReplicas, guide.autoscaling.maxReplicas);
  assert.deepEqual(spec.metrics, guide.autoscaling.metrics);
  assert.equal(spec.scaleTargetRef.name, only(objects, 'Deployment').metadata.name);

  const annotations = only(objects, 'Deployment').metadata.annotations as Record<string, string>;
  assert.match(annotations['nereid/image-tag-note']!, /image\.tag 24\.08-py3 is a Triton release tag/);
});

test('the defaults render valid objects: the CPU image, one replica, no HPA, no GPU scheduling', () => {
  const objects = render();
  for (const o of objects) validateObject(o);
  assert.equal(objects.some((o) => o.kind === 'HorizontalPodAutoscaler'), false);
  assert.equal((only(objects, 'Deployment').spec as { replicas: number }).replicas, 1);
  const pod = podSpec(objects);
  const c = pod.containers[0]!;
  assert.match(c.image, /^ghcr\.io\/nereid\/nereid:0\.1\.0$/);
  assert.equal(flag(c, 'model-repository'), undefined, 'the bundled examples');
  assert.equal(pod.tolerations, undefined);
  assert.equal(pod.terminationGracePeriodSeconds, 30 + 5 + 15);
  const service = only(objects, 'Service').spec as { ports: Array<{ name: string; port: number }> };
  assert.deepEqual(
    service.ports.map((p) => `${p.name}:${p.port}`),
    ['http:8000', 'grpc:8001', 'metrics:8002'],
  );
});

test('every optional object renders valid: ServiceMonitor, PrometheusRule, ' +
  'dashboard and adapter ConfigMaps, KEDA ScaledObject, credentials', () => {
  const v = valuesFiles(`
serviceMonitor: { enabled: true }
prometheusRule: { enabled: true }
grafanaDashboard: { enabled: true }
prometheusAdapter: { configMap: { enabled: true } }
keda: { enabled: true }
extraArgs: ["--model-control-mode=explicit", "--load-model=*"]
cloudCredentials:
  envSecretName: aws-credentials
  file: { secretName: gcs-key, key: key.json }
`);
  try {
    const objects = render(v.args);
    for (const o of objects) validateObject(o);
    const kinds = objects.map((o) => o.kind);
    for (const kind of ['ServiceMonitor', 'PrometheusRule', 'ScaledObject']) assert.ok(kinds.includes(kind), kind);

    const rules = parse(readFileSync(path.join(CHART, 'files', 'prometheus-rules.yaml'), 'utf8')) as unknown;
    assert.deepEqual(only(objects, 'PrometheusRule').spec, rules);
    const dashboard = objects.find((o) => o.kind === 'ConfigMap' && o.metadata.name.endsWith('-dashboard'))!;
    assert.deepEqual(
      JSON.parse(dashboard.data!['nereid-dashboard.json']!),
      JSON.parse(readFileSync(path.join(CHART, 'files', 'grafana-dashboard.json'), 'utf8')),
    );
    const adapter = objects.find((o) => o.kind === 'ConfigMap' && o.metadata.name.endsWith('-prometheus-adapter'))!;
    const adapterValues = parse(readFileSync(path.join(CHART, 'files', 'prometheus-adapter-values.yaml'), 'utf8')) as {
      rules: { custom: unknown[] };
    };
    assert.deepEqual((parse(adapter.data!['config.yaml']!) as { rules: unknown[] }).rules, adapterValues.rules.custom);

    const scaled = only(objects, 'ScaledObject').spec as {
      triggers: Array<{ metricType: string; metadata: { query: string; threshold: string } }>;
    };
    assert.equal(scaled.triggers[0]!.metricType, 'Value');
    assert.equal(scaled.triggers[0]!.metadata.threshold, '50000');
    assert.match(
      scaled.triggers[0]!.metadata.query,
      /rate\(nv_inference_queue_duration_us\{namespace="ml", pod=~"nereid-.*"\}\[2m\]\)/,
    );
    assert.equal(objects.some((o) => o.kind === 'HorizontalPodAutoscaler'), false, 'KEDA makes its own HPA');

    const pod = podSpec(objects);
    const c = pod.containers[0]!;
    assert.deepEqual(c.args.slice(-2), ['--model-control-mode=explicit', '--load-model=*']);
    assert.deepEqual(c.envFrom, [{ secretRef: { name: 'aws-credentials' } }]);
    assert.deepEqual(
      c.env.find((e) => e.name === 'GOOGLE_APPLICATION_CREDENTIALS'),
      { name: 'GOOGLE_APPLICATION_CREDENTIALS', value: '/var/run/secrets/nereid/credentials/key.json' },
    );
    assert.equal(pod.volumes.find((x) => x.name === 'cloud-credentials')?.secret?.secretName, 'gcs-key');
  } finally {
    v.cleanup();
  }
});

test('auth.keysSecret mounts the keys file from a Secret (the whole ' +
  'Secret, so updates reach the pod) and passes --auth-keys', () => {
  const v = valuesFiles(`
auth: { keysSecret: nereid-keys, keysSecretKey: keys.json, failureLimit: 7 }
serviceMonitor: { enabled: true, authorization: { secretName: prometheus-key, key: secret } }
`);
  try {
    const objects = render(v.args);
    for (const o of objects) validateObject(o);
    const pod = podSpec(objects);
    const c = pod.containers[0]!;
    assert.equal(flag(c, 'auth-keys'), '/var/run/secrets/nereid/auth/keys.json');
    assert.equal(flag(c, 'auth-failure-limit'), '7');
    const volume = pod.volumes.find((x) => x.name === 'auth-keys') as {
      secret: { secretName: string; items?: unknown };
    };
    assert.deepEqual(volume.secret, { secretName: 'nereid-keys' });
    const mounts = (
      c as unknown as { volumeMounts: Array<{ name: string; mountPath: string; readOnly?: boolean; subPath?: string }> }
    ).volumeMounts;
    assert.deepEqual(
      mounts.find((m) => m.name === 'auth-keys'),
      { name: 'auth-keys', mountPath: '/var/run/secrets/nereid/auth', readOnly: true },
    );
    // Probes stay on the health endpoints, which need no key.
    assert.equal(c.livenessProbe.httpGet.path, '/v2/health/live');
    const monitor = only(objects, 'ServiceMonitor').spec as { endpoints: Array<{ authorization?: unknown }> };
    assert.deepEqual(monitor.endpoints[0]!.authorization, {
      type: 'Bearer',
      credentials: { name: 'prometheus-key', key: 'secret' },
    });
  } finally {
    v.cleanup();
  }
  const plain = podSpec(render());
  assert.equal(flag(plain.containers[0]!, 'auth-keys'), undefined);
  assert.equal(plain.volumes.some((x) => x.name === 'auth-keys'), false);
});

const BAD_VALUES: Array<[string, string, RegExp]> = [
  ['autoscaling enabled without metrics', 'autoscaling: { enabled: true, metrics: [] }', /autoscaling\.metrics/],
  [
    'maxReplicas below minReplicas',
    'autoscaling: { enabled: true, minReplicas: 4, maxReplicas: 2 }',
    /autoscaling\.maxReplicas \(2\) is less than autoscaling\.minReplicas \(4\)/,
  ],
  [
    'a GPU request with the CPU image forced',
    'image: { flavor: cpu }\nresources: { limits: { nvidia.com/gpu: 1 } }',
    /image\.flavor is "cpu" but resources ask for nvidia\.com\/gpu: 1/,
  ],
  [
    'a grace period shorter than the drain',
    'exitTimeoutSecs: 60\nterminationGracePeriodSeconds: 40',
    /terminationGracePeriodSeconds \(40\) must be greater than exitTimeoutSecs \+ preStopSleepSeconds \(65\)/,
  ],
  [
    'a flag the chart owns in extraArgs',
    'extraArgs: ["--exit-timeout-secs=5"]',
    /extraArgs\[0\] \(--exit-timeout-secs=5\): the chart sets --exit-timeout-secs from exitTimeoutSecs/,
  ],
  ['an extra argument that is not a flag', 'extraArgs: ["serve"]', /extraArgs/],
  ['a misspelt key', 'autoscalling: { enabled: true }', /autoscalling/],
  ['an unknown image flavor', 'image: { flavor: tpu }', /image\.flavor/],
  [
    'both autoscalers',
    'autoscaling: { enabled: true }\nkeda: { enabled: true }',
    /autoscaling\.enabled and keda\.enabled are both true/,
  ],
  [
    'a credential file without its key',
    'cloudCredentials: { file: { secretName: gcs } }',
    /cloudCredentials\.file\.key is empty/,
  ],
  ['a keys Secret without its key', 'auth: { keysSecret: keys, keysSecretKey: "" }', /auth\.keysSecretKey/],
  [
    '--auth-keys in extraArgs',
    'extraArgs: ["--auth-keys=/k.yaml"]',
    /the chart sets --auth-keys from auth\.keysSecret/,
  ],
  ['a negative failure limit', 'auth: { failureLimit: -1 }', /failureLimit/],
];

for (const [what, values, message] of BAD_VALUES) {
  test(`helm template refuses ${what}, naming the value`, () => {
    const v = valuesFiles(values);
    try {
      const r = helm(['template', 'nereid', CHART, ...v.args]);
      assert.notEqual(r.status, 0, 'helm template should fail');
      assert.match(r.stderr, message);
    } finally {
      v.cleanup();
    }
  });
}

test('the schema check rejects an object Kubernetes would refuse (a port given as text)', () => {
  const [deployment] = render().filter((o) => o.kind === 'Deployment');
  const broken = structuredClone(deployment!);
  const spec = broken.spec as {
    template: { spec: { containers: Array<{ ports: Array<{ containerPort: unknown }> }> } };
  };
  spec.template.spec.containers[0]!.ports[0]!.containerPort = 'eight thousand';
  assert.throws(() => validateObject(broken), /containerPort must be integer/);
});
