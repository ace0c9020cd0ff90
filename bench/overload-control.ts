/**
 * The controls of an overload point: what the machine leaves the server when
 * refusals cost the server nothing. At F× capacity, (F−1)/F of the load is
 * refused. "Excess elsewhere" runs the same generator at the same F×
 * capacity on the same even clock, but sends the server only its 1× share and
 * the rest, on connections of their own, to a separate process that refuses
 * every request as cheaply as node:http can (bench/naive-server.ts --refuse).
 * The generator's work, the refusals' CPU and the load the server can take
 * are then what they are under overload; only where the refusals run
 * differs. Goodput there no better than under overload means the shortfall is
 * the machine's (the cores the load and its refusals take), not the server's
 * handling of the excess. "1× alone" is the server's share with no excess at
 * all: an open loop at exactly capacity. See docs/batching.md#overload-goodput.
 */
import { spawn } from 'node:child_process';
import path from 'node:path';
import { DIST } from './processes.js';
import type { HttpBody } from './wrk.js';

/** What bench/open-loop.ts prints (the fields read here). */
export interface GeneratorResult {
  sent: number;
  okInWindow: number;
  refused: number;
  otherErrors: number;
  okP99us: number;
  seconds: number;
  cpuSeconds: number;
  excessSent: number;
  excessRefused: number;
  excessDropped: number;
}

/** Runs bench/open-loop.ts once with `config` (its JSON), under `prefix` (e.g. ["nice", "-n", "5"]). */
export function runGenerator<T = GeneratorResult>(config: object, prefix: readonly string[] = []): Promise<T> {
  const command = [...prefix, process.execPath, path.join(DIST, 'bench', 'open-loop.js'), JSON.stringify(config)];
  return new Promise((resolve, reject) => {
    const child = spawn(command[0]!, command.slice(1), { stdio: ['ignore', 'pipe', 'inherit'] });
    let out = '';
    child.stdout.on('data', (c: Buffer) => (out += c.toString()));
    child.on('error', reject);
    child.on('exit', (code) => {
      try {
        resolve(JSON.parse(out) as T);
      } catch {
        reject(new Error(`open-loop generator exited with ${code}: ${out}`));
      }
    });
  });
}

/** An even-clock open loop at `rate` to `port` over 1024 connections; with `excess`, that share goes elsewhere. */
export function evenLoad(
  port: number,
  urlPath: string,
  body: HttpBody,
  rate: number,
  seconds: number,
  excess?: { port: number; share: number },
): Record<string, unknown> {
  return {
    port,
    path: urlPath,
    headers: body.headers,
    bodyBase64: body.body.toString('base64'),
    rate,
    seconds,
    connections: 1024,
    maxConnections: 1024,
    warmPath: '/v2/health/live',
    ...(excess === undefined ? {} : { excessPort: excess.port, excessShare: excess.share }),
  };
}

export interface ControlFigures {
  /** The server's goodput (answers within the clock, per second) with the excess refused elsewhere. */
  elsewhereOkPerSec: number;
  /** Refusals per second by the refusing process meanwhile. */
  elsewhereRefusedPerSec: number;
  /** The generator's CPU meanwhile, % of one core. */
  elsewhereGeneratorPct: number;
  /** The server's goodput at 1× with no excess. */
  aloneOkPerSec: number;
}

/** The two controls of an overload point at `factor`× `capacity` (requests per second). */
export async function overloadControl(
  server: { port: number; urlPath: string },
  refuserPort: number,
  body: HttpBody,
  capacity: number,
  factor: number,
  seconds: number,
): Promise<ControlFigures> {
  const excess = { port: refuserPort, share: (factor - 1) / factor };
  const split = await runGenerator(evenLoad(server.port, server.urlPath, body, capacity * factor, seconds, excess));
  const alone = await runGenerator(evenLoad(server.port, server.urlPath, body, capacity, seconds));
  return {
    elsewhereOkPerSec: split.okInWindow / split.seconds,
    elsewhereRefusedPerSec: split.excessRefused / split.seconds,
    elsewhereGeneratorPct: (100 * split.cpuSeconds) / split.seconds,
    aloneOkPerSec: alone.okInWindow / alone.seconds,
  };
}
