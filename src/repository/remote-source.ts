/**
 * A model source backed by an object store (s3://, gs://, as://). One
 * recursive listing gives the model names and each model's objects with their
 * ETag/generation; models are copied into the download cache in parallel.
 */
import type { Logger } from 'pino';
import { Errors, NereidError } from '../errors.js';
import { ModelCache, cacheRoot, objectsFingerprint, unsafeKeyReason } from './model-cache.js';
import type { LocalModelDir, ModelSource } from './model-source.js';
import { errorText, type ObjectStore, type RemoteLocation, type StoredObject } from './object-store.js';
import { parseS3Url } from './s3.js';
import { parseGcsUrl } from './gcs.js';
import { parseAzureUrl } from './as.js';

/** Transfers in flight at once for one repository. */
const DOWNLOAD_CONCURRENCY = 16;
/** A listing this recent answers fingerprint() and materialize() without asking the store again. */
const LISTING_REUSE_MS = 5000;

export function remoteScheme(repository: string): 's3' | 'gs' | 'as' | undefined {
  if (repository.startsWith('s3://')) return 's3';
  if (repository.startsWith('gs://')) return 'gs';
  if (repository.startsWith('as://')) return 'as';
  return undefined;
}

export interface RemoteSourceOptions {
  cacheDir: string | undefined;
  logger: Logger;
  env: NodeJS.ProcessEnv;
}

export function createRemoteModelSource(url: string, options: RemoteSourceOptions): RemoteModelSource {
  const scheme = remoteScheme(url);
  const location =
    scheme === 's3'
      ? parseS3Url(url, options.env)
      : scheme === 'gs'
        ? parseGcsUrl(url, options.env)
        : parseAzureUrl(url, options.env);
  return new RemoteModelSource(location, options);
}

export class RemoteModelSource implements ModelSource {
  readonly location: string;
  readonly cache: ModelCache;
  private store: Promise<ObjectStore> | undefined;
  private listing: { at: number; models: Map<string, StoredObject[]> } | undefined;
  private readonly limiter = new Semaphore(DOWNLOAD_CONCURRENCY);
  private readonly logger: Logger;

  constructor(
    private readonly remote: RemoteLocation,
    options: RemoteSourceOptions,
  ) {
    this.location = remote.url;
    this.logger = options.logger;
    this.cache = new ModelCache(cacheRoot(options.cacheDir, remote.scheme, options.env), remote.url, options.logger);
  }

  async listModelNames(): Promise<string[]> {
    const objects = await this.call((store) => store.list(''));
    const models = new Map<string, StoredObject[]>();
    for (const object of objects) {
      const slash = object.path.indexOf('/');
      // Objects at the repository root are not models; neither are hidden folders.
      if (slash <= 0 || object.path.startsWith('.')) continue;
      const why = unsafeKeyReason(object.path);
      if (why !== undefined) {
        this.logger.warn({ repository: this.location, key: object.path }, `object skipped: ${why}`);
        continue;
      }
      const name = object.path.slice(0, slash);
      let list = models.get(name);
      if (!list) models.set(name, (list = []));
      if (object.path.length > slash + 1) list.push(object);
    }
    this.listing = { at: Date.now(), models };
    return [...models.keys()].sort();
  }

  async fingerprint(modelName: string): Promise<string> {
    return objectsFingerprint(await this.objectsOf(modelName));
  }

  async materialize(modelName: string): Promise<LocalModelDir> {
    const objects = await this.objectsOf(modelName);
    if (objects.length === 0) {
      throw Errors.internal(`model folder '${modelName}' is not in repository '${this.location}'`);
    }
    const store = await this.open();
    let dir: string;
    try {
      dir = await this.cache.materialize(modelName, objects, (object, file) =>
        this.limiter.run(() => store.download(object, file)),
      );
    } catch (err) {
      if (err instanceof NereidError) throw err;
      throw Errors.repositoryUnavailable(
        this.location,
        `cannot download model '${modelName}': ${store.describeError(err)}`,
      );
    }
    return { dir, release: async () => {} };
  }

  async close(): Promise<void> {
    await this.cache.flush();
    const store = this.store;
    this.store = undefined;
    if (store) await (await store.catch(() => undefined))?.close();
  }

  /** The model's objects, from the latest listing when it is recent, else from the store. */
  private async objectsOf(modelName: string): Promise<StoredObject[]> {
    const listing = this.listing;
    if (listing && Date.now() - listing.at < LISTING_REUSE_MS) return listing.models.get(modelName) ?? [];
    const objects = await this.call((store) => store.list(`${modelName}/`));
    return objects.filter((o) => o.path.length > modelName.length + 1 && unsafeKeyReason(o.path) === undefined);
  }

  private open(): Promise<ObjectStore> {
    if (!this.store) {
      this.store = this.remote.open();
      // A failed open (bad credentials file) is retried on the next call.
      this.store.catch(() => (this.store = undefined));
    }
    return this.store;
  }

  private async call<T>(fn: (store: ObjectStore) => Promise<T>): Promise<T> {
    let store: ObjectStore;
    try {
      store = await this.open();
    } catch (err) {
      if (err instanceof NereidError) throw err;
      throw Errors.repositoryUnavailable(this.location, errorText(err));
    }
    try {
      return await fn(store);
    } catch (err) {
      if (err instanceof NereidError) throw err;
      throw Errors.repositoryUnavailable(this.location, store.describeError(err));
    }
  }
}

/** Runs at most `limit` tasks at once, in arrival order. */
class Semaphore {
  private active = 0;
  private readonly waiting: Array<() => void> = [];
  constructor(private readonly limit: number) {}

  async run<T>(task: () => Promise<T>): Promise<T> {
    if (this.active >= this.limit) await new Promise<void>((resolve) => this.waiting.push(resolve));
    this.active++;
    try {
      return await task();
    } finally {
      this.active--;
      this.waiting.shift()?.();
    }
  }
}
