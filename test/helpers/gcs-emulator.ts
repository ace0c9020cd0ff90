/**
 * Google's Cloud Storage emulator from firebase-tools (pinned in scripts/test-servers,
 * installed in .tools/test-servers), run in this process on 127.0.0.1 and a free port.
 * Only its GCS JSON API is used, so the Firebase security-rules runtime (a Java download)
 * is replaced by a no-op. This reaches into the package's internals: keep firebase-tools pinned.
 */
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { Storage } from '@google-cloud/storage';
import { freePort } from './processes.js';
import { walk, joinKey } from './ceph.js';
import { testServerRequire } from './test-servers.js';

export interface GcsEmulator {
  /** `http://127.0.0.1:PORT`, the value for STORAGE_EMULATOR_HOST. */
  readonly host: string;
  readonly storage: Storage;
  /** The emulator has no bucket-create call: a bucket exists once an object is written to it. */
  createBucket(name: string): Promise<void>;
  uploadDir(localDir: string, bucket: string, prefix: string): Promise<number>;
  put(bucket: string, key: string, body: Uint8Array | string): Promise<void>;
  stop(): Promise<void>;
}

interface EmulatorInstance {
  start(): Promise<void>;
  stop(): Promise<void>;
}

export async function startGcsEmulator(): Promise<GcsEmulator> {
  const require = testServerRequire();
  const { StorageEmulator } = require('firebase-tools/lib/emulator/storage/index.js') as {
    StorageEmulator: new (args: Record<string, unknown>) => EmulatorInstance;
  };
  const blobs = mkdtempSync(path.join(tmpdir(), 'nereid-gcs-'));
  const noRules = { start: async () => [], stop: async () => {}, getRuleset: () => undefined };
  class TestStorageEmulator extends StorageEmulator {
    getPersistenceTmpDir(): string {
      return blobs;
    }
    createRulesManager(): unknown {
      return noRules;
    }
  }
  const port = await freePort();
  const emulator = new TestStorageEmulator({ projectId: 'nereid-test', host: '127.0.0.1', port, auto_download: false });
  (emulator as unknown as { _rulesRuntime: unknown })._rulesRuntime = { start: async () => {}, stop: async () => {} };
  // Object metadata builds its URLs from the registry's entry for the emulator.
  const { EmulatorRegistry } = require('firebase-tools/lib/emulator/registry.js') as {
    EmulatorRegistry: { set(name: string, instance: unknown): void; clear(name: string): void };
  };
  EmulatorRegistry.set('storage', emulator);
  await emulator.start();
  const host = `http://127.0.0.1:${port}`;
  const storage = new Storage({ apiEndpoint: host, useAuthWithCustomEndpoint: false, projectId: 'nereid-test' });
  const put = async (bucket: string, key: string, body: Uint8Array | string): Promise<void> => {
    await storage
      .bucket(bucket)
      .file(key)
      .save(typeof body === 'string' ? Buffer.from(body) : Buffer.from(body), { resumable: false });
  };
  return {
    host,
    storage,
    createBucket: async (name) => {
      await put(name, '.nereid-bucket', '');
    },
    uploadDir: async (localDir, bucket, prefix) => {
      const files = walk(localDir);
      await Promise.all(files.map((f) => put(bucket, joinKey(prefix, f), readFileSync(path.join(localDir, f)))));
      return files.length;
    },
    put,
    stop: async () => {
      await emulator.stop();
      EmulatorRegistry.clear('storage');
      rmSync(blobs, { recursive: true, force: true });
    },
  };
}
