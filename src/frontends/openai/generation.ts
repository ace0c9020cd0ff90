/**
 * POST /v1/completions and /v1/chat/completions on a model with the
 * generation contract. The request's fields become the inputs the model
 * declares (a field it cannot take is refused); each response's
 * `text_output` is a piece of the answer. Streamed answers go out as
 * Server-Sent Events as the model produces them.
 */
import type { ServerResponse } from 'node:http';
import { streamResponses } from '../../core/response-stream.js';
import type { InferResponse, StreamResponse, TensorMetadata } from '../../types/api.js';
import { decodeBytesElements, type Tensor } from '../../tensor/tensor.js';
import type { GenerationContract } from './contracts.js';
import {
  type OpenAiContext,
  type ResolvedModel,
  admission,
  cancelOnClose,
  resolveModel,
  responseId,
} from './context.js';
import { invalidRequest, toOpenAiError, unsupportedField } from './errors.js';
import {
  type Body,
  type StreamChoice,
  checkKnownFields,
  checkUser,
  isObject,
  modelName,
  optionalInteger,
  optionalNumber,
  refuseUnlessNeutral,
  singleChoice,
  stopWords,
  streamChoice,
} from './fields.js';
import type { ChatMessage } from './model-text.js';
import { bytesTensor, numericTensor } from './tensors.js';

/** Triton's OpenAI frontend sends this many when the request gives no max_tokens. */
export const DEFAULT_MAX_TOKENS = 16;

const COMMON_FIELDS = [
  'model',
  'max_tokens',
  'temperature',
  'top_p',
  'n',
  'stream',
  'stream_options',
  'stop',
  'presence_penalty',
  'frequency_penalty',
  'seed',
  'user',
  'logprobs',
  'logit_bias',
];
const COMPLETION_FIELDS = new Set([...COMMON_FIELDS, 'prompt', 'echo', 'best_of', 'suffix']);
const CHAT_FIELDS = new Set([
  ...COMMON_FIELDS,
  'messages',
  'max_completion_tokens',
  'top_logprobs',
  'tools',
  'tool_choice',
  'parallel_tool_calls',
  'functions',
  'function_call',
  'response_format',
  'modalities',
  'audio',
  'prediction',
  'reasoning_effort',
  'service_tier',
  'store',
  'metadata',
  'web_search_options',
]);
const CHAT_ROLES = new Set(['system', 'developer', 'user', 'assistant', 'tool']);

/** What a generation request asks, read and checked. */
interface Generation {
  readonly model: string;
  readonly chat: boolean;
  readonly prompt: string;
  /** Tokens of the prompt when the client sent token ids. */
  readonly promptTokenCount: number | undefined;
  readonly maxTokens: number | undefined;
  readonly stream: StreamChoice;
  readonly sampling: ReadonlyMap<string, number>;
  readonly stop: string[] | undefined;
}

function readCommon(body: Body): Omit<Generation, 'chat' | 'prompt' | 'promptTokenCount' | 'maxTokens'> {
  singleChoice(body);
  checkUser(body);
  refuseUnlessNeutral(
    body,
    'logit_bias',
    'token biases are not passed to models',
    (v) => isObject(v) && Object.keys(v).length === 0,
  );
  const sampling = new Map<string, number>();
  const put = (key: string, v: number | undefined) => v !== undefined && sampling.set(key, v);
  put('temperature', optionalNumber(body, 'temperature', 0, 2));
  put('top_p', optionalNumber(body, 'top_p', 0, 1));
  put('presence_penalty', optionalNumber(body, 'presence_penalty', -2, 2));
  put('frequency_penalty', optionalNumber(body, 'frequency_penalty', -2, 2));
  put('seed', optionalInteger(body, 'seed', Number.MIN_SAFE_INTEGER));
  return { model: modelName(body), stream: streamChoice(body), sampling, stop: stopWords(body) };
}

function readCompletion(body: Body): Omit<Generation, 'prompt' | 'promptTokenCount'> & { promptValue: unknown } {
  checkKnownFields(body, COMPLETION_FIELDS);
  refuseUnlessNeutral(body, 'logprobs', 'log probabilities are not returned');
  refuseUnlessNeutral(body, 'echo', 'the prompt is not echoed', (v) => v === false);
  refuseUnlessNeutral(body, 'best_of', 'one completion is generated per request', (v) => v === 1);
  refuseUnlessNeutral(body, 'suffix', 'models take no suffix');
  if (!('prompt' in body)) throw invalidRequest("'prompt' is required", 'prompt');
  return {
    ...readCommon(body),
    chat: false,
    maxTokens: optionalInteger(body, 'max_tokens', 1),
    promptValue: body['prompt'],
  };
}

function readChat(body: Body): Omit<Generation, 'prompt' | 'promptTokenCount'> & { messages: ChatMessage[] } {
  checkKnownFields(body, CHAT_FIELDS);
  refuseUnlessNeutral(body, 'logprobs', 'log probabilities are not returned', (v) => v === false);
  refuseUnlessNeutral(body, 'top_logprobs', 'log probabilities are not returned');
  for (const key of ['tools', 'tool_choice', 'parallel_tool_calls', 'functions', 'function_call']) {
    refuseUnlessNeutral(
      body,
      key,
      'tool calling is not supported',
      (v) => key === 'tools' && Array.isArray(v) && v.length === 0,
    );
  }
  refuseUnlessNeutral(
    body,
    'response_format',
    'only text responses are produced',
    (v) => isObject(v) && v['type'] === 'text',
  );
  refuseUnlessNeutral(
    body,
    'modalities',
    'only text responses are produced',
    (v) => Array.isArray(v) && v.length === 1 && v[0] === 'text',
  );
  refuseUnlessNeutral(body, 'audio', 'only text responses are produced');
  refuseUnlessNeutral(body, 'prediction', 'predicted outputs are not supported');
  refuseUnlessNeutral(body, 'reasoning_effort', 'models here take no reasoning effort');
  refuseUnlessNeutral(body, 'service_tier', 'there is one service tier', (v) => v === 'auto' || v === 'default');
  refuseUnlessNeutral(body, 'store', 'completions are not stored', (v) => v === false);
  refuseUnlessNeutral(body, 'metadata', 'completions are not stored');
  refuseUnlessNeutral(body, 'web_search_options', 'web search is not supported');
  const fromNew = optionalInteger(body, 'max_completion_tokens', 1);
  const maxTokens = fromNew ?? optionalInteger(body, 'max_tokens', 1);
  return { ...readCommon(body), chat: true, maxTokens, messages: readMessages(body['messages']) };
}

function readMessages(value: unknown): ChatMessage[] {
  if (!Array.isArray(value) || value.length === 0) {
    throw invalidRequest("'messages' must be a non-empty array of messages", 'messages');
  }
  return value.map((m: unknown, i) => {
    const at = `messages[${i}]`;
    if (!isObject(m)) throw invalidRequest(`'${at}' must be an object with 'role' and 'content'`, at);
    const role = m['role'];
    if (typeof role !== 'string' || !CHAT_ROLES.has(role)) {
      throw invalidRequest(
        `'${at}.role' must be one of ${[...CHAT_ROLES].join(', ')}, got ${JSON.stringify(role)}`,
        `${at}.role`,
      );
    }
    for (const key of Object.keys(m)) {
      if (key === 'tool_calls' || key === 'function_call' || key === 'audio')
        throw unsupportedField(`${at}.${key}`, 'tool calling is not supported');
      if (key !== 'role' && key !== 'content' && key !== 'name' && key !== 'tool_call_id' && key !== 'refusal') {
        throw invalidRequest(`Unrecognized argument in '${at}': ${key}`, `${at}.${key}`);
      }
    }
    const content = messageContent(m['content'], `${at}.content`);
    const name = m['name'];
    if (name !== undefined && typeof name !== 'string')
      throw invalidRequest(`'${at}.name' must be a string`, `${at}.name`);
    return name === undefined ? { role, content } : { role, content, name };
  });
}

function messageContent(value: unknown, at: string): string {
  if (typeof value === 'string') return value;
  if (Array.isArray(value)) {
    let text = '';
    value.forEach((part: unknown, i) => {
      if (!isObject(part) || part['type'] !== 'text' || typeof part['text'] !== 'string') {
        const type = isObject(part) ? JSON.stringify(part['type']) : 'not an object';
        throw invalidRequest(
          `'${at}[${i}]' must be a text part ({"type": "text", "text": "..."}); got type ${type}`,
          `${at}[${i}]`,
        );
      }
      text += part['text'];
    });
    return text;
  }
  throw invalidRequest(`'${at}' must be a string or an array of text parts`, at);
}

/** The prompt of /v1/completions: a string, or token ids the tokenizer turns back into text. */
function completionPrompt(
  value: unknown,
  resolved: ResolvedModel<GenerationContract>,
): { prompt: string; tokens: number | undefined } {
  let v = value;
  if (Array.isArray(v) && v.length === 1 && (typeof v[0] === 'string' || Array.isArray(v[0]))) v = v[0];
  if (typeof v === 'string') {
    if (v === '') throw invalidRequest("'prompt' is empty", 'prompt');
    return { prompt: v, tokens: undefined };
  }
  if (Array.isArray(v) && v.length > 0 && v.every((x) => Number.isInteger(x) && (x as number) >= 0)) {
    const tokenizer = resolved.text.tokenizer;
    if (tokenizer === undefined) {
      throw invalidRequest(
        `model '${resolved.name}' has no tokenizer.json to read token ids with; send the prompt as text`,
        'prompt',
      );
    }
    return { prompt: tokenizer.decode(v as number[], { skip_special_tokens: false }), tokens: v.length };
  }
  if (Array.isArray(v) && v.length > 1) throw unsupportedField('prompt', 'one prompt per request');
  throw invalidRequest("'prompt' must be a non-empty string, or an array of token ids", 'prompt');
}

/**
 * The inputs of one generation request: only those the model declares, and every field the request sets must have one.
 */
function generationInputs(g: Generation, contract: GenerationContract, model: string): Tensor[] {
  const inputs = contract.inputs;
  const tensors: Tensor[] = [bytesTensor(inputs.get('text_input')!, [g.prompt], g.chat ? 'messages' : 'prompt')];
  const need = (name: string, field: string): TensorMetadata => {
    const meta = inputs.get(name);
    if (meta === undefined)
      throw invalidRequest(`model '${model}' does not take '${field}' (it has no '${name}' input)`, field);
    return meta;
  };
  const streamInput = inputs.get('stream');
  if (streamInput !== undefined) tensors.push(numericTensor(streamInput, [g.stream.stream], 'stream'));
  const maxInput = inputs.get('max_tokens');
  if (g.maxTokens !== undefined || maxInput !== undefined) {
    const field = g.chat ? 'max_completion_tokens' : 'max_tokens';
    tensors.push(numericTensor(need('max_tokens', field), [g.maxTokens ?? DEFAULT_MAX_TOKENS], field));
  }
  for (const [field, value] of g.sampling) tensors.push(numericTensor(need(field, field), [value], field));
  if (g.stop !== undefined) tensors.push(bytesTensor(need('stop_words', 'stop'), g.stop, 'stop'));
  return tensors;
}

/** The text of one response's text_output ('' when it has none). */
function responseText(r: InferResponse): string {
  const t = r.outputs.find((o) => o.name === 'text_output');
  if (t === undefined || t.data.byteLength === 0) return '';
  const parts = decodeBytesElements(t.data, 'text_output');
  let s = '';
  for (const p of parts) s += Buffer.from(p.buffer, p.byteOffset, p.byteLength).toString('utf8');
  return s;
}

interface Usage {
  prompt_tokens: number;
  completion_tokens: number;
  total_tokens: number;
}

export class GenerationEndpoint {
  constructor(private readonly ctx: OpenAiContext) {}

  async handle(res: ServerResponse, body: Body, chat: boolean): Promise<void> {
    const arrived = process.hrtime.bigint();
    const read = chat ? readChat(body) : readCompletion(body);
    const resolved = await resolveModel(this.ctx, read.model, 'generation');
    let prompt: string;
    let promptTokenCount: number | undefined;
    if (chat) {
      prompt = resolved.text.renderChat((read as ReturnType<typeof readChat>).messages);
    } else {
      const p = completionPrompt((read as ReturnType<typeof readCompletion>).promptValue, resolved);
      prompt = p.prompt;
      promptTokenCount = p.tokens;
    }
    if (Buffer.byteLength(prompt, 'utf8') > this.ctx.maxInputSize) {
      throw invalidRequest(
        `the prompt is ${Buffer.byteLength(prompt, 'utf8')} bytes, over the maximum ` +
        `input size of ${this.ctx.maxInputSize} bytes (--http-max-input-size)`,
        chat ? 'messages' : 'prompt',
        'request_too_large',
      );
    }
    const g: Generation = { ...read, chat, prompt, promptTokenCount };
    const inputs = generationInputs(g, resolved.contract, resolved.name);
    admission(this.ctx, resolved.name);
    const signal = cancelOnClose(res);
    const responses = streamResponses(this.ctx.server, { model: resolved.name, inputs, signal });
    if (g.stream.stream) await this.stream(res, g, resolved, responses, arrived);
    else await this.whole(res, g, resolved, responses);
  }

  private usage(g: Generation, resolved: ResolvedModel<GenerationContract>, text: string, pieces: number): Usage {
    const prompt = g.promptTokenCount ?? resolved.text.countTokens(g.prompt);
    const completion = resolved.text.tokenizer !== undefined ? resolved.text.countTokens(text) : pieces;
    return { prompt_tokens: prompt, completion_tokens: completion, total_tokens: prompt + completion };
  }

  private finishReason(g: Generation, resolved: ResolvedModel<GenerationContract>, usage: Usage): 'stop' | 'length' {
    const max = resolved.contract.inputs.has('max_tokens') ? (g.maxTokens ?? DEFAULT_MAX_TOKENS) : g.maxTokens;
    return max !== undefined && usage.completion_tokens >= max ? 'length' : 'stop';
  }

  private async whole(
    res: ServerResponse,
    g: Generation,
    resolved: ResolvedModel<GenerationContract>,
    responses: AsyncIterable<StreamResponse>,
  ): Promise<void> {
    let text = '';
    let pieces = 0;
    for await (const item of responses) {
      if (item.error !== undefined) throw toOpenAiError(item.error, g.model);
      if (item.response === undefined) continue;
      const piece = responseText(item.response);
      if (piece !== '') pieces++;
      text += piece;
    }
    if (res.destroyed) return;
    const usage = this.usage(g, resolved, text, pieces);
    const finish = this.finishReason(g, resolved, usage);
    const created = Math.floor(Date.now() / 1000);
    const choice = g.chat
      ? {
          index: 0,
          message: { role: 'assistant', content: text, refusal: null },
          logprobs: null,
          finish_reason: finish,
        }
      : { index: 0, text, logprobs: null, finish_reason: finish };
    const out = JSON.stringify({
      id: responseId(g.chat ? 'chatcmpl' : 'cmpl'),
      object: g.chat ? 'chat.completion' : 'text_completion',
      created,
      model: g.model,
      choices: [choice],
      usage,
    });
    res.writeHead(200, ['Content-Type', 'application/json', 'Content-Length', String(Buffer.byteLength(out))]);
    res.end(out);
  }

  /**
   * Server-Sent Events, one chunk per model response as it comes. A client
   * that reads slower than the model writes does not make memory grow with
   * the stream: while the socket's buffer is full, the pieces that arrive are
   * joined into one pending piece (at most the answer's text), sent as one
   * chunk when the socket drains.
   */
  private async stream(
    res: ServerResponse,
    g: Generation,
    resolved: ResolvedModel<GenerationContract>,
    responses: AsyncIterable<StreamResponse>,
    arrived: bigint,
  ): Promise<void> {
    const id = responseId(g.chat ? 'chatcmpl' : 'cmpl');
    const created = Math.floor(Date.now() / 1000);
    const object = g.chat ? 'chat.completion.chunk' : 'text_completion';
    const usageField = g.stream.includeUsage ? ',"usage":null' : '';
    const head = `{"id":${JSON.stringify(id)},"object":"` +
      `${object}","created":${created},"model":${JSON.stringify(g.model)}`;
    const chunk = (piece: string | undefined, finish: string | null): string => {
      const choice = g.chat
        ? `{"index":0,"delta":` +
          `${piece === undefined ? '{}' : `{"content":${JSON.stringify(piece)}}`},"logprobs":null,"finish_reason":` +
          `${finish === null ? 'null' : `"${finish}"`}}`
        : `{"index":0,"text":${JSON.stringify(piece ?? '')},"logprobs":null,"finish_reason":` +
          `${finish === null ? 'null' : `"${finish}"`}}`;
      return `data: ${head},"choices":[${choice}]${usageField}}\n\n`;
    };
    const timings = this.ctx.timings;
    let started = false;
    let text = '';
    let pieces = 0;
    let pending = '';
    let last = arrived;
    let version: string;
    const flush = (): void => {
      if (pending === '' || res.destroyed) return;
      res.write(chunk(pending, null));
      pending = '';
    };
    const onDrain = (): void => flush();
    const start = (): void => {
      started = true;
      res.writeHead(200, [
        'Content-Type',
        'text/event-stream; charset=utf-8',
        'Cache-Control',
        'no-cache',
        'Connection',
        'keep-alive',
      ]);
      res.on('drain', onDrain);
      if (g.chat)
        res.write(
          `data: ${head},"choices":[{"index":0,"delta":{"role":"assistant","content":""},` +
            `"logprobs":null,"finish_reason":null}]${usageField}}\n\n`,
        );
    };
    try {
      for await (const item of responses) {
        if (res.destroyed) break;
        if (item.error !== undefined) {
          const err = toOpenAiError(item.error, g.model);
          if (!started) throw err;
          flush();
          res.end(`data: ${err.toJson()}\n\n`);
          return;
        }
        if (item.response === undefined) continue;
        const piece = responseText(item.response);
        if (piece === '') continue;
        const now = process.hrtime.bigint();
        version = item.response.modelVersion;
        if (timings !== undefined) {
          if (pieces === 0) timings.observeFirstToken(resolved.name, version, Number(now - arrived) / 1e9);
          else timings.observeInterToken(resolved.name, version, Number(now - last) / 1e9);
        }
        last = now;
        pieces++;
        text += piece;
        if (!started) start();
        pending += piece;
        if (!res.writableNeedDrain) flush();
      }
      if (res.destroyed) return;
      if (!started) start();
      flush();
      const usage = this.usage(g, resolved, text, pieces);
      let tail = chunk(undefined, this.finishReason(g, resolved, usage));
      if (g.stream.includeUsage) tail += `data: ${head},"choices":[],"usage":${JSON.stringify(usage)}}\n\n`;
      res.end(`${tail}data: [DONE]\n\n`);
    } finally {
      res.off('drain', onDrain);
    }
  }
}

