/**
 * as://account/container/path repositories (Azure Blob Storage). Credentials,
 * first that applies:
 *  1. AZURE_STORAGE_CONNECTION_STRING for the same account (it may name its
 *     own BlobEndpoint, as Azurite and private endpoints need);
 *  2. an account key: Triton's credential file, or AZURE_STORAGE_KEY (with
 *     AZURE_STORAGE_ACCOUNT overriding the URL's account, as Triton);
 *  3. AZURE_STORAGE_AUTH_TYPE=managed_identity (AZURE_STORAGE_CLIENT_ID for a
 *     user-assigned identity);
 *  4. otherwise Azure's DefaultAzureCredential chain.
 */
import { createWriteStream } from 'node:fs';
import { pipeline } from 'node:stream/promises';
import type { ContainerClient } from '@azure/storage-blob';
import { Errors } from '../errors.js';
import { credentialFor } from './cloud-credentials.js';
import { errorText, networkCause, type ObjectStore, type RemoteLocation, type StoredObject } from './object-store.js';

export interface AzureUrl {
  account: string;
  container: string;
  prefix: string;
}

/** Triton's pattern: account, container, optional path, optional query. */
const AS_URL = /^as:\/\/([^/]+)\/([^/?]+)(?:\/([^?]*))?(\?.*)?$/;

export function parseAzureUrlParts(url: string): AzureUrl {
  const m = AS_URL.exec(url);
  if (!m) throw Errors.repositoryUrl(url, 'expected as://account/container[/path]');
  const host = m[1]!;
  const suffix = host.indexOf('.blob.core.windows.net');
  const account = suffix > 0 ? host.slice(0, suffix) : host;
  const prefix = (m[3] ?? '').replace(/\/{2,}/g, '/').replace(/^\/+|\/+$/g, '');
  return { account, container: m[2]!, prefix };
}

export function parseAzureUrl(url: string, env: NodeJS.ProcessEnv): RemoteLocation {
  const parts = parseAzureUrlParts(url);
  return { scheme: 'as', url, open: () => openAzure(url, parts, env) };
}

/** The AccountName and BlobEndpoint of a connection string. */
function connectionStringFields(cs: string): Map<string, string> {
  const fields = new Map<string, string>();
  for (const part of cs.split(';')) {
    const eq = part.indexOf('=');
    if (eq > 0) fields.set(part.slice(0, eq).trim().toLowerCase(), part.slice(eq + 1).trim());
  }
  return fields;
}

async function openAzure(url: string, parts: AzureUrl, env: NodeJS.ProcessEnv): Promise<ObjectStore> {
  const blob = await import('@azure/storage-blob');
  const options = { retryOptions: { maxTries: 3, tryTimeoutInMs: 120_000 } };
  const cred = credentialFor('as', url, env);
  const account = cred?.account_str || env.AZURE_STORAGE_ACCOUNT || parts.account;
  const connection = env.AZURE_STORAGE_CONNECTION_STRING;
  const fields = connection ? connectionStringFields(connection) : undefined;
  let service;
  let where = `https://${account}.blob.core.windows.net`;
  if (connection && fields && (fields.get('accountname') ?? account) === account && !cred) {
    service = blob.BlobServiceClient.fromConnectionString(connection, options);
    where = fields.get('blobendpoint') ?? where;
  } else {
    const key = cred ? cred.account_key : env.AZURE_STORAGE_KEY;
    const authType = (cred ? cred.auth_type : env.AZURE_STORAGE_AUTH_TYPE) || (key ? 'key' : '');
    const clientId = (cred ? cred.client_id : env.AZURE_STORAGE_CLIENT_ID) || undefined;
    if (authType === 'key') {
      if (!key) throw Errors.repositoryUnavailable(url, 'auth_type "key" needs an account key (AZURE_STORAGE_KEY)');
      service = new blob.BlobServiceClient(where, new blob.StorageSharedKeyCredential(account, key), options);
    } else if (authType === 'managed_identity' || authType === 'default' || authType === '') {
      const identity = await import('@azure/identity');
      const token =
        authType === 'managed_identity'
          ? clientId
            ? new identity.ManagedIdentityCredential({ clientId })
            : new identity.ManagedIdentityCredential()
          : new identity.DefaultAzureCredential(clientId ? { managedIdentityClientId: clientId } : {});
      service = new blob.BlobServiceClient(where, token, options);
    } else {
      throw Errors.repositoryUnavailable(
        url,
        `unknown AZURE_STORAGE_AUTH_TYPE '${authType}' (expected key, managed_identity or default)`,
      );
    }
  }
  return new AzureStore(service.getContainerClient(parts.container), parts, where);
}

class AzureStore implements ObjectStore {
  private readonly root: string;

  constructor(
    private readonly container: ContainerClient,
    private readonly parts: AzureUrl,
    private readonly where: string,
  ) {
    this.root = parts.prefix === '' ? '' : `${parts.prefix}/`;
  }

  async list(prefix: string): Promise<StoredObject[]> {
    const objects: StoredObject[] = [];
    for await (const item of this.container.listBlobsFlat({ prefix: this.root + prefix })) {
      if (item.name.length <= this.root.length) continue;
      objects.push({
        path: item.name.slice(this.root.length),
        size: item.properties.contentLength ?? 0,
        version: (item.properties.etag ?? '').replace(/^"|"$/g, ''),
      });
    }
    return objects;
  }

  async download(object: StoredObject, file: string): Promise<void> {
    const client = this.container.getBlobClient(this.root + object.path);
    const etag = object.version ? `"${object.version}"` : undefined;
    const response = await client.download(0, undefined, etag ? { conditions: { ifMatch: etag } } : {});
    if (!response.readableStreamBody) throw new Error(`blob '${object.path}' has no body`);
    await pipeline(response.readableStreamBody, createWriteStream(file));
  }

  describeError(err: unknown): string {
    const net = networkCause(err, this.where);
    if (net) return net;
    const e = err as { name?: string; code?: unknown; statusCode?: number; details?: { errorCode?: string } };
    const code = e.details?.errorCode ?? (typeof e.code === 'string' ? e.code : undefined);
    const message = errorText(err).split('\n')[0] ?? '';
    const container = this.parts.container;
    if (
      e.name === 'CredentialUnavailableError' ||
      e.name === 'AuthenticationError' ||
      e.name === 'AggregateAuthenticationError'
    ) {
      return `no usable Azure credential (set AZURE_STORAGE_KEY, ` +
        `AZURE_STORAGE_CONNECTION_STRING or AZURE_STORAGE_AUTH_TYPE): ${message}`;
    }
    if (code === 'ContainerNotFound') return `container '${container}' does not exist (ContainerNotFound)`;
    if (code === 'AuthenticationFailed' || code === 'InvalidAuthenticationInfo')
      return `the credentials were rejected (${code})`;
    if (e.statusCode === 403) return `access to container '${container}' is denied (${code ?? 'HTTP 403'})`;
    if (e.statusCode === 404) return `container '${container}' or its blobs were not found (${code ?? 'HTTP 404'})`;
    if (code === 'ConditionNotMet')
      return 'a blob changed while it was being downloaded (ConditionNotMet); the next poll retries';
    return e.statusCode ? `${code ?? 'error'} (HTTP ${e.statusCode}): ${message}` : message;
  }

  async close(): Promise<void> {}
}
