/**
 * Errors from model code as one line that says what and where: the error's
 * name and message, and the first place in the model's own files that its
 * stack names ("at 1/model.mjs:12:5", relative to the model folder).
 */
import { spawnSync } from 'node:child_process';
import { readdirSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';

/** The first `<file>:<line>[:<col>]` under `modelDir` in `text`, relative to it. */
export function locationIn(text: string, modelDir: string): string | undefined {
  const dirUrl = pathToFileURL(modelDir + path.sep).href;
  for (const raw of text.split('\n')) {
    const line = raw.trim();
    let at = line.indexOf(dirUrl);
    let file: string | undefined;
    let rest: string;
    if (at >= 0) {
      const m = /^(file:\/\/\S+?):(\d+)(?::(\d+))?(?=\)|$|\s)/.exec(line.slice(at));
      if (!m) continue;
      try {
        file = fileURLToPath(m[1]!);
      } catch {
        continue;
      }
      rest = m[3] ? `${m[2]}:${m[3]}` : m[2]!;
    } else {
      at = line.indexOf(modelDir + path.sep);
      if (at < 0) continue;
      const m = /^(\S+?):(\d+)(?::(\d+))?(?=\)|$|\s)/.exec(line.slice(at));
      if (!m) continue;
      file = m[1]!;
      rest = m[3] ? `${m[2]}:${m[3]}` : m[2]!;
    }
    return `${path.relative(modelDir, file)}:${rest}`;
  }
  return undefined;
}

/** "TypeError: boom (at 1/model.mjs:3:9)". */
export function describeError(err: unknown, modelDir: string): string {
  if (!(err instanceof Error)) {
    if (err !== null && typeof err === 'object' && typeof (err as { message?: unknown }).message === 'string') {
      return (err as { message: string }).message;
    }
    return `a non-error value was thrown: ${String(err)}`;
  }
  const head = err.name && !err.message.startsWith(err.name) ? `${err.name}: ${err.message}` : err.message;
  const where = err.stack ? locationIn(err.stack, modelDir) : undefined;
  return where ? `${head} (at ${where})` : head;
}

/** Most files of the model folder checked for the syntax error of a failed import. */
const MAX_FILES_CHECKED = 50;

/** A syntax error's location as Node's syntax check prints it, or undefined when the file parses. */
function checkSyntax(file: string, modelDir: string): string | undefined {
  const r = spawnSync(process.execPath, ['--check', file], { encoding: 'utf8', timeout: 10_000 });
  if (r.status === 0 || typeof r.stderr !== 'string') return undefined;
  return locationIn(r.stderr, modelDir);
}

/** Script files under `dir` (not in node_modules), the model file's own folder first. */
function scriptFiles(dir: string, limit: number): string[] {
  const out: string[] = [];
  const walk = (d: string): void => {
    let entries;
    try {
      entries = readdirSync(d, { withFileTypes: true });
    } catch {
      return;
    }
    for (const e of entries) {
      if (out.length >= limit) return;
      const p = path.join(d, e.name);
      if (e.isDirectory()) {
        if (e.name !== 'node_modules' && !e.name.startsWith('.')) walk(p);
      } else if (/\.(m|c)?js$/.test(e.name)) out.push(p);
    }
  };
  walk(dir);
  return out;
}

/**
 * Node does not put the location of a syntax error in an ES module into the
 * error it throws from import() (nor the file, when it is a module the model
 * imports); its syntax check prints both. Runs only after an import failed:
 * the model file first, then the other script files of the model folder.
 * Returns "1/model.mjs:5" or undefined.
 */
export function syntaxErrorLocation(file: string, modelDir: string): string | undefined {
  const own = checkSyntax(file, modelDir);
  if (own) return own;
  const others = [...scriptFiles(path.dirname(file), MAX_FILES_CHECKED), ...scriptFiles(modelDir, MAX_FILES_CHECKED)];
  const seen = new Set([file]);
  for (const f of others) {
    if (seen.has(f)) continue;
    seen.add(f);
    if (seen.size > MAX_FILES_CHECKED) break;
    const where = checkSyntax(f, modelDir);
    if (where) return where;
  }
  return undefined;
}

/** Why a model file could not be imported: the module error and where it is. */
export function describeImportError(err: unknown, file: string, modelDir: string): string {
  let text = describeError(err, modelDir);
  if (err instanceof SyntaxError && !text.includes(' (at ')) {
    const where = syntaxErrorLocation(file, modelDir);
    if (where) text += ` (at ${where})`;
  }
  return `cannot import ${path.relative(modelDir, file)}: ${text}`;
}
