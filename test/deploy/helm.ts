/** Runs the real helm binary on deploy/helm/nereid and validates what it renders against the Kubernetes schemas. */
import { spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseAllDocuments } from 'yaml';
import { ConfigMap } from 'kubernetes-models/v1/ConfigMap';
import { Service } from 'kubernetes-models/v1/Service';
import { ServiceAccount } from 'kubernetes-models/v1/ServiceAccount';
import { Deployment } from 'kubernetes-models/apps/v1/Deployment';
import { HorizontalPodAutoscaler } from 'kubernetes-models/autoscaling/v2/HorizontalPodAutoscaler';
import { PodDisruptionBudget } from 'kubernetes-models/policy/v1/PodDisruptionBudget';
import { ServiceMonitor } from '@kubernetes-models/prometheus-operator/monitoring.coreos.com/v1/ServiceMonitor';
import { PrometheusRule } from '@kubernetes-models/prometheus-operator/monitoring.coreos.com/v1/PrometheusRule';
import { ScaledObject } from '@kubernetes-models/keda/keda.sh/v1alpha1/ScaledObject';

/** The repository root (dist/test/deploy -> ../../..). */
export const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..', '..');
export const CHART = path.join(ROOT, 'deploy', 'helm', 'nereid');
export const HELM = path.join(ROOT, '.tools', 'helm');

export interface K8sObject {
  apiVersion: string;
  kind: string;
  metadata: { name: string; [k: string]: unknown };
  spec?: Record<string, unknown>;
  data?: Record<string, string>;
  [k: string]: unknown;
}

type Model = new (data: never) => { validate(): void };
const MODELS: Record<string, Model> = {
  'v1/ConfigMap': ConfigMap,
  'v1/Service': Service,
  'v1/ServiceAccount': ServiceAccount,
  'apps/v1/Deployment': Deployment,
  'autoscaling/v2/HorizontalPodAutoscaler': HorizontalPodAutoscaler,
  'policy/v1/PodDisruptionBudget': PodDisruptionBudget,
  'monitoring.coreos.com/v1/ServiceMonitor': ServiceMonitor,
  'monitoring.coreos.com/v1/PrometheusRule': PrometheusRule,
  'keda.sh/v1alpha1/ScaledObject': ScaledObject,
};

/** Throws unless a schema for the object's kind exists and the object passes it. */
export function validateObject(obj: K8sObject): void {
  const Cls = MODELS[`${obj.apiVersion}/${obj.kind}`];
  if (!Cls) throw new Error(`no schema for ${obj.apiVersion} ${obj.kind} (${obj.metadata?.name})`);
  new Cls(obj as never).validate();
}

export interface HelmResult {
  status: number | null;
  stdout: string;
  stderr: string;
}

export function helm(args: readonly string[]): HelmResult {
  if (!existsSync(HELM)) throw new Error(`${HELM} is missing: run 'node scripts/fetch-helm.mjs' (npm test does)`);
  const r = spawnSync(HELM, args, {
    encoding: 'utf8',
    env: {
      ...process.env,
      HELM_CACHE_HOME: path.join(tmpdir(), 'nereid-helm-cache'),
      HELM_CONFIG_HOME: path.join(tmpdir(), 'nereid-helm-config'),
    },
  });
  return { status: r.status, stdout: r.stdout, stderr: r.stderr };
}

/** Writes each values text to a temporary file and returns `-f` arguments for them, plus a cleanup. */
export function valuesFiles(...texts: string[]): { args: string[]; cleanup: () => void } {
  const dir = mkdtempSync(path.join(tmpdir(), 'nereid-values-'));
  const args = texts.flatMap((text, i) => {
    const file = path.join(dir, `values-${i}.yaml`);
    writeFileSync(file, text);
    return ['-f', file];
  });
  return { args, cleanup: () => rmSync(dir, { recursive: true, force: true }) };
}

/** `helm template` the chart; throws with helm's message when it fails. */
export function render(args: readonly string[] = []): K8sObject[] {
  const r = helm(['template', 'nereid', CHART, '--namespace', 'ml', ...args]);
  if (r.status !== 0) throw new Error(`helm template failed (${r.status}): ${r.stderr}`);
  return parseAllDocuments(r.stdout)
    .map((d) => d.toJS() as K8sObject | null)
    .filter((o): o is K8sObject => o !== null);
}

export function only(objects: readonly K8sObject[], kind: string): K8sObject {
  const found = objects.filter((o) => o.kind === kind);
  if (found.length !== 1) throw new Error(`expected one ${kind}, rendered ${found.length}`);
  return found[0]!;
}
