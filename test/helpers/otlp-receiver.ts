/**
 * An OTLP/HTTP trace receiver for tests: a real HTTP endpoint on 127.0.0.1
 * that takes `POST /v1/traces` (application/x-protobuf) and decodes each
 * body with the OTLP protobuf definitions as the OpenTelemetry project
 * generates them (protobufjs, from opentelemetry-proto).
 */
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { createRequire } from 'node:module';

const require = createRequire(import.meta.url);

interface ProtoType {
  decode(bytes: Uint8Array): unknown;
  toObject(message: unknown, options: Record<string, unknown>): Record<string, unknown>;
}

const root = require('otlp-transformer-0.57/build/src/generated/root.js') as {
  opentelemetry: {
    proto: {
      collector: {
        trace: {
          v1: {
            ExportTraceServiceRequest: ProtoType;
            ExportTraceServiceResponse: { encode(m: object): { finish(): Uint8Array } };
          };
        };
      };
    };
  };
};
const v1 = root.opentelemetry.proto.collector.trace.v1;

export interface ReceivedSpan {
  traceId: string;
  spanId: string;
  parentSpanId: string;
  name: string;
  /** OTLP SpanKind: 2 = SERVER. */
  kind: number;
  startNs: bigint;
  endNs: bigint;
  attributes: Record<string, string | number | boolean>;
  events: Array<{ name: string; ns: bigint }>;
  resource: Record<string, string | number | boolean>;
}

type AnyValue = { stringValue?: string; intValue?: string | number; boolValue?: boolean; doubleValue?: number };

function value(v: AnyValue | undefined): string | number | boolean {
  if (v === undefined) return '';
  if (v.stringValue !== undefined) return v.stringValue;
  if (v.intValue !== undefined) return Number(v.intValue);
  if (v.boolValue !== undefined) return v.boolValue;
  return v.doubleValue ?? '';
}

function attributes(list: unknown): Record<string, string | number | boolean> {
  const out: Record<string, string | number | boolean> = {};
  for (const a of (list as Array<{ key: string; value?: AnyValue }> | undefined) ?? []) out[a.key] = value(a.value);
  return out;
}

const hex = (b: unknown): string => (b === undefined || b === null ? '' : Buffer.from(b as Uint8Array).toString('hex'));

/** Decodes one ExportTraceServiceRequest body into flat spans. */
export function decodeTraces(body: Uint8Array): ReceivedSpan[] {
  const msg = v1.ExportTraceServiceRequest.decode(body);
  const obj = v1.ExportTraceServiceRequest.toObject(msg, { longs: String, enums: Number, defaults: true }) as {
    resourceSpans: Array<{
      resource?: { attributes: unknown };
      scopeSpans: Array<{ spans: Array<Record<string, unknown>> }>;
    }>;
  };
  const out: ReceivedSpan[] = [];
  for (const rs of obj.resourceSpans) {
    const resource = attributes(rs.resource?.attributes);
    for (const ss of rs.scopeSpans) {
      for (const s of ss.spans) {
        out.push({
          traceId: hex(s.traceId),
          spanId: hex(s.spanId),
          parentSpanId: hex(s.parentSpanId),
          name: s.name as string,
          kind: s.kind as number,
          startNs: BigInt(s.startTimeUnixNano as string),
          endNs: BigInt(s.endTimeUnixNano as string),
          attributes: attributes(s.attributes),
          events: ((s.events as Array<{ name: string; timeUnixNano: string }>) ?? []).map((e) => ({
            name: e.name,
            ns: BigInt(e.timeUnixNano),
          })),
          resource,
        });
      }
    }
  }
  return out;
}

export class OtlpReceiver {
  readonly spans: ReceivedSpan[] = [];
  requests = 0;
  /** The partial success each reply carries (a collector that refuses some spans), or none. */
  partialSuccess: { rejectedSpans: number; errorMessage: string } | undefined;
  /** While true, bodies are taken but replies wait (a slow collector) until releaseReplies(). */
  holdReplies = false;
  private held: Array<() => void> = [];
  private server: http.Server | undefined;
  port = 0;

  async start(): Promise<this> {
    this.server = http.createServer((req, res) => {
      const chunks: Buffer[] = [];
      req.on('data', (c: Buffer) => chunks.push(c));
      req.on('end', () => {
        if (
          req.method !== 'POST' ||
          req.url !== '/v1/traces' ||
          req.headers['content-type'] !== 'application/x-protobuf'
        ) {
          res.writeHead(400).end();
          return;
        }
        this.requests += 1;
        this.spans.push(...decodeTraces(Buffer.concat(chunks)));
        const reply = () =>
          res
            .writeHead(200, { 'Content-Type': 'application/x-protobuf' })
            .end(Buffer.from(v1.ExportTraceServiceResponse.encode({ partialSuccess: this.partialSuccess }).finish()));
        if (this.holdReplies) this.held.push(reply);
        else reply();
      });
    });
    await new Promise<void>((resolve) => this.server!.listen(0, '127.0.0.1', resolve));
    this.port = (this.server.address() as AddressInfo).port;
    return this;
  }

  get url(): string {
    return `http://127.0.0.1:${this.port}/v1/traces`;
  }

  releaseReplies(): void {
    this.holdReplies = false;
    for (const reply of this.held.splice(0)) reply();
  }

  async stop(): Promise<void> {
    this.releaseReplies();
    this.server?.closeAllConnections();
    await new Promise<void>((resolve) => this.server?.close(() => resolve()));
  }
}
