/**
 * Which Python runs a model: `--backend-config=python,python-executable=...`
 * (default `python3`), or the environment named by the model's
 * EXECUTION_ENV_PATH parameter (a virtual environment or conda env folder,
 * or a conda-pack tarball that is unpacked once into a cache folder).
 */
import { execFileSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync, mkdirSync, readdirSync, renameSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { delimiter, dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { ModelConfig } from '../../gen/model_config_pb.js';

export const DEFAULT_PYTHON = 'python3';

/** Where to look when the configured interpreter (or python3 on PATH) lacks a module the model needs. */
export const FALLBACK_PYTHONS: readonly string[] = ['python3', '/usr/bin/python3', '/usr/local/bin/python3', 'python'];

/** The Python modules each kind of worker imports before anything else. */
export const REQUIRED_MODULES: Readonly<Record<'python' | 'torch', readonly string[]>> = {
  python: ['numpy'],
  torch: ['numpy', 'torch'],
};

const probeCache = new Map<string, string[] | 'missing'>();

/**
 * The modules of `modules` that `executable` cannot find ('missing' when it does not run at all). Cached per process.
 */
export function missingModules(
  executable: string,
  modules: readonly string[],
  env: NodeJS.ProcessEnv = process.env,
): string[] | 'missing' {
  const key = `${executable}\0${modules.join(',')}`;
  const cached = probeCache.get(key);
  if (cached !== undefined) return cached;
  let result: string[] | 'missing';
  try {
    // find_spec looks a module up without importing it (importing torch takes seconds).
    const out = execFileSync(
      executable,
      [
        '-c',
        'import importlib.util, sys\nprint(",".join(m for m in sys.argv[1:] if importlib.util.find_spec(m) is None))',
        ...modules,
      ],
      { encoding: 'utf8', env, stdio: ['ignore', 'pipe', 'ignore'], timeout: 30_000 },
    ).trim();
    result = out === '' ? [] : out.split(',');
  } catch {
    result = 'missing';
  }
  probeCache.set(key, result);
  return result;
}

/**
 * The first interpreter, from the configured one (or python3 on PATH) and then
 * the usual places, that has every module of `modules`. Throws naming each
 * interpreter tried and what it lacked.
 */
export function findInterpreter(
  configured: string | undefined,
  modules: readonly string[],
  env: NodeJS.ProcessEnv,
): string {
  const candidates = [...new Set([configured || DEFAULT_PYTHON, ...FALLBACK_PYTHONS])];
  const tried: string[] = [];
  for (const candidate of candidates) {
    const missing = missingModules(candidate, modules, env);
    if (missing !== 'missing' && missing.length === 0) return candidate;
    tried.push(
      missing === 'missing' ? `${candidate} (not found or does not run)` : `${candidate} (lacks ${missing.join(', ')})`,
    );
  }
  throw new Error(
    `no Python interpreter with ${modules.join(' and ')} was found; tried ${tried.join('; ')}. ` +
      `Install ${modules.join(' and ')} (Debian: ${modules.map((m) => `python3-${m}`).join(' ')}), ` +
      `or point --backend-config=python,python-executable=... at one that has them`,
  );
}
const MODEL_DIR_VAR = '$$TRITON_MODEL_DIRECTORY';

export interface Interpreter {
  readonly executable: string;
  readonly env: NodeJS.ProcessEnv;
  /** The environment folder when EXECUTION_ENV_PATH is set. */
  readonly envPath?: string;
}

let cachedStubDir: string | undefined;

/** The folder holding nereid_stub.py and triton_python_backend_utils.py (`python/` at the package root). */
export function stubDirectory(): string {
  if (cachedStubDir) return cachedStubDir;
  let dir = dirname(fileURLToPath(import.meta.url));
  for (;;) {
    const candidate = join(dir, 'python', 'nereid_stub.py');
    if (existsSync(candidate)) {
      cachedStubDir = join(dir, 'python');
      return cachedStubDir;
    }
    const parent = dirname(dir);
    if (parent === dir) throw new Error('cannot find python/nereid_stub.py above the backend module');
    dir = parent;
  }
}

export function stubScript(): string {
  return join(stubDirectory(), 'nereid_stub.py');
}

function parameter(config: ModelConfig, key: string): string | undefined {
  const v = config.parameters[key]?.stringValue;
  return v === undefined || v === '' ? undefined : v;
}

function isTarball(path: string): boolean {
  return /\.(tar\.gz|tgz|tar)$/.test(path);
}

/** Unpacks a conda-pack tarball once (keyed by path and mtime) and returns the folder. */
function unpackTarball(path: string): string {
  const st = statSync(path);
  const key = createHash('sha256').update(`${resolve(path)}:${st.mtimeMs}:${st.size}`).digest('hex').slice(0, 16);
  const target = join(tmpdir(), 'nereid-python-envs', key);
  if (existsSync(join(target, 'bin'))) return target;
  const staging = `${target}.${process.pid}.tmp`;
  rmSync(staging, { recursive: true, force: true });
  mkdirSync(staging, { recursive: true });
  execFileSync('tar', ['-xf', path, '-C', staging], { stdio: 'ignore' });
  if (existsSync(join(staging, 'bin', 'conda-unpack'))) {
    try {
      execFileSync(join(staging, 'bin', 'conda-unpack'), [], { stdio: 'ignore' });
    } catch {
      // conda-unpack only rewrites prefixes; an environment without it may still work
    }
  }
  try {
    renameSync(staging, target);
  } catch {
    rmSync(staging, { recursive: true, force: true }); // another process unpacked it first
  }
  return target;
}

/**
 * Resolves the interpreter for a model. Throws with a message naming the
 * parameter when EXECUTION_ENV_PATH points nowhere usable.
 */
export function resolveInterpreter(
  config: ModelConfig,
  modelDir: string,
  backendConfig: Readonly<Record<string, string>>,
  mode: 'python' | 'torch' = 'python',
): Interpreter {
  const baseEnv: NodeJS.ProcessEnv = {
    ...process.env,
    PYTHONUNBUFFERED: '1',
    PYTHONDONTWRITEBYTECODE: '1',
  };
  const rawEnvPath = parameter(config, 'EXECUTION_ENV_PATH');
  if (!rawEnvPath) {
    return {
      executable: findInterpreter(backendConfig['python-executable'], REQUIRED_MODULES[mode], baseEnv),
      env: baseEnv,
    };
  }
  const expanded = rawEnvPath.split(MODEL_DIR_VAR).join(modelDir);
  const envPathGiven = resolve(modelDir, expanded);
  if (!existsSync(envPathGiven)) {
    throw new Error(`EXECUTION_ENV_PATH '${expanded}' does not exist`);
  }
  const envPath = isTarball(envPathGiven) ? unpackTarball(envPathGiven) : envPathGiven;
  const bin = join(envPath, 'bin');
  const executable = ['python3', 'python'].map((n) => join(bin, n)).find((p) => existsSync(p));
  if (!executable) {
    const found = existsSync(bin) ? readdirSync(bin).slice(0, 10).join(', ') : 'no bin folder';
    throw new Error(`EXECUTION_ENV_PATH '${expanded}' has no bin/python3 (${found})`);
  }
  return {
    executable,
    envPath,
    env: {
      ...baseEnv,
      VIRTUAL_ENV: envPath,
      PATH: `${bin}${delimiter}${process.env.PATH ?? ''}`,
    },
  };
}
