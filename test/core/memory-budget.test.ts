/**
 * --model-memory-budget: the sizes it takes, and the cgroup limit a percentage reads (v1 and v2 layouts as
 * fixture files).
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { parseMemoryBudget, readCgroupMemoryLimit, resolveMemoryBudget } from '../../src/core/memory-budget.js';
import { buildServeConfig } from '../../src/cli/serve.js';
import { NereidError } from '../../src/errors.js';

const GiB = 2 ** 30;

test('a budget is bytes, a size with a unit, or a percentage', () => {
  assert.deepEqual(parseMemoryBudget('1073741824'), { bytes: GiB });
  assert.deepEqual(parseMemoryBudget('4GiB'), { bytes: 4 * GiB });
  assert.deepEqual(parseMemoryBudget('512MiB'), { bytes: 512 * 2 ** 20 });
  assert.deepEqual(parseMemoryBudget('1.5GB'), { bytes: 1.5e9 });
  assert.deepEqual(parseMemoryBudget('300MB'), { bytes: 3e8 });
  assert.deepEqual(parseMemoryBudget('60%'), { percent: 60 });
  assert.deepEqual(parseMemoryBudget('12.5%'), { percent: 12.5 });
});

test('a malformed budget is a configuration error naming the flag, the text and what is wrong', () => {
  const cases: Array<[string, RegExp]> = [
    ['', /is not a size/],
    ['lots', /is not a size/],
    ['-1', /is not a size/],
    ['1e9', /is not a size/],
    ['12XB', /unknown unit 'XB'/],
    ['0', /is not above 0/],
    ['0%', /percentage above 0 and at most 100/],
    ['150%', /percentage above 0 and at most 100/],
    ['1.5', /fraction of a byte/],
  ];
  for (const [text, why] of cases) {
    assert.throws(
      () => parseMemoryBudget(text),
      (err: unknown) => {
        assert.ok(err instanceof NereidError);
        assert.equal(err.code, 'NRD_CONFIG');
        assert.match(err.message, /^--model-memory-budget: /);
        assert.ok(err.message.includes(`'${text}'`), err.message);
        assert.match(err.message, why);
        return true;
      },
      text,
    );
  }
});

test('nereid serve refuses a bad budget, and a pin, a load wait or a history without a budget, before starting', () => {
  const refuses = (argv: string[], why: RegExp) => assert.throws(() => buildServeConfig(argv), why);
  refuses(['--model-memory-budget=12XB'], /--model-memory-budget: '12XB' has an unknown unit/);
  refuses(['--model-pin=a'], /--model-pin needs --model-memory-budget/);
  refuses(['--model-load-wait-ms=10'], /--model-load-wait-ms needs --model-memory-budget/);
  refuses(['--model-memory-budget=1GiB', '--model-load-wait-ms=-5'], /--model-load-wait-ms must be 0 or more/);
  refuses(['--model-memory-budget=1GiB', '--model-load-wait-ms=soon'], /takes an integer/);
  refuses(['--model-memory-history=/var/lib/nereid/paging.json'], /--model-memory-history needs --model-memory-budget/);
  refuses(['--model-memory-budget=1GiB', '--model-memory-history='], /--model-memory-history needs a file path/);
  const cfg = buildServeConfig([
    '--model-memory-budget=50%',
    '--model-pin=a',
    '--model-pin=b',
    '--model-load-wait-ms=500',
    '--model-memory-history=paging.json',
  ]);
  assert.equal(cfg.server.modelMemoryBudget, '50%');
  assert.deepEqual(cfg.server.modelPins, ['a', 'b']);
  assert.equal(cfg.server.modelLoadWaitMs, 500);
  assert.equal(cfg.server.modelMemoryHistory, 'paging.json');
  assert.equal(buildServeConfig([]).server.modelMemoryBudget, undefined);
});

/** A fake root holding the given files (paths relative to it). */
function fixtureRoot(t: { after(fn: () => void): void }, files: Record<string, string>): string {
  const root = mkdtempSync(path.join(tmpdir(), 'nereid-cgroup-'));
  t.after(() => rmSync(root, { recursive: true, force: true }));
  for (const [rel, text] of Object.entries(files)) {
    mkdirSync(path.dirname(path.join(root, rel)), { recursive: true });
    writeFileSync(path.join(root, rel), text);
  }
  return root;
}

const V2_MOUNT =
  '30 23 0:26 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:4 - ' +
  'cgroup2 cgroup2 rw,nsdelegate,memory_recursiveprot\n';

test('cgroup v2: memory.max of the process cgroup, the smallest on the way up to the mount', (t) => {
  const root = fixtureRoot(t, {
    'proc/self/cgroup': '0::/kubepods/pod1/c1\n',
    'proc/self/mountinfo': `22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw\n${V2_MOUNT}`,
    'sys/fs/cgroup/memory.max': 'max\n',
    'sys/fs/cgroup/kubepods/memory.max': 'max\n',
    'sys/fs/cgroup/kubepods/pod1/memory.max': '1073741824\n',
    'sys/fs/cgroup/kubepods/pod1/c1/memory.max': '2147483648\n',
  });
  const limit = readCgroupMemoryLimit(root);
  assert.equal(limit?.bytes, GiB);
  assert.equal(limit?.file, path.join(root, 'sys/fs/cgroup/kubepods/pod1/c1/memory.max'));
  const budget = resolveMemoryBudget({ percent: 50 }, root, 16 * GiB);
  assert.equal(budget.bytes, GiB / 2);
  assert.match(budget.source, /50% of the cgroup limit 1073741824/);
});

test('cgroup v2 in a container (cgroup namespace): the cgroup is the mount root itself', (t) => {
  const root = fixtureRoot(t, {
    'proc/self/cgroup': '0::/\n',
    'proc/self/mountinfo': V2_MOUNT,
    'sys/fs/cgroup/memory.max': '536870912\n',
  });
  assert.equal(readCgroupMemoryLimit(root)?.bytes, 512 * 2 ** 20);
});

test("cgroup v2 with no limit ('max' all the way up): the machine's memory", (t) => {
  const root = fixtureRoot(t, {
    'proc/self/cgroup': '0::/user.slice/session-1.scope\n',
    'proc/self/mountinfo': V2_MOUNT,
    'sys/fs/cgroup/user.slice/session-1.scope/memory.max': 'max\n',
    'sys/fs/cgroup/user.slice/memory.max': 'max\n',
  });
  assert.equal(readCgroupMemoryLimit(root), undefined);
  const budget = resolveMemoryBudget({ percent: 25 }, root, 8 * GiB);
  assert.equal(budget.bytes, 2 * GiB);
  assert.match(budget.source, /25% of the machine's memory/);
});

const V1_MOUNTS = [
  '25 22 0:22 / /sys/fs/cgroup ro,nosuid,nodev,noexec shared:9 - tmpfs tmpfs ro,mode=755',
  '33 25 0:29 /docker/abc /sys/fs/cgroup/memory rw,nosuid,nodev,noexec,relatime shared:15 - cgroup cgroup rw,memory',
  '34 25 0:30 /docker/abc /sys/fs/cgroup/cpu,cpuacct rw,nosuid,nodev,noexec,relatime shared:16 - ' +
    'cgroup cgroup rw,cpu,cpuacct',
  '',
].join('\n');

test('cgroup v1: the memory controller\'s memory.limit_in_bytes, the container mount root taken off the path', (t) => {
  const root = fixtureRoot(t, {
    'proc/self/cgroup': '12:memory:/docker/abc\n11:cpu,cpuacct:/docker/abc\n1:name=systemd:/docker/abc\n',
    'proc/self/mountinfo': V1_MOUNTS,
    'sys/fs/cgroup/memory/memory.limit_in_bytes': '268435456\n',
  });
  assert.equal(readCgroupMemoryLimit(root)?.bytes, 256 * 2 ** 20);
  assert.equal(resolveMemoryBudget({ percent: 50 }, root, 16 * GiB).bytes, 128 * 2 ** 20);
});

test("cgroup v1 without a limit (the kernel's largest value) is no limit", (t) => {
  const root = fixtureRoot(t, {
    'proc/self/cgroup': '12:memory:/docker/abc\n',
    'proc/self/mountinfo': V1_MOUNTS,
    'sys/fs/cgroup/memory/memory.limit_in_bytes': '9223372036854771712\n',
  });
  assert.equal(readCgroupMemoryLimit(root), undefined);
});

test('hybrid layout: a v2 mount without memory.max falls back to the v1 memory controller', (t) => {
  const root = fixtureRoot(t, {
    'proc/self/cgroup': '0::/user.slice\n4:memory:/user.slice\n',
    'proc/self/mountinfo': [
      '31 25 0:27 / /sys/fs/cgroup/unified rw,nosuid,nodev,noexec,relatime shared:10 - cgroup2 cgroup2 rw,nsdelegate',
      '35 25 0:31 / /sys/fs/cgroup/memory rw,nosuid,nodev,noexec,relatime shared:17 - cgroup cgroup rw,memory',
      '',
    ].join('\n'),
    'sys/fs/cgroup/memory/user.slice/memory.limit_in_bytes': '3221225472\n',
  });
  assert.equal(readCgroupMemoryLimit(root)?.bytes, 3 * GiB);
});

test('a cgroup limit above the machine memory is capped by the machine; bytes are taken as given', (t) => {
  const root = fixtureRoot(t, {
    'proc/self/cgroup': '0::/\n',
    'proc/self/mountinfo': V2_MOUNT,
    'sys/fs/cgroup/memory.max': String(64 * GiB),
  });
  assert.equal(resolveMemoryBudget({ percent: 50 }, root, 8 * GiB).bytes, 4 * GiB);
  assert.equal(resolveMemoryBudget({ bytes: 12345 }, root, 8 * GiB).bytes, 12345);
});

test('no readable cgroup files at all: the machine memory', (t) => {
  const root = fixtureRoot(t, {});
  assert.equal(readCgroupMemoryLimit(root), undefined);
  assert.equal(resolveMemoryBudget({ percent: 10 }, root, 10 * GiB).bytes, GiB);
});
