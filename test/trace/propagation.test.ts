/**
 * A caller's W3C context carried into BLS calls: a Python model's
 * request.trace() (get_context(), InferenceRequest(trace=...)) and, without
 * the model doing anything, its BLS calls and a JavaScript model's
 * args.infer(); each call's span nests in the calling model's span of the
 * caller's trace, as exported over OTLP. In Triton mode the call is a trace
 * whose parent_id is the caller's.
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import type { RunningServer } from '../../src/cli/serve.js';
import { serveInProcess } from '../helpers/in-process-server.js';
import { TempRepository } from '../helpers/repository.js';
import { OtlpReceiver, type ReceivedSpan } from '../helpers/otlp-receiver.js';
import { type TraceFileEntry, mergeTraces } from '../helpers/trace-summary.js';
import { fixtureDir } from '../backends/python/helpers.js';
import { BLS_MODEL, blsConfig, jsModel } from '../backends/javascript/fixtures.js';
import { call, json } from '../frontends/http/helpers.js';

const CALLER_TRACE = '0af7651916cd43dd8448eb211c80319c';
const CALLER_SPAN = 'b7ad6b7169203331';
const TRACEPARENT = `00-${CALLER_TRACE}-${CALLER_SPAN}-01`;
const A = Array.from({ length: 16 }, (_, i) => i);
const B = new Array<number>(16).fill(2);

function body(names: [string, string], parameters?: object): string {
  return JSON.stringify({
    ...(parameters === undefined ? {} : { parameters }),
    inputs: [
      { name: names[0], datatype: 'INT32', shape: [1, 16], data: A },
      { name: names[1], datatype: 'INT32', shape: [1, 16], data: B },
    ],
  });
}

function repository(): TempRepository {
  const repo = new TempRepository().addSub('simple');
  repo.config('trace_bls', readFileSync(path.join(fixtureDir('trace_bls'), 'config.pbtxt'), 'utf8'));
  repo.file('trace_bls', '1/model.py', readFileSync(path.join(fixtureDir('trace_bls'), 'model.py')));
  jsModel(repo, 'js_bls', blsConfig('js_bls', 'simple'), BLS_MODEL);
  return repo;
}

async function serve(repo: TempRepository, flags: string[]): Promise<RunningServer> {
  return serveInProcess(repo.dir, ['--allow-metrics=false', '--trace-config=level=TIMESTAMPS', ...flags]);
}

type Reply = { outputs: Array<{ name: string; data: unknown[] }> };

describe('trace context into BLS calls (OpenTelemetry)', () => {
  const receiver = new OtlpReceiver();
  const repo = repository();
  const contexts: Record<string, string> = {};
  let spans: ReceivedSpan[];

  before(async () => {
    await receiver.start();
    // rate=0: only requests that carry a context are traced.
    const running = await serve(repo, [
      '--trace-config=mode=opentelemetry',
      '--trace-config=rate=0',
      `--trace-config=opentelemetry,url=${receiver.url}`,
      '--trace-config=opentelemetry,bsp_schedule_delay=50',
    ]);
    try {
      const http = running.ports.http!;
      for (const explicit of [true, false]) {
        const r = await call(http, 'POST', '/v2/models/trace_bls/infer', {
          body: body(['INPUT0', 'INPUT1'], { explicit }),
          headers: { traceparent: TRACEPARENT },
        });
        assert.equal(r.status, 200, r.body.toString());
        const out = json(r) as Reply;
        assert.deepEqual(out.outputs.find((o) => o.name === 'OUTPUT0')!.data, A.map((v, i) => v + B[i]!));
        contexts[String(explicit)] = String(out.outputs.find((o) => o.name === 'CONTEXT')!.data[0]);
      }
      const js = await call(http, 'POST', '/v2/models/js_bls/infer', {
        body: body(['A', 'B']),
        headers: { traceparent: TRACEPARENT },
      });
      assert.equal(js.status, 200, js.body.toString());
      const untraced = await call(http, 'POST', '/v2/models/js_bls/infer', { body: body(['A', 'B']) });
      assert.equal(untraced.status, 200);
    } finally {
      await running.shutdown();
    }
    spans = receiver.spans;
  });

  after(async () => {
    await receiver.stop();
    repo.cleanup();
  });

  const byId = (id: string) => spans.find((s) => s.spanId === id);

  function blsUnder(caller: ReceivedSpan): ReceivedSpan {
    const calls = spans.filter((s) => s.parentSpanId === caller.spanId && s.name === 'simple');
    assert.equal(calls.length, 1, `one BLS span under ${caller.name}`);
    const bls = calls[0]!;
    assert.equal(bls.traceId, CALLER_TRACE);
    assert.equal(bls.attributes['triton.trace_parent_id'], caller.attributes['triton.trace_id']);
    assert.equal(spans.filter((s) => s.parentSpanId === bls.spanId)[0]?.name, 'compute');
    return bls;
  }

  test('request.trace().get_context() is the model span\'s W3C context, and trace= nests the BLS call in it', () => {
    const ctx = JSON.parse(contexts['true']!) as { traceparent: string };
    const [, traceId, spanId, flags] = ctx.traceparent.split('-');
    assert.equal(traceId, CALLER_TRACE);
    assert.equal(flags, '01');
    const model = byId(spanId!);
    assert.equal(model?.name, 'trace_bls', 'the context names the Python model\'s span');
    assert.equal(byId(model!.parentSpanId)?.parentSpanId, CALLER_SPAN, 'under InferRequest, under the caller');
    blsUnder(model!);
  });

  test('a Python BLS call that names no trace joins its request\'s trace all the same', () => {
    const ctx = JSON.parse(contexts['false']!) as { traceparent: string };
    const model = byId(ctx.traceparent.split('-')[2]!);
    assert.equal(model?.name, 'trace_bls');
    blsUnder(model!);
  });

  test('a JavaScript model\'s args.infer() carries its request\'s context', () => {
    const models = spans.filter((s) => s.name === 'js_bls');
    assert.equal(models.length, 1, 'only the request with a context is traced at rate=0');
    blsUnder(models[0]!);
  });
});

describe('BLS calls in a Triton trace file', () => {
  test('the BLS call is a trace whose parent_id is the calling request\'s', async () => {
    const dir = mkdtempSync(path.join(tmpdir(), 'nereid-trace-'));
    const file = path.join(dir, 'trace.json');
    const repo = repository();
    try {
      const running = await serve(repo, [`--trace-config=triton,file=${file}`, '--trace-config=rate=1']);
      try {
        const r = await call(running.ports.http!, 'POST', '/v2/models/trace_bls/infer', {
          body: body(['INPUT0', 'INPUT1'], { explicit: true }),
        });
        assert.equal(r.status, 200);
        const out = json(r) as Reply;
        assert.equal(
          out.outputs.find((o) => o.name === 'CONTEXT')!.data[0],
          '',
          'no W3C context in Triton mode, as in Triton',
        );
        assert.equal(
          (await call(running.ports.http!, 'POST', '/v2/models/js_bls/infer', { body: body(['A', 'B']) })).status,
          200,
        );
      } finally {
        await running.shutdown();
      }
      const traces = [...mergeTraces(JSON.parse(readFileSync(file, 'utf8')) as TraceFileEntry[], 'http').values()];
      for (const caller of ['trace_bls', 'js_bls']) {
        const parent = traces.find((t) => t.model_name === caller);
        assert.ok(parent, `${caller} is traced`);
        const children = traces.filter((t) => t.parent_id === parent.id);
        assert.deepEqual(children.map((t) => t.model_name), ['simple']);
        assert.ok(children[0]!.timestamps.get('REQUEST_START')! >= parent.timestamps.get('COMPUTE_START')!);
      }
    } finally {
      repo.cleanup();
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
