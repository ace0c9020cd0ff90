/**
 * Azurite, Microsoft's Azure Blob Storage emulator (from .tools/test-servers), on
 * 127.0.0.1 and a free port, in memory, in its own process group.
 */
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { BlobServiceClient } from '@azure/storage-blob';
import { freePort, spawnGroup, stopGroup, waitFor } from './processes.js';
import { walk, joinKey } from './ceph.js';
import { testServerRequire } from './test-servers.js';

/** Azurite's well-known development account. */
export const AZURITE_ACCOUNT = 'devstoreaccount1';
export const AZURITE_KEY = 'Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==';

export interface AzuriteServer {
  readonly blobEndpoint: string;
  /** A connection string for the development account with its blob endpoint. */
  readonly connectionString: string;
  connectionStringWithKey(key: string): string;
  readonly service: BlobServiceClient;
  createContainer(name: string): Promise<void>;
  uploadDir(localDir: string, container: string, prefix: string): Promise<number>;
  put(container: string, key: string, body: Uint8Array | string): Promise<void>;
  stop(): Promise<void>;
}

export async function startAzurite(): Promise<AzuriteServer> {
  const require = testServerRequire();
  const main = path.join(path.dirname(require.resolve('azurite/package.json')), 'dist/src/blob/main.js');
  const port = await freePort();
  const location = mkdtempSync(path.join(tmpdir(), 'nereid-azurite-'));
  const child = spawnGroup(process.execPath, [
    main,
    '--blobHost', '127.0.0.1',
    '--blobPort', String(port),
    '--inMemoryPersistence',
    '--disableTelemetry',
    '--silent',
  ], { cwd: location });
  const blobEndpoint = `http://127.0.0.1:${port}/${AZURITE_ACCOUNT}`;
  const connectionStringWithKey = (key: string): string =>
    `DefaultEndpointsProtocol=http;AccountName=${AZURITE_ACCOUNT};AccountKey=${key};BlobEndpoint=${blobEndpoint};`;
  const connectionString = connectionStringWithKey(AZURITE_KEY);
  const service = BlobServiceClient.fromConnectionString(connectionString);
  try {
    await waitFor('Azurite to answer', async () => {
      await service.getProperties();
      return true;
    }, 60_000);
  } catch (err) {
    await stopGroup(child);
    rmSync(location, { recursive: true, force: true });
    throw err;
  }
  const put = async (container: string, key: string, body: Uint8Array | string): Promise<void> => {
    const data = typeof body === 'string' ? Buffer.from(body) : body;
    await service.getContainerClient(container).getBlockBlobClient(key).upload(data, data.byteLength);
  };
  return {
    blobEndpoint,
    connectionString,
    connectionStringWithKey,
    service,
    createContainer: async (name) => {
      await service.getContainerClient(name).create();
    },
    uploadDir: async (localDir, container, prefix) => {
      const files = walk(localDir);
      await Promise.all(files.map((f) => put(container, joinKey(prefix, f), readFileSync(path.join(localDir, f)))));
      return files.length;
    },
    put,
    stop: async () => {
      await stopGroup(child);
      rmSync(location, { recursive: true, force: true });
    },
  };
}
