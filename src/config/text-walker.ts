/**
 * Walks text-format tokens alongside the message schema, recording where
 * each field was written and stopping at the first problem with its place.
 * It accepts exactly what protobuf-es's text parser accepts.
 */
import { ScalarType, type DescEnum, type DescField, type DescMessage } from '@bufbuild/protobuf';
import { ModelConfigSchema } from '../gen/model_config_pb.js';
import type { SourcePosition } from './errors.js';
import { joinPath } from './positions.js';
import { closestName } from './suggest.js';
import { TextScanner, describeToken, type Token } from './text-scanner.js';

export class LocatedError extends Error {
  constructor(
    message: string,
    readonly line: number,
    readonly column: number,
    readonly field?: string,
  ) {
    super(message);
  }
}

interface OpenBlock {
  readonly token: Token;
  readonly close: '}' | '>';
  readonly label: string;
}

const INT_RANGES: Partial<Record<ScalarType, readonly [bigint, bigint]>> = {
  [ScalarType.INT32]: [-(2n ** 31n), 2n ** 31n - 1n],
  [ScalarType.SINT32]: [-(2n ** 31n), 2n ** 31n - 1n],
  [ScalarType.SFIXED32]: [-(2n ** 31n), 2n ** 31n - 1n],
  [ScalarType.UINT32]: [0n, 2n ** 32n - 1n],
  [ScalarType.FIXED32]: [0n, 2n ** 32n - 1n],
  [ScalarType.INT64]: [-(2n ** 63n), 2n ** 63n - 1n],
  [ScalarType.SINT64]: [-(2n ** 63n), 2n ** 63n - 1n],
  [ScalarType.SFIXED64]: [-(2n ** 63n), 2n ** 63n - 1n],
  [ScalarType.UINT64]: [0n, 2n ** 64n - 1n],
  [ScalarType.FIXED64]: [0n, 2n ** 64n - 1n],
};

const ENTRY = '\u0000';

/** Walks text-format tokens alongside the message schema. */
export class TextWalker {
  positions = new Map<string, SourcePosition>();
  private listCounts = new Map<string, number>();
  private readonly scanner: TextScanner;

  constructor(text: string) {
    this.scanner = new TextScanner(text);
  }

  walk(desc: DescMessage): void {
    this.readFields(desc, '', undefined);
  }

  private fail(message: string, at: Token, field?: string): never {
    throw new LocatedError(message, at.line, at.column, field ? field.replaceAll(ENTRY, '') : undefined);
  }

  private mark(path: string, at: Token): void {
    if (!this.positions.has(path)) this.positions.set(path, { line: at.line, column: at.column });
  }

  private readFields(desc: DescMessage, path: string, open: OpenBlock | undefined): void {
    const seen = new Map<number, Token>();
    const seenOneof = new Map<string, { name: string; at: Token }>();
    for (;;) {
      const tok = this.scanner.peek();
      if (tok.type === 'eof') {
        if (open !== undefined) {
          this.fail(`"${open.label}" opened here is never closed: a "${open.close}" is missing`, open.token, path);
        }
        return;
      }
      if (open !== undefined && tok.type === open.close) {
        this.scanner.next();
        return;
      }
      this.readField(desc, path, open, seen, seenOneof);
      const sep = this.scanner.peek();
      if (sep.type === ',' || sep.type === ';') this.scanner.next();
    }
  }

  private readField(
    desc: DescMessage,
    path: string,
    open: OpenBlock | undefined,
    seen: Map<number, Token>,
    seenOneof: Map<string, { name: string; at: Token }>,
  ): void {
    const nameTok = this.scanner.next();
    if (nameTok.type !== 'identifier') {
      if ((nameTok.type === '}' || nameTok.type === '>') && open === undefined) {
        this.fail(`unexpected "${nameTok.type}": there is no open block to close`, nameTok, path);
      }
      if (nameTok.type === '[')
        this.fail('extension fields ("[...]") are not part of a model configuration', nameTok, path);
      if (nameTok.type === 'int') {
        this.fail(`expected a field name, got ${nameTok.text} (fields are named, not numbered)`, nameTok, path);
      }
      this.fail(`expected a field name, got ${describeToken(nameTok)}`, nameTok, path);
    }
    const name = nameTok.text;
    const field = desc.fields.find((f) => f.name === name);
    if (field === undefined) {
      this.fail(
        `unknown field "${name}" in ${desc.name}${unknownFieldHint(name, desc)}`,
        nameTok,
        joinPath(path, name),
      );
    }
    const fieldPath = joinPath(path, name);

    if (field.fieldKind !== 'list' && field.fieldKind !== 'map') {
      const earlier = seen.get(field.number);
      if (earlier !== undefined) {
        this.fail(`"${name}" is set more than once (first at line ${earlier.line})`, nameTok, fieldPath);
      }
      seen.set(field.number, nameTok);
      if (field.oneof !== undefined) {
        const other = seenOneof.get(field.oneof.name);
        if (other !== undefined) {
          this.fail(
            `"${name}" cannot be used together with "${other.name}" (line ${other.at.line}): ` +
              `only one of ${field.oneof.fields.map((f) => `"${f.name}"`).join(', ')} may be set`,
            nameTok,
            fieldPath,
          );
        }
        seenOneof.set(field.oneof.name, { name, at: nameTok });
      }
    }

    const colon = this.scanner.peek();
    const hasColon = colon.type === ':';
    if (hasColon) this.scanner.next();
    const isMessageLike =
      field.fieldKind === 'message' ||
      field.fieldKind === 'map' ||
      (field.fieldKind === 'list' && field.listKind === 'message');
    if (!isMessageLike && !hasColon) {
      this.fail(`expected ":" after "${name}", got ${describeToken(colon)}`, colon, fieldPath);
    }

    switch (field.fieldKind) {
      case 'scalar':
        this.mark(fieldPath, nameTok);
        this.readScalar(field.scalar, name, fieldPath);
        return;
      case 'enum':
        this.mark(fieldPath, nameTok);
        this.readEnum(field.enum, name, fieldPath);
        return;
      case 'message':
        this.mark(fieldPath, nameTok);
        this.readMessage(field.message, name, fieldPath);
        return;
      case 'list':
        this.mark(fieldPath, nameTok);
        this.readList(field, nameTok, fieldPath);
        return;
      case 'map':
        this.mark(fieldPath, nameTok);
        this.readList(field, nameTok, fieldPath);
        return;
    }
  }

  /** A single element, or `[ e, e, ... ]`. */
  private readList(field: DescField, nameTok: Token, fieldPath: string): void {
    if (this.scanner.peek().type !== '[') {
      this.readElement(field, nameTok, fieldPath);
      return;
    }
    this.scanner.next();
    if (this.scanner.peek().type === ']') {
      this.scanner.next();
      return;
    }
    for (;;) {
      this.readElement(field, this.scanner.peek(), fieldPath);
      const sep = this.scanner.next();
      if (sep.type === ']') return;
      if (sep.type !== ',') {
        this.fail(`expected "," or "]" in the list of "${field.name}", got ${describeToken(sep)}`, sep, fieldPath);
      }
    }
  }

  private readElement(field: DescField, startTok: Token, fieldPath: string): void {
    if (field.fieldKind === 'map') {
      this.readMapEntry(field, startTok, fieldPath);
      return;
    }
    if (field.fieldKind !== 'list') return;
    const index = this.listCounts.get(fieldPath) ?? 0;
    this.listCounts.set(fieldPath, index + 1);
    const elementPath = `${fieldPath}[${index}]`;
    switch (field.listKind) {
      case 'scalar':
        this.mark(elementPath, this.scanner.peek());
        this.readScalar(field.scalar, field.name, elementPath);
        return;
      case 'enum':
        this.mark(elementPath, this.scanner.peek());
        this.readEnum(field.enum, field.name, elementPath);
        return;
      case 'message':
        this.mark(elementPath, startTok);
        this.readMessage(field.message, field.name, elementPath);
        return;
    }
  }

  private readMessage(desc: DescMessage, label: string, path: string): void {
    const open = this.scanner.next();
    if (open.type !== '{' && open.type !== '<') {
      this.fail(`expected "{" to start "${label}", got ${describeToken(open)}`, open, path);
    }
    this.readFields(desc, path, { token: open, close: open.type === '{' ? '}' : '>', label });
  }

  /**
   * A `{ key: … value: … }` block. The key may come after the value, so the value's positions are re-keyed once
   * the key is known.
   */
  private readMapEntry(field: DescField & { fieldKind: 'map' }, startTok: Token, mapPath: string): void {
    const open = this.scanner.next();
    if (open.type !== '{' && open.type !== '<') {
      this.fail(`expected "{" to start an entry of "${field.name}", got ${describeToken(open)}`, open, mapPath);
    }
    const close = open.type === '{' ? '}' : '>';
    const outerPositions = this.positions;
    const outerCounts = this.listCounts;
    this.positions = new Map();
    this.listCounts = new Map();
    let key = mapKeyZero(field.mapKey);
    let keyTok: Token | undefined;
    let valueTok: Token | undefined;
    try {
      for (;;) {
        const tok = this.scanner.next();
        if (tok.type === close) break;
        if (tok.type === 'eof') {
          this.fail(`entry of "${field.name}" opened here is never closed: a "${close}" is missing`, open, mapPath);
        }
        if (tok.type !== 'identifier' || (tok.text !== 'key' && tok.text !== 'value')) {
          this.fail(
            `expected "key" or "value" in an entry of "${field.name}", got ${describeToken(tok)}`,
            tok,
            mapPath,
          );
        }
        if (tok.text === 'key') {
          if (keyTok !== undefined) this.fail(`"key" is set twice in an entry of "${field.name}"`, tok, mapPath);
          keyTok = tok;
          this.expectColon('key', mapPath);
          key = this.readScalar(field.mapKey, `${field.name} key`, mapPath);
        } else {
          if (valueTok !== undefined) this.fail(`"value" is set twice in an entry of "${field.name}"`, tok, mapPath);
          valueTok = tok;
          switch (field.mapKind) {
            case 'scalar':
              this.expectColon('value', mapPath);
              this.readScalar(field.scalar, `${field.name} value`, ENTRY);
              break;
            case 'enum':
              this.expectColon('value', mapPath);
              this.readEnum(field.enum, `${field.name} value`, ENTRY);
              break;
            case 'message':
              if (this.scanner.peek().type === ':') this.scanner.next();
              this.readMessage(field.message, `${field.name} value`, ENTRY);
              break;
          }
        }
        const sep = this.scanner.peek();
        if (sep.type === ',' || sep.type === ';') this.scanner.next();
      }
    } finally {
      const inner = this.positions;
      this.positions = outerPositions;
      this.listCounts = outerCounts;
      const entryPath = `${mapPath}[${key}]`;
      this.mark(entryPath, startTok);
      for (const [p, pos] of inner) {
        const real = entryPath + p.slice(ENTRY.length);
        if (!this.positions.has(real)) this.positions.set(real, pos);
      }
    }
  }

  private expectColon(what: string, path: string): void {
    const tok = this.scanner.next();
    if (tok.type !== ':') this.fail(`expected ":" after "${what}", got ${describeToken(tok)}`, tok, path);
  }

  /** Reads one scalar value and returns it as text (map keys need it). */
  private readScalar(type: ScalarType, label: string, path: string): string {
    const first = this.scanner.peek();
    const negative = first.type === '-';
    if (negative) this.scanner.next();
    const tok = this.scanner.next();
    switch (type) {
      case ScalarType.STRING:
      case ScalarType.BYTES: {
        if (negative || tok.type !== 'string') {
          this.fail(`"${label}" expects a string in quotes, got ${negative ? '"-"' : describeToken(tok)}`, first, path);
        }
        let value = tok.text;
        while (this.scanner.peek().type === 'string') value += this.scanner.next().text;
        return value;
      }
      case ScalarType.BOOL: {
        if (!negative && tok.type === 'identifier') {
          if (tok.text === 'true' || tok.text === 'True' || tok.text === 't') return 'true';
          if (tok.text === 'false' || tok.text === 'False' || tok.text === 'f') return 'false';
        }
        if (!negative && tok.type === 'int') {
          const v = intValue(tok);
          if (v === 0n) return 'false';
          if (v === 1n) return 'true';
        }
        this.fail(`"${label}" expects true or false, got ${negative ? '-' : ''}${describeToken(tok)}`, first, path);
      }
      case ScalarType.FLOAT:
      case ScalarType.DOUBLE: {
        if (tok.type === 'identifier' && !negative) {
          const t = tok.text.toLowerCase();
          if (t === 'inf' || t === 'infinity' || t === '-inf' || t === '-infinity' || t === 'nan') return tok.text;
        }
        if (tok.type === 'float') return (negative ? '-' : '') + tok.text;
        if (tok.type === 'int') {
          if (tok.base !== 10) this.fail(`"${label}" expects a decimal number, got ${tok.text}`, first, path);
          return (negative ? '-' : '') + tok.text;
        }
        this.fail(`"${label}" expects a number, got ${negative ? '-' : ''}${describeToken(tok)}`, first, path);
      }
      default: {
        if (tok.type === 'float')
          this.fail(`"${label}" expects a whole number, got ${negative ? '-' : ''}${tok.text}`, first, path);
        if (tok.type === 'string') {
          this.fail(
            `"${label}" expects an integer, got ${describeToken(tok)} (write the number without quotes)`,
            first,
            path,
          );
        }
        if (tok.type !== 'int') this.fail(`"${label}" expects an integer, got ${describeToken(tok)}`, first, path);
        let value = intValue(tok);
        const [min, max] = INT_RANGES[type] ?? [-(2n ** 63n), 2n ** 64n - 1n];
        if (negative) {
          if (min === 0n) this.fail(`"${label}" cannot be negative, got -${tok.text}`, first, path);
          value = -value;
        }
        if (value < min || value > max) {
          this.fail(`"${label}" must be between ${min} and ${max}, got ${value}`, first, path);
        }
        return value.toString();
      }
    }
  }

  private readEnum(desc: DescEnum, label: string, path: string): void {
    const first = this.scanner.peek();
    const negative = first.type === '-';
    if (negative) this.scanner.next();
    const tok = this.scanner.next();
    const names = desc.values.map((v) => v.name);
    if (tok.type === 'identifier' && !negative) {
      if (names.includes(tok.text)) return;
      const sameCase = names.find((n) => n.toLowerCase() === tok.text.toLowerCase());
      const near = sameCase === undefined ? (ENUM_ALIASES[tok.text] ?? closestName(tok.text, names, 2)) : undefined;
      const hint =
        sameCase !== undefined
          ? ` (names are case-sensitive: did you mean ${sameCase}?)`
          : near !== undefined
            ? ` (did you mean ${near}?)`
            : '';
      this.fail(
        `${tok.text} is not a valid value for "${label}"${hint}; expected one of ${names.join(', ')}`,
        tok,
        path,
      );
    }
    if (tok.type === 'int') {
      const value = negative ? -intValue(tok) : intValue(tok);
      if (value < -(2n ** 31n) || value > 2n ** 31n - 1n) {
        this.fail(`${value} is not a valid value for "${label}"; expected one of ${names.join(', ')}`, first, path);
      }
      return;
    }
    if (tok.type === 'string') {
      this.fail(
        `"${label}" expects one of ${names.join(', ')} written without quotes, got ${describeToken(tok)}`,
        first,
        path,
      );
    }
    this.fail(
      `"${label}" expects one of ${names.join(', ')}, got ${negative ? '-' : ''}${describeToken(tok)}`,
      first,
      path,
    );
  }
}

/** Names people reach for that Triton spells differently. */
const ENUM_ALIASES: Readonly<Record<string, string>> = {
  TYPE_FLOAT: 'TYPE_FP32',
  TYPE_FLOAT32: 'TYPE_FP32',
  TYPE_FLOAT16: 'TYPE_FP16',
  TYPE_HALF: 'TYPE_FP16',
  TYPE_FLOAT64: 'TYPE_FP64',
  TYPE_DOUBLE: 'TYPE_FP64',
  TYPE_BYTES: 'TYPE_STRING',
  TYPE_BFLOAT16: 'TYPE_BF16',
  KIND_CUDA: 'KIND_GPU',
};

function intValue(tok: Token): bigint {
  return tok.base === 8 ? BigInt('0o' + tok.text.slice(1)) : BigInt(tok.text);
}

function mapKeyZero(type: ScalarType): string {
  if (type === ScalarType.STRING) return '';
  if (type === ScalarType.BOOL) return 'false';
  return '0';
}

function unknownFieldHint(name: string, desc: DescMessage): string {
  const close = closestName(
    name,
    desc.fields.map((f) => f.name),
  );
  if (close !== undefined) return ` (did you mean "${close}"?)`;
  if (desc !== ModelConfigSchema && ModelConfigSchema.fields.some((f) => f.name === name)) {
    return ` ("${name}" belongs at the top level: is a "}" missing before it?)`;
  }
  const known = desc.fields.map((f) => f.name);
  return known.length <= 12 ? `; known fields are ${known.join(', ')}` : '';
}
