"""A student's kernel, driven cell by cell, with limits, and the request channel the tests use.

Built on jupyter_client directly rather than nbclient's whole-notebook loop, because the grader needs to
interleave three things nbclient does not: running a student cell, running trusted tests between cells
(through :meth:`KernelSession.request`), and capping each cell's output in *bytes*.
"""
from __future__ import annotations

import os
import queue
import secrets
import shutil
import subprocess
import sys
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import nbformat
import zmq
from jupyter_client import KernelManager

from autograder.wall import cgroups
from autograder.wall.channel import (AnswerTimeout, ChannelLost, ChannelTampered, RequestChannel, SendTimeout,
                                     check_reply)
from autograder.wall.sandbox import channel_folder, kernel_account, kernel_environment
from autograder.core.limits import Limits
from genlab.testing import wire


class KernelLost(Exception):
    """The student's kernel died (crash, ``os._exit``, a memory limit) while running a request."""


class RemoteTimeout(Exception):
    """The student's code ran past the time limit and was interrupted."""


class AnswerLost(KernelLost, ChannelLost):
    """The kernel closed the grader's channel or sent no answer: graded as a lost kernel."""


@dataclass
class CellRun:
    status: str                      # "ok", "error", "timeout", "dead"
    outputs: list = field(default_factory=list)
    error: str = ""                  # "ZeroDivisionError: division by zero"
    seconds: float = 0.0
    truncated_bytes: int = 0


@dataclass
class MemoryWatch:
    peak_bytes: int | None = None   # set when the watched block ends


class KernelSession:
    """One kernel in ``workdir``; ``launcher`` prefixes the kernel command (a sandbox, see sandbox.py)."""

    def __init__(self, workdir: Path, limits: Limits = Limits(), env: dict | None = None,
                 launcher: list[str] | None = None, cgroup_limits: tuple[int, int] | None = None,
                 remove_workdir: bool = False):
        self.workdir = Path(workdir)
        self.channel: RequestChannel | None = None   # requests and answers (autograder.wall.channel)
        self.channel_evidence: list[str] = []   # what was wrong with the kernel's answers (tampering)
        self.limits = limits
        self.env = env or {}
        self.launcher = launcher or []
        self.kernel_fd: int | None = None      # the kernel's end of the channel, as numbered in the kernel
        self.baseline: dict | None = None      # watched name -> identity, as the kernel reported it at boot
        self.km: KernelManager | None = None
        self.kc = None
        self.dead_reason = ""
        self.dead_of_timeout = False     # the kernel was killed for ignoring an interrupt (else: it died)
        self.started_at = 0.0
        self.cgroup_limits = cgroup_limits   # (memory bytes, processes), applied when cgroups are usable
        self.cgroup = None
        self.remove_workdir = remove_workdir   # the scratch folder goes with the kernel
        # Where time and memory are measured, on fresh processes (autograder.wall.measure): a callable giving the
        # lab's Zygote (or None), and the notebook's cells those processes run, as this kernel ran them.
        self.measurer = None
        self.measured_cells: list[str] = []
        self.reference_cells: list[str] | None = None   # the reference's counterpart (None: setup and solutions)

    # -- lifecycle ---------------------------------------------------------------------------------
    def start(self) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.channel = RequestChannel()
        # One zmq context for every kernel of this process: a per-kernel context that the garbage
        # collector finalises while a channel thread still holds a socket blocks in term() for ever.
        self.km = KernelManager(kernel_name="python3", context=zmq.Context.instance())
        if self.launcher:
            # In the sandbox there is no network, not even loopback: talk over Unix sockets in the channel's
            # folder (on the host's disk, bound into the kernel's scratch tmpfs, where the grader could not reach
            # them), and interrupt with a message, since signals cannot cross into its PID namespace.
            channel = channel_folder(self.workdir)
            channel.mkdir(mode=0o700, exist_ok=True)
            self.km.transport = "ipc"
            self.km.ip = str(channel / "kernel")
            self.km.connection_file = str(channel / "kernel.json")
            self.km.kernel_spec.interrupt_mode = "message"
        # An allowlist (one thread per kernel included), never a copy of os.environ: the grader's secrets
        # (GENLAB_DB, cloud keys, CI tokens) stay here.
        env = kernel_environment(self.workdir, self.env)
        launcher = list(self.launcher)
        if self.cgroup_limits and cgroups.usable():
            self.cgroup = cgroups.Cgroup.create(*self.cgroup_limits)
            launcher = [*self.cgroup.launcher(), *launcher]
        if launcher:
            # jupyter_client swaps a leading "python" for this interpreter; behind a launcher it cannot.
            spec_argv = [sys.executable if a in ("python", "python3") else a for a in self.km.kernel_spec.argv]
            self.km.kernel_spec.argv = [*launcher, *spec_argv]
        # The kernel's own stderr (ZMQ notices) is noise here; a crash is reported from its exit status.
        # pass_fds: the kernel inherits its end of the request channel, and only that (close_fds stays on).
        self.km.start_kernel(cwd=str(self.workdir), env=env, stdout=subprocess.DEVNULL,
                             stderr=None if os.environ.get("GENLAB_KERNEL_STDERR") else subprocess.DEVNULL,
                             pass_fds=(self.channel.kernel_fd,))
        self.kernel_fd = self.channel.kernel_fd   # its number in the kernel, for the boot cell
        self.channel.launched()
        self.kc = self.km.client(context=zmq.Context.instance())
        self.kc.start_channels()
        self.kc.wait_for_ready(timeout=60)
        if self.launcher and kernel_account() is not None:
            # Its sockets are made: the kernel user (the channel folder's group, sandbox.launcher) may no longer
            # make files there, so that the host's disk holds nothing of the kernel's beyond them. (A grader that
            # is not root runs its kernels as itself: they own the folder and could undo this.)
            channel_folder(self.workdir).chmod(0o750)
        self.started_at = time.monotonic()

    def alive(self) -> bool:
        return self.km is not None and self.km.is_alive() and not self.dead_reason

    def shutdown(self) -> None:
        if self.cgroup is not None and self.cgroup.can_freeze():
            self.cgroup.freeze(False)   # a frozen kernel cannot exit, nor die of SIGKILL
        if self.kc is not None:
            self.kc.stop_channels()
        if self.km is not None:
            try:
                self.km.shutdown_kernel(now=True)
            except Exception:  # noqa: BLE001 - already gone
                pass
        if self.cgroup is not None:
            self.cgroup.remove()  # kills whatever the student's code left running, then the group
            self.cgroup = None
        if self.channel is not None:
            self.channel.close()
        self.km = self.kc = None
        if self.remove_workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)

    def __enter__(self):
        self.start()
        return self

    def __exit__(self, *exc):
        self.shutdown()

    # -- running code --------------------------------------------------------------------------------
    def run_cell(self, source: str, *, timeout: float | None = None, silent: bool = False) -> CellRun:
        if not self.alive():
            return CellRun("dead", error=self.dead_reason or "the kernel is not running")
        timeout = self.limits.cell_timeout_s if timeout is None else timeout
        left = self.limits.notebook_timeout_s - (time.monotonic() - self.started_at)
        timeout = max(1.0, min(timeout, left))
        start = time.monotonic()
        msg_id = self.kc.execute(source, silent=silent, store_history=not silent, allow_stdin=False)
        run = CellRun("ok")
        budget = self.limits.output_bytes_per_cell
        deadline = start + timeout
        interrupted = False
        while True:
            # The clock is checked on every pass, not only when the kernel is quiet: a kernel that keeps
            # talking (a thread printing for ever) must not escape the limit.
            now = time.monotonic()
            if now > deadline and not interrupted:
                self.km.interrupt_kernel()
                interrupted = True
                deadline = now + self.limits.interrupt_grace_s
            elif now > deadline and interrupted:
                # The cell ignored the interrupt: only killing the kernel stops it.
                self.dead_reason = f"timeout: stopped after {timeout:.0f} s, and the cell ignored the interrupt"
                self.dead_of_timeout = True
                self._kill()
                run.status, run.error = "timeout", self.dead_reason
                break
            try:
                msg = self.kc.get_iopub_msg(timeout=0.2)
            except queue.Empty:
                if not self.km.is_alive():
                    self.dead_reason = self._death_reason()
                    run.status, run.error = "dead", self.dead_reason
                    break
                continue
            if msg.get("parent_header", {}).get("msg_id") != msg_id:
                continue
            kind, content = msg["msg_type"], msg["content"]
            if kind == "status" and content.get("execution_state") == "idle":
                break
            if kind == "error":
                run.status = "error"
                run.error = f"{content.get('ename')}: {content.get('evalue')}"[:2000]
            if kind in ("stream", "display_data", "execute_result", "error"):
                size = len(str(content).encode())
                if size > budget:
                    run.truncated_bytes += size
                    continue
                budget -= size
                run.outputs.append(nbformat.v4.output_from_msg(msg))
        if interrupted and run.status != "timeout" and run.status != "dead":
            run.status = "timeout"
            run.error = f"stopped after {timeout:.0f} s (time limit per cell)"
        if run.truncated_bytes:
            run.outputs.append(nbformat.v4.new_output(
                "stream", name="stderr",
                text=f"[genlab: {run.truncated_bytes} bytes of output dropped: the limit is "
                     f"{self.limits.output_bytes_per_cell} bytes per cell]\n"))
        run.seconds = time.monotonic() - start
        return run

    # -- the kernel's CPU, read by the operating system (timing, in autograder.wall.remote) --------------------
    def cpu_seconds(self) -> float | None:
        """CPU time of everything the kernel runs, threads and child processes included, as the operating
        system accounts it: the cgroup's counter, else /proc for the kernel's process tree (10 ms ticks).
        None when neither can be read. Student code can add to it, never take from it."""
        if self.cgroup is not None:
            seconds = self.cgroup.cpu_seconds()
            if seconds is not None:
                return seconds
        process = getattr(getattr(self.km, "provisioner", None), "process", None)
        return cgroups.process_tree_cpu_seconds(process.pid) if process is not None else None

    def cpu_resolution_s(self) -> float:
        """The step of :meth:`cpu_seconds`: nanoseconds in a cgroup, clock ticks in /proc."""
        if self.cgroup is not None and "cpuacct" in self.cgroup.dirs:
            return 1e-9
        return 1.0 / cgroups.CLOCK_TICKS_PER_S

    @contextmanager
    def memory_watch(self):
        """The most memory the kernel's processes held at once during the block, beyond what they held when
        it began, as the OS charged it to the kernel's cgroup (v1: ``memory.max_usage_in_bytes``, reset to the
        current use). Yields a :class:`MemoryWatch` whose ``peak_bytes`` is set when the block ends; None where
        the machine has no such counter to reset (cgroup v2 before Linux 6.12, or no cgroup)."""
        folder = self.cgroup.dirs.get("memory") if self.cgroup is not None else None
        peak_file = folder / "memory.max_usage_in_bytes" if folder is not None else None
        if peak_file is None or not peak_file.exists():
            yield None
            return
        watch = MemoryWatch()
        before = int((folder / "memory.usage_in_bytes").read_text())
        peak_file.write_text("0")   # v1: the high-water mark starts again from the current use
        try:
            yield watch
        finally:
            watch.peak_bytes = max(0, int(peak_file.read_text()) - before)

    @contextmanager
    def paused(self):
        """Every process of this kernel stopped for the block (the cgroup freezer), so that none of them can
        compete for the CPU with what is timed meanwhile: the reference kernel. A no-op without a freezer."""
        group = self.cgroup if self.cgroup is not None and self.cgroup.can_freeze() and self.alive() else None
        if group is None:
            yield False
            return
        frozen = group.freeze(True)
        try:
            yield frozen
        finally:
            if self.cgroup is group:   # not shut down meanwhile (which thaws and removes the group)
                group.freeze(False)

    def _kill(self) -> None:
        try:
            self.km.shutdown_kernel(now=True)
        except Exception:  # noqa: BLE001
            pass

    def _death_reason(self) -> str:
        if self.cgroup is not None and self.cgroup.oom_killed():
            return f"killed: memory limit {self.cgroup.memory_bytes / 2**30:g} GiB exceeded"
        code = None
        try:
            code = self.km.provisioner.process.poll() if self.km.provisioner else None
        except Exception:  # noqa: BLE001
            pass
        if code is not None and code > 128:  # bubblewrap passes on a signal death as 128 + signal
            code = -(code - 128)
        if code is not None and code < 0:
            import signal
            name = signal.Signals(-code).name if -code in signal.Signals._value2member_map_ else str(-code)
            hint = " (the memory limit, or a crash in native code)" if name in ("SIGKILL", "SIGSEGV") else ""
            return f"the kernel died from {name}{hint}"
        return f"the kernel exited (exit code {code})" if code is not None else "the kernel died"

    # -- the request channel used by autograder.wall.remote ----------------------------------------------
    @property
    def boot_source(self) -> str:
        """The cell that installs the kernel's server on its end of the channel; it binds no global name."""
        return f"__import__('genlab.testing.server', fromlist=['install']).install({self.kernel_fd})"

    def take_baseline(self) -> None:
        """Right after the boot cell, before any student code: the watched objects' identities, kept here."""
        reply, _ = self.request({"kind": "identities", "args": [], "kwargs": {"__dict__": {}}}, wire.Encoder())
        if reply["ok"]:
            self.baseline = {name: ident for name, ident in reply["result"]}

    def replaced_since_boot(self) -> list[str]:
        """The watched objects whose identity differs from :attr:`baseline`, compared in this process."""
        if self.baseline is None:
            return []
        reply, _ = self.request({"kind": "identities", "args": [], "kwargs": {"__dict__": {}}}, wire.Encoder())
        return self.replaced_in(reply["result"]) if reply["ok"] else []

    def replaced_in(self, identities: list) -> list[str]:
        """The watched objects whose identity in ``identities`` (as the kernel reports them: checked pairs)
        differs from :attr:`baseline`."""
        if self.baseline is None:
            return []
        now = {name: ident for name, ident in identities}
        return sorted(name for name, ident in self.baseline.items() if name not in now or now[name] != ident)

    def check_measured(self, reply: dict) -> None:
        """Raises ChannelTampered when a measurement's answer shows a watched object replaced while it ran
        (the kernel reports their identities right after the call; see genlab.testing.server.MEASURED)."""
        replaced = self.replaced_in(reply["identities"]) if reply.get("ok") and "identities" in reply else []
        if replaced:
            raise self.note_tampering("replaced while a measurement ran: " + ", ".join(replaced))

    def request(self, header: dict, encoder: wire.Encoder):
        """Sends one request to the kernel's server (installed by :attr:`boot_source`) and returns its checked
        answer (reply, tensors). A call over the time limit is interrupted (KeyboardInterrupt in the server's
        thread), and the kernel killed if it does not answer within the grace period.

        Raises KernelLost (the kernel died, or closed the channel), RemoteTimeout, or ChannelTampered (the
        answer broke the rules of :mod:`autograder.wall.channel`; also kept in :attr:`channel_evidence`, so a test
        that catches every exception cannot hide it)."""
        if not self.alive():
            raise KernelLost(self.dead_reason or "the kernel is not running")
        # Unguessable ids: a process the student left running cannot prepare an answer in advance.
        request_id = secrets.token_hex(8)
        # The kernel's server answers an error rather than a message over these limits (an honest result of
        # plain data that large is the student's mistake, not tampering).
        header = {**header, "answer_limits": {"json_bytes": self.limits.max_answer_json_bytes,
                                              "tensor_bytes": self.limits.max_answer_tensor_bytes}}
        left = self.limits.notebook_timeout_s - (time.monotonic() - self.started_at)
        timeout = max(1.0, min(self.limits.test_timeout_s, left))
        limits = dict(read_s=self.limits.answer_read_timeout_s, max_json_bytes=self.limits.max_answer_json_bytes,
                      max_tensor_bytes=self.limits.max_answer_tensor_bytes, alive=self.km.is_alive)
        # One deadline for the whole call, sending included: a kernel that stops reading a large request (or
        # the interrupt) is past its time limit like one that never answers (status timeout, not failed).
        deadline = time.monotonic() + timeout
        try:
            try:
                self.channel.send(request_id, header, encoder.tensors, deadline=deadline)
                reply, tensors = self.channel.receive(request_id, wait_s=deadline - time.monotonic(), **limits)
            except SendTimeout as exc:
                # Part of a frame may be in the socket: the stream is out of step, no interrupt can follow it.
                self._stop_for_timeout(f"timeout: stopped after {timeout:.0f} s (time limit per call): {exc}")
            except AnswerTimeout:
                grace = time.monotonic() + self.limits.interrupt_grace_s
                try:
                    self.channel.interrupt(request_id, deadline=grace)
                    self.channel.receive(request_id, wait_s=grace - time.monotonic(), **limits)
                except (AnswerTimeout, SendTimeout):
                    self._stop_for_timeout(f"timeout: stopped after {timeout:.0f} s, and the call ignored the "
                                           "interrupt")
                raise RemoteTimeout(f"stopped after {timeout:.0f} s (time limit per call)") from None
            return check_reply(reply, tensors, str(header.get("kind"))), tensors
        except ChannelTampered as exc:
            self.note_tampering(str(exc))
            raise
        except ChannelLost as exc:
            if isinstance(exc, KernelLost):
                raise
            for _ in range(10):   # a kernel that died closed its end a moment before it can be seen dead
                if not self.km.is_alive():
                    self.dead_reason = self._death_reason()
                    raise KernelLost(self.dead_reason) from None
                time.sleep(0.05)
            raise AnswerLost(str(exc)) from None

    def _stop_for_timeout(self, reason: str):
        self.dead_reason = reason
        self.dead_of_timeout = True
        self._kill()
        raise RemoteTimeout(reason) from None

    def note_tampering(self, evidence: str) -> ChannelTampered:
        if evidence not in self.channel_evidence:
            self.channel_evidence.append(evidence)
        return ChannelTampered(evidence)
