/**
 * tiny_llm: a decoupled model with TensorRT-LLM's tensor contract
 * (text_input, stream, max_tokens, stop_words -> text_output) that stands in
 * for a language model. Its answer is the last user message of the chat
 * template (<|user|> ... <|end|>), or the whole prompt, repeated word by word:
 *
 *   stream true   one response per word (" word"), as a model streams tokens
 *   stream false  one response with the whole answer
 *
 * It stops after max_tokens words (16 when not given), before a word that is
 * one of stop_words, or when the client went away (request.isCancelled()).
 */
const decoder = new TextDecoder();

export default class TinyLlm {
  initialize(args) {
    this.intervalMs = Number(args.modelConfig.parameters?.token_interval_ms?.string_value ?? 0);
  }

  execute(requests) {
    for (const request of requests) void this.generate(request);
  }

  async generate(request) {
    const sender = request.responseSender;
    try {
      const input = (name) => request.inputs.find((t) => t.name === name);
      const prompt = decoder.decode(input('text_input').data[0]);
      const stream = input('stream')?.data[0] === 1;
      const maxTokens = input('max_tokens')?.data[0] ?? 16;
      const stopWords = new Set((input('stop_words')?.data ?? []).map((b) => decoder.decode(b)));
      const words = answerOf(prompt);
      let text = '';
      for (let i = 0; i < words.length && i < maxTokens; i++) {
        if (stopWords.has(words[i])) break;
        if (request.isCancelled()) return sender.send(undefined, { final: true });
        if (this.intervalMs > 0) await new Promise((resolve) => setTimeout(resolve, this.intervalMs));
        const token = i === 0 ? words[i] : ` ${words[i]}`;
        if (stream) sender.send({ outputs: [{ name: 'text_output', shape: [1], data: [token] }] });
        else text += token;
      }
      if (!stream) sender.send({ outputs: [{ name: 'text_output', shape: [1], data: [text] }] });
      sender.send(undefined, { final: true });
    } catch (err) {
      sender.send({ error: String(err?.message ?? err) }, { final: true });
    }
  }
}

/** The words of the last user turn of the chat template, or of the whole prompt. */
function answerOf(prompt) {
  const start = prompt.lastIndexOf('<|user|>');
  let text = prompt;
  if (start >= 0) {
    const end = prompt.indexOf('<|end|>', start);
    text = prompt.slice(start + '<|user|>'.length, end < 0 ? undefined : end);
  }
  return text.split(/\s+/).filter((w) => w !== '');
}
