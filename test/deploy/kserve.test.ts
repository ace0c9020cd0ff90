import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { parse } from 'yaml';
import { Container } from 'kubernetes-models/v1/Container';
import { buildServeConfig } from '../../src/cli/serve.js';
import { ROOT, render, valuesFiles } from './helm.js';

interface Runtime {
  apiVersion: string;
  kind: string;
  spec: {
    annotations: Record<string, string>;
    protocolVersions: string[];
    supportedModelFormats: Array<{ name: string; version: string }>;
    containers: Array<{ name: string; args: string[] }>;
  };
}

test('the KServe ClusterServingRuntime speaks v2 on the ports KServe expects, with flags nereid serve accepts', () => {
  const runtime = parse(
    readFileSync(path.join(ROOT, 'deploy', 'kserve', 'cluster-serving-runtime.yaml'), 'utf8'),
  ) as Runtime;
  assert.equal(runtime.apiVersion, 'serving.kserve.io/v1alpha1');
  assert.equal(runtime.kind, 'ClusterServingRuntime');
  assert.deepEqual(runtime.spec.protocolVersions, ['v2', 'grpc-v2']);
  assert.ok(runtime.spec.supportedModelFormats.some((f) => f.name === 'triton' && f.version === '2'));
  const [container] = runtime.spec.containers;
  // KServe's storage initializer and its ingress look for this container by name.
  assert.equal(container!.name, 'kserve-container');
  new Container(container as never).validate();
  const cfg = buildServeConfig(container!.args);
  assert.deepEqual(cfg.server.modelRepositories, ['/mnt/models']);
  assert.equal(cfg.http.port, 8080);
  assert.equal(cfg.grpc.port, 9000);
  assert.equal(String(cfg.metrics.port), runtime.spec.annotations['prometheus.kserve.io/port']);
});

test('the arguments the Helm chart passes are flags nereid serve accepts', () => {
  const v = valuesFiles(
    'modelRepositoryPath: /models\nextraModelRepositoryPaths: [/more]\nextraArgs: ' +
    '["--model-control-mode=poll", "--repository-poll-secs=30"]',
  );
  try {
    const deployment = render(v.args).find((o) => o.kind === 'Deployment')!;
    const args = (deployment.spec as { template: { spec: { containers: Array<{ args: string[] }> } } }).template.spec
      .containers[0]!.args;
    const cfg = buildServeConfig(args);
    assert.deepEqual(cfg.server.modelRepositories, ['/models', '/more']);
    assert.equal(cfg.server.exitTimeoutSecs, 30);
    assert.equal(cfg.server.repositoryPollSecs, 30);
    assert.equal(cfg.grpc.maxConnectionAgeMs, 300000);
    assert.equal(cfg.grpc.maxConnectionAgeGraceMs, 30000);
    assert.deepEqual([cfg.http.port, cfg.grpc.port, cfg.metrics.port], [8000, 8001, 8002]);
  } finally {
    v.cleanup();
  }
});
