"""Issue 39: time and memory verdicts from fresh processes, counted by the OS from outside (autograder.wall.measure).

One sandboxed zygote per module (it imports torch once); each test forks fresh processes from it, as grading does,
and checks a figure or a verdict from the grader's side. The attacks of the issue are written as the notebooks'
cells the measured processes run; their graded counterparts are samples lab1_attack_* (solutions/lab1_vae/samples.py).
"""
from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import pytest
import torch

from autograder.wall import cgroups, measure, sandbox
from genlab.checks import CheckFailed

pytestmark = [
    pytest.mark.skipif(bool(sandbox.probe()), reason=f"no sandbox here: {sandbox.probe()}"),
    pytest.mark.skipif(not cgroups.usable(), reason=f"no per-kernel cgroups here: {cgroups.available()}"),
]
MiB = 2**20
SETUP = "import torch\ntorch.manual_seed(0)"
REFERENCE = "import torch\ndef f(mu, logvar, eps):\n    return mu + torch.exp(0.5 * logvar) * eps\n"


def reference(mu, logvar, eps):
    return mu + torch.exp(0.5 * logvar) * eps


def student(body: str) -> list[str]:
    return [SETUP, "import torch\n" + body]


@pytest.fixture(scope="module")
def zygote():
    scratch = Path(tempfile.mkdtemp(prefix="genlab-"))
    work = scratch / "m"
    work.mkdir()
    sandbox.prepare_workdir(work)
    z = measure.Zygote(work, launcher=sandbox.launcher(sandbox.SandboxConfig(), work),
                       cgroup_limits=(3 * 2**30, 64), setup_source=SETUP,
                       reference_cells=[SETUP, REFERENCE]).start()
    yield z
    z.shutdown()
    shutil.rmtree(scratch, ignore_errors=True)


def small():
    g = torch.Generator().manual_seed(1)
    return tuple(torch.randn(512, 64, generator=g) for _ in range(3))


def big():
    g = torch.Generator().manual_seed(2)
    return tuple(torch.randn(2048, 1024, generator=g) for _ in range(3))


def ratio(zygote, cells, **kw):
    return measure.time_ratio(zygote, "f", reference, "f", small(), {}, cells=cells,
                              reference_cells=zygote.reference_cells, clear_below=2.5, **kw)


def test_a_reference_timed_against_itself_is_near_one_by_cpu_time(zygote):
    result = ratio(zygote, [SETUP, REFERENCE])
    assert 0.5 < result.cpu_ratio < 2.0 and result.ratio < 2.5, result


def test_a_python_loop_is_slow(zygote):
    loop = "def f(mu, logvar, eps):\n    return torch.stack([m + torch.exp(0.5 * l) * e for m, l, e in zip(mu, logvar, eps)])"
    assert ratio(zygote, student(loop)).ratio > 5


@pytest.mark.parametrize("trick", [
    # a memo that answers every call with the first answer
    "_memo = []\ndef f(mu, logvar, eps):\n    if not _memo:\n        _memo.append(mu + torch.exp(0.5 * logvar) * eps)\n    return _memo[0]",
    # a cheap wrong answer once the calls come fast (the pace of a timed loop)
    "import time\n_last = [0.0]\ndef f(mu, logvar, eps):\n    now, _last[0] = time.perf_counter(), time.perf_counter()\n"
    "    if now - _last[0] < 0.01:\n        return mu\n    return mu + torch.exp(0.5 * logvar) * eps",
])
def test_a_fast_wrong_answer_in_the_timed_calls_fails_with_a_message(zygote, trick):
    with pytest.raises(CheckFailed, match="wrong answer in a timed loop"):
        ratio(zygote, student(trick))


def test_every_timed_call_gets_inputs_of_its_own_with_values_of_their_own():
    mu, logvar, eps = small()
    copies = measure.timed_copies((mu, logvar, eps, 3), {}, 50)
    firsts = {float(a[0][0, 0]) for a, _ in copies}
    assert len(firsts) == 50 and all(a[3] == 3 for a, _ in copies)
    assert len({a[0].data_ptr() for a, _ in copies}) == 50
    assert all(torch.allclose(a[0], mu, rtol=2**-7) for a, _ in copies)


def test_work_done_while_the_notebook_runs_its_cells_is_in_the_figure(zygote):
    # the staging attack: slow work before the timed calls, in the same process, is counted with them
    early = "_x = [torch.randn(256, 256) @ torch.randn(256, 256) for _ in range(600)]\n" \
            "def f(mu, logvar, eps):\n    return mu + torch.exp(0.5 * logvar) * eps"
    assert ratio(zygote, student(early)).ratio > 5


def test_an_honest_functions_peak_is_its_count_within_the_slack(zygote):
    count, os_bytes = measure.peak_memory(zygote, "f", big(), {}, cells=[SETUP, REFERENCE], reference=reference)
    assert count >= 16 * MiB
    assert os_bytes <= count + count // 8 + 8 * MiB


@pytest.mark.parametrize("cells", [
    # a balloon held before the call and freed inside it
    "_balloon = [torch.ones(16 * 2**20)]\ndef f(mu, logvar, eps):\n    _balloon.clear()\n"
    "    t = torch.exp(0.5 * logvar)\n    return mu + t * eps",
    # a heap warmed by an earlier call, so that temporaries come from free heap
    "_w = torch.ones(40 * 2**20 // 4); del _w\ndef f(mu, logvar, eps):\n    return mu + torch.exp(0.5 * logvar) * eps",
])
def test_memory_held_or_touched_before_the_call_is_in_the_figure(zygote, cells):
    count, os_bytes = measure.peak_memory(zygote, "f", big(), {}, cells=student(cells), reference=reference)
    assert os_bytes > count + count // 8 + 8 * MiB


def test_a_wrong_answer_in_the_memory_watched_call_fails(zygote):
    with pytest.raises(CheckFailed, match="wrong answer in a memory-watched call"):
        measure.peak_memory(zygote, "f", big(), {}, cells=student("def f(mu, logvar, eps):\n    return mu"),
                            reference=reference)


def test_a_function_that_is_not_defined_is_a_name_error(zygote):
    with pytest.raises(Exception, match="is not defined in your notebook"):
        measure.peak_memory(zygote, "f", big(), {}, cells=[SETUP], reference=reference)


def test_answers_compare_by_structure_shape_and_value():
    t = torch.arange(6.0).reshape(2, 3)
    assert measure.compare_answers(t * (1 + 1e-6), t) == ""
    assert "values differ" in measure.compare_answers(t * 1.01, t)
    assert "shape" in measure.compare_answers(t.T, t)
    assert "tensor" in measure.compare_answers([1.0], t)
    assert measure.compare_answers(t * 2, t, values=False) == ""
    assert measure.compare_answers((t, 3), (t, 3)) == "" and measure.compare_answers((t, 4), (t, 3))
