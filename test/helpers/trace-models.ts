/** What the tracing tests serve: the `simple` add/sub model's inputs, and `pipe`, an ensemble of two `simple` steps. */

import type { TraceStampName } from '../../src/types/api.js';

/** INPUT0 and INPUT1 of `simple` (INT32, [1, 16]). */
export const A = Array.from({ length: 16 }, (_, i) => i);
export const B = new Array<number>(16).fill(1);

/** A JSON infer body for `simple` or `pipe`, with a request id when given. */
export function inferBody(id?: string): string {
  return JSON.stringify({
    ...(id === undefined ? {} : { id }),
    inputs: [
      { name: 'INPUT0', datatype: 'INT32', shape: [1, 16], data: A },
      { name: 'INPUT1', datatype: 'INT32', shape: [1, 16], data: B },
    ],
  });
}

/** config.pbtxt of `pipe`: `simple`'s sum and difference fed to `simple` again. */
export const PIPE_ENSEMBLE = `name: "pipe"
platform: "ensemble"
max_batch_size: 8
input [ { name: "INPUT0" data_type: TYPE_INT32 dims: [ 16 ] }, { name: "INPUT1" data_type: TYPE_INT32 dims: [ 16 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_INT32 dims: [ 16 ] }, { name: "OUTPUT1" data_type: TYPE_INT32 dims: [ 16 ]
  } ]
ensemble_scheduling { step [
  { model_name: "simple" model_version: -1
    input_map { key: "INPUT0" value: "INPUT0" } input_map { key: "INPUT1" value: "INPUT1" }
    output_map { key: "OUTPUT0" value: "sum" } output_map { key: "OUTPUT1" value: "diff" } },
  { model_name: "simple" model_version: -1
    input_map { key: "INPUT0" value: "sum" } input_map { key: "INPUT1" value: "diff" }
    output_map { key: "OUTPUT0" value: "OUTPUT0" } output_map { key: "OUTPUT1" value: "OUTPUT1" } }
] }
`;

/** The core's timestamp names in the order a request to a model that is not an ensemble passes them. */
export const CORE_ORDER: readonly TraceStampName[] = [
  'REQUEST_START',
  'QUEUE_START',
  'COMPUTE_START',
  'COMPUTE_INPUT_END',
  'COMPUTE_OUTPUT_START',
  'COMPUTE_END',
  'REQUEST_END',
];
