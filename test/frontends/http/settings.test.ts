import { test } from 'node:test';
import assert from 'node:assert/strict';
import { LogSettings, TraceSettings } from '../../../src/frontends/http/index.js';
import type { LogSettingsStore, TraceSettingsStore } from '../../../src/frontends/grpc/settings.js';

test('one LogSettings serves both frontends: the gRPC store view and the HTTP JSON view agree', () => {
  const seen: unknown[] = [];
  const settings = new LogSettings((s) => seen.push(s.log_verbose_level));
  const store: LogSettingsStore = settings;
  assert.equal(store.update({ log_verbose_level: 3, log_info: false }).log_verbose_level, 3);
  assert.match(settings.toJson(), /"log_info":false,"log_warning":true,"log_error":true,"log_verbose_level":3/);
  settings.updateFromJson({ log_verbose_level: 1 });
  assert.equal(store.get().log_verbose_level, 1);
  assert.deepEqual(seen, [3, 1]);
});

test('one TraceSettings serves both frontends', () => {
  const settings = new TraceSettings({}, '/tmp/trace.json');
  const store: TraceSettingsStore = settings;
  assert.deepEqual(store.get(), {
    trace_level: ['OFF'],
    trace_rate: ['1000'],
    trace_count: ['-1'],
    log_frequency: ['0'],
    trace_file: ['/tmp/trace.json'],
    trace_mode: ['triton'],
  });
  assert.deepEqual(store.update('m', { trace_level: ['TIMESTAMPS', 'TENSORS'], trace_rate: ['7'] }).trace_level, [
    'TIMESTAMPS',
    'TENSORS',
  ]);
  assert.match(settings.toJson('m'), /"trace_rate":"7"/);
  assert.match(settings.toJson(''), /"trace_rate":"1000"/);
  assert.deepEqual(store.update('m', { trace_rate: [] }).trace_rate, ['1000'], 'an empty list clears the override');
  assert.throws(() => store.update(undefined, { trace_count: ['-5'] }), /Expecting value >= -1, got:-5/);
});

test('a setting that could never trace is refused with Triton\'s text, and changes nothing', () => {
  const noFile = new TraceSettings();
  assert.throws(
    () => noFile.updateFromJson('', { trace_level: ['TIMESTAMPS'] }),
    /Attempting to set invalid trace setting :trace file name is not given/,
  );
  assert.match(noFile.toJson(''), /"trace_level":\["OFF"\]/);
  const withFile = new TraceSettings({ level: 1 }, '/tmp/trace.json');
  assert.throws(
    () => withFile.updateFromJson('', { trace_rate: '0' }),
    /Attempting to set invalid trace setting :sample rate must be non-zero/,
  );
  assert.match(withFile.toJson(''), /"trace_rate":"1000"/);
  withFile.updateFromJson('', { trace_level: ['OFF'], trace_rate: '0' });
  assert.match(withFile.toJson(''), /"trace_rate":"0"/, 'turning tracing off takes any value');
});

test('what Triton would pass over is refused before anything changes, naming the key or the value', () => {
  const url: [string, string] = ['url', 'http://127.0.0.1:4318/v1/traces'];
  const otel = new TraceSettings({ level: 1, rate: 3 }, '', 'opentelemetry', [url]);
  const before = otel.toJson('');
  const refused: Array<[unknown, RegExp]> = [
    [{ trace_level: ['TIMESTAMPS', 'SPANS'] }, /^invalid value for trace level option: SPANS$/],
    [{ trace_level: [] }, /^trace_level must list at least one level, or be null to clear it$/],
    [{ trace_rate: '5', colour: 'blue' }, /^unknown trace setting 'colour'$/],
    [{ trace_rate: '5', toString: 'x' }, /^unknown trace setting 'toString'$/],
    [{ trace_rate: '5', trace_mode: 'triton' }, /^trace_mode can not be updated through network protocol$/],
    [{ url: 'http://127.0.0.1:1/v1/traces' }, /^url can not be updated through network protocol$/],
    [['trace_rate', '5'], /^a trace setting request must be a JSON object$/],
    ['trace_rate=5', /^a trace setting request must be a JSON object$/],
  ];
  for (const [body, message] of refused) {
    assert.throws(
      () => otel.updateFromJson('', body),
      (e: Error & { code?: string }) => message.test(e.message),
      JSON.stringify(body),
    );
    assert.equal(otel.toJson(''), before, `${JSON.stringify(body)} changed nothing`);
  }
  // gRPC's empty list still clears, as Triton's does.
  otel.update(undefined, { trace_rate: ['9'] });
  assert.deepEqual(otel.update(undefined, { trace_rate: [] }).trace_rate, ['3']);

  const log = new LogSettings();
  const logBodies = [
    '{"log_info":false,"log_colour":"blue"}',
    '{"log_info":false,"constructor":1}',
    '[{"log_info":false}]',
  ];
  for (const body of [...logBodies.map((text) => JSON.parse(text) as unknown), 'log_info=false']) {
    assert.throws(() => log.updateFromJson(body), /unknown log setting '(log_colour|constructor)'|a JSON object/);
    assert.equal(log.get().log_info, true, `${JSON.stringify(body)} changed nothing`);
  }
});
