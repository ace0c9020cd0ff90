/**
 * A model's tokenizer and chat template, read from files beside its
 * config.pbtxt (`tokenizer.json`, `tokenizer_config.json`,
 * `chat_template.jinja`) or, for files a model folder lacks, from
 * `--openai-tokenizer=DIR`. Loaded once per model load.
 */
import { readFile } from 'node:fs/promises';
import path from 'node:path';
import { Template } from '@huggingface/jinja';
import { Tokenizer } from '@huggingface/tokenizers';
import { OpenAiError, invalidRequest } from './errors.js';
import { FastWordPiece } from './wordpiece.js';

type Json = Record<string, unknown>;

export interface ChatMessage {
  readonly role: string;
  readonly content: string;
  readonly name?: string;
}

/** A template, or the error its parse gave. */
interface ParsedTemplate {
  readonly text: string;
  readonly file: string;
  readonly parsed: Template | OpenAiError;
}

export class ModelText {
  constructor(
    readonly model: string,
    readonly tokenizer: Tokenizer | undefined,
    private readonly template: ParsedTemplate | undefined,
    /** model_max_length of tokenizer_config.json (or the truncation length of tokenizer.json). */
    readonly maxLength: number | undefined,
    private readonly specialTokens: Readonly<Record<string, string>>,
    private readonly fast: FastWordPiece | undefined = undefined,
  ) {}

  /** Token ids of `text` (with the tokenizer's special tokens when asked); the model must have a tokenizer. */
  encode(text: string, addSpecialTokens: boolean): number[] {
    const quick = this.fast?.encode(text, addSpecialTokens);
    if (quick !== undefined) return quick;
    return this.tokenizer!.encode(text, { add_special_tokens: addSpecialTokens }).ids;
  }

  get hasChatTemplate(): boolean {
    return this.template !== undefined;
  }

  /** Token count of `text` (without special tokens); words when the model has no tokenizer. */
  countTokens(text: string): number {
    if (this.tokenizer !== undefined) return this.encode(text, false).length;
    return countWords(text);
  }

  /** Renders the chat template with add_generation_prompt; a failure names the model, the file and the line. */
  renderChat(messages: readonly ChatMessage[]): string {
    const t = this.template;
    if (t === undefined) {
      throw invalidRequest(
        `model '${this.model}' has no chat template: put a tokenizer_config.json ` +
        `with "chat_template" (or a chat_template.jinja) ` +
          'beside its config.pbtxt, or start the server with ' +
          '--openai-tokenizer=DIR; /v1/completions takes a plain prompt',
        'messages',
        'chat_template_missing',
      );
    }
    if (t.parsed instanceof OpenAiError) throw t.parsed;
    try {
      return t.parsed.render({ ...this.specialTokens, messages, add_generation_prompt: true });
    } catch (err) {
      const message = (err as Error).message;
      const line = locateError(t.text, message);
      throw invalidRequest(
        `model '${this.model}': the chat template (${t.file}` +
        `${line === undefined ? '' : `, line ${line}`}) failed to render: ${message}`,
        'messages',
        'chat_template_error',
      );
    }
  }
}

function countWords(text: string): number {
  let n = 0;
  for (const w of text.split(/\s+/)) if (w !== '') n++;
  return n;
}

async function readJson(file: string): Promise<Json | undefined> {
  let text: string;
  try {
    text = await readFile(file, 'utf8');
  } catch {
    return undefined;
  }
  try {
    return JSON.parse(text) as Json;
  } catch (err) {
    throw new OpenAiError(500, 'server_error', `${path.basename(file)} is not valid JSON: ${(err as Error).message}`);
  }
}

async function readText(file: string): Promise<string | undefined> {
  try {
    return await readFile(file, 'utf8');
  } catch {
    return undefined;
  }
}

/**
 * The line of `source` a template error most likely comes from: the first prefix failing the same way, or a line naming
 * what the message names.
 */
function locateError(source: string, message: string): number | undefined {
  const lines = source.split('\n');
  for (let n = 1; n <= lines.length; n++) {
    try {
      new Template(lines.slice(0, n).join('\n'));
    } catch (err) {
      if ((err as Error).message === message) return n;
    }
  }
  const names = [...message.matchAll(/'([^']+)'|: ([A-Za-z_][\w.]*)\s*$/g)].map((m) => m[1] ?? m[2]!);
  for (const name of names) {
    const i = lines.findIndex((l) => l.includes(name));
    if (i >= 0) return i + 1;
  }
  return undefined;
}

function chatTemplateOf(config: Json | undefined): string | undefined {
  const t = config?.['chat_template'];
  if (typeof t === 'string') return t;
  if (Array.isArray(t)) {
    const named = t as Array<{ name?: unknown; template?: unknown }>;
    const pick = named.find((x) => x.name === 'default') ?? named[0];
    if (typeof pick?.template === 'string') return pick.template;
  }
  return undefined;
}

function specialTokensOf(config: Json | undefined): Record<string, string> {
  const out: Record<string, string> = {};
  if (config === undefined) return out;
  for (const [key, value] of Object.entries(config)) {
    if (!key.endsWith('_token')) continue;
    if (typeof value === 'string') out[key] = value;
    else if (typeof value === 'object' && value !== null && typeof (value as Json)['content'] === 'string') {
      out[key] = (value as Json)['content'] as string;
    }
  }
  return out;
}

/** Loads and keeps each model's ModelText; `key` (the model's configuration object) changes when it reloads. */
export class ModelTexts {
  private readonly cache = new WeakMap<object, Promise<ModelText>>();

  constructor(private readonly sharedDir: string | undefined) {}

  get(model: string, dir: string | undefined, key: object): Promise<ModelText> {
    let p = this.cache.get(key);
    if (p === undefined) {
      p = this.load(model, dir);
      this.cache.set(key, p);
      // A failed load is retried by the next request, not kept.
      p.catch(() => this.cache.delete(key));
    }
    return p;
  }

  private async find<T>(name: string, dir: string | undefined, read: (file: string) => Promise<T | undefined>) {
    for (const d of [dir, this.sharedDir]) {
      if (d === undefined) continue;
      const file = path.join(d, name);
      const value = await read(file);
      if (value !== undefined) return { value, file: d === dir ? name : file };
    }
    return undefined;
  }

  private async load(model: string, dir: string | undefined): Promise<ModelText> {
    const tokenizerJson = await this.find('tokenizer.json', dir, readJson);
    const config = await this.find('tokenizer_config.json', dir, readJson);
    let tokenizer: Tokenizer | undefined;
    if (tokenizerJson !== undefined) {
      try {
        tokenizer = new Tokenizer(tokenizerJson.value, config?.value ?? {});
      } catch (err) {
        throw new OpenAiError(
          500,
          'server_error',
          `model '${model}': ${tokenizerJson.file} cannot be read as a tokenizer: ${(err as Error).message}`,
        );
      }
    }
    let template: { text: string; file: string } | undefined;
    const inConfig = chatTemplateOf(config?.value);
    if (inConfig !== undefined) template = { text: inConfig, file: config!.file };
    else {
      const jinja = await this.find('chat_template.jinja', dir, readText);
      if (jinja !== undefined) template = { text: jinja.value, file: jinja.file };
    }
    let parsed: ParsedTemplate | undefined;
    if (template !== undefined) {
      try {
        parsed = { ...template, parsed: new Template(template.text) };
      } catch (err) {
        // Kept for chat requests to report; completions and embeddings do not need the template.
        const message = (err as Error).message;
        const line = locateError(template.text, message);
        parsed = {
          ...template,
          parsed: invalidRequest(
            `model '${model}': the chat template (${template.file}` +
            `${line === undefined ? '' : `, line ${line}`}) cannot be parsed: ${message}`,
            'messages',
            'chat_template_error',
          ),
        };
      }
    }
    const maxFromConfig = config?.value['model_max_length'];
    const truncation = (tokenizerJson?.value['truncation'] as Json | null | undefined)?.['max_length'];
    const maxLength =
      typeof maxFromConfig === 'number' && maxFromConfig < 1e9
        ? maxFromConfig
        : typeof truncation === 'number'
          ? truncation
          : undefined;
    const fast = tokenizerJson === undefined ? undefined : FastWordPiece.from(tokenizerJson.value);
    return new ModelText(model, tokenizer, parsed, maxLength, specialTokensOf(config?.value), fast);
  }
}
