/**
 * `node dist/bench/transport-floor.js <http|http2|grpc-js> <port> <reply bytes>`:
 * the least any Node.js server can do per call over each protocol, for
 * bench/grpc-http.ts. `http` answers every POST with a fixed binary body
 * (node:http); `http2` answers every stream as a unary gRPC call does, with
 * response headers, one length-prefixed message and the grpc-status
 * trailers (node:http2, no gRPC library); `grpc-js` is a bare @grpc/grpc-js
 * server with Nereid's channel options whose ModelInfer answers the fixed
 * bytes (no protobuf work): what the library adds over node:http2. None
 * looks at the request.
 */
import http from 'node:http';
import http2 from 'node:http2';
import * as grpc from '@grpc/grpc-js';
import { inferenceServiceDefinition } from '../src/frontends/grpc/index.js';
import { channelOptionsFor } from '../src/frontends/grpc/options.js';

const [kind, portText, sizeText] = process.argv.slice(2);
const port = Number(portText);
const size = Number(sizeText ?? 64);

if (kind === 'http') {
  const body = Buffer.alloc(size);
  const headers = { 'Content-Type': 'application/octet-stream', 'Content-Length': String(size) };
  http
    .createServer((req, res) => {
      req.on('data', () => {});
      req.on('end', () => {
        res.writeHead(200, headers);
        res.end(body);
      });
    })
    .listen(port, '127.0.0.1');
} else if (kind === 'http2') {
  const frame = Buffer.alloc(size + 5);
  frame.writeUInt32BE(size, 1);
  const headers = { ':status': 200, 'content-type': 'application/grpc+proto', 'grpc-encoding': 'identity' };
  const trailers = { 'grpc-status': '0', 'grpc-message': 'OK' };
  const server = http2.createServer();
  server.on('stream', (stream) => {
    stream.on('data', () => {});
    stream.on('end', () => {
      stream.respond(headers, { waitForTrailers: true });
      stream.once('wantTrailers', () => stream.sendTrailers(trailers));
      stream.end(frame);
    });
  });
  server.listen(port, '127.0.0.1');
} else if (kind === 'grpc-js') {
  const reply = Buffer.alloc(size);
  const server = new grpc.Server(channelOptionsFor({}));
  const identity = (b: Buffer) => b;
  server.addService(
    {
      ModelInfer: {
        ...inferenceServiceDefinition.ModelInfer!,
        requestDeserialize: identity,
        responseSerialize: identity,
      },
    },
    { ModelInfer: (_call: unknown, cb: grpc.sendUnaryData<Buffer>) => cb(null, reply) },
  );
  server.bindAsync(`127.0.0.1:${port}`, grpc.ServerCredentials.createInsecure(), (e) => {
    if (e) throw e;
  });
} else {
  process.stderr.write('usage: transport-floor.js <http|http2|grpc-js> <port> <reply bytes>\n');
  process.exit(2);
}
