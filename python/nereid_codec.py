"""Tensors <-> frame descriptions inside the worker process (numpy arrays over frame buffers)."""

import numpy as np

import triton_python_backend_utils as pb

_NUMPY_OF = pb._PROTOCOL_TO_NUMPY


def decode_tensor(meta, buf):
    """A pb_utils.Tensor viewing the frame buffer (BYTES: an object array of bytes)."""
    datatype = meta["d"]
    shape = meta["s"]
    if datatype == "BYTES":
        arr = pb.deserialize_bytes_tensor(buf)
        count = 1
        for d in shape:
            count *= d
        if arr.size != count:
            raise ValueError(
                "BYTES tensor '{}' holds {} elements but its shape {} needs {}".format(
                    meta["n"], arr.size, shape, count
                )
            )
        arr = arr.reshape(shape)
    else:
        arr = np.frombuffer(buf, dtype=_NUMPY_OF[datatype]).reshape(shape)
    return pb.Tensor(meta["n"], arr, datatype)


def encode_tensor(tensor):
    """(meta, buffer) for a pb_utils.Tensor; the buffer is the array's own memory when contiguous."""
    arr = tensor.as_numpy()
    datatype = tensor._datatype
    if datatype == "BYTES":
        data = pb.serialize_byte_tensor(arr)
        buf = b"" if data == () else data
    else:
        if not arr.flags.c_contiguous:
            arr = np.ascontiguousarray(arr)
        buf = arr.reshape(-1).view(np.uint8)
    return {"n": tensor._name, "d": datatype, "s": list(arr.shape)}, buf


def encode_tensors(tensors, buffers=None):
    """Metas (with buffer indexes) and the buffers list they index."""
    if buffers is None:
        buffers = []
    metas = []
    for t in tensors:
        if not isinstance(t, pb.Tensor):
            raise pb.TritonModelException('Expected a "Tensor" object, found type "{}"'.format(type(t)))
        meta, buf = encode_tensor(t)
        meta["b"] = len(buffers)
        metas.append(meta)
        buffers.append(buf)
    return metas, buffers


def decode_bls_response(header, buffers):
    err = header.get("e")
    if err is not None:
        code = pb._ERROR_NAME_CODES.get(err.get("c", "INTERNAL"), pb.TritonError.INTERNAL)
        return pb.InferenceResponse(error=pb.TritonError(err.get("m", ""), code))
    outputs = [decode_tensor(m, buffers[m["b"]]) for m in header.get("o", ())]
    return pb.InferenceResponse(output_tensors=outputs, parameters=header.get("p") or None)
