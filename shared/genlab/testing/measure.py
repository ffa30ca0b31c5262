"""The measuring process: a zygote that forks one fresh process for each time or memory measurement (issue 39).

The grader starts it in the same sandbox as a student's kernel (``python -m genlab.testing.measure FD``, FD being
its end of a socket pair). It imports torch, genlab and IPython and runs the lab's setup cell, and nothing of any
student's; then it answers requests one at a time:

- ``setup``: the lab's setup cell, once;
- ``stage``: it forks a *stager*, which reads the inputs of the next measurements (the next frame), decodes them
  and holds them, so that every measured process inherits them without paying for them (shared, copy on write),
  each call with objects of its own; the zygote's own heap never holds them. The stager then answers
- ``fork``: a fresh process. It reads its job (the notebook's cells, the function, what to measure) from the
  channel only once the grader has moved it into a control group made for it, so the operating system counts
  its CPU time and memory from before any student code existed in it. The stager waits for it and answers with
  its exit status and the resource use ``wait4`` reports (what the grader uses where there are no cgroups);
- ``unstage``: the stager ends, and the zygote takes the next request.

Nothing here decides anything: the figures are read by the grader, from outside (``autograder.wall.measure``),
and the answers are checked there against the reference's.
"""
from __future__ import annotations

import gc
import json
import os
import socket
import struct
import sys
import traceback

from genlab.testing import wire

# safetensors' names for the dtypes genlab's wire format carries (wire._DTYPES)
_ST_DTYPES = {"float64": "F64", "float32": "F32", "float16": "F16", "bfloat16": "BF16", "int64": "I64",
              "int32": "I32", "int16": "I16", "int8": "I8", "uint8": "U8", "bool": "BOOL"}


def send_answer(sock: socket.socket, request_id: str, header: dict, tensors: dict) -> None:
    """One frame of :mod:`genlab.testing.wire`, with its tensors written to the socket from their own memory:
    no copy of an answer is made to send it, so sending adds nothing to the memory the OS counts for the
    measured process (``safetensors.save`` and the frame's concatenation would add two copies)."""
    import torch

    meta, views, offset = {}, [], 0
    for name, t in tensors.items():
        t = t.detach().contiguous()
        raw = t.reshape(-1).view(torch.uint8) if t.numel() else torch.empty(0, dtype=torch.uint8)
        meta[name] = {"dtype": _ST_DTYPES[str(t.dtype).removeprefix("torch.")], "shape": list(t.shape),
                      "data_offsets": [offset, offset + raw.numel()]}
        views.append(raw.numpy())
        offset += raw.numel()
    blob_len = 0
    head = b""
    if tensors:
        head = json.dumps(meta).encode()
        head += b" " * (-len(head) % 8)
        blob_len = 8 + len(head) + offset
    text = json.dumps(header).encode()
    sock.sendall(wire.FRAME.pack(wire.MAGIC, request_id.encode("ascii"), len(text), blob_len) + text)
    if tensors:
        sock.sendall(struct.pack("<Q", len(head)) + head)
        for view in views:
            if view.size:
                sock.sendall(memoryview(view).cast("B"))


class _Encoder(wire.Encoder):
    """The wire's encoder, but an answer's tensors are sent from their own memory (:func:`send_answer`), not
    from a copy: the copy would be counted against the function's memory."""

    def __init__(self):
        super().__init__(keep=id)

    def _tensor(self, t):
        import torch

        meta = super()._tensor(t[:0] if t.dim() else t.reshape(1)[:0])   # the metadata, from an empty slice
        plain = torch.Tensor.detach(torch.Tensor.as_subclass(t, torch.Tensor))
        if "dtype" in meta:
            plain = plain.to(torch.float64)
        self.tensors[meta["__tensor__"]] = plain.contiguous()
        return meta


def read_frame(sock: socket.socket):
    """:func:`genlab.testing.wire.read_frame`, but each part is read into one buffer of its full size (a large one
    is a mapping of its own, returned to the OS when freed), not in chunks of 1 MiB from the heap, which would
    leave the zygote's heap with megabytes of free chunks for the next measured process to fall into."""
    from safetensors.torch import load

    def exactly(n: int):
        buf = bytearray(n)
        view, got = memoryview(buf), 0
        while got < n:
            k = sock.recv_into(view[got:], n - got)
            if not k:
                return None
            got += k
        return buf

    head = exactly(wire.FRAME.size)
    if head is None:
        return None
    magic, request_id, text_len, blob_len = wire.FRAME.unpack(head)
    text, blob = exactly(text_len), exactly(blob_len)
    if text is None or blob is None:
        return None
    tensors = load(bytes(blob)) if blob_len else {}
    del blob
    return magic, request_id.decode("ascii"), json.loads(text), tensors


def _error(exc: BaseException) -> dict:
    tb = traceback.format_exception(type(exc), exc, exc.__traceback__)
    return {"ok": False, "error": {"type": type(exc).__name__, "message": str(exc)[:4000],
                                   "traceback": "".join(tb)[-6000:]}}


def _malloc_trim() -> None:
    try:
        import ctypes

        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):   # not glibc
        pass


def _shell():
    from IPython.core.interactiveshell import InteractiveShell
    from traitlets.config import Config

    config = Config()
    config.HistoryManager.enabled = False   # no history thread: a forked process has only the forking thread
    return InteractiveShell.instance(config=config)


def main(fd: int) -> None:
    import torch  # noqa: F401 - imported once, here, for every measured process
    import genlab.checks  # noqa: F401

    os.set_inheritable(fd, False)
    sock = socket.socket(fileno=fd)
    shell = _shell()
    while True:
        frame = read_frame(sock)
        if frame is None:
            return
        _magic, request_id, header, _tensors = frame
        kind = header.get("kind")
        reply: dict = {"ok": True, "result": None}
        try:
            if kind == "setup":
                for name in header.get("modules", ()):
                    try:
                        __import__(name)
                    except Exception:  # noqa: BLE001 - the setup cell says so below, if it needs it
                        pass
                run = shell.run_cell(header.get("source", ""), silent=True)
                if not run.success:
                    raise RuntimeError(f"the lab's setup cell failed: {run.error_in_exec or run.error_before_exec}")
            elif kind == "stage":
                # A stager, forked for these inputs: it reads and holds them, and forks the measured processes.
                # The zygote's own heap never holds a measurement's inputs, so it has no free chunks of freed
                # inputs for a measured process to fall into (a temporary served from free heap touches pages
                # that stay charged after its free, and the next lands elsewhere: the OS saw 26 MiB for a 9 MiB
                # peak, every other measurement, before this).
                pid = os.fork()
                if pid == 0:
                    code = 0
                    try:
                        _stager(sock, shell)
                    except BaseException:  # noqa: BLE001
                        code = 70
                    finally:
                        os._exit(code)
                os.waitpid(pid, 0)
                continue    # the stager answered its requests
            else:
                raise ValueError(f"unknown request {kind!r}")
        except Exception as exc:  # noqa: BLE001
            reply = _error(exc)
        send_answer(sock, request_id, reply, {})


def _stager(sock: socket.socket, shell) -> None:
    """Holds one set of inputs (the next frame) and forks a measured process for each ``fork``, until ``unstage``."""
    frame = read_frame(sock)
    if frame is None:
        return
    _magic, request_id, header, tensors = frame
    try:
        staged = [wire.decode(copy, tensors, modules={}) for copy in header["copies"]]
        positions = tuple(int(i) for i in header.get("activations", ()))
        if positions:   # made here, like the inputs: no measured process pays for them
            from genlab.checks import gradients

            staged = [(gradients.activation_inputs(a, positions)[0], k) for a, k in staged]
    except Exception as exc:  # noqa: BLE001 - said to the grader, not left to its time limit
        send_answer(sock, request_id, _error(exc), {})
        return
    del tensors, frame
    send_answer(sock, request_id, {"ok": True, "result": len(staged)}, {})
    while True:
        frame = read_frame(sock)
        if frame is None:
            return
        _magic, request_id, header, _tensors = frame
        if header.get("kind") != "fork":
            send_answer(sock, request_id, {"ok": True, "result": None}, {})
            return
        # Every object held here goes to the collector's permanent generation: a collection in the child then
        # leaves their pages alone, instead of writing to (and so copying) every one. And the heap's free pages
        # go back to the OS, so that a child's first use of a free chunk is a fresh page of its own.
        gc.collect()
        gc.freeze()
        _malloc_trim()
        pid = os.fork()
        if pid == 0:
            code = 0
            try:
                _child(sock, shell, staged)
            except BaseException:  # noqa: BLE001
                code = 70
            finally:
                os._exit(code)
        _, status, usage = os.wait4(pid, 0)
        send_answer(sock, request_id, {"ok": True, "done": True, "result": {
            "status": status, "cpu_s": usage.ru_utime + usage.ru_stime, "maxrss_bytes": usage.ru_maxrss * 1024}},
            {})


def _child(sock: socket.socket, shell, staged: list) -> None:
    """A measured process: its job arrives once the grader has moved it into its own control group. It runs the
    notebook's cells, then says it is ready (the *ready mark*) and waits: the grader reads what the OS has counted
    so far, from outside, and only then sends what comes next (a timed job's inputs). After its answer it waits
    again (``hold``), so that the grader can read its pages before it ends."""
    sys.stdout = sys.stderr = open(os.devnull, "w")   # noqa: SIM115 - the notebook's prints go nowhere
    frame = read_frame(sock)
    if frame is None:
        return
    _magic, request_id, job, _tensors = frame
    encoder = _Encoder()
    try:
        result = _job(shell, staged, job, sock, request_id)
        reply = {"ok": True, "result": encoder.encode(result)}
    except BaseException as exc:  # noqa: BLE001 - the student's function may raise anything
        encoder = _Encoder()
        reply = _error(exc)
    send_answer(sock, request_id, reply, encoder.tensors)
    if job.get("hold"):
        read_frame(sock)   # until the grader has read the process and ends it


def _ready(sock: socket.socket, request_id: str, staged: list, witness: bool = False) -> list:
    """The ready mark: said once the cells have run; the inputs of a timed job come after it, so nothing the
    cells did can have depended on them, and once they are decoded a second mark says so. Returns the inputs
    (``staged`` where the job brings none).

    With ``witness`` (a memory job), a copy of the process is forked first and stopped at once: it shares every
    page with this process, copy on write, so a page this process writes from now on moves to a new frame, and
    the grader, reading both processes' page frames at the end, sees which pages were held and never written."""
    if witness:
        import signal

        pid = os.fork()
        if pid == 0:
            os.kill(os.getpid(), signal.SIGSTOP)
            os._exit(0)
        os.waitpid(pid, os.WUNTRACED)   # stopped before the grader is told
    send_answer(sock, request_id, {"ok": True, "ready": True}, {})
    frame = read_frame(sock)
    if frame is None:
        raise SystemExit(0)
    _magic, _request_id, header, tensors = frame
    if "copies" not in header:
        return staged
    inputs = [wire.decode(copy, tensors, modules={}) for copy in header["copies"]]
    positions = tuple(int(i) for i in header.get("activations", ()))
    if positions:
        from genlab.checks import gradients

        inputs = [(gradients.activation_inputs(a, positions)[0], k) for a, k in inputs]
    del tensors, frame
    # The second mark: the inputs are decoded. The grader reads the CPU time again, and takes off at most what a
    # baseline process's decoding of the same inputs took (autograder.wall.measure.counted_cpu).
    send_answer(sock, request_id, {"ok": True, "decoded": True}, {})
    if read_frame(sock) is None:
        raise SystemExit(0)
    return inputs


def _job(shell, staged: list, job: dict, sock: socket.socket | None = None, request_id: str = ""):
    import torch
    from genlab.checks import peak_memory

    for source in job.get("cells", ()):
        shell.run_cell(source, silent=True)   # as in the kernel: a cell's error stops that cell only
    if job.get("mark") and sock is not None:
        staged = _ready(sock, request_id, staged, witness=bool(job.get("witness")))
    if job["kind"] == "baseline":
        return None
    name = job["target"]
    if name not in shell.user_ns:
        raise NameError(f"`{name}` is not defined in your notebook: did its cell run without error, and is it "
                        f"still named `{name}`?")
    fn = shell.user_ns[name]
    def call(args, kwargs):
        with wire.default_dtype(job.get("default_dtype")), torch.enable_grad():
            return fn(*args, **kwargs)

    if job["kind"] == "time":
        return [call(args, kwargs) for args, kwargs in staged]
    if job["kind"] == "memory":
        # genlab's count of one call, on the first copy; then a plain call on the second, whose answer is sent
        # back and checked. The OS's peak covers this process's whole life: both calls and the cells.
        (args, kwargs), (args2, kwargs2) = staged[0], staged[1]
        with wire.default_dtype(job.get("default_dtype")):
            counted = peak_memory(fn, *args, **kwargs)
        del args, kwargs
        return {"count": counted, "output": call(args2, kwargs2)}
    raise ValueError(f"unknown job {job['kind']!r}")


if __name__ == "__main__":
    main(int(sys.argv[1]))
