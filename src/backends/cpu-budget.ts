/**
 * The CPU the process may use: the machine's cores, capped by a cgroup CPU
 * quota (a container's CPU limit). Backends size their waiting strategy
 * from it: a session thread that busy-waits holds a core, which a pod with a
 * limit of one or one and a half cores pays for in throttling.
 */
import { readFileSync } from 'node:fs';
import { availableParallelism } from 'node:os';
import path from 'node:path';

/** cgroup v2 `cpu.max` ("<quota> <period>" or "max <period>"): the quota in cores, or undefined when unlimited. */
export function parseCpuMax(text: string): number | undefined {
  const [quota, period] = text.trim().split(/\s+/);
  if (quota === undefined || quota === 'max') return undefined;
  return coresOf(Number(quota), period === undefined ? 100_000 : Number(period));
}

/** cgroup v1 `cpu.cfs_quota_us` and `cpu.cfs_period_us`: the quota in cores, or undefined when unlimited (-1). */
export function parseCfsQuota(quotaText: string, periodText: string): number | undefined {
  return coresOf(Number(quotaText.trim()), Number(periodText.trim()));
}

function coresOf(quota: number, period: number): number | undefined {
  if (!Number.isFinite(quota) || !Number.isFinite(period) || quota <= 0 || period <= 0) return undefined;
  return quota / period;
}

function readText(file: string): string | undefined {
  try {
    return readFileSync(file, 'utf8');
  } catch {
    return undefined;
  }
}

/**
 * The cgroup CPU quota in cores under `root` (default /sys/fs/cgroup), or
 * undefined when there is none or it cannot be read: cgroup v2 `cpu.max`
 * first, then cgroup v1's `cpu.cfs_quota_us` / `cpu.cfs_period_us` (at the
 * root or under `cpu/` or `cpu,cpuacct/`).
 */
export function readCgroupCpuQuota(root = '/sys/fs/cgroup'): number | undefined {
  const max = readText(path.join(root, 'cpu.max'));
  if (max !== undefined) return parseCpuMax(max);
  for (const dir of ['', 'cpu', 'cpu,cpuacct']) {
    const quota = readText(path.join(root, dir, 'cpu.cfs_quota_us'));
    const period = readText(path.join(root, dir, 'cpu.cfs_period_us'));
    if (quota !== undefined && period !== undefined) return parseCfsQuota(quota, period);
  }
  return undefined;
}

/** Cores the process may keep busy: the machine's, capped by the cgroup quota. */
export function cpuBudget(cores = availableParallelism(), quota = readCgroupCpuQuota()): number {
  return quota === undefined ? cores : Math.min(cores, quota);
}

let cached: number | undefined;
/** cpuBudget() of this process, read once. */
export function processCpuBudget(): number {
  cached ??= cpuBudget();
  return cached;
}

/**
 * The default busy-wait of a backend's thread after a run (µs): `spinMicros`
 * when the process has two cores or more to itself, 0 below that, where a
 * spinning thread would take the core the event loop needs (and, under a
 * quota, be throttled for it).
 */
export function defaultSpinMicros(spinMicros: number, budget = processCpuBudget()): number {
  return budget < 2 ? 0 : spinMicros;
}
