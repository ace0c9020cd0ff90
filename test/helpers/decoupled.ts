/** A repository with the decoupled Python fixture models (decoupled_repeat, bls_decoupled_caller, and `extra`). */
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { TempRepository } from './repository.js';
import { fixtureDir } from '../backends/python/helpers.js';

export function decoupledRepository(extra: readonly string[] = []): TempRepository {
  const repo = new TempRepository();
  for (const m of ['decoupled_repeat', 'bls_decoupled_caller', ...extra]) {
    repo.file(m, '1/model.py', readFileSync(path.join(fixtureDir(m), 'model.py')));
    repo.config(m, readFileSync(path.join(fixtureDir(m), 'config.pbtxt'), 'utf8'));
  }
  return repo;
}

