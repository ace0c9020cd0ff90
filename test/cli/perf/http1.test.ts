import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createServer, type Socket } from 'node:net';
import {
  ResponseParser,
  type ResponseSink,
  buildHttpRequest,
  Http1InferTransport,
} from '../../../src/cli/perf/http1.js';
import { type CallSink, InferCall } from '../../../src/cli/perf/transport.js';

class Sink implements ResponseSink {
  started = 0;
  done: Array<{ status: number; body: string; keepAlive: boolean }> = [];
  errors: string[] = [];
  responseStarted(): void {
    this.started++;
  }
  responseComplete(status: number, errorBody: string, keepAlive: boolean): void {
    this.done.push({ status, body: errorBody, keepAlive });
  }
  protocolError(message: string): void {
    this.errors.push(message);
  }
}

/** Feeds `text` to a parser split at every possible point, and in one piece. */
function feedAllSplits(text: string, check: (sink: Sink) => void): void {
  const bytes = Buffer.from(text, 'latin1');
  for (let cut = 0; cut <= bytes.length; cut++) {
    const sink = new Sink();
    const p = new ResponseParser(sink);
    if (cut > 0) p.push(bytes.subarray(0, cut));
    if (cut < bytes.length) p.push(bytes.subarray(cut));
    check(sink);
  }
}

test('request serialisation: one buffer with request line, headers, length and body', () => {
  const req = buildHttpRequest('h:1', '/v2/models/m/infer', [['A', 'b']], Buffer.from('xyz'));
  assert.equal(
    req.toString('latin1'),
    'POST /v2/models/m/infer HTTP/1.1\r\nHost: h:1\r\nA: b\r\nContent-Length: 3\r\n\r\nxyz',
  );
  assert.throws(() => buildHttpRequest('h', '/', [['A', 'b\r\nEvil: 1']], Buffer.alloc(0)), /line break/);
});

test('content-length responses, pipelined back to back, split anywhere', () => {
  const ok = 'HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello';
  const bad =
    'HTTP/1.1 400 Bad Request\r\ncontent-type: application/json\r\ncontent-length: 17\r\n\r\n{"error":"nope!"}';
  feedAllSplits(ok + bad + ok, (sink) => {
    assert.deepEqual(sink.done, [
      { status: 200, body: '', keepAlive: true },
      { status: 400, body: '{"error":"nope!"}', keepAlive: true },
      { status: 200, body: '', keepAlive: true },
    ]);
    assert.equal(sink.started, 3);
  });
});

test('chunked responses with trailers, split anywhere', () => {
  const chunked =
    'HTTP/1.1 500 Internal\r\nTransfer-Encoding: chunked\r\n\r\n4\r\n{"er\r\nC\r\nror":"boom"}\r\n0\r\nX-T: 1\r\n\r\n';
  feedAllSplits(chunked + 'HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n', (sink) => {
    assert.deepEqual(sink.done, [
      { status: 500, body: '{"error":"boom"}', keepAlive: true },
      { status: 200, body: '', keepAlive: true },
    ]);
  });
});

test('bytes past the end of a reused read buffer are never read', () => {
  const sink = new Sink();
  const p = new ResponseParser(sink);
  const buf = Buffer.alloc(256, 0x41);
  const part1 = Buffer.from('HTTP/1.1 200 OK\r\nContent-Len');
  part1.copy(buf);
  // stale bytes after the valid range look like the end of a header block
  Buffer.from('\r\n\r\nHTTP/1.1 500 X\r\n\r\n').copy(buf, part1.length);
  p.push(buf, 0, part1.length);
  assert.equal(sink.done.length, 0);
  const part2 = Buffer.from('gth: 2\r\n\r\nok');
  buf.fill(0x0d);
  part2.copy(buf);
  p.push(buf, 0, part2.length);
  assert.deepEqual(sink.done, [{ status: 200, body: '', keepAlive: true }]);
});

test('connection: close and close-delimited bodies', () => {
  const sink = new Sink();
  const p = new ResponseParser(sink);
  p.push(Buffer.from('HTTP/1.1 503 Unavailable\r\nConnection: close\r\n\r\nbusy'));
  assert.equal(sink.done.length, 0);
  assert.equal(p.end(), true);
  assert.deepEqual(sink.done, [{ status: 503, body: 'busy', keepAlive: false }]);
  const sink2 = new Sink();
  new ResponseParser(sink2).push(Buffer.from('HTTP/1.0 200 OK\r\nContent-Length: 0\r\n\r\n'));
  assert.deepEqual(sink2.done, [{ status: 200, body: '', keepAlive: false }]);
});

test('garbage instead of a response is a protocol error; a cut-off response is reported by end()', () => {
  const sink = new Sink();
  new ResponseParser(sink).push(Buffer.from('SSH-2.0-OpenSSH\r\n\r\n'));
  assert.match(sink.errors[0]!, /malformed response status line/);
  const cut = new ResponseParser(new Sink());
  cut.push(Buffer.from('HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc'));
  assert.equal(cut.end(), false);
});

test('transport: a server that drops the connection mid-request fails the call with a clear reason', async () => {
  const sockets: Socket[] = [];
  const srv = createServer((s) => {
    sockets.push(s);
    s.once('data', () => s.destroy());
  });
  await new Promise<void>((r) => srv.listen(0, '127.0.0.1', r));
  const port = (srv.address() as { port: number }).port;
  const transport = new Http1InferTransport({
    origin: `http://127.0.0.1:${port}`,
    requests: [buildHttpRequest(`127.0.0.1:${port}`, '/x', [], Buffer.from('{}'))],
    connections: 1,
    now: () => performance.now() * 1e6,
  });
  const result = await new Promise<string>((resolve) => {
    const sink: CallSink = {
      callDone: () => resolve('done'),
      callFailed: (_c, e) => resolve(e.message),
    };
    transport.send(transport.createCall(sink, 0));
  });
  assert.match(result, /inference request failed: connection to http:\/\/127\.0\.0\.1:\d+ was closed by the server/);
  await transport.close();
  await new Promise<void>((r) => srv.close(() => r()));
});

test('transport: request-rate calls share a bounded pool and queue when it is busy', async () => {
  let maxOpen = 0;
  let open = 0;
  const srv = createServer((s) => {
    open++;
    maxOpen = Math.max(maxOpen, open);
    s.on('close', () => open--);
    s.on('data', () => setTimeout(() => s.write('HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok'), 5));
  });
  await new Promise<void>((r) => srv.listen(0, '127.0.0.1', r));
  const port = (srv.address() as { port: number }).port;
  const transport = new Http1InferTransport({
    origin: `http://127.0.0.1:${port}`,
    requests: [buildHttpRequest(`127.0.0.1:${port}`, '/x', [], Buffer.from('{}'))],
    connections: 2,
    now: () => performance.now() * 1e6,
  });
  let done = 0;
  await new Promise<void>((resolve, reject) => {
    const sink: CallSink = {
      callDone: () => {
        if (++done === 6) resolve();
      },
      callFailed: (_c, e) => reject(e),
    };
    for (let i = 0; i < 6; i++) transport.send(new InferCall(sink, -1));
  });
  assert.equal(done, 6);
  assert.equal(maxOpen, 2);
  await transport.close();
  await new Promise<void>((r) => srv.close(() => r()));
});
