/**
 * Embeddings items made on the session thread (BackendRequest.embeddingText, tensor/embedding-text.ts): an identity
 * model whose output is its FP32 input, [batch, seq, dim] or [batch, dim], so the model's raw output is known here.
 * Each request's text must be, to the byte, the items of a reference computed in the test from that output: the
 * mean of each row's first tokens (summed in order, as doubles), rounded to float32, L2-normalised when asked.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { create } from '@bufbuild/protobuf';
import { DataType, ModelParameterSchema } from '../../../src/gen/model_config_pb.js';
import { createOnnxRuntimeBackend } from '../../../src/backends/onnxruntime/index.js';
import type { BackendInstance, BackendRequest, BackendResponse } from '../../../src/backends/backend.js';
import type { EmbeddingTextHint } from '../../../src/tensor/embedding-text.js';
import { makeTensor, type Tensor } from '../../../src/tensor/tensor.js';
import { buildIdentityModel, seededRandom } from '../../helpers/onnx-builder.js';
import { RecordingTimer, config, instanceContext, modelContext, request, suiteModels, writeModel } from './fixtures.js';

const backend = createOnnxRuntimeBackend();
const suite = suiteModels();
const DIM = 6;

/** An identity model of FP32 `shape` (its first dim the batch), on the session thread or (inline 'on') the loop. */
async function identity(name: string, shape: (string | number)[], inline: 'on' | 'off'): Promise<BackendInstance> {
  const modelDir = await writeModel(suite.dir, name, buildIdentityModel([{ name: 'IN', datatype: 'FP32', shape }]));
  const dims = shape.slice(1).map((d) => BigInt(typeof d === 'number' ? d : -1));
  const cfg = config({
    name,
    maxBatchSize: 16,
    input: [{ name: 'IN', dataType: DataType.TYPE_FP32, dims }],
    output: [{ name: 'OUTPUT0', dataType: DataType.TYPE_FP32, dims }],
  });
  cfg.parameters['inline_execution'] = create(ModelParameterSchema, { stringValue: inline });
  const ctx = modelContext(modelDir, cfg);
  const model = await backend.loadModel(ctx);
  const instance = await model.createInstance(instanceContext(ctx));
  suite.keep(model, instance);
  return instance;
}

/** Embedding-range values, with a few that are exactly 0 or tiny (subnormal sums) to exercise the writer. */
function values(n: number, seed: number): Float32Array {
  const random = seededRandom(seed);
  return Float32Array.from({ length: n }, (_, i) => (i % 17 === 5 ? 0 : i % 29 === 3 ? 1e-40 : random() * 2 - 1));
}

/** The vectors the items must hold, computed here from the raw output: rows of `perRow` values. */
function reference(out: Float32Array, rows: number, perRow: number, hint: EmbeddingTextHint): Float32Array[] {
  const dim = hint.lengths === undefined ? perRow : DIM;
  return Array.from({ length: rows }, (_, r) => {
    const v = new Float32Array(dim);
    for (let d = 0; d < dim; d++) {
      if (hint.lengths === undefined) v[d] = out[r * perRow + d]!;
      else {
        const n = hint.lengths[r]!;
        let sum = 0;
        for (let s = 0; s < n; s++) sum += out[r * perRow + s * DIM + d]!;
        v[d] = n > 0 ? sum / n : 0;
      }
    }
    if (hint.normalize) {
      let squares = 0;
      for (const x of v) squares += x * x;
      const norm = Math.sqrt(squares);
      if (norm > 0) for (let d = 0; d < dim; d++) v[d] = v[d]! / norm;
    }
    return v;
  });
}

/** Checks `text` holds exactly `vectors` from answer index `first` on, as floats or base64. */
function assertItems(text: string, vectors: Float32Array[], first: number, base64: boolean): void {
  const items = JSON.parse(`[${first === 0 ? '' : '{}'}${text}]`).slice(first === 0 ? 0 : 1) as {
    object: string;
    index: number;
    embedding: number[] | string;
  }[];
  assert.equal(items.length, vectors.length);
  items.forEach((item, r) => {
    assert.equal(item.object, 'embedding');
    assert.equal(item.index, first + r);
    const want = vectors[r]!;
    if (base64) {
      assert.equal(item.embedding, Buffer.from(want.buffer, want.byteOffset, want.byteLength).toString('base64'));
    } else {
      // Every value, read back as float32, is the very same float32 (bit for bit).
      const got = new Float32Array(item.embedding as number[]);
      assert.deepEqual(new Uint32Array(got.buffer), new Uint32Array(want.buffer), `row ${r}`);
    }
  });
}

function embeddingRequest(id: string, data: Float32Array, shape: number[], hint: EmbeddingTextHint | undefined) {
  const input = makeTensor('IN', 'FP32', shape, new Uint8Array(data.buffer));
  const r: BackendRequest = request(id, [input], ['OUTPUT0'], shape[0]);
  return hint === undefined ? r : { ...r, embeddingText: hint };
}

function ok(r: BackendResponse | undefined): Tensor {
  assert.ok(r, 'missing response');
  if (r.error) assert.fail(`unexpected error response: ${r.error.message}`);
  return r.outputs![0]!;
}

test('a batch of requests gets, from the session thread, each its own items of the pooled output', async () => {
  const inst = await identity('pooled_thread', ['batch', 'seq', DIM], 'off');
  const seq = 5;
  const batches = [
    { rows: 3, lengths: [5, 1, 3], normalize: true, base64: false, firstIndex: 0 },
    { rows: 2, lengths: [2, 4], normalize: true, base64: true, firstIndex: 16 },
    { rows: 1, lengths: [5], normalize: false, base64: false, firstIndex: 7 },
  ];
  const inputs = batches.map((b, k) => values(b.rows * seq * DIM, 11 + k));
  const hints = batches.map((b) => ({ output: 'OUTPUT0', ...b }));
  const requests = [
    ...hints.map((h, k) => embeddingRequest(`r${k}`, inputs[k]!, [h.rows, seq, DIM], h)),
    // A request of the same batch without the hint gets no text.
    embeddingRequest('plain', values(seq * DIM, 99), [1, seq, DIM], undefined),
  ];
  const responses = await inst.execute(requests, new RecordingTimer());
  hints.forEach((h, k) => {
    const out = ok(responses[k]);
    assert.ok(out.embeddingText !== undefined, `request ${k} has its items from the thread`);
    assert.equal(out.jsonData, undefined);
    // The raw output is still there: it is the input (an identity model).
    assert.deepEqual(new Float32Array(out.data.slice().buffer), inputs[k]);
    assertItems(out.embeddingText, reference(inputs[k]!, h.rows, seq * DIM, h), h.firstIndex, h.base64);
  });
  assert.equal(ok(responses[3]).embeddingText, undefined);
});

test('a [batch, dim] output is taken row by row, unpooled', async () => {
  const inst = await identity('vectors_thread', ['batch', DIM], 'off');
  const hint = { output: 'OUTPUT0', lengths: undefined, normalize: true, base64: false, firstIndex: 2 };
  const data = values(4 * DIM, 5);
  const [r] = await inst.execute([embeddingRequest('v', data, [4, DIM], hint)], new RecordingTimer());
  const out = ok(r);
  assert.ok(out.embeddingText !== undefined);
  assertItems(out.embeddingText, reference(data, 4, DIM, hint), 2, false);
});

test('a value JSON cannot hold leaves the items to the caller, who reports it', async () => {
  const inst = await identity('nan_thread', ['batch', 'seq', DIM], 'off');
  const data = values(2 * 3 * DIM, 3);
  data[DIM + 2] = Number.NaN;
  const hint = { output: 'OUTPUT0', lengths: [3, 3], normalize: true, base64: false, firstIndex: 0 };
  const [r] = await inst.execute([embeddingRequest('nan', data, [2, 3, DIM], hint)], new RecordingTimer());
  assert.equal(ok(r).embeddingText, undefined);
});

test('runs made on the event loop carry no items: the caller makes them', async () => {
  const inst = await identity('pooled_inline', ['batch', 'seq', DIM], 'on');
  const hint = { output: 'OUTPUT0', lengths: [2], normalize: true, base64: false, firstIndex: 0 };
  const [r] = await inst.execute([embeddingRequest('i', values(2 * DIM, 1), [1, 2, DIM], hint)], new RecordingTimer());
  assert.equal(ok(r).embeddingText, undefined);
});
