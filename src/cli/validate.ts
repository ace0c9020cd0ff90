/**
 * `nereid validate`: checks every model's configuration in one or more
 * repositories without serving them, printing file:line:column errors.
 * Exit code 1 when any model is invalid: usable as a CI step.
 */
import { resolveModelConfig } from '../core/model-loader.js';
import { ModelSources, listModels } from '../repository/index.js';
import { silentLogger } from '../logger.js';
import { defaultModelRepository, parseBackendConfig } from './serve.js';
import { FlagReader, parseFlags } from './flags.js';

export async function runValidate(argv: readonly string[]): Promise<number> {
  if (argv.includes('--help')) {
    process.stdout.write(
      'Usage: nereid validate [--model-repository=<dir> ...] [--model-config-name=<name>] [--disable-auto-complete-config] [--backend-config=...]\n',
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
  for (const failure of models.failures) process.stdout.write(`FAIL ${failure.model ?? failure.repository}: ${failure.message}\n`);
  for (const [name, where] of [...models].sort(([a], [b]) => (a < b ? -1 : 1))) {
    if ('duplicate' in where) {
      bad++;
      process.stdout.write(`FAIL ${name}: found in more than one repository (${where.duplicate.join(', ')})\n`);
      continue;
    }
    if (!('dir' in where)) continue; // (every model is copied by this listing)
    try {
      const { config } = await resolveModelConfig(name, where.dir, {
        autoComplete: !f.bool('disable-auto-complete-config', false),
        modelConfigName: f.string('model-config-name'),
        backendConfig: parseBackendConfig(f.all('backend-config')),
        gpuCount: 0,
        logger: silentLogger,
        server: { infer: () => Promise.reject(new Error('validate does not run models')) },
      });
      process.stdout.write(`ok   ${name} (${config.platform || config.backend}, max_batch_size ${config.maxBatchSize})\n`);
    } catch (err) {
      bad++;
      process.stdout.write(`FAIL ${name}: ${(err as Error).message}\n`);
    }
  }
  process.stdout.write(`models: ${models.size - bad} valid, ${bad} invalid\n`);
  return bad > 0 ? 1 : 0;
}
