/**
 * Texts of the HTTP/REST protocol shared by the client and `nereid perf`:
 * model paths, the server's error message from an error body, and a
 * sentence for a connection that failed.
 */

/** `/v2/models/{m}[/versions/{v}]`. */
export function modelPath(name: string, version: string | undefined): string {
  return `/v2/models/${encodeURIComponent(name)}${version ? `/versions/${encodeURIComponent(version)}` : ''}`;
}

/** Turns a connection failure into a sentence naming the server. */
export function describeNetworkError(err: unknown, origin: string): string {
  const e = err as { code?: string; message?: string; cause?: { code?: string; message?: string } };
  const code = e.code ?? e.cause?.code;
  if (code === 'ECONNREFUSED') return `unable to connect to ${origin}: connection refused (is the server running?)`;
  if (code === 'ENOTFOUND' || code === 'EAI_AGAIN') return `unable to resolve the host of ${origin}`;
  if (code === 'UND_ERR_CONNECT_TIMEOUT') return `timed out connecting to ${origin}`;
  if (code === 'UND_ERR_SOCKET' || code === 'ECONNRESET') return `connection to ${origin} was closed by the server`;
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
