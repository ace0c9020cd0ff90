/**
 * The HTTP route table's lookup: a tree of path segments built once, so a
 * request costs a map lookup of its whole path when the path was seen
 * recently, else one split of it and a map lookup per segment; never a scan
 * of regular expressions.
 *
 * Patterns are written `/v2/models/:model/infer`; `[/versions/:version]`
 * marks an optional part (the pattern is added with and without it). A
 * `:name` segment matches any one non-empty segment, nothing is
 * percent-decoded, and a literal segment is tried before a `:name` one, the
 * lookup going back to the `:name` branch when the literal one leads nowhere
 * (`/v2/repository/models/index` is the index of a repository named
 * "models"). The path must match a pattern whole: no trailing slash, no
 * empty segment.
 */

export type RouteParams = Readonly<Record<string, string>>;

const RECENT_PATHS = 256;
const RECENT_PATH_LENGTH = 256;

interface RouteNode<R> {
  readonly literal: Map<string, RouteNode<R>>;
  param: RouteNode<R> | undefined;
  /** The route ending here, with the names of the `:name` segments on the way, in order. */
  end: { readonly route: R; readonly names: readonly string[] } | undefined;
}

export interface RouteMatch<R> {
  readonly route: R;
  readonly params: RouteParams;
}

function node<R>(): RouteNode<R> {
  return { literal: new Map(), param: undefined, end: undefined };
}

export class Router<R> {
  private readonly root = node<R>();
  /** The `:name` at each node that has one, to refuse a pattern giving the same place another name. */
  private readonly paramNames = new Map<RouteNode<R>, string>();
  /**
   * The matches of recent paths: clients send the same few paths again and
   * again (one model's infer), and one map lookup of the whole path costs
   * less than splitting it. Bounded in entries and in path length; emptied
   * when full, so paths that change with every request only cost the walk.
   */
  private readonly recent = new Map<string, RouteMatch<R>>();

  /** Adds `route` under `pattern`; a pattern added twice is a programming error. */
  add(pattern: string, route: R): this {
    const optional = /^(.*)\[([^\]]+)\](.*)$/.exec(pattern);
    if (optional !== null) {
      this.add(optional[1]! + optional[3]!, route);
      return this.add(optional[1]! + optional[2]! + optional[3]!, route);
    }
    if (!pattern.startsWith('/')) throw new Error(`route pattern '${pattern}' must start with '/'`);
    let at = this.root;
    const names: string[] = [];
    for (const segment of pattern.slice(1).split('/')) {
      if (segment.startsWith(':')) {
        const name = segment.slice(1);
        const existing = this.paramNames.get(at);
        if (existing !== undefined && existing !== name)
          throw new Error(`route pattern '${pattern}': ':${name}' where ':${existing}' is`);
        this.paramNames.set(at, name);
        at.param ??= node<R>();
        at = at.param;
        names.push(name);
      } else {
        let next = at.literal.get(segment);
        if (next === undefined) {
          next = node<R>();
          at.literal.set(segment, next);
        }
        at = next;
      }
    }
    if (at.end !== undefined) throw new Error(`route pattern '${pattern}' is added twice`);
    at.end = { route, names };
    return this;
  }

  /**
   * The route whose pattern matches the whole path (no query string), with its `:name` segments (do not modify them).
   */
  match(path: string): RouteMatch<R> | undefined {
    const cached = this.recent.get(path);
    if (cached !== undefined) return cached;
    const found = this.lookUp(path);
    if (found !== undefined && path.length <= RECENT_PATH_LENGTH) {
      if (this.recent.size >= RECENT_PATHS) this.recent.clear();
      this.recent.set(path, found);
    }
    return found;
  }

  private lookUp(path: string): RouteMatch<R> | undefined {
    if (path.charCodeAt(0) !== 0x2f /* '/' */) return undefined;
    const segments = path.split('/'); // segments[0] is the '' before the first '/'
    const values: string[] = [];
    const end = walk(this.root, segments, 1, values);
    if (end === undefined) return undefined;
    const params: Record<string, string> = {};
    for (let i = 0; i < end.names.length; i++) params[end.names[i]!] = values[i]!;
    return { route: end.route, params };
  }
}

function walk<R>(at: RouteNode<R>, segments: readonly string[], i: number, values: string[]): RouteNode<R>['end'] {
  if (i === segments.length) return at.end;
  const segment = segments[i]!;
  const literal = at.literal.get(segment);
  if (literal !== undefined) {
    const found = walk(literal, segments, i + 1, values);
    if (found !== undefined) return found;
  }
  if (at.param === undefined || segment === '') return undefined;
  values.push(segment);
  const found = walk(at.param, segments, i + 1, values);
  if (found === undefined) values.pop();
  return found;
}
