"""The `triton_python_backend_utils` module (imported by models as pb_utils).

Nereid's own implementation of the Python backend's model-facing API. The
names, signatures and behaviours follow Triton's documented contract so that
an unchanged model.py runs here. The worker process (nereid_stub.py) plugs
itself in through `_set_channel` to serve BLS calls and log messages.
"""

import json
import struct

import numpy as np

# ---------------------------------------------------------------- constants

TRITONSERVER_REQUEST_FLAG_SEQUENCE_START = 1
TRITONSERVER_REQUEST_FLAG_SEQUENCE_END = 2
TRITONSERVER_RESPONSE_COMPLETE_FINAL = 1
TRITONSERVER_REQUEST_RELEASE_ALL = 1
TRITONSERVER_REQUEST_RELEASE_RESCHEDULE = 2
TRITONSERVER_MEMORY_GPU = 2
TRITONSERVER_MEMORY_CPU = 0

# config enum value <-> protocol name <-> numpy type
_DTYPES = [
    # (enum, config name, protocol name, numpy type)
    (1, "TYPE_BOOL", "BOOL", np.bool_),
    (2, "TYPE_UINT8", "UINT8", np.uint8),
    (3, "TYPE_UINT16", "UINT16", np.uint16),
    (4, "TYPE_UINT32", "UINT32", np.uint32),
    (5, "TYPE_UINT64", "UINT64", np.uint64),
    (6, "TYPE_INT8", "INT8", np.int8),
    (7, "TYPE_INT16", "INT16", np.int16),
    (8, "TYPE_INT32", "INT32", np.int32),
    (9, "TYPE_INT64", "INT64", np.int64),
    (10, "TYPE_FP16", "FP16", np.float16),
    (11, "TYPE_FP32", "FP32", np.float32),
    (12, "TYPE_FP64", "FP64", np.float64),
    (13, "TYPE_STRING", "BYTES", np.object_),
]
_ENUM_TO_NUMPY = {e: t for e, _, _, t in _DTYPES}
_CONFIG_NAME_TO_NUMPY = {c: t for _, c, _, t in _DTYPES}
_CONFIG_NAME_TO_NUMPY["TYPE_BOOL"] = bool
_PROTOCOL_TO_NUMPY = {p: t for _, _, p, t in _DTYPES}
_PROTOCOL_TO_NUMPY["BF16"] = np.uint16  # numpy has no bfloat16: raw 16-bit words
_NUMPY_TO_ENUM = {np.dtype(t): e for e, _, _, t in _DTYPES}
_NUMPY_TO_PROTOCOL = {np.dtype(t): p for _, _, p, t in _DTYPES}
_ENUM_TO_PROTOCOL = {e: p for e, _, p, _ in _DTYPES}
_ENUM_TO_PROTOCOL[14] = "BF16"
_PROTOCOL_TO_ENUM = {p: e for e, p in _ENUM_TO_PROTOCOL.items()}


def triton_string_to_numpy(triton_type_string):
    """numpy type for a config data type name such as "TYPE_FP32"."""
    return _CONFIG_NAME_TO_NUMPY[triton_type_string]


def triton_to_numpy_type(data_type):
    """numpy type for a DataType enum value (11 -> np.float32); None if unknown."""
    return _ENUM_TO_NUMPY.get(data_type)


def numpy_to_triton_type(data_type):
    """DataType enum value for a numpy type (np.float32 -> 11); None if unknown."""
    if data_type is bytes or data_type is np.bytes_:
        return 13
    try:
        dt = np.dtype(data_type)
    except TypeError:
        return None
    if dt.type is np.bytes_:
        return 13
    return _NUMPY_TO_ENUM.get(dt)


def _protocol_datatype(array):
    dt = array.dtype
    if dt.type is np.bytes_ or dt.type is np.str_:
        return "BYTES"
    name = _NUMPY_TO_PROTOCOL.get(dt)
    if name is None:
        raise TritonModelException(
            "unsupported numpy data type '{}' for a tensor".format(dt)
        )
    return name


def serialize_byte_tensor(input_tensor):
    """Flattens a tensor of bytes/str objects (C order) into length-prefixed bytes.

    Returns a bytes object, () for an empty tensor, or None when the tensor is
    not of object or bytes dtype.
    """
    if input_tensor.size == 0:
        return ()
    kind = input_tensor.dtype.type
    if not (input_tensor.dtype == np.object_ or kind is np.bytes_ or kind is np.str_):
        return None
    parts = []
    for item in input_tensor.reshape(-1, order="C"):
        if isinstance(item, (bytes, bytearray, memoryview)):
            b = bytes(item)
        elif isinstance(item, np.bytes_):
            b = bytes(item)
        else:
            b = str(item).encode("utf-8")
        parts.append(struct.pack("<I", len(b)))
        parts.append(b)
    return b"".join(parts)


def deserialize_bytes_tensor(encoded_tensor):
    """Splits length-prefixed bytes into a 1-D object array of bytes."""
    view = memoryview(encoded_tensor).cast("B")
    items = []
    offset = 0
    end = len(view)
    while offset < end:
        if offset + 4 > end:
            raise ValueError("truncated BYTES element length at byte {}".format(offset))
        (length,) = struct.unpack_from("<I", view, offset)
        offset += 4
        if offset + length > end:
            raise ValueError(
                "BYTES element declares {} bytes at byte {} but only {} remain".format(
                    length, offset - 4, end - offset
                )
            )
        items.append(bytes(view[offset : offset + length]))
        offset += length
    out = np.empty(len(items), dtype=np.object_)
    out[:] = items
    return out


# ------------------------------------------------------------------- errors


class TritonError:
    """An error carried by a response (not raised)."""

    UNKNOWN = 0
    INTERNAL = 1
    NOT_FOUND = 2
    INVALID_ARG = 3
    UNAVAILABLE = 4
    UNSUPPORTED = 5
    ALREADY_EXISTS = 6
    CANCELLED = 7

    def __init__(self, message, code=1):
        self._message = str(message)
        self._code = code

    def message(self):
        return self._message

    def code(self):
        return self._code

    def __str__(self):
        return self._message

    def __repr__(self):
        return "TritonError({!r}, {})".format(self._message, self._code)


_ERROR_CODE_NAMES = {
    TritonError.UNKNOWN: "UNKNOWN",
    TritonError.INTERNAL: "INTERNAL",
    TritonError.NOT_FOUND: "NOT_FOUND",
    TritonError.INVALID_ARG: "INVALID_ARG",
    TritonError.UNAVAILABLE: "UNAVAILABLE",
    TritonError.UNSUPPORTED: "UNSUPPORTED",
    TritonError.ALREADY_EXISTS: "ALREADY_EXISTS",
    TritonError.CANCELLED: "CANCELLED",
}
_ERROR_NAME_CODES = {v: k for k, v in _ERROR_CODE_NAMES.items()}


class TritonModelException(Exception):
    """Raise from initialize, execute or finalize to report a model error."""

    def message(self):
        return str(self)


# ------------------------------------------------------------------ tensors


class Tensor:
    """A named tensor backed by a numpy array (BYTES: an object array of bytes)."""

    __slots__ = ("_name", "_array", "_datatype")

    def __init__(self, name, array, _datatype=None):
        if not isinstance(name, str):
            raise TypeError("Tensor name must be a str, got {}".format(type(name)))
        if not isinstance(array, np.ndarray):
            array = np.asarray(array)
        self._name = name
        self._array = array
        self._datatype = _datatype or _protocol_datatype(array)

    def name(self):
        return self._name

    def as_numpy(self):
        return self._array

    def triton_dtype(self):
        return _PROTOCOL_TO_ENUM[self._datatype]

    def shape(self):
        return list(self._array.shape)

    def is_cpu(self):
        return True

    def to_dlpack(self):
        return self._array.__dlpack__()

    def __dlpack__(self, stream=None):
        return self._array.__dlpack__()

    def __dlpack_device__(self):
        return self._array.__dlpack_device__()

    @staticmethod
    def from_dlpack(name, capsule):
        if hasattr(capsule, "__dlpack__"):
            return Tensor(name, np.from_dlpack(capsule))
        try:
            import torch.utils.dlpack as tdl  # a bare capsule: let torch read it
        except ImportError as exc:
            raise TritonModelException(
                "Tensor.from_dlpack needs an object with __dlpack__ (or torch for a bare capsule)"
            ) from exc
        return Tensor(name, tdl.from_dlpack(capsule).cpu().numpy())

    def __repr__(self):
        return "Tensor(name={!r}, datatype={}, shape={})".format(
            self._name, self._datatype, list(self._array.shape)
        )


class PreferredMemory:
    def __init__(self, preferred_memory_type=TRITONSERVER_MEMORY_CPU, preferred_device_id=0):
        self.preferred_memory_type = preferred_memory_type
        self.preferred_device_id = preferred_device_id


class InferenceTrace:
    """A received request's trace (request.trace()): passed as InferenceRequest(trace=...), the BLS
    request is traced as its child. get_context() gives its W3C context as Triton does, a JSON string
    with "traceparent" (and "tracestate"), in opentelemetry mode; None otherwise."""

    def __init__(self, _handle=0, _context=None):
        self._handle = _handle if isinstance(_handle, int) else 0
        self._context = _context if isinstance(_context, str) and _context else None

    def get_context(self, mode="opentelemetry"):
        return self._context


# ------------------------------------------------------ requests, responses


def _parameters_json(parameters):
    if parameters is None:
        return "{}"
    if isinstance(parameters, str):
        return parameters
    if isinstance(parameters, dict):
        for k, v in parameters.items():
            if not isinstance(k, str) or not isinstance(v, (bool, int, str)):
                raise TritonModelException(
                    "parameters must map str to bool, int or str; got {!r}: {!r}".format(k, v)
                )
        return json.dumps(parameters)
    raise TritonModelException("parameters must be a dict or a JSON string")


class InferenceRequest:
    """A request received by execute(), or a BLS request built by the model."""

    def __init__(
        self,
        request_id="",
        correlation_id=0,
        inputs=None,
        requested_output_names=None,
        model_name=None,
        model_version=-1,
        flags=0,
        timeout=0,
        preferred_memory=None,
        trace=None,
        parameters=None,
    ):
        self._request_id = request_id
        self._correlation_id = correlation_id
        self._inputs = list(inputs) if inputs is not None else []
        self._requested_output_names = (
            list(requested_output_names) if requested_output_names is not None else []
        )
        self._model_name = model_name
        self._model_version = model_version
        self._flags = flags
        self._timeout = timeout
        self._preferred_memory = preferred_memory or PreferredMemory()
        self._trace = trace or InferenceTrace()
        self._parameters = _parameters_json(parameters)
        self._release_flags = TRITONSERVER_REQUEST_RELEASE_ALL
        self._response_sender = None  # set by the server for decoupled models

    def inputs(self):
        return self._inputs

    def request_id(self):
        return self._request_id

    def correlation_id(self):
        return self._correlation_id

    def flags(self):
        return self._flags

    def set_flags(self, flags):
        self._flags = flags

    def timeout(self):
        return self._timeout

    def parameters(self):
        return self._parameters

    def trace(self):
        return self._trace

    def model_name(self):
        return self._model_name

    def model_version(self):
        return self._model_version

    def requested_output_names(self):
        return self._requested_output_names

    def is_cancelled(self):
        """True once the client went away (requests of decoupled models)."""
        sender = self._response_sender
        return sender.is_cancelled() if sender is not None else False

    def set_release_flags(self, flags):
        self._release_flags = flags

    def get_response_sender(self):
        sender = self._response_sender
        if sender is None:
            raise TritonModelException(
                "get_response_sender() is only available to models with the decoupled "
                "transaction policy (model_transaction_policy { decoupled: true })"
            )
        return sender

    def exec(self, decoupled=False):
        """Runs the request on a model served by this server (BLS) and returns its response
        (decoupled=True: an iterator over its responses)."""
        if decoupled:
            return _require_channel().bls_exec_decoupled(self)
        return _require_channel().bls_exec(self)

    async def async_exec(self, decoupled=False):
        """Awaitable form of exec(); several may run concurrently."""
        if decoupled:
            return await _require_channel().bls_async_exec_decoupled(self)
        return await _require_channel().bls_async_exec(self)


class InferenceResponse:
    def __init__(self, output_tensors=None, error=None, parameters=None):
        self._output_tensors = list(output_tensors) if output_tensors is not None else []
        if error is not None and not isinstance(error, TritonError):
            error = TritonError(str(error))
        self._error = error
        self._parameters = _parameters_json(parameters)

    def output_tensors(self):
        return self._output_tensors

    def has_error(self):
        return self._error is not None

    def error(self):
        return self._error

    def parameters(self):
        return self._parameters


def get_input_tensor_by_name(inference_request, name):
    for t in inference_request.inputs():
        if t.name() == name:
            return t
    return None


def get_output_tensor_by_name(inference_response, name):
    for t in inference_response.output_tensors():
        if t.name() == name:
            return t
    return None


# ------------------------------------------------------------ config helpers


def get_input_config_by_name(model_config, name):
    for item in model_config.get("input", []):
        if item.get("name") == name:
            return item
    return None


def get_output_config_by_name(model_config, name):
    for item in model_config.get("output", []):
        if item.get("name") == name:
            return item
    return None


def using_decoupled_model_transaction_policy(model_config):
    policy = model_config.get("model_transaction_policy")
    return bool(policy and policy.get("decoupled", False))


class ModelConfig:
    """The configuration handed to auto_complete_config(): read it, fill it, return it."""

    _IO_KEYS = {"name", "data_type", "dims", "optional"}

    def __init__(self, model_config):
        if isinstance(model_config, str):
            model_config = json.loads(model_config)
        self._model_config = model_config

    def as_dict(self):
        return self._model_config

    def _model_name(self):
        return self._model_config.get("name", "")

    def set_max_batch_size(self, max_batch_size):
        current = self._model_config.get("max_batch_size", 0)
        if current > max_batch_size:
            raise ValueError(
                "configuration specified max_batch_size {}, but in auto-complete-config "
                "function for model '{}' specified max_batch_size {}".format(
                    current, self._model_name(), max_batch_size
                )
            )
        self._model_config["max_batch_size"] = max_batch_size

    def set_dynamic_batching(self):
        for other in ("sequence_batching", "ensemble_scheduling"):
            if other in self._model_config:
                raise ValueError(
                    "Configuration specified scheduling_choice as '{}', but auto-complete-config "
                    "function for model '{}' tries to set scheduling_choice as "
                    "'dynamic_batching'".format(other, self._model_name())
                )
        self._model_config.setdefault("dynamic_batching", {})

    def set_model_transaction_policy(self, transaction_policy_dict):
        for key in transaction_policy_dict:
            if key != "decoupled":
                raise ValueError(
                    "model transaction property in auto-complete-config function for model "
                    "'{}' contains property other than 'decoupled'".format(self._model_name())
                )
        policy = self._model_config.setdefault("model_transaction_policy", {})
        if "decoupled" in transaction_policy_dict:
            wanted = transaction_policy_dict["decoupled"]
            # As Triton: a value the configuration states (false included) is never changed.
            if "decoupled" in policy and policy["decoupled"] != wanted:
                raise ValueError(
                    "trying to change decoupled property in auto-complete-config for model "
                    "'{}', which is already set to '{}'.".format(self._model_name(), policy["decoupled"])
                )
            policy["decoupled"] = wanted

    def _add_io(self, kind, io):
        allowed = self._IO_KEYS if kind == "input" else {"name", "data_type", "dims"}
        name = io.get("name")
        for key in io:
            if key not in allowed:
                raise ValueError(
                    "{} '{}' in auto-complete-config function for model '{}' contains property "
                    "other than {}.".format(
                        kind, name, self._model_name(), ", ".join(sorted(allowed))
                    )
                )
        for key in ("name", "data_type", "dims"):
            if key not in io:
                raise ValueError(
                    "{} '{}' in auto-complete-config function for model '{}' is missing '{}' "
                    "property.".format(kind, name, self._model_name(), key)
                )
        entries = self._model_config.setdefault(kind, [])
        for existing in entries:
            if existing.get("name") != name:
                continue
            for key in ("data_type", "dims"):
                have = existing.get(key)
                if key == "dims":
                    unset = not have
                    same = [int(d) for d in (have or [])] == [int(d) for d in io[key]]
                else:
                    unset = have in (None, "", "TYPE_INVALID")
                    same = have == io[key]
                if unset:
                    existing[key] = io[key]
                elif not same:
                    raise ValueError(
                        "unable to load model '{}', configuration expects {} as {} of {} "
                        "'{}' but model provides {}".format(
                            self._model_name(), have, key, kind, name, io[key]
                        )
                    )
            if kind == "input" and "optional" in io:
                existing["optional"] = io["optional"]
            return
        entries.append(dict(io))

    def add_input(self, input):
        self._add_io("input", input)

    def add_output(self, output):
        self._add_io("output", output)


# ------------------------------------------------------------------ logging


class Logger:
    INFO = 0
    WARNING = 1
    ERROR = 2
    VERBOSE = 3

    @staticmethod
    def log(message, level=0):
        channel = _CHANNEL
        if channel is None:
            import sys

            print(message, file=sys.stderr)
            return
        channel.log(level, str(message))

    @staticmethod
    def log_info(message):
        Logger.log(message, Logger.INFO)

    @staticmethod
    def log_warn(message):
        Logger.log(message, Logger.WARNING)

    @staticmethod
    def log_error(message):
        Logger.log(message, Logger.ERROR)

    @staticmethod
    def log_verbose(message):
        Logger.log(message, Logger.VERBOSE)


# ------------------------------------------------------------------ metrics


class MetricFamily:
    """Custom metrics. Values are kept in the worker process; they are not exported
    to the server's /metrics endpoint."""

    COUNTER = 0
    GAUGE = 1
    HISTOGRAM = 2

    def __init__(self, name, description, kind):
        if kind not in (MetricFamily.COUNTER, MetricFamily.GAUGE, MetricFamily.HISTOGRAM):
            raise TritonModelException("unknown metric kind {!r}".format(kind))
        self.name = name
        self.description = description
        self.kind = kind

    def Metric(self, labels=None, buckets=None):
        if self.kind == MetricFamily.HISTOGRAM and not buckets:
            raise TritonModelException("a histogram metric needs buckets")
        return Metric(self, labels or {}, buckets)


class Metric:
    def __init__(self, family, labels, buckets):
        self._family = family
        self._labels = dict(labels)
        self._buckets = list(buckets) if buckets else None
        self._value = 0.0
        self._observations = []

    def increment(self, value):
        if self._family.kind != MetricFamily.COUNTER and self._family.kind != MetricFamily.GAUGE:
            raise TritonModelException("increment() is for counters and gauges")
        if self._family.kind == MetricFamily.COUNTER and value < 0:
            raise TritonModelException("a counter cannot decrease")
        self._value += value

    def set(self, value):
        if self._family.kind != MetricFamily.GAUGE:
            raise TritonModelException("set() is for gauges")
        self._value = float(value)

    def observe(self, value):
        if self._family.kind != MetricFamily.HISTOGRAM:
            raise TritonModelException("observe() is for histograms")
        self._observations.append(float(value))
        self._value += float(value)

    def value(self):
        return self._value


# --------------------------------------------------------- worker channel

_CHANNEL = None


def _set_channel(channel):
    global _CHANNEL
    _CHANNEL = channel


def _require_channel():
    if _CHANNEL is None:
        raise TritonModelException("BLS is only available while the model is served")
    return _CHANNEL
