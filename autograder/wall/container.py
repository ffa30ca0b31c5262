"""Container mode: the wall around a student's kernel where bubblewrap cannot create namespaces.

A platform's grading container (Gradescope's autograder, PrairieLearn's external grader) is started afresh for
each submission, but it is no sandbox against that submission: it holds the hidden tests, the reference
solutions and the results file. There, Docker's default seccomp profile refuses the ``unshare`` calls
bubblewrap needs, and the grader falls back to this mode, announced in the run's output and refusable in
``course.toml`` (``[platform] allow_container_mode``). It keeps the grader's files and verdicts out of the
kernel's reach with the operating system's permissions alone:

- the student's kernel runs as an unprivileged uid of its own, with no account (:func:`draw_uid`: one per run,
  from 20000-59999, that no account and no running process uses; as bubblewrap's kernel is uid 1000 with no
  account inside its sandbox), dropped to by ``setpriv`` with no capabilities, no supplementary groups and
  ``no_new_privs``, under the same ``prlimit`` caps and with the same allowlisted environment as in bubblewrap.
  A uid of its own, not ``genlab-kernel``'s: ``RLIMIT_NPROC`` counts every process of a uid on the host, and
  other containers on the same host may run their kernels as ``genlab-kernel`` too;
- the folders the caller names (the course, the submission, the results) are made the grader's alone
  (:func:`lock`: owned by it, mode 700) before any kernel starts; kernels' scratch folders lie in a folder that
  can be crossed but not listed, each the kernel's alone;
- :func:`check` runs as that user before grading, and the mode is refused when it can still list, read or
  write any of those, or cannot import what a kernel needs;
- the reference kernel runs as the grader (it runs only the lab's own setup and reference solutions), so the
  student's kernel can neither signal nor trace it, nor read its memory;
- every process that uid started under this grader is killed (:func:`sweep`, with this process made
  the subreaper of its descendants, so a daemon that left its session is still found) before the caller
  writes a verdict.

What it does not give, where bubblewrap does: no network namespace (the kernel has the container's network),
no PID namespace (it sees the container's processes and their command lines), no mount namespace (it sees the
whole filesystem as any user may: anything world-readable in the image, such as another copy of the course,
it can read). The grader must run as root, as both platforms run it.
"""
from __future__ import annotations

import ctypes
import json
import os
import pwd
import random
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, replace
from pathlib import Path

from autograder.wall import cgroups
from autograder.wall.sandbox import ADDRESS_HEADROOM, SandboxConfig, kernel_environment, probe

BUBBLEWRAP = "bubblewrap"
CONTAINER = "container"
WALL_ENV = "GENLAB_WALL"   # "bubblewrap" or "container": force a wall (the tests force container mode)
PR_SET_CHILD_SUBREAPER = 36
UIDS = range(20000, 60000)   # where a kernel's uid is drawn: inside the 65536 ids any user namespace maps


@dataclass(frozen=True)
class Wall:
    """Which wall grades here: ``mode`` (:data:`BUBBLEWRAP` or :data:`CONTAINER`) and why; ``refused`` says why
    no wall may grade here (then nothing is graded)."""

    mode: str
    why: str = ""
    refused: str = ""

    def describe(self) -> str:
        """The line a run's output and a platform's results carry: which mode graded, and why."""
        if self.refused:
            return f"Not graded: {self.refused}"
        if self.mode == BUBBLEWRAP:
            return ("Graded in the bubblewrap sandbox (namespaces: no network, nothing of the grader's "
                    "filesystem visible).")
        return (f"Graded in container mode ({self.why}): the kernel ran as an unprivileged user of its own, with "
                "the grader's files unreadable to it and the results written by the grader after the kernel was "
                "gone; no network or process isolation.")


def choose(allow_container: bool, forced: str = "") -> Wall:
    """Bubblewrap where :func:`autograder.wall.sandbox.probe` says it works, else container mode, if allowed.

    ``forced``: ``"bubblewrap"`` (never fall back) or ``"container"`` (container mode even where bubblewrap
    works: how the tests try it); ``""`` chooses. A course that forbids container mode is never graded in it."""
    if forced not in ("", BUBBLEWRAP, CONTAINER):
        return Wall(BUBBLEWRAP, refused=f"unknown wall {forced!r}: {BUBBLEWRAP!r} or {CONTAINER!r}")
    if forced == CONTAINER:
        why = f"chosen by GENLAB_WALL={CONTAINER}"
    else:
        why = probe()
        if not why:
            return Wall(BUBBLEWRAP)
        if forced == BUBBLEWRAP:
            return Wall(BUBBLEWRAP, refused=f"bubblewrap is required here (GENLAB_WALL={BUBBLEWRAP}) and {why}")
        why = f"bubblewrap cannot work here: {why}"
    if not allow_container:
        return Wall(CONTAINER, why, refused=f"course.toml forbids container mode ([platform] allow_container_mode "
                                            f"= false), and it would be needed: {why}")
    if os.geteuid() != 0:
        return Wall(CONTAINER, why, refused="container mode needs a grader running as root, to run kernels as "
                                            "an unprivileged user")
    return Wall(CONTAINER, why)


# -- the kernel's command ------------------------------------------------------------------------------------
def _limits(config: SandboxConfig) -> list[str]:
    """bubblewrap's caps (autograder.wall.sandbox.launcher): with cgroups the memory limit is the cgroup's, and
    the address-space cap only stops absurd single allocations."""
    address = config.memory_bytes + (ADDRESS_HEADROOM if cgroups.usable() else 0)
    return [shutil.which("prlimit") or "prlimit", f"--as={address}", f"--fsize={config.max_file_bytes}",
            "--core=0", f"--nproc={config.max_processes}", "--"]


def draw_uid() -> int:
    """A uid for this run's kernels: in :data:`UIDS`, used by no account and no process this system shows."""
    taken = {entry.pw_uid for entry in pwd.getpwall()}
    for entry in os.listdir("/proc"):
        status = _status(entry) if entry.isdigit() else {}
        if status:
            taken.add(int(status["Uid"].split()[0]))
    return random.SystemRandom().choice([uid for uid in UIDS if uid not in taken])


def claim_uid(folder: Path) -> int:
    """:func:`draw_uid`, claimed among the processes of one grading run (``genlab grade --workers N``): a file
    named after the uid, created exclusively in ``folder`` (the run's scratch folder, the grader's), so that no
    two kernels of the run share a uid. :func:`release_uid` gives it back once its processes are gone."""
    while True:
        uid = draw_uid()
        try:
            os.close(os.open(Path(folder) / f".uid-{uid}", os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))
            return uid
        except FileExistsError:
            continue


def release_uid(folder: Path, uid: int) -> None:
    Path(folder, f".uid-{uid}").unlink(missing_ok=True)


def launcher(config: SandboxConfig, workdir: Path, as_grader: bool = False) -> list[str]:
    """The command prefix that starts a kernel in container mode, in ``workdir``.

    The student's kernel: ``/bin/sh`` (still root) gives the scratch folder to ``config.uid``, mode 700, and
    execs ``setpriv`` to drop to that uid with no capabilities, no groups and no_new_privs, which execs
    ``prlimit`` (the caps of :class:`SandboxConfig`; ``RLIMIT_NPROC`` counts the processes of that uid, this
    kernel's alone), which execs the kernel. ``as_grader`` (the reference kernel): the same caps, as the
    grader's own user, in its own mode-700 folder."""
    if as_grader:
        return _limits(config)
    if os.geteuid() != 0 or config.uid is None:
        raise RuntimeError("container mode needs a grader running as root, and a uid drawn for its kernels")
    uid = config.uid
    workdir = Path(workdir).resolve()
    q = shlex.quote
    script = (f"chown -R {uid}:{uid} {q(str(workdir))} && chmod 700 {q(str(workdir))}"
              f' && exec {shutil.which("setpriv") or "setpriv"} --reuid={uid} --regid={uid} --clear-groups '
              '--inh-caps=-all --bounding-set=-all --no-new-privs -- "$@"')
    return ["/bin/sh", "-c", script, "genlab-container", *_limits(config)]


def scratch_folder(parent: Path | None = None) -> Path:
    """A folder for kernels' scratch folders: the grader's, mode 711, so that a kernel reaches its own folder
    (whose random name it is given) but lists nothing, and creates nothing, beside it."""
    folder = Path(tempfile.mkdtemp(prefix="genlab-", dir=parent))
    folder.chmod(0o711)
    return folder


# -- the grader's files --------------------------------------------------------------------------------------
def lock(paths) -> list[Path]:
    """Makes each existing folder the grader's alone (owner: the grader, mode 700) and each file readable by it
    alone (600): the kernel user can then neither list, read nor write anything under them. Returns them."""
    locked = []
    for path in map(Path, paths):
        if path.is_symlink() or not path.exists():
            continue
        os.chown(path, os.geteuid(), os.getegid())
        path.chmod(0o700 if path.is_dir() else 0o600)
        locked.append(path)
    return locked


def closed_around(root: Path, keep) -> list[Path]:
    """What to :func:`lock` of the folder ``root`` so that only ``keep`` (and the folders on the way to each)
    stays open: every entry of ``root`` that neither is, nor holds, a path of ``keep``, and so on down the
    folders that hold one. ``genlab grade`` in container mode closes the course checkout so, keeping the
    Python environment and the student package that kernels import (:func:`autograder.wall.sandbox.visible_paths`),
    since the kernel sees the filesystem as any user does."""
    root = Path(root).resolve()
    keep = [Path(k).resolve() for k in keep]
    if any(root == k or root.is_relative_to(k) for k in keep):
        return []
    closed = []
    for entry in sorted(root.iterdir()):
        if entry.is_symlink():   # a link is as readable as its target: the target is closed, or kept, itself
            continue
        held = [k for k in keep if k == entry or k.is_relative_to(entry)]
        if not held:
            closed.append(entry)
        elif entry.is_dir() and entry not in held:
            closed += closed_around(entry, held)
    return closed


@dataclass(frozen=True)
class Saved:
    """A path's owner and mode before :func:`lock`, for :func:`restore`."""

    path: Path
    uid: int
    gid: int
    mode: int


def lock_restorably(paths) -> tuple[list[Saved], list[str]]:
    """:func:`lock` for folders the grader does not own for good (a course checkout, an instructor's mounted
    submissions): each path's owner and mode saved first, for :func:`restore`. A path that cannot be changed (a
    read-only mount) is left as it is, and said: :func:`check` then says whether the kernel's uid reaches it."""
    saved, unchanged = [], []
    for path in map(Path, paths):
        if path.is_symlink() or not path.exists():
            continue
        st = path.stat()
        try:
            lock([path])
        except OSError as exc:
            unchanged.append(f"{path} ({exc.strerror})")
            continue
        saved.append(Saved(path, st.st_uid, st.st_gid, st.st_mode & 0o7777))
    return saved, unchanged


def restore(saved: list[Saved]) -> None:
    """Owners and modes back as :func:`lock_restorably` found them."""
    for item in saved:
        try:
            os.chown(item.path, item.uid, item.gid)
            item.path.chmod(item.mode)
        except OSError:
            pass


def hold(wall: Wall, config: SandboxConfig, scratch: Path, unreadable, unwritable) -> Wall:
    """Container mode, if its walls hold here: this process adopts the kernels' orphans (:func:`become_subreaper`),
    and as the kernels' uid (``config.uid``) nothing of ``unreadable`` can be listed or read, nothing written
    into ``unwritable`` (:func:`check`). Else the mode is refused, with why. Call after :func:`lock`."""
    if not become_subreaper():
        return replace(wall, refused="container mode needs PR_SET_CHILD_SUBREAPER, to find what a kernel leaves "
                                     "running, and this system refused it")
    why = check(config, scratch, unreadable, unwritable)
    if why:
        return replace(wall, refused=f"container mode cannot hold here: {why}")
    return wall


# What check() runs as the kernel's uid: the packages a kernel needs are found and readable, and none of the
# grader's paths can be listed, read, or written into. Prints a JSON list of what it could do that it must not.
CHECK = r"""import importlib.util, json, os, sys
paths = json.loads(sys.argv[1])
found = []
for name in ("genlab", "torch", "ipykernel"):
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.origin:
        found.append(f"cannot import {name}")
        continue
    try:
        open(spec.origin, "rb").close()
    except OSError as exc:
        found.append(f"cannot read {name} ({exc.strerror})")
for path in paths["unreadable"]:
    try:
        os.listdir(path) if os.path.isdir(path) else open(path, "rb").close()
        found.append(f"can read {path}")
    except OSError:
        pass
for folder in paths["unwritable"]:
    target = os.path.join(folder, ".genlab-wall-check")
    try:
        os.close(os.open(target, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))
        os.unlink(target)
        found.append(f"can write into {folder}")
    except OSError:
        pass
print(json.dumps(found))"""


def check(config: SandboxConfig, scratch: Path, unreadable, unwritable) -> str:
    """'' when, as the kernels' uid, under the container launcher, every path in ``unreadable`` can be neither
    listed nor read, nothing can be created in any folder of ``unwritable``, and the kernel's packages are
    reachable; else what is wrong. Run after :func:`lock`, before any kernel starts."""
    work = Path(tempfile.mkdtemp(prefix="check-", dir=scratch))
    paths = json.dumps({"unreadable": [str(p) for p in unreadable], "unwritable": [str(p) for p in unwritable]})
    try:
        argv = launcher(config, work) + [sys.executable, "-c", CHECK, paths]
        run = subprocess.run(argv, capture_output=True, text=True, timeout=120, cwd=work,
                             env=kernel_environment(work))
    except (OSError, RuntimeError, subprocess.TimeoutExpired) as exc:
        return f"a kernel cannot be started as uid {config.uid}: {exc}"
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if run.returncode != 0:
        return f"a kernel cannot be started as uid {config.uid}: {run.stderr.strip()[-300:]}"
    try:
        found = json.loads(run.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return f"the wall check printed no verdict: {run.stdout.strip()[-300:]}"
    return "; ".join(f"as uid {config.uid}, {what}" for what in found)


# -- the kernel gone -----------------------------------------------------------------------------------------
def become_subreaper() -> bool:
    """This process adopts its orphaned descendants (``PR_SET_CHILD_SUBREAPER``): a kernel's child that leaves
    its session and outlives the kernel stays ours to find and kill, instead of becoming init's."""
    try:
        return ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def _status(pid: str) -> dict[str, str]:
    try:
        text = Path("/proc", pid, "status").read_text()
    except OSError:
        return {}
    return dict(line.split(":\t", 1) for line in text.splitlines() if ":\t" in line)


def leftovers(uid: int) -> list[int]:
    """Live processes of ``uid`` that descend from this one."""
    me, table = os.getpid(), {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            status = _status(entry)
            if status:
                table[int(entry)] = (int(status["PPid"]), int(status["Uid"].split()[0]), status["State"][:1])
    found = []
    for pid, (ppid, owner, state) in table.items():
        if owner != uid or state == "Z":
            continue
        seen, parent = set(), ppid
        while parent > 1 and parent != me and parent not in seen:
            seen.add(parent)
            parent = table.get(parent, (0,))[0]
        if parent == me:
            found.append(pid)
    return found


def sweep(uid: int, timeout_s: float = 10.0) -> list[int]:
    """Kills every process of ``uid`` that descends from this one, and the ones they start meanwhile, and
    reaps those it adopted; returns those still alive after ``timeout_s`` (none, unless killing fails)."""
    deadline = time.monotonic() + timeout_s
    while True:
        left = leftovers(uid)
        for pid in left:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        _reap(uid)
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.05)


def _reap(uid: int) -> None:
    """Reaps this process's dead children of ``uid``: orphans it adopted as subreaper, which no
    ``subprocess.Popen`` waits for (the kernel itself is waited for by jupyter_client, and is gone by now)."""
    me = os.getpid()
    for entry in os.listdir("/proc"):
        status = _status(entry) if entry.isdigit() else {}
        if status and int(status["PPid"]) == me and status["State"][:1] == "Z" \
                and int(status["Uid"].split()[0]) == uid:
            try:
                os.waitpid(int(entry), os.WNOHANG)
            except ChildProcessError:
                pass
