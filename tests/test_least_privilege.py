"""Issue 10: a student's kernel sees only what it needs, runs as nobody of importance, and inherits no secret.

- what a kernel can see is listed from inside and compared with the allowlist (autograder.wall.sandbox);
- the sample ``lab1_attack_canaries`` hunts for canaries planted here in the grader's home, in a course folder
  beside this one, in an earlier run's output folder under /tmp, and in the grader's environment, and prints
  whatever it finds: no canary may appear in anything the grader writes for that student;
- the kernel's uid, read from outside (``/proc/PID/status``), is not 0; a fork bomb stops at the process cap
  while another kernel and the grader still start processes.
"""
from __future__ import annotations

import os
import secrets
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from autograder.wall import sandbox
from autograder.wall.kernel import KernelSession
from autograder.core.limits import Limits

ROOT = Path(__file__).resolve().parents[1]
needs_bwrap = pytest.mark.skipif(bool(sandbox.probe()), reason=f"no sandbox here: {sandbox.probe()}")
# Variables ipykernel sets for itself when it starts (pagers, colours, the terminal): not the grader's.
IPYKERNEL_OWN = {"TERM", "CLICOLOR", "CLICOLOR_FORCE", "FORCE_COLOR", "PAGER", "GIT_PAGER", "PWD",
                 "PYDEVD_USE_FRAME_EVAL"}


def _stdout(run) -> str:
    return "".join(o.get("text", "") for o in run.outputs) + run.error


@pytest.fixture
def start_kernel():
    """Starts sandboxed kernels, each in its own scratch folder inside a mode-700 scratch like a grading run's."""
    scratch = Path(tempfile.mkdtemp(prefix="genlab-"))
    sessions = []

    def start(max_processes: int = 64, cgroup_limits=None) -> KernelSession:
        work = Path(tempfile.mkdtemp(prefix="k-", dir=scratch))
        sandbox.prepare_workdir(work)
        config = sandbox.SandboxConfig(memory_bytes=3 * 2**30, max_processes=max_processes)
        session = KernelSession(work, Limits(cell_timeout_s=30, interrupt_grace_s=2),
                                launcher=sandbox.launcher(config, work), cgroup_limits=cgroup_limits)
        session.start()
        sessions.append(session)
        return session

    yield start
    for session in sessions:
        session.shutdown()
    shutil.rmtree(scratch, ignore_errors=True)


# -- what a kernel can see -----------------------------------------------------------------------------------
LIST_EVERYTHING = r'''
import os
seen = []
def walk(folder, depth=0):
    for name in sorted(os.listdir(folder)):
        path = os.path.join(folder, name)
        seen.append(path)
        if depth < 6 and os.path.isdir(path) and not os.path.islink(path) and path not in STOP:
            walk(path, depth + 1)
walk('/')
print('\n'.join(seen))
'''


@needs_bwrap
def test_a_kernel_sees_only_the_allowlist(start_kernel):
    session = start_kernel()
    # Places a grader keeps things in: none of them is there at all.
    places = ["/home", "/srv", "/var", "/etc/passwd", "/etc/shadow", str(Path.home()), str(ROOT / "solutions"),
              str(ROOT / "autograder"), str(ROOT / ".git"), str(ROOT.parent / "genlab-no-such-course")]
    run = session.run_cell(f"import os\nprint([p for p in {places!r} if os.path.exists(p)])")
    there = [p for p in eval(_stdout(run)) if not (p == str(Path.home()) and sys.base_prefix.startswith(p + "/"))]
    assert there == [], f"the kernel sees {there}"
    work = str(session.workdir.resolve())
    # Folders whose content is the kernel's by design: not descended into (the system, the environment).
    stop = [*sandbox.SYSTEM, "/dev", "/proc", work, *map(str, sandbox.visible_paths())]
    run = session.run_cell(f"STOP = set({stop!r})\n" + LIST_EVERYTHING, timeout=60)
    assert run.status == "ok", run
    seen = _stdout(run).split()
    allowed = [*stop, "/dev", "/proc"]

    def explained(path: str) -> bool:   # inside an allowed folder, or one of the folders leading to one
        return any(path == a or path.startswith(a.rstrip("/") + "/") or a.startswith(path + "/") for a in allowed)

    unexplained = [p for p in seen if not explained(p)]
    assert not unexplained, f"the kernel sees more than the allowlist: {unexplained[:20]}"
    assert str(Path.home() / ".bash_history") not in seen
    # What it needs is there: the data genlab.data loads, and the packages.
    run = session.run_cell("from genlab.data import load_digits, load_smiles\n"
                           "print(load_digits()[0].shape, len(load_smiles(max_count=5)))", timeout=120)
    assert run.status == "ok" and "torch.Size([1797, 64]) 5" in _stdout(run), run


# -- who it runs as, and the process cap ---------------------------------------------------------------------
def _descendants(pid: int) -> list[int]:
    children = []
    for task in Path(f"/proc/{pid}/task").glob("*/children"):
        children += [int(c) for c in task.read_text().split()]
    return children + [d for c in children for d in _descendants(c)]


def _uids(pid: int) -> list[int]:
    line = next(l for l in Path(f"/proc/{pid}/status").read_text().splitlines() if l.startswith("Uid:"))
    return [int(u) for u in line.split()[1:]]     # real, effective, saved, filesystem


@needs_bwrap
def test_the_kernel_uid_seen_from_outside_is_not_root(start_kernel):
    session = start_kernel()
    run = session.run_cell("import os\nprint(os.getpid())")
    assert run.status == "ok", run
    launched = session.km.provisioner.process.pid
    python = [p for p in _descendants(launched) if b"ipykernel" in Path(f"/proc/{p}/cmdline").read_bytes()]
    assert python, "the kernel's process was not found under its launcher"
    for pid in [launched, *_descendants(launched)]:
        assert 0 not in _uids(pid), f"a sandbox process runs as root outside: pid {pid} uids {_uids(pid)}"
    expected = sandbox.kernel_account()[0] if os.geteuid() == 0 else os.geteuid()
    assert {u for pid in python for u in _uids(pid)} == {expected}


FORK_BOMB = r'''
import os, time
made = 0
try:
    for _ in range({tries}):
        if os.fork() == 0:
            time.sleep(15)
            os._exit(0)
        made += 1
except OSError as exc:
    print('stopped after', made, exc.strerror)
else:
    print('not stopped', made)
'''


@needs_bwrap
@pytest.mark.parametrize("cgroups", [False, True], ids=["rlimit_nproc", "pids_cgroup"])
def test_a_fork_bomb_stops_at_the_cap_and_harms_no_one_else(start_kernel, cgroups):
    from autograder.wall import cgroups as cg

    if cgroups and not cg.usable():
        pytest.skip(f"no per-kernel cgroups here: {cg.available()}")
    cap = 32
    bomber = start_kernel(max_processes=cap, cgroup_limits=(3 * 2**30, cap) if cgroups else None)
    neighbour = start_kernel()
    run = bomber.run_cell(FORK_BOMB.format(tries=400), timeout=60)
    assert run.status == "ok" and "stopped after" in _stdout(run), _stdout(run)
    assert int(_stdout(run).split()[2]) < cap, _stdout(run)
    # While the bomb's processes are still alive: another student's kernel and the grader start processes.
    run = neighbour.run_cell(FORK_BOMB.format(tries=10), timeout=60)
    assert "not stopped 10" in _stdout(run), _stdout(run)
    assert subprocess.run([sys.executable, "-c", "print(1)"], capture_output=True, timeout=60).returncode == 0


# -- the environment -----------------------------------------------------------------------------------------
@needs_bwrap
def test_the_kernel_environment_is_the_allowlist(start_kernel, monkeypatch):
    secret = secrets.token_hex(16)
    monkeypatch.setenv("GENLAB_DB", f"postgresql://grader:{secret}@db.example/grades")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", secret)
    monkeypatch.setenv("GITHUB_TOKEN", secret)
    session = start_kernel()
    run = session.run_cell("import os\nprint(repr(dict(os.environ)))")
    env = eval(_stdout(run))
    assert secret not in repr(env), "the grader's secrets reached the kernel"
    allowed = set(sandbox.kernel_environment(session.workdir)) | IPYKERNEL_OWN
    assert set(env) <= allowed, f"not in the allowlist: {sorted(set(env) - allowed)}"
    assert env["HOME"] == env["TMPDIR"] == str(session.workdir.resolve())
    assert env["OMP_NUM_THREADS"] == "1" and env["MPLBACKEND"] == "Agg"


def test_the_environment_allowlist_without_a_sandbox(tmp_path, monkeypatch):
    """--unsafe grading has no sandbox, but the kernel still gets only the allowlist."""
    monkeypatch.setenv("GENLAB_DB", "postgresql://grader:hunter2@db/grades")
    env = sandbox.kernel_environment(tmp_path)
    assert "GENLAB_DB" not in env and "hunter2" not in repr(env)
    assert {"PATH", "HOME", "TMPDIR", "LANG", "OMP_NUM_THREADS", "MPLBACKEND"} <= set(env)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    assert sandbox.kernel_environment(tmp_path)["CUDA_VISIBLE_DEVICES"] == "1"


# -- the canaries, through a whole grading run ---------------------------------------------------------------
@pytest.fixture
def canaries(monkeypatch):
    """Canaries where a grader keeps things; yields {where: secret}, removes them afterwards."""
    token = secrets.token_hex(4)
    made: list[Path] = []
    found = {name: f"CANARY-{name}-{secrets.token_hex(12)}" for name in ("home", "course", "previous_run", "env")}
    home = Path.home() / f"genlab-canary-{token}.txt"
    home.write_text(found["home"])
    home.chmod(0o600)
    made.append(home)
    course = ROOT.parent / f"genlab-canary-course-{token}"
    (course / "solutions").mkdir(parents=True)
    (course / "solutions" / "canary-answers.txt").write_text(found["course"])
    made.append(course)
    # An earlier run's output folder, readable by everyone: only the sandbox keeps it out of sight.
    previous = Path(tempfile.mkdtemp(prefix="genlab-previous-run-"))
    cached = previous / "out" / ".cache" / "someone"
    cached.mkdir(parents=True)
    (cached / "canary-reparameterize.txt").write_text(found["previous_run"])
    for folder in [previous, *previous.rglob("*")]:
        folder.chmod(0o755 if folder.is_dir() else 0o644)
    made.append(previous)
    monkeypatch.setenv("GENLAB_DB", f"postgresql://grader:{found['env']}@db.example/grades")
    monkeypatch.setenv("GENLAB_CANARY_TOKEN", found["env"])
    try:
        yield found
    finally:
        for path in made:
            shutil.rmtree(path) if path.is_dir() else path.unlink(missing_ok=True)


@needs_bwrap
def test_no_canary_reaches_anything_the_grader_writes(canaries, tmp_path):
    from autograder.core.limits import Limits
    from autograder.course.grade import grade_all

    subs = tmp_path / "submitted"
    shutil.copytree(ROOT / "autograder" / "samples" / "lab1_attack_canaries", subs / "lab1_attack_canaries")
    out = tmp_path / "out"
    # graded without the policy for graded code, which would not run the hunt (it imports os): the sandbox is tested
    [result] = grade_all(ROOT, subs, out, labs=["lab1_vae"], progress=False,
                         limits=Limits(policy_exempt=("lab1_attack_canaries",)))
    written = {p: p.read_bytes() for p in out.rglob("*") if p.is_file()}
    assert any(p.suffix == ".html" for p in written), "no feedback page was written"
    everything = b"".join(written.values())
    # The hunt ran and its printout reached the feedback (so the test can fail): ...
    assert b"/tmp [" in everything and b"PATH" in everything, "the sample's hunt did not run"
    # ... and no canary is in it, nor in any other file of the run.
    for where, secret in canaries.items():
        leaked = [str(p.relative_to(out)) for p, data in written.items() if secret.encode() in data]
        assert not leaked, f"the {where} canary reached {leaked}"
    assert result.total == result.max_total, [(o.test, o.status, o.message) for o in result.outcomes]
