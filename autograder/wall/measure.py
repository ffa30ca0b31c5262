"""Time and memory verdicts measured from outside, on fresh processes (issue 39).

Measuring inside the student's long-lived kernel could not hold against a student who has read the grader:
whatever the kernel's server reads, the notebook can write (a baseline it moves, a heap it warms, a timed loop
it recognises, an untimed request it does the work in). So every time and memory figure now comes from a
process that has run nothing but the lab's setup, the notebook's cells that the tests need, and the measured
calls, and the operating system counts its CPU time and its peak memory from before the first of the student's
lines existed in it:

- a *zygote* (``python -m genlab.testing.measure``), started in the same sandbox as a kernel (bubblewrap, the
  kernel user, prlimit, a cgroup), imports torch, genlab and IPython and runs the lab's setup cell, once per lab
  and worker. It never runs a student's code;
- for each measurement it forks a process, which the grader (root) moves into a control group made for it,
  before sending it its job. The group's ``cpuacct.usage`` / ``cpu.stat`` and ``memory.max_usage_in_bytes`` /
  ``memory.peak`` then count its whole life: cells, calls, answer. A balloon, a warmed heap, work done early,
  a helper process: all of it is in the figure. Where the machine has no cgroups the zygote reports ``wait4``'s
  figures for the process (CPU time, and peak resident memory, which includes what it inherited);
- a *baseline*, the same kind of process running none of the student's code, is measured the same way (three
  times, the median) and taken out: a trusted figure, never one from the student's process; for time, at most
  its decoding of the inputs, from a process's own decoding window (between its two marks, :func:`counted`);
- the reference gets the same kind of process, side by side, for the time ratio;
- every answer of a timed or watched call comes back and is compared with the reference's answer on the same
  input (:func:`compare_answers`): a fast wrong answer fails. Each timed call gets inputs of its own, scaled by
  a factor the grader draws at random for that call, so no memo on identity or value can answer one call from
  another.

What it cannot see: an honest process's figure includes what the fork's copy-on-write pages cost it (the
baseline takes most of that out), and a function whose answer is random (the reference itself answers
differently under another seed) can only have its answers' shapes and dtypes checked.
"""
from __future__ import annotations

import math
import os
import random
import secrets
import shutil
import socket
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from autograder.core.limits import Limits
from autograder.wall import cgroups
from autograder.wall.channel import AnswerTimeout, ChannelLost, ChannelTampered, RequestChannel
from autograder.wall.sandbox import kernel_environment
from genlab.testing import wire

COPY_BYTES = 32 * 2**20      # at most this much of inputs (all copies of a timed loop) are staged per measurement
MAX_CALLS = 256           # per timed process: each call costs the grader a copy, an answer to read and compare
TARGET_REFERENCE_CPU_S = 0.25   # a timed process's calls take about this much of the reference's CPU time
SCALE_SPAN = 2.0 ** -7       # float32 and float64 inputs of a timed call are scaled by a factor in [1 - span, 1]
_RANDOM = random.Random()    # the grader's own draws: a test seeding `random` sees the same sequence as before


class MeasureError(RuntimeError):
    """The measuring process itself failed (not the student's code): the grader's fault. A test that meets it
    is not graded, and says why (autograder.grading.pipeline.NOT_GRADED)."""


@dataclass
class Measured:
    """One fresh process: its answer, and what the OS counted for it from outside."""
    reply: dict
    tensors: dict
    cpu_s: float
    wall_s: float
    peak_bytes: int | None
    oom_killed: bool = False
    status: int = 0
    held_bytes: int = 0   # memory held from the ready mark to the end and never written (held_bytes)
    window_cpu_s: float = 0.0    # from the ready mark to the second mark (the inputs decoded); 0 without it
    window_wall_s: float = 0.0
    file_bytes: int = 0   # the files' pages charged to its group (cgroups.Cgroup.file_cache_bytes), at the end


@dataclass
class Baseline:
    cpu_s: float
    wall_s: float
    peak_bytes: int | None
    laps: tuple = ()   # each run's (cpu_s, wall_s), for the evidence
    window_cpu_s: float = 0.0    # a timed baseline's: decoding the inputs, from the ready mark to the second mark
    window_wall_s: float = 0.0


@dataclass(frozen=True)
class EncodedInputs:
    """A timed job's inputs, encoded once for every process that receives them (baseline, student, reference)."""
    text: bytes
    blob: bytes


def encode_inputs(inputs: list, activations: tuple = ()) -> EncodedInputs:
    encoder = wire.Encoder()
    header = {"kind": "inputs", "copies": encoder.encode([[tuple(a), dict(k)] for a, k in inputs]),
              "activations": list(activations)}
    return EncodedInputs(*wire.pack_parts(header, encoder.tensors))


@dataclass
class Zygote:
    """The measuring processes of one lab, in one worker. ``launcher``: the sandbox's command prefix (None:
    unsandboxed, for --unsafe and tests); ``cgroup_limits``: (memory bytes, processes) per process."""
    workdir: Path
    limits: Limits = field(default_factory=Limits)
    launcher: list[str] | None = None
    cgroup_limits: tuple[int, int] | None = None
    setup_source: str = ""
    modules: tuple[str, ...] = ()
    remove_workdir: bool = True
    process: subprocess.Popen | None = None
    channel: RequestChannel | None = None
    cgroup: cgroups.Cgroup | None = None
    baseline: Baseline | None = None
    staged: bool = False         # a stager holds inputs (genlab.testing.measure._stager)
    started_cpu_s: float = 0.0   # the zygote's own start (imports, setup), for the cost figures
    reference: object = None     # the lab's reference (genlab.testing.reference.Reference), for the answers
    reference_cells: list[str] = field(default_factory=list)   # what a reference process runs: setup, solutions
    timing_baselines: dict = field(default_factory=dict)   # (function, calls, input bytes) -> Baseline
    calls_per_process: dict = field(default_factory=dict)  # (function, input bytes) -> calls (calibrate)
    corrections: dict = field(default_factory=dict)   # a memory test's key -> (bytes, the reference's laps)

    # -- lifecycle -------------------------------------------------------------------------------------------
    def start(self) -> "Zygote":
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.channel = RequestChannel()
        argv = [sys.executable, "-m", "genlab.testing.measure", str(self.channel.kernel_fd)]
        prefix = list(self.launcher or [])
        if self.cgroup_limits and cgroups.usable():
            self.cgroup = cgroups.Cgroup.create(*self.cgroup_limits)
            prefix = [*self.cgroup.launcher(), *prefix]
        env = kernel_environment(self.workdir)
        self.process = subprocess.Popen([*prefix, *argv], cwd=str(self.workdir), env=env,
                                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                        pass_fds=(self.channel.kernel_fd,), start_new_session=True)
        self.channel.launched()
        self._ask({"kind": "setup", "source": self.setup_source, "modules": list(self.modules)}, {}, wait_s=300)
        self.started_cpu_s = self._group_cpu()
        return self

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def shutdown(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=10)
        if self.cgroup is not None:
            self.cgroup.remove()
            self.cgroup = None
        if self.channel is not None:
            self.channel.close()
        self.process = None
        if self.remove_workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)

    def _group_cpu(self) -> float:
        return (self.cgroup.cpu_seconds() or 0.0) if self.cgroup is not None else 0.0

    # -- requests ------------------------------------------------------------------------------------------
    def _receive(self, request_id: str, wait_s: float):
        return self.channel.receive(request_id, wait_s=wait_s, read_s=self.limits.answer_read_timeout_s,
                                    max_json_bytes=self.limits.max_answer_json_bytes,
                                    max_tensor_bytes=self.limits.max_answer_tensor_bytes,
                                    alive=self.alive)

    def _ask(self, header: dict, tensors: dict, wait_s: float = 60.0) -> dict:
        request_id = secrets.token_hex(8)
        try:
            self.channel.send(request_id, header, tensors, deadline=time.monotonic() + wait_s)
            reply, _ = self._receive(request_id, wait_s)
        except (AnswerTimeout, ChannelLost, ChannelTampered) as exc:
            raise MeasureError(f"the measuring process did not answer {header['kind']!r}: {exc!r}") from None
        if not reply.get("ok"):
            raise MeasureError(f"the measuring process failed: {reply.get('error', {}).get('message')}")
        return reply

    def stage(self, copies: list, activations: tuple = ()) -> None:
        """The inputs of the next measurements, one (args, kwargs) per call, decoded in the zygote, where the
        inputs at ``activations`` are made activations (genlab.checks.gradients.activation_inputs)."""
        if self.staged:   # the stager of the last inputs ends
            self._ask({"kind": "unstage"}, {})
            self.staged = False
        encoder = wire.Encoder()
        self.channel.send(secrets.token_hex(8), {"kind": "stage"}, {}, deadline=time.monotonic() + 30)
        self._ask({"kind": "copies", "copies": encoder.encode([[tuple(a), dict(k)] for a, k in copies]),
                   "activations": list(activations)}, encoder.tensors, wait_s=120)
        self.staged = True

    def run(self, job: dict, timeout_s: float, inputs: list | None = None, activations: tuple = (),
            pages: bool = False) -> Measured:
        """One fresh process runs ``job``: the notebook's cells, then the *ready mark*, then the calls. Its CPU
        time and wall time are counted from the mark to its answer, read from outside; ``inputs`` (one (args,
        kwargs) per call) are sent only after the mark, so nothing the cells did can depend on them (without
        them the process uses the staged inputs). Its peak memory is over its whole life; with ``pages``, the
        memory it held from the mark to the end without writing to it is read from outside (:func:`held_bytes`,
        against a witness the process forks at the mark) and reported as ``held_bytes``."""
        if not self.alive():
            raise MeasureError("the measuring process is not running")
        request_id = secrets.token_hex(8)
        before = set(self.cgroup.pids()) if self.cgroup is not None else set()
        self.channel.send(request_id, {"kind": "fork"}, {}, deadline=time.monotonic() + 30)
        group, pid = None, None
        if self.cgroup is not None:
            pid = self._new_pid(before)
            group = cgroups.Cgroup.create(*self.cgroup_limits)
            try:
                group.adopt(pid)
            except OSError as exc:   # gone already: its answer says why
                group.remove()
                raise MeasureError(f"could not move the measured process into its group: {exc}") from None
        deadline = time.monotonic() + timeout_s
        start = time.perf_counter()
        answer, done, tensors, timed_out = None, None, {}, False
        cpu_mark, marked, witness = 0.0, False, []
        window_cpu = window_wall = 0.0
        pages = pages and group is not None
        try:
            self.channel.send(request_id, {**job, "mark": True, "hold": group is not None, "witness": pages}, {},
                              deadline=deadline)
            reply, tensors = self._receive(request_id, max(0.1, deadline - time.monotonic()))
            if reply.get("ready") is True and "done" not in reply:
                # The mark: what the OS has counted so far is read now, from outside; the inputs go after it.
                marked = True
                cpu_mark = self._cpu_now(group)
                if pages:
                    witness = witnesses(group, pid)
                start = time.perf_counter()
                if inputs is None:
                    self.channel.send(request_id, {"kind": "go"}, {}, deadline=deadline)
                else:
                    if not isinstance(inputs, EncodedInputs):
                        inputs = encode_inputs(inputs, activations)
                    self.channel.send_encoded(request_id, inputs.text, inputs.blob, deadline=deadline)
                reply, tensors = self._receive(request_id, max(0.1, deadline - time.monotonic()))
                if inputs is not None and reply.get("decoded") is True and "done" not in reply:
                    # The second mark: the inputs are decoded (counted_cpu takes off at most a baseline's share).
                    window_cpu = self._cpu_now(group) - cpu_mark
                    window_wall = time.perf_counter() - start
                    self.channel.send(request_id, {"kind": "go"}, {}, deadline=deadline)
                    reply, tensors = self._receive(request_id, max(0.1, deadline - time.monotonic()))
            if "done" in reply:   # the zygote's report came first: the process ended without an answer
                done = reply
            else:
                answer = reply
        except AnswerTimeout:
            timed_out = True
        except ChannelTampered as exc:   # the student's code, in the measured process: tampering, not a fault
            self._stop_group(group)
            self.shutdown()
            raise ChannelTampered(f"a measured process broke the channel: {exc}") from None
        wall = time.perf_counter() - start
        cpu = peak = None
        oom, held, file_bytes = False, 0, 0
        if group is not None:
            if group.can_freeze():
                group.freeze(True)
            cpu, peak, oom = group.cpu_seconds(), group.memory_peak_bytes(), group.oom_killed()
            file_bytes = group.file_cache_bytes()
            if cpu is not None:
                cpu -= cpu_mark
            if witness and answer is not None and group.can_freeze():
                held = held_bytes(pid, witness)
            self._stop_group(group)
        elif timed_out:
            self._kill_children()
        if answer is not None or timed_out:
            try:
                done, _ = self._receive(request_id, 30.0)
            except (AnswerTimeout, ChannelLost, ChannelTampered) as exc:
                self.shutdown()
                raise MeasureError(f"the zygote did not report on the measured process: {exc!r}") from None
        usage = (done or {}).get("result") or {}
        if cpu is None:
            # Without cgroups: the zygote's tree, whose stager has reaped the measured process by now, less
            # what the tree had used at the mark (10 ms clock ticks); the whole life where there was no mark.
            cpu = (cgroups.process_tree_cpu_seconds(self.process.pid) - cpu_mark if marked and group is None
                   else float(usage.get("cpu_s", wall)))
        if peak is None and "maxrss_bytes" in usage:
            peak = int(usage["maxrss_bytes"])
        if timed_out:
            from autograder.wall.kernel import RemoteTimeout
            raise RemoteTimeout(f"stopped after {timeout_s:.0f} s (time limit per call), in a measured process")
        if answer is None:
            status = int(usage.get("status", 0))
            why = (f"the memory limit ({self.cgroup_limits[0] / 2**30:g} GiB)" if oom else
                   f"signal {os.WTERMSIG(status)}" if os.WIFSIGNALED(status) else
                   f"exit status {os.WEXITSTATUS(status)}")
            answer = {"ok": False, "error": {"type": "MeasuredProcessDied", "traceback": "",
                                             "message": f"the measured process ended without an answer: {why}"}}
        return Measured(answer, tensors, max(cpu, 0.0), wall, peak, oom, int(usage.get("status", 0)), held,
                        max(window_cpu, 0.0), max(window_wall, 0.0), file_bytes)

    def _cpu_now(self, group) -> float:
        if group is not None:
            return group.cpu_seconds() or 0.0
        return cgroups.process_tree_cpu_seconds(self.process.pid)

    def _new_pid(self, before: set[int], wait_s: float = 30.0) -> int:
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline:
            new = set(self.cgroup.pids()) - before
            if new:
                return min(new)
            time.sleep(0.001)
        raise MeasureError("the measuring process did not fork")

    @staticmethod
    def _stop_group(group) -> None:
        if group is not None:
            group.remove()   # kills whatever the measured process left running

    def _kill_children(self) -> None:
        """Without cgroups: the zygote's children (the measured process) are killed through /proc."""
        import signal
        for entry in os.scandir("/proc"):
            if entry.name.isdigit():
                try:
                    fields = Path(f"/proc/{entry.name}/stat").read_bytes().rsplit(b")", 1)[1].split()
                except OSError:
                    continue
                if int(fields[1]) == self.process.pid:
                    try:
                        os.kill(int(entry.name), signal.SIGKILL)
                    except ProcessLookupError:
                        pass

    def timing_baseline(self, key: tuple, inputs: "EncodedInputs", timeout_s: float, runs: int = 3) -> Baseline:
        """What receiving and decoding a timed job's inputs after the mark costs a process that runs none of the
        student's code: the median of ``runs`` processes, measured once per function, number of calls and input
        size in this zygote (every notebook's timing test of that function sends inputs of that size), so that
        one process slowed by the machine moves neither the figure nor what it costs per notebook."""
        if key not in self.timing_baselines:
            laps = [self.run({"kind": "baseline", "cells": [self.setup_source]}, timeout_s, inputs=inputs)
                    for _ in range(runs)]
            self.timing_baselines[key] = Baseline(statistics.median(m.cpu_s for m in laps),
                                                  statistics.median(m.wall_s for m in laps), None,
                                                  tuple((round(m.cpu_s, 4), round(m.wall_s, 4)) for m in laps),
                                                  statistics.median(m.window_cpu_s for m in laps),
                                                  statistics.median(m.window_wall_s for m in laps))
        return self.timing_baselines[key]

    def measure_baseline(self, runs: int = 3) -> Baseline:
        """A process that runs none of the student's code, measured as a student's is: the median of ``runs``.
        Its memory is its peak less what it held unchanged from the mark to its end, as a student's is."""
        if self.baseline is None:
            self.stage([])
            laps = [self.run({"kind": "baseline", "cells": [self.setup_source]}, 60.0, pages=True)
                    for _ in range(runs)]
            peaks = [m.peak_bytes - m.held_bytes for m in laps if m.peak_bytes is not None]
            self.baseline = Baseline(statistics.median(m.cpu_s for m in laps),
                                     statistics.median(m.wall_s for m in laps),
                                     int(statistics.median(peaks)) if peaks else None)
        return self.baseline


# -- the pages a process held through a measurement ----------------------------------------------------------------
PAGE = os.sysconf("SC_PAGE_SIZE")
_PRESENT, _PFN = 1 << 63, (1 << 55) - 1


def _stat(pid: int) -> list[bytes] | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()   # state(0) ppid(1) ... starttime(19)
    except OSError:
        return None


def witnesses(group: "cgroups.Cgroup", pid: int) -> list[tuple[int, bytes]]:
    """The processes of ``group`` whose parent is ``pid``, as (pid, start time): read at the ready mark, so each
    was forked before it (genlab.testing.measure._ready forks one and stops it)."""
    found = []
    for other in group.pids():
        fields = _stat(other) if other != pid else None
        if fields is not None and int(fields[1]) == pid:
            found.append((other, fields[19]))
    return found[:4]


def _frames(pid: int, regions: list[tuple[int, int]]):
    import numpy as np

    with open(f"/proc/{pid}/pagemap", "rb") as pm:
        out = []
        for lo, hi in regions:
            pm.seek(lo // PAGE * 8)
            out.append(np.frombuffer(pm.read((hi - lo) // PAGE * 8), dtype=np.uint64))
    return out


def held_bytes(pid: int, witness: list[tuple[int, bytes]]) -> int:
    """Bytes of ``pid``'s private anonymous memory (its heap and unnamed mappings) that are, at the end, in the
    same page frame as in a witness forked before the ready mark, and in no other process's: pages the process
    held since the mark and never wrote to (a write copies the page to a new frame), charged to its own group
    (inherited pages are the zygote's too). No temporary of the calls can have lived in them: a balloon freed and
    taken again is in new frames, a warmed heap or a scratch buffer reused is written to. Read from outside
    (``/proc/<pid>/maps``, ``pagemap``, ``/proc/kpagecount``; the grader is root); 0 where it cannot be read."""
    import numpy as np

    best = 0
    try:
        with open(f"/proc/{pid}/maps") as f:
            maps = f.read().splitlines()
    except OSError:
        return 0
    regions = []
    for line in maps:
        parts = line.split(maxsplit=5)
        name = parts[5].strip() if len(parts) > 5 else ""
        if len(parts) >= 5 and parts[1] == "rw-p" and name in ("", "[heap]"):
            lo, hi = (int(x, 16) for x in parts[0].split("-"))
            regions.append((lo, hi))
    for other, started in witness:
        fields = _stat(other)
        if fields is None or fields[19] != started or int(fields[1]) != pid:
            continue   # gone, or not the process read at the mark
        try:
            mine, theirs = _frames(pid, regions), _frames(other, regions)
            shared = []
            for a, b in zip(mine, theirs):
                both = ((a & np.uint64(_PRESENT)) != 0) & ((b & np.uint64(_PRESENT)) != 0)
                frames = a & np.uint64(_PFN)
                same = both & (frames == (b & np.uint64(_PFN))) & (frames != 0)
                shared.append(frames[same])
            frames = np.concatenate(shared) if shared else np.zeros(0, dtype=np.uint64)
            count = 0
            fd = os.open("/proc/kpagecount", os.O_RDONLY)
            try:
                for frame in frames.tolist():
                    if int.from_bytes(os.pread(fd, 8, frame * 8), "little") == 2:   # these two, nobody else
                        count += 1
            finally:
                os.close(fd)
        except OSError:
            continue
        best = max(best, count * PAGE)
    return best


# -- inputs ----------------------------------------------------------------------------------------------------
def input_bytes(args, kwargs) -> int:
    """Bytes of one call's inputs: its tensors, and the parameters and buffers of its modules."""
    import torch
    from torch.utils._pytree import tree_leaves

    leaves = tree_leaves((tuple(args), dict(kwargs)))
    tensors = [t for t in leaves if isinstance(t, torch.Tensor)]
    tensors += [t for m in leaves if isinstance(m, torch.nn.Module) for t in (*m.parameters(), *m.buffers())]
    return sum(t.numel() * t.element_size() for t in tensors)


def input_shapes(args, kwargs) -> tuple:
    """What decides a call's memory besides its code: each tensor's shape and dtype, each module's parameters'
    and buffers' bytes, and any other argument as it is (its repr, for an unhashable one)."""
    import torch
    from torch.utils._pytree import tree_leaves

    def one(leaf):
        if isinstance(leaf, torch.Tensor):
            return ("tensor", tuple(leaf.shape), str(leaf.dtype))
        if isinstance(leaf, torch.nn.Module):
            return ("module", type(leaf).__name__, input_bytes((leaf,), {}))
        return ("value", repr(leaf)[:200])

    return tuple(one(leaf) for leaf in tree_leaves((tuple(args), dict(kwargs))))


def scaled_copy(args, kwargs, scale: float):
    """The inputs with every float32 or float64 tensor multiplied by ``scale`` (a copy of its own, even at 1.0);
    other tensors copied; modules deep-copied; anything else as it is."""
    import copy

    import torch
    from torch.utils._pytree import tree_map

    def one(t):
        if isinstance(t, torch.nn.Module):
            return copy.deepcopy(t)
        if not isinstance(t, torch.Tensor):
            return t
        with torch.no_grad():
            c = t.detach().clone()
            if t.dtype in (torch.float32, torch.float64):
                c.mul_(scale)
        return c.requires_grad_(t.requires_grad)

    return tree_map(one, (tuple(args), dict(kwargs)))


def timed_copies(args, kwargs, n: int) -> list:
    """n calls' inputs, each scaled by a factor of its own, drawn by the grader in [1 - SCALE_SPAN, 1)."""
    return [scaled_copy(args, kwargs, 1.0 - SCALE_SPAN * _RANDOM.random()) for _ in range(n)]


# -- the reference's answers -------------------------------------------------------------------------------------
def one_thread():
    """One torch thread in the grader for the block: its comparisons and copies are of a few hundred KiB each,
    where a pool's waiting threads on a busy machine cost more than the work (comparing Lab 1's 85 timed
    answers took 1.12 s of CPU with two threads, 0.07 s with one)."""
    import contextlib

    import torch

    @contextlib.contextmanager
    def keep():
        threads = torch.get_num_threads()
        torch.set_num_threads(1)
        try:
            yield
        finally:
            torch.set_num_threads(threads)
    return keep()


def _quiet_rng():
    """The grader's random generators as they were, after the block (the test's own draws are not moved), and
    one thread meanwhile: the reference's answers are computed here, beside other workers and kernels, where
    an OpenMP pool's waiting threads once made one call of ``torch.exp`` on 32768 floats take 43 ms."""
    import contextlib

    import numpy as np
    import torch

    @contextlib.contextmanager
    def keep():
        state, np_state, threads = random.getstate(), np.random.get_state(), torch.get_num_threads()
        torch.set_num_threads(1)
        with torch.random.fork_rng(devices=[]):
            try:
                yield
            finally:
                random.setstate(state)
                np.random.set_state(np_state)
                torch.set_num_threads(threads)
    return keep()


def reference_answers(reference, copies: list, default_dtype: str | None) -> tuple[list, bool]:
    """The reference's answer to every copy, computed here, and whether it is deterministic (the same answer
    for the first copy under two other seeds; if not, only the answers' structure is compared)."""
    import torch

    def call(a, k):
        a, k = scaled_copy(a, k, 1.0)   # a copy: the staged inputs stay as they were drawn
        with wire.default_dtype(default_dtype):
            return _detached(reference(*a, **k))

    with _quiet_rng():
        torch.manual_seed(_RANDOM.randrange(2**31))
        first = call(*copies[0])
        torch.manual_seed(_RANDOM.randrange(2**31))
        again = call(*copies[0])
        deterministic = not compare_answers(again, first)
        answers = [first] + [call(a, k) for a, k in copies[1:]]
    return answers, deterministic


def _detached(value):
    import torch
    from torch.utils._pytree import tree_map

    return tree_map(lambda t: t.detach() if isinstance(t, torch.Tensor) else t, value)


RTOL = 1e-4   # relative to each element, and to the answer's largest magnitude (a float32 rounding is ~6e-8)


def compare_answers(got, expected, values: bool = True, where: str = "the answer") -> str:
    """'' when ``got`` is ``expected`` (same structure, shapes and dtype kinds; values within :data:`RTOL`,
    compared in float64, where ``values``), else what differs, for the student's message."""
    import torch

    if isinstance(expected, torch.Tensor):
        if not isinstance(got, torch.Tensor):
            return f"{where}: expected a tensor, got {type(got).__name__}"
        if tuple(got.shape) != tuple(expected.shape):
            return f"{where}: expected shape {tuple(expected.shape)}, got {tuple(got.shape)}"
        if got.is_floating_point() != expected.is_floating_point():
            return f"{where}: expected dtype {expected.dtype}, got {got.dtype}"
        if not values or expected.numel() == 0:
            return ""
        if not expected.is_floating_point() and not expected.is_complex():
            return "" if torch.equal(got.to(expected.dtype), expected) else f"{where}: its values differ"
        g, e = got.detach().double(), expected.detach().double()
        finite = torch.isfinite(e)
        if not torch.equal(torch.isfinite(g), finite):
            return f"{where}: non-finite values (nan, inf) where the reference has none, or the other way round"
        scale = e[finite].abs().max().item() if finite.any() else 0.0
        diff = (g - e).abs()[finite]
        bad = diff > RTOL * (e.abs()[finite] + scale) + 1e-12
        if bad.any():
            worst = diff.max().item()
            return (f"{where}: {int(bad.sum())} of {e.numel()} values differ from the reference's (largest "
                    f"difference {worst:.3g}, on values up to {scale:.3g})")
        return ""
    if isinstance(expected, (list, tuple)):
        if not isinstance(got, (list, tuple)) or len(got) != len(expected):
            return f"{where}: expected a {type(expected).__name__} of {len(expected)}, got {_what(got)}"
        for i, (g, e) in enumerate(zip(got, expected)):
            why = compare_answers(g, e, values, f"{where}[{i}]")
            if why:
                return why
        return ""
    if isinstance(expected, dict):
        if not isinstance(got, dict) or set(got) != set(expected):
            return f"{where}: expected a dict with keys {sorted(map(str, expected))}, got {_what(got)}"
        for key in expected:
            why = compare_answers(got[key], expected[key], values, f"{where}[{key!r}]")
            if why:
                return why
        return ""
    if isinstance(expected, float) and isinstance(got, (int, float)) and not isinstance(got, bool):
        if not values or (math.isnan(expected) and math.isnan(got)):
            return ""
        return "" if abs(got - expected) <= RTOL * abs(expected) + 1e-12 else f"{where}: expected {expected!r}, got {got!r}"
    if not values:
        return "" if type(got) is type(expected) else f"{where}: expected {type(expected).__name__}, got {_what(got)}"
    return "" if got == expected and type(got) is type(expected) else f"{where}: expected {expected!r}, got {_what(got)}"


def _what(value) -> str:
    return type(value).__name__ if not isinstance(value, (int, float, str)) else repr(value)[:80]


def wrong_answer(name: str, why: str, call: int, calls: int, what: str):
    from genlab.checks import CheckFailed

    return CheckFailed(
        f"wrong answer in a {what}: expected {name} to return the reference's answer on every call, got a different "
        f"one on call {call + 1} of {calls}: {why}. Every timed and every memory-watched call is checked: make "
        f"{name} compute its answer from its inputs on every call (no cache, no shortcut for some calls)")


# -- the two verdicts ------------------------------------------------------------------------------------------
def _decoded(measured: Measured):
    from autograder.core.sanitize import student_text

    reply = measured.reply
    if not reply.get("ok"):
        err = reply.get("error") or {}
        raise wire.student_error(student_text(str(err.get("type", "Error")), 100),
                                 student_text(str(err.get("message", "")), 4000),
                                 student_text(str(err.get("traceback", "")), 6000))
    try:
        return wire.decode(reply["result"], measured.tensors)
    except Exception as exc:  # noqa: BLE001 - a forged answer
        raise wire.student_error("ValueError", f"the measured process's answer could not be read ({exc!r})") \
            from None


def calibrate(reference, args, kwargs, default_dtype, target_s: float = TARGET_REFERENCE_CPU_S) -> int:
    """Calls per timed process: about ``target_s`` of the reference's CPU time, found here (the reference is
    trusted), within :data:`COPY_BYTES` of inputs."""
    size = max(1, input_bytes(args, kwargs))
    most = max(1, min(MAX_CALLS, COPY_BYTES // size))
    with _quiet_rng():
        n = 1
        copies: list = []
        while True:
            copies += [scaled_copy(args, kwargs, 1.0) for _ in range(n - len(copies))]
            start = time.process_time()
            with wire.default_dtype(default_dtype):
                for a, k in copies:
                    reference(*a, **k)
            took = time.process_time() - start
            if took >= 0.02 or n >= most:
                break
            n *= 4
    per_call = max(took / n, 1e-7)
    return max(1, min(most, math.ceil(target_s / per_call)))


def time_ratio(zygote: Zygote, name: str, reference, reference_name: str, args, kwargs, *, cells: list[str],
               reference_cells: list[str], activations: tuple = (), rounds: int = 2,
               clear_below: float | None = None, timeout_s: float = 60.0):
    """Student over reference, each in fresh processes on the same grader-drawn inputs, each counted from its
    ready mark (its cells have run; the inputs come after it) to its answer, at most a baseline process's
    decoding of the same inputs taken out (:func:`counted`): the CPU ratio (the clock's only where the student's
    process waited), each side's better of up to ``rounds`` processes
    (a second pair only where the first is not clearly below ``clear_below``). Every timed answer is checked."""
    from genlab.checks.timing import TimingResult

    default_dtype = wire.default_dtype_name()
    size = input_bytes(args, kwargs)
    with one_thread():
        # Once per function and input size in this zygote, like the baseline: every notebook's test then has
        # the same number of calls, and so the same baseline.
        n = zygote.calls_per_process.get((reference_name, size))
        if n is None:
            n = zygote.calls_per_process[reference_name, size] = calibrate(reference, args, kwargs, default_dtype)
        copies = timed_copies(args, kwargs, n)
        expected, deterministic = reference_answers(reference, copies, default_dtype)
        sent = encode_inputs(copies, activations)   # once, for every process below
    zygote.stage([])   # nothing staged: the inputs reach each process only after its ready mark
    job = {"kind": "time", "default_dtype": default_dtype}
    base = zygote.timing_baseline((reference_name, n, size, tuple(activations)), sent,
                                  timeout_s)
    student, ref = [], []
    for _ in range(rounds):
        s = zygote.run({**job, "target": name, "cells": cells}, timeout_s, inputs=sent)
        answers = _decoded(s)
        if not isinstance(answers, list) or len(answers) != n:
            raise wrong_answer(name, "the process did not return one answer per call", 0, n, "timed loop")
        with one_thread():
            for k, (got, want) in enumerate(zip(answers, expected)):
                why = compare_answers(got, want, values=deterministic)
                if why:
                    raise wrong_answer(name, why, k, n, "timed loop")
        r = zygote.run({**job, "target": reference_name, "cells": reference_cells}, timeout_s, inputs=sent)
        _decoded(r)
        student.append(s)
        ref.append(r)
        cpu = _ratio(student, ref, base)
        wall = _ratio(student, ref, base, clock=True)
        if clear_below is not None and max(cpu, wall) < clear_below:
            break
    s_wall = min(counted(m, base, clock=True) for m in student)
    r_wall = min(counted(m, base, clock=True) for m in ref)
    s_cpu = min(counted(m, base) for m in student)
    r_cpu = min(counted(m, base) for m in ref)
    return TimingResult(ratio=verdict_ratio(cpu, wall, s_wall - r_wall), student_median_s=s_cpu / n,
                        reference_median_s=r_cpu / n, rounds=len(student), wall_ratio=wall, cpu_ratio=cpu)


WAITING_S = 1.0   # the student's process took this much longer by the clock than the reference's


def verdict_ratio(cpu: float, wall: float, wall_excess_s: float) -> float:
    """The CPU ratio, which the OS counts for each process alone: the wall clock of a process of a tenth of a
    second moves with the grader reading its answer and with everything else on the machine (the reference
    against itself read 2.12x by the clock, 0.97x by CPU time, on a loaded 2-core machine). The clock counts
    only where the student's process waited (sleep, I/O) a whole :data:`WAITING_S` longer than the reference's."""
    return max(cpu, wall) if wall_excess_s > WAITING_S else cpu


def counted(m: Measured, base: Baseline, clock: bool = False) -> float:
    """A timed process's figure: from its ready mark to its answer, less the part of the window between its two
    marks (its inputs received and decoded) that the baseline's window of the same inputs took, never more than
    its own window. So the calls (after the second mark) are counted whole, with no baseline taken from them,
    and so is whatever else the process did while its inputs were decoded (a thread of the cells working on
    them), beyond the decoding itself. The marks are the process's word and need no trust: a process that says
    the second mark early or never, or one that decodes slowly, is charged more, not less; it can at most be
    let off the baseline's window, which a baseline process (the grader's, running none of the student's code)
    measures. Before, the baseline's whole figure was taken off the process's: Lab 1's calls are about 10 ms of
    a 70 ms process, and a baseline read high on a machine at a load average of 10 to 27 took all of the
    reference's, which fell to the 1e-6 s floor (959x for bug_elbo_not_negated's correct reparameterize)."""
    total, window = (m.wall_s, m.window_wall_s) if clock else (m.cpu_s, m.window_cpu_s)
    off = min(window, base.window_wall_s if clock else base.window_cpu_s)
    return max(total - off, 1e-6)


def _ratio(student: list, ref: list, base: Baseline, clock: bool = False) -> float:
    """Student over reference, each side's better process (:func:`counted`)."""
    return min(counted(m, base, clock) for m in student) / min(counted(m, base, clock) for m in ref)


SUSPECT_SLACK_BYTES = 8 * 2**20   # a figure over the count by more than this and an eighth is measured again
FILE_PAGES_BYTES = 2**20   # a process charged this much of the files' pages (a first read) is measured again
MEMORY_TRIES = 3           # processes, at most, for one memory figure that stays suspect
CORRECTION_RUNS = 3        # reference processes whose median is a function's first-call correction, per zygote


def peak_memory(zygote: Zygote, name: str, args, kwargs, *, cells: list[str], reference=None,
                reference_cells: list[str] | None = None, activations: tuple = (),
                timeout_s: float = 60.0, parts: dict | None = None) -> tuple[object, int | None]:
    """genlab's count of one call, taken in a fresh process, and the most memory the OS charged that process
    over its whole life beyond the baseline's (None where it cannot be read). The plain call's answer is
    checked against ``reference``'s on the same input.

    The figure is the process's peak, less what it held untouched from the ready mark to its end (the witness's
    credit, :func:`held_bytes`), less the baseline's, less what the reference's own process spent on the same
    inputs beyond its count (a first call's library memory; the median of :data:`CORRECTION_RUNS` processes,
    measured once per function, input shapes and reference cells in the zygote, and kept). Either reading can
    miss on a busy machine (a CI run under a load of 10 to 27 read 14.8 MB for a correct Lab 5 function
    counted at 1.75 MB): where the credit
    reads 0 (an honest process always holds some of its own heap from before the mark) or the figure is over
    the count by more than :data:`SUSPECT_SLACK_BYTES` and an eighth, the student's process is measured again,
    up to :data:`MEMORY_TRIES` processes, and the smallest figure stands; a reference process that gave no count
    is not one of the correction's (up to two more are run). Each try measures the whole function again, so a figure it holds or touches is in all.
    (The CI run of 11c9ebf read a correct float64 variant of Lab 5's extract_features at 17.2 MiB over its
    count in both of two tries, where the same process reads 2 to 4 MiB on a quiet machine; the anonymous
    memory of one fresh process of the same code was 31.4 MiB in one try and 22.0 in the next, by memory.stat.
    What varies is not known: a third try is the remedy, not an explanation.)

    The peak also holds the files' pages that the process was the first to read into memory: the kernel charges
    a page of the page cache to the group that faults it in. After the page cache was dropped, the first
    measured process of a correct float64 variant of Lab 5's extract_features was charged 42 MiB of files'
    pages (memory.stat's ``cache``, measured). Nothing is taken off for them (a process
    could read files to swell the figure that would be taken off): a process charged more than
    :data:`FILE_PAGES_BYTES` of them is measured again, when those pages are in the cache, charged to nobody
    new; a reference process so charged is not counted. ``parts`` (a dict) receives what
    the figure was made of, for the test's message."""
    default_dtype = wire.default_dtype_name()
    with one_thread():
        copies = timed_copies(args, kwargs, 2)
    zygote.measure_baseline()
    base = zygote.baseline
    zygote.stage(copies, activations)
    job = {"kind": "memory", "target": name, "cells": cells, "default_dtype": default_dtype}
    m = zygote.run(job, timeout_s, pages=True)
    if m.oom_killed:
        raise wire.student_error("MemoryError", f"{name} ran out of memory in the measured process: the limit is "
                                 f"{zygote.cgroup_limits[0] / 2**30:g} GiB")
    answer = _decoded(m)
    if not isinstance(answer, dict) or set(answer) != {"count", "output"}:
        raise wire.student_error("ValueError", "the measured process's answer is not the measuring code's")
    if reference is not None:
        with one_thread():
            expected, deterministic = reference_answers(reference, copies[1:], default_dtype)
            why = compare_answers(answer["output"], expected[0], values=deterministic)
        if why:
            raise wrong_answer(name, why, 0, 1, "memory-watched call")
    count = answer["count"]
    if m.peak_bytes is None or base.peak_bytes is None:
        return count, None
    correction, reference_laps = 0, []
    if reference is not None and reference_cells:
        # What a first call costs in a fresh process beyond genlab's count (libraries initialised for these
        # shapes: Lab 3's tiled_attention, 18 MB by the OS over a count of a few): the reference's own process
        # on the same inputs says how much, and that much is not the student's. Measured once per function,
        # input shapes and reference cells in this zygote, like the baseline: the reference's process runs
        # none of the student's code, so every notebook's test of that function would measure the same.
        key = (getattr(reference, "__name__", name), input_shapes(args, kwargs), tuple(reference_cells),
               tuple(activations), default_dtype)
        if key not in zygote.corrections:
            # The median of three processes, as for the baseline: every later notebook's figure uses it, so one
            # process's reading (anonymous memory varies by 10 MiB between runs of one process, below) must not.
            # A process charged for files' pages it read in first is not one of the three.
            corrections = []
            for _ in range(CORRECTION_RUNS + 2):
                r = zygote.run({**job, "target": key[0], "cells": reference_cells}, timeout_s, pages=True)
                counted = _decoded(r).get("count") if r.reply.get("ok") else None
                if type(counted) is int and r.peak_bytes is not None and r.file_bytes <= FILE_PAGES_BYTES:
                    corrections.append(max(0, r.peak_bytes - r.held_bytes - base.peak_bytes - counted))
                    reference_laps.append((r.peak_bytes, r.held_bytes, counted))
                if len(corrections) == CORRECTION_RUNS:
                    break
            if corrections:   # else none is kept: the next notebook's test measures again
                zygote.corrections[key] = (int(statistics.median(corrections)), tuple(reference_laps))
        correction, reference_laps = zygote.corrections.get(key, (0, tuple(reference_laps)))
    tries = [m]
    figure = lambda lap: max(0, lap.peak_bytes - lap.held_bytes - base.peak_bytes - correction)  # noqa: E731
    if type(count) is int and count >= 0:
        while len(tries) < MEMORY_TRIES and (
                tries[-1].held_bytes == 0 or tries[-1].file_bytes > FILE_PAGES_BYTES
                or figure(tries[-1]) > count + count // 8 + SUSPECT_SLACK_BYTES):
            again = zygote.run(job, timeout_s, pages=True)
            if not again.reply.get("ok") or again.oom_killed or again.peak_bytes is None:
                break
            tries.append(again)
    os_bytes = min(figure(lap) for lap in tries)
    if parts is not None:
        parts.update(count=count, os_bytes=os_bytes, baseline_bytes=base.peak_bytes, correction_bytes=correction,
                     reference=reference_laps,
                     tries=[(lap.peak_bytes, lap.held_bytes, lap.file_bytes) for lap in tries])
    return count, os_bytes


def describe_parts(parts: dict) -> str:
    """What a memory figure was made of, in words (:func:`peak_memory`'s ``parts``)."""
    mib = lambda b: f"{b / 2**20:.2f} MiB"  # noqa: E731
    tries = "; ".join(f"peak {mib(p)}, held untouched since the ready mark {mib(h)}"
                      + (f", files' pages read in first {mib(f)}" if f > FILE_PAGES_BYTES else "")
                      for p, h, f in parts["tries"])
    return (f"the OS's figure {mib(parts['os_bytes'])} is the measured process's peak less what it held untouched "
            f"since the ready mark, less the baseline's {mib(parts['baseline_bytes'])}, less "
            f"{mib(parts['correction_bytes'])} that the reference's processes spent beyond their count on the same "
            f"inputs (their median; the smallest of {len(parts['tries'])} "
            f"tr{'ies' if len(parts['tries']) > 1 else 'y'} of yours: {tries})")
