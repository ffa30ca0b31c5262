"""The sandbox itself: what a student's kernel can and cannot reach, and the refusal without one."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from autograder.wall import sandbox
from autograder.wall.kernel import KernelSession
from autograder.core.limits import Limits

ROOT = Path(__file__).resolve().parents[1]
needs_bwrap = pytest.mark.skipif(bool(sandbox.probe()), reason=f"no sandbox here: {sandbox.probe()}")


@pytest.fixture
def kernel(tmp_path):
    secret = tmp_path / "secret"
    secret.mkdir()
    (secret / "answers.txt").write_text("42")
    work = tmp_path / "work"
    work.mkdir()
    sandbox.prepare_workdir(work)
    config = sandbox.SandboxConfig(memory_bytes=3 * 2**30, hide=[secret, ROOT / "solutions"])
    session = KernelSession(work, Limits(cell_timeout_s=10, interrupt_grace_s=2),
                            launcher=sandbox.launcher(config, work))
    session.start()
    yield session, secret
    session.shutdown()


def _stdout(run):
    return "".join(o.get("text", "") for o in run.outputs)


@needs_bwrap
def test_hidden_folders_are_empty_and_the_machine_read_only(kernel):
    session, secret = kernel
    # Outside the allowlist (autograder.wall.sandbox.visible_paths) a folder is not there at all.
    run = session.run_cell(f"import os\nprint(os.path.exists({str(secret)!r}), os.path.exists({str(ROOT / 'solutions')!r}))")
    assert _stdout(run).strip() == "False False", run
    run = session.run_cell(f"open({str(ROOT / 'README.md')!r}, 'a').write('x')")
    assert run.status == "error" and "Read-only" in run.error


@needs_bwrap
def test_no_network_and_no_view_of_the_grader(kernel):
    session, _ = kernel
    run = session.run_cell("import socket\ns = socket.socket()\ns.settimeout(2)\ns.connect(('127.0.0.1', 22))")
    assert run.status == "error"
    run = session.run_cell("import os\nprint(sorted(int(p) for p in os.listdir('/proc') if p.isdigit()))")
    pids = eval(_stdout(run))
    assert os.getpid() not in pids or max(pids) < 50, "the grader's processes must not be visible"
    run = session.run_cell("import os, signal\nos.kill(1, 0)\nprint(os.getuid())")
    assert _stdout(run).strip() == str(sandbox.SANDBOX_UID)


@needs_bwrap
def test_memory_limit_is_an_error_not_a_dead_grader(kernel):
    session, _ = kernel
    run = session.run_cell("import torch\nx = torch.ones(2 ** 36)")
    assert run.status == "error" and "allocate" in run.error
    assert session.run_cell("print('still here')").status == "ok"


SCRATCH = r'''
import os
try:
    with open('big', 'wb') as f:
        f.write(bytes(16 << 20))
    big = 'ok'
except OSError as exc:
    big = exc.strerror
os.remove('big')
made, stop = 0, ''
try:
    for made in range(300):
        open(f'f{made}', 'w').close()
except OSError as exc:
    stop = exc.strerror
print(big, made, stop, os.access('.kernel', os.W_OK), sep='|')
'''


@needs_bwrap
def test_scratch_is_a_tmpfs_limited_in_size_and_files_and_the_host_disk_gets_nothing(tmp_path):
    """Issue 39: the scratch folder was on the host's disk with no quota (a cell wrote 1.9 GiB and 200,000 files
    in 12 s). It is a tmpfs of ``scratch_bytes`` and (as root) ``scratch_files``, the kernel's own; on the host
    only the channel's folder, which the kernel may no longer write to once it has started (as root)."""
    work = tmp_path / "work"
    work.mkdir()
    sandbox.prepare_workdir(work)
    config = sandbox.SandboxConfig(scratch_bytes=8 << 20, scratch_files=100)
    session = KernelSession(work, Limits(cell_timeout_s=30), launcher=sandbox.launcher(config, work))
    session.start()
    try:
        run = session.run_cell(SCRATCH)
        assert run.status == "ok", run
        big, made, stop, writable = _stdout(run).strip().split("|")
        assert big == "No space left on device", "16 MiB in an 8 MiB scratch folder"
        if os.geteuid() == 0:   # the inode limit and the closed channel folder are the root side's
            assert int(made) < 100 and stop == "No space left on device" and writable == "False", run
        else:
            assert (made, stop) == ("299", ""), run
    finally:
        session.shutdown()
    assert [p.name for p in work.iterdir()] == [".kernel"], "nothing of the kernel's on the host's disk"


@needs_bwrap
def test_scratch_is_memory_charged_to_the_kernels_cgroup(tmp_path):
    """The tmpfs's pages are the kernel's memory: its memory limit covers what it keeps in scratch."""
    from autograder.wall import cgroups

    if not cgroups.usable():
        pytest.skip("no per-kernel cgroups here")
    work = tmp_path / "work"
    work.mkdir()
    sandbox.prepare_workdir(work)
    session = KernelSession(work, Limits(cell_timeout_s=30), launcher=sandbox.launcher(sandbox.SandboxConfig(), work),
                            cgroup_limits=(4 * 2**30, 64))
    session.start()
    try:
        folder = session.cgroup.dirs["memory"]
        usage = next(folder / n for n in ("memory.usage_in_bytes", "memory.current") if (folder / n).exists())  # v1, v2
        before = int(usage.read_text())
        assert session.run_cell("open('blob', 'wb').write(bytes(200 << 20))").status == "ok"
        assert int(usage.read_text()) - before > 190 << 20   # measured: 200.7 MiB
    finally:
        session.shutdown()


def test_refuses_without_sandbox_unless_unsafe(monkeypatch):
    sandbox.probe.cache_clear()
    monkeypatch.setattr(sandbox.shutil, "which", lambda name: None)
    try:
        with pytest.raises(sandbox.SandboxUnavailable, match="--unsafe"):
            sandbox.require(unsafe=False)
        assert sandbox.require(unsafe=True) is False
    finally:
        sandbox.probe.cache_clear()


def test_cli_exits_2_with_the_reason_when_no_sandbox(tmp_path):
    # no bwrap on this PATH, and no fallback to container mode (as root it could otherwise grade in it)
    env = {**os.environ, "PATH": str(Path(sys.executable).parent), "GENLAB_WALL": "bubblewrap"}
    run = subprocess.run([sys.executable, "-m", "autograder.cli", "--root", str(ROOT), "grade", str(tmp_path),
                          "--out", str(tmp_path / "out")], capture_output=True, text=True, env=env, timeout=120)
    assert run.returncode == 2 and "refusing to grade without a sandbox" in run.stderr
