/**
 * `node dist/bench/python.js`: costs of the Python worker boundary.
 *
 * 1. Round trip through an identity model.py for a 2 KB and a 2 MB FP32
 *    tensor, next to an empty command (the framing floor: is_ready()).
 * 2. TorchScript (pytorch backend, worker process) against onnxruntime
 *    (in-process) on the same MLP 512→1024→1024→768 with the same weights,
 *    batch 1 and 32, checking that both give the same numbers.
 *
 * Environment: NEREID_PYTHON (interpreter with numpy and torch, default
 * /usr/bin/python3), BENCH_SECONDS (per point, default 2).
 */
import { execFileSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { create } from '@bufbuild/protobuf';
import type { BackendInstance, BackendRequest, ExecutionTimer, InstanceContext } from '../src/backends/backend.js';
import { createPythonBackend } from '../src/backends/python/index.js';
import { createPyTorchBackend } from '../src/backends/pytorch/index.js';
import { createOnnxRuntimeBackend } from '../src/backends/onnxruntime/index.js';
import { DataType, ModelConfigSchema, type ModelConfig } from '../src/gen/model_config_pb.js';
import { silentLogger } from '../src/logger.js';
import { buildMlp } from '../test/helpers/onnx-builder.js';
import type { Tensor } from '../src/tensor/tensor.js';

const PYTHON = process.env.NEREID_PYTHON ?? process.env.NEREID_TEST_PYTHON ?? '/usr/bin/python3';
const SECONDS = Number(process.env.BENCH_SECONDS ?? 2);
const HERE = dirname(fileURLToPath(import.meta.url));
const ROOT = join(HERE, '..', '..');

const timer: ExecutionTimer = { inputDone() {}, inferDone() {}, waited() {} };

function context(name: string, dir: string, config: ModelConfig): InstanceContext {
  return {
    modelName: name,
    version: 1,
    modelDir: dir,
    versionDir: dir,
    config,
    backendConfig: { 'python-executable': PYTHON },
    logger: silentLogger,
    server: { infer: () => Promise.reject(new Error('no server')) },
    instanceName: `${name}_0`,
    kind: 'CPU',
    deviceId: 0,
  };
}

function req(inputs: Tensor[], batchSize: number, outputs: string[]): BackendRequest {
  return { id: '', inputs, requestedOutputs: outputs, parameters: {}, batchSize, correlationId: 0n, flags: 0 };
}

function f32(name: string, shape: number[], n: number, seed = 1): Tensor {
  const a = new Float32Array(n);
  for (let i = 0; i < n; i++) a[i] = Math.sin(i * 0.37 + seed);
  return { name, datatype: 'FP32', shape, data: new Uint8Array(a.buffer) };
}

interface Stats {
  count: number;
  meanUs: number;
  p50Us: number;
  p99Us: number;
}

/** Runs fn back to back for `seconds` after a short warm-up. */
async function timeIt(fn: () => Promise<unknown>, seconds: number): Promise<Stats> {
  for (let i = 0; i < 20; i++) await fn();
  const samples: number[] = [];
  const end = performance.now() + seconds * 1000;
  while (performance.now() < end) {
    const t = performance.now();
    await fn();
    samples.push((performance.now() - t) * 1000);
  }
  samples.sort((a, b) => a - b);
  const mean = samples.reduce((a, b) => a + b, 0) / samples.length;
  const pct = (p: number) => samples[Math.min(samples.length - 1, Math.floor(p * samples.length))]!;
  return { count: samples.length, meanUs: mean, p50Us: pct(0.5), p99Us: pct(0.99) };
}

function row(cells: string[], widths: number[]): string {
  return cells.map((c, i) => c.padStart(widths[i]!)).join('  ');
}

function table(title: string, header: string[], rows: string[][]): void {
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => r[i]!.length)));
  process.stdout.write(`\n${title}\n${row(header, widths)}\n${widths.map((w) => '-'.repeat(w)).join('  ')}\n`);
  for (const r of rows) process.stdout.write(`${row(r, widths)}\n`);
}

const fmt = (n: number, d = 0) => n.toLocaleString('en-US', { maximumFractionDigits: d, minimumFractionDigits: d });

async function roundTrip(): Promise<void> {
  const dir = join(ROOT, 'test', 'fixtures', 'python_models', 'identity');
  const config = create(ModelConfigSchema, {
    name: 'identity',
    backend: 'python',
    input: [{ name: 'INPUT0', dataType: DataType.TYPE_FP32, dims: [-1n] }],
    output: [{ name: 'OUTPUT0', dataType: DataType.TYPE_FP32, dims: [-1n] }],
  });
  const ctx = context('identity', dir, config);
  const model = await createPythonBackend().loadModel(ctx);
  const inst = await model.createInstance(ctx);
  const rows: string[][] = [];
  try {
    const floor = await timeIt(() => inst.isReady!(), SECONDS);
    rows.push(['empty command', '0', fmt(floor.meanUs, 1), fmt(floor.p50Us, 1), fmt(floor.p99Us, 1), '']);
    for (const [label, elements] of [
      ['2 KB', 512],
      ['2 MB', 512 * 1024],
    ] as const) {
      const t = f32('INPUT0', [elements], elements);
      const s = await timeIt(() => inst.execute([req([t], 1, ['OUTPUT0'])], timer), SECONDS);
      const gbps = ((2 * t.data.byteLength) / (s.meanUs * 1e-6)) / 1e9;
      rows.push([
        `identity ${label}`,
        String(t.data.byteLength),
        fmt(s.meanUs, 1),
        fmt(s.p50Us, 1),
        fmt(s.p99Us, 1),
        fmt(gbps, 2),
      ]);
    }
  } finally {
    await inst.close();
    await model.close();
  }
  table(
    'Python worker round trip (execute() through model.py, pipes)',
    ['case', 'bytes', 'mean µs', 'p50 µs', 'p99 µs', 'GB/s both ways'],
    rows,
  );
}

const TORCH_MLP = `
import sys, numpy as np, torch
out, layers = sys.argv[1], [int(v) for v in sys.argv[2].split(",")]
class MLP(torch.nn.Module):
    def __init__(self, ws, bs):
        super().__init__()
        self.ws = torch.nn.ParameterList([torch.nn.Parameter(w, requires_grad=False) for w in ws])
        self.bs = torch.nn.ParameterList([torch.nn.Parameter(b, requires_grad=False) for b in bs])
    def forward(self, x):
        n = len(self.ws)
        for i, (w, b) in enumerate(zip(self.ws, self.bs)):
            x = torch.matmul(x, w) + b
            if i < n - 1:
                x = torch.relu(x)
        return x
ws, bs = [], []
for k in range(len(layers) - 1):
    ws.append(torch.from_numpy(np.fromfile(f"{out}/w{k}.bin", dtype=np.float32).reshape(layers[k], layers[k + 1])))
    bs.append(torch.from_numpy(np.fromfile(f"{out}/b{k}.bin", dtype=np.float32)))
m = MLP(ws, bs).eval()
torch.jit.trace(m, torch.zeros(1, layers[0])).save(f"{out}/torch/model.pt")
`;

async function torchVsOrt(): Promise<void> {
  const layers = [512, 1024, 1024, 768];
  const dir = mkdtempSync(join(tmpdir(), 'nereid-bench-mlp-'));
  const rows: string[][] = [];
  const instances: BackendInstance[] = [];
  try {
    const mlp = buildMlp(layers, 42, { inputName: 'INPUT__0', outputName: 'OUTPUT__0' });
    mkdirSync(join(dir, 'onnx'));
    mkdirSync(join(dir, 'torch'));
    writeFileSync(join(dir, 'onnx', 'model.onnx'), mlp.builder.toBytes());
    mlp.weights.weights.forEach((w, k) => writeFileSync(join(dir, `w${k}.bin`), w));
    mlp.weights.biases.forEach((b, k) => writeFileSync(join(dir, `b${k}.bin`), b));
    execFileSync(PYTHON, ['-c', TORCH_MLP, dir, layers.join(',')], { stdio: 'inherit' });

    const io = (platform: string, backend: string) =>
      create(ModelConfigSchema, {
        name: 'mlp',
        platform,
        backend,
        maxBatchSize: 64,
        input: [{ name: 'INPUT__0', dataType: DataType.TYPE_FP32, dims: [512n] }],
        output: [{ name: 'OUTPUT__0', dataType: DataType.TYPE_FP32, dims: [768n] }],
      });
    const torchCtx = context('mlp_torch', join(dir, 'torch'), io('pytorch_libtorch', 'pytorch'));
    const ortCtx = context('mlp_onnx', join(dir, 'onnx'), io('onnxruntime_onnx', 'onnxruntime'));
    const torchModel = await createPyTorchBackend().loadModel(torchCtx);
    const torchInst = await torchModel.createInstance(torchCtx);
    instances.push(torchInst);
    const ortModel = await createOnnxRuntimeBackend().loadModel(ortCtx);
    const ortInst = await ortModel.createInstance(ortCtx);
    instances.push(ortInst);

    for (const batch of [1, 32]) {
      const x = f32('INPUT__0', [batch, 512], batch * 512, batch);
      const [a] = await torchInst.execute([req([x], batch, ['OUTPUT__0'])], timer);
      const [b] = await ortInst.execute([req([x], batch, ['OUTPUT__0'])], timer);
      const ta = a!.outputs![0]!;
      const tb = b!.outputs![0]!;
      const va = new Float32Array(new Uint8Array(ta.data).buffer);
      const vb = new Float32Array(new Uint8Array(tb.data).buffer);
      let maxDiff = 0;
      for (let i = 0; i < va.length; i++) maxDiff = Math.max(maxDiff, Math.abs(va[i]! - vb[i]!));
      const st = await timeIt(() => torchInst.execute([req([x], batch, ['OUTPUT__0'])], timer), SECONDS);
      const so = await timeIt(() => ortInst.execute([req([x], batch, ['OUTPUT__0'])], timer), SECONDS);
      const ipsT = (batch * 1e6) / st.meanUs;
      const ipsO = (batch * 1e6) / so.meanUs;
      rows.push([
        String(batch),
        fmt(ipsT),
        fmt(st.p50Us),
        fmt(ipsO),
        fmt(so.p50Us),
        fmt(ipsT / ipsO, 2),
        maxDiff.toExponential(1),
      ]);
    }
  } finally {
    for (const i of instances) await i.close();
    rmSync(dir, { recursive: true, force: true });
  }
  table(
    'MLP 512→1024→1024→768, same weights: TorchScript (worker process) vs onnxruntime (in-process)',
    ['batch', 'torch infer/s', 'torch p50 µs', 'ort infer/s', 'ort p50 µs', 'torch/ort', 'max |diff|'],
    rows,
  );
}

await roundTrip();
await torchVsOrt();
