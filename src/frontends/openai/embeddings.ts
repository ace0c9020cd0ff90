/**
 * POST /v1/embeddings on a model with an embedding contract. The inputs of
 * one request go to the model as batches of up to its max_batch_size rows
 * (in parallel, so its dynamic batcher may join them with other requests');
 * token vectors are mean-pooled over the attention mask and the result is
 * L2-normalised unless the model's `embedding_normalize` parameter is "false".
 * Each model call asks for its rows as the answer's items (EmbeddingTextHint):
 * an onnxruntime run on the session thread makes them there, and what comes
 * back without them is made here with the same code (docs/openai.md).
 */
import type { ServerResponse } from 'node:http';
import type { InferResponse, TensorMetadata } from '../../types/api.js';
import type { Cancellation } from '../../types/cancellation.js';
import { type Tensor, typedView } from '../../tensor/tensor.js';
import type { TextEmbeddingContract, TokenEmbeddingContract } from './contracts.js';
import { type OpenAiContext, type ResolvedModel, admission, cancelOnClose, resolveModel } from './context.js';
import { OpenAiError, invalidRequest, toOpenAiError } from './errors.js';
import { type Body, checkKnownFields, checkUser, modelName, optionalInteger } from './fields.js';
import { bytesTensor } from './tensors.js';
import { type EmbeddingTextHint, hintedItems, poolRows } from '../../tensor/embedding-text.js';

const FIELDS = new Set(['model', 'input', 'encoding_format', 'dimensions', 'user']);
/** OpenAI's bound on the inputs of one request. */
const MAX_INPUTS = 2048;

type EmbeddingInput = { readonly text: string } | { readonly ids: readonly number[] };

function readInputs(value: unknown): EmbeddingInput[] {
  const bad = (why: string, param = 'input') => invalidRequest(`'input' ${why}`, param);
  if (typeof value === 'string') {
    if (value === '') throw bad('must not be empty');
    return [{ text: value }];
  }
  if (!Array.isArray(value))
    throw bad('must be a string, an array of strings, an array of token ids or an array of arrays of token ids');
  if (value.length === 0) throw bad('must not be empty');
  if (value.length > MAX_INPUTS) throw bad(`holds ${value.length} inputs; at most ${MAX_INPUTS} are taken per request`);
  if (value.every((v) => typeof v === 'number')) return [{ ids: tokenIds(value, 'input') }];
  return value.map((v: unknown, i) => {
    if (typeof v === 'string') {
      if (v === '') throw bad(`[${i}] is empty`, `input[${i}]`);
      return { text: v };
    }
    if (Array.isArray(v)) return { ids: tokenIds(v, `input[${i}]`) };
    throw bad(`[${i}] must be a string or an array of token ids`, `input[${i}]`);
  });
}

function tokenIds(v: unknown[], param: string): number[] {
  if (v.length === 0) throw invalidRequest(`'${param}' is an empty list of token ids`, param);
  v.forEach((x, i) => {
    if (typeof x !== 'number' || !Number.isInteger(x) || x < 0 || x > 0x7fffffff) {
      throw invalidRequest(`'${param}[${i}]' must be a token id (an integer from 0), got ${JSON.stringify(x)}`, param);
    }
  });
  return v as number[];
}

/**
 * The [rows, seq] INT64 or INT32 inputs `metas`, zeros, in one allocation (the backends copy their inputs;
 * an ArrayBuffer each cost more than their filling), with the 32-bit words their values go in (every `step`-th).
 */
function intMatrices(
  metas: readonly TensorMetadata[],
  rows: number,
  seq: number,
): { tensor: Tensor; words: Int32Array; step: number }[] {
  // Each input starts 8-byte aligned, so INT64 views of it need no copy.
  const sizes = metas.map((m) => (rows * seq * (m.datatype === 'INT64' ? 8 : 4) + 7) & ~7);
  const buffer = new ArrayBuffer(sizes.reduce((a, b) => a + b, 0));
  let at = 0;
  return metas.map((meta, i) => {
    const wide = meta.datatype === 'INT64';
    const data = new Uint8Array(buffer, at, rows * seq * (wide ? 8 : 4));
    const words = new Int32Array(buffer, at, data.byteLength / 4);
    at += sizes[i]!;
    const tensor = { name: meta.name, datatype: meta.datatype, shape: [rows, seq], data };
    // Ids are small non-negative integers: an INT64's low word (little-endian) holds the whole value.
    return { tensor, words, step: wide ? 2 : 1 };
  });
}

function outputOf(r: InferResponse, name: string): Tensor {
  const t = r.outputs.find((o) => o.name === name);
  if (t === undefined) throw new OpenAiError(500, 'server_error', `the model's response has no output '${name}'`);
  return t;
}

export class EmbeddingsEndpoint {
  constructor(private readonly ctx: OpenAiContext) {}

  async handle(res: ServerResponse, body: Body): Promise<void> {
    checkKnownFields(body, FIELDS);
    checkUser(body);
    const model = modelName(body);
    if (!('input' in body)) throw invalidRequest("'input' is required", 'input');
    const inputs = readInputs(body['input']);
    const format = body['encoding_format'] ?? 'float';
    if (format !== 'float' && format !== 'base64')
      throw invalidRequest(
        `'encoding_format' must be 'float' or 'base64', got ${JSON.stringify(format)}`,
        'encoding_format',
      );
    const dimensions = optionalInteger(body, 'dimensions', 1);
    const resolved = await resolveModel(this.ctx, model, 'embedding');
    admission(this.ctx, resolved.name);
    const signal = cancelOnClose(res);
    const c = resolved.contract;
    const base64 = format === 'base64';
    const { items, dim, tokens } =
      c.kind === 'text-embedding'
        ? await this.textEmbeddings(resolved as ResolvedModel<TextEmbeddingContract>, inputs, base64, signal)
        : await this.tokenEmbeddings(resolved as ResolvedModel<TokenEmbeddingContract>, inputs, base64, signal);
    if (dimensions !== undefined && dimensions !== dim) {
      throw invalidRequest(
        `model '${model}' makes ${dim}-dimensional embeddings and cannot shorten them; 'dimensions' may only be ${dim}`,
        'dimensions',
      );
    }
    if (res.destroyed) return;
    let out = ANSWER_HEAD;
    for (let i = 0; i < items.length; i++) out += items[i]!;
    const name = JSON.stringify(model);
    out += `],"model":${name},"usage":{"prompt_tokens":${tokens},"total_tokens":${tokens}}}`;
    // The items are ASCII: with an ASCII model name too, the length is the byte count and the text goes to the
    // socket as latin1 (a copy; utf8 would check every character).
    const ascii = isAscii(name);
    const length = ascii ? out.length : Buffer.byteLength(out);
    res.writeHead(200, ['Content-Type', 'application/json', 'Content-Length', String(length)]);
    if (ascii) res.end(out, 'latin1');
    else res.end(out);
  }

  /** Runs the rows in batches of up to `maxRows`, all at once, and hands each batch's response to `take`. */
  private async runBatches(
    model: string,
    rows: number,
    maxRows: number,
    signal: Cancellation,
    inputsOf: (start: number, end: number) => Tensor[],
    hintOf: (start: number, end: number) => EmbeddingTextHint,
    take: (start: number, end: number, r: InferResponse, hint: EmbeddingTextHint) => void,
  ): Promise<void> {
    const runs: Promise<void>[] = [];
    for (let start = 0; start < rows; start += maxRows) {
      const end = Math.min(rows, start + maxRows);
      const inputs = inputsOf(start, end);
      const embeddingText = hintOf(start, end);
      runs.push(
        this.ctx.server.infer({ model, inputs, signal, embeddingText }).then((r) => take(start, end, r, embeddingText)),
      );
    }
    try {
      await Promise.all(runs);
    } catch (err) {
      throw toOpenAiError(err, model);
    }
  }

  private async textEmbeddings(
    resolved: ResolvedModel<TextEmbeddingContract>,
    inputs: EmbeddingInput[],
    base64: boolean,
    signal: Cancellation,
  ): Promise<Embeddings> {
    const c = resolved.contract;
    const texts = inputs.map((x, i) => {
      if ('text' in x) return x.text;
      const tokenizer = resolved.text.tokenizer;
      if (tokenizer === undefined) {
        throw invalidRequest(
          `model '${resolved.name}' has no tokenizer.json to read token ids with; send text`,
          `input[${i}]`,
        );
      }
      return tokenizer.decode(x.ids as number[], { skip_special_tokens: true });
    });
    let tokens = 0;
    for (let i = 0; i < inputs.length; i++) {
      const x = inputs[i]!;
      tokens += 'ids' in x ? x.ids.length : resolved.text.countTokens(x.text);
    }
    const items: string[] = [];
    let dim = 0;
    const maxRows = c.batched ? c.maxBatchSize : 1;
    const inputMeta = c.batched ? c.input : { ...c.input, shape: c.input.shape.map((d) => (d === -1 ? 1 : d)) };
    await this.runBatches(
      resolved.name,
      texts.length,
      maxRows,
      signal,
      (start, end) => [
        bytesTensor(
          {
            ...inputMeta,
            shape: c.batched
              ? [end - start, ...inputMeta.shape.slice(1).map((d) => (d === -1 ? 1 : d))]
              : inputMeta.shape,
          },
          texts.slice(start, end),
          'input',
        ),
      ],
      (start) => ({ output: c.output.name, lengths: undefined, normalize: c.normalize, base64, firstIndex: start }),
      (start, end, r, hint) => {
        const out = outputOf(r, c.output.name);
        dim = rowElements(out, end - start);
        items[start / maxRows] = itemsOf(out, end - start, dim, dim, hint);
      },
    );
    return { items, dim, tokens };
  }

  private async tokenEmbeddings(
    resolved: ResolvedModel<TokenEmbeddingContract>,
    inputs: EmbeddingInput[],
    base64: boolean,
    signal: Cancellation,
  ): Promise<Embeddings> {
    const c = resolved.contract;
    const tokenizer = resolved.text.tokenizer;
    const encoded = inputs.map((x, i): readonly number[] => {
      if ('ids' in x) return x.ids;
      if (tokenizer === undefined) {
        throw new OpenAiError(
          400,
          'invalid_request_error',
          `model '${resolved.name}' takes token ids and has no tokenizer.json beside ` +
          `its config.pbtxt (or in --openai-tokenizer): send token ids, or add one`,
          `input[${i}]`,
          'tokenizer_missing',
        );
      }
      return resolved.text.encode(x.text, true);
    });
    const limit = c.fixedLength > 0 ? c.fixedLength : resolved.text.maxLength;
    let longest = 0;
    let tokens = 0;
    const lengths = new Array<number>(encoded.length);
    for (let i = 0; i < encoded.length; i++) {
      const n = encoded[i]!.length;
      tokens += n;
      if (limit !== undefined && n > limit) {
        throw invalidRequest(
          `This model's maximum context length is ${limit} tokens, however 'input[` +
          `${i}]' has ${n} tokens. Please reduce the length of the input.`,
          inputs.length === 1 ? 'input' : `input[${i}]`,
          'context_length_exceeded',
        );
      }
      lengths[i] = n;
      if (n > longest) longest = n;
    }
    const seq = c.fixedLength > 0 ? c.fixedLength : longest;
    const maxRows = c.batched ? c.maxBatchSize : c.inputIds.shape[0] === -1 ? encoded.length : 1;
    const items: string[] = [];
    let dim = 0;
    await this.runBatches(
      resolved.name,
      encoded.length,
      maxRows,
      signal,
      (start, end) => {
        const rows = end - start;
        const [ids, mask, types] = intMatrices(
          c.tokenTypeIds === undefined ? [c.inputIds, c.attentionMask] : [c.inputIds, c.attentionMask, c.tokenTypeIds],
          rows,
          seq,
        );
        for (let r = 0; r < rows; r++) {
          const row = encoded[start + r]!;
          for (let s = 0, i = r * seq * ids!.step; s < row.length; s++, i += ids!.step) ids!.words[i] = row[s]!;
          for (let s = 0, i = r * seq * mask!.step; s < row.length; s++, i += mask!.step) mask!.words[i] = 1;
        }
        // A single sequence: every token_type_id is 0.
        return types === undefined ? [ids!.tensor, mask!.tensor] : [ids!.tensor, mask!.tensor, types.tensor];
      },
      (start, end) => ({
        output: c.output.name,
        lengths: c.meanPool ? lengths.slice(start, end) : undefined,
        normalize: c.normalize,
        base64,
        firstIndex: start,
      }),
      (start, end, r, hint) => {
        const out = outputOf(r, c.output.name);
        const rows = end - start;
        const perRow = rowElements(out, rows);
        dim = c.meanPool ? out.shape[out.shape.length - 1]! : perRow;
        items[start / maxRows] = itemsOf(out, rows, perRow, dim, hint);
      },
    );
    return { items, dim, tokens };
  }
}

const ANSWER_HEAD = '{"object":"list","data":[';

// eslint-disable-next-line no-control-regex -- the whole of ASCII
const NON_ASCII = /[^\x00-\x7f]/;
const isAscii = (s: string): boolean => !NON_ASCII.test(s);

/** A request's items, a text per model call in order, and the vectors' length. */
interface Embeddings {
  readonly items: readonly string[];
  readonly dim: number;
  readonly tokens: number;
}

/** Values per row of a model call's output of `rows` rows. */
function rowElements(out: Tensor, rows: number): number {
  return rows === 0 ? 0 : out.data.byteLength / 4 / rows;
}

/**
 * A model call's items: as the backend made them (embeddingText), or made here with the same code (the run was on
 * the event loop, or another backend's).
 */
function itemsOf(out: Tensor, rows: number, perRow: number, dim: number, hint: EmbeddingTextHint): string {
  if (out.embeddingText !== undefined) return out.embeddingText;
  const f = typedView(out) as Float32Array;
  const items = hintedItems(hint, f, rows, perRow, dim);
  if (typeof items === 'string') return items;
  const vectors = poolRows(f, rows, perRow / dim, dim, hint.lengths, 0, hint.normalize);
  throw new OpenAiError(500, 'server_error', `the model produced a non-finite embedding value (${vectors[items]})`);
}
