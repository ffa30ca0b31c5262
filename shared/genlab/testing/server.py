"""The kernel side of grading: runs a student's function on inputs the grader chose, sends back data.

The grader launches the kernel with one end of a socket pair (an inherited file descriptor) and, in the boot
cell that runs before any student cell, calls :func:`install` with its number. ``install`` snapshots the
watched objects and starts two threads of this module's own: one reads the grader's frames
(:mod:`genlab.testing.wire`), one answers each request. No request runs as an IPython cell, so nothing in
the notebook's namespace or IPython's hooks (a user ``__import__``, ``pre_execute`` events, input
transformers) is on its path, and no name of the server is left among the notebook's globals. Nothing here
decides a verdict: it only computes and reports. The verdict is taken in the grader's own process (see
``autograder.wall.remote``), so patching anything in this process can change what is reported, never how it is
judged.
"""
from __future__ import annotations

import ctypes
import json
import os
import queue
import socket
import sys
import threading
import time
import traceback
import types

from genlab.testing import wire

_handles: dict[int, object] = {}
_baseline: dict[str, int] = {}


def _keep(obj) -> int:
    _handles[id(obj)] = obj
    return id(obj)


def _shell():
    """The IPython shell, from any thread (``get_ipython`` is a builtin only while a cell runs)."""
    try:
        from IPython import get_ipython
    except ImportError:
        return None
    return get_ipython()


def _namespace() -> dict:
    shell = _shell()
    return shell.user_ns if shell is not None else sys.modules["__main__"].__dict__


def _watched() -> dict[str, object]:
    """Objects whose replacement by student code is evidence of tampering."""
    import torch
    import genlab.checks as checks
    from torch.utils.flop_counter import FlopCounterMode

    watched = {
        "torch.allclose": torch.allclose, "torch.equal": torch.equal, "torch.isclose": torch.isclose,
        "torch.testing.assert_close": torch.testing.assert_close,
        "torch.Tensor.__eq__": torch.Tensor.__eq__, "torch.Tensor.detach": torch.Tensor.detach,
        "torch.Tensor.cpu": torch.Tensor.cpu, "torch.Tensor.clone": torch.Tensor.clone,
        "torch.Tensor.mul_": torch.Tensor.mul_, "torch.randn_like": torch.randn_like, "torch.randn": torch.randn,
        "FlopCounterMode.__exit__": FlopCounterMode.__exit__,
        "time.perf_counter": time.perf_counter, "time.time": time.time, "time.monotonic": time.monotonic,
        "sys.settrace": sys.gettrace(),
        "genlab.testing.server.answer": answer, "genlab.testing.wire.Encoder": wire.Encoder,
        "genlab.testing.wire.pack_frame": wire.pack_frame, "genlab.testing.wire.read_frame": wire.read_frame,
    }
    for name in ("grad_of", "peak_memory", "count_flops", "check_close", "check_shape", "time_ratio"):
        if hasattr(checks, name):
            watched[f"genlab.checks.{name}"] = getattr(checks, name)
    from genlab.checks import gradients

    # what a gradient request runs around the student's call, what makes every call's activations, and what
    # finds one changed in place
    for name in ("grad_inputs", "grads_from", "activation_inputs", "modified_positions", "same_bytes"):
        watched[f"genlab.checks.gradients.{name}"] = getattr(gradients, name)
    from genlab.checks import memory

    # How the memory count is taken: the class and the methods of its dispatch mode.
    tracker = memory._StorageTracker
    watched["genlab.checks.memory._StorageTracker"] = tracker
    for name in ("__torch_dispatch__", "_count", "_free", "__init__"):
        watched[f"genlab.checks.memory._StorageTracker.{name}"] = tracker.__dict__.get(name)
    watched["genlab.checks.memory._storage"] = memory._storage
    this = sys.modules[__name__]
    # how every kind of call is made, and how its arguments are compared after it
    for name in ("_run", "_call", "_calls", "_copies", "_activated", "_made", "_snapshot", "_seeded"):
        watched[f"genlab.testing.server.{name}"] = getattr(this, name)
    # The CUDA API exists on CPU builds too; a notebook that fakes it is tampering even where it is unused.
    for name in ("Event.elapsed_time", "Event.record", "Event.synchronize", "synchronize", "max_memory_allocated",
                 "reset_peak_memory_stats"):
        owner, _, attr = f"torch.cuda.{name}".rpartition(".")
        obj = torch.cuda.Event if owner.endswith("Event") else torch.cuda
        watched[f"torch.cuda.{name}"] = getattr(obj, attr, None)
    for name in ("perf_counter_ns", "process_time", "monotonic_ns", "time_ns"):
        watched[f"time.{name}"] = getattr(time, name)
    try:
        import numpy as np

        watched.update({"numpy.allclose": np.allclose, "numpy.array_equal": np.array_equal,
                        "numpy.isclose": np.isclose, "numpy.testing.assert_allclose": np.testing.assert_allclose,
                        "numpy.ndarray.__eq__": np.ndarray.__eq__})
    except ImportError:
        pass
    shell = _shell()
    if shell is not None:
        cls = type(shell)
        watched["IPython.showtraceback"] = cls.showtraceback
        watched["InteractiveShell.run_cell"] = cls.run_cell
        # Instance attributes shadowing the class's methods (None when untouched).
        for attr in ("showtraceback", "run_cell", "_showtraceback", "showsyntaxerror", "run_ast_nodes"):
            watched[f"shell.{attr} (instance override)"] = shell.__dict__.get(attr)
        watched["shell.custom_exceptions"] = tuple(shell.custom_exceptions)
        watched["shell.input_transformers_cleanup"] = tuple(shell.input_transformers_cleanup)
        watched["shell.input_transformers_post"] = tuple(shell.input_transformers_post)
        watched["shell.ast_transformers"] = tuple(shell.ast_transformers)
    return watched


def install(fd: int | None = None) -> None:
    """Called by the grader's boot cell, before the first student cell: remembers what the watched objects are
    and, given the channel's descriptor, starts serving the grader's requests on it."""
    import genlab.checks  # noqa: F401 - imported now, so later patches are visible as changes

    _baseline.clear()
    _baseline.update({name: _identity(obj) for name, obj in _watched().items()})
    if fd is not None:
        os.set_inheritable(fd, False)   # a process the notebook starts does not get the channel
        sock = socket.socket(fileno=fd)
        requests: queue.Queue = queue.Queue()
        worker = threading.Thread(target=_serve, args=(sock, requests), name="genlab-server", daemon=True)
        worker.start()
        threading.Thread(target=_read, args=(sock, requests, worker), name="genlab-reader", daemon=True).start()


def _identity(obj) -> object:
    """What changes when a watched object is replaced: its id, and for a Python function the ids of its code
    and defaults too (``__code__`` can be swapped in place, keeping the function's id)."""
    if obj is None:
        return None
    if isinstance(obj, tuple):
        return tuple(id(o) for o in obj)
    if isinstance(obj, types.FunctionType):
        return (id(obj), id(obj.__code__), id(obj.__defaults__), id(obj.__kwdefaults__))
    return id(obj)


def integrity() -> list[str]:
    now = _watched()
    return sorted(name for name, ident in _baseline.items() if _identity(now.get(name)) != ident)


def identities() -> list[list]:
    """[name, identity] of every watched object now (an identity is an id, a list of ids, or None): the grader
    keeps the first answer, given right after the boot cell, and compares later ones with it in its own
    process, so that a notebook which has the server take its snapshot again (``install()``) hides nothing."""
    return [[name, list(ident) if isinstance(ident, tuple) else ident]
            for name, ident in ((name, _identity(obj)) for name, obj in _watched().items())]


# -- the two threads ----------------------------------------------------------------------------------------
_running = {"id": None}          # the request the server thread is answering now
_running_lock = threading.Lock()


def _read(sock: socket.socket, requests: queue.Queue, worker: threading.Thread) -> None:
    """Reads the grader's frames: requests go to the server thread; an interrupt raises KeyboardInterrupt in
    it, as Ctrl-C does in a cell, if it is still answering that request."""
    while True:
        try:
            frame = wire.read_frame(sock)
        except Exception:  # noqa: BLE001 - the grader is gone or the stream is broken: nothing more to serve
            frame = None
        if frame is None:
            requests.put(None)
            return
        magic, request_id, header, tensors = frame
        if magic == wire.INTERRUPT:
            with _running_lock:
                if _running["id"] == request_id:
                    _async_raise(worker, KeyboardInterrupt)
            continue
        requests.put((request_id, header, tensors))


def _async_raise(thread: threading.Thread, exc_type) -> None:
    # The same mechanism as a signal's KeyboardInterrupt, aimed at one thread: it is raised at the next bytecode
    # that thread runs (a long call into C finishes first). None clears one that was set and not yet raised.
    ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(thread.ident),
                                               ctypes.py_object(exc_type) if exc_type else None)


def _serve(sock: socket.socket, requests: queue.Queue) -> None:
    while True:
        item = requests.get()
        if item is None:
            return
        request_id, header, tensors = item
        with _running_lock:
            _running["id"] = request_id
        try:
            reply, encoder = answer(header, tensors)
        except BaseException:  # noqa: BLE001 - an interrupt that landed outside the student's call
            reply, encoder = _error_reply(KeyboardInterrupt("interrupted")), wire.Encoder(keep=_keep)
        with _running_lock:
            _running["id"] = None
            _async_raise(threading.current_thread(), None)
        try:
            sock.sendall(wire.pack_frame(request_id, reply, encoder.tensors))
        except OSError:
            return


def _error_reply(exc: BaseException) -> dict:
    tb = traceback.format_exception(type(exc), exc, exc.__traceback__)
    return {"ok": False, "error": {"type": type(exc).__name__, "message": str(exc)[:4000],
                                   "traceback": "".join(tb)[-6000:]}}


# Requests whose answer is a measurement made here: they also report the watched objects' identities.
MEASURED = ("grad_of", "timed_loop", "peak_memory", "count_flops")


def answer(header: dict, tensors: dict) -> tuple[dict, wire.Encoder]:
    """The answer to one request (its header and tensors): the reply and the encoder holding its tensors;
    never raises."""
    encoder = wire.Encoder(keep=_keep)
    try:
        sent_modules: dict = {}  # torch.nn modules a test sent (tied parameters are shared across arguments)
        args = wire.decode(header.get("args", []), tensors, handle_factory=_resolve_handle, modules=sent_modules)
        kwargs = wire.decode(header.get("kwargs", {"__dict__": {}}), tensors, handle_factory=_resolve_handle,
                             modules=sent_modules)
        _modified.clear()
        _changed.clear()
        result = _run(header, args, kwargs)
        reply = {"ok": True, "result": encoder.encode(result),
                 "modes": [wire.modes(m) for m in wire.call_modules(header, args, kwargs)]}
        if _modified:   # activations the function changed in place: the grader fails the test on it
            reply["modified"] = sorted(_modified)
        if _changed:    # other tensor arguments it changed in place: their values now, for the test's own tensors
            reply["changed"] = [[list(path), encoder.encode(t.detach())] for path, t in _changed]
        if header.get("kind") in MEASURED:
            # Taken right after the call, before this thread lets go of the GIL: a patch that a thread of the
            # notebook put in place only while a request ran is still there, and the grader compares.
            reply["identities"] = identities()
    except _Missing as missing:
        encoder = wire.Encoder(keep=_keep)
        reply = {"ok": False, "error": {"type": "NameError", "message": str(missing), "traceback": ""}}
    except BaseException as exc:  # the student's function may raise anything, SystemExit included
        encoder = wire.Encoder(keep=_keep)
        reply = _error_reply(exc)
    too_large = _too_large(reply, encoder, header.get("answer_limits"))
    if too_large:
        encoder = wire.Encoder(keep=_keep)
        reply = {"ok": False, "error": {"type": "ValueError", "message": too_large, "traceback": ""}}
    return reply, encoder


def _too_large(reply: dict, encoder: wire.Encoder, limits) -> str:
    """Why an answer is over the grader's limits (it would refuse it as forged), or ''."""
    if not isinstance(limits, dict):
        return ""
    text = len(json.dumps(reply))
    # The safetensors file: the tensors' bytes, and a JSON header of well under 256 bytes per tensor.
    blob = sum(t.numel() * t.element_size() + 256 for t in encoder.tensors.values()) + 264
    for size, limit, what in ((text, limits.get("json_bytes"), "plain data (numbers, lists, strings)"),
                              (blob, limits.get("tensor_bytes"), "tensors")):
        if isinstance(limit, int) and size > limit:
            return (f"the result is {size / 2**20:.1f} MiB of {what}; the grader takes at most "
                    f"{limit / 2**20:.1f} MiB: return a tensor, or a smaller result")
    return ""


class _Missing(Exception):
    pass


def _resolve_handle(handle_id: int, type_name: str):
    if handle_id not in _handles:
        raise _Missing(f"object {type_name} no longer exists in the kernel")
    return _handles[handle_id]


def _target(header: dict):
    if "handle" in header:
        obj = _resolve_handle(int(header["handle"]), "?")
    else:
        name = header["target"]
        ns = _namespace()
        if name not in ns:
            raise _Missing(f"`{name}` is not defined in your notebook: did its cell run without error, "
                           f"and is it still named `{name}`?")
        obj = ns[name]
    if header.get("method"):
        obj = getattr(obj, header["method"])
    return obj


def _run(header: dict, args, kwargs):
    import genlab.checks as checks
    from genlab.checks import gradients

    kind = header["kind"]
    if kind == "integrity":
        return integrity()
    if kind == "identities":
        return identities()
    # A function whose gradient a test takes gets activations at these positions in every call, whatever
    # the request (a value, a gradient, a timed loop, a memory count): made before the call, and before any
    # clock or count starts, so that no call can be told from another by its inputs (issue 22).
    activations = tuple(int(i) for i in header.get("activations", ()))
    if kind == "timed_prepare":  # untimed: the grader's clock starts with the timed_loop request after it
        _prepared[:] = [(_activated(a, activations), k) for a, k in
                        _copies(args, kwargs, int(header["n"]), float(header.get("offset", 0.0)))]
        return None
    if kind == "stage":  # the next measurements' inputs, decoded now, so that the OS's count of their memory
        _staged[:] = [(_activated(args, activations), kwargs)]   # covers the calls alone (remote._measured_peak)
        return None
    if header.get("staged"):
        if not _staged:
            raise RuntimeError("the measurement's inputs were not staged")
        args, kwargs = _staged.pop() if header["staged"] == "last" else _staged[0]
    elif kind in ("call", "peak_memory", "count_flops"):
        args = _activated(args, activations)
    if kind in ("peak_memory", "count_flops"):
        measured = getattr(checks, kind)(_target(header), *args, **kwargs)
        _modified.update(gradients.modified_positions(args, activations))
        return measured
    fn = _target(header)
    if kind == "exists":
        return type(fn).__name__
    if kind == "getattr":
        return fn
    if kind in ("call", "grad_of", "timed_loop"):
        # One path for plain calls, gradient calls and timed calls: the function is called by `_call`, called
        # here with the same locals, under the same grad mode, so its callers' frames do not say which it is.
        made = _made(kind, kwargs, activations)   # the same locals in every kind of call: its frame tells nothing
        calls, finish = _calls(kind, header, args, kwargs, activations)
        # A plain or gradient call's other tensor arguments, as they came: compared, byte for byte, after it.
        # Not in a timed loop, nor on staged inputs (a memory watch's calls, whose copies the OS would count):
        # their arguments are the grader's copies, never the test's.
        measured = kind == "timed_loop" or header.get("staged") or header.get("discard")
        before = [] if measured else _snapshot(*calls[0], made)
        result = None
        with wire.default_dtype(header.get("default_dtype")), _seeded(header.get("seed")):
            for args, kwargs in calls:   # the test's default dtype (and a gradient check's seed), for this call
                result = _call(fn, args, kwargs)
        for args, _ in calls if made else ():   # after the loop: no check inside a timed one
            _modified.update(gradients.modified_positions(args, made))
        _changed.extend((path, t) for path, t, copy in before if not gradients.same_bytes(t, copy))
        if header.get("discard"):   # only its cost was wanted (a memory watch): nothing to encode and send
            return None
        return finish(result)
    raise ValueError(f"unknown request kind {kind!r}")


def _made(kind: str, kwargs: dict, activations: tuple) -> tuple:
    """The positions a call's activations are at: a gradient call's differentiated inputs are activations too
    (gradients.grad_inputs)."""
    if kind != "grad_of":
        return activations
    wrt = kwargs.get("wrt", (0,))
    return tuple(dict.fromkeys(((wrt,) if isinstance(wrt, int) else tuple(wrt)) + activations))


def _tensors(tree, path: tuple):
    """(path, tensor) for every tensor in nested tuples, lists and dicts (str keys), in order."""
    import torch

    if isinstance(tree, torch.Tensor):
        yield path, tree
    elif isinstance(tree, (tuple, list)):
        for i, item in enumerate(tree):
            yield from _tensors(item, path + (i,))
    elif isinstance(tree, dict):
        for key, item in tree.items():
            if isinstance(key, str):
                yield from _tensors(item, path + (key,))


def _snapshot(args, kwargs, made: tuple) -> list:
    """(path, tensor, copy) for each tensor argument of a call but the activations at ``made`` (those are checked
    against their leaves: gradients.modified_positions): a change made in place is then seen by its bytes,
    whatever the function did to the tensor's version counter, and sent back to the grader (``changed``)."""
    import torch

    with torch.no_grad():
        return [(path, t, t.detach().clone()) for path, t in
                (*_tensors(tuple(args), ("args",)), *_tensors(dict(kwargs), ("kwargs",)))
                if not (len(path) == 2 and path[0] == "args" and path[1] in made and t.grad_fn is not None)]


class _seeded:
    """torch's generators (CPU and CUDA) forked and seeded for one request, when the grader sends a seed: a
    gradient call and the plain calls that check it by finite differences (autograder.wall.gradcheck) then
    draw the same random numbers (eps = torch.randn_like(mu) and the like), and the kernel's own stream is
    left where it was."""

    def __init__(self, seed):
        self.seed, self.fork = seed, None

    def __enter__(self):
        if isinstance(self.seed, int):
            import torch

            self.fork = torch.random.fork_rng(devices=range(torch.cuda.device_count())
                                              if torch.cuda.is_initialized() else [])
            self.fork.__enter__()
            torch.manual_seed(self.seed)
        return self

    def __exit__(self, *exc):
        return self.fork.__exit__(*exc) if self.fork is not None else False


def _call(fn, args, kwargs):
    import torch

    with torch.enable_grad():  # what grad_of does; plain calls get it too, so is_grad_enabled() tells nothing
        return fn(*args, **kwargs)


def _activated(args, positions: tuple[int, ...]) -> tuple:
    from genlab.checks import gradients

    return gradients.activation_inputs(args, positions)[0] if positions else tuple(args)


def _calls(kind: str, header: dict, args, kwargs, activations: tuple[int, ...] = ()):
    """The calls a request makes, as (args, kwargs) pairs, and what turns the last result into the answer."""
    if kind == "call":
        return [(args, kwargs)], lambda result: result
    if kind == "timed_loop":
        # The grader times this request from outside the kernel; the loop only does the work, each call on
        # its own inputs, made by the timed_prepare request before it.
        calls = list(_prepared)
        _prepared.clear()
        if len(calls) != int(header["n"]):
            raise RuntimeError(f"the timed loop needs {header['n']} prepared calls, found {len(calls)}")
        return calls, lambda result: None
    from genlab.checks import gradients

    kwargs = dict(kwargs)
    wrt, grad_output = kwargs.pop("wrt", (0,)), kwargs.pop("grad_output", None)
    args, leaves = gradients.grad_inputs(args, wrt, also=activations)
    return [(args, kwargs)], lambda result: gradients.grads_from(result, leaves, grad_output)


# The positions of the activations the last request's calls changed in place (reported as "modified").
_modified: set = set()
# The other tensor arguments the last plain or gradient call changed in place: (path, tensor now), sent back.
_changed: list = []
# The inputs of the next timed loop, one (args, kwargs) per call (see _copies).
_prepared: list = []
# The inputs of the next measurement (memory, FLOPs), as one (args, kwargs).
_staged: list = []

# Timed float32 and float64 inputs are scaled per call by a factor in [1 - _PERTURB_SPAN, 1]; coarser dtypes
# (float16, bfloat16) are only copied: within their precision so small a change would leave most values equal.
_PERTURB_DTYPES = ("torch.float32", "torch.float64")
_PERTURB_SPAN = 2.0 ** -7
_GOLDEN = 0.6180339887498949  # successive multiples, mod 1, spread evenly over [0, 1)


def _copies(args, kwargs, n: int, offset: float = 0.0) -> list:
    """n calls' inputs for a timed loop: every tensor copied into its own storage, and a float32 or float64 one
    scaled by ``1 - 2**-7 * ((offset + k * 0.618...) mod 1)`` for copy k, where the grader draws ``offset`` at
    random for each loop: copies of one loop differ from each other (scales at least 18 float32 units in the last
    place apart in loops of up to 2000 calls, 7 up to 5000) and from the inputs sent, and loops from each other. So no
    cache keyed on the inputs' ids or storage can answer a call from an earlier one, nor can one keyed on their
    values except by chance (float16 and bfloat16 copies have equal values). Both kernels copy alike (the same
    scales for the same offset), so the race stays fair."""
    import torch
    from torch.utils._pytree import tree_map

    def copy(k):
        scale = 1.0 - _PERTURB_SPAN * ((offset + k * _GOLDEN) % 1.0)

        def one(t):
            if not isinstance(t, torch.Tensor):
                return t
            with torch.no_grad():
                c = t.clone()
                if str(t.dtype) in _PERTURB_DTYPES and scale != 1.0:
                    c.mul_(scale)
            return c.requires_grad_(t.requires_grad)
        return one

    return [tree_map(copy(k), (tuple(args), dict(kwargs))) for k in range(n)]
