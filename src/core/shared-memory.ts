/**
 * Client shared memory: the regions clients register (a POSIX shared-memory
 * object under /dev/shm, an offset and a size), their status, and reading
 * inputs from / writing outputs into them. Frontends resolve the regions a
 * request names through this registry; backends never see it.
 *
 * Node has no mmap, so a region is an open file descriptor on its
 * /dev/shm object, read and written with positional I/O: one copy between
 * the shared pages and our buffer, bounded by the registered size. An input
 * is not read when the request is decoded: its tensor carries the window
 * (Tensor.file), so a backend that reads files on its own thread (the
 * onnxruntime session thread) copies the bytes straight into the buffer it
 * runs on, and anything else reading `data` reads them then. The request
 * holds the region until it is answered, and a reader on another thread
 * holds it while it reads: a region unregistered meanwhile is closed only
 * once nobody uses it.
 */
import { closeSync, fstatSync, openSync, readSync, write, writeSync } from 'node:fs';
import path from 'node:path';
import { Errors, NereidError } from '../errors.js';
import type { Datatype } from '../tensor/datatype.js';
import type { FileWindow, Tensor } from '../tensor/tensor.js';

/** Keys Triton keeps for its Python backend's own regions. */
const RESERVED_KEY_PREFIX = 'triton_python_backend_shm_region_';
/** Above this size writes go to the thread pool instead of blocking the event loop. */
const SYNC_IO_LIMIT = 64 * 1024;

export type SharedMemoryKind = 'system' | 'cuda';

export interface SystemRegionStatus {
  readonly name: string;
  readonly key: string;
  readonly offset: number;
  readonly byte_size: number;
}

export interface CudaRegionStatus {
  readonly name: string;
  readonly device_id: number;
  readonly byte_size: number;
}

/** The shared-memory part of the ServerApi. */
export interface SharedMemoryApi {
  /** Whether clients may register regions (--allow-client-shm). */
  readonly allowed: boolean;
  registerSystem(name: string, key: string, offset: number, byteSize: number): void;
  /** Throws Triton's error for a server without CUDA (or the disabled error). */
  registerCuda(name: string, deviceId: number, byteSize: number): void;
  systemStatus(name?: string): SystemRegionStatus[];
  cudaStatus(name?: string): CudaRegionStatus[];
  /** name omitted or '': every region of that kind. Unknown names are not an error (Triton). */
  unregister(kind: SharedMemoryKind, name?: string): void;
  /** Checks the bounds and holds the region until the lease is released. */
  acquire(name: string, offset: number, byteSize: number): SharedMemoryLease;
  /** A buffer for an input of `size` bytes, and its return once the request no longer needs it. */
  takeBuffer?(size: number): Buffer;
  giveBuffer?(buffer: Buffer): void;
}

class Region {
  users = 0;
  removed = false;
  constructor(
    readonly name: string,
    readonly key: string,
    readonly offset: number,
    readonly byteSize: number,
    readonly fd: number,
  ) {}

  close(): void {
    closeSync(this.fd);
  }
}

/** A checked window of a region that one request reads or writes. Release it once. */
export class SharedMemoryLease {
  private released = false;
  constructor(
    private readonly region: Region,
    private readonly owner: SharedMemoryRegistry,
    /** Offset within the region. */
    readonly offset: number,
    readonly byteSize: number,
  ) {}

  get regionName(): string {
    return this.region.name;
  }

  /** Writes `data` at the start of the window; the caller has checked it fits. */
  async write(data: Uint8Array): Promise<void> {
    if (data.byteLength > this.byteSize) throw Errors.internal('write beyond a shared memory window');
    const position = this.region.offset + this.offset;
    if (data.byteLength <= SYNC_IO_LIMIT) {
      if (data.byteLength > 0) writeSync(this.region.fd, data, 0, data.byteLength, position);
      return;
    }
    await writeFully(this.region.fd, data, position);
  }

  /** The same bytes read now, on this thread (`buffer`: byteSize long, or a new one). */
  readNow(buffer: Buffer = Buffer.allocUnsafe(this.byteSize)): Buffer {
    if (this.released)
      throw Errors.internal(`shared memory region '${this.region.name}' was read after its request let go of it`);
    const size = this.byteSize;
    const position = this.region.offset + this.offset;
    let done = 0;
    while (done < size) {
      const n = readSync(this.region.fd, buffer, done, size - done, position + done);
      if (n === 0) break;
      done += n;
    }
    if (done !== size)
      throw Errors.shmBounds(`Invalid offset + byte size for shared memory region: '${this.region.name}'`);
    return buffer;
  }

  /** Where the window lies in the region's file; hold() keeps the file open for a reader elsewhere. */
  window(): FileWindow {
    return new LeaseWindow(this, this.region.fd, this.region.offset + this.offset, this.byteSize);
  }

  /** @internal One more user of the region until the returned function is called. */
  hold(): () => void {
    if (this.released)
      throw Errors.internal(`shared memory region '${this.region.name}' was used after its request let go of it`);
    const region = this.region;
    const owner = this.owner;
    region.users += 1;
    let held = true;
    return () => {
      if (!held) return;
      held = false;
      owner.releaseRegion(region);
    };
  }

  release(): void {
    if (this.released) return;
    this.released = true;
    this.owner.releaseRegion(this.region);
  }
}

class LeaseWindow implements FileWindow {
  constructor(
    private readonly lease: SharedMemoryLease,
    readonly fd: number,
    readonly position: number,
    readonly byteLength: number,
  ) {}

  hold(): () => void {
    return this.lease.hold();
  }
}

function writeFully(fd: number, data: Uint8Array, position: number): Promise<void> {
  return new Promise((resolve, reject) => {
    let done = 0;
    const step = (): void => {
      write(fd, data, done, data.byteLength - done, position + done, (err, n) => {
        if (err) return reject(err);
        done += n;
        if (done === data.byteLength) resolve();
        else step();
      });
    };
    step();
  });
}

/** The /dev/shm path shm_open would use for `key` (leading slashes dropped), or undefined when none can exist. */
export function shmObjectPath(key: string, root = '/dev/shm'): string | undefined {
  const name = key.replace(/^\/+/, '');
  if (name === '' || name.includes('/') || name === '.' || name === '..') return undefined;
  return path.join(root, name);
}

/**
 * Input buffers kept for reuse: a fresh multi-megabyte buffer costs more in
 * page faults on first touch than the copy out of the region itself.
 */
class BufferPool {
  private readonly free = new Map<number, Buffer[]>();
  private bytes = 0;
  constructor(private readonly maxBytes: number) {}

  take(size: number): Buffer {
    const list = this.free.get(size);
    const b = list?.pop();
    if (b) {
      this.bytes -= size;
      return b;
    }
    return Buffer.allocUnsafe(size);
  }

  give(b: Buffer): void {
    if (b.byteLength < 4096 || this.bytes + b.byteLength > this.maxBytes) return;
    let list = this.free.get(b.byteLength);
    if (!list) this.free.set(b.byteLength, (list = []));
    list.push(b);
    this.bytes += b.byteLength;
  }
}

export class SharedMemoryRegistry implements SharedMemoryApi {
  private readonly regions = new Map<string, Region>();
  /** @internal Buffers for inputs read out of regions, returned when their request is done. */
  readonly inputBuffers = new BufferPool(256 * 1024 * 1024);

  constructor(
    readonly allowed: boolean,
    /** Where shared-memory objects live (tests may point elsewhere). */
    private readonly root = '/dev/shm',
  ) {}

  registerSystem(name: string, key: string, offset: number, byteSize: number): void {
    if (!this.allowed) throw Errors.clientShmDisabled();
    const stripped = key.replace(/^\/+/, '');
    if (stripped === '')
      throw Errors.shmInvalidKey(`cannot register shared memory region '${name}' - invalid shm key '${key}'`);
    if (stripped.startsWith(RESERVED_KEY_PREFIX)) {
      throw Errors.shmInvalidKey(
        `cannot register shared memory region '${name}' with key '${key}' ` +
        `as the key contains the reserved prefix '${RESERVED_KEY_PREFIX}'`,
      );
    }
    if (this.regions.has(name)) throw Errors.shmAlreadyRegistered(name);
    const file = shmObjectPath(key, this.root);
    let fd: number;
    try {
      if (file === undefined) throw new Error('no such object');
      fd = openSync(file, 'r+');
    } catch {
      throw Errors.shmOpenFailed(key);
    }
    try {
      const st = fstatSync(fd);
      if (!st.isFile()) throw Errors.shmInvalidRegion(key);
      if (!Number.isSafeInteger(offset + byteSize) || offset + byteSize > st.size)
        throw Errors.shmRegisterInvalidArgs(name);
    } catch (err) {
      closeSync(fd);
      throw err;
    }
    this.regions.set(name, new Region(name, key, offset, byteSize, fd));
  }

  registerCuda(name: string): void {
    if (!this.allowed) throw Errors.clientShmDisabled();
    throw Errors.cudaShmNoGpu(name);
  }

  systemStatus(name?: string): SystemRegionStatus[] {
    const status = (r: Region): SystemRegionStatus => ({
      name: r.name,
      key: r.key,
      offset: r.offset,
      byte_size: r.byteSize,
    });
    if (name === undefined || name === '') return [...this.regions.values()].map(status);
    const r = this.regions.get(name);
    if (!r) throw Errors.systemShmRegionNotFound(name);
    return [status(r)];
  }

  cudaStatus(name?: string): CudaRegionStatus[] {
    if (name === undefined || name === '') return [];
    if (this.regions.has(name)) {
      throw Errors.notFound(`The region named '${name}' is registered as system shared memory, not CUDA shared memory`);
    }
    throw Errors.cudaShmRegionNotFound(name);
  }

  unregister(kind: SharedMemoryKind, name?: string): void {
    if (!this.allowed) throw Errors.clientShmDisabled();
    if (kind === 'cuda') return; // no CUDA region can exist
    if (name === undefined || name === '') {
      for (const r of [...this.regions.values()]) this.remove(r);
      return;
    }
    const r = this.regions.get(name);
    if (r) this.remove(r);
  }

  acquire(name: string, offset: number, byteSize: number): SharedMemoryLease {
    const r = this.regions.get(name);
    if (!r) throw Errors.shmRegionNotFound(name);
    if (!(offset >= 0 && offset < r.byteSize))
      throw Errors.shmBounds(`Invalid offset for shared memory region: '${name}'`);
    if (!(byteSize >= 0) || !Number.isSafeInteger(offset + byteSize) || offset + byteSize > r.byteSize) {
      throw Errors.shmBounds(`Invalid offset + byte size for shared memory region: '${name}'`);
    }
    r.users += 1;
    return new SharedMemoryLease(r, this, offset, byteSize);
  }

  takeBuffer(size: number): Buffer {
    return this.inputBuffers.take(size);
  }

  giveBuffer(buffer: Buffer): void {
    this.inputBuffers.give(buffer);
  }

  /** Unregisters everything (server shutdown). */
  close(): void {
    for (const r of [...this.regions.values()]) this.remove(r);
  }

  /** @internal */
  releaseRegion(r: Region): void {
    r.users -= 1;
    if (r.users === 0 && r.removed) r.close();
  }

  /** A region in use by a request is closed once that request lets go of it. */
  private remove(r: Region): void {
    this.regions.delete(r.name);
    r.removed = true;
    if (r.users === 0) r.close();
  }
}

/** Output sizes Triton checks before writing into a region (INTERNAL, as its allocator reports it). */
export function checkOutputFits(
  lease: SharedMemoryLease,
  outputName: string,
  byteSize: number,
): NereidError | undefined {
  if (byteSize <= lease.byteSize) return undefined;
  return Errors.shmOutputTooSmall(outputName, lease.byteSize, byteSize);
}

/** Where a tensor lives in a region, as a request names it. */
export interface SharedMemoryRef {
  readonly region: string;
  readonly offset: number;
  readonly byteSize: number;
}

/** A tensor of the response: what writeOutputs needs of it. */
interface OutputTensor {
  readonly name: string;
  readonly data: Uint8Array;
}

/**
 * The regions one request reads and writes. Frontends create it while
 * decoding: input and output windows are checked then, and held until the
 * response has been written into the output regions; input bytes are read
 * when first needed (see the top of this file).
 */
export class RequestSharedMemory {
  private readonly outputs = new Map<string, SharedMemoryLease>();
  private readonly inputs: SharedMemoryLease[] = [];
  private readonly buffers: Buffer[] = [];

  constructor(private readonly api: SharedMemoryApi) {}

  /** An input tensor whose bytes are in a region: `data` reads them on first use, `file` says where they are. */
  inputTensor(name: string, datatype: Datatype, shape: readonly number[], ref: SharedMemoryRef): Tensor {
    const lease = this.api.acquire(ref.region, ref.offset, ref.byteSize);
    this.inputs.push(lease);
    const file = lease.window();
    let bytes: Buffer | undefined;
    const read = (): Buffer => {
      if (bytes !== undefined) return bytes;
      const buffer = this.api.takeBuffer?.(ref.byteSize);
      bytes = lease.readNow(buffer);
      if (buffer) this.buffers.push(buffer);
      return bytes;
    };
    return {
      name,
      datatype,
      shape,
      file,
      get data(): Uint8Array {
        return read();
      },
    };
  }

  /** Checks an output window now, so a bad one fails the request before it runs. */
  bindOutput(name: string, ref: SharedMemoryRef): void {
    const lease = this.api.acquire(ref.region, ref.offset, ref.byteSize);
    this.outputs.get(name)?.release();
    this.outputs.set(name, lease);
  }

  get hasOutputs(): boolean {
    return this.outputs.size > 0;
  }

  isOutput(name: string): boolean {
    return this.outputs.has(name);
  }

  /** Writes the outputs bound to regions; fails (writing nothing) when one does not fit. */
  async writeOutputs(tensors: readonly OutputTensor[]): Promise<void> {
    for (const t of tensors) {
      const lease = this.outputs.get(t.name);
      if (!lease) continue;
      const err = checkOutputFits(lease, t.name, t.data.byteLength);
      if (err) throw err;
    }
    for (const t of tensors) {
      const lease = this.outputs.get(t.name);
      if (lease) await lease.write(t.data);
    }
  }

  /** Lets go of every region (call once the request is answered, also on failure). */
  release(): void {
    for (const lease of this.outputs.values()) lease.release();
    this.outputs.clear();
    for (const lease of this.inputs) lease.release();
    this.inputs.length = 0;
    // The request is answered: nothing reads its inputs any more.
    for (const b of this.buffers) this.api.giveBuffer?.(b);
    this.buffers.length = 0;
  }
}
