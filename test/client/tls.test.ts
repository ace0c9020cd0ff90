/**
 * The client over TLS: grpcs:// against `nereid serve --grpc-use-ssl` (and
 * --grpc-use-ssl-mutual), https:// through a TLS-terminating proxy in front
 * of the HTTP port (Nereid's HTTP endpoint, like Triton's, is plain HTTP),
 * with the server's certificate given as `tls.ca`, a client certificate for
 * mutual TLS, and a clear error for a certificate the client cannot trust.
 */
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import http from 'node:http';
import https from 'node:https';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import { ConnectionError, InferenceClient, type InferRequest } from '../../src/client/index.js';
import { startClientTestServer, type ClientTestServer } from './helpers.js';

interface Pem {
  readonly certFile: string;
  readonly keyFile: string;
  readonly cert: Buffer;
  readonly key: Buffer;
}

/** A self-signed certificate for localhost and 127.0.0.1 (it is its own CA), made with the openssl binary. */
function selfSigned(dir: string, name: string): Pem {
  const certFile = path.join(dir, `${name}.pem`);
  const keyFile = path.join(dir, `${name}-key.pem`);
  execFileSync('openssl', [
    'req', '-x509', '-newkey', 'rsa:2048', '-nodes', '-days', '1', '-subj', `/CN=localhost`,
    '-addext', 'subjectAltName=DNS:localhost,IP:127.0.0.1', '-keyout', keyFile, '-out', certFile,
  ], { stdio: 'ignore' });
  return { certFile, keyFile, cert: readFileSync(certFile), key: readFileSync(keyFile) };
}

/** An HTTPS server forwarding every request to the plain HTTP port, as a TLS-terminating proxy does. */
async function tlsProxy(
  target: number,
  pem: Pem,
  clientCa?: Buffer,
): Promise<{ url: string; close(): Promise<void> }> {
  const server = https.createServer(
    {
      key: pem.key,
      cert: pem.cert,
      ...(clientCa ? { ca: clientCa, requestCert: true, rejectUnauthorized: true } : {}),
    },
    (req, res) => {
      const upstream = http.request(
        { host: '127.0.0.1', port: target, method: req.method, path: req.url, headers: req.headers },
        (answer) => {
          res.writeHead(answer.statusCode ?? 502, answer.headers);
          answer.pipe(res);
        },
      );
      upstream.on('error', () => res.destroy());
      req.pipe(upstream);
    },
  );
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    url: `https://localhost:${(server.address() as AddressInfo).port}`,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}

const request: InferRequest = {
  model: 'simple',
  inputs: [
    { name: 'INPUT0', datatype: 'INT32', shape: [1, 16], data: new Int32Array(16).fill(5) },
    { name: 'INPUT1', datatype: 'INT32', shape: [1, 16], data: new Int32Array(16).fill(2) },
  ],
};

async function inferWorks(client: InferenceClient): Promise<void> {
  try {
    assert.equal(await client.isReady(), true);
    const r = await client.infer(request);
    assert.deepEqual([...(r.outputs.find((o) => o.name === 'OUTPUT0')!.data as Int32Array)], new Array(16).fill(7));
    assert.deepEqual([...(r.outputs.find((o) => o.name === 'OUTPUT1')!.data as Int32Array)], new Array(16).fill(3));
  } finally {
    await client.close();
  }
}

/** The error of a call that must fail, checked to be a ConnectionError whose text matches `pattern`. */
async function refused(client: InferenceClient, pattern: RegExp): Promise<void> {
  try {
    await assert.rejects(client.infer(request), (err: unknown) => {
      assert.ok(err instanceof ConnectionError, `not a ConnectionError: ${String(err)}`);
      assert.equal(err.code, 'UNAVAILABLE');
      assert.match(err.message, pattern);
      return true;
    });
  } finally {
    await client.close();
  }
}

const UNTRUSTED = /the TLS certificate of \S+ is not trusted: .*the CA that signed it as tls\.ca/;

describe('the client over TLS', () => {
  let dir: string;
  let server: Pem;
  let stranger: Pem;
  let nereid: ClientTestServer;
  let mutual: ClientTestServer;

  before(async () => {
    dir = mkdtempSync(path.join(tmpdir(), 'nereid-client-tls-'));
    server = selfSigned(dir, 'server');
    stranger = selfSigned(dir, 'stranger');
    const ssl = [`--grpc-server-cert=${server.certFile}`, `--grpc-server-key=${server.keyFile}`];
    [nereid, mutual] = await Promise.all([
      startClientTestServer(['--grpc-use-ssl=true', ...ssl]),
      // The server trusts client certificates signed by its own (self-signed) certificate: the same one serves both.
      startClientTestServer(['--grpc-use-ssl-mutual=true', ...ssl, `--grpc-root-cert=${server.certFile}`]),
    ]);
  });

  after(async () => {
    await Promise.all([nereid?.stop(), mutual?.stop()]);
    rmSync(dir, { recursive: true, force: true });
  });

  test('grpcs:// with the server certificate as tls.ca', async () => {
    await inferWorks(new InferenceClient({ url: `grpcs://localhost:${nereid.ports.grpc}`, tls: { ca: server.cert } }));
    // PEM text works as well as a Buffer.
    await inferWorks(
      new InferenceClient({ url: `grpcs://localhost:${nereid.ports.grpc}`, tls: { ca: server.cert.toString() } }),
    );
  });

  test('grpcs:// refuses a certificate it cannot trust, and says so', async () => {
    await refused(new InferenceClient({ url: `grpcs://localhost:${nereid.ports.grpc}` }), UNTRUSTED);
    await refused(
      new InferenceClient({ url: `grpcs://localhost:${nereid.ports.grpc}`, tls: { ca: stranger.cert } }),
      UNTRUSTED,
    );
    // Plain gRPC to a TLS port does not get through either.
    await refused(new InferenceClient({ url: `grpc://localhost:${nereid.ports.grpc}` }), /localhost:\d+/);
  });

  test('grpcs:// with a client certificate against --grpc-use-ssl-mutual', async () => {
    const url = `grpcs://localhost:${mutual.ports.grpc}`;
    await inferWorks(new InferenceClient({ url, tls: { ca: server.cert, key: server.key, cert: server.cert } }));
    // Without a client certificate, or with one the server does not trust, the server ends the handshake.
    await refused(
      new InferenceClient({ url, tls: { ca: server.cert } }),
      /refused the TLS handshake .*tls\.key and tls\.cert/,
    );
    await refused(
      new InferenceClient({ url, tls: { ca: server.cert, key: stranger.key, cert: stranger.cert } }),
      /localhost:\d+/,
    );
  });

  test('https:// with the server certificate as tls.ca, and a clear error without it', async () => {
    const proxy = await tlsProxy(nereid.ports.http!, server);
    try {
      await inferWorks(new InferenceClient({ url: proxy.url, tls: { ca: server.cert } }));
      await inferWorks(new InferenceClient({ url: proxy.url, tls: { ca: server.cert }, tensorFormat: 'json' }));
      await refused(new InferenceClient({ url: proxy.url }), UNTRUSTED);
      await refused(new InferenceClient({ url: proxy.url, tls: { ca: stranger.cert } }), UNTRUSTED);
    } finally {
      await proxy.close();
    }
  });

  test('https:// with a client certificate where the server asks for one', async () => {
    const proxy = await tlsProxy(nereid.ports.http!, server, server.cert);
    try {
      const url = proxy.url;
      await inferWorks(new InferenceClient({ url, tls: { ca: server.cert, key: server.key, cert: server.cert } }));
      await refused(
        new InferenceClient({ url, tls: { ca: server.cert } }),
        /closed by the server .*tls\.key and tls\.cert/,
      );
    } finally {
      await proxy.close();
    }
  });
});
