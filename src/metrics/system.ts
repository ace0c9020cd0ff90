/**
 * Host gauges: CPU utilisation and memory from /proc, GPU figures from
 * nvidia-smi when it is installed.
 */
import { execFile } from 'node:child_process';
import { accessSync, constants } from 'node:fs';
import { readFile } from 'node:fs/promises';
import { delimiter, join } from 'node:path';

/** Aggregate CPU jiffies from the first line of /proc/stat. */
export interface CpuTimes {
  busy: number;
  idle: number;
}

/** Parses the aggregate "cpu " line of /proc/stat; undefined when absent or malformed. */
export function parseProcStat(text: string): CpuTimes | undefined {
  const nl = text.indexOf('\n');
  const line = nl < 0 ? text : text.slice(0, nl);
  if (!line.startsWith('cpu ')) return undefined;
  const f = line.trim().split(/\s+/).slice(1).map(Number);
  if (f.length < 4 || f.some((n) => !Number.isFinite(n))) return undefined;
  // user nice system idle iowait irq softirq steal
  const [user = 0, nice = 0, system = 0, idle = 0, iowait = 0, irq = 0, softirq = 0, steal = 0] = f;
  return { busy: user + nice + system + irq + softirq + steal, idle: idle + iowait };
}

/** Busy share of the CPU time between two samples, in [0, 1]. */
export function cpuUtilization(now: CpuTimes, before: CpuTimes): number {
  const busy = Math.max(0, now.busy - before.busy);
  const idle = Math.max(0, now.idle - before.idle);
  return busy + idle === 0 ? 0 : busy / (busy + idle);
}

export interface MemoryFigures {
  totalBytes: number;
  usedBytes: number;
}

/** Total and used (total − available) memory from /proc/meminfo. */
export function parseMeminfo(text: string): MemoryFigures | undefined {
  let total: number | undefined;
  let available: number | undefined;
  for (const line of text.split('\n')) {
    const m = /^(MemTotal|MemAvailable):\s+(\d+)/.exec(line);
    if (!m) continue;
    const bytes = Number(m[2]) * 1024;
    if (m[1] === 'MemTotal') total = bytes;
    else available = bytes;
  }
  if (total === undefined || available === undefined) return undefined;
  return { totalBytes: total, usedBytes: Math.max(0, total - Math.min(available, total)) };
}

/** The fields asked of nvidia-smi, in this order. */
export const NVIDIA_SMI_FIELDS = [
  'uuid',
  'utilization.gpu',
  'memory.total',
  'memory.used',
  'power.draw',
  'power.limit',
] as const;

export interface GpuSample {
  uuid: string;
  /** 0–1; NaN when the driver does not say. */
  utilization: number;
  memoryTotalBytes: number;
  memoryUsedBytes: number;
  /** Watts. */
  powerUsage: number;
  powerLimit: number;
}

const MIB = 1024 * 1024;

function num(field: string | undefined): number {
  if (field === undefined) return Number.NaN;
  const t = field.trim();
  // "[N/A]", "[Not Supported]"...
  return t === '' || t.startsWith('[') ? Number.NaN : Number(t);
}

/** Parses `nvidia-smi --query-gpu=<NVIDIA_SMI_FIELDS> --format=csv,noheader,nounits` output. */
export function parseNvidiaSmi(text: string): GpuSample[] {
  const out: GpuSample[] = [];
  for (const raw of text.split('\n')) {
    const line = raw.trim();
    if (line === '') continue;
    const f = line.split(',');
    const uuid = f[0]?.trim();
    if (!uuid || f.length < NVIDIA_SMI_FIELDS.length) continue;
    out.push({
      uuid,
      utilization: num(f[1]) / 100,
      memoryTotalBytes: num(f[2]) * MIB,
      memoryUsedBytes: num(f[3]) * MIB,
      powerUsage: num(f[4]),
      powerLimit: num(f[5]),
    });
  }
  return out;
}

/** The path of an executable found on PATH, or undefined. */
export function findOnPath(name: string, pathEnv = process.env.PATH ?? ''): string | undefined {
  for (const dir of pathEnv.split(delimiter)) {
    if (!dir) continue;
    const candidate = join(dir, name);
    try {
      accessSync(candidate, constants.X_OK);
      return candidate;
    } catch {
      // not here
    }
  }
  return undefined;
}

export async function readCpuTimes(procDir: string): Promise<CpuTimes | undefined> {
  try {
    return parseProcStat(await readFile(join(procDir, 'stat'), 'utf8'));
  } catch {
    return undefined;
  }
}

export async function readMemory(procDir: string): Promise<MemoryFigures | undefined> {
  try {
    return parseMeminfo(await readFile(join(procDir, 'meminfo'), 'utf8'));
  } catch {
    return undefined;
  }
}

/** Runs nvidia-smi once; resolves with the GPUs it lists, or the reason it failed. */
export function queryNvidiaSmi(executable: string, timeoutMs = 5000): Promise<GpuSample[] | Error> {
  return new Promise((resolve) => {
    execFile(
      executable,
      [`--query-gpu=${NVIDIA_SMI_FIELDS.join(',')}`, '--format=csv,noheader,nounits'],
      { timeout: timeoutMs, encoding: 'utf8' },
      (err, stdout) => resolve(err ?? parseNvidiaSmi(stdout)),
    );
  });
}
