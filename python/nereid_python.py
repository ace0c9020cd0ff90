"""Runs a model.py (class TritonPythonModel) inside the worker process."""

import importlib.util
import inspect
import json
import os
import sys
import threading

import triton_python_backend_utils as pb
from nereid_codec import decode_tensor, encode_tensors
from nereid_stub import error_line, error_traceback


def load_model_class(path):
    """Imports model.py and returns its TritonPythonModel class."""
    directory = os.path.dirname(os.path.abspath(path))
    if directory not in sys.path:
        sys.path.insert(0, directory)
    spec = importlib.util.spec_from_file_location("model", path)
    if spec is None or spec.loader is None:
        raise ImportError("cannot import {}".format(path))
    module = importlib.util.module_from_spec(spec)
    sys.modules["model"] = module
    spec.loader.exec_module(module)
    cls = getattr(module, "TritonPythonModel", None)
    if cls is None:
        raise AttributeError(
            "{} does not define class TritonPythonModel".format(os.path.basename(path))
        )
    return cls


_FINAL = pb.TRITONSERVER_RESPONSE_COMPLETE_FINAL


class ResponseSender:
    """Sends the responses of one request of a decoupled model, from any thread.

    A sender released (garbage collected) before it sent the final flag ends
    its request with an error, so that the client is not left waiting.
    """

    def __init__(self, stub, key, request_id):
        self._stub = stub
        self._key = key
        self._request_id = request_id
        self._closed = False
        self._lock = threading.Lock()

    def send(self, response=None, flags=0):
        if flags != _FINAL and flags != 0:
            raise pb.TritonModelException("Unable to send response. Unsupported flag provided.")
        if flags == 0 and response is None:
            raise pb.TritonModelException(
                "Inference Response object must be provided when the response flags is set to zero."
            )
        if response is not None and not isinstance(response, pb.InferenceResponse):
            raise pb.TritonModelException(
                "send() expects a pb_utils.InferenceResponse, got {}".format(type(response).__name__)
            )
        final = flags == _FINAL
        with self._lock:
            if self._closed:
                raise pb.TritonModelException(
                    "Unable to send response. Response sender has been closed."
                )
            if final:
                self._closed = True
        header = {"t": "s", "k": self._key, "f": 1 if final else 0}
        buffers = []
        if response is not None:
            header.update(PythonModelRunner._encode_response(response, buffers))
        self._stub.send(header, buffers)
        if final:
            self._stub.cancels.forget(self._key)

    def is_cancelled(self):
        return self._stub.is_cancelled(self._key)

    def _close(self):
        """Closed without a message (the server already ends the request)."""
        with self._lock:
            was_open = not self._closed
            self._closed = True
        return was_open

    def __del__(self):
        if self._closed:
            return
        self._closed = True
        try:
            self._stub.send(
                {
                    "t": "s",
                    "k": self._key,
                    "f": 1,
                    "e": {
                        "m": "the model released the response sender of request '{}' without "
                        "sending TRITONSERVER_RESPONSE_COMPLETE_FINAL".format(self._request_id),
                        "c": "INTERNAL",
                    },
                }
            )
        except Exception:
            pass


class PythonModelRunner:
    def __init__(self, stub):
        self.stub = stub
        self.model = None
        self.model_name = ""
        self.model_version = -1
        self.decoupled = False

    def _call(self, fn, *args):
        result = fn(*args)
        if inspect.iscoroutine(result):
            result = self.stub.run_coroutine(result)
        return result

    def on_init(self, header, _buffers):
        args = header["args"]
        self.model_name = args.get("model_name", "")
        try:
            self.decoupled = pb.using_decoupled_model_transaction_policy(
                json.loads(args.get("model_config", "{}"))
            )
        except ValueError:
            self.decoupled = False
        try:
            self.model_version = int(args.get("model_version", "-1"))
        except ValueError:
            self.model_version = -1
        try:
            cls = load_model_class(header["file"])
            model = cls()
            if not callable(getattr(model, "execute", None)):
                raise AttributeError("TritonPythonModel has no execute() method")
            init = getattr(model, "initialize", None)
            if callable(init):
                self._call(init, args)
        except BaseException as exc:
            if isinstance(exc, KeyboardInterrupt):
                raise
            self.stub.send_error(exc)
            return
        self.model = model
        self.stub.send({"t": "ok"})

    def on_auto_complete(self, header, _buffers):
        try:
            cls = load_model_class(header["file"])
            hook = getattr(cls, "auto_complete_config", None)
            if hook is None:
                self.stub.send({"t": "config", "config": None})
                return
            config = pb.ModelConfig(header["config"])
            result = hook(config)
            if not isinstance(result, pb.ModelConfig):
                raise TypeError(
                    "auto_complete_config() must return a pb_utils.ModelConfig, got {}".format(
                        type(result).__name__
                    )
                )
            self.stub.send({"t": "config", "config": json.dumps(result.as_dict())})
        except BaseException as exc:
            self.stub.send_error(exc)

    def on_execute(self, header, buffers):
        try:
            requests = []
            traced = [r["tr"] for r in header["r"] if r.get("tr")]
            self.stub.batch_trace = traced[0] if len(traced) == 1 else 0
            for r in header["r"]:
                inputs = [decode_tensor(m, buffers[m["b"]]) for m in r["i"]]
                trace = pb.InferenceTrace(r["tr"], r.get("tc")) if r.get("tr") else None
                requests.append(
                    pb.InferenceRequest(
                        request_id=r.get("id", ""),
                        correlation_id=r.get("c", 0),
                        inputs=inputs,
                        requested_output_names=r.get("o", []),
                        model_name=self.model_name,
                        model_version=self.model_version,
                        flags=r.get("f", 0),
                        trace=trace,
                        parameters=r.get("p") or "{}",
                    )
                )
            if self.decoupled:
                for req, r in zip(requests, header["r"]):
                    req._response_sender = ResponseSender(self.stub, r["k"], req.request_id())
                self._execute_decoupled(requests)
                return
            responses = self._call(self.model.execute, requests)
            self._check_responses(requests, responses)
        except BaseException as exc:
            if isinstance(exc, KeyboardInterrupt):
                raise
            self.stub.send_error(exc, "batch_error")
            return
        out = []
        buffers_out = []
        for resp in responses:
            out.append(self._encode_response(resp, buffers_out))
        self.stub.send({"t": "responses", "r": out}, buffers_out)

    def _execute_decoupled(self, requests):
        """Runs execute(); responses go through the senders, the reply only reports a failure."""
        failure = None
        try:
            result = self.model.execute(requests)
            if inspect.iscoroutine(result):
                # Triton runs it in the background: execute returns now and the
                # instance takes the next request while this one still streams.
                self.stub.run_coroutine_background(result, lambda exc: self._background_failed(requests, exc))
                result = None
            if result is not None:
                raise pb.TritonModelException(
                    "Python model '{}' is using the decoupled mode and the execute function "
                    "must return None.".format(self.model_name)
                )
        except Exception as exc:
            failure = "Failed to process the request(s) for model '{}', message: {}".format(
                self.model_name, error_line(exc)
            )
            tb = error_traceback(exc)
            exc = None
            self.stub.send({"t": "log", "l": 2, "m": failure + "\n" + tb})
        out = []
        for req in requests:
            sender = req._response_sender
            if failure is not None and sender._close():
                out.append({"e": {"m": failure, "c": "INTERNAL"}})
            else:
                out.append({})
        self.stub.send({"t": "responses", "r": out})

    def _background_failed(self, requests, exc):
        """An `async def execute` of a decoupled model raised after execute returned."""
        failure = "Failed to process the request(s) for model '{}', message: {}".format(
            self.model_name, error_line(exc)
        )
        self.stub.send({"t": "log", "l": 2, "m": failure + "\n" + error_traceback(exc)})
        # Requests it left open end with the error instead of waiting forever.
        for req in requests:
            sender = req._response_sender
            if sender._close():
                self.stub.send({"t": "s", "k": sender._key, "f": 1, "e": {"m": failure, "c": "INTERNAL"}})
                self.stub.cancels.forget(sender._key)

    @staticmethod
    def _check_responses(requests, responses):
        if responses is None:
            raise pb.TritonModelException(
                "execute() returned None; it must return a list with one InferenceResponse per request"
            )
        if not isinstance(responses, (list, tuple)):
            raise pb.TritonModelException(
                "execute() must return a list of InferenceResponse, got {}".format(
                    type(responses).__name__
                )
            )
        if len(responses) != len(requests):
            raise pb.TritonModelException(
                "execute() returned {} responses for {} requests; it must return exactly one "
                "InferenceResponse per request".format(len(responses), len(requests))
            )
        for i, resp in enumerate(responses):
            if not isinstance(resp, pb.InferenceResponse):
                raise pb.TritonModelException(
                    "execute() returned a {} at position {} where an InferenceResponse was "
                    "expected".format(type(resp).__name__, i)
                )

    @staticmethod
    def _encode_response(resp, buffers_out):
        item = {}
        try:
            if resp.has_error():
                err = resp.error()
                item["e"] = {
                    "m": err.message(),
                    "c": pb._ERROR_CODE_NAMES.get(err.code(), "INTERNAL"),
                }
                return item
            mark = len(buffers_out)
            try:
                metas, _ = encode_tensors(resp.output_tensors(), buffers_out)
            except Exception:
                del buffers_out[mark:]
                raise
            params = resp.parameters()
            if params and params != "{}":
                item["p"] = params
            item["o"] = metas
        except Exception as exc:
            item = {"e": {"m": error_line(exc), "c": "INTERNAL"}}
        return item

    def on_is_ready(self, _header, _buffers):
        try:
            fn = getattr(self.model, "is_ready", None)
            ready = True if fn is None else bool(self._call(fn))
            self.stub.send({"t": "ready", "v": ready})
        except Exception as exc:
            self.stub.send({"t": "ready", "v": False, "m": error_line(exc)})

    def on_finalize(self, _header, _buffers):
        try:
            fn = getattr(self.model, "finalize", None)
            if callable(fn):
                self._call(fn)
            self.stub.send({"t": "ok"})
        except Exception as exc:
            self.stub.send_error(exc)


__all__ = ["PythonModelRunner", "load_model_class", "error_traceback"]
