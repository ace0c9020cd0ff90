/**
 * Drives an HTTP endpoint with wrk (one thread, as measured in the issue) and
 * reads back throughput and latency percentiles through a Lua done() hook.
 */
import { spawn } from 'node:child_process';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';

export interface WrkResult {
  requestsPerSec: number;
  p50us: number;
  p99us: number;
  /** The quartiles around the median (how a latency spreads: one mode, or two). */
  p25us: number;
  p75us: number;
  errors: number;
  non2xx: number;
  /** Requests completed, and the run's length in seconds. */
  requests: number;
  seconds: number;
}

export interface HttpBody {
  body: Buffer;
  headers: Record<string, string>;
  /** Default POST. */
  method?: string;
  /** More requests (same method): they take turns with this one, so answers vary as a real client's do. */
  more?: readonly HttpBody[];
}

/** wrk's Lua strings take any bytes when written as decimal escapes. */
function luaString(buf: Buffer): string {
  let s = '"';
  for (const b of buf) {
    if (b >= 0x20 && b < 0x7f && b !== 0x22 && b !== 0x5c) s += String.fromCharCode(b);
    // Three digits always: a shorter escape followed by a digit would read as a longer one.
    else s += `\\${String(b).padStart(3, '0')}`;
  }
  return `${s}"`;
}

function script(req: HttpBody): string {
  const headers = Object.entries(req.headers)
    .map(([k, v]) => `wrk.headers[${JSON.stringify(k)}] = ${JSON.stringify(v)}`)
    .join('\n');
  // Each request is formatted once (wrk.format adds its Content-Length); request() only picks the next.
  const table = (h: Record<string, string>) =>
    `{ ${Object.entries(h).map(([k, v]) => `[${JSON.stringify(k)}] = ${JSON.stringify(v)}`).join(', ')} }`;
  const turns =
    req.more === undefined || req.more.length === 0
      ? ''
      : `local turns = { ${[req, ...req.more].map((r) => `{ ${luaString(r.body)}, ${table(r.headers)} }`).join(',\n')} }
local reqs = {}
local turn = 0
function init(args)
  for i, t in ipairs(turns) do
    t[2]["Host"] = wrk.headers["Host"]
    reqs[i] = wrk.format(nil, nil, t[2], t[1])
  end
end
function request()
  turn = turn % #reqs + 1
  return reqs[turn]
end
`;
  return `wrk.method = "${req.method ?? 'POST'}"
wrk.body = ${req.body.byteLength > 0 ? luaString(req.body) : 'nil'}
${headers}
${turns}function done(summary, latency, requests)
  local errs = summary.errors.connect + summary.errors.read + summary.errors.write + summary.errors.timeout
  io.write(string.format("NEREID_RESULT %f %f %f %d %d %d %f %f %f\\n",
    summary.requests / (summary.duration / 1e6), latency:percentile(50), latency:percentile(99), errs,
    summary.errors.status,
    summary.requests, summary.duration / 1e6, latency:percentile(25), latency:percentile(75)))
end
`;
}

export async function runWrk(url: string, req: HttpBody, connections: number, seconds: number): Promise<WrkResult> {
  const dir = mkdtempSync(path.join(tmpdir(), 'nereid-wrk-'));
  const file = path.join(dir, 'req.lua');
  writeFileSync(file, script(req));
  const out = await new Promise<string>((resolve, reject) => {
    const p = spawn('wrk', ['-t1', `-c${connections}`, `-d${seconds}s`, '--timeout', '10s', '-s', file, url], {
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let text = '';
    p.stdout.on('data', (d) => (text += d));
    p.stderr.on('data', (d) => (text += d));
    p.on('error', reject);
    p.on('close', () => resolve(text));
  });
  const m = /NEREID_RESULT (\S+) (\S+) (\S+) (\d+) (\d+) (\d+) (\S+) (\S+) (\S+)/.exec(out);
  if (!m) throw new Error(`wrk produced no result:\n${out}`);
  return {
    requestsPerSec: Number(m[1]),
    p50us: Number(m[2]),
    p99us: Number(m[3]),
    errors: Number(m[4]),
    non2xx: Number(m[5]),
    requests: Number(m[6]),
    seconds: Number(m[7]),
    p25us: Number(m[8]),
    p75us: Number(m[9]),
  };
}
