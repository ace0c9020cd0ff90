/**
 * Requests the HTTP parser refuses before any handler runs (malformed
 * framing, oversized headers) still get a JSON error body that says why,
 * as every other error does; the connection is then closed, since the
 * parser cannot tell where the next request would start.
 */
import type { Socket } from 'node:net';

interface ParserError extends Error {
  code?: string;
  reason?: string;
}

const BOTH_FRAMINGS =
  "request has both 'Content-Length' and 'Transfer-Encoding: chunked'; send one of " +
  "them (a body framed two ways is refused, as it could smuggle a second request)";

/** What the parser's error means for the client, in words. */
function explain(code: string | undefined, reason: string): { status: number; message: string } {
  // llhttp reports the two framings under either code, depending on which header came first.
  if (/Content-Length/i.test(reason) && /Transfer-Encoding/i.test(reason))
    return { status: 400, message: BOTH_FRAMINGS };
  switch (code) {
    case 'HPE_UNEXPECTED_CONTENT_LENGTH':
      return { status: 400, message: BOTH_FRAMINGS };
    case 'HPE_HEADER_OVERFLOW':
      return { status: 431, message: 'request headers are too large' };
    case 'HPE_INVALID_TRANSFER_ENCODING':
      return { status: 400, message: "request has an invalid 'Transfer-Encoding' header" };
    case 'HPE_INVALID_CONTENT_LENGTH':
      return { status: 400, message: "request has an invalid 'Content-Length' header" };
    case 'HPE_CHUNK_EXTENSIONS_OVERFLOW':
    case 'HPE_INVALID_CHUNK_SIZE':
      return { status: 400, message: 'request has a malformed chunked body' };
    default:
      return { status: 400, message: `malformed HTTP request${code ? ` (${code})` : ''}` };
  }
}

const REASONS: Record<number, string> = { 400: 'Bad Request', 431: 'Request Header Fields Too Large' };

/** The 'clientError' handler: a JSON error reply, then the connection closes. */
export function answerClientError(err: ParserError, socket: Socket): void {
  if (err.code === 'ECONNRESET' || !socket.writable) {
    socket.destroy();
    return;
  }
  const { status, message } = explain(err.code, err.reason ?? err.message);
  const body = JSON.stringify({ error: message });
  socket.end(
    `HTTP/1.1 ${status} ${REASONS[status]}\r\nContent-Type: application/json\r\nContent-Length: ` +
    `${Buffer.byteLength(body)}\r\nConnection: close\r\n\r\n${body}`,
  );
}
