/**
 * The pytorch backend (platform pytorch_libtorch): a TorchScript model.pt run
 * by torch in a supervised worker process, one per instance. The requests of
 * a batch are joined along the first dimension here (one copy per input),
 * run as one forward() call, and the outputs are sliced back per request as
 * views.
 */
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import type {
  Backend,
  BackendInstance,
  BackendModel,
  BackendRequest,
  BackendResponse,
  ExecutionTimer,
  InstanceContext,
  ModelContext,
} from '../backend.js';
import type { ModelConfig } from '../../gen/model_config_pb.js';
import { Errors } from '../../errors.js';
import { shapeToString } from '../../tensor/datatype.js';
import type { Tensor } from '../../tensor/tensor.js';
import type { WireTensor } from '../python/frame.js';
import type { StubSupervisor } from '../python/supervisor.js';
import { decodeWireTensor } from '../python/wire.js';
import { FINALIZE_GRACE_MS, ProcessModel, checkInterpreter, executeOnWorker } from '../python/worker.js';

export const DEFAULT_MODEL_FILENAME = 'model.pt';

/** One batched input: its name, and the per-request tensors joined. */
function joinInputs(
  model: string,
  requests: readonly BackendRequest[],
): { metas: WireTensor[]; buffers: Uint8Array[] } {
  const first = requests[0]!;
  const metas: WireTensor[] = [];
  const buffers: Uint8Array[] = [];
  for (let k = 0; k < first.inputs.length; k++) {
    const t0 = first.inputs[k]!;
    if (t0.datatype === 'BYTES') {
      throw Errors.unsupported(`model '${model}': BYTES input '${t0.name}' is not supported by the pytorch backend`);
    }
    if (requests.length === 1) {
      metas.push({ n: t0.name, d: t0.datatype, s: t0.shape as number[], b: buffers.length });
      buffers.push(t0.data);
      continue;
    }
    const parts = new Array<Uint8Array>(requests.length);
    let rows = 0;
    let total = 0;
    const inner = t0.shape.slice(1);
    for (let r = 0; r < requests.length; r++) {
      const t = requests[r]!.inputs.find((x) => x.name === t0.name);
      if (!t) throw Errors.invalidRequest(`model '${model}': a batched request lacks input '${t0.name}'`);
      const tail = t.shape.slice(1);
      if (tail.length !== inner.length || tail.some((d, i) => d !== inner[i])) {
        throw Errors.invalidRequest(
          `model '${model}': input '${t0.name}' shapes ${shapeToString(t0.shape)} ` +
          `and ${shapeToString(t.shape)} cannot be batched together`,
        );
      }
      rows += t.shape[0] ?? 1;
      total += t.data.byteLength;
      parts[r] = t.data;
    }
    metas.push({ n: t0.name, d: t0.datatype, s: [rows, ...inner], b: buffers.length });
    buffers.push(Buffer.concat(parts, total));
  }
  return { metas, buffers };
}

export class PyTorchInstance implements BackendInstance {
  private readonly configOutputs: string[];
  /** Config outputs, then the implicit-state outputs of a sequence model. */
  private readonly knownOutputs: string[];
  private readonly batching: boolean;

  constructor(
    private readonly ctx: InstanceContext,
    private readonly supervisor: StubSupervisor,
  ) {
    this.configOutputs = ctx.config.output.map((o) => o.name);
    const scheduling = ctx.config.schedulingChoice;
    this.knownOutputs =
      scheduling.case === 'sequenceBatching'
        ? [...this.configOutputs, ...scheduling.value.state.map((s) => s.outputName)]
        : this.configOutputs;
    this.batching = ctx.config.maxBatchSize > 0;
  }

  get restartCount(): number {
    return this.supervisor.restartCount;
  }

  get pid(): number | undefined {
    return this.supervisor.running?.pid;
  }

  async execute(requests: readonly BackendRequest[], timer: ExecutionTimer): Promise<BackendResponse[]> {
    if (requests.length === 0) return [];
    if (!this.batching && requests.length > 1) {
      // without a batch dimension every request is its own forward() call
      const out: BackendResponse[] = [];
      for (const r of requests) out.push(...(await this.run([r], timer)));
      return out;
    }
    return this.run(requests, timer);
  }

  private async run(requests: readonly BackendRequest[], timer: ExecutionTimer): Promise<BackendResponse[]> {
    const model = this.ctx.modelName;
    const { metas, buffers } = joinInputs(model, requests);
    const wanted = this.requestedUnion(requests);
    const reply = await executeOnWorker(
      this.supervisor,
      this.ctx,
      { t: 'execute', i: metas, o: wanted },
      buffers,
      timer,
      'outputs',
      'forward()',
    );
    const h = reply.header;
    const outputs = new Map<string, Tensor>();
    for (const m of h.o as WireTensor[]) outputs.set(m.n, decodeWireTensor(m, reply.buffers));
    if (requests.length === 1) {
      return [{ outputs: this.select(requests[0]!, outputs) }];
    }
    return this.split(requests, outputs);
  }

  private requestedUnion(requests: readonly BackendRequest[]): string[] {
    const names = new Set<string>();
    for (const r of requests) {
      if (r.requestedOutputs.length === 0) return this.configOutputs;
      for (const n of r.requestedOutputs) names.add(n);
    }
    return this.knownOutputs.filter((n) => names.has(n));
  }

  private select(req: BackendRequest, outputs: Map<string, Tensor>): Tensor[] {
    const names = req.requestedOutputs.length ? req.requestedOutputs : this.configOutputs;
    const out: Tensor[] = [];
    for (const n of names) {
      const t = outputs.get(n);
      if (t) out.push(t);
    }
    return out;
  }

  /** Slices each batched output back into per-request views. */
  private split(requests: readonly BackendRequest[], outputs: Map<string, Tensor>): BackendResponse[] {
    const model = this.ctx.modelName;
    let rows = 0;
    for (const r of requests) rows += r.batchSize;
    const perRequest: Tensor[][] = requests.map(() => []);
    for (const [name, t] of outputs) {
      if (t.shape[0] !== rows) {
        throw Errors.modelExecution(
          model,
          `output '${name}' has shape ${shapeToString(t.shape)}, ` +
          `whose first dimension should be the batch size ${rows}`,
        );
      }
      const rowBytes = rows === 0 ? 0 : t.data.byteLength / rows;
      const inner = t.shape.slice(1);
      let off = 0;
      for (let r = 0; r < requests.length; r++) {
        const b = requests[r]!.batchSize;
        const len = b * rowBytes;
        perRequest[r]!.push({
          name,
          datatype: t.datatype,
          shape: [b, ...inner],
          data: t.data.subarray(off, off + len),
        });
        off += len;
      }
    }
    return requests.map((req, r) => {
      const byName = new Map(perRequest[r]!.map((t) => [t.name, t]));
      return { outputs: this.select(req, byName) };
    });
  }

  close(): Promise<void> {
    return this.supervisor.close(FINALIZE_GRACE_MS);
  }
}

function modelFile(versionDir: string, config: ModelConfig): string {
  return join(versionDir, config.defaultModelFilename || DEFAULT_MODEL_FILENAME);
}

/** The TorchScript file loading needs; throws the load error when it cannot be used. */
function checkModelFile(ctx: ModelContext): string {
  if (ctx.config.platform === 'torch_aoti') {
    throw Errors.loadFailed(
      ctx.modelName,
      "platform 'torch_aoti' (model.pt2) is not supported; export TorchScript (model.pt)",
    );
  }
  const file = modelFile(ctx.versionDir, ctx.config);
  if (!existsSync(file)) {
    throw Errors.loadFailed(ctx.modelName, `model file '${file}' does not exist`);
  }
  return file;
}

export function createPyTorchBackend(): Backend {
  return {
    name: 'pytorch',
    async checkModel(ctx: ModelContext): Promise<void> {
      checkModelFile(ctx);
      checkInterpreter(ctx.modelName, ctx, 'torch');
    },
    async loadModel(ctx: ModelContext): Promise<BackendModel> {
      const file = checkModelFile(ctx);
      return new ProcessModel(
        ctx.modelName,
        'torch',
        file,
        (ictx, supervisor) => new PyTorchInstance(ictx, supervisor),
      );
    },
  };
}
