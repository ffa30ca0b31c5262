"""Per-kernel control groups: a real memory limit (the kernel is OOM-killed, and we can say so), a cap
on processes and threads (a fork bomb stops at ``pids.max``), and, where the machine has the controllers, the
kernel's CPU as the operating system accounts it: a CPU share of its own (``cpu.shares`` / ``cpu.weight``), the
CPU time of every process in it (``cpuacct.usage`` / ``cpu.stat``), and a freezer that stops all of them at once
while the reference kernel is timed (``freezer.state`` / ``cgroup.freeze``).

Used when this machine lets us create cgroups (cgroup v1 ``memory`` and ``pids`` hierarchies, or a cgroup v2
tree with those controllers). Where it does not, the sandbox still applies ``prlimit``'s address-space cap,
and :func:`available` says why the stronger limits are off. The process cap then still holds: the sandbox
sets ``RLIMIT_NPROC``, which works because the kernel runs as the unprivileged ``genlab-kernel`` outside (root
would ignore it) and counts per kernel (each has its own user namespace). With cgroups both caps are in force.
"""
from __future__ import annotations

import os
import re
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


# Controllers a kernel's group joins where they are mounted: its CPU share, its CPU time and its freezer. Without
# them the group still limits memory and processes, and timing falls back to the wall clock and /proc.
OPTIONAL_V1 = ("cpu", "cpuacct", "freezer")
SHARES_V1, WEIGHT_V2 = 1024, 100   # every kernel the same share: the defaults, written so that they are stated


@dataclass
class Cgroup:
    dirs: dict[str, Path]        # controller -> this group's folder
    memory_bytes: int
    max_pids: int

    @classmethod
    def create(cls, memory_bytes: int, max_pids: int, owner: int | None = None) -> "Cgroup":
        global _swept
        if not _swept:
            _swept = True
            sweep_orphans()
        # The grading process that owns it is in the name: a grader killed outright (SIGKILL, a Slurm task
        # cancelled, the machine's OOM killer) cleans nothing up, and the next grader removes what it left.
        name = f"genlab-{_pid_namespace()}-{owner or os.getpid()}-{uuid.uuid4().hex[:12]}"
        v2 = _v2()
        if v2 is not None:
            folder = v2 / name
            folder.mkdir()
            (folder / "memory.max").write_text(str(memory_bytes))
            (folder / "memory.swap.max").write_text("0") if (folder / "memory.swap.max").exists() else None
            (folder / "pids.max").write_text(str(max_pids))
            dirs = {"memory": folder, "pids": folder, "cpuacct": folder, "freezer": folder}
            if (folder / "cpu.weight").exists():   # the cpu controller is enabled for children
                (folder / "cpu.weight").write_text(str(WEIGHT_V2))
                dirs["cpu"] = folder
            return cls(dirs, memory_bytes, max_pids)
        dirs = {c: _v1(c) / name for c in ("memory", "pids")}
        dirs.update({c: _v1(c) / name for c in OPTIONAL_V1 if _v1(c) is not None and os.access(_v1(c), os.W_OK)})
        for folder in dict.fromkeys(dirs.values()):   # cpu and cpuacct can be one hierarchy, mounted together
            folder.mkdir(exist_ok=True)
        if "cpu" in dirs:
            (dirs["cpu"] / "cpu.shares").write_text(str(SHARES_V1))
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

    # -- CPU, as the operating system accounts it ------------------------------------------------------------
    def cpu_seconds(self) -> float | None:
        """CPU time used so far by every process that was ever in the group (user and system, all threads),
        None where the machine has no CPU accounting for cgroups. The kernel cannot write these files."""
        folder = self.dirs.get("cpuacct")
        if folder is None:
            return None
        usage = folder / "cpuacct.usage"
        if usage.exists():
            return int(usage.read_text()) / 1e9
        for line in (folder / "cpu.stat").read_text().splitlines():   # cgroup v2
            key, _, value = line.partition(" ")
            if key == "usage_usec":
                return int(value) / 1e6
        return None

    def adopt(self, pid: int) -> None:
        """Moves process ``pid`` (and its threads) into this group. Where it was charged before stays charged
        there: from now on its CPU time and its new memory are counted here (autograder.wall.measure)."""
        for folder in dict.fromkeys(self.dirs.values()):
            (folder / "cgroup.procs").write_text(str(pid))

    def memory_peak_bytes(self) -> int | None:
        """The most memory charged to the group at once since it was made (v1 ``memory.max_usage_in_bytes``,
        v2 ``memory.peak``), None where the machine has neither."""
        folder = self.dirs["memory"]
        for name in ("memory.max_usage_in_bytes", "memory.peak"):
            if (folder / name).exists():
                return int((folder / name).read_text())
        return None

    def file_cache_bytes(self) -> int:
        """The files' pages charged to the group now: the page cache its processes were the first to read into
        memory (a library's code, a data file), less ``shmem`` (files it wrote on a tmpfs, which are memory it
        uses). The kernel charges a page of the cache to the group that faults it in first, so a process that
        happens to be the first to run a library's float64 kernels is charged for their code; 0 where the
        machine does not say."""
        try:
            lines = (self.dirs["memory"] / "memory.stat").read_text().splitlines()
        except OSError:
            return 0
        stat = {key: int(value) for key, _, value in (line.partition(" ") for line in lines) if value.isdigit()}
        cache = stat.get("cache", stat.get("file", 0))   # v1, v2
        return max(0, cache - stat.get("shmem", 0))

    def can_freeze(self) -> bool:
        return "freezer" in self.dirs

    def freeze(self, frozen: bool, wait_s: float = 2.0) -> bool:
        """Stops (or restarts) every process in the group at once, threads and children included, and waits
        until the kernel says it is done. False when it could not within ``wait_s``."""
        folder = self.dirs["freezer"]
        v1 = (folder / "freezer.state").exists()
        path = folder / ("freezer.state" if v1 else "cgroup.freeze")
        path.write_text(("FROZEN" if frozen else "THAWED") if v1 else ("1" if frozen else "0"))
        if not v1:
            return _wait(lambda: f"frozen {int(frozen)}" in (folder / "cgroup.events").read_text(), wait_s)
        return _wait(lambda: path.read_text().strip() == ("FROZEN" if frozen else "THAWED"), wait_s)

    def pids(self) -> list[int]:
        procs = self.dirs["pids"] / "cgroup.procs"
        try:
            return [int(p) for p in procs.read_text().split()]
        except OSError:
            return []

    def kill_all(self) -> None:
        if self.can_freeze():
            try:
                self.freeze(False)   # a frozen process cannot die of SIGKILL until it is thawed
            except OSError:
                pass
        # A killed process leaves the group within a millisecond or two: the pauses start short and double (a
        # fixed 50 ms pause cost every measured process 50 ms of the grader's time, 10 of them per notebook).
        for pause in _pauses(1.0):
            pids = self.pids()
            if not pids:
                return
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            time.sleep(pause)

    def remove(self) -> None:
        self.kill_all()
        for folder in set(self.dirs.values()):
            for pause in _pauses(1.0):
                try:
                    folder.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    time.sleep(pause)


# -- what a grader killed outright left behind ---------------------------------------------------------------
_OWNED = re.compile(r"^genlab-(\d+)-(\d+)-[0-9a-f]{12}$")
_swept = False


def _pid_namespace() -> int:
    """The number of this process's PID namespace: a process number means something only inside it (two graders
    in two containers can share the cgroup tree and the numbers)."""
    try:
        return os.stat("/proc/self/ns/pid").st_ino
    except OSError:
        return 0


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:     # someone else's process: alive
        return True
    return True


def sweep_orphans() -> list[str]:
    """Removes the groups whose grading process is gone, with what still runs in them: a kernel the grader
    had frozen while it timed the reference stays frozen for ever otherwise (a frozen process cannot even
    die of SIGKILL until it is thawed: :meth:`Cgroup.kill_all` thaws first). Runs once per grading process,
    before its first group. Only groups made in this PID namespace are looked at, and one whose owner's process
    number was given to a new process is left alone (never another grader's live group). Returns the names
    removed."""
    v2 = _v2()
    roots = [v2] if v2 is not None else [r for r in (_v1(c) for c in ("memory", "pids", *OPTIONAL_V1)) if r]
    names = {p.name for root in roots for p in root.glob("genlab-*")
             if (m := _OWNED.match(p.name)) and int(m.group(1)) == _pid_namespace() and not _alive(int(m.group(2)))}
    for name in sorted(names):
        if v2 is not None:      # one folder holds every controller
            dirs = dict.fromkeys(("memory", "pids", "cpuacct", "freezer"), v2 / name)
        else:
            dirs = {c: _v1(c) / name for c in ("memory", "pids", *OPTIONAL_V1)
                    if _v1(c) is not None and (_v1(c) / name).is_dir()}
        try:
            Cgroup(dirs, 0, 0).remove()
        except OSError:
            pass
    return sorted(names)


def _pauses(total_s: float, first_s: float = 0.001, longest_s: float = 0.05):
    """Pauses that start at ``first_s`` and double up to ``longest_s``, adding up to about ``total_s``."""
    pause, spent = first_s, 0.0
    while spent < total_s:
        yield pause
        spent += pause
        pause = min(2 * pause, longest_s)


def _wait(done, wait_s: float) -> bool:
    deadline = time.monotonic() + wait_s
    while not done():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.0005)
    return True


# -- without cgroups: the same CPU time from /proc --------------------------------------------------------------
CLOCK_TICKS_PER_S = os.sysconf("SC_CLK_TCK")


def process_tree_cpu_seconds(root: int) -> float:
    """CPU time of ``root`` and every live descendant (utime, stime, and the times of their reaped children),
    from ``/proc/<pid>/stat``: what :meth:`Cgroup.cpu_seconds` counts, for a kernel started without a group. A
    process that left the tree (double fork, reparented outside) is missed; clock ticks are 10 ms."""
    parents: dict[int, list[int]] = {}
    times: dict[int, int] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat", "rb") as f:
                fields = f.read().rsplit(b")", 1)[1].split()
        except OSError:
            continue   # exited meanwhile
        pid = int(entry.name)
        # after the command's closing parenthesis: state ppid ... utime(12) stime(13) cutime(14) cstime(15)
        parents.setdefault(int(fields[1]), []).append(pid)
        times[pid] = sum(int(x) for x in fields[11:15])
    total, todo = 0, [root]
    while todo:
        pid = todo.pop()
        total += times.get(pid, 0)
        todo.extend(parents.get(pid, ()))
    return total / CLOCK_TICKS_PER_S
