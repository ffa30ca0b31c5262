"""A bug written twice is the same bug: each catalogued edit (what students see) against its full body (issue 21).

Students receive ``genlab.catalog.<lab>``, where a bug whose code would be the answer with one edit is written as
an edit of the student's own function (``-gaussian_kl(mu, logvar)``); the full body stays in
``solutions/<lab>/bugs.py``, for the samples and the grader. Here every call the lab's own tests make (the
reference's, recorded) is replayed through both: the edit, run on the reference, must give what the body gives.
"""
from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import torch

from autograder.core.labs import LabFolder, discover
from genlab.catalog import Edit, bugs_for, runnable
from genlab.testing.calls import LocalFunction, Recorder
from genlab.testing.diagnosis import replay, same, signature
from genlab.testing.notebook import LabNotebook
from genlab.testing.reference import Reference, execute_reference
from genlab.testing.runner import run_test

ROOT = Path(__file__).resolve().parents[1]
LABS = [lab for lab in discover(ROOT) if lab.bodies_file.is_file()]


def _reference_calls(lab: LabFolder):
    """The calls the lab's tests make, run on the reference (timing tests left out: they replay nothing)."""
    nb = LabNotebook.read(lab.source)
    namespace = execute_reference(nb)
    reference = Reference(namespace, nb.solutions)
    recorder = Recorder()
    for test_id, spec in nb.tests.items():
        if "performance" in test_id:
            continue
        names: dict = {}
        exec(compile(nb.setup_source, "<setup>", "exec"), names)
        names["reference"] = reference
        names.update({f: LocalFunction(namespace[f], f, recorder) for f in nb.solutions if f in namespace})
        torch.manual_seed(0)
        run_test(test_id, spec["source"], names)
    return reference, recorder.calls


@pytest.mark.parametrize("lab", LABS, ids=lambda lab: lab.id)
def test_each_edit_is_the_bug_its_full_body_is(lab, monkeypatch):
    import __main__

    reference, calls = _reference_calls(lab)
    for name in dir(reference):  # a body may look up the notebook's class (add_lora's LoRALinear) in __main__
        monkeypatch.setattr(__main__, name, getattr(reference, name), raising=False)
    compared = {}
    for bug in bugs_for(lab.id):
        if not isinstance(bug.impl, Edit):
            continue
        assert bug.id in lab.bodies, f"{bug.id} is an edit with no full body in {lab.bodies_file.name}"
        edit, body = runnable(bug.impl, reference), lab.bodies[bug.id]
        compared[bug.id] = 0
        for call in (c for c in calls if c.name == bug.function and c.kind in bug.kinds):
            expected = replay(body, call)
            if isinstance(expected, Exception):
                continue  # the body is narrower than the bug (bce_on_sigmoid's sums the last axis only)
            if bug.detect is not None:  # named by its symptom (random draws of a wrong size): the symptom must agree
                shown = [bug.detect([dataclasses.replace(call, result=r, error=None)]) for r in (replay(edit, call), expected)]
                assert shown[0] == shown[1], (bug.id, call.args, shown)
            elif same(expected, replay(body, call)):  # deterministic: the values must agree
                assert same(replay(edit, call), expected, rtol=1e-4, atol=1e-5), (bug.id, call.args)
            else:  # random draws: shape and dtype must
                assert signature(replay(edit, call)) == signature(expected), (bug.id, call.args)
            compared[bug.id] += 1
    assert compared and all(compared.values()), f"edits no test call reaches: {compared}"


@pytest.mark.parametrize("lab", LABS, ids=lambda lab: lab.id)
def test_the_grader_and_the_samples_use_the_full_bodies(lab):
    """What students see changed; what the grader replays and the bug samples are made of did not."""
    from autograder.release.sample_submissions import bug_cell

    for bug in lab.bugs:
        assert not isinstance(bug.impl, Edit) or bug.id not in lab.bodies
        if bug.id in lab.bodies:
            assert f"def {bug.function}(" in bug_cell(lab.id, bug.id)


def test_without_a_reference_an_edit_is_never_replayed_on_the_students_own_function():
    """Run on the student's function, ``detached_sample`` is the student's output detached: it would "match"
    any wrong sampler. Without a reference (a student's machine) and without fingerprints (the repository
    ships none), the self-check names no edit at all."""
    from genlab.selfcheck import _diagnose_alone, fingerprints

    assert fingerprints("lab1_vae") == [], "fingerprints are written into the student bundle's wheel only"
    recorder = Recorder()
    wrong = LocalFunction(lambda mu, logvar, eps=None: mu * 0, "reparameterize", recorder)
    wrong(torch.randn(4, 3), torch.randn(4, 3), torch.randn(4, 3))
    assert [b.id for b in _diagnose_alone("lab1_vae", recorder, "reparameterize_value")] == []


def test_without_a_reference_a_symptom_the_calls_show_by_themselves_is_still_named():
    """A bug named by ``detect`` (one noise draw for the whole batch) needs no reference and no fingerprint."""
    from genlab.selfcheck import _diagnose_alone

    recorder = Recorder()
    shared = LocalFunction(LabFolder(ROOT, "lab1_vae").bodies["eps_shared_across_batch"], "reparameterize", recorder)
    shared(torch.zeros(8, 3), torch.zeros(8, 3))
    assert [b.id for b in _diagnose_alone("lab1_vae", recorder, "reparameterize_noise")] == ["eps_shared_across_batch"]
