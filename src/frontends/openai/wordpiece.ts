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

export class FastWordPiece {
  /** The id each ASCII punctuation character gets as a word of its own. */
  private readonly punctuationIds = new Int32Array(128);
  /** ASCII characters an added token starts with: only a text holding one may hold an added token. */
  private readonly addedStart = new Uint8Array(128);
  /** An added token with no text: every text goes to the library. */
  private readonly addedEmpty: boolean;

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
    const n = text.length;
    let start = -1;
    let upper = false;
    let maybeAdded = this.addedEmpty;
    for (let i = 0; i < n; i++) {
      const c = text.charCodeAt(i);
      if (c > 0x7e) return undefined;
      if (this.addedStart[c] === 1) maybeAdded = true;
      const kind = CLASS[c];
      if (kind === WORD) {
        if (c < 32) return this.encode(text.replace(CONTROLS, ''), addSpecialTokens);
        if (start < 0) start = i;
        if (c <= 0x5a && c >= 0x41) upper = true;
        continue;
      }
      if (start >= 0) {
        this.word(text.slice(start, i), upper, ids);
        start = -1;
        upper = false;
      }
      if (kind === PUNCTUATION) ids.push(this.punctuationIds[c]!);
    }
    if (start >= 0) this.word(start === 0 ? text : text.slice(start), upper, ids);
    if (maybeAdded) for (const t of this.addedTokens) if (text.includes(t)) return undefined;
    if (addSpecialTokens && this.sep !== undefined) ids.push(this.sep);
    return ids;
  }

  private word(word: string, upper: boolean, out: number[]): void {
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
