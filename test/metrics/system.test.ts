import { test } from 'node:test';
import assert from 'node:assert/strict';
import { cpuUtilization, findOnPath, parseMeminfo, parseNvidiaSmi, parseProcStat } from '../../src/metrics/system.js';

// As printed by `nvidia-smi --query-gpu=uuid,utilization.gpu,memory.total,memory.used,power.draw,power.limit
// --format=csv,noheader,nounits`.
const SMI = [
  'GPU-3b2f6a1e-8f4c-2d7b-9a61-0c5e4f1d2a77, 37, 81559, 1234, 65.23, 700.00',
  'GPU-7c1d0e2f-1a2b-3c4d-5e6f-708192a3b4c5, 0, 16384, 0, [N/A], [N/A]',
  '',
].join('\n');

test('nvidia-smi CSV lines become GPU samples in Triton units', () => {
  const [a, b, ...rest] = parseNvidiaSmi(SMI);
  assert.equal(rest.length, 0);
  assert.equal(a!.uuid, 'GPU-3b2f6a1e-8f4c-2d7b-9a61-0c5e4f1d2a77');
  assert.equal(a!.utilization, 0.37);
  assert.equal(a!.memoryTotalBytes, 81559 * 1024 * 1024);
  assert.equal(a!.memoryUsedBytes, 1234 * 1024 * 1024);
  assert.equal(a!.powerUsage, 65.23);
  assert.equal(a!.powerLimit, 700);
  assert.equal(b!.utilization, 0);
  assert.ok(Number.isNaN(b!.powerUsage), 'unsupported fields are NaN, not 0');
});

test('nvidia-smi error text yields no GPUs', () => {
  assert.deepEqual(
    parseNvidiaSmi('NVIDIA-SMI has failed because it could not communicate with the NVIDIA driver.\n'),
    [],
  );
});

test('CPU utilisation is the busy share of jiffies between two /proc/stat samples', () => {
  const before = parseProcStat('cpu  100 0 100 700 100 0 0 0 0 0\ncpu0 1 2 3 4\n')!;
  const after = parseProcStat('cpu  250 0 150 800 100 0 0 0 0 0\n')!;
  assert.deepEqual(before, { busy: 200, idle: 800 });
  assert.equal(cpuUtilization(after, before), 200 / 300);
  assert.equal(cpuUtilization(before, before), 0);
  assert.equal(parseProcStat('intr 1 2 3\n'), undefined);
});

test('memory used is total minus available', () => {
  assert.deepEqual(parseMeminfo('MemTotal: 1000 kB\nMemFree: 10 kB\nMemAvailable: 250 kB\n'), {
    totalBytes: 1000 * 1024,
    usedBytes: 750 * 1024,
  });
  assert.equal(parseMeminfo('MemTotal: 1000 kB\n'), undefined);
});

test('an executable missing from PATH is not found', () => {
  assert.equal(findOnPath('nvidia-smi', '/nonexistent-a:/nonexistent-b'), undefined);
  assert.ok(findOnPath('sh', '/usr/bin:/bin'));
});
