import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { join } from 'node:path';
import { PYTHON, missingPythonModule, repoRoot } from './helpers.js';

const skip = missingPythonModule('numpy');

/** Runs Python assertions against python/triton_python_backend_utils.py; prints OK at the end. */
function runPython(code: string): void {
  const r = spawnSync(PYTHON, ['-c', code], {
    encoding: 'utf8',
    env: { ...process.env, PYTHONPATH: join(repoRoot(), 'python'), PYTHONDONTWRITEBYTECODE: '1' },
  });
  assert.equal(r.status, 0, `python failed:\n${r.stderr}`);
  assert.match(r.stdout, /OK\s*$/);
}

test('type helpers map between config names, enum values and numpy', { skip }, () => {
  runPython(`
import numpy as np
import triton_python_backend_utils as pb
assert pb.triton_string_to_numpy("TYPE_FP32") is np.float32
assert pb.triton_string_to_numpy("TYPE_STRING") is np.object_
assert pb.triton_to_numpy_type(11) is np.float32
assert pb.triton_to_numpy_type(1) is np.bool_
assert pb.triton_to_numpy_type(13) is np.object_
assert pb.numpy_to_triton_type(np.float16) == 10
assert pb.numpy_to_triton_type(np.int64) == 9
assert pb.numpy_to_triton_type(np.object_) == 13
assert pb.numpy_to_triton_type(np.bytes_) == 13
print("OK")
`);
});

test('BYTES serialize/deserialize round trip keeps bytes exactly', { skip }, () => {
  runPython(`
import numpy as np
import triton_python_backend_utils as pb
arr = np.array([b"a", b"", b"\\x00\\xff", "text"], dtype=np.object_)
raw = pb.serialize_byte_tensor(arr)
expected = (b"\\x01\\x00\\x00\\x00a" + b"\\x00\\x00\\x00\\x00" + b"\\x02\\x00\\x00\\x00\\x00\\xff"
            + b"\\x04\\x00\\x00\\x00text")
assert raw == expected, raw
back = pb.deserialize_bytes_tensor(raw)
assert back.dtype == np.object_ and list(back) == [b"a", b"", b"\\x00\\xff", b"text"]
assert pb.serialize_byte_tensor(np.zeros(0, dtype=np.object_)) == ()
assert pb.serialize_byte_tensor(np.zeros(2, dtype=np.float32)) is None
t = pb.Tensor("S", arr.reshape(2, 2))
assert t.triton_dtype() == 13 and t.shape() == [2, 2] and t.name() == "S" and t.is_cpu()
print("OK")
`);
});

test('ModelConfig auto-complete helpers validate like Triton', { skip }, () => {
  runPython(`
import json
import triton_python_backend_utils as pb
cfg = pb.ModelConfig(json.dumps({"name": "m", "max_batch_size": 4, "input": [], "output": []}))
cfg.add_input({"name": "X", "data_type": "TYPE_FP32", "dims": [3]})
cfg.add_input({"name": "X", "data_type": "TYPE_FP32", "dims": [3]})  # same again is fine
try:
    cfg.add_input({"name": "X", "data_type": "TYPE_INT32", "dims": [3]})
    raise SystemExit("conflicting data_type accepted")
except ValueError as e:
    assert "X" in str(e)
try:
    cfg.add_output({"name": "Y", "data_type": "TYPE_FP32", "dims": [3], "optional": True})
    raise SystemExit("optional output accepted")
except ValueError:
    pass
try:
    cfg.set_max_batch_size(2)
    raise SystemExit("smaller max_batch_size accepted")
except ValueError:
    pass
cfg.set_max_batch_size(8)
cfg.set_dynamic_batching()
cfg.set_model_transaction_policy({"decoupled": False})
d = cfg.as_dict()
assert d["max_batch_size"] == 8 and d["dynamic_batching"] == {} and len(d["input"]) == 1
assert pb.get_input_config_by_name(d, "X")["data_type"] == "TYPE_FP32"
assert pb.get_output_config_by_name(d, "nope") is None
assert pb.using_decoupled_model_transaction_policy(d) is False
print("OK")
`);
});

test('responses, errors and requests expose Triton methods', { skip }, () => {
  runPython(`
import numpy as np
import triton_python_backend_utils as pb
err = pb.TritonError("bad", pb.TritonError.NOT_FOUND)
assert err.message() == "bad" and err.code() == pb.TritonError.NOT_FOUND
r = pb.InferenceResponse(error=err)
assert r.has_error() and r.error().message() == "bad" and r.output_tensors() == []
out = pb.Tensor("O", np.arange(3, dtype=np.int32))
r = pb.InferenceResponse(output_tensors=[out], parameters={"k": 1})
assert not r.has_error() and pb.get_output_tensor_by_name(r, "O") is out and r.parameters() == '{"k": 1}'
req = pb.InferenceRequest(model_name="m", inputs=[out], requested_output_names=["Z"], parameters={"a": "b"})
assert req.parameters() == '{"a": "b"}' and req.requested_output_names() == ["Z"] and req.correlation_id() == 0
assert pb.get_input_tensor_by_name(req, "O") is out and pb.get_input_tensor_by_name(req, "Q") is None
try:
    req.exec()
    raise SystemExit("exec outside a worker succeeded")
except pb.TritonModelException:
    pass
c = pb.MetricFamily("n", "d", pb.MetricFamily.COUNTER).Metric(labels={"x": "y"})
c.increment(2)
assert c.value() == 2
print("OK")
`);
});

test('worker frames survive partial writes and are read back whole', { skip }, () => {
  runPython(`
import os
import numpy as np
import nereid_stub
r, w = os.pipe()
pipe = nereid_stub.Pipe(r, w)
real_writev = os.writev
def dribble(fd, bufs):
    # write at most 5 bytes per call, like a busy pipe would
    first = next(memoryview(b).cast("B") for b in bufs if len(b))
    return os.write(fd, first[:5])
os.writev = dribble
payload = np.arange(10, dtype=np.int32)
pipe.write_frame({"t": "x", "k": 1}, [payload.view(np.uint8), b"abc"])
os.writev = real_writev
header, buffers = pipe.read_frame()
assert header["t"] == "x" and header["k"] == 1 and header["b"] == [40, 3], header
assert np.frombuffer(buffers[0], dtype=np.int32).tolist() == list(range(10))
assert bytes(buffers[1]) == b"abc"
print("OK")
`);
});
