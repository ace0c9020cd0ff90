/**
 * Which OpenAI endpoints a model can serve, read from its inputs and outputs
 * (docs/openai.md, "Contracts"):
 *
 * - generation: TensorRT-LLM's tensor contract, as Triton's OpenAI frontend
 *   maps it: `text_input` (BYTES) in, `text_output` (BYTES) out, and any of
 *   the optional sampling inputs the model declares.
 * - text embedding: one BYTES input, an FP32 output.
 * - token embedding: BERT-shaped, INT64 (or INT32) `input_ids` and
 *   `attention_mask` (and `token_type_ids`), an FP32 output of [batch, dim]
 *   or [batch, seq, dim].
 */
import type { ModelConfig } from '../../gen/model_config_pb.js';
import type { ModelMetadata, TensorMetadata } from '../../types/api.js';

/** The generation inputs besides text_input, with the request field each takes. */
export const GENERATION_INPUTS = {
  stream: 'stream',
  max_tokens: 'max_tokens',
  temperature: 'temperature',
  top_p: 'top_p',
  seed: 'seed',
  stop_words: 'stop',
  bad_words: undefined,
  presence_penalty: 'presence_penalty',
  frequency_penalty: 'frequency_penalty',
  return_logprobs: undefined,
} as const satisfies Record<string, string | undefined>;

export interface GenerationContract {
  readonly kind: 'generation';
  /** Every input the model declares, by name. */
  readonly inputs: ReadonlyMap<string, TensorMetadata>;
  readonly batched: boolean;
}

export interface TextEmbeddingContract {
  readonly kind: 'text-embedding';
  readonly input: TensorMetadata;
  readonly output: TensorMetadata;
  readonly batched: boolean;
  readonly maxBatchSize: number;
  readonly normalize: boolean;
}

export interface TokenEmbeddingContract {
  readonly kind: 'token-embedding';
  readonly inputIds: TensorMetadata;
  readonly attentionMask: TensorMetadata;
  readonly tokenTypeIds: TensorMetadata | undefined;
  readonly output: TensorMetadata;
  /** The output holds one vector per token: mean-pooled over the attention mask. */
  readonly meanPool: boolean;
  readonly batched: boolean;
  readonly maxBatchSize: number;
  /** The sequence length the model fixes (its input_ids dim), or -1. */
  readonly fixedLength: number;
  readonly normalize: boolean;
}

export type EmbeddingContract = TextEmbeddingContract | TokenEmbeddingContract;
export type Contract = GenerationContract | EmbeddingContract;

function parameter(config: ModelConfig, key: string): string | undefined {
  return config.parameters[key]?.stringValue;
}

/** The model's contract, or a sentence saying why it fits none. */
export function modelContract(metadata: ModelMetadata, config: ModelConfig): Contract | string {
  const inputs = new Map(metadata.inputs.map((t) => [t.name, t]));
  const optional = new Set(config.input.filter((i) => i.optional).map((i) => i.name));
  const batched = config.maxBatchSize > 0;
  const textIn = inputs.get('text_input');
  const textOut = metadata.outputs.find((t) => t.name === 'text_output');
  if (textIn !== undefined || textOut !== undefined) {
    if (textIn?.datatype !== 'BYTES' || textOut?.datatype !== 'BYTES') {
      return "a generation model needs a BYTES input 'text_input' and a BYTES output 'text_output'";
    }
    for (const name of inputs.keys()) {
      if (name !== 'text_input' && !(name in GENERATION_INPUTS) && !optional.has(name)) {
        return `input '${name}' is not part of the generation contract (text_input, ` +
          `${Object.keys(GENERATION_INPUTS).join(', ')}) and is not optional`;
      }
    }
    return { kind: 'generation', inputs, batched };
  }
  const normalize = parameter(config, 'embedding_normalize')?.toLowerCase() !== 'false';
  const fp32Out = metadata.outputs.find((t) => t.datatype === 'FP32');
  const required = metadata.inputs.filter((t) => !optional.has(t.name));
  const ids = inputs.get('input_ids');
  const mask = inputs.get('attention_mask');
  if (ids !== undefined || mask !== undefined) {
    const intType = (t: TensorMetadata | undefined) =>
      t !== undefined && (t.datatype === 'INT64' || t.datatype === 'INT32');
    if (!intType(ids) || !intType(mask))
      return "a token embedding model needs INT64 (or INT32) inputs 'input_ids' and 'attention_mask'";
    const types = inputs.get('token_type_ids');
    if (types !== undefined && !intType(types)) return "'token_type_ids' must be INT64 or INT32";
    for (const t of required) {
      if (t.name !== 'input_ids' && t.name !== 'attention_mask' && t.name !== 'token_type_ids') {
        return `input '${t.name}' is not part of the token embedding ` +
          `contract (input_ids, attention_mask, token_type_ids)`;
      }
    }
    if (fp32Out === undefined) return 'an embedding model needs an FP32 output';
    // With or without max_batch_size, input_ids is [batch, seq] and the output [batch, dim] or [batch, seq, dim].
    if (ids!.shape.length !== 2) return `'input_ids' must be [batch, seq], it is ${JSON.stringify(ids!.shape)}`;
    if (fp32Out.shape.length !== 2 && fp32Out.shape.length !== 3) {
      return `output '${fp32Out.name}' must be [batch, dim] or ` +
        `[batch, seq, dim], it is ${JSON.stringify(fp32Out.shape)}`;
    }
    const meanPool = fp32Out.shape.length === 3;
    const fixedLength = ids!.shape[1]!;
    return {
      kind: 'token-embedding',
      inputIds: ids!,
      attentionMask: mask!,
      tokenTypeIds: types,
      output: fp32Out,
      meanPool,
      batched,
      maxBatchSize: config.maxBatchSize,
      fixedLength,
      normalize,
    };
  }
  if (required.length === 1 && required[0]!.datatype === 'BYTES' && fp32Out !== undefined) {
    const input = required[0]!;
    const elements = input.shape.slice(batched ? 1 : 0);
    if (elements.length > 1 || (elements.length === 1 && elements[0] !== 1 && elements[0] !== -1)) {
      return `text input '${input.name}' must hold one string per batch row, it is ${JSON.stringify(input.shape)}`;
    }
    return { kind: 'text-embedding', input, output: fp32Out, batched, maxBatchSize: config.maxBatchSize, normalize };
  }
  return 'its inputs fit neither the generation contract (text_input -> text_output) nor an embedding contract';
}
