export { LocalModelSource, createModelSource, type ModelSource, type LocalModelDir } from './model-source.js';
export {
  listModels,
  listVersions,
  listSubfolders,
  isDuplicate,
  DUPLICATE_MODEL_REASON,
  type FoundModel,
  type DuplicateModel,
  type RepositoryEntry,
} from './scan.js';
export { selectVersions, selectVersionsDetailed, missingVersionMessage, type VersionSelection } from './version-policy.js';
export { fingerprintDir } from './change-detection.js';
