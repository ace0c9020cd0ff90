/**
 * `--grpc-restricted-protocol` (RPC groups that require a metadata key and
 * value) and `--grpc-header-forward-pattern` (metadata copied into request
 * parameters, ../header-forward.ts), as Triton applies them.
 */
import {
  Metadata,
  ServerInterceptingCall,
  ServerListenerBuilder,
  ResponderBuilder,
  status,
  type ServerInterceptor,
} from '@grpc/grpc-js';
import type { TritonApiGroup } from '../../auth/index.js';
import { checkForwardedName } from '../header-forward.js';
import { parseRestrictionGroups } from '../restriction-groups.js';
import type { ParameterValue } from '../../types/api.js';

/** Triton prefixes the configured key with this to form the metadata key. */
export const RESTRICTED_HEADER_PREFIX = 'triton-grpc-protocol-';

/** Triton's API groups, which `--grpc-restricted-protocol` names. */
export type RestrictedCategory = TritonApiGroup;

/** The category each RPC belongs to (by its proto name). */
export const CATEGORY_OF_RPC: Readonly<Record<string, RestrictedCategory>> = {
  Check: 'health',
  ServerLive: 'health',
  ServerReady: 'health',
  ModelReady: 'health',
  ServerMetadata: 'metadata',
  ModelMetadata: 'metadata',
  ModelInfer: 'inference',
  ModelStreamInfer: 'inference',
  ModelConfig: 'model-config',
  ModelStatistics: 'statistics',
  RepositoryIndex: 'model-repository',
  RepositoryModelLoad: 'model-repository',
  RepositoryModelUnload: 'model-repository',
  SystemSharedMemoryStatus: 'shared-memory',
  SystemSharedMemoryRegister: 'shared-memory',
  SystemSharedMemoryUnregister: 'shared-memory',
  CudaSharedMemoryStatus: 'shared-memory',
  CudaSharedMemoryRegister: 'shared-memory',
  CudaSharedMemoryUnregister: 'shared-memory',
  TraceSetting: 'trace',
  LogSettings: 'logging',
};

const CATEGORIES = new Set<string>(Object.values(CATEGORY_OF_RPC));

/** Metadata key (already prefixed) and value a category requires. */
export interface Restriction {
  readonly header: string;
  readonly value: string;
}

/**
 * Parses `--grpc-restricted-protocol` values, `<protocol>,<protocol>...:<key>=<value>`.
 * Throws NereidError (config) with Triton's messages.
 */
export function parseRestrictedProtocols(values: readonly string[]): Map<RestrictedCategory, Restriction> {
  const groups = parseRestrictionGroups<RestrictedCategory>(values, CATEGORIES, {
    formatError: (arg) =>
      `--grpc-restricted-protocol option format is '<protocol_1>,<protocol_2>,...:<key>=<value>'. Got ${arg}`,
    noun: 'protocol',
    valueRequired: false,
  });
  const out = new Map<RestrictedCategory, Restriction>();
  // One object per group of the command line, as the groups share it.
  const made = new Map<object, Restriction>();
  for (const [category, r] of groups) {
    let restriction = made.get(r);
    if (restriction === undefined) {
      restriction = { header: RESTRICTED_HEADER_PREFIX + r.key, value: r.value };
      made.set(r, restriction);
    }
    out.set(category, restriction);
  }
  return out;
}

/** Refuses calls to restricted RPCs that lack the required metadata, with UNAVAILABLE as Triton does. */
export function restrictionInterceptor(restrictions: ReadonlyMap<RestrictedCategory, Restriction>): ServerInterceptor {
  return (method, call) => {
    const rpc = method.path.slice(method.path.lastIndexOf('/') + 1);
    const category = CATEGORY_OF_RPC[rpc];
    const restriction = category === undefined ? undefined : restrictions.get(category);
    if (restriction === undefined) return new ServerInterceptingCall(call);
    const listener = new ServerListenerBuilder()
      .withOnReceiveMetadata((metadata: Metadata, next) => {
        if (metadata.get(restriction.header)[0] === restriction.value) next(metadata);
        else {
          call.sendStatus({
            code: status.UNAVAILABLE,
            details: `This protocol is restricted, expecting header '${restriction.header}'`,
          });
        }
      })
      .build();
    return new ServerInterceptingCall(call, new ResponderBuilder().withStart((next) => next(listener)).build());
  };
}

/** Metadata entries whose key matches, as string parameters; reserved names are INVALID_ARG. */
export function forwardedHeaders(metadata: Metadata, pattern: RegExp): Record<string, ParameterValue> | undefined {
  let out: Record<string, ParameterValue> | undefined;
  const map = metadata.getMap();
  for (const key in map) {
    if (!pattern.test(key)) continue;
    checkForwardedName(key);
    const value = map[key]!;
    (out ??= {})[key] = typeof value === 'string' ? value : value.toString('latin1');
  }
  return out;
}
