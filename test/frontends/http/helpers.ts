/** Test helpers: a plain node:http client that returns exact status, headers and bytes. */
import http from 'node:http';

export interface HttpReply {
  status: number;
  headers: http.IncomingHttpHeaders;
  body: Buffer;
  reusedSocket: boolean;
}

export interface CallOptions {
  body?: string | Buffer;
  headers?: Record<string, string>;
  /** Send the body with Transfer-Encoding: chunked (no Content-Length), in pieces of this size. */
  chunkSize?: number;
  agent?: http.Agent;
}

export function call(port: number, method: string, path: string, options: CallOptions = {}): Promise<HttpReply> {
  return new Promise((resolve, reject) => {
    const headers: Record<string, string> = { ...(options.headers ?? {}) };
    const body =
      options.body === undefined ? undefined : Buffer.isBuffer(options.body) ? options.body : Buffer.from(options.body);
    if (body !== undefined && options.chunkSize === undefined) headers['Content-Length'] = String(body.byteLength);
    const req = http.request(
      { host: '127.0.0.1', port, method, path, headers, agent: options.agent ?? false },
      (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (c: Buffer) => chunks.push(c));
        res.on('end', () =>
          resolve({
            status: res.statusCode ?? 0,
            headers: res.headers,
            body: Buffer.concat(chunks),
            reusedSocket: req.reusedSocket,
          }),
        );
        res.on('error', reject);
      },
    );
    req.on('error', reject);
    if (body !== undefined && options.chunkSize !== undefined) {
      for (let off = 0; off < body.byteLength; off += options.chunkSize)
        req.write(body.subarray(off, off + options.chunkSize));
      req.end();
    } else {
      req.end(body);
    }
  });
}

export function json(reply: HttpReply): unknown {
  return JSON.parse(reply.body.toString('utf8'));
}

export function int32Bytes(values: number[]): Buffer {
  const a = new Int32Array(values);
  return Buffer.from(a.buffer, a.byteOffset, a.byteLength);
}

export function int32Values(bytes: Uint8Array): number[] {
  const copy = Buffer.from(bytes);
  return [...new Int32Array(copy.buffer, copy.byteOffset, copy.byteLength / 4)];
}

/** A JSON header plus binary chunks, and the header that says where the JSON ends. */
export function binaryRequest(header: object, chunks: Uint8Array[]): { body: Buffer; headers: Record<string, string> } {
  const jsonPart = Buffer.from(JSON.stringify(header));
  return {
    body: Buffer.concat([jsonPart, ...chunks]),
    headers: { 'Inference-Header-Content-Length': String(jsonPart.byteLength) },
  };
}

/** Splits a binary-extension reply into its JSON part and the bytes after it. */
// eslint-disable-next-line @typescript-eslint/no-explicit-any -- tests walk the JSON header freely
export function splitBinaryReply(reply: HttpReply): { header: any; binary: Buffer } {
  const n = Number(reply.headers['inference-header-content-length']);
  return { header: JSON.parse(reply.body.subarray(0, n).toString('utf8')), binary: reply.body.subarray(n) };
}
