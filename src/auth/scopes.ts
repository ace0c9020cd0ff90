/**
 * Scopes: what a key opens. Triton's API groups (the categories of
 * `--http-restricted-api`), the metrics port, the OpenAI routes, or `*`;
 * the groups that name a model take a glob after a colon
 * (`inference:fraud_*`). See docs/security.md.
 */

/** Triton's API groups: the categories of `--http-restricted-api` and `--grpc-restricted-protocol`. */
export const TRITON_API_GROUPS = [
  'health',
  'metadata',
  'inference',
  'shared-memory',
  'model-config',
  'model-repository',
  'statistics',
  'trace',
  'logging',
] as const;

export type TritonApiGroup = (typeof TRITON_API_GROUPS)[number];

/** Every API group a scope may name: Triton's, the metrics port and the OpenAI routes. */
export type ApiGroup = TritonApiGroup | 'metrics' | 'openai';

export const API_GROUPS: readonly ApiGroup[] = [...TRITON_API_GROUPS, 'metrics', 'openai'];

/** The groups whose scope may be narrowed to models by a glob. */
export const MODEL_GROUPS: ReadonlySet<ApiGroup> = new Set<ApiGroup>([
  'inference',
  'metadata',
  'model-config',
  'statistics',
  'openai',
]);

const GROUPS: ReadonlySet<string> = new Set(API_GROUPS);

export function isApiGroup(name: string): name is ApiGroup {
  return GROUPS.has(name);
}

/** Why a scope text is not one: said in a sentence naming what is accepted. */
export class ScopeError extends Error {}

/** The models a grant covers: every model, or those matching one of the globs. */
type ModelSet = true | RegExp;

/** `*` any run of characters, `?` one character; everything else literal. */
export function globToRegExp(glob: string): RegExp {
  let source = '';
  for (const ch of glob) {
    if (ch === '*') source += '.*';
    else if (ch === '?') source += '.';
    else source += ch.replace(/[\\^$.|+()[\]{}]/g, '\\$&');
  }
  return new RegExp(`^${source}$`, 's');
}

interface ParsedScope {
  readonly group: ApiGroup | '*';
  /** The model glob, when one was given (always for the model groups: '*' when absent). */
  readonly models: string | undefined;
}

/** Parses one scope text (`health`, `inference:fraud_*`, `*`); throws ScopeError. */
export function parseScope(text: string): ParsedScope {
  if (text === '*') return { group: '*', models: undefined };
  const colon = text.indexOf(':');
  const name = colon < 0 ? text : text.slice(0, colon);
  if (!isApiGroup(name)) {
    throw new ScopeError(`unknown scope '${text}' (scopes: ${API_GROUPS.join(', ')}, *)`);
  }
  if (colon < 0) return { group: name, models: MODEL_GROUPS.has(name) ? '*' : undefined };
  const models = text.slice(colon + 1);
  if (!MODEL_GROUPS.has(name)) {
    throw new ScopeError(
      `scope '${name}' takes no model pattern (only ${[...MODEL_GROUPS].join(', ')} do), got '${text}'`,
    );
  }
  if (models === '')
    throw new ScopeError(`scope '${text}' has an empty model pattern (write '${name}' or '${name}:*' for every model)`);
  return { group: name, models };
}

/**
 * What one key (or anonymous) may do, compiled once from its scope list;
 * `allows` is a map lookup and, for a narrowed group, one regular
 * expression test.
 */
export class Grants {
  private readonly everything: boolean;
  private readonly groups = new Map<ApiGroup, ModelSet>();
  /** The last model tested against a glob, and the answer: a client sends most requests to the same model. */
  private lastSet: RegExp | undefined;
  private lastModel = '';
  private lastAnswer = false;

  constructor(readonly scopes: readonly string[]) {
    let everything = false;
    const globs = new Map<ApiGroup, string[] | true>();
    for (const text of scopes) {
      const s = parseScope(text);
      if (s.group === '*') {
        everything = true;
        continue;
      }
      const prior = globs.get(s.group);
      if (s.models === undefined || s.models === '*') globs.set(s.group, true);
      else if (prior !== true) globs.set(s.group, [...(prior ?? []), s.models]);
    }
    this.everything = everything;
    for (const [group, set] of globs) {
      this.groups.set(group, set === true ? true : new RegExp(set.map((g) => globToRegExp(g).source).join('|'), 's'));
    }
  }

  /**
   * Whether the group is open for `model`; with no model (a server-wide
   * endpoint of a model group, such as the server's metadata), whether any
   * model of the group is.
   */
  allows(group: ApiGroup, model?: string): boolean {
    if (this.everything) return true;
    const set = this.groups.get(group);
    if (set === undefined) return false;
    if (set === true || model === undefined) return true;
    if (set === this.lastSet && model === this.lastModel) return this.lastAnswer;
    const answer = set.test(model);
    this.lastSet = set;
    this.lastModel = model;
    this.lastAnswer = answer;
    return answer;
  }

  /** Whether the group is open for every model (a list of all models needs no filtering). */
  allowsEveryModel(group: ApiGroup): boolean {
    return this.everything || this.groups.get(group) === true;
  }
}
