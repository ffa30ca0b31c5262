"""Misconception clusters (autograder/grading/behaviour.py, autograder/insight/clusters.py) and ``genlab catalog suggest``, on the
class the ``graded_class`` fixture grades: three students share one uncatalogued bug of ``gaussian_kl``, three
another of ``negative_elbo``, each written differently (tests/class_students.py), and two are unique."""
from __future__ import annotations

import csv
import json
import os
import shutil
import sys
from pathlib import Path

import pytest

import class_students
import grading_run

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[1]
TRUTH = {**{s: "kl twice" for s in class_students.KL_TWICE},
         **{s: "elbo per example" for s in class_students.ELBO_PER_EXAMPLE},
         **{s: s for s in class_students.UNIQUE}}


def _clusters(out):
    with (out / "class-report.csv").open() as f:
        rows = [r for r in csv.DictReader(f) if r["kind"] == "cluster"]
    return {r["name"]: r for r in rows}


def test_two_clusters_of_three(graded_class):
    found = _clusters(graded_class)
    groups = {r["name"]: set(r["students"].split(";")) for r in found.values()}
    assert set(class_students.KL_TWICE) in groups.values()
    assert set(class_students.ELBO_PER_EXAMPLE) in groups.values()
    clustered = [s for members in groups.values() for s in members]
    assert sorted(clustered) == sorted(TRUTH), "each uncatalogued failure in exactly one cluster, no one else"
    # purity: the share of students whose cluster's majority is their own mistake
    purity = sum(max(sum(TRUTH[s] == t for s in members) for t in {TRUTH[s] for s in members})
                 for members in groups.values()) / len(clustered)
    print(f"cluster purity on the test class: {purity:.2f} ({len(groups)} clusters of {len(clustered)} students)")
    assert purity == 1.0
    kl = next(r for r in found.values() if set(r["students"].split(";")) == set(class_students.KL_TWICE))
    assert kl["function"] == "gaussian_kl" and "scaled by 2" in kl["detail"].split(";")
    elbo = next(r for r in found.values() if set(r["students"].split(";")) == set(class_students.ELBO_PER_EXAMPLE))
    assert elbo["function"] == "negative_elbo" and "not averaged over dim -1" in elbo["detail"].split(";")
    # the catalogued bug is named, not clustered; the ELBO of the KL-twice students fails with their KL:
    # clustered under gaussian_kl only
    assert "bug_kl_sign_flipped" not in clustered


def test_representative_code_on_the_instructor_page_only(graded_class):
    page = (graded_class / "class-report.html").read_text()
    code = class_students.KL_TWICE["kl_twice_a"].splitlines()[1].strip()  # the representative (medoid, first name)
    assert code.replace('"', "&quot;") in page
    for page_path in (graded_class / "feedback").rglob("*.html"):
        text = page_path.read_text()
        student = page_path.relative_to(graded_class / "feedback").parts[0]
        others = [s for s in [*TRUTH, *class_students.RENAMED] if s != student]
        assert not any(s in text for s in others), f"{page_path} names another student"
        assert "Uncatalogued misconceptions" not in text and "Similar solutions" not in text


def test_behaviour_in_results_is_small(graded_class):
    results = json.loads((graded_class / "results.json").read_text())
    for r in results:
        assert len(json.dumps(r["behaviour"])) < 2000, r["student"]
    kl = next(r for r in results if r["student"] == "kl_twice_b")
    assert kl["behaviour"]["gaussian_kl"]["relations"]["scaled by 2"] >= 2


def test_suggested_bug_names_the_cluster_on_a_regrade(graded_class, tmp_path):
    """The Bug entry ``genlab catalog suggest`` prints, added to a copy of the catalogue, names the cluster's
    students when their notebooks (only those three: a grading run costs minutes) are graded again."""
    index = next(r["name"].split("#")[1] for r in _clusters(graded_class).values()
                 if set(r["students"].split(";")) == set(class_students.KL_TWICE))
    done = grading_run.run([sys.executable, "-m", "autograder.cli", "--root", str(ROOT), "catalog", "suggest",
                            str(graded_class), "gaussian_kl", index], timeout=300, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    body, entry = done.stdout.split("# --- 2.")
    assert "Bug(" in entry and "def gaussian_kl_cluster_" in body
    assert class_students.KL_TWICE["kl_twice_a"].splitlines()[1].strip() in body
    entry = entry[entry.index("Bug("):].rstrip().rstrip(",")
    package = tmp_path / "pkg"
    shutil.copytree(ROOT / "shared" / "genlab", package / "genlab")
    with (package / "genlab" / "catalog" / "lab1_vae.py").open("a") as f:
        f.write("\n\n" + body.split("BODIES ---", 1)[1] + f"\nBUGS.append({entry})\n")
    submissions = tmp_path / "submitted"
    for student in class_students.KL_TWICE:
        shutil.copytree(graded_class.parent / "submitted" / student / "lab1_vae", submissions / student / "lab1_vae")
    cmd = [sys.executable, "-m", "autograder.cli", "--root", str(ROOT), "grade", str(submissions), "--out",
           str(tmp_path / "out"), "--workers", "2", "--lab", "lab1_vae", "--cell-timeout", "60", "--quiet",
           # The test's own notebooks; and the sandbox's kernel environment is an allowlist without PYTHONPATH,
           # which its probe of the kernel user's imports refuses. The catalogue is read by the grader's
           # process (diagnosis), not by the kernels.
           "--unsafe"]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(package), os.environ.get("PYTHONPATH")]))}
    done = grading_run.run(cmd, timeout=900, cwd=ROOT, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    bug_id = f"gaussian_kl_cluster_{index}"
    for r in json.loads((tmp_path / "out" / "results.json").read_text()):
        value = next(t for t in r["tests"] if t["test"] == "gaussian_kl_value")
        assert value["diagnosis"] == [bug_id], (r["student"], value)
