import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import {
  cpuBudget,
  defaultSpinMicros,
  parseCfsQuota,
  parseCpuMax,
  readCgroupCpuQuota,
} from '../../src/backends/cpu-budget.js';

function fixture(files: Record<string, string>): string {
  const root = mkdtempSync(path.join(tmpdir(), 'nereid-cgroup-'));
  for (const [name, text] of Object.entries(files)) {
    mkdirSync(path.dirname(path.join(root, name)), { recursive: true });
    writeFileSync(path.join(root, name), text);
  }
  return root;
}

test('cgroup v2 cpu.max: a quota in cores, "max" is unlimited', () => {
  assert.equal(parseCpuMax('150000 100000\n'), 1.5);
  assert.equal(parseCpuMax('max 100000\n'), undefined);
  assert.equal(parseCpuMax('50000'), 0.5, 'the period defaults to 100 ms');
  assert.equal(parseCpuMax('garbage 100000'), undefined);
  assert.equal(parseCpuMax('0 100000'), undefined);
});

test('cgroup v1 cfs quota and period: a quota in cores, -1 is unlimited', () => {
  assert.equal(parseCfsQuota('200000\n', '100000\n'), 2);
  assert.equal(parseCfsQuota('-1\n', '100000\n'), undefined);
  assert.equal(parseCfsQuota('100000', '0'), undefined);
});

test('readCgroupCpuQuota reads v2 first, then v1 at the root or under cpu/ and cpu,cpuacct/', () => {
  const roots = [
    fixture({ 'cpu.max': '150000 100000\n', 'cpu.cfs_quota_us': '400000\n', 'cpu.cfs_period_us': '100000\n' }),
    fixture({ 'cpu.max': 'max 100000\n' }),
    fixture({ 'cpu,cpuacct/cpu.cfs_quota_us': '50000\n', 'cpu,cpuacct/cpu.cfs_period_us': '100000\n' }),
    fixture({ 'cpu/cpu.cfs_quota_us': '-1\n', 'cpu/cpu.cfs_period_us': '100000\n' }),
    fixture({}),
  ];
  try {
    assert.deepEqual(
      roots.map((r) => readCgroupCpuQuota(r)),
      [1.5, undefined, 0.5, undefined, undefined],
    );
  } finally {
    for (const r of roots) rmSync(r, { recursive: true, force: true });
  }
});

test('the budget is the cores capped by the quota; the busy-wait default is off under two cores', () => {
  assert.equal(cpuBudget(8, 1.5), 1.5);
  assert.equal(cpuBudget(2, undefined), 2);
  assert.equal(cpuBudget(2, 4), 2);
  assert.equal(defaultSpinMicros(300, 1.5), 0);
  assert.equal(defaultSpinMicros(300, 1), 0);
  assert.equal(defaultSpinMicros(300, 2), 300);
  assert.equal(defaultSpinMicros(300, 16), 300);
});
