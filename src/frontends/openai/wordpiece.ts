/**
 * A fast path for the commonest embedding tokenizer, BERT's (BertNormalizer,
 * BertPreTokenizer, WordPiece, [CLS] ... [SEP]), on ASCII text: the same ids
 * as @huggingface/tokenizers gives (test/frontends/openai/wordpiece.test.ts
 * compares them), at a small fraction of its cost, which on the event loop
 * bounded /v1/embeddings' throughput (docs/openai.md, "Performance"). Any
 * other tokenizer, and any text with a non-ASCII character or an added
 * token's text, goes to the library.
 */

type Json = Record<string, unknown>;

/** What an ASCII character is to BertPreTokenizer: part of a word, a space, or a token of its own. */
const WORD = 0;
const SPACE = 1;
const PUNCTUATION = 2;
const CLASS = new Uint8Array(128);
for (let c = 0; c < 128; c++) {
  if (c === 9 || c === 10 || c === 13 || c === 32) CLASS[c] = SPACE;
  // ASCII punctuation and symbols: each is a token of its own.
  else if ((c >= 0x21 && c <= 0x2f) || (c >= 0x3a && c <= 0x40) || (c >= 0x5b && c <= 0x60) || (c >= 0x7b && c <= 0x7e))
    CLASS[c] = PUNCTUATION;
}
/** Control characters clean_text removes (tab, newline and return are spaces). */
// eslint-disable-next-line no-control-regex -- these are the characters it matches
const CONTROLS = /[\x00-\x08\x0b\x0c\x0e-\x1f]/g;

/** FNV-1a over a word's (lowercased where asked) character codes: the hash of WordTable. */
const FNV_OFFSET = 0x811c9dc5 | 0;
const FNV_PRIME = 0x01000193;

/**
 * The vocabulary's ASCII entries in an open-addressing table probed with the hash the scan computes as it
 * goes: a whole word is found without slicing it into a string of its own and hashing that again (a Map
 * lookup cost about 60 ns a word).
 */
class WordTable {
  /** Per slot: the entry's index + 1, 0 for an empty slot. */
  private readonly slots: Int32Array;
  private readonly mask: number;
  private readonly ids: Int32Array;
  private readonly starts: Int32Array;
  private readonly lengths: Int32Array;
  private readonly chars: Uint8Array;

  constructor(vocab: ReadonlyMap<string, number>) {
    const entries: [string, number][] = [];
    let total = 0;
    for (const [token, id] of vocab) {
      let ascii = token.length > 0;
      for (let i = 0; i < token.length; i++) if (token.charCodeAt(i) > 0x7f) ascii = false;
      if (!ascii) continue;
      entries.push([token, id]);
      total += token.length;
    }
    let size = 16;
    while (size < entries.length * 2) size *= 2;
    this.slots = new Int32Array(size);
    this.mask = size - 1;
    this.ids = new Int32Array(entries.length);
    this.starts = new Int32Array(entries.length);
    this.lengths = new Int32Array(entries.length);
    this.chars = new Uint8Array(total);
    let at = 0;
    entries.forEach(([token, id], e) => {
      this.ids[e] = id;
      this.starts[e] = at;
      this.lengths[e] = token.length;
      let h = FNV_OFFSET;
      for (let i = 0; i < token.length; i++) {
        const c = token.charCodeAt(i);
        this.chars[at++] = c;
        h = Math.imul(h ^ c, FNV_PRIME);
      }
      let slot = h & this.mask;
      while (this.slots[slot] !== 0) slot = (slot + 1) & this.mask;
      this.slots[slot] = e + 1;
    });
  }

  /**
   * The id of text[start, end) (ASCII, of hash `h`; A-Z read as a-z when `lower`), or -1 when the
   * vocabulary has no such entry.
   */
  find(text: string, start: number, end: number, h: number, lower: boolean): number {
    const n = end - start;
    for (let slot = h & this.mask; ; slot = (slot + 1) & this.mask) {
      const e = this.slots[slot]! - 1;
      if (e < 0) return -1;
      if (this.lengths[e] !== n) continue;
      const at = this.starts[e]! - start;
      let i = start;
      for (; i < end; i++) {
        let c = text.charCodeAt(i);
        if (lower && c <= 0x5a && c >= 0x41) c |= 0x20;
        if (this.chars[at + i] !== c) break;
      }
      if (i === end) return this.ids[e]!;
    }
  }
}

export class FastWordPiece {
  /** The id each ASCII punctuation character gets as a word of its own. */
  private readonly punctuationIds = new Int32Array(128);
  /** ASCII characters an added token starts with: only a text holding one may hold an added token. */
  private readonly addedStart = new Uint8Array(128);
  /** An added token with no text: every text goes to the library. */
  private readonly addedEmpty: boolean;
  /** The vocabulary's ASCII entries, for whole words found without a string of their own. */
  private readonly table: WordTable;

  private constructor(
    private readonly vocab: ReadonlyMap<string, number>,
    private readonly unkId: number,
    private readonly prefix: string,
    private readonly maxChars: number,
    private readonly lowercase: boolean,
    /** [CLS]-like and [SEP]-like ids around a single sequence, or none. */
    private readonly cls: number | undefined,
    private readonly sep: number | undefined,
    private readonly addedTokens: readonly string[],
  ) {
    for (let c = 0; c < 128; c++) {
      if (CLASS[c] !== PUNCTUATION) continue;
      const one: number[] = [];
      this.wordPieces(String.fromCharCode(c), one);
      this.punctuationIds[c] = one[0]!;
    }
    // An added token starting with a non-ASCII character cannot be in the ASCII texts taken here.
    for (const t of addedTokens) if (t !== '' && t.charCodeAt(0) < 128) this.addedStart[t.charCodeAt(0)] = 1;
    this.addedEmpty = addedTokens.includes('');
    this.table = new WordTable(vocab);
  }

  /** The fast path for this tokenizer.json, or undefined when it is not a BERT WordPiece tokenizer. */
  static from(json: Json): FastWordPiece | undefined {
    const model = json['model'] as Json | undefined;
    const normalizer = json['normalizer'] as Json | null | undefined;
    const pre = json['pre_tokenizer'] as Json | null | undefined;
    if (
      model?.['type'] !== 'WordPiece' ||
      normalizer?.['type'] !== 'BertNormalizer' ||
      pre?.['type'] !== 'BertPreTokenizer'
    )
      return undefined;
    if (normalizer['clean_text'] !== true) return undefined;
    const vocabJson = model['vocab'] as Record<string, number> | undefined;
    if (vocabJson === undefined) return undefined;
    const vocab = new Map(Object.entries(vocabJson));
    const unk = vocab.get(String(model['unk_token']));
    if (unk === undefined) return undefined;
    const specials = specialIds(json['post_processor'] as Json | null | undefined, vocab);
    if (specials === undefined) return undefined;
    const added = ((json['added_tokens'] as Array<{ content: string }> | undefined) ?? []).map((t) => t.content);
    return new FastWordPiece(
      vocab,
      unk,
      String(model['continuing_subword_prefix'] ?? '##'),
      Number(model['max_input_chars_per_word'] ?? 100),
      normalizer['lowercase'] === true,
      specials.cls,
      specials.sep,
      added,
    );
  }

  /** The ids of `text` (with the special tokens when asked), or undefined when the library must tokenize it. */
  encode(text: string, addSpecialTokens: boolean): number[] | undefined {
    const ids: number[] = [];
    if (addSpecialTokens && this.cls !== undefined) ids.push(this.cls);
    // One pass: words are the runs between spaces and punctuation, each punctuation character a word of its own.
    // Each word's hash is made as it is read (of its lowercased characters when the tokenizer lowercases).
    const n = text.length;
    const lowercase = this.lowercase;
    let start = -1;
    let upper = false;
    let h = FNV_OFFSET;
    let maybeAdded = this.addedEmpty;
    for (let i = 0; i < n; i++) {
      let c = text.charCodeAt(i);
      if (c > 0x7e) return undefined;
      if (this.addedStart[c] === 1) maybeAdded = true;
      const kind = CLASS[c];
      if (kind === WORD) {
        if (c < 32) return this.encode(text.replace(CONTROLS, ''), addSpecialTokens);
        if (start < 0) {
          start = i;
          h = FNV_OFFSET;
        }
        if (c <= 0x5a && c >= 0x41) {
          upper = true;
          if (lowercase) c |= 0x20;
        }
        h = Math.imul(h ^ c, FNV_PRIME);
        continue;
      }
      if (start >= 0) {
        this.word(text, start, i, h, upper, ids);
        start = -1;
        upper = false;
      }
      if (kind === PUNCTUATION) ids.push(this.punctuationIds[c]!);
    }
    if (start >= 0) this.word(text, start, n, h, upper, ids);
    if (maybeAdded) for (const t of this.addedTokens) if (text.includes(t)) return undefined;
    if (addSpecialTokens && this.sep !== undefined) ids.push(this.sep);
    return ids;
  }

  /** The ids of the word text[start, end) of hash `h`: a whole word from the table, else by WordPiece. */
  private word(text: string, start: number, end: number, h: number, upper: boolean, out: number[]): void {
    if (end - start <= this.maxChars) {
      const id = this.table.find(text, start, end, h, upper && this.lowercase);
      if (id >= 0) {
        out.push(id);
        return;
      }
    }
    const word = start === 0 && end === text.length ? text : text.slice(start, end);
    this.wordPieces(upper && this.lowercase ? word.toLowerCase() : word, out);
  }

  /** Greedy longest-match-first, as WordPiece does; a word with no match is one unknown token. */
  private wordPieces(word: string, out: number[]): void {
    if (word.length > this.maxChars) {
      out.push(this.unkId);
      return;
    }
    const whole = this.vocab.get(word);
    if (whole !== undefined) {
      out.push(whole);
      return;
    }
    const mark = out.length;
    let start = 0;
    while (start < word.length) {
      let end = word.length;
      let id: number | undefined;
      while (start < end) {
        const piece = start === 0 ? word.slice(0, end) : this.prefix + word.slice(start, end);
        id = this.vocab.get(piece);
        if (id !== undefined) break;
        end--;
      }
      if (id === undefined) {
        out.length = mark;
        out.push(this.unkId);
        return;
      }
      out.push(id);
      start = end;
    }
  }
}

/** The ids a single sequence is wrapped in: BERT's template ([CLS] A [SEP]), BertProcessing, or none. */
function specialIds(
  post: Json | null | undefined,
  vocab: ReadonlyMap<string, number>,
): { cls?: number; sep?: number } | undefined {
  if (post === null || post === undefined) return {};
  if (post['type'] === 'BertProcessing') {
    const cls = post['cls'] as [string, number] | undefined;
    const sep = post['sep'] as [string, number] | undefined;
    return cls && sep ? { cls: cls[1], sep: sep[1] } : undefined;
  }
  if (post['type'] !== 'TemplateProcessing') return undefined;
  const single = post['single'] as Array<Json> | undefined;
  if (single?.length !== 3) return undefined;
  const special = (item: Json | undefined): number | undefined => {
    const id = (item?.['SpecialToken'] as Json | undefined)?.['id'];
    if (typeof id !== 'string') return undefined;
    const tokens = ((post['special_tokens'] as Json | undefined)?.[id] as Json | undefined)?.['ids'] as
      number[] | undefined;
    return tokens?.length === 1 ? tokens[0] : vocab.get(id);
  };
  const sequence = (single[1]?.['Sequence'] as Json | undefined)?.['id'];
  const cls = special(single[0]);
  const sep = special(single[2]);
  return sequence === 'A' && cls !== undefined && sep !== undefined ? { cls, sep } : undefined;
}
