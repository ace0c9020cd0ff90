/**
 * The module map: which folder under src/ may import which. docs/architecture.md shows the same
 * table in words; imports.test.ts enforces it on the code and test/docs/architecture-map.test.ts
 * checks that the two agree.
 */

/** Shared by everything: generated protobuf code, the errors module, the logger. */
export const SHARED = new Set(['gen', 'errors.ts', 'logger.ts']);

export const ALLOWED: Record<string, readonly string[]> = {
  tensor: [],
  /** The protobuf wire primitives of the hand-written message readers, shared by the gRPC frontend and the client. */
  protowire: [],
  config: ['tensor'],
  repository: ['config'],
  onnx: ['tensor'],
  /** The leaf everyone shares: the public request/response types, Cancellation, the statistics recorder. */
  types: ['tensor'],
  backends: ['tensor', 'config', 'onnx', 'types'],
  scheduler: ['tensor', 'config', 'types', 'backends'],
  cache: ['tensor', 'config', 'types', 'backends', 'scheduler'],
  core: ['tensor', 'config', 'repository', 'onnx', 'types', 'backends', 'scheduler', 'cache'],
  /** Scoped API keys (--auth-keys): the keys file, scopes, the check the frontends make, the file watcher. */
  auth: [],
  /** Request tracing: settings, sampler, the per-request trace, trace files and OpenTelemetry export. */
  trace: ['tensor', 'types'],
  metrics: ['core', 'types', 'auth'],
  frontends: ['core', 'tensor', 'types', 'auth', 'trace', 'protowire'],
  /**
   * The KServe v2 client (`nereid/client`): nothing of the server, only the pure tensor codecs, the protobuf
   * wire reader and config/json.ts (the ModelConfig JSON form); test/client/isolation.test.ts checks what it loads.
   */
  client: ['tensor', 'config', 'protowire'],
};

/** Within frontends/: which protocol folder may import which (files directly under frontends/ are shared). */
export const FRONTENDS: Record<string, readonly string[]> = {
  /** Both start their frontend threads (threads/) when told to run on more than one. */
  http: ['threads'],
  grpc: ['threads'],
  /** The main thread's side of the frontend threads: the pool, the bridge to the server, what they say. */
  threads: [],
  /** What runs on a frontend thread: the protocols' servers, their hot paths, forwarding the rest. */
  worker: ['http', 'grpc', 'threads'],
  /** The OpenAI frontend reads bodies and JSON with the HTTP frontend's readers. */
  openai: ['http'],
  /** The built-in dashboard: the HTTP frontend hands it /dashboard through an option, it imports no frontend. */
  dashboard: [],
};

/** Folders and files under src/ that may import everything: the command line and the public entry. */
export const UNCHECKED = new Set(['cli', 'index.ts']);
