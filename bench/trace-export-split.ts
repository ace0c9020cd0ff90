/**
 * `node dist/bench/trace-export-split.js DIR`: where the OpenTelemetry export thread's CPU goes, from the V8 CPU
 * profiles in DIR of a run of the tracer-only replay under --cpu-prof (docs/tracing.md, "Cost"):
 *
 *   TRACE_PATH_ONLY=OTLP TRACE_PATH_BSP=16384,512 node --cpu-prof --cpu-prof-dir=DIR dist/bench/trace-path.js
 *
 * Of the profiles there it reads the one with the SDK's serializer in it (the export thread), and splits its busy
 * samples by what they were inside, the first that matches: the SDK's protobuf serializer, its HTTP transport,
 * the batch span processor, our records-to-spans conversion, messages from the event loop; garbage collection apart.
 * Shares, not µs: the profiler slows what it samples, so the µs per request come from the replay run without it.
 */
import { readFileSync, readdirSync } from 'node:fs';
import path from 'node:path';

interface Frame {
  readonly functionName: string;
  readonly url: string;
}
interface Profile {
  readonly nodes: ReadonlyArray<{ readonly id: number; readonly callFrame: Frame; readonly children?: number[] }>;
  readonly samples: readonly number[];
  readonly timeDeltas: readonly number[];
}

const dir = process.argv[2];
if (dir === undefined) throw new Error('usage: trace-export-split.js DIR (the --cpu-prof-dir of a trace-path run)');
const files = readdirSync(dir).filter((f) => f.endsWith('.cpuprofile')).map((f) => path.join(dir, f));
const profiles = files.map((f) => JSON.parse(readFileSync(f, 'utf8')) as Profile);
const exportThread = profiles.find((p) => p.nodes.some((n) => n.callFrame.functionName === 'serializeRequest'));
if (exportThread === undefined) throw new Error(`${dir}: no profile has the OTLP serializer in it`);

const frameOf = new Map(exportThread.nodes.map((n) => [n.id, n.callFrame]));
const parentOf = new Map<number, number>();
for (const n of exportThread.nodes) for (const c of n.children ?? []) parentOf.set(c, n.id);
const HTTP = /otlp-exporter-base|node:_http|node:net|node:stream|internal\/streams|stream_base/;
const categories: Array<[string, (stack: Frame[]) => boolean]> = [
  ['SDK protobuf serializer', (s) => s.some((f) => f.functionName === 'serializeRequest')],
  ['SDK HTTP transport, sockets', (s) => s.some((f) => HTTP.test(f.url))],
  ['batch span processor', (s) => s.some((f) => f.url.endsWith('BatchSpanProcessorBase.js'))],
  ['records to spans (ours)', (s) => s.some((f) => f.functionName === 'exportBatch')],
  [
    'messages from the event loop',
    (s) => s.some((f) => f.url.includes('messageport')) || s[0]?.functionName === 'postMessage',
  ],
];
const totals = new Map<string, number>();
let busy = 0;
for (let i = 0; i < exportThread.samples.length; i++) {
  const us = exportThread.timeDeltas[i + 1] ?? 0; // a sample stands for the time until the next one
  const stack: Frame[] = [];
  for (let id: number | undefined = exportThread.samples[i]!; id !== undefined; id = parentOf.get(id)) {
    stack.push(frameOf.get(id)!);
  }
  const leaf = stack[0]!.functionName;
  if (leaf === '(idle)') continue;
  busy += us;
  const name = leaf === '(garbage collector)' ? 'garbage collection' : categories.find(([, m]) => m(stack))?.[0];
  totals.set(name ?? 'other', (totals.get(name ?? 'other') ?? 0) + us);
}
process.stdout.write(`OTLP export thread, ${(busy / 1e6).toFixed(2)} s busy in the profile:\n`);
for (const [name, us] of [...totals].sort((a, b) => b[1] - a[1])) {
  process.stdout.write(`${((100 * us) / busy).toFixed(1).padStart(6)} %  ${name}\n`);
}
