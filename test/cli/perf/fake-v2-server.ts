/**
 * A small node:http server speaking enough of the KServe v2 / Triton HTTP
 * protocol for the load tool: server metadata, model metadata and config,
 * statistics, and infer (binary and JSON tensors). Each successful infer adds
 * fixed durations to the statistics so server-side numbers are predictable.
 */
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';

export interface FakeTensor {
  name: string;
  datatype: string;
  /** Without the batch dim. */
  dims: number[];
}

export interface FakeModel {
  name: string;
  maxBatchSize: number;
  inputs: FakeTensor[];
  outputs: FakeTensor[];
  /** Extra config fields (dynamic_batching, response_cache, ...). */
  config?: Record<string, unknown>;
  /** Ensemble: models whose statistics move along with this one's. */
  composing?: string[];
}

export interface FakeServerOptions {
  models: FakeModel[];
  extensions?: string[];
  /** After this many successful infers, every infer fails with HTTP 500. */
  failAfter?: number;
  /** Infer responses are sent this many ms late. */
  delayMs?: number;
  /** With delayMs: handle one infer at a time, so latency grows with concurrency. */
  serial?: boolean;
  /** Fail (HTTP 500) any infer that arrives while another is in progress. */
  failWhenConcurrent?: boolean;
  /** Never answer infer requests. */
  hang?: boolean;
  /** Per-request durations (ns) added to the statistics. */
  durations?: { queue: number; computeInput: number; computeInfer: number; computeOutput: number; overhead: number };
}

interface Counters {
  inference: number;
  execution: number;
  success: number;
  successNs: number;
  queueNs: number;
  inNs: number;
  inferNs: number;
  outNs: number;
}

export interface InferRecord {
  model: string;
  header: Record<string, unknown>;
  binaryLength: number;
  headerLengthHeader: string | undefined;
}

export class FakeV2Server {
  readonly server: Server;
  readonly infers: InferRecord[] = [];
  private readonly counters = new Map<string, Counters>();
  private queue: Promise<void> = Promise.resolve();
  private inFlight = 0;
  port = 0;

  constructor(private readonly opts: FakeServerOptions) {
    for (const m of opts.models) {
      this.counters.set(m.name, {
        inference: 0,
        execution: 0,
        success: 0,
        successNs: 0,
        queueNs: 0,
        inNs: 0,
        inferNs: 0,
        outNs: 0,
      });
    }
    this.server = createServer((req, res) => {
      const chunks: Buffer[] = [];
      req.on('data', (c: Buffer) => chunks.push(c));
      req.on('end', () => this.handle(req, res, Buffer.concat(chunks)));
    });
  }

  async start(): Promise<number> {
    await new Promise<void>((resolve) => this.server.listen(0, '127.0.0.1', resolve));
    this.port = (this.server.address() as AddressInfo).port;
    return this.port;
  }

  async stop(): Promise<void> {
    this.server.closeAllConnections();
    await new Promise<void>((resolve) => this.server.close(() => resolve()));
  }

  get url(): string {
    return `127.0.0.1:${this.port}`;
  }

  private json(res: ServerResponse, status: number, body: unknown): void {
    const text = JSON.stringify(body);
    res.writeHead(status, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(text) });
    res.end(text);
  }

  private model(name: string): FakeModel | undefined {
    return this.opts.models.find((m) => m.name === name);
  }

  private handle(req: IncomingMessage, res: ServerResponse, body: Buffer): void {
    const url = req.url ?? '';
    if (req.method === 'GET' && url === '/v2') {
      return this.json(res, 200, {
        name: 'fake',
        version: '0.0.1',
        extensions: this.opts.extensions ?? ['binary_tensor_data', 'statistics', 'model_configuration'],
      });
    }
    if (req.method === 'GET' && url === '/metrics') {
      const text = [
        '# HELP nv_gpu_utilization GPU utilization rate [0.0 - 1.0)',
        '# TYPE nv_gpu_utilization gauge',
        'nv_gpu_utilization{gpu_uuid="GPU-fake"} 0.5',
        'nv_gpu_power_usage{gpu_uuid="GPU-fake"} 120.5',
        'nv_gpu_memory_used_bytes{gpu_uuid="GPU-fake"} 1000',
        'nv_gpu_memory_total_bytes{gpu_uuid="GPU-fake"} 8000',
        'nv_inference_count{model="simple",version="1"} 3',
        '',
      ].join('\n');
      res.writeHead(200, { 'content-type': 'text/plain; version=0.0.4' });
      res.end(text);
      return;
    }
    if (req.method === 'GET' && url === '/v2/models/stats') {
      return this.json(res, 200, { model_stats: this.opts.models.map((m) => this.stats(m.name)) });
    }
    const m = /^\/v2\/models\/([^/]+)(?:\/versions\/(\d+))?(\/config|\/stats|\/infer)?$/.exec(url);
    if (!m) return this.json(res, 404, { error: 'Not Found' });
    const name = decodeURIComponent(m[1]!);
    const model = this.model(name);
    if (!model) {
      if (m[3] === '/stats') return this.json(res, 400, { error: `requested model '${name}' is not available` });
      return this.json(res, 404, { error: `Request for unknown model: '${name}' is not found` });
    }
    const dims = (t: FakeTensor) => (model.maxBatchSize > 0 ? [-1, ...t.dims] : t.dims);
    if (req.method === 'GET' && !m[3]) {
      return this.json(res, 200, {
        name,
        versions: ['1'],
        platform: 'fake',
        inputs: model.inputs.map((t) => ({ name: t.name, datatype: t.datatype, shape: dims(t) })),
        outputs: model.outputs.map((t) => ({ name: t.name, datatype: t.datatype, shape: dims(t) })),
      });
    }
    if (req.method === 'GET' && m[3] === '/config') {
      return this.json(res, 200, {
        name,
        platform: '',
        backend: 'fake',
        max_batch_size: model.maxBatchSize,
        input: model.inputs.map((t) => ({ name: t.name, data_type: `TYPE_${t.datatype}`, dims: t.dims })),
        output: model.outputs.map((t) => ({ name: t.name, data_type: `TYPE_${t.datatype}`, dims: t.dims })),
        ...(model.config ?? {}),
      });
    }
    if (req.method === 'GET' && m[3] === '/stats') {
      return this.json(res, 200, { model_stats: [this.stats(name)] });
    }
    if (req.method === 'POST' && m[3] === '/infer') {
      if (this.opts.hang) return;
      if (this.opts.failWhenConcurrent && this.inFlight > 0) {
        return this.json(res, 500, { error: `model '${model.name}' failed: injected failure` });
      }
      this.inFlight++;
      res.on('finish', () => this.inFlight--);
      if (this.opts.delayMs) {
        const delay = this.opts.delayMs;
        const run = () =>
          new Promise<void>((resolve) =>
            setTimeout(() => {
              this.infer(req, res, model, body);
              resolve();
            }, delay),
          );
        if (this.opts.serial) this.queue = this.queue.then(run);
        else void run();
        return;
      }
      return this.infer(req, res, model, body);
    }
    return this.json(res, 405, { error: 'Method Not Allowed' });
  }

  private stats(name: string): Record<string, unknown> {
    const c = this.counters.get(name)!;
    const d = (count: number, ns: number) => ({ count, ns });
    return {
      name,
      version: '1',
      last_inference: 0,
      inference_count: c.inference,
      execution_count: c.execution,
      inference_stats: {
        success: d(c.success, c.successNs),
        fail: d(0, 0),
        queue: d(c.success, c.queueNs),
        compute_input: d(c.success, c.inNs),
        compute_infer: d(c.success, c.inferNs),
        compute_output: d(c.success, c.outNs),
        cache_hit: d(0, 0),
        cache_miss: d(0, 0),
      },
      response_stats: {},
      batch_stats: [],
      memory_usage: [],
    };
  }

  private infer(req: IncomingMessage, res: ServerResponse, model: FakeModel, body: Buffer): void {
    const hdr = req.headers['inference-header-content-length'];
    const headerLength = typeof hdr === 'string' ? Number(hdr) : body.length;
    let header: Record<string, unknown>;
    try {
      header = JSON.parse(body.subarray(0, headerLength).toString('utf8')) as Record<string, unknown>;
    } catch {
      return this.json(res, 400, { error: 'failed to parse the request JSON buffer' });
    }
    this.infers.push({
      model: model.name,
      header,
      binaryLength: body.length - headerLength,
      headerLengthHeader: hdr as string | undefined,
    });
    const c = this.counters.get(model.name)!;
    if (this.opts.failAfter !== undefined && c.success >= this.opts.failAfter) {
      return this.json(res, 500, { error: `model '${model.name}' failed: injected failure` });
    }
    const inputs = (header['inputs'] as Array<{ shape: number[] }>) ?? [];
    const batch = model.maxBatchSize > 0 ? (inputs[0]?.shape[0] ?? 1) : 1;
    const dur = this.opts.durations ?? {
      queue: 1000,
      computeInput: 2000,
      computeInfer: 30000,
      computeOutput: 3000,
      overhead: 4000,
    };
    c.inference += batch;
    c.execution += 1;
    c.success += 1;
    c.queueNs += dur.queue;
    c.inNs += dur.computeInput;
    c.inferNs += dur.computeInfer;
    c.outNs += dur.computeOutput;
    c.successNs += dur.queue + dur.computeInput + dur.computeInfer + dur.computeOutput + dur.overhead;
    for (const name of model.composing ?? []) {
      const cc = this.counters.get(name)!;
      cc.inference += batch;
      cc.execution += 1;
      cc.success += 1;
      cc.queueNs += dur.queue;
      cc.inNs += dur.computeInput;
      cc.inferNs += dur.computeInfer;
      cc.outNs += dur.computeOutput;
      cc.successNs += dur.queue + dur.computeInput + dur.computeInfer + dur.computeOutput;
    }
    // Reply with one binary output of 4 zero bytes per element (enough for the client, which does not decode).
    const out = model.outputs[0];
    const n = out ? out.dims.reduce((a, b) => a * b, 1) * batch : 0;
    const bin = Buffer.alloc(n * 4);
    const json = Buffer.from(
      JSON.stringify({
        model_name: model.name,
        model_version: '1',
        outputs: out
          ? [
              {
                name: out.name,
                datatype: out.datatype,
                shape: model.maxBatchSize > 0 ? [batch, ...out.dims] : out.dims,
                parameters: { binary_data_size: bin.length },
              },
            ]
          : [],
      }),
    );
    res.writeHead(200, {
      'content-type': 'application/octet-stream',
      'inference-header-content-length': json.length,
      'content-length': json.length + bin.length,
    });
    res.end(Buffer.concat([json, bin]));
  }
}

export const SIMPLE_MODEL: FakeModel = {
  name: 'simple',
  maxBatchSize: 8,
  inputs: [
    { name: 'INPUT0', datatype: 'INT32', dims: [16] },
    { name: 'INPUT1', datatype: 'INT32', dims: [16] },
  ],
  outputs: [
    { name: 'OUTPUT0', datatype: 'INT32', dims: [16] },
    { name: 'OUTPUT1', datatype: 'INT32', dims: [16] },
  ],
};

/** Collects what runPerf writes. */
export class Capture {
  text = '';
  readonly isTTY: boolean;
  constructor(isTTY = false) {
    this.isTTY = isTTY;
  }
  write(s: string): boolean {
    this.text += s;
    return true;
  }
}
