"""Sharded and repeated grading: every student in exactly one shard, same scores every time, resumable."""
from __future__ import annotations

import csv
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import grading_run

from autograder.course.grade import in_shard, parse_shard
from genlab.testing.notebook import LabNotebook

ROOT = Path(__file__).resolve().parents[1]
SAMPLES = ROOT / "autograder" / "samples"


def test_shards_partition_the_students():
    students = [f"student{i:03d}" for i in range(200)]
    for n in (1, 2, 3, 7):
        owners = [[i for i in range(n) if in_shard(s, (i, n))] for s in students]
        assert all(len(o) == 1 for o in owners)
        assert len({o[0] for o in owners}) == n, "every shard gets work"


def test_shard_argument_is_checked():
    assert parse_shard("2/4") == (2, 4)
    for bad in ("4/4", "x", "1/0", "-1/3"):
        with pytest.raises(SystemExit):
            parse_shard(bad)


def _grade(subs: Path, out: Path, *extra) -> dict:
    run = grading_run.run([sys.executable, "-m", "autograder.cli", "--root", str(ROOT), "grade", str(subs), "--out",
                           str(out), "--cell-timeout", "30", "--lab", "lab1_vae", *extra], timeout=900)
    assert run.returncode == 0, run.stderr[-2000:]
    return _rows(out / "grades.csv"), run.stderr


def _rows(*grades_csv: Path) -> dict:
    rows = {}
    for path in grades_csv:
        with path.open() as f:
            rows.update({(r["student"], r["test"]): (r["score"], r["status"], r["diagnosis"]) for r in csv.DictReader(f)})
    return rows


@pytest.fixture(scope="module")
def two_students(tmp_path_factory):
    subs = tmp_path_factory.mktemp("subs")
    for name in ("reference", "bug_kl_sign_flipped"):
        shutil.copytree(SAMPLES / name / "lab1_vae", subs / name / "lab1_vae")
    return subs


@pytest.fixture(scope="module")
def second_grading(two_students, tmp_path_factory):
    """The same two notebooks graded again, independently of the first grading: with a PostgreSQL server, by
    two shards (each its own ``genlab grade``, at the same time) into one database, which the shard test
    checks; without one, by a plain run. One grading serves both tests: each costs a minute of a loaded 2-core
    machine (issue 19). Returns (rows of the shards' grades.csv, the database URL or None, the out folders)."""
    out = tmp_path_factory.mktemp("second")
    base = os.environ.get("GENLAB_TEST_PG_URL")
    if not base:
        rows, _ = _grade(two_students, out / "plain", "--quiet")
        return rows, None, [out / "plain"]
    import psycopg

    name = f"genlab_shard_{os.getpid()}"
    with psycopg.connect(base, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {name}")
        conn.execute(f"CREATE DATABASE {name}")
    url = base.rsplit("/", 1)[0] + "/" + name
    shards = [out / f"shard{i}" for i in range(2)]
    procs = [subprocess.Popen([sys.executable, "-m", "autograder.cli", "--root", str(ROOT), "grade", str(two_students),
                               "--out", str(shard), "--cell-timeout", "30", "--lab", "lab1_vae", "--db", url,
                               "--shard", f"{i}/2", "--quiet"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
             for i, shard in enumerate(shards)]
    for p in procs:
        assert p.wait(timeout=900) == 0, p.stderr.read()[-2000:]
    return _rows(*(shard / "grades.csv" for shard in shards if (shard / "grades.csv").exists())), url, shards


def test_same_submission_same_scores_and_resume(two_students, second_grading, tmp_path):
    first, _ = _grade(two_students, tmp_path / "a")
    second, _, _ = second_grading
    differ = {k: (first[k], second.get(k)) for k in first if first[k] != second.get(k)}
    assert not differ, f"grading the same submissions twice must give the same scores: {differ}\n" + \
        (tmp_path / "a" / "results.json").read_text()[:3000]
    again, log = _grade(two_students, tmp_path / "a")
    assert again == first and "2 of 2 notebooks unchanged" in log


def test_a_result_is_reused_only_while_what_decided_it_is_unchanged(tmp_path, monkeypatch):
    from autograder.grading import cache
    from autograder.core.limits import Limits

    notebook, source, release = (tmp_path / name for name in ("student.ipynb", "source.ipynb", "release.ipynb"))
    for path in (notebook, source, release):
        path.write_text(path.name)
    base = cache.key(notebook, [source, release], Limits())
    assert cache.key(notebook, [source, release], Limits()) == base
    assert cache.key(notebook, [source, release], Limits(cell_timeout_s=999)) != base, "a longer timeout regrades"
    release.write_text("a hidden test changed")
    assert cache.key(notebook, [source, release], Limits()) != base, "a changed release regrades"
    release.write_text(release.name)
    monkeypatch.setattr(cache, "code_digest", lambda: "the grader's code changed")
    assert cache.key(notebook, [source, release], Limits()) != base, "changed grader code regrades"


@pytest.mark.skipif(not os.environ.get("GENLAB_TEST_PG_URL"), reason="no PostgreSQL server: set GENLAB_TEST_PG_URL "
                    "(make test starts one with .ci/postgres.sh)")
def test_two_shards_fill_one_postgres_gradebook(second_grading):
    from autograder.course.gradebook import totals

    _, url, shards = second_grading
    got = totals(url)
    logs = "".join((p / "grader-errors.log").read_text() for p in shards if (p / "grader-errors.log").exists())
    rows = "".join((p / "grades.csv").read_text() for p in shards if (p / "grades.csv").exists())
    full = sum(t["points"] for t in LabNotebook.read(ROOT / "solutions" / "lab1_vae" / "lab1_vae.ipynb").tests.values())
    assert got[("reference", "lab1_vae")] == full, f"{got}\n{rows}\n{logs}"
    assert got[("bug_kl_sign_flipped", "lab1_vae")] < full
