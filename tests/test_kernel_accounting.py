"""Issue 22: a kernel's CPU and memory are read, shared and paused from outside it, by the operating system.

The timing verdicts (autograder.wall.remote) use three things a notebook cannot reach: the CPU time the OS counts
for every process of the student's kernel (its cgroup's counter), a CPU share of its own, and the freezer that
stops all of the kernel's processes while the reference kernel is timed. The memory checks compare genlab's
count, taken in the kernel, with the memory the OS charged to the kernel's cgroup during the call. These tests
start real sandboxed kernels and check each from the grader's side; the simulated races are in
tests/test_remote_timing.py.
"""
from __future__ import annotations

import shutil
import tempfile
import time
from pathlib import Path

import pytest

from autograder.wall import cgroups
from autograder.wall import sandbox
from autograder.wall.kernel import KernelSession
from autograder.core.limits import Limits
from autograder.wall.remote import OS_SLACK_BYTES, RemoteFunction, _measured_peak, verified_peak
from genlab.checks import peak_memory
from genlab.testing.calls import Recorder

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
    assert session.run_cell(session.boot_source, silent=True).status == "ok"
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


# -- memory ---------------------------------------------------------------------------------------------------
MiB = 2**20
ALLOCATORS = """
import torch
from torch.utils import _python_dispatch as _pd

def visible(x):                      # two 32 MiB temporaries at once, which genlab's count sees
    return (x.repeat(8, 1) * 2).sum(0)

def blinded(x):                      # the same, with the kernel's dispatch modes off: the count sees nothing
    with _pd._disable_current_modes():
        y = (x.repeat(8, 1) * 2).sum(0)
    return y.clone()

def small(x):
    return x * 2

def aware(x):                        # small while counted (genlab's count is a mode on torch's stack)
    return x * 2 if torch._C._len_torch_dispatch_stack() else visible(x)

def fragmenting(model, images, batch_size):   # Lab 5's honest float64 extract_features: small float64 blocks
    with torch.no_grad():                     # land where its batches' temporaries were freed
        return torch.cat([model(c).flatten(1).to(torch.float64) for c in images.split(batch_size)])
"""


def test_the_grader_takes_the_oss_figure_only_when_it_exceeds_the_kernels_count_beyond_the_slack():
    assert verified_peak(1000, 1000 + OS_SLACK_BYTES) == 1000             # noise within the slack: the count
    assert verified_peak(64 * MiB, 70 * MiB) == 64 * MiB                  # an eighth of the count is slack too
    assert verified_peak(0, 32 * MiB) == 32 * MiB                          # a blinded count: the OS's figure
    assert verified_peak(-1, 32 * MiB) == -1 and verified_peak("x", 1) == "x"   # not bytes: the test fails on it


def test_a_kernel_blinding_genlabs_count_is_measured_by_what_the_os_charged(kernel):
    run = kernel.run_cell(ALLOCATORS + "x = torch.randn(1024, 1024)")   # x: 4 MiB, so 8 copies are 32 MiB
    assert run.status == "ok", run.error
    import torch

    x = torch.randn(1024, 1024)
    names = ("visible", "blinded", "small", "aware")
    peaks = {name: peak_memory(RemoteFunction(kernel, name, Recorder()), x) for name in names}
    assert 64 * MiB <= peaks["visible"] < 72 * MiB, peaks                 # genlab's count, confirmed by the OS
    assert peaks["blinded"] >= 60 * MiB, peaks                            # what the count missed, the OS saw
    assert peaks["small"] <= 5 * MiB, peaks                               # the output, 4 MiB
    assert peaks["aware"] >= 60 * MiB, peaks     # the OS watched a plain call too, with no mode to notice
    # An honest function that fragments the heap: the heap is never trimmed (sandbox.TRIM_THRESHOLD_BYTES), so
    # it grows in the counted call and the watched calls reuse it: the count stands.
    # (trimmed after every call, the heap regrew by 0-3 MB per watched call here, and by 11 MB over a 2.2 MB
    # count once while the samples were graded: the variant lab5_variant_features_float64 lost its test).
    from genlab.data import load_digits
    from genlab.features import load_feature_net

    inputs = (load_feature_net(), load_digits(flat=False)[0], 64)
    for _ in range(4):
        *_, reply, _, os_peak = _measured_peak(kernel, {"target": "fragmenting"}, inputs, {}, {})
        assert reply["ok"] and reply["result"] < 3 * MiB and os_peak < 2 * MiB, (reply, os_peak)
    with kernel.memory_watch() as watch:
        kernel.run_cell("big = torch.ones(64, 1024, 1024)")   # 256 MiB, kept
    assert watch is not None and watch.peak_bytes >= 256 * MiB, watch


def test_a_kernel_left_frozen_by_a_killed_grader_is_thawed_and_ended_by_the_next():
    """A grader killed outright (SIGKILL) while it timed the reference leaves the student's kernel frozen in its
    group, where SIGKILL cannot end it. The next grading process removes the groups of graders that are gone."""
    import subprocess

    probe = subprocess.Popen(["true"])      # a grader that has ended: its process number is free
    probe.wait()
    group = cgroups.Cgroup.create(2**30, 16, owner=probe.pid)
    sleeper = subprocess.Popen([*group.launcher(), "sleep", "600"])
    deadline = time.monotonic() + 10
    while sleeper.pid not in group.pids() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert sleeper.pid in group.pids()
    if group.can_freeze():
        assert group.freeze(True)
    removed = cgroups.sweep_orphans()
    name = next(iter(group.dirs.values())).name
    assert name in removed, (name, removed)
    assert sleeper.wait(timeout=10) == -9, "the frozen kernel was not ended"
    assert not any(d.exists() for d in group.dirs.values())
    # a live grader's group is never touched
    mine = cgroups.Cgroup.create(2**30, 16)
    assert next(iter(mine.dirs.values())).name not in cgroups.sweep_orphans()
    assert all(d.exists() for d in mine.dirs.values())
    mine.remove()
