"""The grader's half of a test call: stand-ins for a student's functions inside the trusted process.

When the grader runs a test cell, ``reparameterize`` is a :class:`RemoteFunction`: calling it ships the
arguments to the student's kernel (:mod:`genlab.testing.wire`, never pickle), runs the student's function
there (:mod:`genlab.testing.server`), and returns plain tensors. So the test reads the same in the notebook
and in the grader, and its checks always run here, out of the student's reach. Calls are recorded
(:class:`genlab.testing.calls.Recorder`) for diagnosis. Timing is measured here too, from outside both
the student's kernel and the reference kernel, with this process's clock.
"""
from __future__ import annotations

import math
import random
import time
from dataclasses import dataclass, field

from autograder.core.sanitize import student_text
from autograder.wall import gradcheck
from genlab.testing import wire
from genlab.testing.calls import Call, Recorder, detached
from genlab.testing.wire import student_error

CLEARLY_SLOW = 20.0  # a first look this far over the reference ends the timing early


# -- the calls kept for diagnosis ----------------------------------------------------------------------------
def held_bytes(value) -> int:
    """Bytes of the tensors (and modules' parameters and buffers) in a call's arguments or result."""
    import torch

    if isinstance(value, torch.Tensor):
        try:
            return value.untyped_storage().nbytes()
        except Exception:  # noqa: BLE001 - a tensor without a storage of its own (sparse, meta)
            return value.numel() * value.element_size()
    if isinstance(value, torch.nn.Module):
        return sum(held_bytes(t) for t in (*value.parameters(), *value.buffers()))
    if isinstance(value, (list, tuple)):
        return sum(held_bytes(v) for v in value)
    if isinstance(value, dict):
        return sum(held_bytes(v) for v in value.values())
    return 0


@dataclass
class KeptCalls:
    """The calls a notebook's tests make, with their inputs and answers, are kept in the grader's process until
    the notebook ends, for diagnosis (the catalogue's replay, after every test). An answer may be 256 MiB
    (``max_answer_tensor_mib``): sample ``lab1_attack_huge_answers``, 229 MiB to every call, took the grading
    process to a peak of 1878 MiB, against 391 MiB for the reference (904 MiB within this budget; issue 39,
    measured on a 2-core EPYC). So a notebook's calls are kept up to ``limit_bytes`` (``max_kept_calls_mib``); a call
    past it is given to its test as usual and not kept, and its function is named in :attr:`dropped`: no bug is
    named from part of a function's calls (pipeline.diagnose_failures)."""
    limit_bytes: int
    kept_bytes: int = 0
    dropped: dict[str, list[int]] = field(default_factory=dict)   # function -> [calls not kept, their bytes]

    def admit(self, call: Call) -> bool:
        size = held_bytes(call.args) + held_bytes(call.kwargs) + held_bytes(call.result)
        if self.kept_bytes + size <= self.limit_bytes:
            self.kept_bytes += size
            return True
        lost = self.dropped.setdefault(call.name, [0, 0])
        lost[0], lost[1] = lost[0] + 1, lost[1] + size
        return False


@dataclass
class KeptRecorder(Recorder):
    """A test's recorder whose calls count against the notebook's :class:`KeptCalls`; ``contradicted``: why
    gradients the kernel reported contradict the function's own values (the test fails on them once it has run,
    pipeline.run_one_test, so that its own checks, and their messages, come first)."""
    kept: KeptCalls | None = None
    contradicted: list[str] = field(default_factory=list)
    measured: list[str] = field(default_factory=list)   # what each OS memory figure that stood was made of


def _keep(recorder: Recorder, call: Call) -> None:
    kept = getattr(recorder, "kept", None)
    if kept is not None and recorder.calls and recorder.calls[-1] is call and not kept.admit(call):
        recorder.calls.pop()


class RemoteObject:
    """An object the student's code returned that cannot travel as data (e.g. an ``nn.Module``)."""

    def __init__(self, session, handle: wire.Handle, recorder: Recorder, label: str, activations: tuple = ()):
        self._session, self._handle, self._recorder, self._label = session, handle, recorder, label
        # Positions of its calls' inputs that are activations (a module whose gradient a test takes: the
        # function that made it is keyed "f()" in LabNotebook.differentiated); objects it returns inherit them.
        self._activations = tuple(activations)

    @property
    def _target(self) -> dict:
        return {"handle": self._handle.id, **({"activations": list(self._activations)} if self._activations else {})}

    def __repr__(self) -> str:
        return f"<{self._handle.type_name} in the student's kernel>"

    def __call__(self, *args, **kwargs):
        return _request(self._session, self._recorder, "call", self._label, args, kwargs, self._target,
                        objects=self._activations)

    def __getattr__(self, attr: str):
        if attr.startswith("_"):
            raise AttributeError(attr)
        return _request(self._session, self._recorder, "getattr", f"{self._label}.{attr}", (), {},
                        {"handle": self._handle.id, "method": attr}, objects=self._activations)

    # -- measurements of the object itself (a module's gradients, memory, FLOPs), dispatched here by
    # genlab.checks as for a function: the object is called in the kernel, on the one path every call takes
    def __genlab_measure__(self, kind: str, args, kwargs):
        return _request(self._session, self._recorder, kind, self._label, args, kwargs, self._target,
                        objects=self._activations)


class _BoundMethod:
    """A method of an object in the kernel (``m.load_state_dict``): its inputs are passed as they are; an
    object it returns (``m.double()``) inherits ``objects``, the positions its owner's calls make activations."""

    def __init__(self, session, recorder, handle, method, label, objects: tuple = ()):
        self._args = (session, recorder, handle, method, label, objects)

    def __call__(self, *args, **kwargs):
        session, recorder, handle, method, label, objects = self._args
        return _request(session, recorder, "call", label, args, kwargs, {"handle": handle, "method": method},
                        objects=objects)


def _header(kind: str, target: dict, args, kwargs, **extra) -> tuple[dict, wire.Encoder]:
    encoder = wire.Encoder()
    return {"kind": kind, **target, **extra, "default_dtype": wire.default_dtype_name(),
            "args": encoder.encode(tuple(args)), "kwargs": encoder.encode(dict(kwargs))}, encoder


def _request(session, recorder: Recorder, kind: str, name: str, args, kwargs, target: dict,
             objects: tuple = (), reference=None, **extra):
    call = Call(kind, name, detached(tuple(args)), detached(dict(kwargs)))  # the arguments as they were sent
    if kind == "grad_of":   # torch's generators seeded alike for the gradient and the calls that check it
        extra = {**extra, "seed": gradcheck.new_seed()}
    # The reply is checked (autograder.wall.channel.check_reply): its fields have the types used here, and the
    # kernel's text in it is cleaned and capped.
    os_peak = None
    if kind == "peak_memory" and hasattr(session, "memory_watch"):
        header, encoder, reply, tensors, os_peak = _measured_peak(session, target, args, kwargs, extra)
    else:
        header, encoder = _header(kind, target, args, kwargs, **extra)
        reply, tensors = session.request(header, encoder)
    _check_measured(session, reply)
    recorder.calls.append(call)
    try:
        if reply["ok"] and kind == "call":  # a module the function switched to eval() is switched here too
            sent = wire.call_modules(header, args, kwargs)
            wire.apply_modes(sent, reply.get("modes"))
            call.modes_after = [wire.modes(m) for m in sent]
        if not reply["ok"]:
            err = reply["error"]
            call.error = err["type"]
            raise student_error(call.error, err["message"], err["traceback"])
        if reply.get("changed"):    # the function changed other tensor arguments in place: so are the test's
            _write_back(session, name, args, kwargs, reply["changed"], tensors)
        if reply.get("modified"):   # the function changed an activation it was given in place
            from genlab.checks import CheckFailed
            from genlab.checks.gradients import modified_message

            raise CheckFailed(modified_message(name, reply["modified"]))
        tree = reply["result"]
        for sub in wire.subclass_names(tree):
            recorder.evidence.append(f"{name} returned a tensor subclass {student_text(str(sub), 300)}")

        def handle(hid, type_name):
            h = wire.Handle(hid, type_name)
            if kind == "getattr" and callable_hint(type_name):
                return _BoundMethod(session, recorder, target["handle"], target["method"], name, objects)
            return RemoteObject(session, h, recorder, f"{name}()", objects)

        try:
            call.result = wire.decode(tree, tensors, handle_factory=handle)
        except Exception as exc:  # noqa: BLE001 - checked before, so only a forged answer gets here
            raise session.note_tampering(f"the kernel's answer could not be decoded ({type(exc).__name__})") from None
        if os_peak is not None:
            counted = call.result
            call.result = verified_peak(counted, os_peak)
            parts = getattr(session, "memory_parts", None)
            if parts and call.result is not counted and hasattr(recorder, "measured"):
                from autograder.wall.measure import describe_parts

                recorder.measured.append(f"{name}: {describe_parts(parts)}")
        if kind == "grad_of":
            _verify_gradient(session, recorder, name, target, args, kwargs, call.result, extra["seed"], reference)
        return call.result
    finally:   # whatever came back, the call is kept for diagnosis only within the notebook's budget
        _keep(recorder, call)


def _write_back(session, name: str, args, kwargs, changed: list, tensors: dict) -> None:
    """Writes what the function did in place to its tensor arguments in the kernel into the test's own tensors,
    so that a test's ``unchanged`` assertion reads them as it does in the student's notebook (the kernel got
    copies). Each entry is [path, tensor]: ``["args", 0]``, ``["kwargs", "y"]``, deeper into lists and dicts."""
    import torch
    from genlab.checks import CheckFailed

    roots = {"args": tuple(args), "kwargs": dict(kwargs)}
    for path, tree in changed:
        node = roots[path[0]]
        for key in path[1:]:
            if isinstance(node, (tuple, list)) and type(key) is int and key < len(node):
                node = node[key]
            elif isinstance(node, dict) and type(key) is str and key in node:
                node = node[key]
            else:
                node = None
                break
        where = _where(path)
        if not isinstance(node, torch.Tensor):
            raise _tampering(session, f"the kernel reported {where} of {name} changed in place, and the call "
                                      "has no tensor there")
        try:
            new = wire.decode(tree, tensors).detach().to(node.device)
        except Exception:  # noqa: BLE001 - checked before, so only a forged answer gets here
            raise _tampering(session, "the kernel's answer could not be decoded (an argument changed in place)")
        try:
            with torch.no_grad():
                if new.shape == node.shape and new.dtype == node.dtype:
                    node.copy_(new)
                else:   # resized, or given another dtype (x.data = ...): as the notebook's tensor would be
                    node.data = new
        except RuntimeError as exc:
            raise CheckFailed(f"{name} changed its {where} in place, and the change cannot be written into the "
                              f"test's tensor ({student_text(str(exc).splitlines()[0], 200)}). Expected the "
                              "argument left as it was: compute on a copy (x.clone()) or with out-of-place ops "
                              "(x + 1, not x += 1)") from None


def _where(path: list) -> str:
    if path[0] == "args":
        head = f"argument {path[1]}"
    else:
        head = f"argument `{path[1]}`"
    return head + "".join(f"[{k!r}]" for k in path[2:])


def _tampering(session, evidence: str) -> Exception:
    note = getattr(session, "note_tampering", None)
    if note is not None:
        return note(evidence)
    from autograder.wall.channel import ChannelTampered

    return ChannelTampered(evidence)


def _verify_gradient(session, recorder, name: str, target: dict, args, kwargs, grads, seed: int,
                     reference=None) -> None:
    """A reported gradient against the function's own values (autograder.wall.gradcheck): a contradiction fails
    the test once it has run (its own checks speak first: KeptRecorder.contradicted), or at once where no
    test collects it."""
    def ask(target_, args_, kwargs_):   # a plain call, under the gradient request's seed, not recorded
        return session.request(*_header("call", target_, args_, kwargs_, seed=seed))

    problem = gradcheck.contradiction(ask, name, target, args, kwargs, grads, seed, reference)
    if problem is None:
        return
    pending = getattr(recorder, "contradicted", None)
    if pending is None:
        from genlab.checks import CheckFailed

        raise CheckFailed(problem)
    pending.append(student_text(problem, 2000))
def _zygote(session):
    """The measuring processes of the session's lab (autograder.wall.measure.Zygote), or None where the grader
    has none (a session made by a test of this module, or a zygote that could not start)."""
    measurer = getattr(session, "measurer", None)
    return measurer() if callable(measurer) else None


def _paused(session):
    """The student's kernel frozen for the block (KernelSession.paused), where it can be."""
    import contextlib

    paused = getattr(session, "paused", None)
    return paused() if callable(paused) else contextlib.nullcontext()


def _measured_peak(session, target: dict, args, kwargs, extra: dict):
    """A memory measurement. Of a top-level function, where the grader has measuring processes: in a fresh
    process (autograder.wall.measure.peak_memory), which runs the notebook's cells and then genlab's count of
    one call and a plain call on inputs of its own; the OS counts its peak over its whole life, the plain
    call's answer is checked against the reference's. Returns the count's request and answer, and the OS's
    figure (None where there is none).

    Otherwise (an object the student's code returned, which lives only in the kernel), in four requests to the
    kernel: the inputs, decoded and kept by the kernel (so that decoding is in no figure); genlab's count of
    one call (a dispatch mode in the kernel); and two plain calls, through the same path as every other call
    and with no mode a function could notice, whose memory the OS counts."""
    session.memory_parts = None
    zygote = _zygote(session) if "target" in target else None
    if zygote is not None:
        from autograder.wall import measure

        name = target["target"]
        session.memory_parts = parts = {}
        with _paused(session):
            count, os_peak = measure.peak_memory(
                zygote, name, args, kwargs, cells=list(getattr(session, "measured_cells", ())),
                reference=getattr(zygote.reference, name, None),
                reference_cells=getattr(session, "reference_cells", None) or zygote.reference_cells,
                activations=tuple(target.get("activations", ())), timeout_s=session.limits.test_timeout_s,
                parts=parts)
        if type(count) is not int or count < 0:   # the count was forged: the OS's figure stands
            count = os_peak if os_peak is not None else count
        header, encoder = _header("peak_memory", target, (), {}, **extra)
        return header, encoder, {"ok": True, "result": count if type(count) is int else None}, {}, os_peak
    reply, _ = session.request(*_header("stage", target, args, kwargs))
    if not reply["ok"]:
        err = reply["error"]
        raise student_error(err["type"], err["message"], err["traceback"])
    header, encoder = _header("peak_memory", target, (), {}, staged=True, **extra)
    reply, tensors = session.request(header, encoder)
    if not reply["ok"]:
        return header, encoder, reply, tensors, None
    # Twice, and the smaller figure: what a first call in the process may allocate once (a library's cache, a
    # kernel compiled for this shape) was once 9.4 MiB over an honest count, on a loaded CI machine; a
    # temporary the function makes on every call is in both.
    os_peaks = []
    for staged in (True, "last"):
        with session.memory_watch() as watch:
            plain, _ = session.request(*_header("call", target, (), {}, staged=staged, discard=True))
        if watch is None or not plain["ok"]:
            return header, encoder, reply, tensors, None
        os_peaks.append(watch.peak_bytes)
    return header, encoder, reply, tensors, min(os_peaks)


# What the OS may see beyond the kernel's own count of a call's peak for an honest function: its charges come
# in batches of 64 pages per CPU, a first call initialises libraries (4.3 MiB measured), and kernels' private
# scratch buffers are not in genlab's count.
OS_SLACK_BYTES = 8 * 2**20


def verified_peak(counted, os_bytes: int):
    """The peak a memory check uses: the kernel's count (genlab.checks.peak_memory, taken in the student's
    process, so a notebook could blind it or notice it), unless the OS charged the kernel's processes for more
    than that during a plain call of the function on the same inputs, beyond :data:`OS_SLACK_BYTES` and an
    eighth: then what the OS charged. The OS sees every allocation of at least 4 MiB
    (sandbox.MMAP_THRESHOLD_BYTES) whatever the notebook does, and only ever adds to the count. A count that
    is not a number of bytes is left to the test (it fails on it)."""
    if type(counted) is not int or counted < 0:
        return counted
    if os_bytes > counted + counted // 8 + OS_SLACK_BYTES:
        return os_bytes
    return counted


def callable_hint(type_name: str) -> bool:
    return type_name.endswith(("method", "function", "builtin_function_or_method", "method-wrapper"))


class RemoteFunction:
    """A student's top-level function, called through the kernel. See the module docstring."""

    def __init__(self, session, name: str, recorder: Recorder, reference_session=None,
                 differentiated: dict | None = None, reference=None):
        self.__name__ = name
        self._reference = reference   # the lab's own function, in this process (a gradient's check uses it)
        self._session, self._recorder = session, recorder
        self._reference_session = reference_session
        # The positions every call makes activations (the inputs a test takes the gradient for), and those of
        # the objects it returns (LabNotebook.differentiated): the same in the student's and the reference kernel.
        differentiated = differentiated or {}
        self._activations = tuple(differentiated.get(name, ()))
        self._objects = tuple(differentiated.get(f"{name}()", ()))

    @property
    def _target(self) -> dict:
        return {"target": self.__name__, **({"activations": list(self._activations)} if self._activations else {})}

    def __repr__(self) -> str:
        return f"<student's {self.__name__} (runs in the student's kernel)>"

    def __call__(self, *args, **kwargs):
        return _request(self._session, self._recorder, "call", self.__name__, args, kwargs, self._target,
                        objects=self._objects)

    # -- measurements, dispatched here by genlab.checks (see genlab.checks.remote) --------------------
    def __genlab_measure__(self, kind: str, args, kwargs):
        return _request(self._session, self._recorder, kind, self.__name__, args, kwargs, self._target,
                        objects=self._objects, reference=self._reference)

    def __genlab_time_ratio__(self, reference, args, kwargs, *, rounds: int = 5, min_loop_s: float = 0.05):
        """Ratio of the best rounds, student over reference, timed from *outside* both kernels.

        The reference runs in a second kernel that holds only the reference solution, through the same
        request path, so the overheads cancel. Times are taken here, with this process's clock: student
        code can patch every timer in its own kernel and the measurement does not move.
        """
        from genlab.checks.timing import TimingResult, clearly_below

        zygote = _zygote(self._session)
        if zygote is not None:   # fresh processes, side by side, measured from outside (autograder.wall.measure)
            from autograder.wall import measure

            options = dict(kwargs)
            rounds = int(options.pop("rounds", 2))
            options.pop("min_run_time", None)
            clear_below = options.pop("clear_below", None)
            reference = getattr(reference, "__wrapped__", reference)
            # The student's kernel is frozen meanwhile: nothing it left running competes with either process.
            with _paused(self._session):
                result = measure.time_ratio(
                    zygote, self.__name__, reference, getattr(reference, "__name__", self.__name__), args, options,
                    cells=list(getattr(self._session, "measured_cells", ())),
                    reference_cells=getattr(self._session, "reference_cells", None) or zygote.reference_cells,
                    activations=self._activations, rounds=max(1, min(rounds, 2)), clear_below=clear_below,
                    timeout_s=self._session.limits.test_timeout_s)
            self._recorder.calls.append(Call("time_ratio", self.__name__, (), {}, result))
            return result
        if self._reference_session is None:
            raise RuntimeError("no reference kernel to time against")
        kwargs = dict(kwargs)
        rounds = int(kwargs.pop("rounds", rounds))
        kwargs.pop("min_run_time", None)  # the loop length is calibrated below instead
        clear_below = kwargs.pop("clear_below", None)
        name = getattr(reference, "__name__", self.__name__)

        def timed(session, target, n) -> Lap:
            # First, untimed: the kernel makes n calls' inputs, each its own copy (genlab.testing.server._copies),
            # so a cache keyed on the inputs cannot make calls 2..n free. Then the loop, timed from here: by this
            # process's clock, and by the CPU time the operating system counts for the kernel's processes.
            # The copies' values differ by a fraction of a percent, from call to call and (offset) loop to loop.
            prepare = _loop_request("timed_prepare", target, n, args, kwargs, self._activations)
            prepare[0]["offset"] = _OFFSETS.random()
            for header, encoder in (prepare, _loop_request("timed_loop", target, n, (), {})):
                cpu_before = session.cpu_seconds()
                start = time.perf_counter()
                reply, _ = session.request(header, encoder)
                elapsed = time.perf_counter() - start
                cpu_after = session.cpu_seconds()
                _check_measured(session, reply)
                if not reply["ok"]:
                    err = reply["error"]
                    raise student_error(err["type"], err["message"], err["traceback"])
            cpu = None if cpu_before is None or cpu_after is None else cpu_after - cpu_before
            cpu = cpu if cpu is None or cpu >= 0 else None   # a kernel started again meanwhile: another count
            return Lap(elapsed, cpu, session.cpu_resolution_s())

        def reference_lap(n) -> Lap:
            # The student's kernel is frozen meanwhile: none of its threads or processes can take the CPU
            # from the reference (and so make the student look faster); a burner only ever slows the student.
            with self._session.paused():
                return timed(self._reference_session, name, n)

        reference_loop = lambda n: reference_lap(n).wall_s  # noqa: E731
        max_n = max_timed_calls(args, kwargs, copies_per_call=2 if self._activations else 1)
        overhead = request_overhead(reference_loop)
        n = calibrate(reference_loop, min_loop_s, max_n=max_n, overhead=overhead)
        budget = getattr(getattr(self._session, "limits", None), "test_timeout_s", 60.0) / 4
        student_lap = lambda k: timed(self._session, self.__name__, k)  # noqa: E731
        student_loop = lambda k: student_lap(k).wall_s  # noqa: E731
        for attempt in range(2):
            slow = clearly_slow(student_loop, reference_loop, max(1, n // 10), budget)
            if slow is not None:
                self._recorder.calls.append(Call("time_ratio", self.__name__, (), {}, slow))
                return slow
            student_laps, reference_laps = [], []
            for _ in range(rounds):
                student_laps.append(student_lap(n))
                reference_laps.append(reference_lap(n))
                if all(clearly_below(s_times, r_times, clear_below)
                       for s_times, r_times in lap_columns(student_laps, reference_laps)):
                    break
            # Each side's fastest round: noise (another kernel booting, another worker's tests) only ever adds
            # time, and a burst that slows the reference's short rounds would pull a median ratio towards 1, so
            # that a Python loop 50x slower was once measured under 5x on a loaded machine.
            s, r = min(lap.wall_s for lap in student_laps), min(lap.wall_s for lap in reference_laps)
            longer = reaimed(n, r, overhead, min_loop_s, max_n)
            if attempt or longer is None:
                break
            n = longer  # the loops timed mostly the request: look again, and time longer ones
        result = TimingResult(ratio=s / r, student_median_s=s / n, reference_median_s=r / n,
                              rounds=len(student_laps))
        cpu = cpu_ratio(student_laps, reference_laps)
        if cpu is not None:
            # Wall clock and CPU time each miss something: load on the machine (another worker, a process
            # the student left running) lengthens the reference's wall clock but hardly its CPU time, and
            # time spent waiting (sleep, I/O, a GPU) is in the wall clock only. The larger ratio counts.
            result.wall_ratio, result.cpu_ratio = result.ratio, cpu
            result.ratio = max(result.ratio, cpu)
        self._recorder.calls.append(Call("time_ratio", self.__name__, (), {}, result))
        return result


@dataclass
class Lap:
    """One timed loop: seconds by the grader's clock, and CPU seconds the OS counted for the kernel (or None)."""
    wall_s: float
    cpu_s: float | None
    cpu_resolution_s: float = 1e-9


def lap_columns(student: list[Lap], reference: list[Lap]) -> list[tuple[list[float], list[float]]]:
    """(student, reference) times per clock: the wall clock, and CPU time where it counts (:func:`cpu_counts`)."""
    columns = [([lap.wall_s for lap in student], [lap.wall_s for lap in reference])]
    if cpu_counts(student, reference):
        columns.append(([lap.cpu_s for lap in student], [lap.cpu_s for lap in reference]))
    return columns


# CPU time counts only when the reference's best loop lasts this many steps of the OS's counter (nanoseconds in
# a cgroup; 10 ms clock ticks in /proc, where loops of tens of milliseconds are too short to count).
MIN_CPU_STEPS = 100


def cpu_counts(student: list[Lap], reference: list[Lap]) -> bool:
    """Both kernels' CPU time was read for every loop, and the reference's least lasts :data:`MIN_CPU_STEPS`
    steps of the counter. Where kernels have no cgroup (a container that gives none: container mode in the
    grading image) the counter is /proc's 10 ms tick, and a short loop reads 0 s: never divided by."""
    laps = student + reference
    if not reference or not all(lap.cpu_s is not None for lap in laps):
        return False
    return min(lap.cpu_s for lap in reference) >= MIN_CPU_STEPS * max(lap.cpu_resolution_s for lap in laps)


def cpu_ratio(student: list[Lap], reference: list[Lap]) -> float | None:
    """The ratio of each side's least CPU time over its loops, or None where it cannot be read finely enough."""
    if not cpu_counts(student, reference):
        return None
    return min(lap.cpu_s for lap in student) / min(lap.cpu_s for lap in reference)

def _check_measured(session, reply: dict) -> None:
    check = getattr(session, "check_measured", None)   # a kernel with a baseline (KernelSession)
    if check is not None:
        check(reply)


def _loop_request(kind: str, target: str, n: int, args, kwargs, activations: tuple = ()) -> tuple[dict, wire.Encoder]:
    encoder = wire.Encoder()
    return {"kind": kind, "target": target, "n": n, "activations": list(activations),
            "args": encoder.encode(tuple(args)), "kwargs": encoder.encode(dict(kwargs))}, encoder


_OFFSETS = random.Random()  # its own generator: test code seeding `random` sees the same sequence as before
PREPARED_BYTES = 256 * 2**20  # at most this much of copied inputs per timed loop, in each kernel


def max_timed_calls(args, kwargs, copies_per_call: int = 1) -> int:
    """The longest timed loop whose inputs (a copy per call; two where the call's inputs are activations, which
    keep their leaf) fit in :data:`PREPARED_BYTES`."""
    from torch.utils._pytree import tree_leaves
    import torch

    size = sum(t.numel() * t.element_size() for t in tree_leaves((tuple(args), dict(kwargs)))
               if isinstance(t, torch.Tensor))
    return max(1, min(1_000_000, PREPARED_BYTES // max(1, size * copies_per_call)))


def request_overhead(loop) -> float:
    """Seconds a timed loop of no calls takes: the request's own cost, the best of three (noise only adds)."""
    return min(loop(0) for _ in range(3))


def calibrate(loop, min_loop_s: float, max_n: int = 1_000_000, overhead: float | None = None) -> int:
    """Calls per timed loop, found on the reference: a loop lasts about ten times the request's own overhead
    (tens of milliseconds), which then shifts the ratio towards 1 by under 10%; at most ``max_n`` calls
    (each call's inputs are copied before the loop, and must fit in memory). A burst of load during one of
    these few requests makes a loop look long enough too early; :func:`reaimed` catches that afterwards."""
    if overhead is None:
        overhead = request_overhead(loop)
    target = max(min_loop_s, 10 * overhead)
    n = 1
    while n < max_n:
        took = loop(n)
        if took >= target:
            break
        if took - overhead > target / 20:  # long enough to estimate the cost of a call: aim straight at it
            return min(max_n, max(n + 1, math.ceil(n * (target - overhead) / (took - overhead) * 1.1)))
        n *= 4
    return min(n, max_n)


# The reference's best round must last this many request overheads, or its loop was too short to time.
MIN_WORK_OVER_OVERHEAD = 5.0


def reaimed(n: int, best_reference_s: float, overhead: float, min_loop_s: float, max_n: int) -> int | None:
    """A longer loop, when the reference's best round of ``n`` calls was mostly the request's own overhead.

    That happens when a burst of load hit the calibration (a single request each), so that one call looked
    like a full loop: then every round times the request, on both sides, and the ratio goes to 1 (a Python
    loop 50x the reference's time was measured under 5x that way, on CI's loaded machine). The best of the
    rounds, spread over seconds, gives the cost of a call that calibration missed. None: the loop was long
    enough, or can grow no more."""
    if n >= max_n or best_reference_s >= MIN_WORK_OVER_OVERHEAD * overhead:
        return None
    per_call = max((best_reference_s - overhead) / n, 1e-9)
    target = max(min_loop_s, 10 * overhead)
    return min(max_n, max(4 * n, math.ceil((target - overhead) / per_call * 1.1)))


def clearly_slow(student_loop, reference_loop, probe: int, budget_s: float):
    """The first look's verdict: a TimingResult when the student is over :data:`CLEARLY_SLOW` times the
    reference on a short loop, twice (each side's better look: a burst of load on one of the student's looks
    cannot fail a fast function), else None and the full rounds decide."""
    from genlab.checks.timing import TimingResult

    look, student_s = first_look(student_loop, probe, budget_s)
    reference_s = reference_loop(look)
    if student_s <= CLEARLY_SLOW * reference_s:
        return None
    student_s, reference_s = min(student_s, student_loop(look)), min(reference_s, reference_loop(look))
    if student_s <= CLEARLY_SLOW * reference_s:
        return None
    return TimingResult(ratio=student_s / reference_s, student_median_s=student_s / look,
                        reference_median_s=reference_s / look, rounds=2)


def first_look(loop, probe: int, budget_s: float) -> tuple[int, float]:
    """A short look at the student first: gross slowness (a Python loop, 50-100x) is clear from a few calls,
    and running it n times per round would cost minutes and hit the time limit per test. Both sides then run
    the same short loop, so the request overhead is in both and can only pull the ratio towards 1: a first
    look can end the timing early, never fail a fast function. The look grows 1, 4, 16... calls up to
    ``probe``, and stops once it has taken ``budget_s`` (a quarter of a test call's limit): a loop 100x slower
    than the reference must be measured as slow, not spend the whole limit and time out.
    Returns (calls in the last look, its seconds)."""
    look = 1
    while True:
        took = loop(look)
        if look >= probe or took > budget_s:
            return look, took
        look = min(probe, look * 4)
