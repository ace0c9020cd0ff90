/**
 * The text examples' generated files: a small WordPiece vocabulary of our
 * own (special tokens, single characters, their `##` continuations and a few
 * hundred common English words), its `tokenizer.json` in the Hugging Face
 * format, and `text_embedder`, a BERT-shaped ONNX model over it (token,
 * position and segment embeddings, one dense layer with tanh, per-token
 * outputs zeroed where the attention mask is 0).
 */
import { OnnxModelBuilder, seededRandom } from '../test/helpers/onnx-builder.js';

const WORDS = `the of and to a in is it you that he was for on are with as his they be at one have this from or had by
not word but what some we can out other were all there when up use your how said an each she which do their time if
will way about many then them write would like so these her long make thing see him two has look more day could go
come did number sound no most people my over know water than call first who may down side been now find any new work
part take get place made live where after back little only round man year came show every good me give our under name
very through just form sentence great think say help low line differ turn cause much mean before move right boy old
too same tell does set three want air well also play small end put home read hand port large spell add even land here
must big high such follow act why ask men change went light kind off need house picture try us again animal point
mother world near build self earth father head stand own page should country found answer school grow study still learn
plant cover food sun four between state keep eye never last let thought city tree cross farm hard start might story saw
far sea draw left late run while press close night real life few north open seem together next white children begin got
walk example ease paper group always music those both mark often letter until mile river car feet care second book
carry took science eat room friend began idea fish mountain stop once base hear horse cut sure watch color face wood
main enough plain girl usual young ready above ever red list though feel talk bird soon body dog family direct pose
leave song measure door product black short numeral class wind question happen complete ship area half rock order fire
south problem piece told knew pass since top whole king space heard best hour better true during hundred five remember
step early hold west ground interest reach fast verb sing listen six table travel less morning ten simple several vowel
toward war lay against pattern slow center love person money serve appear road map rain rule govern pull cold notice
voice unit power town fine certain fly fall lead cry dark machine note wait plan figure star box noun field rest able
pound done beauty drive stood contain front teach week final gave green oh quick develop ocean warm free minute strong
special mind behind clear tail produce fact street inch multiply nothing course stay wheel full force blue object decide
surface deep moon island foot system busy test record boat common gold possible plane stead dry wonder laugh thousand
ago ran check game shape equate hot miss brought heat snow tire bring yes distant fill east paint language among model
server inference token stream chat hello embedding vector search query document answer fast small tiny llm`;

const SPECIAL = ['[PAD]', '[UNK]', '[CLS]', '[SEP]', '[MASK]'];
const CHARS = 'abcdefghijklmnopqrstuvwxyz0123456789.,!?\'"-:;()/&%$#@*+=<>[]{}_|~`^\\';

/** The vocabulary, token -> id: special tokens first ([PAD] 0, [UNK] 1, [CLS] 2, [SEP] 3, [MASK] 4). */
export function exampleVocabulary(): Map<string, number> {
  const vocab = new Map<string, number>();
  const add = (t: string) => {
    if (!vocab.has(t)) vocab.set(t, vocab.size);
  };
  SPECIAL.forEach(add);
  for (const c of CHARS) add(c);
  for (const c of 'abcdefghijklmnopqrstuvwxyz0123456789') add(`##${c}`);
  for (const w of WORDS.split(/\s+/)) if (w !== '') add(w);
  return vocab;
}

/**
 * A WordPiece tokenizer.json (BERT's normalizer, pre-tokenizer and [CLS] ... [SEP] post-processor) over the vocabulary.
 */
export function wordPieceTokenizerJson(extraSpecial: readonly string[] = []): string {
  const vocab = exampleVocabulary();
  const addedToken = (content: string, id: number) => ({
    id,
    content,
    single_word: false,
    lstrip: false,
    rstrip: false,
    normalized: false,
    special: true,
  });
  const added = SPECIAL.map((t) => addedToken(t, vocab.get(t)!));
  // Extra special tokens (a chat template's markers) take ids after the vocabulary.
  let next = vocab.size;
  for (const t of extraSpecial) added.push(addedToken(t, next++));
  const cls = vocab.get('[CLS]')!;
  const sep = vocab.get('[SEP]')!;
  return JSON.stringify(
    {
      version: '1.0',
      truncation: null,
      padding: null,
      added_tokens: added,
      normalizer: {
        type: 'BertNormalizer',
        clean_text: true,
        handle_chinese_chars: true,
        strip_accents: null,
        lowercase: true,
      },
      pre_tokenizer: { type: 'BertPreTokenizer' },
      post_processor: {
        type: 'TemplateProcessing',
        single: [
          { SpecialToken: { id: '[CLS]', type_id: 0 } },
          { Sequence: { id: 'A', type_id: 0 } },
          { SpecialToken: { id: '[SEP]', type_id: 0 } },
        ],
        pair: [
          { SpecialToken: { id: '[CLS]', type_id: 0 } },
          { Sequence: { id: 'A', type_id: 0 } },
          { SpecialToken: { id: '[SEP]', type_id: 0 } },
          { Sequence: { id: 'B', type_id: 1 } },
          { SpecialToken: { id: '[SEP]', type_id: 1 } },
        ],
        special_tokens: {
          '[CLS]': { id: '[CLS]', ids: [cls], tokens: ['[CLS]'] },
          '[SEP]': { id: '[SEP]', ids: [sep], tokens: ['[SEP]'] },
        },
      },
      decoder: { type: 'WordPiece', prefix: '##', cleanup: true },
      model: {
        type: 'WordPiece',
        unk_token: '[UNK]',
        continuing_subword_prefix: '##',
        max_input_chars_per_word: 100,
        vocab: Object.fromEntries(vocab),
      },
    },
    null,
    1,
  );
}

/**
 * tiny_llm's tokenizer.json: one token per whitespace-separated word (WordLevel), so that
 * its token counts are the words the model counts against max_tokens; the chat template's
 * markers are special tokens.
 */
export function wordLevelTokenizerJson(markers: readonly string[]): string {
  const vocab = new Map<string, number>([['[UNK]', 0]]);
  for (const m of markers) vocab.set(m, vocab.size);
  for (const w of WORDS.split(/\s+/)) if (w !== '' && !vocab.has(w)) vocab.set(w, vocab.size);
  const added = ['[UNK]', ...markers].map((content) => ({
    id: vocab.get(content)!,
    content,
    single_word: false,
    lstrip: false,
    rstrip: false,
    normalized: false,
    special: true,
  }));
  return JSON.stringify(
    {
      version: '1.0',
      truncation: null,
      padding: null,
      added_tokens: added,
      normalizer: null,
      pre_tokenizer: { type: 'WhitespaceSplit' },
      post_processor: null,
      decoder: null,
      model: { type: 'WordLevel', vocab: Object.fromEntries(vocab), unk_token: '[UNK]' },
    },
    null,
    1,
  );
}

/** tiny_llm's chat template markers: special tokens of its tokenizer. */
export const TINY_LLM_MARKERS: readonly string[] = ['<|system|>', '<|user|>', '<|assistant|>', '<|end|>'];

/** text_embedder's sequence bound (its position table) and vector size. */
export const TEXT_EMBEDDER_MAX_LENGTH = 128;
export const TEXT_EMBEDDER_DIM = 32;

/**
 * input_ids, attention_mask, token_type_ids (INT64 [batch, seq]) ->
 * last_hidden_state (FP32 [batch, seq, 32]) = tanh((word + position + segment) W + b) * mask.
 */
export function textEmbedderModel(): OnnxModelBuilder {
  const vocabSize = exampleVocabulary().size;
  const dim = TEXT_EMBEDDER_DIM;
  const rand = seededRandom(2026);
  const table = (rows: number, scale: number) =>
    Float32Array.from({ length: rows * dim }, () => (rand() * 2 - 1) * scale);
  const b = new OnnxModelBuilder({ name: 'text_embedder' });
  b.input('input_ids', 'INT64', ['batch', 'seq'])
    .input('attention_mask', 'INT64', ['batch', 'seq'])
    .input('token_type_ids', 'INT64', ['batch', 'seq'])
    .output('last_hidden_state', 'FP32', ['batch', 'seq', dim]);
  b.initializer('word_embeddings', 'FP32', [vocabSize, dim], table(vocabSize, 1))
    .initializer('position_embeddings', 'FP32', [TEXT_EMBEDDER_MAX_LENGTH, dim], table(TEXT_EMBEDDER_MAX_LENGTH, 0.1))
    .initializer('token_type_embeddings', 'FP32', [2, dim], table(2, 0.1))
    .initializer('dense_w', 'FP32', [dim, dim], table(dim, 0.5))
    .initializer('dense_b', 'FP32', [dim], Float32Array.from({ length: dim }, () => (rand() * 2 - 1) * 0.1))
    .initializer('one', 'INT64', [], BigInt64Array.from([1n]))
    .initializer('zero', 'INT64', [], BigInt64Array.from([0n]))
    .initializer('last_axis', 'INT64', [1], BigInt64Array.from([-1n]));
  b.node('Gather', ['word_embeddings', 'input_ids'], ['words']);
  b.node('Gather', ['token_type_embeddings', 'token_type_ids'], ['segments']);
  b.node('Shape', ['input_ids'], ['ids_shape']);
  b.node('Gather', ['ids_shape', 'one'], ['seq_len'], { axis: { i: 0 } });
  b.node('Range', ['zero', 'seq_len', 'one'], ['positions']);
  b.node('Gather', ['position_embeddings', 'positions'], ['places']);
  b.node('Add', ['words', 'segments'], ['sum0']);
  b.node('Add', ['sum0', 'places'], ['embedded']);
  b.node('MatMul', ['embedded', 'dense_w'], ['projected']);
  b.node('Add', ['projected', 'dense_b'], ['biased']);
  b.node('Tanh', ['biased'], ['hidden']);
  b.node('Cast', ['attention_mask'], ['mask_f'], { to: { i: 1 } });
  b.node('Unsqueeze', ['mask_f', 'last_axis'], ['mask_3d']);
  b.node('Mul', ['hidden', 'mask_3d'], ['last_hidden_state']);
  return b;
}
