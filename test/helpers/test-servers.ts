/**
 * The servers only the tests start (Azurite, firebase-tools' Cloud Storage emulator) live in
 * .tools/test-servers, installed by scripts/fetch-test-servers.mjs from their own lockfile,
 * not in the project's dependencies.
 */
import { existsSync } from 'node:fs';
import { createRequire } from 'node:module';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

/** dist/test/helpers -> the repository root. */
const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..', '..');
export const TEST_SERVERS_DIR = path.join(ROOT, '.tools', 'test-servers');

/** A require() that resolves from .tools/test-servers, or a clear error saying how to install it. */
export function testServerRequire(): NodeJS.Require {
  if (!existsSync(path.join(TEST_SERVERS_DIR, '.installed'))) {
    throw new Error(`${TEST_SERVERS_DIR} is not installed: run 'node scripts/fetch-test-servers.mjs' (npm test does)`);
  }
  return createRequire(path.join(TEST_SERVERS_DIR, 'package.json'));
}
