"""deploy/slurm/grade-array.sbatch on a real one-node Slurm cluster (.ci/slurm.sh), into one PostgreSQL gradebook.

The array grades a small class (6 Lab 1 sample submissions) in 4 shards while one task is killed mid-run with
scancel; that shard is then resubmitted alone. The test checks what an instructor relies on:
- every student is graded exactly once: one submission and one row per grade cell in the gradebook, one
  shard's grades.csv holding them, nobody lost with the killed task, nobody doubled by its rerun;
- the shards' grades.csv, put together, equal a single-machine ``genlab grade`` of the same notebooks, row for
  row (apart from timing columns, if any).

Needs root (or sudo) for Slurm's daemons and a PostgreSQL server (``make test`` starts one: GENLAB_TEST_PG_URL).
Without them the test is skipped; with ``GENLAB_REQUIRE_SLURM=1`` it fails instead, so CI cannot skip it quietly.
Slurm here has no accounting database (sacct needs slurmdbd and MariaDB): the test waits with ``squeue`` and
reads each task's final state and exit code from ``scontrol show job``, which keeps finished jobs for an hour.
"""
from __future__ import annotations

import csv
import os
import re
import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SBATCH = ROOT / "deploy" / "slurm" / "grade-array.sbatch"
SLURM_SH = ROOT / ".ci" / "slurm.sh"
SLURM_DIR = Path(os.environ.get("GENLAB_SLURM_DIR", "/tmp/genlab-slurm"))
LAB = "lab1_vae"
# A small class: the reference, a correct variant and four catalogued bugs (their diagnoses are compared
# too). No performance bug: their verdicts depend on timings, which two shards sharing 2 CPUs would disturb.
STUDENTS = ["reference", "variant_exp_half", "bug_kl_sign_flipped", "bug_exp_logvar_as_std",
            "bug_elbo_not_negated", "bug_kl_summed_over_batch"]
SHARDS = 4
KILLED = 1           # the array task scancel kills mid-run; tasks 0 and 1 start first on 2 CPUs
GRADE_ARGS = f"--lab {LAB} --cell-timeout 30 --quiet"
TIMEOUT_S = 900


def _unavailable(reason: str):
    if os.environ.get("GENLAB_REQUIRE_SLURM"):
        pytest.fail(reason)
    pytest.skip(reason)


def _fake(path: Path, body: str) -> None:
    path.write_text("#!/bin/bash\n" + body)
    path.chmod(0o755)


# -- the script's own logic, without a cluster (fast) ----------------------------------------------------
def test_host_runtime_and_rerun_of_one_shard(tmp_path):
    """GENLAB_RUNTIME=host runs genlab from PATH; GENLAB_SHARDS=4 with --array=2 regrades shard 2 of 4."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    got = tmp_path / "args"
    _fake(bin_dir / "genlab", f'{{ pwd; printf "%s\\n" "$@"; }} > {got}\n')
    (tmp_path / "course").mkdir()
    env = {"PATH": f"{bin_dir}:{os.environ['PATH']}", "HOME": str(tmp_path), "GENLAB_RUNTIME": "host",
           "GENLAB_DATA": str(tmp_path / "data"), "GENLAB_DB": "postgresql://u:p@h/db",
           "GENLAB_ROOT": str(tmp_path / "course"), "GENLAB_GRADE_ARGS": "--lab lab1_vae --quiet",
           "GENLAB_SHARDS": "4", "SLURM_ARRAY_TASK_ID": "2", "SLURM_ARRAY_TASK_COUNT": "1"}
    subprocess.run(["bash", str(SBATCH)], env=env, cwd=tmp_path, check=True, timeout=30)
    assert got.read_text().split("\n")[:-1] == [
        str(tmp_path / "course"), "grade", str(tmp_path / "data" / "submitted"),
        "--out", str(tmp_path / "data" / "out" / "shard-2"), "--shard", "2/4", "--db", "postgresql://u:p@h/db",
        "--workers", "1", "--lab", "lab1_vae", "--quiet"]
    # An index outside 0..N-1 is refused before anything runs.
    env["SLURM_ARRAY_TASK_ID"] = "4"
    done = subprocess.run(["bash", str(SBATCH)], env=env, cwd=tmp_path, capture_output=True, text=True)
    assert done.returncode == 2 and "not a shard of 4" in done.stderr


# -- the real cluster ---------------------------------------------------------------------------------------
def _pid_alive(path: Path) -> bool:
    try:
        return Path(f"/proc/{int(path.read_text())}").is_dir()   # not os.kill: a root daemon gives EPERM
    except (OSError, ValueError):
        return False


@pytest.fixture(scope="module")
def slurm():
    """The one-node cluster's environment (SLURM_CONF); stopped afterwards if this test started it."""
    if os.geteuid() != 0 and not shutil.which("sudo"):
        _unavailable("Slurm's daemons need root or sudo")
    was_running = _pid_alive(SLURM_DIR / "slurmctld.pid")
    run = subprocess.run(["bash", str(SLURM_SH)], capture_output=True, text=True, timeout=900)
    if run.returncode != 0:
        _unavailable(f".ci/slurm.sh could not start a cluster:\n{run.stderr[-3000:]}")
    conf = re.search(r"SLURM_CONF=(\S+)", run.stdout).group(1)
    yield {**os.environ, "SLURM_CONF": conf}
    if not was_running:
        subprocess.run(["bash", str(SLURM_SH), "stop"], capture_output=True, timeout=120)


@pytest.fixture
def pg_url():
    """A fresh database on the throwaway PostgreSQL server, dropped afterwards."""
    base = os.environ.get("GENLAB_TEST_PG_URL")
    if not base:
        _unavailable("no PostgreSQL server: set GENLAB_TEST_PG_URL (make test starts one with .ci/postgres.sh)")
    import psycopg

    name = f"genlab_slurm_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(base, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    yield base.rsplit("/", 1)[0] + "/" + name
    with psycopg.connect(base, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def _slurm(env, *args) -> str:
    done = subprocess.run(list(args), env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, f"{' '.join(args)}: {done.stderr}"
    return done.stdout


def _submit(env, array: str, data: Path, **extra_env) -> str:
    """Submits the sbatch as an array; one CPU per task, so 2 tasks run at once on the 2-CPU node."""
    return _slurm({**env, **extra_env}, "sbatch", "--parsable", f"--array={array}", "--cpus-per-task=1",
                  "--mem-per-cpu=2G", f"--chdir={data}", f"--output={data}/logs/%A_%a.log",
                  str(SBATCH)).strip().split(";")[0]


def _wait(env, job: str, until: str = "") -> None:
    """Polls squeue until the job has left the queue (or, with ``until``, until that task state is seen)."""
    deadline = time.monotonic() + TIMEOUT_S
    while time.monotonic() < deadline:
        states = _slurm(env, "squeue", "-h", "-j", job, "-o", "%T").split()
        if (until and until in states) or (not until and not states):
            return
        time.sleep(1)
    pytest.fail(f"job {job} still queued after {TIMEOUT_S} s:\n{_slurm(env, 'squeue')}")


def _final_states(env, job: str) -> dict[int, tuple[str, str]]:
    """{array index: (JobState, ExitCode)} of every task of an array job, from scontrol."""
    states = {}
    for line in _slurm(env, "scontrol", "show", "job", "-o", job).splitlines():
        fields = dict(re.findall(r"(\w+)=(\S*)", line))
        states[int(fields["ArrayTaskId"])] = (fields["JobState"], fields["ExitCode"])
    return states


def _rows(path: Path) -> list[dict]:
    """grades.csv's rows without timing columns (the only thing two gradings of a notebook may differ in)."""
    with path.open() as f:
        return [{k: v for k, v in row.items() if "time" not in k and "second" not in k}
                for row in csv.DictReader(f)]


def _count(url: str, sql: str):
    import psycopg

    with psycopg.connect(url) as conn:
        return conn.execute(sql).fetchall()


def test_job_array_fills_one_gradebook_and_survives_a_killed_task(slurm, pg_url, tmp_path):
    from autograder.course.grade import in_shard
    from autograder.course.gradebook import totals

    # The class, as the sbatch expects it: GENLAB_DATA/submitted/<student>/<lab>/<lab>.ipynb.
    data = tmp_path / "data"
    for student in STUDENTS:
        shutil.copytree(ROOT / "autograder" / "samples" / student / LAB, data / "submitted" / student / LAB)
    (data / "logs").mkdir()
    owners = {s: next(i for i in range(SHARDS) if in_shard(s, (i, SHARDS))) for s in STUDENTS}
    killed_students = {s for s, i in owners.items() if i == KILLED}
    assert killed_students, f"shard {KILLED} must have students for the kill to mean something: {owners}"
    db_file = tmp_path / "db-url"
    db_file.write_text(pg_url + "\n")
    db_file.chmod(0o600)
    # The tasks run genlab from this Python's environment, in this checkout (GENLAB_RUNTIME=host).
    env = {**slurm, "PATH": f"{Path(sys.executable).parent}:{slurm['PATH']}", "GENLAB_RUNTIME": "host",
           "GENLAB_ROOT": str(ROOT), "GENLAB_DATA": str(data), "GENLAB_DB_FILE": str(db_file),
           "GENLAB_GRADE_ARGS": GRADE_ARGS, "OMP_NUM_THREADS": "1"}
    env.pop("GENLAB_DB", None)

    def logs() -> str:
        return "\n".join(f"--- {p.name}\n{p.read_text()[-3000:]}" for p in sorted((data / "logs").glob("*.log")))

    # 1. The whole array; task KILLED is cancelled while it grades.
    start = time.monotonic()
    job = _submit(env, f"0-{SHARDS - 1}", data)
    task = f"{job}_{KILLED}"
    _wait(env, task, until="RUNNING")
    time.sleep(5)  # genlab has started: grading a shard's notebooks takes far longer than this
    assert _slurm(env, "squeue", "-h", "-j", task, "-o", "%T").split() == ["RUNNING"], \
        f"task {task} finished before it could be killed mid-run:\n{logs()}"
    _slurm(env, "scancel", task)
    _wait(env, job)
    array_s = time.monotonic() - start
    states = _final_states(env, job)
    assert states[KILLED][0] == "CANCELLED", states
    assert all(states[i] == ("COMPLETED", "0:0") for i in range(SHARDS) if i != KILLED), f"{states}\n{logs()}"
    # Killed mid-run: its students are not in the gradebook (a shard records only when it has finished)...
    assert set(totals(pg_url)) == {(s, LAB) for s in STUDENTS if s not in killed_students}, logs()

    # 2. ... until its shard is run again, alone: shard KILLED of SHARDS. Meanwhile the same notebooks are graded
    # on one machine, for the comparison below, on the CPU the rerun leaves free.
    start = time.monotonic()
    rerun = _submit(env, str(KILLED), data, GENLAB_SHARDS=str(SHARDS))
    single = tmp_path / "single"
    single_run = subprocess.Popen([shutil.which("genlab", path=env["PATH"]), "--root", str(ROOT), "grade",
                                   str(data / "submitted"), "--out", str(single), *GRADE_ARGS.split()],
                                  env=env, stdout=subprocess.DEVNULL, stderr=(tmp_path / "single.log").open("w"))
    try:
        _wait(env, rerun)
        rerun_s = time.monotonic() - start
        assert _final_states(env, rerun) == {KILLED: ("COMPLETED", "0:0")}, logs()

        # Every student graded exactly once: one submission, one grade per grade cell, one shard's grades.csv.
        book = totals(pg_url)
        assert set(book) == {(s, LAB) for s in STUDENTS}, logs()
        submissions = _count(pg_url, "SELECT student_id, count(*) FROM submitted_assignment GROUP BY student_id")
        assert sorted(submissions) == sorted((s, 1) for s in STUDENTS)
        (cells,), = _count(pg_url, "SELECT count(*) FROM grade_cells")
        (grades,), = _count(pg_url, "SELECT count(*) FROM grade")
        assert grades == cells * len(STUDENTS), "a grade row is missing or duplicated"
        shard_rows = {i: _rows(data / "out" / f"shard-{i}" / "grades.csv") for i in range(SHARDS)
                      if (data / "out" / f"shard-{i}" / "grades.csv").exists()}
        for i, rows in shard_rows.items():
            assert {r["student"] for r in rows} == {s for s, o in owners.items() if o == i}, f"shard {i}: {rows}"

        # 3. The single-machine grade: the same rows, in the same order once sorted by student.
        single_run.wait(timeout=TIMEOUT_S)
        single_s = time.monotonic() - start
        assert single_run.returncode == 0, (tmp_path / "single.log").read_text()[-3000:]
    finally:
        if single_run.poll() is None:  # a failed check above: do not leave the grader running
            single_run.kill()
            single_run.wait()
    expected = _rows(single / "grades.csv")
    sharded = sorted((r for rows in shard_rows.values() for r in rows), key=lambda r: r["student"])  # stable
    # grades.csv has the autograded tests; the gradebook also holds the manually graded answers' cells
    (autograded,), = _count(pg_url, "SELECT count(*) FROM grade_cells WHERE cell_type = 'code'")
    assert len(expected) == autograded * len(STUDENTS)
    assert sharded == expected, "sharded and single-machine grades differ:\n" + "\n".join(
        f"{a} != {b}" for a, b in zip(sharded, expected) if a != b)
    single_totals = {}
    for r in expected:
        single_totals[(r["student"], r["lab"])] = single_totals.get((r["student"], r["lab"]), 0) + float(r["score"])
    assert book == pytest.approx(single_totals)
    print(f"\nslurm: {SHARDS} shards of {len(STUDENTS)} students on 2 CPUs: array {array_s:.0f} s (task {KILLED} "
          f"killed mid-run), rerun of shard {KILLED} {rerun_s:.0f} s, single machine (alongside the rerun) "
          f"{single_s:.0f} s; "
          f"{len(expected)} grades.csv rows compared, {grades} gradebook grades")
