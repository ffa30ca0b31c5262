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
    env = {**os.environ, "PATH": str(Path(sys.executable).parent)}  # no bwrap on this PATH
    run = subprocess.run([sys.executable, "-m", "autograder.cli", "--root", str(ROOT), "grade", str(tmp_path),
                          "--out", str(tmp_path / "out")], capture_output=True, text=True, env=env, timeout=120)
    assert run.returncode == 2 and "refusing to grade without a sandbox" in run.stderr
