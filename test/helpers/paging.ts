/**
 * What the paging tests share: the config of the MLPs they page (256 inputs,
 * 16 outputs, built with buildMlp) and a JSON POST that keeps the reply's text.
 */

/** A config for a paged MLP of buildMlp's shape; `extra` is appended as it is. */
export function pagedMlpConfig(name: string, extra = ''): string {
  return `name: "${name}"
platform: "onnxruntime_onnx"
max_batch_size: 8
input [ { name: "input" data_type: TYPE_FP32 dims: [ 256 ] } ]
output [ { name: "output" data_type: TYPE_FP32 dims: [ 16 ] } ]
instance_group [ { kind: KIND_CPU count: 1 } ]
${extra}`;
}

/** POSTs `body` as JSON to the server on 127.0.0.1:`port`. */
export async function post(port: number, url: string, body: unknown): Promise<{ status: number; text: string }> {
  const res = await fetch(`http://127.0.0.1:${port}${url}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify(body),
  });
  return { status: res.status, text: await res.text() };
}
