/**
 * A real server (the `nereid serve` start-up, in process) with the OpenAI examples and test models, and clients for it.
 */
import { cpSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import OpenAI from 'openai';
import type { RunningServer } from '../../../src/cli/serve.js';
import { PYTHON, repoRoot } from '../../backends/python/helpers.js';
import { serveInProcess } from '../../helpers/in-process-server.js';
import { TempRepository } from '../../helpers/repository.js';

export const EXAMPLES = path.join(repoRoot(), 'examples', 'model_repository');
const FIXTURES = path.join(repoRoot(), 'test', 'fixtures', 'openai_models');

export interface OpenAiServerOptions {
  /** Test models from test/fixtures/openai_models to add (their `MARKER` becomes a file path). */
  readonly fixtures?: readonly string[];
  readonly args?: readonly string[];
  /** Adds more models to the repository before the start. */
  readonly prepare?: (repo: TempRepository) => void;
}

export class OpenAiServer {
  readonly repo = new TempRepository();
  readonly markers = mkdtempSync(path.join(tmpdir(), 'nereid-openai-markers-'));
  running!: RunningServer;

  static async start(options: OpenAiServerOptions = {}): Promise<OpenAiServer> {
    const s = new OpenAiServer();
    for (const m of ['text_embedder', 'tiny_llm'])
      cpSync(path.join(EXAMPLES, m), path.join(s.repo.dir, m), { recursive: true });
    for (const m of options.fixtures ?? []) {
      cpSync(path.join(FIXTURES, m), path.join(s.repo.dir, m), { recursive: true });
      const config = readFileSync(path.join(FIXTURES, m, 'config.pbtxt'), 'utf8').replace('MARKER', s.marker(m));
      s.repo.config(m, config);
    }
    options.prepare?.(s.repo);
    s.running = await serveInProcess(s.repo.dir, [
      `--backend-config=python,python-executable=${PYTHON}`,
      ...(options.args ?? []),
    ]);
    return s;
  }

  /** The file a fixture model writes when its request was cancelled. */
  marker(model: string): string {
    return path.join(this.markers, `${model}.cancelled`);
  }

  get httpPort(): number {
    return this.running.ports.http!;
  }

  client(options: { port?: number; headers?: Record<string, string> } = {}): OpenAI {
    return new OpenAI({
      baseURL: `http://127.0.0.1:${options.port ?? this.httpPort}/v1`,
      apiKey: 'not-checked',
      maxRetries: 0,
      defaultHeaders: options.headers,
    });
  }

  async stop(): Promise<void> {
    await this.running?.shutdown();
    this.repo.cleanup();
    rmSync(this.markers, { recursive: true, force: true });
  }
}

/** POSTs a JSON (or raw) body and returns status, headers and the parsed body. */
export async function post(port: number, pathName: string, body: unknown, headers: Record<string, string> = {}) {
  const res = await fetch(`http://127.0.0.1:${port}${pathName}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...headers },
    body: typeof body === 'string' ? body : JSON.stringify(body),
  });
  const text = await res.text();
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch {
    json = undefined;
  }
  // eslint-disable-next-line @typescript-eslint/no-explicit-any -- tests walk the answer's JSON freely
  return { status: res.status, headers: res.headers, text, json: json as Record<string, any> };
}
