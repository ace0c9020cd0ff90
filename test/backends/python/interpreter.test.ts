/** Finding a Python that has what the model needs, and stub processes that say what they serve. */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readdirSync, readFileSync } from 'node:fs';
import { createPythonBackend } from '../../../src/backends/python/index.js';
import { FALLBACK_PYTHONS, findInterpreter, missingModules } from '../../../src/backends/python/interpreter.js';
import { fixtureDir, instanceContext, modelConfig, modelContext } from './helpers.js';

test('a configured interpreter that does not exist falls back to one with numpy', () => {
  const chosen = findInterpreter('/nonexistent/bin/python3', ['numpy'], process.env);
  assert.notEqual(chosen, '/nonexistent/bin/python3');
  assert.deepEqual(missingModules(chosen, ['numpy']), []);
});

test('an interpreter without torch is passed over for one that has numpy and torch', () => {
  const chosen = findInterpreter('python3', ['numpy', 'torch'], process.env);
  assert.deepEqual(missingModules(chosen, ['numpy', 'torch']), [], `${chosen} was chosen`);
});

test('when none has the modules, the error names every interpreter tried and what it lacked', () => {
  assert.throws(
    () => findInterpreter('/nonexistent/python', ['nereid_no_such_module'], process.env),
    (err: Error) => {
      assert.match(err.message, /no Python interpreter with nereid_no_such_module was found/);
      assert.match(err.message, /\/nonexistent\/python \(not found or does not run\)/);
      for (const candidate of FALLBACK_PYTHONS)
        assert.ok(err.message.includes(`${candidate} (`), `${candidate} is named: ${err.message}`);
      assert.match(err.message, /lacks nereid_no_such_module/);
      return true;
    },
  );
});

test("the stub's command line names the model and the instance", async (t) => {
  const backend = createPythonBackend();
  // The configured interpreter is missing: the model still loads with one that has numpy.
  const ctx = modelContext({
    name: 'identity',
    modelDir: fixtureDir('identity'),
    config: modelConfig({ name: 'identity', backend: 'python' }),
    backendConfig: { 'python-executable': '/nonexistent/bin/python3' },
  });
  const model = await backend.loadModel(ctx);
  const instance = await model.createInstance(instanceContext(ctx, 3));
  t.after(async () => {
    await instance.close();
    await model.close();
  });
  const mine = readdirSync('/proc')
    .filter((d) => /^\d+$/.test(d))
    .map((pid) => {
      try {
        return readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0');
      } catch {
        return [];
      }
    })
    .filter((argv) => argv.some((a) => a.endsWith('nereid_stub.py')) && argv.includes('identity_3'));
  assert.equal(mine.length, 1, 'one stub process for the instance');
  const argv = mine[0]!;
  assert.equal(argv[argv.indexOf('--model') + 1], 'identity');
  assert.equal(argv[argv.indexOf('--instance') + 1], 'identity_3');
});
