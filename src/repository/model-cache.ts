/**
 * Local copies of cloud models. Each model version of the store (the set of
 * its objects with their ETags/generations) gets its own folder, which is
 * the model folder itself:
 *
 *   <cache>/<repository key>/<model>@<fingerprint>/...   the files (config.pbtxt, 1/, ...)
 *   <cache>/<repository key>/manifest.json                which objects each copy holds
 *   <cache>/<repository key>/.partial-...                 copies being built or removed
 *
 * A copy is built in a partial folder and renamed to `<model>@<fingerprint>`
 * once every file is in place, so such a folder is complete and is reused as
 * it is (also after a restart); a partial folder is never used. A new
 * fingerprint is built beside the old one, so a version that is serving never
 * sees its files change; files whose object did not change are hard-linked
 * from the previous copy instead of downloaded again. The manifest only serves
 * that reuse: one file for the whole repository, written a moment after the
 * copies settle (at the latest when the source closes), so that a start's many
 * copies do not wait for it. The layout keeps the folders made per model to
 * the copy and its own subfolders (directory creation is the costliest file
 * operation of a copy); the repository folder is listed once per process.
 */
import { createHash, randomBytes } from 'node:crypto';
import { copyFile, link, mkdir, readFile, readdir, rename, rm, stat, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import type { Logger } from 'pino';
import type { StoredObject } from './object-store.js';

const MANIFEST = 'manifest.json';
const PARTIAL = '.partial-';
/** Hex digits of a fingerprint (see objectsFingerprint). */
const FINGERPRINT_LENGTH = 20;
/** Copies of one model kept on disk: the newest and the ones that may still serve. */
const KEEP_COPIES = 3;
/** Log a progress line this often while one model downloads. */
const PROGRESS_INTERVAL_MS = 2000;
/** The manifest is written once no copy has been made for this long. */
const MANIFEST_DELAY_MS = 1000;

/** What the manifest says of one copy. */
interface CopyRecord {
  /** When the copy was made (ms since the epoch): the newest copy is the first to take files from. */
  at: number;
  objects: StoredObject[];
}

interface Manifest {
  url: string;
  /** By copy folder name (`<model>@<fingerprint>`). */
  copies: Record<string, CopyRecord>;
}

/**
 * The cache root for a scheme: flag, then NEREID_MODEL_CACHE_DIR, then Triton's mount folder variable, then the temp
 * folder.
 */
export function cacheRoot(explicit: string | undefined, scheme: 's3' | 'gs' | 'as', env: NodeJS.ProcessEnv): string {
  const tritonVar = {
    s3: 'TRITON_AWS_MOUNT_DIRECTORY',
    gs: 'TRITON_GCS_MOUNT_DIRECTORY',
    as: 'TRITON_AZURE_MOUNT_DIRECTORY',
  }[scheme];
  const chosen = explicit || env.NEREID_MODEL_CACHE_DIR || env[tritonVar] || path.join(tmpdir(), 'nereid-model-cache');
  return path.resolve(chosen);
}

/** Identity of a model's objects: changes when any object is added, removed or rewritten. */
export function objectsFingerprint(objects: readonly StoredObject[]): string {
  const hash = createHash('sha256');
  for (const o of [...objects].sort((a, b) => (a.path < b.path ? -1 : a.path > b.path ? 1 : 0))) {
    hash.update(`${o.path}\0${o.size}\0${o.version}\n`);
  }
  return hash.digest('hex').slice(0, FINGERPRINT_LENGTH);
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
  /** The copies of each model this process handed out most recently (folder names), oldest first. */
  private readonly handedOut = new Map<string, string[]>();
  /** Whole-cache statistics since start (tests and the benchmark read them). */
  readonly totals: DownloadStats = { files: 0, bytes: 0, reused: 0 };
  /** Copy folders on disk by model: the repository folder as listed once, then kept up to date here. */
  private onDisk: Promise<Map<string, Set<string>>> | undefined;
  /**
   * The objects of each copy this process made, by folder name (earlier copies for reuse, without reading the
   * manifest).
   */
  private readonly madeHere = new Map<string, CopyRecord>();
  /** The manifest as read from disk (once, when a copy first needs an earlier one's files). */
  private manifestRead: Promise<Record<string, CopyRecord>> | undefined;
  /** Copies made here and not yet in the manifest, and copies removed here still in it. */
  private readonly unwritten = new Map<string, CopyRecord>();
  private readonly removed = new Set<string>();
  private manifestTimer: NodeJS.Timeout | undefined;
  private writing: Promise<void> = Promise.resolve();
  /** Removals of partial folders left by processes gone (in the background; flush waits for them). */
  private readonly sweeping: Array<Promise<void>> = [];

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
    const name = copyName(model, objectsFingerprint(objects));
    const dir = path.join(this.root, name);
    const copies = await this.copiesOf(model);
    if (copies.has(name)) {
      // Listed at start: check it is still there (another process may have removed it since).
      if (this.madeHere.has(name) || (await exists(dir))) {
        this.logger.debug({ model, repository: this.url, dir }, 'model found in the download cache');
        await this.keepOnly(model, copies, name);
        return dir;
      }
      copies.delete(name);
    }
    const previous = copies.size === 0 ? [] : await this.previousCopies(copies);
    const partial = path.join(this.root, `${PARTIAL}copy-${process.pid}-${randomBytes(4).toString('hex')}`);
    await mkdir(partial);
    try {
      const stats = await this.fill(model, partial, objects, previous, download);
      try {
        await rename(partial, dir);
        const record = { at: Date.now(), objects: [...objects] };
        this.madeHere.set(name, record);
        this.unwritten.set(name, record);
        this.removed.delete(name);
        this.scheduleManifest();
      } catch (err) {
        // Another process finished the same copy first: use theirs.
        if (!(await exists(dir))) throw err;
        await rm(partial, { recursive: true, force: true });
      }
      this.totals.files += stats.files;
      this.totals.bytes += stats.bytes;
      this.totals.reused += stats.reused;
    } catch (err) {
      await rm(partial, { recursive: true, force: true });
      throw err;
    }
    copies.add(name);
    await this.keepOnly(model, copies, name);
    return dir;
  }

  private async fill(
    model: string,
    partial: string,
    objects: readonly StoredObject[],
    previous: Array<{ dir: string; objects: Map<string, StoredObject> }>,
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
    for (const object of objects) {
      const target = localPath(partial, object.path);
      if (object.path.endsWith('/')) {
        await makeDir(target);
        continue;
      }
      await makeDir(path.dirname(target));
      const earlier = previous.find((p) => sameObject(p.objects.get(object.path), object));
      if (earlier && (await linkOrCopy(localPath(earlier.dir, object.path), target))) {
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
        {
          model,
          repository: this.url,
          files: `${stats.files}/${toFetch.length}`,
          bytes: `${stats.bytes}/${totalBytes}`,
        },
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
      {
        model,
        repository: this.url,
        files: stats.files,
        bytes: stats.bytes,
        reused: stats.reused,
        ms: Date.now() - started,
      },
      `downloaded model '${model}'`,
    );
    return stats;
  }

  /** Brings the manifest up to date with the copies made and removed since the last call. */
  flush(): Promise<void> {
    clearTimeout(this.manifestTimer);
    this.manifestTimer = undefined;
    const sweeps = this.sweeping.splice(0);
    this.writing = this.writing.then(async () => {
      await Promise.all(sweeps);
      await this.writeManifest();
    });
    return this.writing;
  }

  private async writeManifest(): Promise<void> {
    if (this.unwritten.size === 0 && this.removed.size === 0) return;
    const made = [...this.unwritten];
    const removed = [...this.removed];
    this.unwritten.clear();
    this.removed.clear();
    const file = path.join(this.root, MANIFEST);
    // Other processes on the same cache write theirs too: merge, and drop copies no longer on disk.
    const copies = await readManifest(file, this.url);
    for (const name of removed) delete copies[name];
    for (const [name, record] of made) copies[name] = record;
    const present = new Set(await listDir(this.root));
    for (const name of Object.keys(copies)) if (!present.has(name)) delete copies[name];
    const temporary = path.join(this.root, `${PARTIAL}manifest-${process.pid}-${randomBytes(4).toString('hex')}`);
    try {
      await writeFile(temporary, JSON.stringify({ url: this.url, copies } satisfies Manifest));
      await rename(temporary, file);
      this.manifestRead = Promise.resolve(copies);
    } catch (err) {
      await rm(temporary, { force: true }).catch(() => undefined);
      // A cache removed in the meantime needs none.
      if ((err as NodeJS.ErrnoException).code !== 'ENOENT') {
        this.logger.warn(
          { dir: this.root, err: (err as Error).message },
          'could not write the manifest of the download cache',
        );
      }
    }
  }

  private scheduleManifest(): void {
    clearTimeout(this.manifestTimer);
    this.manifestTimer = setTimeout(() => void this.flush(), MANIFEST_DELAY_MS);
    this.manifestTimer.unref();
  }

  /** The copy folders of `model` on disk (a live set, kept up to date by this process). */
  private async copiesOf(model: string): Promise<Set<string>> {
    if (!this.onDisk) {
      this.onDisk = this.listCopies();
      // A failed listing (the folder cannot be made) is tried again on the next call.
      this.onDisk.catch(() => (this.onDisk = undefined));
    }
    const byModel = await this.onDisk;
    let copies = byModel.get(model);
    if (!copies) byModel.set(model, (copies = new Set()));
    return copies;
  }

  /** Lists the repository folder once: its copies by model; partial folders of processes gone are removed. */
  private async listCopies(): Promise<Map<string, Set<string>>> {
    await mkdir(this.root, { recursive: true });
    const byModel = new Map<string, Set<string>>();
    for (const name of await listDir(this.root)) {
      if (name.startsWith(PARTIAL)) {
        if (!isOwnedByLiveProcess(name))
          this.sweeping.push(rm(path.join(this.root, name), { recursive: true, force: true }).catch(() => undefined));
        continue;
      }
      // Anything else (the manifest, folders of an earlier layout) is not a copy.
      const model = copyModel(name);
      if (model === undefined) continue;
      let copies = byModel.get(model);
      if (!copies) byModel.set(model, (copies = new Set()));
      copies.add(name);
    }
    return byModel;
  }

  /** Complete copies to take unchanged files from, newest first. */
  private async previousCopies(
    names: ReadonlySet<string>,
  ): Promise<Array<{ dir: string; objects: Map<string, StoredObject> }>> {
    const found: Array<{ dir: string; objects: Map<string, StoredObject>; at: number }> = [];
    let onFile: Record<string, CopyRecord> | undefined;
    for (const name of names) {
      let record = this.madeHere.get(name);
      if (!record) {
        this.manifestRead ??= readManifest(path.join(this.root, MANIFEST), this.url);
        onFile ??= await this.manifestRead;
        record = onFile[name];
      }
      // A copy the manifest does not know (not written yet, or lost with a crash) has nothing to give.
      if (record)
        found.push({
          dir: path.join(this.root, name),
          objects: new Map(record.objects.map((o) => [o.path, o])),
          at: record.at,
        });
    }
    return found.sort((a, b) => b.at - a.at);
  }

  /** Records `name` as the model's newest copy handed out; the copies still counted as recent. */
  private handOut(model: string, name: string): string[] {
    const recent = (this.handedOut.get(model) ?? []).filter((n) => n !== name);
    recent.push(name);
    while (recent.length > KEEP_COPIES) recent.shift();
    this.handedOut.set(model, recent);
    return recent;
  }

  /**
   * Removes the model's copies this process has not handed out recently. The
   * last few stay: the one serving may be older than the newest (poll mode
   * loads a change only once it has settled).
   */
  private async keepOnly(model: string, copies: Set<string>, name: string): Promise<void> {
    const recent = this.handOut(model, name);
    for (const other of [...copies]) {
      if (recent.includes(other)) continue;
      copies.delete(other);
      this.madeHere.delete(other);
      this.unwritten.delete(other);
      this.removed.add(other);
      this.scheduleManifest();
      const p = path.join(this.root, other);
      // A copy is renamed out of the way before its files go, so that a removal cut short never
      // leaves a copy folder with files missing (such a folder counts as complete).
      let doomed = path.join(this.root, `${PARTIAL}removed-${process.pid}-${randomBytes(4).toString('hex')}`);
      if (!(await rename(p, doomed).then(() => true, () => false))) doomed = p;
      await rm(doomed, { recursive: true, force: true }).catch((err: Error) =>
        this.logger.warn({ model, dir: p, err: err.message }, 'could not remove an old cached copy'),
      );
    }
  }
}

/** The folder name of a model's copy. */
function copyName(model: string, fingerprint: string): string {
  return `${model}@${fingerprint}`;
}

/** The model a folder name is a copy of, or undefined when it is no copy's name. */
function copyModel(name: string): string | undefined {
  const at = name.length - FINGERPRINT_LENGTH - 1;
  if (at <= 0 || name[at] !== '@' || !/^[0-9a-f]+$/.test(name.slice(at + 1))) return undefined;
  return name.slice(0, at);
}

/** The copies the manifest on disk records; none when it is missing, torn or of another repository. */
async function readManifest(file: string, url: string): Promise<Record<string, CopyRecord>> {
  try {
    const m = JSON.parse(await readFile(file, 'utf8')) as Partial<Manifest>;
    if (m.url !== url || typeof m.copies !== 'object' || m.copies === null) return {};
    const copies: Record<string, CopyRecord> = {};
    for (const [name, r] of Object.entries(m.copies)) {
      if (r && typeof r.at === 'number' && Array.isArray(r.objects)) copies[name] = r;
    }
    return copies;
  } catch {
    return {};
  }
}

function sameObject(a: StoredObject | undefined, b: StoredObject): boolean {
  return a !== undefined && a.version === b.version && a.size === b.size;
}

/** Where an object (`<model>/...`, checked by `unsafeKeyReason`) goes in a copy folder, which is the model folder. */
function localPath(copy: string, key: string): string {
  return path.join(copy, ...key.split('/').slice(1).filter((s) => s !== ''));
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
