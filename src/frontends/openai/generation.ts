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
import type { Cancellation } from '../../types/cancellation.js';
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

/** What a generation request asks, read and checked (the prompts apart). */
interface Generation {
  readonly model: string;
  readonly chat: boolean;
  readonly maxTokens: number | undefined;
  readonly stream: StreamChoice;
  readonly sampling: ReadonlyMap<string, number>;
  readonly stop: string[] | undefined;
}

/** One prompt of a request: a choice of the answer. */
interface Prompt {
  readonly text: string;
  /** Tokens of the prompt when the client sent token ids. */
  readonly tokens: number | undefined;
}

/** OpenAI's bound on the prompts of one request (as on the inputs of /v1/embeddings). */
const MAX_PROMPTS = 2048;

function readCommon(body: Body): Omit<Generation, 'chat' | 'maxTokens'> {
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

function readCompletion(body: Body): Generation & { promptValue: unknown } {
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

function readChat(body: Body): Generation & { messages: ChatMessage[] } {
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

/**
 * The prompts of /v1/completions: a string, token ids (which the tokenizer turns back into text),
 * or an array of either kind, each prompt a choice of the answer.
 */
function completionPrompts(value: unknown, resolved: ResolvedModel<GenerationContract>): Prompt[] {
  const form = "'prompt' must be a non-empty string, an array of token ids, or an array of either";
  if (typeof value === 'string') {
    if (value === '') throw invalidRequest("'prompt' is empty", 'prompt');
    return [{ text: value, tokens: undefined }];
  }
  if (!Array.isArray(value)) throw invalidRequest(form, 'prompt');
  if (value.length === 0) throw invalidRequest("'prompt' is an empty array", 'prompt');
  if (typeof value[0] === 'number') return [tokenPrompt(value, 'prompt', resolved)];
  if (value.length > MAX_PROMPTS) {
    throw invalidRequest(
      `'prompt' holds ${value.length} prompts; at most ${MAX_PROMPTS} are taken per request`,
      'prompt',
    );
  }
  const strings = typeof value[0] === 'string';
  return value.map((v: unknown, i): Prompt => {
    const at = `prompt[${i}]`;
    if (typeof v === 'string' && strings) {
      if (v === '') throw invalidRequest(`'${at}' is empty`, at);
      return { text: v, tokens: undefined };
    }
    if (Array.isArray(v) && !strings) return tokenPrompt(v, at, resolved);
    if (typeof v === 'string' || Array.isArray(v)) {
      throw invalidRequest(
        `'${at}' is ${strings ? 'an array of token ids' : 'a string'} where 'prompt[0]' is ` +
        `${strings ? 'a string' : 'an array of token ids'}: the prompts of one request are all ` +
        'strings or all token ids',
        at,
      );
    }
    throw invalidRequest(`'${at}' must be a string or an array of token ids`, at);
  });
}

function tokenPrompt(ids: unknown[], at: string, resolved: ResolvedModel<GenerationContract>): Prompt {
  if (ids.length === 0) throw invalidRequest(`'${at}' is an empty array of token ids`, at);
  ids.forEach((x, i) => {
    if (typeof x !== 'number' || !Number.isInteger(x) || x < 0) {
      throw invalidRequest(`'${at}[${i}]' must be a token id (an integer from 0), got ${JSON.stringify(x)}`, at);
    }
  });
  const tokenizer = resolved.text.tokenizer;
  if (tokenizer === undefined) {
    throw invalidRequest(
      `model '${resolved.name}' has no tokenizer.json to read token ids with; send the prompt as text`,
      at,
    );
  }
  return { text: tokenizer.decode(ids as number[], { skip_special_tokens: false }), tokens: ids.length };
}

/**
 * The inputs of one generation request: only those the model declares, and every field the request sets must have one.
 */
function generationInputs(g: Generation, prompt: string, contract: GenerationContract, model: string): Tensor[] {
  const inputs = contract.inputs;
  const tensors: Tensor[] = [bytesTensor(inputs.get('text_input')!, [prompt], g.chat ? 'messages' : 'prompt')];
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

/** One prompt on its way through the model: a choice of the answer. */
interface Run {
  readonly prompt: Prompt;
  readonly responses: AsyncIterable<StreamResponse>;
}

/** A choice's text as it streams, and what it waits to send while the socket is full. */
class StreamedChoice {
  text = '';
  pieces = 0;
  pending = '';
  constructor(public last: bigint) {}
}

export class GenerationEndpoint {
  constructor(private readonly ctx: OpenAiContext) {}

  async handle(res: ServerResponse, body: Body, chat: boolean): Promise<void> {
    const arrived = process.hrtime.bigint();
    const read = chat ? readChat(body) : readCompletion(body);
    const resolved = await resolveModel(this.ctx, read.model, 'generation');
    const prompts: Prompt[] = chat
      ? [{ text: resolved.text.renderChat((read as ReturnType<typeof readChat>).messages), tokens: undefined }]
      : completionPrompts((read as ReturnType<typeof readCompletion>).promptValue, resolved);
    const g: Generation = read;
    const inputs = prompts.map((p, i) => {
      const size = Buffer.byteLength(p.text, 'utf8');
      if (size > this.ctx.maxInputSize) {
        throw invalidRequest(
          `the prompt is ${size} bytes, over the maximum input size of ${this.ctx.maxInputSize} bytes ` +
          '(--http-max-input-size)',
          chat ? 'messages' : prompts.length > 1 ? `prompt[${i}]` : 'prompt',
          'request_too_large',
        );
      }
      return generationInputs(g, p.text, resolved.contract, resolved.name);
    });
    admission(this.ctx, resolved.name);
    const signal = cancelOnClose(res);
    // All prompts go to the model at once, so its batcher may join them.
    const runs: Run[] = prompts.map((prompt, i) => ({
      prompt,
      responses: streamResponses(this.ctx.server, { model: resolved.name, inputs: inputs[i]!, signal }),
    }));
    if (g.stream.stream) await this.stream(res, g, resolved, runs, signal, arrived);
    else await this.whole(res, g, resolved, runs, signal);
  }

  private usage(resolved: ResolvedModel<GenerationContract>, prompt: Prompt, text: string, pieces: number): Usage {
    const promptTokens = prompt.tokens ?? resolved.text.countTokens(prompt.text);
    const completion = resolved.text.tokenizer !== undefined ? resolved.text.countTokens(text) : pieces;
    return { prompt_tokens: promptTokens, completion_tokens: completion, total_tokens: promptTokens + completion };
  }

  private finishReason(g: Generation, resolved: ResolvedModel<GenerationContract>, usage: Usage): 'stop' | 'length' {
    const max = resolved.contract.inputs.has('max_tokens') ? (g.maxTokens ?? DEFAULT_MAX_TOKENS) : g.maxTokens;
    return max !== undefined && usage.completion_tokens >= max ? 'length' : 'stop';
  }

  /** The whole text of one run; the first error cancels the request's other runs. */
  private async collect(run: Run, g: Generation, signal: Cancellation): Promise<{ text: string; pieces: number }> {
    let text = '';
    let pieces = 0;
    for await (const item of run.responses) {
      if (item.error !== undefined) {
        signal.abort();
        throw toOpenAiError(item.error, g.model);
      }
      if (item.response === undefined) continue;
      const piece = responseText(item.response);
      if (piece !== '') pieces++;
      text += piece;
    }
    return { text, pieces };
  }

  private async whole(
    res: ServerResponse,
    g: Generation,
    resolved: ResolvedModel<GenerationContract>,
    runs: readonly Run[],
    signal: Cancellation,
  ): Promise<void> {
    const results = await Promise.all(runs.map((run) => this.collect(run, g, signal)));
    if (res.destroyed) return;
    const total: Usage = { prompt_tokens: 0, completion_tokens: 0, total_tokens: 0 };
    const choices = results.map(({ text, pieces }, index) => {
      const usage = this.usage(resolved, runs[index]!.prompt, text, pieces);
      addUsage(total, usage);
      const finish = this.finishReason(g, resolved, usage);
      return g.chat
        ? {
            index,
            message: { role: 'assistant', content: text, refusal: null },
            logprobs: null,
            finish_reason: finish,
          }
        : { index, text, logprobs: null, finish_reason: finish };
    });
    const out = JSON.stringify({
      id: responseId(g.chat ? 'chatcmpl' : 'cmpl'),
      object: g.chat ? 'chat.completion' : 'text_completion',
      created: Math.floor(Date.now() / 1000),
      model: g.model,
      choices,
      usage: total,
    });
    res.writeHead(200, ['Content-Type', 'application/json', 'Content-Length', String(Buffer.byteLength(out))]);
    res.end(out);
  }

  /**
   * Server-Sent Events, one chunk per model response as it comes, each naming its choice's index;
   * a choice's last chunk carries its finish_reason. A client that reads slower than the model
   * writes does not make memory grow with the stream: while the socket's buffer is full, the
   * pieces that arrive are joined into one pending piece per choice (at most its text), sent as
   * one chunk when the socket drains.
   */
  private async stream(
    res: ServerResponse,
    g: Generation,
    resolved: ResolvedModel<GenerationContract>,
    runs: readonly Run[],
    signal: Cancellation,
    arrived: bigint,
  ): Promise<void> {
    const id = responseId(g.chat ? 'chatcmpl' : 'cmpl');
    const created = Math.floor(Date.now() / 1000);
    const object = g.chat ? 'chat.completion.chunk' : 'text_completion';
    const usageField = g.stream.includeUsage ? ',"usage":null' : '';
    const head = `{"id":${JSON.stringify(id)},"object":"` +
      `${object}","created":${created},"model":${JSON.stringify(g.model)}`;
    const chunk = (index: number, piece: string | undefined, finish: string | null): string => {
      const choice = g.chat
        ? `{"index":${index},"delta":` +
          `${piece === undefined ? '{}' : `{"content":${JSON.stringify(piece)}}`},"logprobs":null,"finish_reason":` +
          `${finish === null ? 'null' : `"${finish}"`}}`
        : `{"index":${index},"text":${JSON.stringify(piece ?? '')},"logprobs":null,"finish_reason":` +
          `${finish === null ? 'null' : `"${finish}"`}}`;
      return `data: ${head},"choices":[${choice}]${usageField}}\n\n`;
    };
    const timings = this.ctx.timings;
    const choices = runs.map(() => new StreamedChoice(arrived));
    let started = false;
    /** Set once an error ended the answer: the other runs stop. */
    let failed = false;
    const flushOne = (index: number): void => {
      const c = choices[index]!;
      if (c.pending === '' || res.destroyed) return;
      res.write(chunk(index, c.pending, null));
      c.pending = '';
    };
    const onDrain = (): void => {
      for (let i = 0; i < choices.length; i++) flushOne(i);
    };
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
    const usages: Usage[] = new Array(runs.length);
    /** Streams run `index`; returns its finish chunk, or undefined when the answer ended early. */
    const pump = async (index: number): Promise<string | undefined> => {
      const c = choices[index]!;
      for await (const item of runs[index]!.responses) {
        if (res.destroyed || failed) return undefined;
        if (item.error !== undefined) {
          const err = toOpenAiError(item.error, g.model);
          failed = true;
          signal.abort();
          if (!started) throw err;
          onDrain();
          res.end(`data: ${err.toJson()}\n\n`);
          return undefined;
        }
        if (item.response === undefined) continue;
        const piece = responseText(item.response);
        if (piece === '') continue;
        const now = process.hrtime.bigint();
        if (timings !== undefined) {
          const version = item.response.modelVersion;
          if (c.pieces === 0) timings.observeFirstToken(resolved.name, version, Number(now - arrived) / 1e9);
          else timings.observeInterToken(resolved.name, version, Number(now - c.last) / 1e9);
        }
        c.last = now;
        c.pieces++;
        c.text += piece;
        if (!started) start();
        c.pending += piece;
        if (!res.writableNeedDrain) flushOne(index);
      }
      if (res.destroyed || failed) return undefined;
      if (!started) start();
      flushOne(index);
      const usage = this.usage(resolved, runs[index]!.prompt, c.text, c.pieces);
      usages[index] = usage;
      return chunk(index, undefined, this.finishReason(g, resolved, usage));
    };
    try {
      let tail: string;
      if (runs.length === 1) {
        const finish = await pump(0);
        if (finish === undefined) return;
        tail = finish;
      } else {
        // A choice's finish goes out as soon as it ends; the others keep streaming.
        const finishes = await Promise.all(
          runs.map((_, i) =>
            pump(i).then((finish) => {
              if (finish !== undefined && !res.destroyed && !failed) res.write(finish);
              return finish;
            }),
          ),
        );
        if (finishes.includes(undefined)) return;
        tail = '';
      }
      if (g.stream.includeUsage) {
        const total: Usage = { prompt_tokens: 0, completion_tokens: 0, total_tokens: 0 };
        for (const u of usages) addUsage(total, u);
        tail += `data: ${head},"choices":[],"usage":${JSON.stringify(total)}}\n\n`;
      }
      res.end(`${tail}data: [DONE]\n\n`);
    } finally {
      res.off('drain', onDrain);
    }
  }
}

function addUsage(total: Usage, u: Usage): void {
  total.prompt_tokens += u.prompt_tokens;
  total.completion_tokens += u.completion_tokens;
  total.total_tokens += u.total_tokens;
}
