/**
 * Worker-thread entry: holds one onnxruntime InferenceSession and runs it
 * for its instance. See worker-protocol.ts for why this is a thread.
 */
import { parentPort, workerData } from 'node:worker_threads';
import * as ort from 'onnxruntime-node';
import type { FromWorker, SessionWorkerInit, ToWorker, WireTensor } from './worker-protocol.js';

const port = parentPort!;
const init = workerData as SessionWorkerInit;

function post(msg: FromWorker, transfer?: ArrayBuffer[]): void {
  port.postMessage(msg, transfer);
}

function message(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}

async function main(): Promise<void> {
  let session: ort.InferenceSession;
  try {
    session = await ort.InferenceSession.create(init.modelPath, init.options);
  } catch (err) {
    // Stay alive until the instance has read this and terminates the thread:
    // a thread that exits right after posting may lose the message.
    port.on('message', () => port.close());
    post({ kind: 'init-error', message: message(err) });
    return;
  }
  port.on('message', (msg: ToWorker) => {
    if (msg.kind === 'close') {
      void session.release().finally(() => port.close());
      return;
    }
    void run(session, msg.id, msg.feeds, msg.fetches);
  });
  post({ kind: 'ready' });
}

async function run(session: ort.InferenceSession, id: number, feeds: readonly WireTensor[], fetches: readonly string[]): Promise<void> {
  try {
    const inputs: Record<string, ort.Tensor> = {};
    for (const f of feeds) {
      inputs[f.name] = new ort.Tensor(f.type, f.data as ort.Tensor.DataType, f.dims);
    }
    const results = await session.run(inputs, fetches as string[]);
    const outputs: WireTensor[] = [];
    const transfer: ArrayBuffer[] = [];
    for (const name of fetches) {
      const t = results[name] as ort.Tensor;
      const data = t.data as WireTensor['data'];
      outputs.push({ name, type: t.type, dims: t.dims, data });
      if (!Array.isArray(data)) {
        const buf = (data as ArrayBufferView).buffer;
        if (buf instanceof ArrayBuffer && !transfer.includes(buf)) transfer.push(buf);
      }
    }
    post({ kind: 'result', id, outputs }, transfer);
  } catch (err) {
    post({ kind: 'run-error', id, message: message(err) });
  }
}

void main();
