/**
 * The trace flags as tritonserver reads them (its messages, its warnings,
 * its defaults), and the trace extension on a real server: a setting
 * changed over HTTP or gRPC takes effect for the next request, a model's
 * setting cleared with null falls back to the global one, a bad value is
 * refused with Triton's text and changes nothing.
 */
import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import * as grpc from '@grpc/grpc-js';
import { buildServeConfig, SERVE_HELP } from '../../src/cli/serve.js';
import { inferenceServiceDefinition } from '../../src/frontends/grpc/index.js';
import { parseTraceFlags } from '../../src/trace/config.js';
import { serveInProcess } from '../helpers/in-process-server.js';
import { TempRepository } from '../helpers/repository.js';
import { type TraceFileEntry, mergeTraces } from '../helpers/trace-summary.js';
import { call, json } from '../frontends/http/helpers.js';

const flags = (config: string[], more: Partial<Parameters<typeof parseTraceFlags>[0]> = {}) =>
  parseTraceFlags({ config, level: [], ...more }, {});

describe('trace flags', () => {
  test("defaults: Triton mode, level OFF, rate 1000, count -1; OpenTelemetry's defaults as Triton's", () => {
    assert.deepEqual(flags([]).options, { mode: 'triton', level: 0 });
    const otel = flags(['mode=opentelemetry', 'level=TIMESTAMPS']).options.otel!;
    assert.deepEqual(otel, {
      url: 'http://localhost:4318/v1/traces',
      resource: { 'service.name': 'nereid' },
      bspMaxQueueSize: 2048,
      bspScheduleDelayMs: 5000,
      bspMaxExportBatchSize: 512,
    });
  });

  test('levels add up, OFF anywhere turns tracing off; the deprecated flags warn and are overridden', () => {
    assert.equal(flags(['level=TIMESTAMPS', 'level=TENSORS']).options.level, 3);
    assert.equal(flags(['level=TIMESTAMPS', 'level=OFF']).options.level, 0);
    const r = flags(['rate=5'], { rate: '7', level: ['timestamps'], count: '3' });
    assert.equal(r.options.rate, 5);
    assert.equal(r.options.count, 3);
    assert.equal(r.options.level, 1);
    assert.ok(
      r.warnings.includes(
        "Warning: '--trace-rate' has been deprecated and will be removed in future releases. " +
          "Please use '--trace-config rate=<rate value> instead.",
      ),
    );
    assert.ok(
      r.warnings.includes(
        "Warning: Overriding deprecated '--trace-rate' in favor of provided rate value in --trace-config!",
      ),
    );
  });

  test('resources: OTEL_RESOURCE_ATTRIBUTES over the default, the flag over both; OTEL_BSP_* as defaults', () => {
    const r = parseTraceFlags(
      {
        config: [
          'mode=opentelemetry',
          'opentelemetry,resource=service.name=edge',
          'opentelemetry,bsp_schedule_delay=10',
        ],
        level: [],
      },
      {
        OTEL_RESOURCE_ATTRIBUTES: 'team=ml,service.name=from-env',
        OTEL_BSP_SCHEDULE_DELAY: '99',
        OTEL_BSP_MAX_QUEUE_SIZE: '64',
      },
    ).options.otel!;
    assert.deepEqual(r.resource, { 'service.name': 'edge', team: 'ml' });
    assert.equal(r.bspScheduleDelayMs, 10);
    assert.equal(r.bspMaxQueueSize, 64);
  });

  test('bad values stop the start with a message naming the flag', () => {
    const bad: Array<[string[], RegExp]> = [
      [
        ['--trace-config=mode=zipkin'],
        /invalid value for trace mode option: zipkin\. Available options are "triton" and "opentelemetry"/,
      ],
      [
        ['--trace-config=level=LOUD'],
        /Bad option: "--trace-config level"\.\ninvalid value for trace level option: LOUD/,
      ],
      [['--trace-config=rate=often'], /Bad option: "--trace-config rate"\.\nInvalid option value\. Got often/],
      [['--trace-count=many'], /Bad option: "--trace-count"\.\nInvalid option value\. Got many/],
      [['--trace-config=count=-2'], /Bad option: "--trace-config count"/],
      [
        ['--trace-config=opentelemetry,url=not a url'],
        /Bad option: "--trace-config opentelemetry,url"\.\nInvalid URL\. Got not a url/,
      ],
      [
        ['--trace-config=opentelemetry,bsp_max_queue_size=big'],
        /Bad option: "--trace-config opentelemetry,bsp_max_queue_size"/,
      ],
      [['--trace-config=opentelemetry,colour=blue'], /unknown trace setting 'colour'/],
      [['--trace-config=,file=x'], /No trace mode specified/],
      [
        ['--trace-config=triton,file'],
        /--trace-config option format is '<trace mode>,<setting>=<value>'\. Got triton,file/,
      ],
      [
        ['--trace-config=triton,file=/no/such/dir/trace.json'],
        /--trace-config triton,file: the trace file '\/no\/such\/dir\/trace.json' cannot be written/,
      ],
    ];
    for (const [argv, message] of bad) assert.throws(() => buildServeConfig(argv), message, argv.join(' '));
  });

  test('tracing is no longer listed as accepted without effect', () => {
    assert.doesNotMatch(SERVE_HELP.split('Accepted for compatibility')[1] ?? '', /trace/);
  });
});

describe('trace settings on a running server', () => {
  const title = 'a model setting traces the next request, null falls back, bad values change nothing, gRPC shares it';
  test(title, async () => {
    const dir = mkdtempSync(path.join(tmpdir(), 'nereid-trace-'));
    const file = path.join(dir, 'trace.json');
    const repo = new TempRepository().addSub('simple').addSub('other');
    const running = await serveInProcess(repo.dir, ['--allow-metrics=false', `--trace-config=triton,file=${file}`]);
    const http = running.ports.http!;
    const body = JSON.stringify({
      inputs: ['INPUT0', 'INPUT1'].map((name) => ({
        name,
        datatype: 'INT32',
        shape: [1, 16],
        data: new Array(16).fill(1),
      })),
    });
    const infer = async (model: string, id: string) =>
      assert.equal(
        (await call(http, 'POST', `/v2/models/${model}/infer`, { body: body.replace('{', `{"id":"${id}",`) })).status,
        200,
      );
    const client = new (grpc.makeGenericClientConstructor(inferenceServiceDefinition, 'GRPCInferenceService'))(
      `127.0.0.1:${running.ports.grpc}`,
      grpc.credentials.createInsecure(),
    );
    const traceSetting = (request: object) =>
      new Promise<{ settings: Record<string, { value: string[] }> }>((resolve, reject) =>
        (client as unknown as { TraceSetting: (...args: unknown[]) => void }).TraceSetting(
          request,
          (err: Error | null, res: { settings: Record<string, { value: string[] }> }) =>
            err ? reject(err) : resolve(res),
        ),
      );
    try {
      await infer('simple', 'before');
      const set = json(
        await call(http, 'POST', '/v2/models/simple/trace/setting', {
          body: '{"trace_level":["TIMESTAMPS"],"trace_rate":"1"}',
        }),
      );
      assert.deepEqual((set as Record<string, unknown>).trace_level, ['TIMESTAMPS']);
      await infer('simple', 'traced');
      await infer('other', 'other-model');
      // A bad value: 400 with Triton's text, and the setting stays.
      const bad = await call(http, 'POST', '/v2/models/simple/trace/setting', {
        body: '{"trace_rate":"x","trace_level":["OFF"]}',
      });
      assert.equal(bad.status, 400);
      assert.match(bad.body.toString(), /Unable to parse 'trace_rate', got: x/);
      // What Triton passes over (an unknown level, an unknown key) is refused, and the setting stays.
      for (const refused of ['{"trace_level":["TIMESTAMPS","SPANS"]}', '{"trace_level":["OFF"],"colour":"blue"}']) {
        const res = await call(http, 'POST', '/v2/models/simple/trace/setting', { body: refused });
        assert.equal(res.status, 400, refused);
        assert.match(res.body.toString(), /invalid value for trace level option: SPANS|unknown trace setting 'colour'/);
      }
      await assert.rejects(
        traceSetting({ model_name: 'simple', settings: { trace_level: { value: ['OFF'] }, colour: { value: ['x'] } } }),
        (e: grpc.ServiceError) =>
          e.code === grpc.status.INVALID_ARGUMENT && /unknown trace setting 'colour'/.test(e.details),
      );
      const logging = await call(http, 'POST', '/v2/logging', { body: '{"log_info":false,"log_colour":"blue"}' });
      assert.equal(logging.status, 400);
      assert.match(logging.body.toString(), /unknown log setting 'log_colour'/);
      assert.match((await call(http, 'GET', '/v2/logging')).body.toString(), /"log_info":true/);
      await infer('simple', 'still-traced');
      // Cleared: the model falls back to the global setting (OFF).
      const cleared = json(
        await call(http, 'POST', '/v2/models/simple/trace/setting', { body: '{"trace_level":null}' }),
      ) as Record<string, unknown>;
      assert.deepEqual(cleared.trace_level, ['OFF']);
      assert.equal(cleared.trace_rate, '1', 'the rate override stays');
      await infer('simple', 'after-clear');
      // The global setting over gRPC; HTTP reads the same store.
      const g = await traceSetting({
        settings: { trace_level: { value: ['TIMESTAMPS'] }, trace_rate: { value: ['1'] } },
      });
      assert.deepEqual(g.settings.trace_level!.value, ['TIMESTAMPS']);
      assert.deepEqual(
        (json(await call(http, 'GET', '/v2/models/other/trace/setting')) as Record<string, unknown>).trace_level,
        ['TIMESTAMPS'],
      );
      await infer('other', 'global-on');
      await assert.rejects(
        traceSetting({ settings: { trace_count: { value: ['-7'] } } }),
        /Expecting value >= -1, got:-7/,
      );
    } finally {
      client.close();
      await running.shutdown();
    }
    try {
      const traced = [...mergeTraces(JSON.parse(readFileSync(file, 'utf8')) as TraceFileEntry[]).values()].map(
        (t) => t.request_id,
      );
      assert.deepEqual(traced, ['traced', 'still-traced', 'global-on']);
    } finally {
      repo.cleanup();
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
