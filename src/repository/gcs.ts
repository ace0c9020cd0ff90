/**
 * gs://bucket/path repositories. Credentials follow Google's application
 * default credentials (GOOGLE_APPLICATION_CREDENTIALS, gcloud's login, the
 * attached service account), or the key file Triton's credential file names.
 * STORAGE_EMULATOR_HOST points the client at an emulator, without auth.
 */
import { createWriteStream } from 'node:fs';
import { pipeline } from 'node:stream/promises';
import type { Bucket, Storage, StorageOptions } from '@google-cloud/storage';
import { Errors } from '../errors.js';
import { credentialFor } from './cloud-credentials.js';
import { errorText, networkCause, type ObjectStore, type RemoteLocation, type StoredObject } from './object-store.js';

export interface GcsUrl {
  bucket: string;
  prefix: string;
}

export function parseGcsUrlParts(url: string): GcsUrl {
  const rest = url.slice('gs://'.length).replace(/\/{2,}/g, '/').replace(/\/+$/, '');
  const slash = rest.indexOf('/');
  const bucket = slash < 0 ? rest : rest.slice(0, slash);
  if (bucket === '') throw Errors.repositoryUrl(url, 'no bucket name after gs://');
  if (!/^[a-z0-9][a-z0-9._-]*$/.test(bucket)) {
    throw Errors.repositoryUrl(url, `'${bucket}' is not a bucket name (lower-case letters, digits, '.', '-', '_')`);
  }
  return { bucket, prefix: slash < 0 ? '' : rest.slice(slash + 1) };
}

export function parseGcsUrl(url: string, env: NodeJS.ProcessEnv): RemoteLocation {
  const parts = parseGcsUrlParts(url);
  return { scheme: 'gs', url, open: () => openGcs(url, parts, env) };
}

async function openGcs(url: string, parts: GcsUrl, env: NodeJS.ProcessEnv): Promise<ObjectStore> {
  const { Storage } = await import('@google-cloud/storage');
  const keyFile = credentialFor('gs', url, env) || undefined;
  const options: StorageOptions = { retryOptions: { maxRetries: 2, totalTimeout: 30 } };
  if (keyFile) options.keyFilename = keyFile;
  const emulator = env.STORAGE_EMULATOR_HOST;
  if (emulator) {
    // The SDK reads the variable itself and fails on a bare host:port.
    if (!/^https?:\/\//.test(emulator)) {
      throw Errors.repositoryUnavailable(
        url,
        `STORAGE_EMULATOR_HOST='${emulator}' must start with http:// or https://`,
      );
    }
    options.apiEndpoint = emulator;
    options.useAuthWithCustomEndpoint = false;
  }
  const storage = new Storage(options);
  return new GcsStore(storage, parts, options.apiEndpoint ?? 'Google Cloud Storage');
}

class GcsStore implements ObjectStore {
  private readonly bucket: Bucket;
  private readonly root: string;

  constructor(
    storage: Storage,
    private readonly parts: GcsUrl,
    private readonly where: string,
  ) {
    this.bucket = storage.bucket(parts.bucket);
    this.root = parts.prefix === '' ? '' : `${parts.prefix}/`;
  }

  async list(prefix: string): Promise<StoredObject[]> {
    const [files] = await this.bucket.getFiles({ prefix: this.root + prefix, autoPaginate: true });
    const objects: StoredObject[] = [];
    for (const f of files) {
      if (f.name.length <= this.root.length) continue;
      const md = f.metadata;
      objects.push({
        path: f.name.slice(this.root.length),
        size: Number(md.size ?? 0),
        version: String(md.generation ?? md.etag ?? ''),
      });
    }
    if (files.length === 0 && prefix === '') await this.checkBucket();
    return objects;
  }

  /** An empty listing of a missing bucket is an error, not an empty repository. */
  private async checkBucket(): Promise<void> {
    let exists: boolean;
    try {
      [exists] = await this.bucket.exists();
    } catch {
      return; // no permission to read bucket metadata: the listing stands
    }
    if (!exists) throw Object.assign(new Error('The specified bucket does not exist.'), { code: 404 });
  }

  async download(object: StoredObject, file: string): Promise<void> {
    const generation = /^\d+$/.test(object.version) ? Number(object.version) : undefined;
    const source = this.bucket.file(this.root + object.path, generation !== undefined ? { generation } : {});
    await pipeline(source.createReadStream(), createWriteStream(file));
  }

  describeError(err: unknown): string {
    const net = networkCause(err, this.where);
    if (net) return net;
    const e = err as { code?: unknown; message?: string };
    const message = errorText(err);
    const bucket = this.parts.bucket;
    if (e.code === 404) return `bucket '${bucket}' does not exist (HTTP 404: ${message})`;
    if (e.code === 401) return `the credentials were rejected (HTTP 401: ${message})`;
    if (e.code === 403) return `access to bucket '${bucket}' is denied (HTTP 403: ${message})`;
    if (/default credentials/i.test(message)) return `no Google Cloud credentials found: ${message}`;
    return typeof e.code === 'number' ? `HTTP ${e.code}: ${message}` : message;
  }

  async close(): Promise<void> {}
}
