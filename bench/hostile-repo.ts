/** A throwaway repository with one add/sub model for the hostile-input benchmark. */
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';

export class TempRepositoryForBench {
  readonly dir = mkdtempSync(path.join(tmpdir(), 'nereid-hostile-'));

  model(name: string, onnx: Uint8Array): void {
    mkdirSync(path.join(this.dir, name, '1'), { recursive: true });
    writeFileSync(path.join(this.dir, name, '1', 'model.onnx'), onnx);
    writeFileSync(
      path.join(this.dir, name, 'config.pbtxt'),
      `name: "${name}"
platform: "onnxruntime_onnx"
max_batch_size: 8
input [ { name: "INPUT0" data_type: TYPE_INT32 dims: [ 16 ] }, { name: "INPUT1" data_type: TYPE_INT32 dims: [ 16 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_INT32 dims: [ 16 ] }, { name: "OUTPUT1" data_type: TYPE_INT32 dims: [ 16 ]
  } ]
instance_group [ { kind: KIND_CPU count: 1 } ]
`,
    );
  }

  cleanup(): void {
    rmSync(this.dir, { recursive: true, force: true });
  }
}
