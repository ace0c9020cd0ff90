/** What every OpenAI endpoint shares: the core, the model texts, the token timings, and how a model is looked up. */
import type { ServerResponse } from 'node:http';
import type { ServerApi } from '../../core/server-api.js';
import type { ModelConfig } from '../../gen/model_config_pb.js';
import type { ModelMetadata } from '../../types/api.js';
import { Cancellation } from '../../types/cancellation.js';
import { type Contract, type EmbeddingContract, type GenerationContract, modelContract } from './contracts.js';
import { OpenAiError, toOpenAiError } from './errors.js';
import type { ModelText, ModelTexts } from './model-text.js';

/** Receives the token timings of streamed responses (Prometheus histograms per model, see metrics/). */
export interface TokenTimings {
  /** Seconds from receiving the request to its first token. */
  observeFirstToken(model: string, version: string, seconds: number): void;
  /** Seconds between two tokens of one response stream. */
  observeInterToken(model: string, version: string, seconds: number): void;
}

export interface OpenAiContext {
  readonly server: ServerApi;
  readonly texts: ModelTexts;
  readonly timings: TokenTimings | undefined;
  /** --http-max-input-size. */
  readonly maxInputSize: number;
}

export interface ResolvedModel<C extends Contract> {
  readonly name: string;
  readonly metadata: ModelMetadata;
  readonly config: ModelConfig;
  readonly contract: C;
  readonly text: ModelText;
}

const contracts = new WeakMap<ModelConfig, { metadata: ModelMetadata; contract: Contract | string }>();

/** The model a request names, checked against the contract the endpoint needs. */
export async function resolveModel<K extends 'generation' | 'embedding'>(
  ctx: OpenAiContext,
  name: string,
  kind: K,
): Promise<ResolvedModel<K extends 'generation' ? GenerationContract : EmbeddingContract>> {
  let config: ModelConfig;
  try {
    config = ctx.server.modelConfig(name);
  } catch (err) {
    // Model paging: a model unloaded for room loads first (docs/paging.md).
    const loading = ctx.server.pageIn?.(name);
    if (loading === undefined) throw toOpenAiError(err, name);
    try {
      await loading;
      config = ctx.server.modelConfig(name);
    } catch (again) {
      throw toOpenAiError(again, name);
    }
  }
  // The configuration object is the same until the model reloads: its metadata and contract are kept with it.
  let known = contracts.get(config);
  if (known === undefined) {
    const metadata = ctx.server.modelMetadata(name);
    known = { metadata, contract: modelContract(metadata, config) };
    contracts.set(config, known);
  }
  const { metadata, contract } = known;
  const endpoint = kind === 'generation' ? 'completions' : 'embeddings';
  if (typeof contract === 'string') {
    throw new OpenAiError(
      400,
      'invalid_request_error',
      `model '${name}' cannot serve ${endpoint}: ${contract}`,
      'model',
      'model_not_supported',
    );
  }
  const fits = kind === 'generation' ? contract.kind === 'generation' : contract.kind !== 'generation';
  if (!fits) {
    const is = contract.kind === 'generation' ? 'a generation model' : 'an embedding model';
    throw new OpenAiError(
      400,
      'invalid_request_error',
      `model '${name}' is ${is} and cannot serve ${endpoint}`,
      'model',
      'model_not_supported',
    );
  }
  const text = await ctx.texts.get(name, ctx.server.modelDirectory?.(name), config);
  return { name, metadata, config, contract: contract as never, text };
}

/** The model's queue-full refusal (429), asked before any work is done. */
export function admission(ctx: OpenAiContext, model: string): void {
  const refused = ctx.server.admissionError?.(model);
  if (refused !== undefined) throw toOpenAiError(refused, model);
}

/** Cancels the core request when the client goes away before the reply is complete. */
export function cancelOnClose(res: ServerResponse): Cancellation {
  const signal = new Cancellation();
  res.on('close', () => {
    if (!res.writableFinished) signal.abort();
  });
  return signal;
}

let sequence = 0;
const prefix = Math.random().toString(36).slice(2, 10);

/** A response id, unique within this process and unlikely to repeat across restarts. */
export function responseId(kind: 'cmpl' | 'chatcmpl'): string {
  return `${kind}-${prefix}${(++sequence).toString(36)}`;
}
