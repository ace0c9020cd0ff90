/**
 * Backend registry: the `backend:` name in config.pbtxt -> a loader. Adding a
 * backend is one folder under backends/ and one line here. Loaders are lazy
 * so that a backend's native or external dependencies are only touched when
 * a model uses it.
 */
import type { Backend } from './backend.js';

type BackendLoader = () => Promise<Backend>;

const loaders: Record<string, BackendLoader> = {
  onnxruntime: async () => (await import('./onnxruntime/index.js')).createOnnxRuntimeBackend(),
  python: async () => (await import('./python/index.js')).createPythonBackend(),
  pytorch: async () => (await import('./pytorch/index.js')).createPyTorchBackend(),
  javascript: async () => (await import('./javascript/index.js')).createJavaScriptBackend(),
};

const cache = new Map<string, Promise<Backend>>();

export function knownBackends(): string[] {
  return Object.keys(loaders);
}

/** The backend for a name, or undefined when Nereid has no such backend. */
export function getBackend(name: string): Promise<Backend> | undefined {
  const loader = loaders[name];
  if (!loader) return undefined;
  let p = cache.get(name);
  if (!p) {
    p = loader();
    cache.set(name, p);
  }
  return p;
}
