"""Worker process for Nereid's python and pytorch backends.

One process serves one model instance. It talks to the server over two
pipes: fd 3 carries commands in, fd 4 carries replies, BLS calls and log
records out. stdout/stderr are left to the model (the server logs them).

A third pipe, fd 5, carries only cancellation notices for requests of
decoupled models; it is read without blocking whenever a model asks
is_cancelled(), from whichever thread asks.

Every message is a frame:
    u32 LE body length | body
    body = u32 LE header length | header (JSON) | pad to 8 | buffer | pad to 8 | ...
The header's "b" lists the byte length of each buffer. Tensor bytes travel
as raw buffers and become numpy arrays with numpy.frombuffer (no per-element
work except for BYTES, which numpy can only hold as objects).

Usage: nereid_stub.py --mode python|torch
"""

import json
import os
import select
import struct
import sys
import threading
import traceback

FD_IN = 3
FD_OUT = 4
FD_CANCEL = 5
_U32 = struct.Struct("<I")
_U32X2 = struct.Struct("<II")
_ZEROS = bytes(8)
_MAX_IOV = 512


def _pad(n):
    return (-n) & 7


def error_line(exc):
    """The last line of the exception's traceback, e.g. "ValueError: boom"."""
    lines = traceback.format_exception_only(type(exc), exc)
    return lines[-1].strip() if lines else repr(exc)


def error_traceback(exc):
    return "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))


class Pipe:
    """Reads and writes frames on the two command pipes."""

    def __init__(self, rfd, wfd):
        self.rfd = rfd
        self.wfd = wfd
        self.buf = bytearray()
        self.pos = 0
        # Response senders write from the model's own threads too. Reentrant:
        # a sender released by the garbage collector mid-write writes again.
        self.write_lock = threading.RLock()

    def _available(self):
        return len(self.buf) - self.pos

    def _fill(self, n):
        while self._available() < n:
            chunk = os.read(self.rfd, 1 << 16)
            if not chunk:
                raise EOFError("command pipe closed")
            if self.pos:
                del self.buf[: self.pos]
                self.pos = 0
            self.buf += chunk

    def has_frame(self):
        """Whether a whole frame is already buffered (no system call needed)."""
        avail = self._available()
        if avail < 4:
            return False
        return avail >= 4 + _U32.unpack_from(self.buf, self.pos)[0]

    def read_frame(self):
        """Returns (header dict, [memoryview per buffer]); raises EOFError at end of input."""
        self._fill(4)
        (n,) = _U32.unpack_from(self.buf, self.pos)
        self.pos += 4
        avail = self._available()
        if avail >= n:
            body = self.buf[self.pos : self.pos + n]
            self.pos += n
            if self.pos == len(self.buf):
                self.buf.clear()
                self.pos = 0
        else:
            body = bytearray(n)
            mv = memoryview(body)
            mv[:avail] = memoryview(self.buf)[self.pos :]
            self.buf.clear()
            self.pos = 0
            off = avail
            while off < n:
                got = os.readv(self.rfd, [mv[off:]])
                if got == 0:
                    raise EOFError("command pipe closed mid-frame")
                off += got
        mv = memoryview(body)
        (hlen,) = _U32.unpack_from(body, 0)
        header = json.loads(bytes(mv[4 : 4 + hlen]))
        off = 4 + hlen
        off += _pad(off)
        buffers = []
        for length in header.get("b", ()):
            buffers.append(mv[off : off + length])
            off += length
            off += _pad(off)
        return header, buffers

    def write_frame(self, header, buffers=()):
        with self.write_lock:
            self._write_frame(header, buffers)

    def _write_frame(self, header, buffers):
        views = [memoryview(b).cast("B") if not isinstance(b, bytes) else b for b in buffers]
        header["b"] = [len(v) for v in views]
        hj = json.dumps(header, separators=(",", ":")).encode("utf-8")
        parts = [None, hj]
        size = 4 + len(hj)
        p = _pad(size)
        if p:
            parts.append(_ZEROS[:p])
            size += p
        for v in views:
            if len(v):
                parts.append(v)
                size += len(v)
                p = _pad(size)
                if p:
                    parts.append(_ZEROS[:p])
                    size += p
        parts[0] = _U32X2.pack(size, len(hj))
        total = size + 4
        written = 0
        if len(parts) <= _MAX_IOV:
            written = os.writev(self.wfd, parts)
            if written == total:
                return  # the usual case: one system call
        self._write_rest(parts, written)

    def _write_rest(self, parts, skip):
        """Writes what is left after `skip` bytes went out (partial write, or too many parts)."""
        views = []
        for part in parts:
            n = len(part)
            if skip >= n:
                skip -= n
                continue
            views.append(memoryview(part)[skip:] if skip else part)
            skip = 0
        while views:
            written = os.writev(self.wfd, views[:_MAX_IOV])
            while written and views:
                n = len(views[0])
                if written >= n:
                    written -= n
                    views.pop(0)
                else:
                    views[0] = memoryview(views[0])[written:]
                    written = 0


class CancelNotices:
    """Stream keys the server cancelled, read from fd 5 without blocking."""

    def __init__(self, fd):
        self.fd = fd
        self.lock = threading.Lock()
        self.buf = bytearray()
        self.keys = set()
        try:
            os.set_blocking(fd, False)
        except OSError:
            self.fd = None

    def is_cancelled(self, key):
        with self.lock:
            self._drain()
            return key in self.keys

    def forget(self, key):
        with self.lock:
            self.keys.discard(key)

    def _drain(self):
        if self.fd is None:
            return
        while True:
            try:
                chunk = os.read(self.fd, 1 << 12)
            except BlockingIOError:
                break
            except OSError:
                self.fd = None
                break
            if not chunk:
                self.fd = None
                break
            self.buf += chunk
        # Each notice is a frame whose header is {"t": "cancel", "k": key}.
        while len(self.buf) >= 8:
            (n,) = _U32.unpack_from(self.buf, 0)
            if len(self.buf) < 4 + n:
                break
            (hlen,) = _U32.unpack_from(self.buf, 4)
            header = json.loads(bytes(self.buf[8 : 8 + hlen]))
            del self.buf[: 4 + n]
            key = header.get("k")
            if key is not None:
                self.keys.add(key)


class BlsStream:
    """Responses of one BLS request on a decoupled model, as they arrive."""

    __slots__ = ("items", "finished", "future")

    def __init__(self):
        self.items = []
        self.finished = False
        self.future = None


class Stub:
    """The command loop; the mode-specific runner does the model work."""

    def __init__(self, pipe, mode):
        self.pipe = pipe
        self.mode = mode
        self.runner = None
        self.next_bls_id = 1
        self.pending = {}  # BLS id -> result slot (list, BlsStream) or asyncio future
        # Only the main thread reads the command pipe; other threads waiting
        # for a BLS result sleep on this condition until it has read theirs.
        self.main_thread = threading.current_thread()
        self.results = threading.Condition()
        self.loop = None
        self._wake = None  # pipe the event loop thread writes to when a coroutine ends
        self.background = set()  # futures of coroutines running without a waiter
        self.cancels = CancelNotices(FD_CANCEL)
        # The trace of the batch being executed when it holds exactly one traced request:
        # BLS calls that name no trace join it (0: none).
        self.batch_trace = 0

    def is_cancelled(self, key):
        return self.cancels.is_cancelled(key)

    # -- replies and logging

    def send(self, header, buffers=()):
        self.pipe.write_frame(header, buffers)

    def log(self, level, message):
        self.send({"t": "log", "l": level, "m": message})

    def send_error(self, exc, kind="error"):
        self.send({"t": kind, "m": error_line(exc), "tb": error_traceback(exc)})

    # -- main loop

    def serve(self):
        while True:
            try:
                header, buffers = self.pipe.read_frame()
            except EOFError:
                return
            t = header.get("t")
            if t == "bls_result":
                self._resolve_bls(header, buffers)
                continue
            if t == "exit":
                return
            handler = getattr(self.runner, "on_" + t, None)
            if handler is None:
                self.send({"t": "error", "m": "unknown command '{}'".format(t)})
                continue
            try:
                handler(header, buffers)
            except Exception as exc:  # a runner bug; the command still gets an answer
                self.send_error(exc)
            if t == "finalize":
                return

    # -- asyncio support for `async def execute` and BLS async_exec
    #
    # As in Triton's stub, coroutines run on one event loop that a daemon
    # thread runs forever. A decoupled model's execute() coroutine runs in
    # the background (execute returns at once, so the next request's
    # coroutine runs alongside it); any other coroutine is waited for, the
    # main thread serving BLS results meanwhile.

    def event_loop(self):
        import asyncio

        if self.loop is None:
            self.loop = asyncio.new_event_loop()
            asyncio.set_event_loop(self.loop)
            r, w = os.pipe()
            os.set_blocking(r, False)
            self._wake = (r, w)
            threading.Thread(target=self.loop.run_forever, name="asyncio", daemon=True).start()
        return self.loop

    def run_coroutine(self, coro):
        """Runs `coro` on the event loop and returns its result (raises what it raised)."""
        import asyncio

        future = asyncio.run_coroutine_threadsafe(coro, self.event_loop())
        if threading.current_thread() is not self.main_thread:
            return future.result()
        wake_r, wake_w = self._wake
        future.add_done_callback(lambda _f: os.write(wake_w, b"."))
        while not future.done():
            if self.pipe.has_frame():
                self._dispatch_during_call(*self._read_during_call())
                continue
            ready, _, _ = select.select([self.pipe.rfd, wake_r], [], [])
            if wake_r in ready:
                try:
                    os.read(wake_r, 64)
                except BlockingIOError:
                    pass
            if self.pipe.rfd in ready:
                self._dispatch_during_call(*self._read_during_call())
        return future.result()

    def run_coroutine_background(self, coro, on_error):
        """Starts `coro` on the event loop without waiting; `on_error(exc)` runs if it raises."""
        import asyncio

        future = asyncio.run_coroutine_threadsafe(coro, self.event_loop())
        self.background.add(future)

        def done(f):
            self.background.discard(f)
            if f.cancelled():
                return
            exc = f.exception()
            if exc is not None:
                on_error(exc)

        future.add_done_callback(done)

    def _read_during_call(self):
        try:
            return self.pipe.read_frame()
        except EOFError:
            # the server is gone: nobody is waiting for this request any more
            os._exit(0)

    def _dispatch_during_call(self, header, buffers):
        if header.get("t") == "bls_result":
            self._resolve_bls(header, buffers)
        else:
            raise RuntimeError(
                "unexpected '{}' command while a request is executing".format(header.get("t"))
            )

    def _resolve_bls(self, header, buffers):
        bls_id = header.get("id")
        with self.results:
            slot = self.pending.get(bls_id)
            if isinstance(slot, BlsStream):
                slot.items.append((header, buffers))
                if header.get("fin", True):
                    del self.pending[bls_id]
                    slot.finished = True
                    if slot.future is not None:
                        slot.future.get_loop().call_soon_threadsafe(_settle, slot.future, None)
                self.results.notify_all()
                return
            slot = self.pending.pop(bls_id, None)
            if slot is None:
                return
            if isinstance(slot, list):
                slot.append((header, buffers))
                self.results.notify_all()
            else:
                slot.get_loop().call_soon_threadsafe(_settle, slot, (header, buffers))

    def _wait_for(self, ready):
        """Until ready() holds: the main thread reads the pipe, other threads wait for it to."""
        if threading.current_thread() is self.main_thread:
            while not ready():
                self._dispatch_during_call(*self._read_during_call())
            return
        with self.results:
            while not ready():
                self.results.wait()

    # -- BLS (called through pb_utils)

    def _send_bls(self, request, slot, decoupled=False):
        """Sends a BLS request; its result goes to `slot` (list, BlsStream or future)."""
        import triton_python_backend_utils as pb
        from nereid_codec import encode_tensors

        if not request.model_name():
            raise pb.TritonModelException("BLS request needs a model_name")
        metas, buffers = encode_tensors(request.inputs())
        version = request.model_version()
        with self.results:
            bls_id = self.next_bls_id
            self.next_bls_id += 1
            self.pending[bls_id] = slot
        trace_handle = getattr(request.trace(), "_handle", 0) or self.batch_trace
        self.send(
            {
                "t": "bls",
                "id": bls_id,
                "tr": trace_handle,
                "model": request.model_name(),
                "version": "" if version in (None, -1, "-1") else str(version),
                "rid": request.request_id(),
                "c": request.correlation_id(),
                "f": request.flags(),
                "to": request.timeout(),
                "p": request.parameters(),
                "o": list(request.requested_output_names()),
                "i": metas,
                "dec": decoupled,
            },
            buffers,
        )
        return bls_id

    def bls_exec(self, request):
        from nereid_codec import decode_bls_response

        slot = []
        self._send_bls(request, slot)
        self._wait_for(lambda: slot)
        return decode_bls_response(*slot[0])

    def bls_exec_decoupled(self, request):
        """An iterator over the responses; it waits for each as it is advanced."""
        stream = BlsStream()
        self._send_bls(request, stream, True)
        return BlsResponseIterator(self, stream)

    async def bls_async_exec_decoupled(self, request):
        """Waits for every response (up to the final flag), then iterates them."""
        import asyncio

        stream = BlsStream()
        stream.future = asyncio.get_running_loop().create_future()
        self._send_bls(request, stream, True)
        await stream.future
        return BlsResponseIterator(self, stream)

    async def bls_async_exec(self, request):
        import asyncio
        from nereid_codec import decode_bls_response

        future = asyncio.get_running_loop().create_future()
        self._send_bls(request, future)
        header, buffers = await future
        return decode_bls_response(header, buffers)


def _settle(future, value):
    if not future.done():
        future.set_result(value)


class BlsResponseIterator:
    """Iterates a decoupled BLS request's responses; the last may hold no outputs."""

    def __init__(self, stub, stream):
        self._stub = stub
        self._stream = stream

    def __iter__(self):
        return self

    def __next__(self):
        from nereid_codec import decode_bls_response

        stream = self._stream
        self._stub._wait_for(lambda: stream.items or stream.finished)
        with self._stub.results:
            if not stream.items:
                raise StopIteration
            header, buffers = stream.items.pop(0)
        return decode_bls_response(header, buffers)


# ------------------------------------------------------------------ startup


def _import_hint(module, package_hint, exc):
    return "{} is not importable by {} ({}): install {}".format(
        module, sys.executable, error_line(exc), package_hint
    )


def main():
    mode = "python"
    if "--mode" in sys.argv:
        mode = sys.argv[sys.argv.index("--mode") + 1]
    pipe = Pipe(FD_IN, FD_OUT)
    here = os.path.dirname(os.path.abspath(__file__))
    if here not in sys.path:
        sys.path.insert(0, here)
    try:
        import numpy
    except Exception as exc:
        pipe.write_frame(
            {"t": "fatal", "m": _import_hint("numpy", "python3-numpy (Debian) or pip install numpy", exc)}
        )
        return 1
    versions = {"python": sys.version.split()[0], "numpy": numpy.__version__}
    stub = Stub(pipe, mode)
    if mode == "torch":
        try:
            import torch
        except Exception as exc:
            pipe.write_frame(
                {"t": "fatal", "m": _import_hint("torch", "python3-torch (Debian) or pip install torch", exc)}
            )
            return 1
        versions["torch"] = torch.__version__
        from nereid_torch import TorchScriptRunner

        stub.runner = TorchScriptRunner(stub)
    else:
        import triton_python_backend_utils as pb

        pb._set_channel(stub)
        from nereid_python import PythonModelRunner

        stub.runner = PythonModelRunner(stub)
    pipe.write_frame({"t": "hello", "pid": os.getpid(), "versions": versions})
    stub.serve()
    return 0


if __name__ == "__main__":
    sys.exit(main())
