/** Request bodies in the v2 protocol, JSON and binary, batch 1. */
import type { HttpBody } from './wrk.js';

export function jsonBody(input: string, output: string, size: number): HttpBody {
  const data = Array.from({ length: size }, (_, i) => ((i % 17) - 8) / 8);
  const body = JSON.stringify({
    inputs: [{ name: input, shape: [1, size], datatype: 'FP32', data }],
    outputs: [{ name: output }],
  });
  return { body: Buffer.from(body), headers: { 'Content-Type': 'application/json' } };
}

/** Binary input, the output asked back as JSON (`binary_data: false`). */
export function binaryInJsonOutBody(input: string, output: string, size: number): HttpBody {
  return binaryBody(input, output, size, false);
}

export function binaryBody(input: string, output: string, size: number, binaryOutput = true): HttpBody {
  const values = new Float32Array(size);
  for (let i = 0; i < size; i++) values[i] = ((i % 17) - 8) / 8;
  const header = Buffer.from(
    JSON.stringify({
      inputs: [{ name: input, shape: [1, size], datatype: 'FP32', parameters: { binary_data_size: size * 4 } }],
      outputs: [{ name: output, parameters: { binary_data: binaryOutput } }],
    }),
  );
  return {
    body: Buffer.concat([header, Buffer.from(values.buffer)]),
    headers: { 'Content-Type': 'application/octet-stream', 'Inference-Header-Content-Length': String(header.length) },
  };
}
