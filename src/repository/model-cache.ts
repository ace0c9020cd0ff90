/**
 * Local copies of cloud models. Each model version of the store (the set of
 * its objects with their ETags/generations) gets its own folder:
 *
 *   <cache>/<repository key>/<model>/<fingerprint>/<model>/...   the files
 *   <cache>/<repository key>/<model>/<fingerprint>/manifest.json the objects
 *
 * A copy is built in a partial folder beside it and renamed to its
 * fingerprint once every file is in place, so a fingerprint folder is
 * complete and is reused as it is (also after a restart). A new fingerprint
 * is built beside the old one, so a version that is serving never sees its
 * files change; files whose object did not change are hard-linked from the
 * previous copy instead of downloaded again. The manifest only serves that
 * reuse: it is written a moment after the copies settle (at the latest when
 * the source closes), so that a start's many copies do not wait for it.
 */
import { createHash, randomBytes } from 'node:crypto';
import { copyFile, link, mkdir, readFile, readdir, rename, rm, stat, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import type { Logger } from 'pino';
import type { StoredObject } from './object-store.js';

const MANIFEST = 'manifest.json';
const PARTIAL = '.partial-';
/** Copies of one model kept on disk: the newest and the ones that may still serve. */
const KEEP_COPIES = 3;
/** Log a progress line this often while one model downloads. */
const PROGRESS_INTERVAL_MS = 2000;
/** Manifests of new copies are written once no copy has been made for this long. */
const MANIFEST_DELAY_MS = 1000;

interface Manifest {
  url: string;
  model: string;
  objects: StoredObject[];
}

/** The cache root for a scheme: flag, then NEREID_MODEL_CACHE_DIR, then Triton's mount folder variable, then the temp folder. */
export function cacheRoot(explicit: string | undefined, scheme: 's3' | 'gs' | 'as', env: NodeJS.ProcessEnv): string {
  const tritonVar = { s3: 'TRITON_AWS_MOUNT_DIRECTORY', gs: 'TRITON_GCS_MOUNT_DIRECTORY', as: 'TRITON_AZURE_MOUNT_DIRECTORY' }[scheme];
  const chosen = explicit || env.NEREID_MODEL_CACHE_DIR || env[tritonVar] || path.join(tmpdir(), 'nereid-model-cache');
  return path.resolve(chosen);
}

/** Identity of a model's objects: changes when any object is added, removed or rewritten. */
export function objectsFingerprint(objects: readonly StoredObject[]): string {
  const hash = createHash('sha256');
  for (const o of [...objects].sort((a, b) => (a.path < b.path ? -1 : a.path > b.path ? 1 : 0))) {
    hash.update(`${o.path}\0${o.size}\0${o.version}\n`);
  }
  return hash.digest('hex').slice(0, 20);
}

/** A readable, collision-free folder name for one repository URL. */
export function repositoryKey(url: string): string {
  const slug = url.replace(/^[a-z0-9]+:\/\//, '').replace(/[^A-Za-z0-9.-]+/g, '_').slice(0, 60);
  return `${slug}-${createHash('sha256').update(url).digest('hex').slice(0, 10)}`;
}

export interface DownloadStats {
  files: number;
  bytes: number;
  /** Files taken from an earlier copy instead of the store. */
  reused: number;
}

/** Writes one object to a file; may resolve with the bytes written (else the file is measured). */
export type Downloader = (object: StoredObject, file: string) => Promise<number | void>;

export class ModelCache {
  readonly root: string;
  /** The copies of each model this process handed out most recently, oldest first. */
  private readonly handedOut = new Map<string, string[]>();
  /** Whole-cache statistics since start (tests and the benchmark read them). */
  readonly totals: DownloadStats = { files: 0, bytes: 0, reused: 0 };
  /** The objects of each copy this process made, by its folder (earlier copies for reuse, without reading their manifest). */
  private readonly madeHere = new Map<string, { objects: Map<string, StoredObject>; at: number }>();
  /** Manifests of copies made here and not yet written, by folder. */
  private readonly unwritten = new Map<string, Manifest>();
  private manifestTimer: NodeJS.Timeout | undefined;

  constructor(
    cacheDir: string,
    private readonly url: string,
    private readonly logger: Logger,
  ) {
    this.root = path.join(cacheDir, repositoryKey(url));
  }

  /**
   * The local folder holding `objects` (keys relative to the model folder's
   * parent, so each starts with `<model>/`). Downloads what no complete copy has.
   */
  async materialize(model: string, objects: readonly StoredObject[], download: Downloader): Promise<string> {
    const fingerprint = objectsFingerprint(objects);
    const modelRoot = path.join(this.root, model);
    const tree = path.join(modelRoot, fingerprint);
    const dir = path.join(tree, model);
    // A model folder made just now holds no copies, complete or earlier, and nothing to clean up.
    const fresh = (await mkdir(modelRoot, { recursive: true })) !== undefined;
    if (!fresh && (await exists(tree))) {
      this.logger.debug({ model, repository: this.url, dir }, 'model found in the download cache');
      await this.keepOnly(model, modelRoot, tree);
      return dir;
    }
    const previous = fresh ? [] : await this.previousCopies(modelRoot, fingerprint);
    const partial = path.join(modelRoot, `${PARTIAL}${fingerprint}-${process.pid}-${randomBytes(4).toString('hex')}`);
    await mkdir(partial);
    try {
      const stats = await this.fill(model, partial, objects, previous, download);
      try {
        await rename(partial, tree);
        this.madeHere.set(tree, { objects: new Map(objects.map((o) => [o.path, o])), at: Date.now() });
        this.unwritten.set(tree, { url: this.url, model, objects: [...objects] });
        this.scheduleManifests();
      } catch (err) {
        // Another process finished the same copy first: use theirs.
        if (!(await exists(tree))) throw err;
        await rm(partial, { recursive: true, force: true });
      }
      this.totals.files += stats.files;
      this.totals.bytes += stats.bytes;
      this.totals.reused += stats.reused;
    } catch (err) {
      await rm(partial, { recursive: true, force: true });
      throw err;
    }
    if (fresh) this.handOut(model, tree);
    else await this.keepOnly(model, modelRoot, tree);
    return dir;
  }

  private async fill(
    model: string,
    partial: string,
    objects: readonly StoredObject[],
    previous: Array<{ tree: string; objects: Map<string, StoredObject> }>,
    download: Downloader,
  ): Promise<DownloadStats> {
    const stats: DownloadStats = { files: 0, bytes: 0, reused: 0 };
    const toFetch: StoredObject[] = [];
    // Every folder once, parents first (a failed or repeated mkdir costs as much as a new one on some file systems).
    const made = new Set<string>([partial]);
    const makeDir = async (target: string): Promise<void> => {
      const missing: string[] = [];
      for (let d = target; !made.has(d); d = path.dirname(d)) missing.push(d);
      for (const d of missing.reverse()) {
        await mkdir(d);
        made.add(d);
      }
    };
    await makeDir(path.join(partial, model));
    for (const object of objects) {
      const target = localPath(partial, object.path);
      if (object.path.endsWith('/')) {
        await makeDir(target);
        continue;
      }
      await makeDir(path.dirname(target));
      const earlier = previous.find((p) => sameObject(p.objects.get(object.path), object));
      if (earlier && (await linkOrCopy(localPath(earlier.tree, object.path), target))) {
        stats.reused++;
        continue;
      }
      toFetch.push(object);
    }
    const totalBytes = toFetch.reduce((n, o) => n + o.size, 0);
    if (toFetch.length === 0) return stats;
    const started = Date.now();
    this.logger.info(
      { model, repository: this.url, files: toFetch.length, bytes: totalBytes, reused: stats.reused },
      `downloading model '${model}'`,
    );
    const timer = setInterval(() => {
      this.logger.info(
        { model, repository: this.url, files: `${stats.files}/${toFetch.length}`, bytes: `${stats.bytes}/${totalBytes}` },
        `downloading model '${model}': ${totalBytes > 0 ? Math.floor((100 * stats.bytes) / totalBytes) : 100}%`,
      );
    }, PROGRESS_INTERVAL_MS);
    timer.unref();
    try {
      await Promise.all(
        toFetch.map(async (object) => {
          const target = localPath(partial, object.path);
          const written = await download(object, target);
          const size = typeof written === 'number' ? written : (await stat(target)).size;
          if (size !== object.size) {
            throw new Error(`object '${object.path}' arrived with ${size} bytes, the listing says ${object.size}`);
          }
          stats.files++;
          stats.bytes += size;
        }),
      );
    } finally {
      clearInterval(timer);
    }
    this.logger.info(
      { model, repository: this.url, files: stats.files, bytes: stats.bytes, reused: stats.reused, ms: Date.now() - started },
      `downloaded model '${model}'`,
    );
    return stats;
  }

  /** Writes the manifests of the copies made since the last call. */
  async flush(): Promise<void> {
    clearTimeout(this.manifestTimer);
    this.manifestTimer = undefined;
    const pending = [...this.unwritten];
    this.unwritten.clear();
    await Promise.all(
      pending.map(async ([tree, manifest]) => {
        try {
          await writeFile(path.join(tree, MANIFEST), JSON.stringify(manifest));
        } catch (err) {
          // A copy removed in the meantime needs none.
          if ((err as NodeJS.ErrnoException).code !== 'ENOENT') {
            this.logger.warn({ dir: tree, err: (err as Error).message }, 'could not write the manifest of a cached copy');
          }
        }
      }),
    );
  }

  private scheduleManifests(): void {
    clearTimeout(this.manifestTimer);
    this.manifestTimer = setTimeout(() => void this.flush(), MANIFEST_DELAY_MS);
    this.manifestTimer.unref();
  }

  /** Complete copies of the model other than `fingerprint`, newest first. */
  private async previousCopies(modelRoot: string, fingerprint: string): Promise<Array<{ tree: string; objects: Map<string, StoredObject> }>> {
    const found: Array<{ tree: string; objects: Map<string, StoredObject>; mtime: number }> = [];
    for (const name of await listDir(modelRoot)) {
      if (name === fingerprint || name.startsWith(PARTIAL)) continue;
      const tree = path.join(modelRoot, name);
      const here = this.madeHere.get(tree);
      if (here) {
        found.push({ tree, objects: here.objects, mtime: here.at });
        continue;
      }
      try {
        const manifestPath = path.join(tree, MANIFEST);
        const manifest = JSON.parse(await readFile(manifestPath, 'utf8')) as Manifest;
        const mtime = (await stat(manifestPath)).mtimeMs;
        found.push({ tree, objects: new Map(manifest.objects.map((o) => [o.path, o])), mtime });
      } catch {
        // no manifest (not written yet, or torn by a crash): nothing to take from it
      }
    }
    return found.sort((a, b) => b.mtime - a.mtime);
  }

  /** Records `tree` as the model's newest copy handed out; the copies still counted as recent. */
  private handOut(model: string, tree: string): string[] {
    const recent = (this.handedOut.get(model) ?? []).filter((t) => t !== tree);
    recent.push(tree);
    while (recent.length > KEEP_COPIES) recent.shift();
    this.handedOut.set(model, recent);
    return recent;
  }

  /**
   * Removes the model's copies this process has not handed out recently. The
   * last few stay: the one serving may be older than the newest (poll mode
   * loads a change only once it has settled).
   */
  private async keepOnly(model: string, modelRoot: string, tree: string): Promise<void> {
    const recent = this.handOut(model, tree);
    for (const name of await listDir(modelRoot)) {
      const p = path.join(modelRoot, name);
      if (recent.includes(p)) continue;
      if (name.startsWith(PARTIAL) && isOwnedByLiveProcess(name)) continue;
      this.madeHere.delete(p);
      this.unwritten.delete(p);
      // A copy is renamed out of the way before its files go, so that a removal cut short never
      // leaves a fingerprint folder with files missing (such a folder counts as complete).
      let doomed = p;
      if (!name.startsWith(PARTIAL)) {
        doomed = path.join(modelRoot, `${PARTIAL}removed-${process.pid}-${randomBytes(4).toString('hex')}`);
        if (!(await rename(p, doomed).then(() => true, () => false))) doomed = p;
      }
      await rm(doomed, { recursive: true, force: true }).catch((err: Error) =>
        this.logger.warn({ model, dir: p, err: err.message }, 'could not remove an old cached copy'),
      );
    }
  }
}

function sameObject(a: StoredObject | undefined, b: StoredObject): boolean {
  return a !== undefined && a.version === b.version && a.size === b.size;
}

/** The local path of an object key; keys were checked by `checkObjectKey`. */
function localPath(root: string, key: string): string {
  return path.join(root, ...key.split('/').filter((s) => s !== ''));
}

/** Why an object key cannot be copied to disk, or undefined when it can. */
export function unsafeKeyReason(key: string): string | undefined {
  const segments = key.split('/');
  if (key.startsWith('/')) return 'it starts with /';
  for (const s of segments.slice(0, -1)) if (s === '') return 'it has an empty path segment';
  for (const s of segments) {
    if (s === '.' || s === '..') return `it has a '${s}' segment`;
    if (s.includes('\\') || s.includes('\0')) return 'it has a backslash or NUL character';
  }
  return undefined;
}

async function linkOrCopy(from: string, to: string): Promise<boolean> {
  try {
    await link(from, to);
    return true;
  } catch {
    try {
      await copyFile(from, to);
      return true;
    } catch {
      return false;
    }
  }
}

function isOwnedByLiveProcess(partialName: string): boolean {
  const pid = Number(partialName.split('-')[2]);
  if (!Number.isSafeInteger(pid) || pid <= 0) return false;
  if (pid === process.pid) return true;
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

async function listDir(dir: string): Promise<string[]> {
  try {
    return await readdir(dir);
  } catch {
    return [];
  }
}

async function exists(p: string): Promise<boolean> {
  try {
    await stat(p);
    return true;
  } catch {
    return false;
  }
}
