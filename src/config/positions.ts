import type { SourcePosition } from './errors.js';

/**
 * Where each field of a parsed config.pbtxt was written. Keys are field
 * paths in proto names: `max_batch_size`, `input[0].dims`, `input[0].dims[2]`
 * (a list element), `dynamic_batching.priority_queue_policy[3].timeout_action`
 * (a map entry by key), `parameters[EXECUTION_ENV_PATH]`.
 */
export type ConfigPositions = ReadonlyMap<string, SourcePosition>;

/** Joins a parent path and a field name. */
export function joinPath(parent: string, field: string): string {
  return parent === '' ? field : `${parent}.${field}`;
}

/** The path one level up: `a.b[2]` → `a.b`, `a.b` → `a`, `a` → ''. */
export function parentPath(path: string): string {
  if (path.endsWith(']')) {
    const open = path.lastIndexOf('[');
    return open > 0 ? path.slice(0, open) : '';
  }
  const dot = path.lastIndexOf('.');
  const open = path.lastIndexOf('[');
  // A dot inside a map key (`parameters[a.b]`) does not split the path.
  if (dot < 0 || (open >= 0 && open > dot)) return '';
  return path.slice(0, dot);
}

/**
 * Position of `path`, or of the nearest enclosing field that was written
 * (a default filled in by normalisation has no position of its own).
 */
export function lookupPosition(positions: ConfigPositions | undefined, path: string): SourcePosition | undefined {
  if (positions === undefined) return undefined;
  for (let p = path; p !== ''; p = parentPath(p)) {
    const found = positions.get(p);
    if (found !== undefined) return found;
  }
  return undefined;
}
