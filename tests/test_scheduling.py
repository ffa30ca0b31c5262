"""How ``genlab grade --workers N`` hands notebooks to workers (autograder.course.grade.LabAffinity)."""
from __future__ import annotations

from pathlib import Path

from autograder.course.grade import LabAffinity

ROOT = Path(__file__).resolve().parents[1]


def _work(counts: dict[str, int]):
    return [(f"s{i:02d}", lab, None) for lab, n in counts.items() for i in range(n)]


def test_every_notebook_is_handed_out_once_and_workers_keep_to_their_labs():
    work = _work({"lab1": 7, "lab2": 3, "lab3": 3, "lab4": 3, "lab5": 3})
    plan = LabAffinity(work)
    loaded = [set(), set()]
    handed = []
    turn = 0
    while True:  # the two workers alternate, as if every notebook took as long
        k = turn % 2
        task = plan.next_for(loaded[k], loaded[1 - k])
        if task is None:
            task = plan.next_for(loaded[1 - k], loaded[k])
            if task is None:
                break
            k = 1 - k
        loaded[k].add(task[1])
        handed.append((k, task))
        turn += 1
    assert sorted(t for _, t in handed) == sorted(work)
    # five labs, two workers: each lab is loaded by one worker only, except at most one shared at the end
    both = loaded[0] & loaded[1]
    assert len(both) <= 1, f"labs loaded by both workers: {both}"
    assert sum(len(x) for x in loaded) <= 6


def test_a_worker_takes_the_biggest_lab_nobody_holds_then_helps_with_the_rest():
    plan = LabAffinity(_work({"a": 1, "b": 4, "c": 2}))
    assert plan.next_for(set(), set())[1] == "b"            # the biggest lab first
    assert plan.next_for(set(), {"b"})[1] == "c"             # another worker holds b: the biggest free one
    assert plan.next_for({"c"}, {"b"})[1] == "c"             # keeps to its own lab
    assert plan.next_for({"c"}, {"b"})[1] == "a"             # its lab is done: a free one before helping with b
    assert plan.next_for({"c", "a"}, {"b"})[1] == "b"        # nothing free is left: helps with b


def test_a_spare_kernel_warms_the_modules_the_setup_cell_imports():
    from autograder.course.grade import WARM
    from autograder.grading.pipeline import Lab

    lab = Lab.load(ROOT, "lab5_fid")
    assert lab.setup_modules[:4] == ("math", "time", "numpy", "scipy.linalg")
    assert {"torchmetrics.image.fid", "genlab.features"} <= set(lab.setup_modules)
    namespace: dict = {}
    exec(WARM.format(modules=("math", "no_such_module_genlab")), namespace)
    assert set(namespace) == {"__builtins__"}, "warming must leave no name behind"


def test_a_spare_kernel_is_started_only_when_another_notebook_may_follow(tmp_path, monkeypatch):
    from autograder.course.grade import Kernels, Run
    from autograder.core.limits import Limits

    started = []

    class FakeSession:
        def __init__(self):
            started.append(self)

        def shutdown(self):
            pass

    kernels = Kernels(Run(ROOT, tmp_path, tmp_path, Limits(), None))
    monkeypatch.setattr(kernels, "_start", lambda boot=True, warm=(): FakeSession())
    kernels.more = True
    first = kernels.take()                     # started now, and a spare for the next notebook
    kernels._spare.result()
    assert len(started) == 2
    kernels.more = False
    second = kernels.take()                    # the spare is used; no new one: nothing follows
    assert second is started[1] and first is started[0]
    assert kernels._spare is None and len(started) == 2
    kernels.close()


def test_the_plan_counts_what_is_left():
    plan = LabAffinity(_work({"a": 2, "b": 1}))
    assert plan.left_count() == 3
    plan.next_for(set(), set())
    assert plan.left_count() == 2
