/**
 * The keys file (`--auth-keys`): YAML or JSON (JSON is read as YAML, so
 * both get line numbers), a list of keys, each a name, the hex SHA-256 of
 * its secret and its scopes. The file never holds a secret. Every mistake
 * is reported as `file:line: field: why`.
 */
import { isAlias, isMap, isScalar, isSeq, LineCounter, parseDocument, type Node as YamlNode } from 'yaml';
import { Grants, ScopeError } from './scopes.js';

/** The name whose scopes requests without a key get; health alone when the file has no such entry. */
export const ANONYMOUS = 'anonymous';
export const DEFAULT_ANONYMOUS_SCOPES: readonly string[] = ['health'];

/** Bigger than any plausible list of keys; a larger file is refused, not read into memory. */
export const MAX_KEYS_FILE_BYTES = 4 * 1024 * 1024;

/** Who a request is: a key of the file, or anonymous (no key sent). */
export interface Principal {
  readonly name: string;
  readonly grants: Grants;
  readonly anonymous: boolean;
}

export interface KeyEntry extends Principal {
  /** Lower-case hex SHA-256 of the secret. */
  readonly sha256: string;
}

export interface KeyTable {
  /** Keys by the hex SHA-256 of their secret. */
  readonly byHash: ReadonlyMap<string, KeyEntry>;
  /** What a request without a key may do. */
  readonly anonymous: Principal;
  /** Whether the file has an `anonymous` entry (else it gets health alone). */
  readonly anonymousGiven: boolean;
}

/** A keys file that cannot be used: the file, the 1-based line and the field at fault. */
export class KeysFileError extends Error {
  constructor(
    readonly file: string,
    readonly line: number,
    readonly field: string,
    readonly why: string,
  ) {
    super(`${file}:${line}: ${field === '' ? '' : `${field}: `}${why}`);
    this.name = 'KeysFileError';
  }
}

const HEX64 = /^[0-9a-fA-F]{64}$/;
const NAME = /^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$/;
const ENTRY_FIELDS = new Set(['name', 'sha256', 'scopes']);

/** Checks a key name as the file and `nereid keys create` accept it; returns why not, or undefined. */
export function keyNameProblem(name: string): string | undefined {
  if (!NAME.test(name)) {
    return `'${name}' is not a key name (1 to 128 letters, digits, '.', '_' or '-', starting with a letter or digit)`;
  }
  return undefined;
}

/** Parses the text of a keys file; `file` only names it in errors. Throws KeysFileError. */
export function parseKeysFile(file: string, text: string): KeyTable {
  const lines = new LineCounter();
  const doc = parseDocument(text, { lineCounter: lines, prettyErrors: false, uniqueKeys: true, strict: true });
  const lineOf = (offset: number | undefined): number => (offset === undefined ? 1 : lines.linePos(offset).line);
  const at = (node: YamlNode | null | undefined): number => lineOf(node?.range?.[0]);
  const fail = (line: number, field: string, why: string): never => {
    throw new KeysFileError(file, line, field, why);
  };
  const first = doc.errors[0];
  if (first !== undefined) fail(lineOf(first.pos[0]), '', `not valid YAML or JSON: ${first.message}`);
  const root = doc.contents;
  if (!isMap(root)) {
    fail(at(root), '', "expected a mapping with a 'keys' list (keys: [ { name, sha256, scopes }, ... ])");
  }
  let keysNode: YamlNode | null = null;
  let keysLine = 1;
  for (const pair of mapOf(root as YamlNode).items) {
    const key = scalarKey(pair.key, fail, at);
    if (key !== 'keys') fail(at(pair.key as YamlNode), key, "unknown field (the file has one field, 'keys')");
    keysNode = pair.value as YamlNode | null;
    keysLine = at(pair.key as YamlNode);
  }
  if (keysNode === null) fail(keysLine, 'keys', "missing: the file needs a 'keys' list (it may be empty: keys: [])");
  if (isAlias(keysNode)) fail(at(keysNode), 'keys', 'YAML aliases are not accepted in a keys file');
  if (!isSeq(keysNode)) fail(at(keysNode), 'keys', 'expected a list of keys');

  const byHash = new Map<string, KeyEntry>();
  const names = new Map<string, number>();
  let anonymous: Grants | undefined;
  const seq = keysNode as unknown as { items: Array<YamlNode | null> };
  seq.items.forEach((item, i) => {
    const where = `keys[${i}]`;
    if (!isMap(item))
      fail(at(item ?? (keysNode as YamlNode)), where, 'expected a mapping with name, sha256 and scopes');
    const fields = new Map<string, { key: YamlNode; value: YamlNode | null }>();
    for (const pair of mapOf(item as YamlNode).items) {
      const key = scalarKey(pair.key, fail, at);
      if (!ENTRY_FIELDS.has(key))
        fail(at(pair.key as YamlNode), `${where}.${key}`, 'unknown field (a key has name, sha256 and scopes)');
      const value = pair.value as YamlNode | null;
      if (isAlias(value)) fail(at(value), `${where}.${key}`, 'YAML aliases are not accepted in a keys file');
      fields.set(key, { key: pair.key as YamlNode, value });
    }
    const itemLine = at(item as YamlNode);
    const nameField = fields.get('name');
    if (nameField === undefined) fail(itemLine, `${where}.name`, 'missing');
    const name = stringValue(nameField!.value, `${where}.name`, fail, at);
    const problem = keyNameProblem(name);
    if (problem !== undefined) fail(at(nameField!.value), `${where}.name`, problem);
    const prior = names.get(name);
    if (prior !== undefined)
      fail(at(nameField!.value), `${where}.name`, `duplicate name '${name}' (first at line ${prior})`);
    names.set(name, at(nameField!.value));

    const scopesField = fields.get('scopes');
    if (scopesField === undefined)
      fail(itemLine, `${where}.scopes`, 'missing (a list such as [ "inference:my_model", "health" ])');
    const scopesNode = scopesField!.value;
    if (!isSeq(scopesNode)) fail(at(scopesNode ?? scopesField!.key), `${where}.scopes`, 'expected a list of scopes');
    const scopes: string[] = [];
    (scopesNode as unknown as { items: Array<YamlNode | null> }).items.forEach((s, j) => {
      if (isAlias(s)) fail(at(s), `${where}.scopes[${j}]`, 'YAML aliases are not accepted in a keys file');
      scopes.push(stringValue(s, `${where}.scopes[${j}]`, fail, at));
    });
    let grants: Grants;
    try {
      grants = new Grants(scopes);
    } catch (err) {
      if (!(err instanceof ScopeError)) throw err;
      const j = scopes.findIndex((s) => {
        try {
          new Grants([s]);
          return false;
        } catch {
          return true;
        }
      });
      const bad = (scopesNode as unknown as { items: YamlNode[] }).items[j];
      fail(at(bad ?? scopesNode), `${where}.scopes[${Math.max(j, 0)}]`, err.message);
    }

    const hashField = fields.get('sha256');
    if (name === ANONYMOUS) {
      if (hashField !== undefined)
        fail(
          at(hashField.key),
          `${where}.sha256`,
          `'${ANONYMOUS}' is what requests without a key get: it has no secret`,
        );
      anonymous = grants!;
      return;
    }
    if (hashField === undefined)
      fail(itemLine, `${where}.sha256`, 'missing (the hex SHA-256 of the secret; `nereid keys create` prints one)');
    // A hash of digits alone reads as a YAML number: take its text as written.
    const hashNode = hashField!.value;
    const hash =
      isScalar(hashNode) && typeof hashNode.value === 'number' && hashNode.range != null
        ? text.slice(hashNode.range[0], hashNode.range[1]).trim()
        : stringValue(hashNode, `${where}.sha256`, fail, at);
    if (!HEX64.test(hash)) {
      const shown = hash.length > 80 ? `${hash.slice(0, 80)}...` : hash;
      fail(
        at(hashField!.value),
        `${where}.sha256`,
        `expected 64 hexadecimal digits (a SHA-256), got '${shown}' (${hash.length} characters)`,
      );
    }
    const sha256 = hash.toLowerCase();
    const same = byHash.get(sha256);
    if (same !== undefined) fail(at(hashField!.value), `${where}.sha256`, `the same secret as key '${same.name}'`);
    byHash.set(sha256, { name, sha256, grants: grants!, anonymous: false });
  });
  return {
    byHash,
    anonymous: { name: ANONYMOUS, grants: anonymous ?? new Grants(DEFAULT_ANONYMOUS_SCOPES), anonymous: true },
    anonymousGiven: anonymous !== undefined,
  };
}

interface PairLike {
  key: unknown;
  value: unknown;
}

function mapOf(node: YamlNode): { items: PairLike[] } {
  return node as unknown as { items: PairLike[] };
}

type Fail = (line: number, field: string, why: string) => never;
type At = (node: YamlNode | null | undefined) => number;

function scalarKey(key: unknown, fail: Fail, at: At): string {
  if (!isScalar(key) || typeof key.value !== 'string') fail(at(key as YamlNode), '', 'expected a field name');
  return (key as { value: string }).value;
}

function stringValue(node: YamlNode | null, field: string, fail: Fail, at: At): string {
  if (!isScalar(node) || typeof node.value !== 'string') {
    const shown = isScalar(node) ? ` ${JSON.stringify(node.value)}` : '';
    return fail(at(node), field, `expected a string, got${shown === '' ? ' a ' + kindOf(node) : shown}`);
  }
  return node.value;
}

function kindOf(node: YamlNode | null): string {
  if (node === null) return 'nothing';
  if (isSeq(node)) return 'list';
  if (isMap(node)) return 'mapping';
  return 'value';
}
