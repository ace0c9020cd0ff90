"""Runs a TorchScript model.pt inside the worker process (platform pytorch_libtorch).

Input/output naming follows the libtorch backend's conventions:
- inputs named after forward()'s arguments are passed by argument name;
- otherwise `<name>__<index>` names give the argument position;
- otherwise the configuration order is the argument order.
- outputs named `<name>__<index>` pick that element of the returned tuple;
  otherwise configuration order is used. A dict result is read by key.
The server batches requests before they arrive here, so one command is one
forward() call.
"""

import json
import re

import numpy as np
import torch

from nereid_stub import error_line

_INDEXED = re.compile(r"^.*__(\d+)$")

_TORCH_DTYPES = {
    "BOOL": torch.bool,
    "UINT8": torch.uint8,
    "INT8": torch.int8,
    "INT16": torch.int16,
    "INT32": torch.int32,
    "INT64": torch.int64,
    "FP16": torch.float16,
    "FP32": torch.float32,
    "FP64": torch.float64,
    "BF16": torch.bfloat16,
}
_PROTOCOL_OF_TORCH = {v: k for k, v in _TORCH_DTYPES.items()}
_NUMPY_OF_PROTOCOL = {
    "BOOL": np.bool_,
    "UINT8": np.uint8,
    "INT8": np.int8,
    "INT16": np.int16,
    "INT32": np.int32,
    "INT64": np.int64,
    "FP16": np.float16,
    "FP32": np.float32,
    "FP64": np.float64,
    "BF16": np.int16,
}


def _protocol_of_config(data_type):
    name = data_type[5:] if data_type.startswith("TYPE_") else data_type
    return "BYTES" if name == "STRING" else name


def _index_of(name):
    m = _INDEXED.match(name)
    return int(m.group(1)) if m else None


class TorchScriptRunner:
    def __init__(self, stub):
        self.stub = stub
        self.module = None
        self.device = torch.device("cpu")
        self.model_name = ""
        self.dict_input = False
        self.input_position = {}  # config input name -> forward() position or dict key
        self.input_count = 0
        self.output_index = {}  # config output name -> tuple index
        self.output_dtype = {}  # config output name -> protocol datatype
        self.inference_mode = True

    def on_init(self, header, _buffers):
        try:
            self._load(header)
        except Exception as exc:
            self.stub.send_error(exc)
            return
        self.stub.send({"t": "ok"})

    def _load(self, header):
        args = header["args"]
        config = json.loads(args["model_config"])
        self.model_name = args.get("model_name", "")
        params = {k: v.get("string_value", "") for k, v in config.get("parameters", {}).items()}
        self.inference_mode = params.get("INFERENCE_MODE", "true").lower() not in ("false", "0", "no")
        intra = params.get("INTRA_OP_THREAD_COUNT")
        if intra and int(intra) > 0:
            torch.set_num_threads(int(intra))
        inter = params.get("INTER_OP_THREAD_COUNT")
        if inter and int(inter) > 0:
            try:
                torch.set_num_interop_threads(int(inter))
            except RuntimeError:
                pass  # only settable once per process

        if args.get("model_instance_kind") == "GPU":
            if not torch.cuda.is_available():
                raise RuntimeError(
                    "instance kind GPU was requested but torch {} reports no CUDA device".format(
                        torch.__version__
                    )
                )
            self.device = torch.device("cuda", int(args.get("model_instance_device_id", "0")))

        self.module = torch.jit.load(header["file"], map_location=self.device)
        self.module.eval()
        self._map_inputs(config)
        self._map_outputs(config)

    def _map_inputs(self, config):
        inputs = [i["name"] for i in config.get("input", [])]
        # A sequence model also takes its control inputs and implicit-state inputs, in that order.
        seq = config.get("sequence_batching") or {}
        inputs += [c["name"] for c in seq.get("control_input", []) if c.get("name")]
        inputs += [s["input_name"] for s in seq.get("state", []) if s.get("input_name")]
        if not inputs:
            raise ValueError(
                "model configuration must contain at least one input, none were specified."
            )
        arguments = list(self.module.forward.schema.arguments)
        if arguments and arguments[0].type.kind() == "ClassType":
            arguments = arguments[1:]
        if len(arguments) == 1 and arguments[0].type.kind() == "DictType":
            self.dict_input = True
            self.input_position = {name: name for name in inputs}
            return
        for a in arguments:
            if a.type.kind() not in ("TensorType", "ListType", "OptionalType"):
                raise ValueError(
                    "An input of type '{}' was detected in the model. Only a single input of type "
                    "Dict(str, Tensor) or input(s) of type Tensor are supported.".format(a.type)
                )
        if len(arguments) != len(inputs):
            raise ValueError(
                "unable to load model '{}', configuration expects {} inputs, model provides {}".format(
                    self.model_name, len(inputs), len(arguments)
                )
            )
        self.input_count = len(arguments)
        names = [a.name for a in arguments]
        if all(n in names for n in inputs):
            self.input_position = {n: names.index(n) for n in inputs}
            return
        indexes = [_index_of(n) for n in inputs]
        if all(i is not None for i in indexes) and sorted(indexes) == list(range(len(inputs))):
            self.input_position = dict(zip(inputs, indexes))
            return
        self.input_position = {n: i for i, n in enumerate(inputs)}

    def _map_outputs(self, config):
        outputs = list(config.get("output", []))
        seq = config.get("sequence_batching") or {}
        outputs += [
            {"name": s["output_name"], "data_type": s.get("data_type", "")}
            for s in seq.get("state", [])
            if s.get("output_name")
        ]
        names = [o["name"] for o in outputs]
        indexes = [_index_of(n) for n in names]
        if names and all(i is not None for i in indexes):
            self.output_index = dict(zip(names, indexes))
        else:
            self.output_index = {n: i for i, n in enumerate(names)}
        self.output_dtype = {o["name"]: _protocol_of_config(o.get("data_type", "")) for o in outputs}

    def _to_torch(self, meta, buf):
        datatype = meta["d"]
        if datatype not in _NUMPY_OF_PROTOCOL:
            raise ValueError(
                "input '{}' has data type {}, which this server cannot pass to TorchScript".format(
                    meta["n"], datatype
                )
            )
        arr = np.frombuffer(buf, dtype=_NUMPY_OF_PROTOCOL[datatype]).reshape(meta["s"])
        t = torch.from_numpy(arr)
        if datatype == "BF16":
            t = t.view(torch.bfloat16)
        if self.device.type != "cpu":
            t = t.to(self.device)
        return t

    def on_execute(self, header, buffers):
        try:
            result = self._forward(header, buffers)
            metas, out = self._collect(result, header.get("o", []))
        except Exception as exc:
            self.stub.send_error(exc, "batch_error")
            return
        self.stub.send({"t": "outputs", "o": metas}, out)

    def _forward(self, header, buffers):
        if self.dict_input:
            feed = {}
            for m in header["i"]:
                feed[m["n"]] = self._to_torch(m, buffers[m["b"]])
            args = (feed,)
        else:
            slots = [None] * self.input_count
            for m in header["i"]:
                pos = self.input_position.get(m["n"])
                if pos is None:
                    raise ValueError("unexpected input '{}'".format(m["n"]))
                slots[pos] = self._to_torch(m, buffers[m["b"]])
            args = tuple(slots)
        if self.inference_mode:
            with torch.inference_mode():
                return self.module(*args)
        with torch.no_grad():
            return self.module(*args)

    def _collect(self, result, requested):
        metas = []
        out = []
        for name in requested:
            value = self._pick(result, name)
            if not isinstance(value, torch.Tensor):
                raise TypeError(
                    "output '{}' of model '{}' is a {}, not a tensor".format(
                        name, self.model_name, type(value).__name__
                    )
                )
            value = value.detach()
            if value.device.type != "cpu":
                value = value.cpu()
            value = value.contiguous()
            datatype = _PROTOCOL_OF_TORCH.get(value.dtype)
            expected = self.output_dtype.get(name)
            if datatype != expected:
                raise TypeError(
                    "unexpected datatype TYPE_{} for inference output '{}', expecting TYPE_{}".format(
                        datatype or str(value.dtype), name, expected
                    )
                )
            if datatype == "BF16":
                value = value.view(torch.int16)
            arr = value.numpy()
            metas.append({"n": name, "d": datatype, "s": list(arr.shape), "b": len(out)})
            out.append(arr.reshape(-1).view(np.uint8))
        return metas, out

    def _pick(self, result, name):
        if isinstance(result, dict):
            if name not in result:
                raise KeyError(
                    "model '{}' returned no output '{}' (it returned {})".format(
                        self.model_name, name, sorted(result)
                    )
                )
            return result[name]
        index = self.output_index.get(name, 0)
        if isinstance(result, (tuple, list)):
            if index >= len(result):
                raise IndexError(
                    "output '{}' maps to position {} but model '{}' returned {} outputs".format(
                        name, index, self.model_name, len(result)
                    )
                )
            return result[index]
        if index != 0:
            raise IndexError(
                "output '{}' maps to position {} but model '{}' returned a single tensor".format(
                    name, index, self.model_name
                )
            )
        return result

    def on_is_ready(self, _header, _buffers):
        self.stub.send({"t": "ready", "v": self.module is not None})

    def on_finalize(self, _header, _buffers):
        self.module = None
        self.stub.send({"t": "ok"})


__all__ = ["TorchScriptRunner", "error_line"]
