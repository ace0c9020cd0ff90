/** Starting and stopping the servers a benchmark compares. */
import { type ChildProcess, spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

export const DIST = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');

/**
 * Ports this process has handed out: servers started together each listen on
 * ports of their own, although the kernel may offer a port again once the
 * probe that found it has closed.
 */
const handedOut = new Set<number>();

export async function freePort(): Promise<number> {
  for (;;) {
    const port = await new Promise<number>((resolve, reject) => {
      const s = net.createServer();
      s.listen(0, '127.0.0.1', () => {
        const { port } = s.address() as net.AddressInfo;
        s.close(() => resolve(port));
      });
      s.on('error', reject);
    });
    if (!handedOut.has(port)) {
      handedOut.add(port);
      return port;
    }
  }
}

/** Polls `url` for a 200; stops early with an error when `proc` (the server behind it) has exited. */
export async function waitForHttp(url: string, timeoutMs = 60000, proc?: Proc): Promise<void> {
  const end = Date.now() + timeoutMs;
  while (Date.now() < end) {
    if (proc?.hasExited() === true) {
      const how = proc.child.exitCode ?? proc.child.signalCode;
      throw new Error(`${url}: the server exited (${how}) before it was ready`);
    }
    try {
      const r = await fetch(url);
      if (r.status === 200) return;
    } catch {
      // not up yet
    }
    await new Promise((r) => setTimeout(r, 200));
  }
  throw new Error(`${url} did not become ready in ${timeoutMs} ms`);
}

export class Proc {
  private exited: Promise<void>;
  constructor(readonly child: ChildProcess) {
    this.exited = new Promise((resolve) => child.on('exit', () => resolve()));
  }
  hasExited(): boolean {
    return this.child.exitCode !== null || this.child.signalCode !== null;
  }
  async stop(): Promise<void> {
    if (this.child.exitCode !== null) return;
    this.child.kill('SIGTERM');
    const t = setTimeout(() => this.child.kill('SIGKILL'), 10000);
    await this.exited;
    clearTimeout(t);
  }
}

/**
 * `env` adds to this process's environment; an undefined value removes a variable. `onStdout` gets its standard
 * output (otherwise discarded), `onStderr` its standard error (the server's log; otherwise this process's).
 */
export function startNode(
  script: string,
  args: string[],
  env: Record<string, string | undefined> = {},
  nodeArgs: readonly string[] = [],
  onStdout?: (text: string) => void,
  onStderr?: (text: string) => void,
): Proc {
  const child = spawn(process.execPath, [...nodeArgs, script, ...args], {
    stdio: ['ignore', onStdout === undefined ? 'ignore' : 'pipe', onStderr === undefined ? 'inherit' : 'pipe'],
    env: { ...process.env, NEREID_LOG_LEVEL: 'warn', ...env },
  });
  if (onStdout !== undefined) child.stdout!.on('data', (chunk: Buffer) => onStdout(chunk.toString()));
  if (onStderr !== undefined) child.stderr!.on('data', (chunk: Buffer) => onStderr(chunk.toString()));
  return new Proc(child);
}

export interface NodeLaunch {
  readonly env?: Record<string, string | undefined>;
  readonly nodeArgs?: readonly string[];
  /** The dist folder of the build to start (default: this one). */
  readonly dist?: string;
  /** Receives the server's standard output (e.g. V8's --trace-gc lines). */
  readonly onStdout?: (text: string) => void;
  /** Receives the server's standard error (its log). */
  readonly onStderr?: (text: string) => void;
}

export async function startNereid(
  repo: string,
  extra: string[] = [],
  launch: NodeLaunch = {},
): Promise<{ proc: Proc; http: number; grpc: number; metrics: number }> {
  // Another program may still take a port between the probe and the server's listen: then the server exits at once,
  // and it is started again on new ports.
  for (let attempt = 1; ; attempt += 1) {
    const started = await startNereidOn(repo, extra, launch);
    if (started !== undefined) return started;
    if (attempt === 3) throw new Error('nereid exited before it was ready, three times (see its log above)');
  }
}

async function startNereidOn(
  repo: string,
  extra: string[],
  launch: NodeLaunch,
): Promise<{ proc: Proc; http: number; grpc: number; metrics: number } | undefined> {
  const [http, grpc, metrics] = [await freePort(), await freePort(), await freePort()];
  const proc = startNode(path.join(launch.dist ?? DIST, 'src', 'cli', 'main.js'), [
    'serve',
    `--model-repository=${repo}`,
    `--http-port=${http}`,
    `--grpc-port=${grpc}`,
    `--metrics-port=${metrics}`,
    '--http-address=127.0.0.1',
    '--grpc-address=127.0.0.1',
    ...extra,
  ], launch.env, launch.nodeArgs, launch.onStdout, launch.onStderr);
  try {
    await waitForHttp(`http://127.0.0.1:${http}/v2/health/ready`, 60000, proc);
  } catch (err) {
    if (!proc.hasExited()) throw err;
    return undefined;
  }
  return { proc, http, grpc, metrics };
}

/** `noSpin`: one intra-op thread, no spinning; 'refuse': every request gets a full queue's 503 (naive-server.ts). */
export async function startNaive(
  modelFile: string,
  noSpin: boolean | 'refuse' = false,
): Promise<{ proc: Proc; port: number }> {
  const port = await freePort();
  const proc = startNode(path.join(DIST, 'bench', 'naive-server.js'), [
    modelFile,
    String(port),
    ...(noSpin === 'refuse' ? ['--refuse'] : noSpin ? ['--no-spin'] : []),
  ]);
  const end = Date.now() + 30000;
  while (Date.now() < end) {
    try {
      await fetch(`http://127.0.0.1:${port}/`, { method: 'POST', body: '{}' });
      return { proc, port };
    } catch {
      await new Promise((r) => setTimeout(r, 200));
    }
  }
  throw new Error('naive server did not start');
}

const CLOCK_TICKS_PER_SECOND = 100;

/** CPU seconds (user + system) of one thread of `pid` (the main thread's id is the pid), or of the whole process. */
export function cpuSeconds(pid: number, tid?: number): number {
  const file = tid === undefined ? `/proc/${pid}/stat` : `/proc/${pid}/task/${tid}/stat`;
  const text = readFileSync(file, 'utf8');
  // Fields after the command name (which may hold spaces), counted from field 3.
  const fields = text.slice(text.lastIndexOf(')') + 2).split(' ');
  return (Number(fields[11]) + Number(fields[12])) / CLOCK_TICKS_PER_SECOND;
}
