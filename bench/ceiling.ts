/**
 * The compute ceiling: onnxruntime-node in-process, no server, the same
 * session settings Nereid uses. Prints JSON lines {batch, inferPerSec}.
 *
 * Usage: node ceiling.js <model.onnx> <inputSize> <batch,...> <seconds>
 */
import * as ort from 'onnxruntime-node';

const [modelPath, sizeArg, batchesArg, secondsArg] = process.argv.slice(2);
const size = Number(sizeArg);
const seconds = Number(secondsArg ?? 2);
const session = await ort.InferenceSession.create(modelPath!, {
  intraOpNumThreads: Number(process.env.CEILING_THREADS ?? 1),
  extra: { session: { intra_op: { allow_spinning: process.env.CEILING_SPIN ?? '0' } } },
});
const inputName = session.inputNames[0]!;
for (const batch of batchesArg!.split(',').map(Number)) {
  const data = new Float32Array(batch * size).fill(0.5);
  const feeds = { [inputName]: new ort.Tensor('float32', data, [batch, size]) };
  for (let i = 0; i < 20; i++) await session.run(feeds);
  let runs = 0;
  const start = process.hrtime.bigint();
  const end = start + BigInt(Math.round(seconds * 1e9));
  while (process.hrtime.bigint() < end) {
    await session.run(feeds);
    runs++;
  }
  const elapsed = Number(process.hrtime.bigint() - start) / 1e9;
  process.stdout.write(`${JSON.stringify({ batch, inferPerSec: (runs * batch) / elapsed })}\n`);
}
