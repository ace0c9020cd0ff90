/**
 * JSON output text formatted on the session thread.
 *
 * Writing a float as JSON text costs the event loop far more than moving its
 * four bytes (768 FP32 values: about 120 µs, more than the rest of the
 * request), and the event loop is the one thread every request passes
 * through. When the caller will write an output as JSON (the request's
 * jsonOutputs hint), the session thread that ran the model can format the
 * text right after the run, with the same encodeJsonTensorData, and hand it
 * back with the bytes; the event loop then only copies it.
 *
 * A request waits for the formatting either way (after the run, before its
 * reply), so moving it pays when it puts an idle core to work: the medium
 * MLP's 768 FP32 outputs under dynamic batching at concurrency 32 left a
 * core partly idle while the loop wrote 32 replies in a row after each
 * batch, and served about a sixth faster with the text formatted on the
 * thread. It does not pay when every core is busy anyway (unbatched, two
 * instances' threads and the loop kept both cores of a small machine busy,
 * and formatting on the threads came out about 5 % slower), nor when the
 * thread becomes the bottleneck (one thread formats every request of a
 * dynamic batch). The event loop's utilisation is no guide (it read 70 % in
 * the batched case). So each instance keeps the share of its requests whose
 * text goes to the thread and balances it every WINDOW_NS of runs from the
 * thread's busy share over the window (from its timestamps: taking a run up
 * to having written its results and texts) and the spare CPU (spareCores:
 * idle cores of the machine, within what the process may use): up by
 * SHARE_UP while the thread was busy less than THREAD_ROOM and SPARE_CORES
 * or more were idle, down by SHARE_DOWN while the thread was busy more than
 * THREAD_FULL or less than SPARE_MIN was idle. A request whose
 * text stays on the loop still has it formatted on the thread when it is
 * large (LARGE_TEXT_ELEMENTS values or more, counted by the thread from the
 * real output shape): formatting it on the loop would stall every other
 * request for milliseconds. Requests that want binary data are skipped, and
 * runs made inline (on the event loop already) never ask.
 */
import { closeSync, openSync, readSync } from 'node:fs';
import { cpus } from 'node:os';
import { DATATYPES, type Datatype } from '../../../tensor/datatype.js';
import { processCpuBudget } from '../../cpu-budget.js';
import type { BackendRequest } from '../../backend.js';
import type { ModelPlan } from '../plan.js';
import {
  SLICE_FORMAT,
  SLICE_IF_LARGE,
  SLICE_SKIP,
  TextPlan,
  TextRequest,
  arenaTypeCode,
  sliceWord,
} from '../thread/worker-protocol.js';

/** Texts of this many values or more are always formatted on the thread. */
export const LARGE_TEXT_ELEMENTS = 16384;
/** How often the share is balanced: after runs spanning this much time, ns. */
export const WINDOW_NS = 25_000_000;
/** The thread has room for more below this busy share of a window. */
export const THREAD_ROOM = 0.75;
/** The thread is the bottleneck above this busy share of a window. */
export const THREAD_FULL = 0.9;
/** Idle cores from which the share may grow. */
export const SPARE_CORES = 0.2;
/** Idle cores below which the share shrinks. */
export const SPARE_MIN = 0.05;
export const SHARE_UP = 0.1;
export const SHARE_DOWN = 0.05;

/** The last reading of spareCores(), shared by every policy for a window (processCores: what the process used). */
let spare = { atNs: 0, cores: 0, idleMs: 0, totalMs: 0, processUs: 0, processCores: 0 };

/** The machine's cores, counted once (os.cpus() costs 150-300 µs on a virtual machine). */
let machineCores = 0;
const statHead = Buffer.alloc(256);
/** false once /proc/stat could not be read (not Linux): os.cpus() from then on. */
let procStat = true;

/**
 * Idle and total time summed over the machine's cores, in any unit. On
 * Linux from the first line of /proc/stat (about 20 µs; os.cpus(), which
 * also reads every core's frequency, cost 150-300 µs, twice per window, on
 * the event loop), else from os.cpus(). The same fields os.cpus() sums.
 */
function machineTimes(): { idleMs: number; totalMs: number } {
  if (procStat) {
    try {
      const fd = openSync('/proc/stat', 'r');
      let n: number;
      try {
        n = readSync(fd, statHead, 0, statHead.byteLength, 0);
      } finally {
        closeSync(fd);
      }
      const line = statHead.toString('latin1', 0, n);
      const end = line.indexOf('\n');
      // cpu  user nice system idle iowait irq softirq steal ...
      const f = line.slice(0, end === -1 ? n : end).trim().split(/\s+/);
      if (f[0] === 'cpu' && f.length >= 7) {
        const [user, nice, system, idle, , irq] = f.slice(1, 7).map(Number) as [
          number,
          number,
          number,
          number,
          number,
          number,
        ];
        return { idleMs: idle, totalMs: user + nice + system + idle + irq };
      }
    } catch {
      // not Linux, or no /proc
    }
    procStat = false;
  }
  let idleMs = 0;
  let totalMs = 0;
  for (const c of cpus()) {
    const t = c.times;
    idleMs += t.idle;
    totalMs += t.user + t.nice + t.sys + t.idle + t.irq;
  }
  return { idleMs, totalMs };
}

/**
 * Cores that were idle over the last window (read at most once a window):
 * the machine's idle cores, but no more than the process's CPU budget
 * (cores, or its cgroup quota) leaves beside what it used itself.
 */
export function spareCores(nowNs: number): number {
  if (nowNs - spare.atNs < WINDOW_NS) return spare.cores;
  const { idleMs, totalMs } = machineTimes();
  const u = process.cpuUsage();
  const processUs = u.user + u.system;
  const spanNs = nowNs - spare.atNs;
  let cores = 0;
  let processCores = 0;
  if (spare.atNs > 0 && totalMs > spare.totalMs) {
    const n = machineCores === 0 ? (machineCores = cpus().length) : machineCores;
    const machineIdle = (n * (idleMs - spare.idleMs)) / (totalMs - spare.totalMs);
    processCores = ((processUs - spare.processUs) * 1000) / spanNs;
    const budgetLeft = processCpuBudget() - processCores;
    cores = Math.max(0, Math.min(machineIdle, budgetLeft));
  }
  spare = { atNs: nowNs, cores, idleMs, totalMs, processUs, processCores };
  return cores;
}

/** The cores the process used over the window of the last spareCores() reading. */
export function processCoresUsed(): number {
  return spare.processCores;
}

/** Datatypes whose JSON the thread formats: numbers and booleans (their text is ASCII). */
const FORMATTED = new Set<Datatype>([
  'BOOL',
  'UINT8',
  'UINT16',
  'UINT32',
  'UINT64',
  'INT8',
  'INT16',
  'INT32',
  'INT64',
  'FP32',
  'FP64',
]);
const DATATYPE_INDEX = new Map<Datatype, number>(DATATYPES.map((d, i) => [d.name, i]));

let forcedShare: number | undefined;

/**
 * Makes every policy use `share` instead of its balanced one (tests that
 * need one path or the other whatever the machine's load); returns the
 * function that puts the balancing back.
 */
export function forceJsonTextShare(share: number): () => void {
  forcedShare = share;
  return () => {
    forcedShare = undefined;
  };
}

/** One instance's balance between formatting JSON text on the event loop and on its session thread. */
export class JsonTextPolicy {
  /** Share of the requests wanting JSON whose text the thread formats, 0..1. */
  share = 0;
  /** The thread's busy share of the last window. */
  threadBusy = 0;
  /** Requests owed to the thread by the share, carried from run to run. */
  private credit = 0;
  private windowStartNs = 0;
  private busyNs = 0;

  constructor(private readonly plan: ModelPlan) {}

  /** The texts a run asks its thread for, or undefined when none. `fetches` are the run's outputs in order. */
  textPlan(requests: readonly BackendRequest[], fetches: readonly string[]): TextPlan | undefined {
    let hinted = false;
    for (let i = 0; i < requests.length; i++) if (requests[i]!.jsonOutputs !== undefined) hinted = true;
    if (!hinted) return undefined;
    const plan = this.plan;
    const batching = plan.maxBatchSize > 0;
    const share = forcedShare ?? this.share;
    // Per request: all its texts on the thread, or only the large ones.
    const modes = new Array<number>(requests.length);
    for (let i = 0; i < requests.length; i++) {
      if (requests[i]!.jsonOutputs === undefined) continue;
      this.credit += share;
      if (this.credit >= 1) {
        this.credit -= 1;
        modes[i] = SLICE_FORMAT;
      } else modes[i] = SLICE_IF_LARGE;
    }
    let out: TextRequest[] | undefined;
    for (let f = 0; f < fetches.length; f++) {
      const name = fetches[f]!;
      const p = plan.outputsByName.get(name);
      if (p === undefined || !FORMATTED.has(p.datatype)) continue;
      const slices = new Array<number>(requests.length);
      let wanted = false;
      for (let i = 0; i < requests.length; i++) {
        const r = requests[i]!;
        const wants =
          r.jsonOutputs?.wantsJson(name) === true &&
          r.requestedOutputs.includes(name) &&
          r.embeddingText?.output !== name;
        slices[i] = sliceWord(batching ? r.batchSize : 0, wants ? modes[i]! : SLICE_SKIP);
        if (wants) wanted = true;
      }
      if (!wanted) continue;
      (out ??= []).push(
        new TextRequest(
          f,
          DATATYPE_INDEX.get(p.datatype)!,
          arenaTypeCode(p.ortType),
          batching,
          batching ? slices : [slices[0]!],
        ),
      );
    }
    return out === undefined ? undefined : new TextPlan(out, LARGE_TEXT_ELEMENTS);
  }

  /**
   * A run on the thread finished: the thread's timestamps of taking it up and writing its results; `nowNs` the main
   * thread's clock.
   */
  recordRun(pickedNs: number, doneNs: number, nowNs: number): void {
    if (!(doneNs >= pickedNs && pickedNs > 0)) return;
    if (this.windowStartNs === 0) this.windowStartNs = pickedNs;
    this.busyNs += doneNs - pickedNs;
    const span = nowNs - this.windowStartNs;
    if (span < WINDOW_NS) return;
    this.threadBusy = Math.min(1, this.busyNs / span);
    this.balance(this.threadBusy, spareCores(nowNs));
    this.windowStartNs = nowNs;
    this.busyNs = 0;
  }

  /** One balancing step from a window's readings: the thread's busy share and the idle cores. */
  balance(threadBusy: number, idleCores: number): void {
    if (threadBusy < THREAD_ROOM && idleCores >= SPARE_CORES) this.share = Math.min(1, this.share + SHARE_UP);
    else if (threadBusy > THREAD_FULL || idleCores < SPARE_MIN) this.share = Math.max(0, this.share - SHARE_DOWN);
  }
}
