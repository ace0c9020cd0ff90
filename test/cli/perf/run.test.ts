import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { runPerf } from '../../../src/cli/perf/index.js';
import { Capture, FakeV2Server, type FakeServerOptions, SIMPLE_MODEL } from './fake-v2-server.js';

const tmp = mkdtempSync(join(tmpdir(), 'nereid-perf-'));

/**
 * Short windows and stability switched off in effect: these tests check behaviour, not timing (stability has its own
 * tests).
 */
const FAST = ['-p', '150', '-s', '1000000', '-r', '5'];

async function withServer(
  opts: Partial<FakeServerOptions>,
  fn: (s: FakeV2Server) => Promise<void>,
): Promise<void> {
  const server = new FakeV2Server({ models: [SIMPLE_MODEL], ...opts });
  await server.start();
  try {
    await fn(server);
  } finally {
    await server.stop();
  }
}

async function run(args: string[]): Promise<{ code: number; out: string; err: string }> {
  const stdout = new Capture();
  const stderr = new Capture();
  const code = await runPerf(args, { stdout, stderr });
  return { code, out: stdout.text, err: stderr.text };
}

test('measures a model over HTTP and prints perf_analyzer blocks, summary and CSV', async () => {
  await withServer({}, async (s) => {
    const csv = join(tmp, 'run.csv');
    const r = await run(['-m', 'simple', '-u', s.url, ...FAST, '--concurrency-range', '1:2', '-b', '2', '-f', csv]);
    assert.equal(r.code, 0, r.err);
    assert.match(r.out, /\*\*\* Measurement Settings \*\*\*\n {2}Batch size: 2\n/);
    assert.match(
      r.out,
      /Request concurrency: 1\n {2}Client: \n {4}Request count: \d+\n {4}Throughput: [\d.]+ infer\/sec\n/,
    );
    assert.match(r.out, /Request concurrency: 2\n/);
    assert.match(
      r.out,
      / {4}p99 latency: \d+ usec\n {4}Avg HTTP time: \d+ usec \(send\/recv \d+ usec \+ response wait \d+ usec\)/,
    );
    // The fake server books 1 + 2 + 30 + 3 us plus 4 us overhead per request.
    assert.match(
      r.out,
      new RegExp(
        String.raw`Avg request latency: 40 usec \(overhead 4 usec \+ queue 1 usec \+ compute input 2 usec \+ compute ` +
        String.raw`infer 30 usec \+ compute output 3 usec\)`,
      ),
    );
    assert.match(
      r.out,
      new RegExp(
        String.raw`Inferences\/Second vs\. Client Average Batch Latency\nConcurrency: 1, throughput: [\d.e+]+ ` +
        String.raw`infer\/sec, latency \d+ usec\nConcurrency: 2, `,
      ),
    );
    // Server-side inference count is twice the request count at batch 2.
    const block = /Request concurrency: 1[\s\S]*?Successful request count: (\d+)/.exec(r.out)!;
    const inf = /Request concurrency: 1[\s\S]*?Inference count: (\d+)/.exec(r.out)!;
    assert.equal(Number(inf[1]), 2 * Number(block[1]));

    const lines = readFileSync(csv, 'utf8').trimEnd().split('\n');
    assert.equal(lines.length, 3);
    assert.equal(lines[0]!.split(',').length, 13);
    assert.ok(lines.slice(1).every((l) => l.split(',').length === 13 && /^\d+,[\d.e+]+,/.test(l)));

    // Binary tensor format by default: both INT32[2,16] inputs sent as 128 raw bytes each.
    const first = s.infers[0]!;
    assert.ok(first.headerLengthHeader);
    assert.equal(first.binaryLength, 2 * 2 * 16 * 4);
    assert.deepEqual((first.header['inputs'] as Array<{ shape: number[] }>)[0]!.shape, [2, 16]);
    assert.deepEqual(first.header['outputs'], [
      { name: 'OUTPUT0', parameters: { binary_data: true } },
      { name: 'OUTPUT1', parameters: { binary_data: true } },
    ]);
  });
});

test('JSON tensor format and an input-data file', async () => {
  await withServer({}, async (s) => {
    const file = join(tmp, 'data.json');
    const row = Array.from({ length: 16 }, (_, i) => i);
    writeFileSync(file, JSON.stringify({ data: [{ INPUT0: row, INPUT1: row }] }));
    const r = await run([
      '-m',
      'simple',
      '-u',
      s.url,
      ...FAST,
      '--input-data',
      file,
      '--input-tensor-format',
      'json',
      '--output-tensor-format',
      'json',
    ]);
    assert.equal(r.code, 0, r.err);
    const first = s.infers[0]!;
    assert.equal(first.headerLengthHeader, undefined);
    assert.deepEqual((first.header['inputs'] as Array<{ data: number[] }>)[0]!.data, row);
  });
});

test('request-rate mode reports per rate', async () => {
  await withServer({}, async (s) => {
    const r = await run([
      '-m',
      'simple',
      '-u',
      s.url,
      ...FAST,
      '--request-rate-range',
      '200',
      '--request-distribution',
      'poisson',
    ]);
    assert.equal(r.code, 0, r.err);
    assert.match(r.out, /Using poisson distribution on request generation/);
    assert.match(r.out, /Request Rate: 200 inference requests per second\n/);
    assert.match(r.out, /Request Rate: 200, throughput: [\d.]+ infer\/sec/);
  });
});

test('latency threshold gate: exit 1 with a one-line reason', async () => {
  await withServer({ delayMs: 3 }, async (s) => {
    const r = await run(['-m', 'simple', '-u', s.url, ...FAST, '-l', '2']);
    assert.equal(r.code, 1, r.out + r.err);
    assert.match(r.err, /Measured latency went over the set limit of 2 msec/);
    assert.match(
      r.err,
      /nereid perf: threshold missed: concurrency 1: average latency \d+ usec is over the limit of 2 msec\n/,
    );
  });
});

test('throughput floor gate: exit 1 with a one-line reason', async () => {
  await withServer({}, async (s) => {
    const r = await run(['-m', 'simple', '-u', s.url, ...FAST, '--throughput-threshold', '1e9']);
    assert.equal(r.code, 1, r.out + r.err);
    assert.match(
      r.err,
      new RegExp(
        String.raw`nereid perf: threshold missed: concurrency 1: throughput [\d.e+]+ infer\/sec is under the floor ` +
        String.raw`of 1e\+09 infer\/sec\n`,
      ),
    );
  });
});

test('an open-ended sweep stops at the latency limit without failing', async () => {
  // One request at a time, 100 ms each: concurrency 1 sees ~100 ms, concurrency 2 ~200 ms.
  await withServer({ delayMs: 100, serial: true }, async (s) => {
    const r = await run([
      '-m',
      'simple',
      '-u',
      s.url,
      '-p',
      '500',
      '-s',
      '1000000',
      '-r',
      '3',
      '--concurrency-range',
      '1:0:1',
      '-l',
      '150',
    ]);
    assert.equal(r.code, 0, r.out + r.err);
    assert.match(r.out, /Request concurrency: 2\n/);
    assert.doesNotMatch(r.out, /Request concurrency: 3\n/);
    assert.match(r.out, /Inferences\/Second vs\. Client Average Batch Latency\nConcurrency: 1, [^\n]*\n$/);
  });
});

test('throughput floor that is met exits 0', async () => {
  await withServer({}, async (s) => {
    const r = await run(['-m', 'simple', '-u', s.url, ...FAST, '--throughput-threshold', '1']);
    assert.equal(r.code, 0, r.err);
  });
});

test('unknown model: clear message, exit 99', async () => {
  await withServer({}, async (s) => {
    const r = await run(['-m', 'nope', '-u', s.url, ...FAST]);
    assert.equal(r.code, 99);
    assert.match(r.err, /^error: failed to get model metadata: Request for unknown model: 'nope' is not found\n/);
  });
});

async function freePort(): Promise<number> {
  const srv = createServer();
  await new Promise<void>((resolve) => srv.listen(0, '127.0.0.1', resolve));
  const port = (srv.address() as { port: number }).port;
  await new Promise<void>((resolve) => srv.close(() => resolve()));
  return port;
}

test('unreachable server: clear message, exit 99', async () => {
  const port = await freePort();
  const r = await run(['-m', 'simple', '-u', `127.0.0.1:${port}`, ...FAST]);
  assert.equal(r.code, 99);
  assert.match(
    r.err,
    /error: failed to get server metadata: unable to connect to http:\/\/127\.0\.0\.1:\d+: connection refused/,
  );
});

test('--shape for an input the model does not have', async () => {
  await withServer({}, async (s) => {
    const r = await run(['-m', 'simple', '-u', s.url, ...FAST, '--shape', 'INPUT9:4']);
    assert.equal(r.code, 99);
    assert.match(
      r.err,
      /--shape names input 'INPUT9', but model 'simple' has no such input \(inputs: INPUT0, INPUT1\)/,
    );
  });
});

test('variable dims without --shape, then with it', async () => {
  const dyn = { ...SIMPLE_MODEL, name: 'dyn', inputs: SIMPLE_MODEL.inputs.map((i) => ({ ...i, dims: [-1] })) };
  await withServer({ models: [dyn] }, async (s) => {
    const bad = await run(['-m', 'dyn', '-u', s.url, ...FAST]);
    assert.equal(bad.code, 99);
    assert.match(bad.err, /input INPUT0 contains dynamic shape, provide shapes/);
    const good = await run(['-m', 'dyn', '-u', s.url, ...FAST, '--shape', 'INPUT0:5', '--shape', 'INPUT1:5']);
    assert.equal(good.code, 0, good.err);
    assert.deepEqual((s.infers[0]!.header['inputs'] as Array<{ shape: number[] }>)[0]!.shape, [1, 5]);
  });
});

test('malformed input-data file', async () => {
  await withServer({}, async (s) => {
    const file = join(tmp, 'bad.json');
    writeFileSync(file, '{"data": [{"INPUT0": [1, 2]');
    const r = await run(['-m', 'simple', '-u', s.url, ...FAST, '--input-data', file]);
    assert.equal(r.code, 99);
    assert.match(r.err, /failed to parse the specified json file for reading provided data/);
    assert.equal(s.infers.length, 0);
  });
});

test('batch size on a non-batching model', async () => {
  const nb = { ...SIMPLE_MODEL, name: 'nb', maxBatchSize: 0 };
  await withServer({ models: [nb] }, async (s) => {
    const r = await run(['-m', 'nb', '-u', s.url, ...FAST, '-b', '4']);
    assert.equal(r.code, 99);
    assert.match(r.err, /can not specify batch size > 1 as the model does not support batching/);
  });
});

test('server errors mid-run: finished levels are still reported, exit 99', async () => {
  // Concurrency 1 never overlaps requests; concurrency 2 does, and the server then fails them.
  await withServer({ failWhenConcurrent: true, delayMs: 5 }, async (s) => {
    const csv = join(tmp, 'partial.csv');
    const r = await run(['-m', 'simple', '-u', s.url, ...FAST, '--concurrency-range', '1:2', '-f', csv]);
    assert.equal(r.code, 99, r.out + r.err);
    assert.match(r.err, /inference request failed: model 'simple' failed: injected failure/);
    assert.match(r.out, /Inferences\/Second vs\. Client Average Batch Latency\nConcurrency: 1,/);
    const rows = readFileSync(csv, 'utf8').trimEnd().split('\n');
    assert.equal(rows.length, 2);
    assert.ok(rows[0]!.startsWith('Concurrency,Inferences/Second,'));
    assert.match(rows[1]!, /^1,/);
  });
});

test('without the statistics extension there is no Server block', async () => {
  await withServer({ extensions: ['binary_tensor_data'] }, async (s) => {
    const csv = join(tmp, 'nostats.csv');
    const r = await run(['-m', 'simple', '-u', s.url, ...FAST, '-f', csv]);
    assert.equal(r.code, 0, r.err);
    assert.doesNotMatch(r.out, /Server: /);
    assert.equal(
      readFileSync(csv, 'utf8').split('\n')[0],
      'Concurrency,Inferences/Second,Client Send,Client Recv,p50 latency,p90 latency,p95 latency,p99 latency',
    );
  });
});

test('verbose prints every window; usage errors exit 3', async () => {
  await withServer({}, async (s) => {
    const r = await run(['-m', 'simple', '-u', s.url, ...FAST, '-v']);
    assert.equal(r.code, 0, r.err);
    assert.match(r.out, / {2}Pass \[1\] throughput: [\d.e+]+ infer\/sec\. Avg latency: \d+ usec \(std \d+ usec\)\. \n/);
  });
  const bad = await run(['-m', 'simple', '--concurrency-range', 'x']);
  assert.equal(bad.code, 3);
  assert.match(bad.err, /Invalid value provided: x/);
});

test('progress line only on a terminal', async () => {
  await withServer({}, async (s) => {
    const tty = new Capture(true);
    const code = await runPerf(['-m', 'simple', '-u', s.url, '-p', '600', '-s', '1000000', '-r', '3'], {
      stdout: tty,
      stderr: new Capture(),
    });
    assert.equal(code, 0);
    // eslint-disable-next-line no-control-regex -- the terminal's erase-line sequence is what is tested
    assert.match(tty.text, /\r\x1b\[K {2}measuring concurrency 1: window \d+\/3, \d+ requests so far/);
    const pipe = await run(['-m', 'simple', '-u', s.url, ...FAST]);
    // eslint-disable-next-line no-control-regex -- no erase-line sequence when the output is not a terminal
    assert.doesNotMatch(pipe.out, /\x1b\[K/);
  });
});

test('--collect-metrics reads the GPU gauges into the report and the verbose CSV', async () => {
  await withServer({}, async (s) => {
    const csv = join(tmp, 'metrics.csv');
    const r = await run([
      '-m',
      'simple',
      '-u',
      s.url,
      ...FAST,
      '--collect-metrics',
      '--metrics-url',
      `${s.url}/metrics`,
      '--metrics-interval',
      '50',
      '-f',
      csv,
      '--verbose-csv',
    ]);
    assert.equal(r.code, 0, r.err);
    assert.match(
      r.out,
      new RegExp(
        String.raw` {2}Server Prometheus Metrics: \n {4}Avg GPU Utilization:\n {6}GPU-fake : 50%\n {4}Avg GPU Power ` +
        String.raw`Usage:\n {6}GPU-fake : 120\.5 watts\n {4}Max GPU Memory Usage:\n {6}GPU-fake : 1000 bytes\n ` +
        String.raw`{4}Total GPU Memory:\n {6}GPU-fake : 8000 bytes\n`,
      ),
    );
    const [header, row] = readFileSync(csv, 'utf8').trimEnd().split('\n');
    assert.match(
      header!,
      new RegExp(
        String.raw`,Avg latency,request\/response,response wait,Avg GPU Utilization,Avg GPU Power Usage,Max GPU ` +
        String.raw`Memory Usage,Total GPU Memory$`,
      ),
    );
    assert.match(row!, /,GPU-fake:0\.5;,GPU-fake:120\.5;,GPU-fake:1000;,GPU-fake:8000;$/);
  });
});

test('--collect-metrics with an unreachable metrics endpoint fails clearly', async () => {
  await withServer({}, async (s) => {
    const r = await run(['-m', 'simple', '-u', s.url, ...FAST, '--collect-metrics', '--metrics-url', `${s.url}/nope`]);
    assert.equal(r.code, 99);
    assert.match(r.err, /failed to collect metrics from http:\/\/127\.0\.0\.1:\d+\/nope: HTTP 404/);
  });
});

test('sequence and decoupled models are refused with a reason', async () => {
  const seq = { ...SIMPLE_MODEL, name: 'seq', config: { sequence_batching: {} } };
  const dec = { ...SIMPLE_MODEL, name: 'dec', config: { model_transaction_policy: { decoupled: true } } };
  await withServer({ models: [seq, dec] }, async (s) => {
    const a = await run(['-m', 'seq', '-u', s.url, ...FAST]);
    assert.equal(a.code, 99);
    assert.match(a.err, /model 'seq' uses the sequence batcher; sequence models are not supported/);
    const b = await run(['-m', 'dec', '-u', s.url, ...FAST]);
    assert.equal(b.code, 99);
    assert.match(b.err, /model 'dec' is decoupled/);
  });
});

test('ensembles: the Server block lists each composing model', async () => {
  const pre = { name: 'pre', maxBatchSize: 8, inputs: [], outputs: [] };
  const net = { name: 'net', maxBatchSize: 8, inputs: [], outputs: [] };
  const ens = {
    ...SIMPLE_MODEL,
    name: 'ens',
    composing: ['pre', 'net'],
    config: {
      platform: 'ensemble',
      ensemble_scheduling: {
        step: [
          { model_name: 'pre', model_version: -1 },
          { model_name: 'net', model_version: 1 },
        ],
      },
    },
  };
  await withServer({ models: [ens, pre, net] }, async (s) => {
    const r = await run(['-m', 'ens', '-u', s.url, ...FAST]);
    assert.equal(r.code, 0, r.err);
    assert.match(
      r.out,
      new RegExp(
        String.raw`Avg request latency: 40 usec \(overhead 0 usec \+ queue 2 usec \+ compute 70 usec\)\n\n ` +
        String.raw`{2}Composing models: \n {2}pre, version: 1\n {6}Inference count: \d+`,
      ),
    );
    assert.match(
      r.out,
      new RegExp(
        String.raw` {2}net, version: 1\n {6}Inference count: \d+\n {6}Execution count: \d+\n {6}Successful request ` +
        String.raw`count: \d+\n {6}Avg request latency: 36 usec \(overhead 0 usec \+ queue 1 usec \+ compute input 2 ` +
        String.raw`usec \+ compute infer 30 usec \+ compute output 3 usec\)`,
      ),
    );
  });
});

test('a server that stops answering: no valid requests, the tool still ends', async () => {
  await withServer({ hang: true }, async (s) => {
    const r = await run(['-m', 'simple', '-u', s.url, '-p', '100', '-r', '3']);
    assert.equal(r.code, 3);
    assert.match(r.err, /No valid requests recorded within time interval\. Please use a larger time window\./);
  });
});
