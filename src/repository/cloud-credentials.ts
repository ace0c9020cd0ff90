/**
 * Triton's credential file: TRITON_CLOUD_CREDENTIAL_PATH names a JSON file
 * with one section per scheme ("s3", "gs", "as"), each mapping a URL prefix
 * ("" matches everything) to that scheme's credential. The longest prefix
 * that starts the repository URL wins.
 */
import { readFileSync } from 'node:fs';
import { Errors } from '../errors.js';

export interface S3Credential {
  secret_key?: string;
  key_id?: string;
  region?: string;
  session_token?: string;
  profile?: string;
}

export interface AzureCredential {
  account_str?: string;
  account_key?: string;
  auth_type?: string;
  client_id?: string;
}

/** The credential for `url` from the file, or undefined when no file is set or nothing matches. */
export function credentialFor(scheme: 's3', url: string, env: NodeJS.ProcessEnv): S3Credential | undefined;
export function credentialFor(scheme: 'gs', url: string, env: NodeJS.ProcessEnv): string | undefined;
export function credentialFor(scheme: 'as', url: string, env: NodeJS.ProcessEnv): AzureCredential | undefined;
export function credentialFor(scheme: 's3' | 'gs' | 'as', url: string, env: NodeJS.ProcessEnv): unknown {
  const file = env.TRITON_CLOUD_CREDENTIAL_PATH;
  if (!file) return undefined;
  let parsed: unknown;
  try {
    parsed = JSON.parse(readFileSync(file, 'utf8'));
  } catch (err) {
    throw Errors.repositoryUnavailable(
      url,
      `cannot read the credential file TRITON_CLOUD_CREDENTIAL_PATH='${file}': ${(err as Error).message}`,
    );
  }
  const section = (parsed as Record<string, unknown> | null)?.[scheme];
  if (section === undefined) return undefined;
  if (typeof section !== 'object' || section === null || Array.isArray(section)) {
    throw Errors.repositoryUnavailable(
      url,
      `credential file '${file}': "${scheme}" must be an object of URL prefix to credential`,
    );
  }
  let best: string | undefined;
  for (const prefix of Object.keys(section)) {
    if (url.startsWith(prefix) && (best === undefined || prefix.length > best.length)) best = prefix;
  }
  if (best === undefined) return undefined;
  const value = (section as Record<string, unknown>)[best];
  const wantString = scheme === 'gs';
  if (wantString ? typeof value !== 'string' : typeof value !== 'object' || value === null || Array.isArray(value)) {
    throw Errors.repositoryUnavailable(
      url,
      `credential file '${file}': "${scheme}"."${best}" must be ` +
      `${wantString ? 'the path of a JSON key file' : 'an object'}`,
    );
  }
  return value;
}
