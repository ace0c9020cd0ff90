import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import {
  type AllocatorFacts,
  NEREID_TUNABLES,
  allocatorNotes,
  NEREID_V8_FLAG,
  describeAllocator,
  describeYoungGeneration,
  planAllocator,
  processFacts,
  userYoungGeneration,
} from '../../src/cli/allocator.js';
import { TempRepository } from '../helpers/repository.js';
import { LOOPBACK_PORTS, startServe } from '../helpers/serve-process.js';

const GLIBC_LINUX: AllocatorFacts = { platform: 'linux', glibc: '2.36', canReexec: true };
const facts = (f: Partial<AllocatorFacts> = {}) => () => ({ ...GLIBC_LINUX, ...f });

/** A user's own young-generation option, so that a test of the malloc part sees the malloc part alone. */
const OWN_SEMI = ['--max-semi-space-size=8'];

test('on Linux with glibc and an untouched environment, serve ' +
  're-executes with the fixed mmap threshold and huge pages', () => {
  const plan = planAllocator({ PATH: '/usr/bin' }, facts(), OWN_SEMI);
  assert.equal(plan.kind, 'reexec');
  assert.equal(
    plan.kind === 'reexec' && plan.env['GLIBC_TUNABLES'],
    'glibc.malloc.mmap_threshold=131072:glibc.malloc.hugetlb=1',
  );
  assert.equal(plan.kind === 'reexec' && plan.env['PATH'], '/usr/bin');
  assert.deepEqual(plan.kind === 'reexec' && plan.execArgv, OWN_SEMI);
  // The re-executed process does not plan again.
  assert.equal(planAllocator(plan.kind === 'reexec' ? plan.env : {}, facts(), OWN_SEMI).kind, 'keep');
});

test("serve caps V8's semi-spaces on re-execution, ahead of the process's own options, and does not plan again", () => {
  const plan = planAllocator({}, facts(), ['--import', 'probe.js']);
  assert.equal(plan.kind, 'reexec');
  if (plan.kind !== 'reexec') return;
  assert.equal(NEREID_V8_FLAG, '--max-semi-space-size=16');
  assert.deepEqual(plan.execArgv, [NEREID_V8_FLAG, '--import', 'probe.js']);
  assert.equal(plan.env['GLIBC_TUNABLES'], NEREID_TUNABLES);
  assert.deepEqual(planAllocator(plan.env, facts(), plan.execArgv), { kind: 'keep' });
  assert.match(
    describeYoungGeneration(plan.env, plan.execArgv, true),
    new RegExp(
      String.raw`semi-spaces up to 16 MiB \(--max-semi-space-size=16, set by nereid at start; ` +
      String.raw`NODE_OPTIONS=--max-semi-space-size=0 keeps V8's own sizing\)`,
    ),
  );
});

test("the user's own young-generation option wins (command line or " +
  "NODE_OPTIONS, dashes or underscores, --max-heap-size too)", () => {
  for (const [env, execArgv, named] of [
    [{}, ['--max-semi-space-size=32'], '--max-semi-space-size=32'],
    [{}, ['--max_semi_space_size=4'], '--max_semi_space_size=4'],
    [{ NODE_OPTIONS: '--enable-source-maps --max-semi-space-size=0' }, [], '--max-semi-space-size=0'],
    [{ NODE_OPTIONS: '--min-semi-space-size=2' }, [], '--min-semi-space-size=2'],
    [{ NODE_OPTIONS: '--max-heap-size=512' }, [], '--max-heap-size=512'],
  ] as const) {
    assert.equal(userYoungGeneration(env, execArgv), named);
    const plan = planAllocator(env, facts(), execArgv);
    // Only the malloc tunables are added; the options stay as they were.
    assert.deepEqual(plan.kind === 'reexec' && plan.execArgv, execArgv, named);
    assert.equal(
      describeYoungGeneration(env, execArgv, true),
      `V8 young generation: as the options set it (${named}); nereid adds nothing`,
    );
  }
  // Options that merely start like one are not it.
  assert.equal(
    userYoungGeneration({ NODE_OPTIONS: '--max-old-space-size=4096' }, ['--max-semi-space-size-x=1']),
    undefined,
  );
});

test('with the malloc setting the user\'s own, the re-execution adds the young generation\'s cap alone', () => {
  const plan = planAllocator({ MALLOC_ARENA_MAX: '2' }, facts(), []);
  assert.equal(plan.kind, 'reexec');
  if (plan.kind !== 'reexec') return;
  assert.deepEqual(plan.execArgv, [NEREID_V8_FLAG]);
  assert.equal(plan.env['GLIBC_TUNABLES'], undefined);
  assert.equal(plan.env['NEREID_MALLOC_TUNED'], undefined);
  assert.equal(
    describeAllocator(plan.env, facts()),
    'malloc: as the environment sets it (MALLOC_ARENA_MAX=2); nereid adds nothing',
  );
  assert.deepEqual(planAllocator(plan.env, facts(), plan.execArgv), { kind: 'keep' });
  // Off glibc the same: the cap is V8's, not the C library's.
  const elsewhere = planAllocator({}, facts({ platform: 'darwin', glibc: undefined }), []);
  assert.deepEqual(elsewhere.kind === 'reexec' && [elsewhere.execArgv, elsewhere.env['GLIBC_TUNABLES']], [
    [NEREID_V8_FLAG],
    undefined,
  ]);
});

test("GLIBC_TUNABLES without malloc tunables keeps the user's and gets nereid's appended", () => {
  const plan = planAllocator({ GLIBC_TUNABLES: 'glibc.pthread.rseq=0' }, facts());
  assert.equal(plan.kind === 'reexec' && plan.env['GLIBC_TUNABLES'], `glibc.pthread.rseq=0:${NEREID_TUNABLES}`);
});

test("the user's own malloc setting wins: nereid adds nothing and says what is in effect", () => {
  for (const [env, named] of [
    [{ MALLOC_MMAP_THRESHOLD_: '65536' }, 'MALLOC_MMAP_THRESHOLD_=65536'],
    [{ MALLOC_ARENA_MAX: '2' }, 'MALLOC_ARENA_MAX=2'],
    [
      { GLIBC_TUNABLES: 'glibc.pthread.rseq=0:glibc.malloc.trim_threshold=1048576' },
      'GLIBC_TUNABLES glibc.malloc.trim_threshold=1048576',
    ],
    [
      { LD_PRELOAD: '/usr/lib/x86_64-linux-gnu/libjemalloc.so.2' },
      'LD_PRELOAD /usr/lib/x86_64-linux-gnu/libjemalloc.so.2',
    ],
  ] as const) {
    assert.deepEqual(planAllocator(env, facts(), OWN_SEMI), { kind: 'keep' }, named);
    assert.equal(describeAllocator(env, facts()), `malloc: as the environment sets it (${named}); nereid adds nothing`);
  }
});

test('NEREID_MALLOC_TUNING=off keeps glibc defaults', () => {
  const env = { NEREID_MALLOC_TUNING: 'off' };
  assert.deepEqual(planAllocator(env, facts(), OWN_SEMI), { kind: 'keep' });
  assert.match(describeAllocator(env, facts()), /defaults, sliding mmap threshold \(NEREID_MALLOC_TUNING=off\)/);
});

test('no re-execution off glibc, off Linux, or on a Node without process.execve (which the log line says)', () => {
  assert.deepEqual(planAllocator({}, facts({ glibc: undefined }), OWN_SEMI), { kind: 'keep' });
  assert.deepEqual(planAllocator({}, facts({ platform: 'darwin' }), OWN_SEMI), { kind: 'keep' });
  assert.equal(describeAllocator({}, facts({ glibc: undefined })), 'malloc: not glibc, left as it is');
  assert.deepEqual(planAllocator({}, facts({ canReexec: false })), { kind: 'keep' });
  assert.match(
    describeAllocator({}, facts({ canReexec: false })),
    new RegExp(
      String.raw`cannot re-execute itself in place; GLIBC_TUNABLES=glibc\.malloc\.mmap_threshold=131072:glibc\.malloc` +
      String.raw`\.hugetlb=1 in the environment`,
    ),
  );
  assert.match(
    describeYoungGeneration({}, [], false),
    /V8's own sizing \(Node [\d.]+ cannot re-execute itself in place; NODE_OPTIONS=--max-semi-space-size=16 caps it\)/,
  );
});

test('the facts of this process: glibc is found on a glibc Linux', () => {
  const f = processFacts();
  assert.equal(f.platform, process.platform);
  assert.equal(f.canReexec, typeof (process as { execve?: unknown }).execve === 'function');
  if (process.platform === 'linux') assert.match(f.glibc ?? 'none', /^\d+\.\d+/);
});

/** The environment the process started with (glibc cuts GLIBC_TUNABLES at its first ':' while parsing it in place). */
function startEnvironment(pid: number): Map<string, string> {
  const out = new Map<string, string>();
  for (const pair of readFileSync(`/proc/${pid}/environ`, 'utf8').split('\0')) {
    const eq = pair.indexOf('=');
    if (eq > 0) out.set(pair.slice(0, eq), pair.slice(eq + 1));
  }
  return out;
}

/**
 * Serves a repository with `env` over this environment's malloc variables (removed), and returns the start-up log and
 * environment.
 */
async function served(
  env: NodeJS.ProcessEnv,
  t: { after(fn: () => Promise<void> | void): void },
  logArgs: readonly string[] = ['--log-verbose=1'],
): Promise<{ log: string; environ: Map<string, string>; cmdline: string[] }> {
  const repo = new TempRepository().addSub('simple');
  t.after(() => repo.cleanup());
  const clean: NodeJS.ProcessEnv = {
    GLIBC_TUNABLES: undefined,
    LD_PRELOAD: undefined,
    NEREID_MALLOC_TUNING: undefined,
    NODE_OPTIONS: undefined,
  };
  for (const k of Object.keys(process.env)) if (k.startsWith('MALLOC_')) clean[k] = undefined;
  // The notes on settings in effect are verbose lines: the log shows them unless a test says otherwise.
  const s = startServe([`--model-repository=${repo.dir}`, ...LOOPBACK_PORTS, ...logArgs], {
    env: { ...clean, NEREID_LOG_LEVEL: '', ...env },
  });
  t.after(() => s.stop());
  const ports = await s.ports;
  assert.equal((await fetch(`http://127.0.0.1:${ports.http}/v2/health/ready`)).status, 200);
  // The process that serves is the one started (a re-execution keeps the PID).
  return {
    log: s.stderr(),
    environ: startEnvironment(s.pid),
    cmdline: readFileSync(`/proc/${s.pid}/cmdline`, 'utf8').split('\0'),
  };
}

const canReexec = typeof (process as { execve?: unknown }).execve === 'function';
const onGlibcLinux = process.platform === 'linux' && processFacts().glibc !== undefined;

test('nereid serve runs with the tunables in effect (on a Node that can re-execute in place) and ' +
  'logs the setting once', { skip: !onGlibcLinux && 'needs Linux with glibc' }, async (t) => {
  const { log, environ } = await served({}, t);
  const lines = log.split('\n').filter((l) => l.includes('malloc'));
  assert.equal(lines.length, 1, log);
  if (canReexec) {
    assert.match(
      lines[0]!,
      /glibc malloc: glibc\.malloc\.mmap_threshold=131072:glibc\.malloc\.hugetlb=1 \(set by nereid at start/,
    );
    assert.equal(
      environ.get('GLIBC_TUNABLES')?.startsWith('glibc.malloc.mmap_threshold=131072'),
      true,
      [...environ.keys()].join(' '),
    );
    assert.equal(environ.get('NEREID_MALLOC_TUNED'), '');
  } else {
    assert.match(lines[0]!, /defaults, sliding mmap threshold \(Node [\d.]+ cannot re-execute itself in place/);
    assert.equal(environ.has('GLIBC_TUNABLES'), false);
  }
});

test(
  "nereid serve keeps the user's own malloc variable and adds nothing",
  { skip: !onGlibcLinux && 'needs Linux with glibc' },
  async (t) => {
    const { log, environ } = await served({ MALLOC_MMAP_THRESHOLD_: '65536' }, t);
    assert.match(log, /malloc: as the environment sets it \(MALLOC_MMAP_THRESHOLD_=65536\); nereid adds nothing/);
    assert.equal(environ.get('MALLOC_MMAP_THRESHOLD_'), '65536');
    assert.equal(environ.has('GLIBC_TUNABLES'), false);
    assert.equal(environ.has('NEREID_MALLOC_TUNED'), false);
  },
);

test(
  'NEREID_MALLOC_TUNING=off serves with glibc defaults',
  { skip: !onGlibcLinux && 'needs Linux with glibc' },
  async (t) => {
    const { log, environ } = await served({ NEREID_MALLOC_TUNING: 'off' }, t);
    assert.match(log, /glibc malloc: defaults, sliding mmap threshold \(NEREID_MALLOC_TUNING=off\)/);
    assert.equal(environ.has('GLIBC_TUNABLES'), false);
    assert.equal(environ.has('NEREID_MALLOC_TUNED'), false);
  },
);

test("nereid serve runs with V8's semi-spaces capped (on a Node that can re-execute in place) " +
  "and logs it once", { skip: process.platform !== 'linux' && 'reads /proc' }, async (t) => {
  const { log, cmdline } = await served({}, t);
  const lines = log.split('\n').filter((l) => l.includes('young generation'));
  assert.equal(lines.length, 1, log);
  if (canReexec) {
    assert.match(lines[0]!, /semi-spaces up to 16 MiB \(--max-semi-space-size=16, set by nereid at start/);
    assert.equal(cmdline.filter((a) => a === NEREID_V8_FLAG).length, 1, cmdline.join(' '));
  } else {
    assert.match(lines[0]!, /cannot re-execute itself in place; NODE_OPTIONS=--max-semi-space-size=16 caps it/);
    assert.equal(cmdline.includes(NEREID_V8_FLAG), false);
  }
});

test(
  "nereid serve keeps the user's semi-space option (NODE_OPTIONS, 0 for V8's own sizing) and adds none",
  { skip: process.platform !== 'linux' && 'reads /proc' },
  async (t) => {
    const { log, cmdline } = await served({ NODE_OPTIONS: '--max-semi-space-size=0' }, t);
    assert.match(log, /V8 young generation: as the options set it \(--max-semi-space-size=0\); nereid adds nothing/);
    assert.equal(
      cmdline.some((a) => a.includes('semi-space')),
      false,
      cmdline.join(' '),
    );
  },
);

test('the memory notes are verbose when the setting is in effect, info when the operator can act', () => {
  const notes = (env: NodeJS.ProcessEnv, f: Partial<AllocatorFacts> = {}, execArgv: string[] = []) =>
    allocatorNotes(env, execArgv, facts(f)).map((n) => n.verbose);
  // Set by nereid at start (the re-executed process): both in effect.
  assert.deepEqual(notes({ NEREID_MALLOC_TUNED: '', NEREID_SEMI_SPACE_CAPPED: '1' }), [true, true]);
  // The user's own settings, glibc's defaults asked for, or no glibc: nothing to do.
  assert.deepEqual(notes({ MALLOC_ARENA_MAX: '2' }, {}, OWN_SEMI), [true, true]);
  assert.deepEqual(notes({ NEREID_MALLOC_TUNING: 'off' }, {}, OWN_SEMI), [true, true]);
  assert.deepEqual(notes({}, { glibc: undefined }, OWN_SEMI), [true, true]);
  // A Node that cannot re-execute itself: the operator can set what nereid could not.
  assert.deepEqual(notes({}, { canReexec: false }), [false, false]);
});

test(
  'at the info level, serve says nothing about memory settings that are in effect as asked',
  { skip: process.platform !== 'linux' && 'reads /proc' },
  async (t) => {
    const own = { MALLOC_MMAP_THRESHOLD_: '65536', NODE_OPTIONS: '--max-semi-space-size=0' };
    const info = await served(own, t, []);
    assert.equal(/malloc|young generation/.test(info.log), false, info.log);
    const verbose = await served(own, t);
    assert.match(verbose.log, /malloc: as the environment sets it/);
    assert.match(verbose.log, /V8 young generation: as the options set it/);
  },
);
