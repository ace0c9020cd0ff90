/**
 * `node dist/bench/sequence.js` (section `sequence` of bench/run.ts): a
 * stateful accumulator (OUTPUT = STATE_OUT = STATE_IN + INPUT, FP32 [64])
 * with 64 live sequences at concurrency 64 under the sequence batcher
 * (oldest strategy, the state kept by the server), against the same ONNX
 * model without sequences under the dynamic batcher, where each client
 * carries its own state: it asks for STATE_OUT and sends it back as the next
 * STATE_IN. One server, binary HTTP, alternating rounds (each pair of rounds
 * in turn sequence-first and dynamic-first).
 *
 * The machine is shared and its speed swings by several times within
 * seconds, so a total over a few long rounds says more about when the load
 * came than about the schedulers. The figure judged is the median, over the
 * pairs, of the ratio between two adjacent short rounds; beside it, the
 * server's CPU time per request in each way (from /proc, all its threads),
 * which the load moves far less.
 *
 * Environment: BENCH_SECONDS (per way, default 3), BENCH_ROUNDS (alternating pairs, default 10).
 */
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { Pool } from 'undici';
import { buildAccumulatorModel } from '../test/helpers/onnx-builder.js';
import { startNereid } from './processes.js';

const SECONDS = Number(process.env.BENCH_SECONDS ?? 3);
const SEQUENCES = 64;
const SIZE = 64;
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 10);

function fmt(n: number, digits = 0): string {
  return n.toLocaleString('en-US', { maximumFractionDigits: digits, minimumFractionDigits: digits });
}

function median(xs: readonly number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  const m = s.length >> 1;
  return s.length % 2 === 1 ? s[m]! : (s[m - 1]! + s[m]!) / 2;
}

/** CPU time (user + system, all threads) a process has used, in ms (Linux; clock ticks of 10 ms). */
function cpuMs(pid: number): number {
  const fields = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]!.split(' ');
  return (Number(fields[11]) + Number(fields[12])) * 10;
}

const repo = mkdtempSync(path.join(tmpdir(), 'nereid-bench-seq-'));
const onnx = buildAccumulatorModel('FP32', SIZE).toBytes();
const io = `input [ { name: "INPUT" data_type: TYPE_FP32 dims: [ ${SIZE} ] } ]
output [ { name: "OUTPUT" data_type: TYPE_FP32 dims: [ ${SIZE} ] } ]`;
const models: Record<string, string> = {
  acc_sequence: `platform: "onnxruntime_onnx"
max_batch_size: ${SEQUENCES}
sequence_batching {
  max_sequence_idle_microseconds: 60000000
  oldest { max_candidate_sequences: ${SEQUENCES} }
  state [ { input_name: "STATE_IN" output_name: "STATE_OUT" data_type: TYPE_FP32 dims: [ ${SIZE} ] } ]
}
${io}
instance_group [ { kind: KIND_CPU count: 1 } ]
`,
  acc_dynamic: `platform: "onnxruntime_onnx"
max_batch_size: ${SEQUENCES}
dynamic_batching { }
input [ { name: "INPUT" data_type: TYPE_FP32 dims: [ ${SIZE} ] },
  { name: "STATE_IN" data_type: TYPE_FP32 dims: [ ${SIZE} ] } ]
output [ { name: "OUTPUT" data_type: TYPE_FP32 dims: [ ${SIZE} ] },
  { name: "STATE_OUT" data_type: TYPE_FP32 dims: [ ${SIZE} ] } ]
instance_group [ { kind: KIND_CPU count: 1 } ]
`,
};
for (const [name, config] of Object.entries(models)) {
  const dir = path.join(repo, name);
  mkdirSync(path.join(dir, '1'), { recursive: true });
  writeFileSync(path.join(dir, 'config.pbtxt'), config);
  writeFileSync(path.join(dir, '1', 'model.onnx'), onnx);
}

const ones = Buffer.from(new Float32Array(SIZE).fill(1).buffer);
const zeros = Buffer.alloc(SIZE * 4);

function binaryRequest(header: object, ...tensors: Buffer[]): { body: Buffer; headers: Record<string, string> } {
  const json = Buffer.from(JSON.stringify(header));
  return {
    body: Buffer.concat([json, ...tensors]),
    headers: { 'Inference-Header-Content-Length': String(json.byteLength), 'Content-Type': 'application/octet-stream' },
  };
}

const tensor = (name: string) => ({
  name,
  datatype: 'FP32',
  shape: [1, SIZE],
  parameters: { binary_data_size: SIZE * 4 },
});
const outputs = [{ name: 'OUTPUT', parameters: { binary_data: true } }];
const sequenceBody = (id: number, start: boolean, end = false) =>
  binaryRequest(
    { parameters: { sequence_id: id, sequence_start: start, sequence_end: end }, inputs: [tensor('INPUT')], outputs },
    ones,
  );
const dynamicHeader = {
  inputs: [tensor('INPUT'), tensor('STATE_IN')],
  outputs: [...outputs, { name: 'STATE_OUT', parameters: { binary_data: true } }],
};
const dynamicBody = (state: Buffer) => binaryRequest(dynamicHeader, ones, state);

const nereid = await startNereid(repo, []);
const pool = new Pool(`http://127.0.0.1:${nereid.http}`, { connections: SEQUENCES });
let errors = 0;
try {
  const post = async (model: string, r: { body: Buffer; headers: Record<string, string> }): Promise<Buffer> => {
    const res = await pool.request({
      method: 'POST',
      path: `/v2/models/${model}/infer`,
      body: r.body,
      headers: r.headers,
    });
    const chunks: Buffer[] = [];
    for await (const c of res.body) chunks.push(c as Buffer);
    if (res.statusCode !== 200) {
      errors += 1;
      if (errors === 1) process.stderr.write(`${model}: ${res.statusCode} ${Buffer.concat(chunks).toString()}\n`);
    }
    return Buffer.concat(chunks);
  };

  // The sequences accumulate: after a START and two more requests each element is 3.
  for (const start of [true, false, false]) await post('acc_sequence', sequenceBody(1, start));
  const check = await post('acc_sequence', sequenceBody(1, false, true));
  if (check.readFloatLE(check.byteLength - 4) !== 4) throw new Error('the accumulator did not keep its state');

  /**
   * 64 workers, each its own sequence (START on its first request of the round, END after the time is up), for
   * `seconds`.
   */
  const round = async (sequences: boolean, seconds: number, base: number): Promise<number> => {
    const end = Date.now() + seconds * 1000;
    let done = 0;
    await Promise.all(
      Array.from({ length: SEQUENCES }, async (_, w) => {
        const id = base + w;
        const first = sequenceBody(id, true);
        const next = sequenceBody(id, false);
        let state: Buffer = zeros;
        let n = 0;
        while (Date.now() < end) {
          if (sequences) {
            await post('acc_sequence', n === 0 ? first : next);
          } else {
            // The state comes back last (STATE_OUT) and goes out again as STATE_IN.
            const reply = await post('acc_dynamic', dynamicBody(state));
            state = reply.subarray(reply.byteLength - SIZE * 4);
          }
          n += 1;
        }
        // Ending frees the slot for the next round's sequences.
        if (sequences) {
          await post('acc_sequence', sequenceBody(id, n === 0, true));
          n += 1;
        }
        done += n;
      }),
    );
    return done;
  };

  await round(true, 0.5, 1000);
  await round(false, 0.5, 0);
  const pid = nereid.proc.child.pid!;
  const totals = { sequence: { n: 0, s: 0, cpu: 0 }, dynamic: { n: 0, s: 0, cpu: 0 } };
  const ratios: number[] = [];
  const timed = async (sequences: boolean, base: number): Promise<number> => {
    const cpu0 = cpuMs(pid);
    const t0 = process.hrtime.bigint();
    const n = await round(sequences, SECONDS / ROUNDS, base);
    const s = Number(process.hrtime.bigint() - t0) / 1e9;
    const t = sequences ? totals.sequence : totals.dynamic;
    t.n += n;
    t.s += s;
    t.cpu += cpuMs(pid) - cpu0;
    return n / s;
  };
  for (let r = 0; r < ROUNDS; r++) {
    let seq: number;
    let dyn: number;
    if (r % 2 === 0) {
      seq = await timed(true, 10_000 * (r + 1));
      dyn = await timed(false, 0);
    } else {
      dyn = await timed(false, 0);
      seq = await timed(true, 10_000 * (r + 1));
    }
    ratios.push(seq / dyn);
  }
  const seqPerSec = totals.sequence.n / totals.sequence.s;
  const dynPerSec = totals.dynamic.n / totals.dynamic.s;
  const cpuPerReq = (t: { n: number; cpu: number }) => (t.cpu * 1000) / t.n;
  process.stdout.write(
    `\nAccumulator FP32 [${SIZE}], ${SEQUENCES} live sequences at concurrency ${SEQUENCES}, ` +
    `binary HTTP, ${SECONDS}s per way (${ROUNDS} alternating pairs of rounds)\n`,
  );
  process.stdout.write(`${'scheduler'.padEnd(46)}  ${'infer/s'.padStart(10)}  ${'server CPU us/infer'.padStart(20)}\n`);
  process.stdout.write(
    `${'sequence batcher (oldest, server-side state)'.padEnd(46)}  ` +
    `${fmt(seqPerSec).padStart(10)}  ${fmt(cpuPerReq(totals.sequence), 1).padStart(20)}\n`,
  );
  process.stdout.write(
    `${'dynamic batcher (client carries the state)'.padEnd(46)}  ` +
    `${fmt(dynPerSec).padStart(10)}  ${fmt(cpuPerReq(totals.dynamic), 1).padStart(20)}\n`,
  );
  process.stdout.write(`per pair sequence / dynamic: ${ratios.map((x) => fmt(x, 2)).join(' ')}\n`);
  process.stdout.write(
    `sequence / dynamic: ${fmt(median(ratios), 2)}x median of pairs ` +
    `(bar: >= 0.8x), ${fmt(seqPerSec / dynPerSec, 2)}x of totals; ` +
      `CPU per infer ${fmt(cpuPerReq(totals.dynamic) / cpuPerReq(totals.sequence), 2)}x; errors: ${errors}\n`,
  );
} finally {
  await pool.close();
  await nereid.proc.stop();
  rmSync(repo, { recursive: true, force: true });
}
