"""Per-kernel control groups: a real memory limit (the kernel is OOM-killed, and we can say so) and a cap
on processes and threads (a fork bomb stops at ``pids.max``).

Used when this machine lets us create cgroups (cgroup v1 ``memory`` and ``pids`` hierarchies, or a cgroup v2
tree with those controllers). Where it does not, the sandbox still applies ``prlimit``'s address-space cap,
and :func:`available` says why the stronger limits are off. The process cap then still holds: the sandbox
sets ``RLIMIT_NPROC``, which works because the kernel runs as the unprivileged ``genlab-kernel`` outside (root
would ignore it) and counts per kernel (each has its own user namespace). With cgroups both caps are in force.
"""
from __future__ import annotations

import os
import signal
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

BASE = Path("/sys/fs/cgroup")


def _v1(controller: str) -> Path | None:
    path = BASE / controller
    return path if (path / "cgroup.procs").exists() else None


def _v2() -> Path | None:
    if not (BASE / "cgroup.controllers").exists():
        return None
    enabled = (BASE / "cgroup.subtree_control").read_text().split()
    return BASE if {"memory", "pids"} <= set(enabled) else None


def available() -> str:
    """'' when per-kernel cgroups can be made here, else the reason."""
    if not os.access(BASE, os.W_OK) and not (_v1("pids") and os.access(_v1("pids"), os.W_OK)):
        return "cgroups are not writable here"
    if _v2() is None and not (_v1("memory") and _v1("pids")):
        return "no memory and pids cgroup controllers are mounted"
    try:
        group = Cgroup.create(2**30, 16)
        group.remove()
    except OSError as exc:
        return f"cannot create a cgroup: {exc}"
    return ""


_usable: bool | None = None


def usable() -> bool:
    """Cached :func:`available`, for the hot path of starting kernels."""
    global _usable
    if _usable is None:
        _usable = not available()
    return _usable


@dataclass
class Cgroup:
    dirs: dict[str, Path]        # controller -> this group's folder
    memory_bytes: int
    max_pids: int

    @classmethod
    def create(cls, memory_bytes: int, max_pids: int) -> "Cgroup":
        name = f"genlab-{uuid.uuid4().hex[:12]}"
        v2 = _v2()
        if v2 is not None:
            folder = v2 / name
            folder.mkdir()
            (folder / "memory.max").write_text(str(memory_bytes))
            (folder / "memory.swap.max").write_text("0") if (folder / "memory.swap.max").exists() else None
            (folder / "pids.max").write_text(str(max_pids))
            return cls({"memory": folder, "pids": folder}, memory_bytes, max_pids)
        dirs = {c: _v1(c) / name for c in ("memory", "pids")}
        for folder in dirs.values():
            folder.mkdir()
        (dirs["memory"] / "memory.limit_in_bytes").write_text(str(memory_bytes))
        swap = dirs["memory"] / "memory.memsw.limit_in_bytes"
        if swap.exists():
            swap.write_text(str(memory_bytes))
        (dirs["pids"] / "pids.max").write_text(str(max_pids))
        return cls(dirs, memory_bytes, max_pids)

    def launcher(self) -> list[str]:
        """A prefix that moves itself into the group before it execs the rest, so nothing escapes it."""
        procs = " ".join(sorted({str(d / "cgroup.procs") for d in self.dirs.values()}))
        return ["/bin/sh", "-c", f'for f in {procs}; do echo $$ > "$f" || exit 97; done; exec "$@"', "genlab-cgroup"]

    def oom_killed(self) -> bool:
        folder = self.dirs["memory"]
        for name in ("memory.events", "memory.oom_control"):
            path = folder / name
            if path.exists():
                for line in path.read_text().splitlines():
                    key, _, value = line.partition(" ")
                    if key == "oom_kill" and int(value) > 0:
                        return True
        failcnt = folder / "memory.failcnt"
        return failcnt.exists() and int(failcnt.read_text()) > 0 and not self.pids()

    def pids(self) -> list[int]:
        procs = self.dirs["pids"] / "cgroup.procs"
        try:
            return [int(p) for p in procs.read_text().split()]
        except OSError:
            return []

    def kill_all(self) -> None:
        for _ in range(20):
            pids = self.pids()
            if not pids:
                return
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            time.sleep(0.05)

    def remove(self) -> None:
        self.kill_all()
        for folder in set(self.dirs.values()):
            for _ in range(20):
                try:
                    folder.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    time.sleep(0.05)
