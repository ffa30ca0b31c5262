"""The sandbox a student's kernel runs in: bubblewrap namespaces plus resource limits.

Inside, the kernel sees the machine read-only, except its own scratch folder; the course's solutions, the
grader's code, the gradebook and every other submission are covered by empty folders; there is no network,
no view of other processes (its own PID namespace, so it cannot signal the grader), and every process it
starts dies with it. ``prlimit`` caps address space, file size and core dumps; per-kernel cgroups (see cgroups.py), where the
machine allows them, add a real memory limit and a process cap.

Without bubblewrap the grader refuses to run unless told ``--unsafe`` (see :func:`require`).
"""
from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

from autograder import cgroups

SANDBOX_UID = 1000
ADDRESS_HEADROOM = 4 * 2**30


@dataclass
class SandboxConfig:
    memory_bytes: int = 4 * 2**30          # address space; torch alone maps about 1 GiB
    max_processes: int = 64
    max_file_bytes: int = 256 * 2**20
    hide: list[Path] = field(default_factory=list)   # folders the student must not read


class SandboxUnavailable(RuntimeError):
    pass


@lru_cache(maxsize=1)
def probe() -> str:
    """'' when bubblewrap works here, else why not (missing binary, user namespaces refused, ...)."""
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        return "bubblewrap (bwrap) is not installed: apt-get install bubblewrap"
    try:
        run = subprocess.run([bwrap, "--ro-bind", "/", "/", "--unshare-all", "--uid", str(SANDBOX_UID), "true"],
                             capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"bubblewrap could not start: {exc}"
    if run.returncode != 0:
        return f"bubblewrap cannot create namespaces here: {run.stderr.strip()[:300]}"
    return ""


def require(unsafe: bool) -> bool:
    """True when grading is sandboxed; raises when it cannot be and ``unsafe`` was not given."""
    why = probe()
    if not why:
        return True
    if unsafe:
        return False
    raise SandboxUnavailable(f"refusing to grade without a sandbox: {why}. Student code could then read the "
                             "hidden tests and write the gradebook. Install bubblewrap, or pass --unsafe to "
                             "grade trusted notebooks anyway.")


def launcher(config: SandboxConfig, workdir: Path) -> list[str]:
    """The command prefix that starts the kernel inside the sandbox, in ``workdir``."""
    workdir = Path(workdir).resolve()
    argv = [shutil.which("bwrap") or "bwrap",
            "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc",
            "--tmpfs", "/run", "--tmpfs", "/var/tmp", "--tmpfs", "/dev/shm"]
    # /tmp stays visible (read-only): the course, its virtual environment and a CI checkout may live there.
    # The other kernels' scratch folders beside this one are hidden; this one is bound back below.
    for path in [workdir.parent, *config.hide]:
        path = Path(path).resolve()
        if path.is_dir():
            argv += ["--tmpfs", str(path)]  # the scratch folder is bound back in below, even if inside
        elif path.is_file():
            argv += ["--ro-bind", "/dev/null", str(path)]
    argv += ["--bind", str(workdir), str(workdir), "--chdir", str(workdir),
             "--setenv", "HOME", str(workdir), "--setenv", "TMPDIR", str(workdir),
             # ipykernel exits when its parent looks gone; in a PID namespace its parent is the sandbox init.
             "--unsetenv", "JPY_PARENT_PID",
             "--unshare-all", "--die-with-parent", "--new-session", "--cap-drop", "ALL",
             "--uid", str(SANDBOX_UID), "--gid", str(SANDBOX_UID),
             # Address space: with cgroups (autograder/cgroups.py) the memory limit is the cgroup's, and
             # this cap only stops absurd single allocations; torch alone maps about 1.5 GiB it never touches.
             "prlimit", f"--as={config.memory_bytes + (ADDRESS_HEADROOM if cgroups.usable() else 0)}",
             f"--fsize={config.max_file_bytes}", "--core=0", "--"]
    return argv


def prepare_workdir(workdir: Path) -> None:
    """The sandbox user must be able to write its scratch folder (and nothing else)."""
    Path(workdir).chmod(0o777)
