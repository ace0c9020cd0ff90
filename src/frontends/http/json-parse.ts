/**
 * JSON body parsing with Triton's behaviour at the edges.
 *
 * The fast path is the engine's JSON.parse. Only when that fails, or when the
 * parsed document holds a number a double may have rounded or overflowed, does a
 * small scanner walk the text to (a) accept the NaN / Infinity / -Infinity /
 * Inf literals Triton's parser accepts (Python's json module writes them),
 * (b) keep integers beyond 2^53 exact (as BigInt, for INT64/UINT64 data and
 * 64-bit parameters), and (c) otherwise report the error the way Triton does:
 * "failed to parse the request JSON buffer: <reason> at <offset>".
 */
import { Errors, type NereidError } from '../../errors.js';
import { JsonNumberOverflow } from '../../tensor/json-codec.js';

const enum Reason {
  Empty = 'The document is empty.',
  RootNotSingular = 'The document root must not be followed by other values.',
  ValueInvalid = 'Invalid value.',
  MissName = 'Missing a name for object member.',
  MissColon = 'Missing a colon after a name of object member.',
  MissCommaOrCurly = "Missing a comma or '}' after an object member.",
  MissCommaOrSquare = "Missing a comma or ']' after an array element.",
  BadHex = 'Incorrect hex digit after \\u escape in string.',
  BadSurrogate = 'The surrogate pair in string is invalid.',
  BadEscape = 'Invalid escape character in string.',
  MissQuote = 'Missing a closing quotation mark in string.',
  BadEncoding = 'Invalid encoding in string.',
  MissFraction = 'Miss fraction part in number.',
  MissExponent = 'Miss exponent in number.',
}

/** Marks a literal that was rewritten into a string for JSON.parse, to be revived after it. */
const SPECIAL_PREFIX = '\u0000nereid-number:';

class ScanError {
  constructor(
    readonly reason: Reason,
    readonly offset: number,
  ) {}
}

/**
 * Whether JSON.parse may have lost something the careful path keeps: an
 * integer beyond 2^53, which a double rounds (any integer literal there
 * parses to an integral double that is not a safe integer), or a number too
 * large for a double (JSON.parse makes it Infinity). Walks the parsed values
 * rather than the text: a request's few numbers, or a tensor's array of them,
 * cost far less to check than every character of the text (digits inside
 * strings never count). Iterative, so the nesting depth does not meet the
 * call stack. A false alarm (e.g. the literal 1e20) only costs the careful path.
 */
export function mayHaveLostPrecision(doc: unknown): boolean {
  if (typeof doc !== 'object' || doc === null) return typeof doc === 'number' && isLossy(doc);
  const pending: object[] = [doc];
  while (pending.length > 0) {
    const node = pending.pop()!;
    if (Array.isArray(node)) {
      for (let i = 0; i < node.length; i++) {
        const v: unknown = node[i];
        if (typeof v === 'number') {
          if (isLossy(v)) return true;
        } else if (typeof v === 'object' && v !== null) {
          pending.push(v);
        }
      }
    } else {
      for (const key in node) {
        const v: unknown = (node as Record<string, unknown>)[key];
        if (typeof v === 'number') {
          if (isLossy(v)) return true;
        } else if (typeof v === 'object' && v !== null) {
          pending.push(v);
        }
      }
    }
  }
  return false;
}

function isLossy(v: number): boolean {
  // Integral and not safe, or infinite (v - v is NaN exactly for ±Infinity here: JSON has no NaN).
  return v - v !== 0 || (Number.isInteger(v) && !Number.isSafeInteger(v));
}

/**
 * Parses `text` as a JSON document; throws NereidError (INTERNAL, as Triton)
 * when it is not one. Integers beyond 2^53 come back as exact BigInts.
 */
export function parseJsonText(text: string): unknown {
  let doc: unknown;
  try {
    doc = JSON.parse(text);
  } catch (err) {
    return parseSlow(text, err);
  }
  // Any integer JSON.parse may have rounded (a parameter, a 64-bit tensor, a sequence id) is re-read exactly,
  // and JSON.parse turns 1e309 into Infinity: the careful path marks it so the input it belongs to is rejected.
  return mayHaveLostPrecision(doc) ? parseSlow(text, undefined) : doc;
}

/** Parses bytes [start, end) of `body` as UTF-8 JSON. */
export function parseJsonBytes(body: Buffer, start = 0, end = body.byteLength): unknown {
  return parseJsonText(body.toString('utf8', start, end));
}

function parseFailure(reason: string, offset: number): NereidError {
  return Errors.jsonParse(`failed to parse the request JSON buffer: ${reason} at ${offset}`);
}

/** The careful path for any text, valid or not: what parseJsonText answers when JSON.parse may have lost something. */
export function parseJsonCarefully(text: string): unknown {
  return parseSlow(text, undefined);
}

/**
 * The careful path: scan for errors and for literals JSON.parse cannot take
 * (NaN, Infinity) or would round (long integers), rewrite those as marked
 * strings, parse, and revive them.
 */
function parseSlow(text: string, original: unknown): unknown {
  const specials: number[] = [];
  try {
    scanDocument(text, specials);
  } catch (err) {
    if (err instanceof ScanError) throw parseFailure(err.reason, err.offset);
    throw err;
  }
  if (specials.length === 0) {
    if (original === undefined) return JSON.parse(text);
    // The scanner accepted what the engine refused: report the engine's words.
    throw parseFailure(original instanceof Error ? original.message : String(original), 0);
  }
  let rewritten = '';
  let last = 0;
  for (let k = 0; k < specials.length; k += 2) {
    const start = specials[k]!;
    const end = specials[k + 1]!;
    rewritten += text.slice(last, start) + JSON.stringify(SPECIAL_PREFIX + text.slice(start, end));
    last = end;
  }
  rewritten += text.slice(last);
  return JSON.parse(rewritten, reviveSpecial);
}

function reviveSpecial(_key: string, value: unknown): unknown {
  if (typeof value === 'string' && value.startsWith(SPECIAL_PREFIX)) {
    const literal = value.slice(SPECIAL_PREFIX.length);
    if (literal === 'NaN') return NaN;
    if (literal.endsWith('Inf') || literal.endsWith('Infinity')) return literal.startsWith('-') ? -Infinity : Infinity;
    if (!/^-?\d+$/.test(literal)) return new JsonNumberOverflow(literal);
    return BigInt(literal);
  }
  return value;
}

const WS_SPACE = 0x20;
const WS_TAB = 0x09;
const WS_LF = 0x0a;
const WS_CR = 0x0d;

function isDigit(c: number): boolean {
  return c >= 0x30 && c <= 0x39;
}

function isHex(c: number): boolean {
  return isDigit(c) || (c >= 0x41 && c <= 0x46) || (c >= 0x61 && c <= 0x66);
}

/**
 * Walks the document without building it (iteratively: nesting depth is not
 * bounded by the call stack). Throws ScanError at the first error; collects
 * [start, end) pairs of NaN/Infinity literals and of integers beyond 2^53
 * into `specials`.
 */
function scanDocument(text: string, specials: number[]): void {
  const n = text.length;
  const at = (i: number): number => (i < n ? text.charCodeAt(i) : 0);
  const skipWs = (i: number): number => {
    for (;;) {
      const c = at(i);
      if (c === WS_SPACE || c === WS_LF || c === WS_CR || c === WS_TAB) i++;
      else return i;
    }
  };
  const scanString = (i: number): number => {
    i++; // opening quote
    for (;;) {
      const c = at(i);
      if (c === 0x5c) {
        const escapeOffset = i;
        const e = at(i + 1);
        if (
          e === 0x22 || e === 0x5c || e === 0x2f || e === 0x62 ||
          e === 0x66 || e === 0x6e || e === 0x72 || e === 0x74
        ) {
          i += 2;
        } else if (e === 0x75) {
          const cp = readHex4(i + 2, escapeOffset);
          i += 6;
          if (cp >= 0xd800 && cp <= 0xdbff) {
            if (at(i) !== 0x5c || at(i + 1) !== 0x75) throw new ScanError(Reason.BadSurrogate, escapeOffset);
            const low = readHex4(i + 2, escapeOffset);
            if (low < 0xdc00 || low > 0xdfff) throw new ScanError(Reason.BadSurrogate, escapeOffset);
            i += 6;
          } else if (cp >= 0xdc00 && cp <= 0xdfff) {
            throw new ScanError(Reason.BadSurrogate, escapeOffset);
          }
        } else {
          throw new ScanError(Reason.BadEscape, escapeOffset);
        }
      } else if (c === 0x22) {
        return i + 1;
      } else if (c < 0x20) {
        throw new ScanError(c === 0 ? Reason.MissQuote : Reason.BadEncoding, i);
      } else {
        i++;
      }
    }
  };
  const readHex4 = (i: number, escapeOffset: number): number => {
    let v = 0;
    for (let k = 0; k < 4; k++) {
      const c = at(i + k);
      if (!isHex(c)) throw new ScanError(Reason.BadHex, escapeOffset);
      v = v * 16 + parseInt(text[i + k]!, 16);
    }
    return v;
  };
  const consumeWord = (i: number, word: string): number => {
    // Returns the index after the word, or throws at the first mismatching character.
    for (let k = 0; k < word.length; k++) {
      if (at(i + k) !== word.charCodeAt(k)) throw new ScanError(Reason.ValueInvalid, i + k);
    }
    return i + word.length;
  };
  const scanNumber = (i: number): number => {
    const start = i;
    if (at(i) === 0x2d) i++;
    const c = at(i);
    if (c === 0x30) {
      i++;
    } else if (c >= 0x31 && c <= 0x39) {
      while (isDigit(at(i))) i++;
    } else if (c === 0x4e) {
      i = consumeWord(i, 'NaN');
      specials.push(start, i);
      return i;
    } else if (c === 0x49) {
      i = consumeWord(i, 'Inf');
      if (at(i) === 0x69) i = consumeWord(i, 'inity');
      specials.push(start, i);
      return i;
    } else {
      throw new ScanError(Reason.ValueInvalid, i);
    }
    let integral = true;
    if (at(i) === 0x2e) {
      integral = false;
      i++;
      if (!isDigit(at(i))) throw new ScanError(Reason.MissFraction, i);
      while (isDigit(at(i))) i++;
    }
    if (at(i) === 0x65 || at(i) === 0x45) {
      integral = false;
      i++;
      if (at(i) === 0x2b || at(i) === 0x2d) i++;
      if (!isDigit(at(i))) throw new ScanError(Reason.MissExponent, i);
      while (isDigit(at(i))) i++;
    }
    if (integral && i - start >= 16 && !Number.isSafeInteger(Number(text.slice(start, i)))) specials.push(start, i);
    else if (!integral && i - start > 3 && !Number.isFinite(Number(text.slice(start, i)))) specials.push(start, i);
    return i;
  };
  /** After an object's '{' or ',': a member name, a colon; returns where the value starts. */
  const scanMemberName = (i: number): number => {
    if (at(i) !== 0x22) throw new ScanError(Reason.MissName, i);
    i = skipWs(scanString(i));
    if (at(i) !== 0x3a) throw new ScanError(Reason.MissColon, i);
    return skipWs(i + 1);
  };

  const ARRAY = 0;
  const OBJECT = 1;
  const stack: number[] = [];
  let i = skipWs(0);
  if (i >= n) throw new ScanError(Reason.Empty, i);

  for (;;) {
    // A value starts at i.
    const c = at(i);
    if (c === 0x7b) {
      i = skipWs(i + 1);
      if (at(i) === 0x7d) {
        i++;
      } else {
        i = scanMemberName(i);
        stack.push(OBJECT);
        continue;
      }
    } else if (c === 0x5b) {
      i = skipWs(i + 1);
      if (at(i) === 0x5d) {
        i++;
      } else {
        stack.push(ARRAY);
        continue;
      }
    } else if (c === 0x22) {
      i = scanString(i);
    } else if (c === 0x6e) {
      i = consumeWord(i, 'null');
    } else if (c === 0x74) {
      i = consumeWord(i, 'true');
    } else if (c === 0x66) {
      i = consumeWord(i, 'false');
    } else {
      i = scanNumber(i);
    }

    // After a value: close containers or move to the next element.
    for (;;) {
      i = skipWs(i);
      if (stack.length === 0) {
        if (i < n) throw new ScanError(Reason.RootNotSingular, i);
        return;
      }
      const top = stack[stack.length - 1];
      const d = at(i);
      if (top === ARRAY) {
        if (d === 0x2c) {
          i = skipWs(i + 1);
          break;
        }
        if (d === 0x5d) {
          i++;
          stack.pop();
          continue;
        }
        throw new ScanError(Reason.MissCommaOrSquare, i);
      }
      if (d === 0x2c) {
        i = scanMemberName(skipWs(i + 1));
        break;
      }
      if (d === 0x7d) {
        i++;
        stack.pop();
        continue;
      }
      throw new ScanError(Reason.MissCommaOrCurly, i);
    }
  }
}
