export {
  LocalModelSource,
  createModelSource,
  isRemoteRepository,
  type ModelSource,
  type ModelSourceOptions,
  type LocalModelDir,
} from './model-source.js';
export {
  listModels,
  ModelSources,
  RepositoryListing,
  type RepositoryFailure,
  listVersions,
  listSubfolders,
  isDuplicate,
  isNotCopied,
  DUPLICATE_MODEL_REASON,
  type FoundModel,
  type ListedModel,
  type ListOptions,
  type DuplicateModel,
  type RepositoryEntry,
} from './scan.js';
export {
  selectVersions,
  selectVersionsDetailed,
  missingVersionMessage,
  type VersionSelection,
} from './version-policy.js';
export { fingerprintDir } from './change-detection.js';
