import { test } from 'node:test';
import assert from 'node:assert/strict';
import { create } from '@bufbuild/protobuf';
import { DataType, ModelConfigSchema } from '../../src/gen/model_config_pb.js';
import { ModelSignature, prepareRequest } from '../../src/core/request.js';
import { NereidError } from '../../src/errors.js';
import { encodeBytesElements } from '../../src/tensor/tensor.js';
import type { Tensor } from '../../src/tensor/tensor.js';

const config = create(ModelConfigSchema, {
  name: 'm',
  maxBatchSize: 8,
  input: [
    { name: 'A', dataType: DataType.TYPE_INT32, dims: [16n] },
    { name: 'S', dataType: DataType.TYPE_STRING, dims: [2n], optional: true },
  ],
  output: [
    { name: 'X', dataType: DataType.TYPE_INT32, dims: [16n] },
    { name: 'Y', dataType: DataType.TYPE_INT32, dims: [16n] },
  ],
});
const sig = new ModelSignature('m', config);

function int32(name: string, shape: number[], n = shape.reduce((a, b) => a * b, 1)): Tensor {
  return { name, datatype: 'INT32', shape, data: new Uint8Array(n * 4) };
}

function rejects(fn: () => unknown, code: string, errorClass: string, text?: RegExp): void {
  assert.throws(fn, (err: unknown) => {
    assert.ok(err instanceof NereidError, `expected NereidError, got ${String(err)}`);
    assert.equal(err.code, code);
    assert.equal(err.errorClass, errorClass);
    if (text) assert.match(err.message, text);
    return true;
  });
}

test('a valid request keeps its tensors as given and asks for every output', () => {
  const a = int32('A', [3, 16]);
  const p = prepareRequest(sig, { model: 'm', id: 'r1', inputs: [a] });
  assert.equal(p.backendRequest.inputs[0], a);
  assert.equal(p.backendRequest.batchSize, 3);
  assert.deepEqual(p.backendRequest.requestedOutputs, ['X', 'Y']);
  assert.equal(p.backendRequest.id, 'r1');
});

test('unknown input is rejected with the request id prefix', () => {
  rejects(
    () => prepareRequest(sig, { model: 'm', id: 'abc', inputs: [int32('A', [1, 16]), int32('Z', [1, 16])] }),
    'NRD_UNKNOWN_INPUT',
    'INVALID_ARG',
    /^\[request id: abc\] unexpected inference input 'Z' for model 'm'/,
  );
});

test('missing required input names what is missing', () => {
  rejects(
    () =>
      prepareRequest(sig, {
        model: 'm',
        inputs: [{ name: 'S', datatype: 'BYTES', shape: [1, 2], data: encodeBytesElements(['a', 'b']) }],
      }),
    'NRD_INPUT_COUNT',
    'INVALID_ARG',
    new RegExp(
      String.raw`\[request id: <id_unknown>\] expected between 1 and 2 inputs but got 1 inputs for model ` +
      String.raw`'m'.*missing required input\(s\) \['A'\]`,
    ),
  );
});

test('duplicated input is rejected', () => {
  rejects(
    () => prepareRequest(sig, { model: 'm', inputs: [int32('A', [1, 16]), int32('A', [1, 16])] }),
    'NRD_DUPLICATE_INPUT',
    'INVALID_ARG',
  );
});

test('wrong datatype names expected and given types', () => {
  rejects(
    () =>
      prepareRequest(sig, {
        model: 'm',
        inputs: [{ name: 'A', datatype: 'FP32', shape: [1, 16], data: new Uint8Array(64) }],
      }),
    'NRD_INPUT_DATATYPE',
    'INVALID_ARG',
    /data-type is 'FP32', but model 'm' expects 'INT32'/,
  );
});

test('shape not matching config reports Triton style shapes', () => {
  rejects(
    () => prepareRequest(sig, { model: 'm', inputs: [int32('A', [1, 15])] }),
    'NRD_INPUT_SHAPE',
    'INVALID_ARG',
    /Expected \[-1,16\], got \[1,15\]/,
  );
});

test('batch larger than max_batch_size is rejected', () => {
  rejects(
    () => prepareRequest(sig, { model: 'm', inputs: [int32('A', [9, 16])] }),
    'NRD_BATCH_SIZE',
    'INVALID_ARG',
    /batch-size must be <= 8 for 'm'/,
  );
});

test('byte size not matching shape is rejected', () => {
  rejects(
    () => prepareRequest(sig, { model: 'm', inputs: [int32('A', [1, 16], 15)] }),
    'NRD_INPUT_BYTE_SIZE',
    'INVALID_ARG',
  );
});

test('BYTES element count mismatch uses both Triton texts', () => {
  const a = int32('A', [1, 16]);
  rejects(
    () =>
      prepareRequest(sig, {
        model: 'm',
        inputs: [a, { name: 'S', datatype: 'BYTES', shape: [1, 2], data: encodeBytesElements(['x']) }],
      }),
    'NRD_BYTES_ELEMENT_COUNT',
    'INVALID_ARG',
    /expected 2 string elements for inference input 'S'/,
  );
  rejects(
    () =>
      prepareRequest(sig, {
        model: 'm',
        inputs: [a, { name: 'S', datatype: 'BYTES', shape: [1, 2], data: encodeBytesElements(['x', 'y', 'z']) }],
      }),
    'NRD_BYTES_ELEMENT_COUNT',
    'INVALID_ARG',
    /unexpected number of string elements 3 for inference input 'S'/,
  );
});

test('BYTES with a broken length prefix is rejected, not crashed on', () => {
  const bad = new Uint8Array([5, 0, 0, 0, 65]);
  rejects(
    () =>
      prepareRequest(sig, {
        model: 'm',
        inputs: [int32('A', [1, 16]), { name: 'S', datatype: 'BYTES', shape: [1, 2], data: bad }],
      }),
    'NRD_BYTES_ENCODING',
    'INVALID_ARG',
    /declares 5 bytes/,
  );
});

test('unknown and duplicated requested outputs are rejected', () => {
  rejects(
    () => prepareRequest(sig, { model: 'm', inputs: [int32('A', [1, 16])], outputs: [{ name: 'Q' }] }),
    'NRD_UNKNOWN_OUTPUT',
    'INVALID_ARG',
  );
  rejects(
    () => prepareRequest(sig, { model: 'm', inputs: [int32('A', [1, 16])], outputs: [{ name: 'X' }, { name: 'X' }] }),
    'NRD_DUPLICATE_OUTPUT',
    'INVALID_ARG',
    /output 'X' already exists in request/,
  );
});

test('priority, timeout and sequence parameters are read and checked', () => {
  const p = prepareRequest(sig, {
    model: 'm',
    inputs: [int32('A', [1, 16])],
    parameters: { priority: 2, timeout: 1500, sequence_id: 7, sequence_start: true },
  });
  assert.equal(p.priority, 2);
  assert.equal(p.timeoutUs, 1500);
  assert.equal(p.backendRequest.correlationId, 7n);
  assert.equal(p.backendRequest.flags, 1);
  rejects(
    () => prepareRequest(sig, { model: 'm', inputs: [int32('A', [1, 16])], parameters: { priority: -1 } }),
    'NRD_BAD_PARAMETER',
    'INVALID_ARG',
    /priority/,
  );
  rejects(
    () => prepareRequest(sig, { model: 'm', inputs: [int32('A', [1, 16])], parameters: { timeout: 'soon' } }),
    'NRD_BAD_PARAMETER',
    'INVALID_ARG',
    /timeout/,
  );
  rejects(
    () => prepareRequest(sig, { model: 'm', inputs: [int32('A', [1, 16])], parameters: { sequence_start: true } }),
    'NRD_BAD_PARAMETER',
    'INVALID_ARG',
    /sequence_id/,
  );
});

test('reshape gives the backend the reshaped shape over the same bytes', () => {
  const c = create(ModelConfigSchema, {
    name: 'r',
    maxBatchSize: 4,
    input: [{ name: 'A', dataType: DataType.TYPE_FP32, dims: [1n], reshape: { shape: [] } }],
    output: [{ name: 'B', dataType: DataType.TYPE_FP32, dims: [1n] }],
  });
  const t: Tensor = { name: 'A', datatype: 'FP32', shape: [2, 1], data: new Uint8Array(8) };
  const p = prepareRequest(new ModelSignature('r', c), { model: 'r', inputs: [t] });
  assert.deepEqual(p.backendRequest.inputs[0]!.shape, [2]);
  assert.equal(p.backendRequest.inputs[0]!.data, t.data);
});
