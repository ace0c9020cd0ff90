/**
 * `nereid validate`: runs the checks loading runs on every model of one or
 * more repositories (configuration, auto-complete, the model files against
 * the configuration, ensembles against their steps) without loading or
 * serving them, and prints what a server would say for each model.
 * Exit code 1 when any model is invalid: usable as a CI step.
 */
import { checkModels } from '../core/model-check.js';
import { ModelSources, listModels } from '../repository/index.js';
import { Writable } from 'node:stream';
import { pino } from 'pino';
import { histogramBuckets } from '../metrics/model-reporter.js';
import { defaultModelRepository, parseBackendConfig } from './serve.js';
import { FlagReader, parseFlags } from './flags.js';

/** `write` takes the report (stdout by default). */
export async function runValidate(
  argv: readonly string[],
  write: (text: string) => void = (t) => process.stdout.write(t),
): Promise<number> {
  if (argv.includes('--help')) {
    write(
      'Usage: nereid validate [--model-repository=<dir> ...] [--model-config-name=<name>] ' +
        '[--disable-auto-complete-config] [--backend-config=...]\n',
    );
    return 0;
  }
  let f: FlagReader;
  try {
    f = new FlagReader(
      parseFlags(argv, {
        'model-repository': { type: 'string', repeat: true },
        'model-config-name': { type: 'string' },
        'disable-auto-complete-config': { type: 'bool' },
        'backend-config': { type: 'string', repeat: true },
      }),
    );
  } catch (err) {
    process.stderr.write(`error: ${(err as Error).message}\n`);
    return 2;
  }
  const repos = f.all('model-repository');
  const sources = new ModelSources();
  const models = await listModels(repos.length > 0 ? repos : [defaultModelRepository()], sources);
  await sources.close();
  let bad = models.failures.length;
  for (const failure of models.failures) write(`FAIL ${failure.model ?? failure.repository}: ${failure.message}\n`);
  const folders: Array<{ name: string; dir: string }> = [];
  const lines = new Map<string, string>();
  for (const [name, where] of models) {
    if ('duplicate' in where) {
      lines.set(name, `FAIL ${name}: found in more than one repository (${where.duplicate.join(', ')})`);
    }
    else if ('dir' in where) folders.push({ name, dir: where.dir }); // (every model is copied by this listing)
  }
  // The checks loading runs, with its messages, without loading anything (core/model-check.ts);
  // the warnings loading would log are printed under their model.
  const warnings = new Map<string, string[]>();
  const warn = (model: string, message: string): void => {
    const list = warnings.get(model) ?? [];
    if (!list.includes(message)) list.push(message);
    warnings.set(model, list);
  };
  const logger = pino(
    { level: 'warn' },
    new Writable({
      write(chunk: Buffer, _encoding, done) {
        for (const line of chunk.toString().split('\n')) {
          if (line === '') continue;
          const record = JSON.parse(line) as { model?: unknown; msg?: unknown };
          if (typeof record.model === 'string' && typeof record.msg === 'string') warn(record.model, record.msg);
        }
        done();
      },
    }),
  );
  const checked = await checkModels(folders, {
    autoComplete: !f.bool('disable-auto-complete-config', false),
    modelConfigName: f.string('model-config-name'),
    backendConfig: parseBackendConfig(f.all('backend-config')),
    gpuCount: 0,
    logger,
    server: { infer: () => Promise.reject(new Error('validate does not run models')) },
  });
  for (const m of checked) {
    const c = m.config;
    const failed = m.versions.filter((v) => v.state !== 'READY');
    // One line per failing version, as a server's repository index lists them.
    if (m.error !== '' || c === undefined) lines.set(m.name, `FAIL ${m.name}: ${m.error}`);
    else if (failed.length > 0) {
      const each = m.versions.map((v) => {
        const which = `${m.name} (version ${v.version})`;
        return v.state === 'READY' ? `ok   ${which}` : `FAIL ${which}: ${v.reason}`;
      });
      lines.set(m.name, each.join('\n'));
    }
    else lines.set(m.name, `ok   ${m.name} (${c.platform || c.backend}, max_batch_size ${c.maxBatchSize})`);
    // What the metrics would warn about once the model serves.
    if (c !== undefined) for (const w of histogramBuckets(c.modelMetrics).warnings) warn(m.name, w);
  }
  for (const name of [...lines.keys()].sort()) {
    const line = lines.get(name)!;
    if (line.startsWith('FAIL')) bad++;
    write(`${line}\n`);
    for (const w of warnings.get(name) ?? []) write(`warn ${name}: ${w}\n`);
  }
  write(`models: ${models.size - bad} valid, ${bad} invalid\n`);
  return bad > 0 ? 1 : 0;
}
