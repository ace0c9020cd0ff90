/** Scoped API keys (`--auth-keys`): the keys file, scopes, the check frontends make, the file watcher. */
export {
  AccessControl,
  AUTH_FAILURE_REASONS,
  DEFAULT_FAILURE_LIMIT,
  MAX_PEER_CONNECTIONS,
  MAX_TOKEN_LENGTH,
  bearerToken,
  isAuthFailure,
  keysFileConfigError,
  readKeysFile,
  readKeysText,
  secretDigest,
  keysFromSnapshot,
  snapshotKeys,
  type AccessControlOptions,
  type AccessUpdate,
  type KeysSnapshot,
  type AuthFailure,
  type AuthFailureReason,
} from './access.js';
export {
  ANONYMOUS,
  KeysFileError,
  keyNameProblem,
  parseKeysFile,
  type KeyEntry,
  type KeyTable,
  type Principal,
} from './keys-file.js';
export {
  API_GROUPS,
  Grants,
  MODEL_GROUPS,
  ScopeError,
  TRITON_API_GROUPS,
  isApiGroup,
  parseScope,
  type ApiGroup,
  type TritonApiGroup,
} from './scopes.js';
export { AccessReplica, type ReplicaInit } from './replica.js';
export { KeysFileWatcher, type KeysWatcherOptions } from './watcher.js';
export { createKey, type CreatedKey } from './create.js';
