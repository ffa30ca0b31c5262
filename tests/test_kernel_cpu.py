"""Issue 22: a kernel's CPU is read, shared and paused from outside it, by the operating system.

The timing verdicts (autograder.remote) use three things a notebook cannot reach: the CPU time the OS counts
for every process of the student's kernel (its cgroup's counter), a CPU share of its own, and the freezer that
stops all of the kernel's processes while the reference kernel is timed. These tests start real sandboxed
kernels and check each from the grader's side; the simulated races are in tests/test_remote_timing.py.
"""
from __future__ import annotations

import shutil
import tempfile
import time
from pathlib import Path

import pytest

from autograder import cgroups, sandbox
from autograder.kernel import KernelSession
from autograder.limits import Limits

pytestmark = [
    pytest.mark.skipif(bool(sandbox.probe()), reason=f"no sandbox here: {sandbox.probe()}"),
    pytest.mark.skipif(not cgroups.usable(), reason=f"no per-kernel cgroups here: {cgroups.available()}"),
]

# A process the notebook starts and never waits for: it spins until killed (the kernel's cgroup ends it).
BURNER = ("import subprocess, sys\n"
          "burner = subprocess.Popen([sys.executable, '-c', 'while True: pass'])\n"
          "print(burner.pid)")


@pytest.fixture
def kernel():
    scratch = Path(tempfile.mkdtemp(prefix="genlab-"))
    work = scratch / "k"
    work.mkdir()
    sandbox.prepare_workdir(work)
    config = sandbox.SandboxConfig(memory_bytes=3 * 2**30, max_processes=64)
    session = KernelSession(work, Limits(cell_timeout_s=30, interrupt_grace_s=2),
                            launcher=sandbox.launcher(config, work), cgroup_limits=(3 * 2**30, 64))
    session.start()
    yield session
    session.shutdown()
    shutil.rmtree(scratch, ignore_errors=True)


def _cpu_over(session: KernelSession, seconds: float) -> float:
    before = session.cpu_seconds()
    time.sleep(seconds)
    return session.cpu_seconds() - before


def test_the_kernel_has_a_cpu_share_and_a_cpu_count_of_its_own(kernel):
    group = kernel.cgroup
    assert group is not None and "cpuacct" in group.dirs, group
    if "cpu" in group.dirs and (group.dirs["cpu"] / "cpu.shares").exists():
        assert (group.dirs["cpu"] / "cpu.shares").read_text().strip() == str(cgroups.SHARES_V1)
    assert kernel.cpu_resolution_s() == 1e-9
    idle = _cpu_over(kernel, 0.3)
    assert 0 <= idle < 0.1, f"an idle kernel used {idle:.3f} s of CPU in 0.3 s"


def test_a_process_the_notebook_left_running_counts_as_the_kernels_cpu_time(kernel):
    run = kernel.run_cell(BURNER)
    assert run.status == "ok", run.error
    used = _cpu_over(kernel, 1.0)
    # One spinning process: close to 1 s of CPU in 1 s, less when the machine is busy with other tests.
    assert used > 0.2, f"the kernel's burner used {used:.3f} s of CPU in 1 s, by the cgroup's count"


def test_a_paused_kernel_uses_no_cpu_and_answers_again_afterwards(kernel):
    run = kernel.run_cell(BURNER)
    assert run.status == "ok", run.error
    with kernel.paused() as frozen:
        assert frozen
        time.sleep(0.1)   # the freezer has settled: what is left is the counter standing still
        stopped = _cpu_over(kernel, 0.5)
    running = _cpu_over(kernel, 0.5)
    assert stopped < 0.01, f"a frozen kernel used {stopped:.3f} s of CPU in 0.5 s"
    assert running > 0.1, f"after the pause the burner used only {running:.3f} s of CPU in 0.5 s"
    run = kernel.run_cell("print(6 * 7)")
    assert run.status == "ok" and "42" in "".join(o.get("text", "") for o in run.outputs)


def test_a_kernel_that_is_shut_down_while_paused_is_gone_with_its_group(kernel):
    kernel.run_cell(BURNER)
    group = kernel.cgroup
    with kernel.paused():
        kernel.shutdown()
    assert not any(folder.exists() for folder in group.dirs.values()), group.dirs
