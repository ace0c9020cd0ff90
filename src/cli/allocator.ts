/**
 * The memory settings `nereid serve` starts with: glibc's mmap threshold held
 * at 128 KiB with huge pages for large mappings, so bursts of large bodies do
 * not leave the main heap at its high-water mark, and V8's young generation
 * capped, so steady load does not grow it step by step. glibc reads tunables
 * only at start, hence the re-execution in place (same PID). The user's own
 * setting always wins. Why, and the figures: docs/memory.md.
 */

/** The threshold set: glibc's own starting value, kept fixed. */
export const MMAP_THRESHOLD_BYTES = 131072;
/** What nereid adds to GLIBC_TUNABLES (hugetlb=1: mappings of 2 MiB and more are asked for transparent huge pages). */
export const NEREID_TUNABLES = `glibc.malloc.mmap_threshold=${MMAP_THRESHOLD_BYTES}:glibc.malloc.hugetlb=1`;
/** `off` keeps glibc's defaults. */
export const OPT_OUT_VAR = 'NEREID_MALLOC_TUNING';
/** Marks the re-executed process; its value is GLIBC_TUNABLES as the user had it ('' when unset). */
const MARK_VAR = 'NEREID_MALLOC_TUNED';
/**
 * The largest semi-space of V8's young generation (MiB) that nereid starts the server with: Node 20's own bound.
 * 4 MiB tripled the scavenges of small requests (GC 12-14 % of the event loop's time against 4-5 %): docs/memory.md.
 */
export const SEMI_SPACE_MB = 16;
/** The V8 option nereid adds on re-execution. */
export const NEREID_V8_FLAG = `--max-semi-space-size=${SEMI_SPACE_MB}`;
/** Marks a re-executed process whose V8 option nereid added. */
const V8_MARK_VAR = 'NEREID_SEMI_SPACE_CAPPED';

type Execve = (file: string, args: readonly string[], env: NodeJS.ProcessEnv) => never;

export interface AllocatorFacts {
  readonly platform: NodeJS.Platform;
  /** glibc's version when the process runs on glibc. */
  readonly glibc: string | undefined;
  readonly canReexec: boolean;
}

export type AllocatorPlan =
  | { readonly kind: 'reexec'; readonly env: NodeJS.ProcessEnv; readonly execArgv: readonly string[] }
  | { readonly kind: 'keep' };

/**
 * The user's own malloc setting, if any: a MALLOC_* variable, a glibc.malloc tunable, or another allocator preloaded.
 */
function userSetting(env: NodeJS.ProcessEnv): string | undefined {
  const vars = Object.keys(env)
    .filter((k) => k.startsWith('MALLOC_'))
    .sort();
  if (vars.length > 0) return vars.map((k) => `${k}=${env[k]}`).join(' ');
  const tunables = (env['GLIBC_TUNABLES'] ?? '').split(':').filter((t) => t.startsWith('glibc.malloc.'));
  if (tunables.length > 0) return `GLIBC_TUNABLES ${tunables.join(':')}`;
  const preload = /[^\s:]*(?:jemalloc|tcmalloc|mimalloc)[^\s:]*/.exec(env['LD_PRELOAD'] ?? '');
  return preload === null ? undefined : `LD_PRELOAD ${preload[0]}`;
}

function optedOut(env: NodeJS.ProcessEnv): boolean {
  return (env[OPT_OUT_VAR] ?? '').toLowerCase() === 'off';
}

/**
 * The user's own young-generation sizing, if any: a semi-space option or --max-heap-size, on the command line or in
 * NODE_OPTIONS.
 */
export function userYoungGeneration(env: NodeJS.ProcessEnv, execArgv: readonly string[]): string | undefined {
  const options = [...execArgv, ...(env['NODE_OPTIONS'] ?? '').split(/\s+/)];
  return options.find((o) => /^--(?:(?:max|min)-semi-space-size|max-heap-size)(?:=|$)/.test(o.replace(/_/g, '-')));
}

function mallocPlanned(env: NodeJS.ProcessEnv, f: AllocatorFacts): boolean {
  return (
    env[MARK_VAR] === undefined &&
    !optedOut(env) &&
    userSetting(env) === undefined &&
    f.platform === 'linux' &&
    f.glibc !== undefined
  );
}

/**
 * What to do at start: re-execute with the malloc tunables and the young generation's cap
 * (whichever of the two the user has not set), or run as is.
 */
export function planAllocator(
  env: NodeJS.ProcessEnv,
  facts: () => AllocatorFacts,
  execArgv: readonly string[] = [],
): AllocatorPlan {
  if (env[MARK_VAR] !== undefined || env[V8_MARK_VAR] !== undefined) return { kind: 'keep' };
  const f = facts();
  if (!f.canReexec) return { kind: 'keep' };
  const malloc = mallocPlanned(env, f);
  const v8 = userYoungGeneration(env, execArgv) === undefined;
  if (!malloc && !v8) return { kind: 'keep' };
  const out: NodeJS.ProcessEnv = { ...env };
  if (malloc) {
    const before = env['GLIBC_TUNABLES'];
    out['GLIBC_TUNABLES'] = before === undefined || before === '' ? NEREID_TUNABLES : `${before}:${NEREID_TUNABLES}`;
    out[MARK_VAR] = before ?? '';
  }
  if (v8) out[V8_MARK_VAR] = '1';
  return { kind: 'reexec', env: out, execArgv: v8 ? [NEREID_V8_FLAG, ...execArgv] : [...execArgv] };
}

/**
 * A start-up line about memory sizing. `verbose`: a note for whoever reads the verbose log (the setting is in
 * effect, nothing to do); otherwise an operator can act on it (an info line).
 */
export interface StartupNote {
  readonly text: string;
  readonly verbose: boolean;
}

/** One line for the start-up log: the young generation's sizing this process runs with, and why. */
export function describeYoungGeneration(
  env: NodeJS.ProcessEnv,
  execArgv: readonly string[],
  canReexec: boolean,
): string {
  if (env[V8_MARK_VAR] !== undefined) {
    return `V8 young generation: semi-spaces up to ${SEMI_SPACE_MB} MiB (${NEREID_V8_FLAG}, ` +
      `set by nereid at start; NODE_OPTIONS=--max-semi-space-size=0 keeps V8's own sizing)`;
  }
  const user = userYoungGeneration(env, execArgv);
  if (user !== undefined) return `V8 young generation: as the options set it (${user}); nereid adds nothing`;
  return canReexec
    ? "V8 young generation: V8's own sizing"
    : `V8 young generation: V8's own sizing (Node ${process.versions.node} cannot ` +
      `re-execute itself in place; NODE_OPTIONS=${NEREID_V8_FLAG} caps it)`;
}

/** One line for the start-up log: which malloc setting this process runs with, and why. */
export function describeAllocator(env: NodeJS.ProcessEnv, facts: () => AllocatorFacts): string {
  if (env[MARK_VAR] !== undefined) {
    return `glibc malloc: ${NEREID_TUNABLES} (set by nereid at start; ${OPT_OUT_VAR}=off keeps glibc's defaults)`;
  }
  const user = userSetting(env);
  if (user !== undefined) return `malloc: as the environment sets it (${user}); nereid adds nothing`;
  const f = facts();
  if (f.platform !== 'linux' || f.glibc === undefined) return 'malloc: not glibc, left as it is';
  if (optedOut(env)) return `glibc malloc: defaults, sliding mmap threshold (${OPT_OUT_VAR}=off)`;
  return (
    `glibc malloc: defaults, sliding mmap threshold (Node ` +
    `${process.versions.node} cannot re-execute itself in place; ` +
    `GLIBC_TUNABLES=${NEREID_TUNABLES} in the environment bounds what bursts of large requests leave resident)`
  );
}

/**
 * The start-up notes on malloc and the young generation. Only a setting Nereid wanted but could not make (this Node
 * cannot re-execute itself) is for the operator; the rest says what is in effect, at verbose.
 */
export function allocatorNotes(
  env: NodeJS.ProcessEnv,
  execArgv: readonly string[],
  facts: () => AllocatorFacts,
): StartupNote[] {
  const mallocLeftToOperator =
    env[MARK_VAR] === undefined &&
    userSetting(env) === undefined &&
    facts().platform === 'linux' &&
    facts().glibc !== undefined &&
    !optedOut(env);
  const youngLeftToOperator =
    env[V8_MARK_VAR] === undefined && userYoungGeneration(env, execArgv) === undefined && !facts().canReexec;
  return [
    { text: describeAllocator(env, facts), verbose: !mallocLeftToOperator },
    { text: describeYoungGeneration(env, execArgv, facts().canReexec), verbose: !youngLeftToOperator },
  ];
}

/** The facts of this process (glibc is read from the diagnostic report's header, about 2 ms). */
export function processFacts(): AllocatorFacts {
  let glibc: string | undefined;
  if (process.platform === 'linux') {
    // excludeNetwork (Node 20.13 and later) skips the report's socket listing, most of its cost.
    const report = process.report as NodeJS.ProcessReport & { excludeNetwork?: boolean };
    const excluded = report.excludeNetwork;
    report.excludeNetwork = true;
    try {
      const header = (report.getReport() as { header?: { glibcVersionRuntime?: string } }).header;
      glibc = header?.glibcVersionRuntime;
    } finally {
      report.excludeNetwork = excluded;
    }
  }
  return {
    platform: process.platform,
    glibc,
    canReexec: typeof (process as { execve?: Execve }).execve === 'function',
  };
}

/**
 * Re-executes this process in place with the threshold and the young generation's
 * cap set, when the plan says so (this call then does not return). Otherwise returns
 * the lines to log, and takes the variables nereid set out of the environment its
 * children inherit (a Python stub gets the user's environment, not nereid's tuning).
 */
export function applyAllocatorTuning(): StartupNote[] {
  let cached: AllocatorFacts | undefined;
  const facts = (): AllocatorFacts => (cached ??= processFacts());
  const plan = planAllocator(process.env, facts, process.execArgv);
  if (plan.kind === 'reexec') {
    const execve = (process as { execve?: Execve }).execve!;
    execve(process.execPath, [process.execPath, ...plan.execArgv, ...process.argv.slice(1)], plan.env);
  }
  const lines = allocatorNotes(process.env, process.execArgv, facts);
  const before = process.env[MARK_VAR];
  if (before !== undefined) {
    delete process.env[MARK_VAR];
    if (before === '') delete process.env['GLIBC_TUNABLES'];
    else process.env['GLIBC_TUNABLES'] = before;
  }
  delete process.env[V8_MARK_VAR];
  return lines;
}
