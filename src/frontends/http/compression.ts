/** Response compression for infer replies, negotiated from Accept-Encoding as Triton does. */
import { deflate, gzip } from 'node:zlib';

export type ResponseEncoding = 'identity' | 'gzip' | 'deflate';

/**
 * Picks the encoding with the highest q-value among identity, deflate and
 * gzip; the first one wins a tie and a q of 0 never wins. Malformed entries
 * and unparsable weights are skipped.
 */
export function negotiateResponseEncoding(acceptEncoding: string | undefined): ResponseEncoding {
  if (acceptEncoding === undefined) return 'identity';
  let chosen: ResponseEncoding = 'identity';
  let weight = 0;
  for (const entry of acceptEncoding.split(',')) {
    let start = 0;
    while (start < entry.length && entry.charCodeAt(start) === 0x20) start++;
    if (start === entry.length) continue;
    const q = entry.indexOf(';q=');
    if (q !== -1 && start >= q) continue;
    const type = q === -1 ? entry.slice(start) : entry.slice(start, q);
    let typeWeight = 1;
    if (q !== -1) {
      typeWeight = parseFloat(entry.slice(q + 3));
      if (Number.isNaN(typeWeight)) continue;
    }
    if ((type === 'identity' || type === 'deflate' || type === 'gzip') && typeWeight > weight) {
      chosen = type;
      weight = typeWeight;
    }
  }
  return chosen;
}

/** Compresses a response body off the event loop. */
export function compressBody(encoding: 'gzip' | 'deflate', body: Buffer): Promise<Buffer> {
  return new Promise<Buffer>((resolve, reject) => {
    const done = (err: Error | null, out: Buffer): void => (err === null ? resolve(out) : reject(err));
    if (encoding === 'gzip') gzip(body, done);
    else deflate(body, done);
  });
}
