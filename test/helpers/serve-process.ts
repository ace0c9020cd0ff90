/** Starts `nereid serve` as a real child process in its own process group, on free ports. */
import { spawn } from 'node:child_process';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

/** dist/src/cli/main.js of this build. */
export const NEREID_MAIN = path.resolve(
  path.dirname(fileURLToPath(import.meta.url)),
  '..',
  '..',
  'src',
  'cli',
  'main.js',
);

/** Free ports on the loopback interface for all three services. */
export const LOOPBACK_PORTS = [
  '--http-port=0',
  '--grpc-port=0',
  '--metrics-port=0',
  '--http-address=127.0.0.1',
  '--grpc-address=127.0.0.1',
];

export interface ServePorts {
  http: number;
  grpc: number;
  metrics: number;
}

export interface ServeProcess {
  /** The child's process id. */
  readonly pid: number;
  /** Resolves with the ports once the server logs that it is serving; rejects if it exits first. */
  ports: Promise<ServePorts>;
  exit: Promise<number | null>;
  stderr(): string;
  signal(signal: NodeJS.Signals): void;
  /** SIGKILLs the whole process group if it is still running (for t.after). */
  stop(): Promise<void>;
}

export interface ServeProcessOptions {
  /** The command line; default: this build's `node dist/src/cli/main.js serve`. */
  command?: readonly string[];
  env?: NodeJS.ProcessEnv;
  cwd?: string;
}

export function startServe(args: readonly string[], options: ServeProcessOptions = {}): ServeProcess {
  const [cmd, ...pre] = options.command ?? [process.execPath, NEREID_MAIN, 'serve'];
  const child = spawn(cmd!, [...pre, ...args], {
    stdio: ['ignore', 'ignore', 'pipe'],
    detached: true,
    cwd: options.cwd,
    env: { ...process.env, NEREID_LOG_LEVEL: 'info', ...options.env },
  });
  let err = '';
  let exited = false;
  const exit = new Promise<number | null>((resolve) =>
    child.on('exit', (code) => {
      exited = true;
      resolve(code);
    }),
  );
  const ports = new Promise<ServePorts>((resolve, reject) => {
    child.stderr.on('data', (d: Buffer) => {
      err += d.toString();
      for (const line of err.split('\n')) {
        if (!line.includes('nereid is serving')) continue;
        try {
          const j = JSON.parse(line) as ServePorts;
          resolve({ http: j.http, grpc: j.grpc, metrics: j.metrics });
        } catch {
          // a partial line; wait for the rest
        }
      }
    });
    void exit.then((code) => reject(new Error(`nereid serve exited with ${code} before serving:\n${err}`)));
  });
  ports.catch(() => {});
  return {
    pid: child.pid!,
    ports,
    exit,
    stderr: () => err,
    signal: (s) => child.kill(s),
    stop: async () => {
      if (exited) return;
      try {
        process.kill(-child.pid!, 'SIGKILL');
      } catch {
        // already gone
      }
      await exit;
    },
  };
}
