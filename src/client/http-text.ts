/**
 * Texts of the HTTP/REST protocol shared by the client and `nereid perf`:
 * model paths, the server's error message from an error body, and a
 * sentence for a connection that failed.
 */

/** `/v2/models/{m}[/versions/{v}]`. */
export function modelPath(name: string, version: string | undefined): string {
  return `/v2/models/${encodeURIComponent(name)}${version ? `/versions/${encodeURIComponent(version)}` : ''}`;
}

/** Node's codes for a server certificate that does not verify. */
const UNTRUSTED_CERTIFICATE = new Set([
  'DEPTH_ZERO_SELF_SIGNED_CERT',
  'SELF_SIGNED_CERT_IN_CHAIN',
  'UNABLE_TO_VERIFY_LEAF_SIGNATURE',
  'UNABLE_TO_GET_ISSUER_CERT',
  'UNABLE_TO_GET_ISSUER_CERT_LOCALLY',
  'CERT_UNTRUSTED',
  'CERT_SIGNATURE_FAILURE',
  'CERT_HAS_EXPIRED',
  'CERT_NOT_YET_VALID',
  'CERT_REJECTED',
  'ERR_TLS_CERT_ALTNAME_INVALID',
]);

/** A sentence for a TLS failure with `server`, or undefined when `reason` is not about TLS. */
export function describeTlsFailure(server: string, reason: string, code?: string): string | undefined {
  // Node appends a hint about system CAs after a ';': the first part is the reason.
  const why = reason.split(';')[0]!.trim();
  const alert = /alert ([a-z ]+)/i.exec(why);
  if (alert !== null) {
    return `${server} refused the TLS handshake (${alert[1]!.trim()}); ` +
      'if it asks for a client certificate, give one it trusts as tls.key and tls.cert';
  }
  if ((code !== undefined && UNTRUSTED_CERTIFICATE.has(code)) || /certificate|self.signed/i.test(why)) {
    return `the TLS certificate of ${server} is not trusted: ${why}${code ? ` (${code})` : ''}; ` +
      'give the certificate of the CA that signed it as tls.ca';
  }
  if (code?.startsWith('ERR_SSL_') || code?.startsWith('ERR_TLS_') || /\b(SSL|TLS)\b|handshake/i.test(why))
    return `the TLS handshake with ${server} failed: ${why}${code ? ` (${code})` : ''}`;
  return undefined;
}

/** Turns a connection failure into a sentence naming the server. */
export function describeNetworkError(err: unknown, origin: string): string {
  const e = err as { code?: string; message?: string; cause?: { code?: string; message?: string } };
  const code = e.code ?? e.cause?.code;
  const tls = origin.startsWith('https:') ? describeTlsFailure(origin, e.message ?? '', code) : undefined;
  if (tls !== undefined) return tls;
  if (code === 'ECONNREFUSED') return `unable to connect to ${origin}: connection refused (is the server running?)`;
  if (code === 'ENOTFOUND' || code === 'EAI_AGAIN') return `unable to resolve the host of ${origin}`;
  if (code === 'UND_ERR_CONNECT_TIMEOUT') return `timed out connecting to ${origin}`;
  if (code === 'UND_ERR_SOCKET' || code === 'ECONNRESET') {
    // A server that wants a client certificate closes the connection after the handshake: say so over TLS.
    const hint = origin.startsWith('https:') ? ' (if it asks for a client certificate, give tls.key and tls.cert)' : '';
    return `connection to ${origin} was closed by the server${hint}`;
  }
  return `request to ${origin} failed: ${e.message ?? String(err)}${code ? ` (${code})` : ''}`;
}

/** The connection-level failures (as opposed to a request the caller cancelled or a bad answer). */
export function isNetworkError(err: unknown): boolean {
  const e = err as { code?: string; cause?: { code?: string } };
  const code = e.code ?? e.cause?.code;
  return (
    code === 'ECONNREFUSED' ||
    code === 'ECONNRESET' ||
    code === 'EPIPE' ||
    code === 'ENOTFOUND' ||
    code === 'EAI_AGAIN' ||
    code === 'ETIMEDOUT' ||
    code === 'EHOSTUNREACH' ||
    code === 'UND_ERR_SOCKET' ||
    code === 'UND_ERR_CONNECT_TIMEOUT' ||
    code === 'UND_ERR_CLOSED'
  );
}

/** The `error` of a JSON error body, or the body itself (shortened) with the status. */
export function errorText(status: number, body: string): string {
  try {
    const doc = JSON.parse(body) as { error?: unknown };
    if (typeof doc.error === 'string') return doc.error;
  } catch {
    // not JSON: fall through
  }
  return body.trim() ? `HTTP ${status}: ${body.trim().slice(0, 500)}` : `HTTP ${status}`;
}
