/**
 * s3:// repositories, with Triton's three URL forms:
 *   s3://bucket/path                      AWS S3
 *   s3://host:port/bucket/path            an S3-compatible store over HTTP
 *   s3://https://host:port/bucket/path    the same over HTTPS
 * Stores named by host:port are addressed path-style. Credentials come from
 * the AWS SDK's default chain (environment, shared config and profiles,
 * container and instance roles) unless Triton's credential file has an entry.
 */
import { createWriteStream } from 'node:fs';
import { writeFile } from 'node:fs/promises';
import { Agent } from 'node:http';
import { createRequire } from 'node:module';
import { pipeline } from 'node:stream/promises';
import type { Readable } from 'node:stream';
import type { S3Client, S3ClientConfig } from '@aws-sdk/client-s3';
import { Errors } from '../errors.js';
import { credentialFor } from './cloud-credentials.js';
import { errorText, networkCause, type ObjectStore, type RemoteLocation, type StoredObject } from './object-store.js';

export interface S3Url {
  bucket: string;
  /** Key prefix of the repository root, without leading or trailing '/'. */
  prefix: string;
  /** `http://host:port` or `https://host:port` for S3-compatible stores. */
  endpoint?: string;
}

/** Triton's pattern for the host:port forms; anything else is `bucket/path`. */
const ENDPOINT_FORM = /^s3:\/\/(http:\/\/|https:\/\/|)([0-9a-zA-Z\-.]+):([0-9]+)\/([0-9a-z.-]+)((?:\/[0-9a-zA-Z.\-_]+)*)$/;

export function parseS3UrlParts(url: string): S3Url {
  let rest = url.slice('s3://'.length);
  let protocol = '';
  for (const p of ['https://', 'http://']) {
    if (rest.startsWith(p)) {
      protocol = p;
      rest = rest.slice(p.length);
      break;
    }
  }
  // Leading, trailing and doubled slashes are dropped, as Triton does.
  const trimmed = rest.replace(/\/{2,}/g, '/').replace(/^\/+|\/+$/g, '');
  if (trimmed === '') throw Errors.repositoryUrl(url, 'no bucket name');
  const clean = `s3://${protocol}${trimmed}`;
  const m = ENDPOINT_FORM.exec(clean);
  if (m) {
    const [, proto, host, port, bucket, path] = m;
    return {
      bucket: bucket!,
      prefix: path!.replace(/^\//, ''),
      endpoint: `${proto === 'https://' ? 'https' : 'http'}://${host}:${port}`,
    };
  }
  if (protocol !== '') {
    throw Errors.repositoryUrl(
      url,
      `after ${protocol} comes host:port/bucket[/path] (bucket in lower case; path of letters, digits, '.', '-', '_')`,
    );
  }
  const slash = trimmed.indexOf('/');
  const bucket = slash < 0 ? trimmed : trimmed.slice(0, slash);
  const prefix = slash < 0 ? '' : trimmed.slice(slash + 1);
  if (bucket.includes(':')) {
    throw Errors.repositoryUrl(
      url,
      `'${bucket}' is neither a bucket name nor host:port followed by /bucket[/path] (bucket in lower case; path of letters, digits, '.', '-', '_')`,
    );
  }
  return { bucket, prefix };
}

export function parseS3Url(url: string, env: NodeJS.ProcessEnv): RemoteLocation {
  const parts = parseS3UrlParts(url);
  return { scheme: 's3', url, open: () => openS3(url, parts, env) };
}

async function openS3(url: string, parts: S3Url, env: NodeJS.ProcessEnv): Promise<ObjectStore> {
  const sdk = loadSdk();
  const cred = credentialFor('s3', url, env);
  const config: S3ClientConfig = {
    maxAttempts: 3,
    requestHandler: {
      connectionTimeout: 5000,
      requestTimeout: 120_000,
      // A store over plain HTTP gets a new connection per request. Servers that leave Nagle's
      // algorithm on (radosgw's beast frontend without tcp_nodelay=1) send a response's body in a
      // second small segment only once the first is acknowledged, and on a kept-alive connection
      // Linux delays that acknowledgement: every request after a connection's first waited 40 ms
      // (about 44 ms a GET against 2 ms on fresh connections, one at a time; 200 small objects 16 at
      // a time took 0.41 s instead of 0.65). Without TLS a connection costs one round trip.
      ...(parts.endpoint?.startsWith('http:') ? { httpAgent: new Agent({ keepAlive: false, maxSockets: 50 }) } : {}),
    },
    // S3-compatible stores do not all know the newer flexible checksums.
    requestChecksumCalculation: 'WHEN_REQUIRED',
    responseChecksumValidation: 'WHEN_REQUIRED',
    // Each command class's middleware stack is built once, not again for every request
    // (a repository copy sends one GetObject per file).
    cacheMiddleware: true,
  };
  // Triton's order: keys, then a profile, then the SDK's default chain
  // (shared config, SSO, container and instance roles).
  const keyId = cred ? cred.key_id : env.AWS_ACCESS_KEY_ID;
  const secret = cred ? cred.secret_key : env.AWS_SECRET_ACCESS_KEY;
  const profile = cred ? cred.profile : env.AWS_PROFILE;
  if (keyId && secret) {
    const sessionToken = (cred ? cred.session_token : env.AWS_SESSION_TOKEN) || undefined;
    config.credentials = { accessKeyId: keyId, secretAccessKey: secret, sessionToken };
  } else if (profile) {
    config.profile = profile;
  }
  const region = cred?.region || env.AWS_REGION || env.AWS_DEFAULT_REGION;
  if (region) config.region = region;
  if (parts.endpoint) {
    config.endpoint = parts.endpoint;
    config.forcePathStyle = true;
  } else {
    config.followRegionRedirects = true;
  }
  let client = new sdk.S3Client(config);
  if (!region) {
    // No region in the environment or shared config: S3 answers any region's
    // bucket listing from us-east-1 with a redirect the client follows.
    try {
      await client.config.region();
    } catch {
      client.destroy();
      client = new sdk.S3Client({ ...config, region: 'us-east-1' });
    }
  }
  return new S3Store(client, sdk, parts, await directGets(client, parts));
}

/** Objects up to this size are read whole and written at once; larger ones are streamed to the file. */
const SMALL_OBJECT_BYTES = 1 << 20;

type Sdk = typeof import('@aws-sdk/client-s3');
type Signer = Awaited<ReturnType<S3Client['config']['signer']>>;
type SignableRequest = Parameters<Signer['sign']>[0];
/** What a store needs to send a GET by itself: the SDK's signer and HTTP handler, and the address parts. */
interface DirectGets {
  readonly signer: Signer;
  readonly handler: S3Client['config']['requestHandler'];
  readonly client: S3Client;
  readonly endpoint: URL;
  readonly region: string;
}

/**
 * A store named by host:port is addressed path-style, so an object's URL is
 * `<endpoint>/<bucket>/<key>` and a GetObject needs none of the SDK's
 * per-command machinery (endpoint rules, schema serialization and
 * deserialization of some thirty response headers, retry bookkeeping): in a
 * fresh process, 200 small GetObjects cost 1.7-2.0 ms of CPU each through the
 * SDK and 0.7-0.9 ms as a signed GET through the same HTTP handler. Such stores get their
 * objects by a GET signed by the SDK's own signer (with the client's
 * credentials, region and clock offset) and sent by the client's own HTTP
 * handler (its agent, sockets and timeouts). Any answer but 200 is asked again
 * through GetObjectCommand, so errors, redirects and retries stay the SDK's.
 * AWS's own endpoints (virtual-hosted, regional, FIPS, dual-stack, region
 * redirects) are left to the SDK.
 */
async function directGets(client: S3Client, parts: S3Url): Promise<DirectGets | undefined> {
  if (!parts.endpoint) return undefined;
  const region = await client.config.region();
  return { signer: await client.config.signer(), handler: client.config.requestHandler, client, endpoint: new URL(parts.endpoint), region };
}

/** A key's path as the SDK writes it: each segment URI-encoded, also the characters `!'()*`. */
function encodeKey(key: string): string {
  return key
    .split('/')
    .map((s) => encodeURIComponent(s).replace(/[!'()*]/g, (c) => `%${c.charCodeAt(0).toString(16).toUpperCase()}`))
    .join('/');
}

/**
 * The SDK ships CommonJS only. Loaded with require() rather than import(): an
 * import of a CommonJS module first scans its source for export names, which
 * for this one nearly doubled the CPU time of loading it.
 */
function loadSdk(): Sdk {
  return createRequire(import.meta.url)('@aws-sdk/client-s3') as Sdk;
}

export class S3Store implements ObjectStore {
  private readonly root: string;
  private readonly where: string;

  /** Objects fetched by a direct GET and through the SDK (tests read them). */
  readonly gets = { direct: 0, sdk: 0 };

  constructor(
    private readonly client: S3Client,
    private readonly sdk: Sdk,
    private readonly parts: S3Url,
    private direct: DirectGets | undefined,
  ) {
    this.root = parts.prefix === '' ? '' : `${parts.prefix}/`;
    this.where = parts.endpoint ?? 'S3';
  }

  async list(prefix: string): Promise<StoredObject[]> {
    const objects: StoredObject[] = [];
    const pages = this.sdk.paginateListObjectsV2({ client: this.client }, { Bucket: this.parts.bucket, Prefix: this.root + prefix });
    for await (const page of pages) {
      for (const o of page.Contents ?? []) {
        if (!o.Key || o.Key.length <= this.root.length) continue;
        objects.push({ path: o.Key.slice(this.root.length), size: o.Size ?? 0, version: unquote(o.ETag ?? '') });
      }
    }
    return objects;
  }

  async download(object: StoredObject, file: string): Promise<number | void> {
    const body = (await this.directGet(object)) ?? (await this.sdkGet(object));
    if (object.size > SMALL_OBJECT_BYTES) {
      await pipeline(body, createWriteStream(file));
      return;
    }
    // Small files (configs, small models): one write of the whole body, without a file stream.
    const chunks: Buffer[] = [];
    for await (const chunk of body) chunks.push(chunk as Buffer);
    const bytes = chunks.length === 1 ? chunks[0]! : Buffer.concat(chunks);
    await writeFile(file, bytes);
    return bytes.length;
  }

  private async sdkGet(object: StoredObject): Promise<Readable> {
    const out = await this.client.send(
      new this.sdk.GetObjectCommand({
        Bucket: this.parts.bucket,
        Key: this.root + object.path,
        IfMatch: object.version ? `"${object.version}"` : undefined,
      }),
    );
    if (!out.Body) throw new Error(`object '${object.path}' has no body`);
    this.gets.sdk++;
    return out.Body as Readable;
  }

  /** The object's body by a direct GET (see directGets), or undefined when the SDK should ask instead. */
  private async directGet(object: StoredObject): Promise<Readable | undefined> {
    const direct = this.direct;
    if (!direct) return undefined;
    const { endpoint } = direct;
    const headers: Record<string, string> = { host: endpoint.host, 'x-amz-content-sha256': 'UNSIGNED-PAYLOAD' };
    if (object.version) headers['if-match'] = `"${object.version}"`;
    const request: SignableRequest = {
      method: 'GET',
      protocol: endpoint.protocol,
      hostname: endpoint.hostname,
      port: endpoint.port === '' ? undefined : Number(endpoint.port),
      path: `/${this.parts.bucket}/${encodeKey(this.root + object.path)}`,
      query: {},
      headers,
    };
    let response;
    try {
      const signed = await direct.signer.sign(request, {
        signingDate: new Date(Date.now() + (direct.client.config.systemClockOffset ?? 0)),
        signingRegion: direct.region,
        signingService: 's3',
      });
      ({ response } = await direct.handler.handle(signed));
    } catch {
      return undefined;
    }
    const body = response.body as Readable;
    if (response.statusCode === 200) {
      this.gets.direct++;
      return body;
    }
    body.resume();
    // A refusal of the request itself (not of this one object) says this store wants what only the SDK does.
    if (response.statusCode === 400 || response.statusCode === 403 || response.statusCode === 301 || response.statusCode === 307) {
      this.direct = undefined;
    }
    return undefined;
  }

  describeError(err: unknown): string {
    const net = networkCause(err, this.where);
    if (net) return net;
    const e = err as { name?: string; Code?: string; message?: string; $metadata?: { httpStatusCode?: number } };
    const code = e.Code ?? e.name ?? 'Error';
    const status = e.$metadata?.httpStatusCode;
    const detail = e.message && e.message !== 'UnknownError' && e.message !== code ? `: ${e.message}` : '';
    const bucket = this.parts.bucket;
    switch (code) {
      case 'NoSuchBucket':
        return `bucket '${bucket}' does not exist (NoSuchBucket)`;
      case 'InvalidAccessKeyId':
      case 'SignatureDoesNotMatch':
      case 'InvalidToken':
      case 'ExpiredToken':
        return `the credentials were rejected (${code})${detail}`;
      case 'AccessDenied':
      case 'AllAccessDisabled':
        return `access to bucket '${bucket}' is denied (${code})${detail}`;
      case 'PreconditionFailed':
        return `an object changed while it was being downloaded (${code}); the next poll retries`;
      case 'CredentialsProviderError':
        return `no AWS credentials found${detail}`;
      default:
        if (status === 403) return `access to bucket '${bucket}' is denied (${code}, HTTP 403)${detail}`;
        if (status === 404) return `bucket '${bucket}' or its objects were not found (${code}, HTTP 404)${detail}`;
        return status ? `${code} (HTTP ${status})${detail}` : errorText(err);
    }
  }

  async close(): Promise<void> {
    this.client.destroy();
  }
}

function unquote(etag: string): string {
  return etag.replace(/^"|"$/g, '');
}
