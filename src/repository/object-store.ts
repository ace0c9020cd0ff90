/** What a cloud model source needs from one object store (S3, GCS, Azure Blob). */

export interface StoredObject {
  /** Key relative to the repository root, '/'-separated (`simple/1/model.onnx`). */
  readonly path: string;
  readonly size: number;
  /** ETag (S3, Azure) or generation (GCS): changes whenever the object is rewritten. */
  readonly version: string;
}

export interface ObjectStore {
  /** Every object under the repository root whose relative key starts with `prefix`. */
  list(prefix: string): Promise<StoredObject[]>;
  /**
   * Writes the object's bytes to `file`; fails if the object no longer has
   * `object.version`. May resolve with the number of bytes written, which
   * spares the caller a stat of the file.
   */
  download(object: StoredObject, file: string): Promise<number | void>;
  /** The cause of an SDK error in words a user can act on. */
  describeError(err: unknown): string;
  close(): Promise<void>;
}

/** A parsed cloud repository URL. */
export interface RemoteLocation {
  readonly scheme: 's3' | 'gs' | 'as';
  /** The URL as the user wrote it. */
  readonly url: string;
  /** Opens the store (loads the SDK and resolves credentials on first use). */
  open(): Promise<ObjectStore>;
}

/** The cause text for network failures every SDK surfaces as Node errors. */
export function networkCause(err: unknown, where: string): string | undefined {
  const code = (err as { code?: unknown } | undefined)?.code;
  const nested = (err as { cause?: { code?: unknown } } | undefined)?.cause?.code;
  const c = typeof code === 'string' ? code : typeof nested === 'string' ? nested : undefined;
  switch (c) {
    case 'ECONNREFUSED':
      return `cannot connect to ${where} (connection refused)`;
    case 'ENOTFOUND':
    case 'EAI_AGAIN':
      return `cannot resolve the host of ${where} (${c})`;
    case 'ETIMEDOUT':
    case 'ECONNRESET':
    case 'EHOSTUNREACH':
    case 'ENETUNREACH':
    case 'TimeoutError':
      return `cannot reach ${where} (${c})`;
    default:
      return undefined;
  }
}

export function errorText(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}
