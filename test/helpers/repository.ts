/** Builds throwaway model repositories for tests, with real ONNX files. */
import { mkdtempSync, mkdirSync, writeFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { buildAddSubModel } from './onnx-builder.js';

export class TempRepository {
  readonly dir: string;
  constructor() {
    this.dir = mkdtempSync(path.join(tmpdir(), 'nereid-repo-'));
  }

  /** Writes `<model>/config.pbtxt` (when config is given). */
  config(model: string, text: string): this {
    mkdirSync(path.join(this.dir, model), { recursive: true });
    writeFileSync(path.join(this.dir, model, 'config.pbtxt'), text);
    return this;
  }

  file(model: string, relative: string, content: Uint8Array | string): this {
    const p = path.join(this.dir, model, relative);
    mkdirSync(path.dirname(p), { recursive: true });
    writeFileSync(p, content);
    return this;
  }

  /** An add/sub INT32[16] ONNX model (Triton's "simple") in each version folder. */
  addSub(model: string, versions: number[] = [1], config?: string): this {
    const bytes = buildAddSubModel('INT32', 16).toBytes();
    for (const v of versions) this.file(model, `${v}/model.onnx`, bytes);
    this.config(
      model,
      config ??
        `name: "${model}"
platform: "onnxruntime_onnx"
max_batch_size: 8
input [ { name: "INPUT0" data_type: TYPE_INT32 dims: [ 16 ] }, { name: "INPUT1" data_type: TYPE_INT32 dims: [ 16 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_INT32 dims: [ 16 ] }, { name: "OUTPUT1" data_type: TYPE_INT32 dims: [ 16 ]
  } ]
instance_group [ { kind: KIND_CPU count: 1 } ]
`,
    );
    return this;
  }

  remove(model: string): this {
    rmSync(path.join(this.dir, model), { recursive: true, force: true });
    return this;
  }

  cleanup(): void {
    rmSync(this.dir, { recursive: true, force: true });
  }
}

export function int32Tensor(name: string, values: number[], batch = 1) {
  const data = new Int32Array(values);
  return { name, datatype: 'INT32' as const, shape: [batch, values.length / batch], data: new Uint8Array(data.buffer) };
}
