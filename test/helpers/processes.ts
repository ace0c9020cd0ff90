/** Small helpers for tests that run real servers: free ports, process groups, waiting. */
import { spawn, spawnSync, type ChildProcess, type SpawnOptions } from 'node:child_process';
import { createServer } from 'node:net';

export async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const srv = createServer();
    srv.once('error', reject);
    srv.listen(0, '127.0.0.1', () => {
      const { port } = srv.address() as { port: number };
      srv.close(() => resolve(port));
    });
  });
}

/** True when the executable is on PATH. */
export function hasCommand(cmd: string): boolean {
  return spawnSync('sh', ['-c', `command -v ${cmd}`], { stdio: 'ignore' }).status === 0;
}

/**
 * What a test does when a tool it needs is missing: outside CI it is skipped
 * with the reason; in CI (CI=true) the missing tool is a failure.
 */
export function missingTools(tools: readonly string[]): string | undefined {
  const missing = tools.filter((t) => !hasCommand(t));
  if (missing.length === 0) return undefined;
  const reason = `missing ${missing.join(', ')} (scripts/system-deps.sh installs them)`;
  if (process.env.CI === 'true') throw new Error(reason);
  return reason;
}

/** Starts a process in its own process group (stopped with `stopGroup`). */
export function spawnGroup(cmd: string, args: readonly string[], options: SpawnOptions = {}): ChildProcess {
  const child = spawn(cmd, args, { stdio: 'ignore', ...options, detached: true });
  child.unref();
  return child;
}

/** SIGTERM to the child's process group, SIGKILL after `graceMs`; resolves once it exited. */
export async function stopGroup(child: ChildProcess, graceMs = 10_000): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null || child.pid === undefined) return;
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  const signal = (s: NodeJS.Signals): void => {
    try {
      process.kill(-child.pid!, s);
    } catch {
      // already gone
    }
  };
  signal('SIGTERM');
  const timer = setTimeout(() => signal('SIGKILL'), graceMs);
  await exited;
  clearTimeout(timer);
}

/** Polls `probe` until it returns true, or throws after `timeoutMs` with `what`. */
export async function waitFor(what: string, probe: () => Promise<boolean>, timeoutMs = 60_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    if (await probe().catch(() => false)) return;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 200));
  }
}

/** Runs a command to completion; throws with its output when it fails. */
export async function run(cmd: string, args: readonly string[], timeoutMs = 60_000): Promise<string> {
  return new Promise((resolve, reject) => {
    const child = spawn(cmd, args, { stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    child.stdout!.on('data', (d: Buffer) => (out += d.toString()));
    child.stderr!.on('data', (d: Buffer) => (out += d.toString()));
    const timer = setTimeout(() => child.kill('SIGKILL'), timeoutMs);
    child.on('error', reject);
    child.on('exit', (code, signal) => {
      clearTimeout(timer);
      if (code === 0) resolve(out);
      else reject(new Error(`${cmd} ${args.join(' ')} failed (${signal ?? code}): ${out.slice(-2000)}`));
    });
  });
}
