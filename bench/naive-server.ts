/**
 * The baseline: how a Node user would wrap onnxruntime-node by hand. One
 * session, node:http, no batching, no validation beyond what it needs. It
 * speaks just enough of the v2 protocol (JSON and binary bodies) that the
 * same load can be sent to it and to Nereid.
 *
 * With --refuse it answers every request at once with the 503 a full queue
 * gets (the same status, headers and body as Nereid's, written the same way),
 * the least node:http can do per request: the floor of a refusal's cost.
 *
 * Usage: node naive-server.js <model.onnx> <port> [--no-spin | --refuse]
 */
import http from 'node:http';
import * as ort from 'onnxruntime-node';

const [modelPath, portArg, flag] = process.argv.slice(2);
const options: ort.InferenceSession.SessionOptions = {};
if (flag === '--no-spin') {
  options.intraOpNumThreads = 1;
  options.extra = { session: { intra_op: { allow_spinning: '0' } } };
}
const session = await ort.InferenceSession.create(modelPath!, options);
const inputName = session.inputNames[0]!;
const outputName = session.outputNames[0]!;

const REFUSAL = JSON.stringify({ error: 'Exceeds maximum queue size' });
const REFUSAL_HEADERS = [
  'Content-Type',
  'application/json',
  'Content-Length',
  String(REFUSAL.length),
  'Retry-After',
  '1',
];

const server = http.createServer((req, res) => {
  if (flag === '--refuse') {
    // A GET (a load generator warming its connections, as on /v2/health/live) is answered; every POST is refused.
    if (req.method === 'GET') {
      res.writeHead(200, ['Content-Length', '0']);
      res.end();
      return;
    }
    res.writeHead(503, REFUSAL_HEADERS);
    res.end(REFUSAL);
    return;
  }
  const chunks: Buffer[] = [];
  req.on('data', (c: Buffer) => chunks.push(c));
  req.on('end', async () => {
    try {
      const body = Buffer.concat(chunks);
      const headerLen = req.headers['inference-header-content-length'];
      const jsonLen = headerLen === undefined ? body.length : Number(headerLen);
      const request = JSON.parse(body.subarray(0, jsonLen).toString());
      const input = request.inputs[0];
      let data: Float32Array;
      if (input.data) data = Float32Array.from(input.data.flat(Infinity));
      else data = new Float32Array(body.buffer.slice(body.byteOffset + jsonLen, body.byteOffset + body.length));
      const out = await session.run({ [inputName]: new ort.Tensor('float32', data, input.shape) });
      const tensor = out[outputName]!;
      const values = tensor.data as Float32Array;
      const jsonOut = headerLen === undefined || request.outputs?.[0]?.parameters?.binary_data === false;
      if (!jsonOut) {
        const json = Buffer.from(
          JSON.stringify({
            model_name: 'm',
            model_version: '1',
            outputs: [
              {
                name: outputName,
                datatype: 'FP32',
                shape: tensor.dims,
                parameters: { binary_data_size: values.byteLength },
              },
            ],
          }),
        );
        res.writeHead(200, {
          'Content-Type': 'application/octet-stream',
          'Inference-Header-Content-Length': json.length,
        });
        res.end(Buffer.concat([json, Buffer.from(values.buffer, values.byteOffset, values.byteLength)]));
      } else {
        res.writeHead(200, { 'Content-Type': 'application/json' });
        res.end(
          JSON.stringify({
            model_name: 'm',
            model_version: '1',
            outputs: [{ name: outputName, datatype: 'FP32', shape: tensor.dims, data: Array.from(values) }],
          }),
        );
      }
    } catch (err) {
      res.writeHead(400, { 'Content-Type': 'application/json' });
      res.end(JSON.stringify({ error: String(err) }));
    }
  });
});
server.listen(Number(portArg), '127.0.0.1', () => process.stdout.write('listening\n'));
process.on('SIGTERM', () => server.close(() => process.exit(0)));
