/**
 * `--model-memory-budget`: how much memory loaded models may hold, as bytes
 * or as a share of the memory the process may use (the container's cgroup
 * limit, else the machine's memory). See docs/paging.md.
 */
import { readFileSync } from 'node:fs';
import { totalmem } from 'node:os';
import path from 'node:path';
import { Errors } from '../errors.js';

/** The paging settings beside the budget, as `nereid serve`'s flags and ServerOptions give them. */
export interface PagingFlags {
  readonly modelMemoryBudget?: number | string;
  readonly modelPins?: readonly string[];
  readonly modelLoadWaitMs?: number;
  readonly modelMemoryHistory?: string;
}

/**
 * Refuses a paging setting that needs a budget when none is set, an empty pin or history path, and a negative
 * wait: one check for the command line and the in-process API, before anything starts.
 */
export function checkPagingFlags(f: PagingFlags): void {
  if (f.modelMemoryBudget === undefined) {
    if ((f.modelPins ?? []).length > 0) {
      throw Errors.config('--model-pin needs --model-memory-budget: without a budget no model is unloaded');
    }
    if (f.modelLoadWaitMs !== undefined) {
      throw Errors.config(
        '--model-load-wait-ms needs --model-memory-budget: without a budget no model loads on demand',
      );
    }
    if (f.modelMemoryHistory !== undefined) {
      throw Errors.config('--model-memory-history needs --model-memory-budget: without a budget nothing is paged');
    }
    return;
  }
  for (const pin of f.modelPins ?? []) if (pin.trim() === '') throw Errors.config('--model-pin needs a model name');
  if (f.modelLoadWaitMs !== undefined && f.modelLoadWaitMs < 0) {
    throw Errors.config(`--model-load-wait-ms must be 0 or more milliseconds, got ${f.modelLoadWaitMs}`);
  }
  if (f.modelMemoryHistory?.trim() === '') throw Errors.config('--model-memory-history needs a file path');
}

/** A parsed budget: a fixed size, or a percentage resolved against the memory limit. */
export type MemoryBudgetSpec = { readonly bytes: number } | { readonly percent: number };

const UNITS: Readonly<Record<string, number>> = {
  '': 1,
  b: 1,
  kb: 1e3,
  mb: 1e6,
  gb: 1e9,
  tb: 1e12,
  kib: 2 ** 10,
  mib: 2 ** 20,
  gib: 2 ** 30,
  tib: 2 ** 40,
};

/**
 * Parses `<bytes>`, `<size><unit>` (MB, GB, MiB, GiB; also B, KB, KiB, TB, TiB) or `<N>%`. Throws a config error
 * naming the flag.
 */
export function parseMemoryBudget(text: string, flag = '--model-memory-budget'): MemoryBudgetSpec {
  const m = /^\s*(\d+(?:\.\d+)?)\s*(%|[a-zA-Z]*)\s*$/.exec(text);
  const bad = (why: string) =>
    Errors.config(
      `${flag}: '${text}' ${why}; give bytes (e.g. 4294967296), a size with MB, GB, MiB or GiB (e.g. 4GiB) ` +
        'or a percentage (e.g. 60%)',
    );
  if (!m) throw bad('is not a size');
  const value = Number(m[1]);
  const unit = m[2]!;
  if (unit === '%') {
    if (!(value > 0 && value <= 100)) throw bad('is not a percentage above 0 and at most 100');
    return { percent: value };
  }
  const scale = UNITS[unit.toLowerCase()];
  if (scale === undefined) throw bad(`has an unknown unit '${unit}'`);
  if (scale === 1 && !Number.isInteger(value)) throw bad('is a fraction of a byte');
  const bytes = Math.floor(value * scale);
  if (bytes <= 0) throw bad('is not above 0');
  if (!Number.isSafeInteger(bytes)) throw bad('is too large');
  return { bytes };
}

/** v1 reports "no limit" as the largest page-aligned 64-bit value; anything this large is no limit. */
const NO_LIMIT = 2 ** 62;

function readText(file: string): string | undefined {
  try {
    return readFileSync(file, 'utf8');
  } catch {
    return undefined;
  }
}

/**
 * One line of /proc/self/mountinfo: the mount's root within its filesystem, where it is mounted, its type and
 * options.
 */
interface Mount {
  root: string;
  mountPoint: string;
  fsType: string;
  superOptions: string[];
}

/** Octal escapes (\040 for a space) as mountinfo writes them. */
function unescape(field: string): string {
  return field.replace(/\\([0-7]{3})/g, (_, o: string) => String.fromCharCode(Number.parseInt(o, 8)));
}

export function parseMountInfo(text: string): Mount[] {
  const out: Mount[] = [];
  for (const line of text.split('\n')) {
    const sep = line.indexOf(' - ');
    if (sep === -1) continue;
    const left = line.slice(0, sep).split(' ');
    const right = line.slice(sep + 3).split(' ');
    if (left.length < 5 || right.length < 3) continue;
    out.push({
      root: unescape(left[3]!),
      mountPoint: unescape(left[4]!),
      fsType: right[0]!,
      superOptions: right[2]!.split(','),
    });
  }
  return out;
}

/** The process's cgroup paths from /proc/self/cgroup: '' for the v2 hierarchy, else each v1 controller. */
export function parseProcCgroup(text: string): Map<string, string> {
  const out = new Map<string, string>();
  for (const line of text.split('\n')) {
    const m = /^\d+:([^:]*):(.*)$/.exec(line.trim());
    if (!m) continue;
    const controllers = m[1]!;
    if (controllers === '') out.set('', m[2]!);
    else for (const c of controllers.split(',')) out.set(c, m[2]!);
  }
  return out;
}

/** Parses memory.max ("max" or bytes) or memory.limit_in_bytes; undefined for no limit. */
export function parseMemoryLimit(text: string): number | undefined {
  const t = text.trim();
  if (t === 'max' || t === '' || t === '-1') return undefined;
  const n = Number(t);
  if (!Number.isFinite(n) || n <= 0 || n >= NO_LIMIT) return undefined;
  return n;
}

/**
 * The folder of `cgroupPath` under a mount of its hierarchy (the mount's root may be a part of the path, as in
 * containers).
 */
function cgroupDir(root: string, mount: Mount, cgroupPath: string): string {
  let rel = cgroupPath;
  if (mount.root !== '/' && (rel === mount.root || rel.startsWith(`${mount.root}/`))) {
    rel = rel.slice(mount.root.length);
  }
  return path.join(root, mount.mountPoint, rel);
}

/**
 * The smallest limit in `file` from `dir` up to the hierarchy's mount point (a parent's limit binds its children
 * too).
 */
function smallestLimit(dir: string, top: string, file: string): number | undefined {
  let best: number | undefined;
  for (let d = dir; ; d = path.dirname(d)) {
    const text = readText(path.join(d, file));
    const limit = text === undefined ? undefined : parseMemoryLimit(text);
    if (limit !== undefined && (best === undefined || limit < best)) best = limit;
    if (d === top || d.length <= top.length || path.dirname(d) === d) break;
  }
  return best;
}

export interface CgroupMemoryLimit {
  bytes: number;
  /** The file the limit was read from, for the start-up log. */
  file: string;
}

/**
 * The memory limit of the process's cgroup, found through `<root>/proc/self/cgroup`
 * and `<root>/proc/self/mountinfo`: cgroup v2's `memory.max`, else v1's
 * `memory.limit_in_bytes` of the memory controller. undefined when there is
 * no limit or nothing can be read. `root` lets tests point at fixture files.
 */
export function readCgroupMemoryLimit(root = '/'): CgroupMemoryLimit | undefined {
  const cgroups = parseProcCgroup(readText(path.join(root, 'proc/self/cgroup')) ?? '');
  const mounts = parseMountInfo(readText(path.join(root, 'proc/self/mountinfo')) ?? '');
  const v2 = cgroups.get('');
  const v2Mount = mounts.find((m) => m.fsType === 'cgroup2');
  if (v2 !== undefined && v2Mount) {
    const dir = cgroupDir(root, v2Mount, v2);
    const bytes = smallestLimit(dir, path.join(root, v2Mount.mountPoint), 'memory.max');
    if (bytes !== undefined) return { bytes, file: path.join(dir, 'memory.max') };
  }
  const v1 = cgroups.get('memory');
  const v1Mount = mounts.find((m) => m.fsType === 'cgroup' && m.superOptions.includes('memory'));
  if (v1 !== undefined && v1Mount) {
    const dir = cgroupDir(root, v1Mount, v1);
    const bytes = smallestLimit(dir, path.join(root, v1Mount.mountPoint), 'memory.limit_in_bytes');
    if (bytes !== undefined) return { bytes, file: path.join(dir, 'memory.limit_in_bytes') };
  }
  return undefined;
}

export interface ResolvedBudget {
  bytes: number;
  /** How the figure was reached, for the start-up log. */
  source: string;
}

/**
 * The budget in bytes: a percentage applies to the cgroup limit (capped by the machine's memory), else to the
 * machine's memory.
 */
export function resolveMemoryBudget(spec: MemoryBudgetSpec, root = '/', machineBytes = totalmem()): ResolvedBudget {
  if ('bytes' in spec) return { bytes: spec.bytes, source: 'given in bytes' };
  const cgroup = readCgroupMemoryLimit(root);
  const limit = cgroup !== undefined && cgroup.bytes < machineBytes ? cgroup : undefined;
  const base = limit?.bytes ?? machineBytes;
  return {
    bytes: Math.floor((base * spec.percent) / 100),
    source: limit
      ? `${spec.percent}% of the cgroup limit ${base} (${limit.file})`
      : `${spec.percent}% of the machine's memory ${base}`,
  };
}

/** Bytes as people read them: "40.0 MiB". */
export function formatBytes(n: number): string {
  if (n < 1024) return `${n} B`;
  const units = ['KiB', 'MiB', 'GiB', 'TiB'];
  let v = n / 1024;
  let i = 0;
  while (v >= 1024 && i < units.length - 1) {
    v /= 1024;
    i++;
  }
  return `${v.toFixed(1)} ${units[i]}`;
}
