/**
 * System shared memory from Node: a POSIX shared-memory object is a file
 * under /dev/shm (what shm_open makes on Linux), so a region is created,
 * written and read with the file API. Node cannot map it, so each write and
 * read is one copy between the caller's array and the shared pages; the
 * server reads the same pages without any copy over the network.
 */
import { closeSync, fstatSync, ftruncateSync, openSync, readSync, unlinkSync, writeSync, constants } from 'node:fs';
import path from 'node:path';
import { type Datatype, datatypeInfo, elementCount } from '../tensor/datatype.js';
import { InvalidInputError } from './errors.js';
import { outputData, tensorBytes } from './tensors.js';
import type { InputData, TensorData } from './types.js';

const SHM_DIR = '/dev/shm';

/** The file behind a shared-memory key ("/name" or "name"). */
export function sharedMemoryPath(key: string): string {
  const name = key.startsWith('/') ? key.slice(1) : key;
  if (name === '' || name.includes('/') || name === '.' || name === '..') {
    throw new InvalidInputError(`shared memory key ${JSON.stringify(key)} must be one name, like "/my_region"`);
  }
  return path.join(SHM_DIR, name);
}

export class SystemSharedMemoryRegion {
  private fd: number;

  private constructor(
    /** The key to register the region with (shm_open's name, with its leading slash). */
    readonly key: string,
    readonly byteSize: number,
    fd: number,
  ) {
    this.fd = fd;
  }

  /**
   * Creates (or, with `exclusive: false`, reuses) the object `key` of `byteSize` bytes, zero-filled.
   * The key is what `registerSystemSharedMemory` takes.
   */
  static create(key: string, byteSize: number, options: { exclusive?: boolean } = {}): SystemSharedMemoryRegion {
    if (!Number.isSafeInteger(byteSize) || byteSize <= 0)
      throw new InvalidInputError(`shared memory region size must be an integer > 0, not ${byteSize}`);
    const file = sharedMemoryPath(key);
    const flags = constants.O_RDWR | constants.O_CREAT | (options.exclusive === false ? 0 : constants.O_EXCL);
    const fd = openSync(file, flags, 0o600);
    try {
      ftruncateSync(fd, byteSize);
    } catch (err) {
      closeSync(fd);
      throw err;
    }
    return new SystemSharedMemoryRegion(key.startsWith('/') ? key : `/${key}`, byteSize, fd);
  }

  /** Opens an existing object (made by another process, say). */
  static open(key: string): SystemSharedMemoryRegion {
    const fd = openSync(sharedMemoryPath(key), constants.O_RDWR);
    return new SystemSharedMemoryRegion(key.startsWith('/') ? key : `/${key}`, fstatSync(fd).size, fd);
  }

  private check(what: string, offset: number, length: number): void {
    if (this.fd < 0) throw new InvalidInputError(`shared memory region '${this.key}' is closed`);
    if (!Number.isSafeInteger(offset) || offset < 0 || offset + length > this.byteSize) {
      throw new InvalidInputError(
        `${what} of ${length} bytes at offset ${offset} does not fit region '${this.key}' of ${this.byteSize} bytes`,
      );
    }
  }

  /** Writes raw bytes at `offset`. */
  write(bytes: Uint8Array, offset = 0): void {
    this.check('a write', offset, bytes.byteLength);
    let done = 0;
    while (done < bytes.byteLength) done += writeSync(this.fd, bytes, done, bytes.byteLength - done, offset + done);
  }

  /**
   * Writes a tensor's data in the wire layout (BYTES length-prefixed) and
   * returns its byte size: the `byteSize` to name in the request.
   */
  writeTensor(datatype: Datatype, data: InputData, offset = 0): number {
    const { bytes } = tensorBytes(`data written to region '${this.key}'`, datatype, data);
    this.write(bytes, offset);
    return bytes.byteLength;
  }

  /** Reads `byteLength` raw bytes at `offset`. */
  read(byteLength: number, offset = 0): Buffer {
    this.check('a read', offset, byteLength);
    const out = Buffer.allocUnsafe(byteLength);
    let done = 0;
    while (done < byteLength) {
      const n = readSync(this.fd, out, done, byteLength - done, offset + done);
      if (n === 0) break;
      done += n;
    }
    return out.subarray(0, done);
  }

  /**
   * Reads a tensor the server wrote (an output placed in shared memory).
   * `byteSize` is needed for BYTES (the output's `sharedMemory.byteSize` bounds it); fixed-size types derive it.
   */
  readTensor(
    datatype: Datatype,
    shape: readonly number[],
    options: { offset?: number; byteSize?: number; bytesAsStrings?: boolean } = {},
  ): TensorData {
    const offset = options.offset ?? 0;
    if (datatype === 'BYTES') {
      if (options.byteSize === undefined)
        throw new InvalidInputError(`reading BYTES from region '${this.key}' needs the byteSize`);
      const raw = this.read(options.byteSize, offset);
      const count = elementCount(shape);
      // The server wrote `count` length-prefixed elements; what follows them in the window is not part of the tensor.
      let end = 0;
      for (let i = 0; i < count && end + 4 <= raw.byteLength; i++) end += 4 + raw.readUInt32LE(end);
      return outputData(
        `region '${this.key}'`,
        'tensor',
        datatype,
        shape,
        raw.subarray(0, Math.min(end, raw.byteLength)),
        options.bytesAsStrings === true,
      );
    }
    const size = elementCount(shape) * datatypeInfo(datatype).byteSize;
    return outputData(`region '${this.key}'`, 'tensor', datatype, shape, this.read(size, offset), false);
  }

  /** Closes this process's handle; the object stays for others until destroyed. */
  close(): void {
    if (this.fd >= 0) closeSync(this.fd);
    this.fd = -1;
  }

  /** Closes the handle and removes the object (unregister it from the server first). */
  destroy(): void {
    this.close();
    try {
      unlinkSync(sharedMemoryPath(this.key));
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err;
    }
  }
}
