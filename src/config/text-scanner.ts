/**
 * Tokenizer for the protobuf text format that remembers where each token
 * starts. The parser proper is protobuf-es (`fromText`); this scanner exists
 * so errors and validation messages can name a line and column.
 */

export type TokenType =
  | '{'
  | '}'
  | '<'
  | '>'
  | '['
  | ']'
  | ':'
  | ','
  | ';'
  | '-'
  | 'identifier'
  | 'string'
  | 'int'
  | 'float'
  | 'eof';

export interface Token {
  readonly type: TokenType;
  /** Source text of the token (for strings: the decoded value). */
  readonly text: string;
  /** For 'int': the radix the literal was written in. */
  readonly base: 8 | 10 | 16;
  readonly line: number;
  readonly column: number;
}

/** A lexical error at a known place. */
export class ScanError extends Error {
  constructor(
    message: string,
    readonly line: number,
    readonly column: number,
  ) {
    super(message);
  }
}

const PUNCTUATION = new Set(['{', '}', '<', '>', '[', ']', ':', ',', ';']);

const isDigit = (c: string | undefined): boolean => c !== undefined && c >= '0' && c <= '9';
const isLetter = (c: string | undefined): boolean =>
  c !== undefined && ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c === '_');
const isWordChar = (c: string | undefined): boolean => isLetter(c) || isDigit(c);
const isHex = (c: string | undefined): boolean => c !== undefined && /^[0-9a-fA-F]$/.test(c);
const isOctal = (c: string | undefined): boolean => c !== undefined && c >= '0' && c <= '7';

export class TextScanner {
  private pos = 0;
  private line = 1;
  private lineStart = 0;
  private ahead: Token | undefined;

  constructor(private readonly input: string) {}

  peek(): Token {
    if (this.ahead === undefined) this.ahead = this.scan();
    return this.ahead;
  }

  next(): Token {
    const tok = this.peek();
    this.ahead = undefined;
    return tok;
  }

  private column(at = this.pos): number {
    return at - this.lineStart + 1;
  }

  private fail(message: string, at = this.pos): never {
    throw new ScanError(message, this.line, this.column(at));
  }

  private make(type: TokenType, text: string, start: number, base: 8 | 10 | 16 = 10): Token {
    return { type, text, base, line: this.line, column: this.column(start) };
  }

  private skipSpace(): void {
    const s = this.input;
    while (this.pos < s.length) {
      const c = s[this.pos];
      if (c === '\n') {
        this.pos++;
        this.line++;
        this.lineStart = this.pos;
      } else if (c === ' ' || c === '\t' || c === '\r' || c === '\v' || c === '\f') {
        this.pos++;
      } else if (c === '#') {
        while (this.pos < s.length && s[this.pos] !== '\n') this.pos++;
      } else {
        return;
      }
    }
  }

  private scan(): Token {
    this.skipSpace();
    const s = this.input;
    const start = this.pos;
    const c = s[start];
    if (c === undefined) return this.make('eof', '', start);
    if (PUNCTUATION.has(c)) {
      this.pos++;
      return this.make(c as TokenType, c, start);
    }
    if (c === '-') {
      if (isLetter(s[start + 1])) return this.scanIdentifier();
      this.pos++;
      return this.make('-', '-', start);
    }
    if (c === '"' || c === "'") return this.scanString(c);
    if (isDigit(c) || (c === '.' && isDigit(s[start + 1]))) return this.scanNumber();
    if (isLetter(c)) return this.scanIdentifier();
    this.fail(`unexpected character ${JSON.stringify(c)}`);
  }

  private scanIdentifier(): Token {
    const start = this.pos;
    if (this.input[this.pos] === '-') this.pos++;
    this.pos++;
    while (isWordChar(this.input[this.pos])) this.pos++;
    return this.make('identifier', this.input.slice(start, this.pos), start);
  }

  private scanNumber(): Token {
    const s = this.input;
    const start = this.pos;
    if (s[start] === '0' && (s[start + 1] === 'x' || s[start + 1] === 'X')) {
      this.pos += 2;
      const digits = this.pos;
      while (isHex(s[this.pos])) this.pos++;
      if (this.pos === digits) this.fail(`"${s.slice(start, this.pos + 1)}" is not a valid number`, start);
      this.endOfNumber(start);
      return this.make('int', s.slice(start, this.pos), start, 16);
    }
    if (s[start] === '0' && isOctal(s[start + 1])) {
      this.pos++;
      while (isOctal(s[this.pos])) this.pos++;
      this.endOfNumber(start);
      return this.make('int', s.slice(start, this.pos), start, 8);
    }
    let isFloat = false;
    if (s[this.pos] === '0') this.pos++;
    else while (isDigit(s[this.pos])) this.pos++;
    if (s[this.pos] === '.') {
      isFloat = true;
      this.pos++;
      while (isDigit(s[this.pos])) this.pos++;
    }
    if (s[this.pos] === 'e' || s[this.pos] === 'E') {
      isFloat = true;
      this.pos++;
      if (s[this.pos] === '+' || s[this.pos] === '-') this.pos++;
      const digits = this.pos;
      while (isDigit(s[this.pos])) this.pos++;
      if (this.pos === digits) this.fail(`"${s.slice(start, this.pos)}" has an exponent with no digits`, start);
    }
    const end = this.pos;
    if (s[this.pos] === 'f' || s[this.pos] === 'F') {
      isFloat = true;
      this.pos++;
    }
    this.endOfNumber(start);
    return this.make(isFloat ? 'float' : 'int', s.slice(start, end), start);
  }

  /** A number must be followed by something that cannot continue it (`10bar`, `09`, `1.2.3` are errors). */
  private endOfNumber(start: number): void {
    const c = this.input[this.pos];
    if (isWordChar(c) || c === '-' || c === '+' || c === '.') {
      let end = this.pos;
      while (end < this.input.length && /[0-9A-Za-z_.+-]/.test(this.input[end]!)) end++;
      this.fail(`"${this.input.slice(start, end)}" is not a valid number`, start);
    }
  }

  private scanString(quote: string): Token {
    const s = this.input;
    const start = this.pos;
    this.pos++;
    let out = '';
    for (;;) {
      const c = s[this.pos];
      if (c === undefined || c === '\n') {
        this.fail('string is not closed: add the closing quote on the same line', start);
      }
      if (c === '\0') this.fail('a string may not contain a NUL character', this.pos);
      if (c === quote) {
        this.pos++;
        return this.make('string', out, start);
      }
      if (c === '\\') {
        out += this.scanEscape();
        continue;
      }
      out += c;
      this.pos++;
    }
  }

  private scanEscape(): string {
    const s = this.input;
    const at = this.pos;
    this.pos++; // backslash
    const c = s[this.pos];
    if (c === undefined || c === '\n') this.fail('string ends inside an escape sequence', at);
    this.pos++;
    switch (c) {
      case 'n':
        return '\n';
      case 't':
        return '\t';
      case 'r':
        return '\r';
      case 'a':
        return '\x07';
      case 'b':
        return '\b';
      case 'f':
        return '\f';
      case 'v':
        return '\v';
      case '?':
      case '\\':
      case "'":
      case '"':
        return c;
      case 'x':
      case 'X': {
        const begin = this.pos;
        while (this.pos - begin < 2 && isHex(s[this.pos])) this.pos++;
        if (this.pos === begin) this.fail('"\\x" must be followed by hex digits', at);
        return String.fromCharCode(parseInt(s.slice(begin, this.pos), 16));
      }
      case 'u':
      case 'U': {
        const len = c === 'u' ? 4 : 8;
        const hex = s.slice(this.pos, this.pos + len);
        if (hex.length !== len || ![...hex].every(isHex)) this.fail(`invalid unicode escape "\\${c}${hex}"`, at);
        this.pos += len;
        const cp = parseInt(hex, 16);
        if (cp > 0x10ffff) this.fail(`invalid unicode escape "\\${c}${hex}"`, at);
        return String.fromCodePoint(cp);
      }
      default:
        if (isOctal(c)) {
          const begin = this.pos - 1;
          while (this.pos - begin < 3 && isOctal(s[this.pos])) this.pos++;
          const value = parseInt(s.slice(begin, this.pos), 8);
          if (value > 255) this.fail(`octal escape "\\${s.slice(begin, this.pos)}" is out of range`, at);
          return String.fromCharCode(value);
        }
        this.fail(`unknown escape "\\${c}" in string`, at);
    }
  }
}

/** How a token reads in an error message. */
export function describeToken(tok: Token): string {
  switch (tok.type) {
    case 'eof':
      return 'the end of the file';
    case 'string':
      return `the string ${JSON.stringify(tok.text)}`;
    case 'identifier':
    case 'int':
    case 'float':
      return tok.text;
    default:
      return `"${tok.type}"`;
  }
}
