"""autograder.course.gradebook against a real PostgreSQL server, and the same checks against SQLite.

The PostgreSQL tests need a server: ``export GENLAB_TEST_PG_URL="$(.ci/postgres.sh)"`` starts one (and
prints its URL). Without it they are skipped; with ``GENLAB_REQUIRE_PG=1`` they fail instead, so CI cannot
silently skip them. Each test gets its own fresh database (the role needs CREATEDB), dropped afterwards.
"""
from __future__ import annotations

import multiprocessing
import os
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import nbformat
import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url
from sqlalchemy.pool import NullPool

from autograder.course import gradebook

ROOT = Path(__file__).resolve().parents[1]
LAB = "lab1_vae"
POINTS = {c.metadata["nbgrader"]["grade_id"]: float(c.metadata["nbgrader"]["points"])
          for c in nbformat.read(str(ROOT / "solutions" / LAB / f"{LAB}.ipynb"), as_version=4).cells
          if c.metadata.get("nbgrader", {}).get("grade")}
FULL = sum(POINTS.values())


@dataclass
class Outcome:
    test: str
    status: str = "passed"


@dataclass
class Result:
    """What record() reads from autograder.core.results.Result: each test earns ``fraction`` of its points."""
    student: str
    fraction: float = 1.0
    lab: str = LAB
    points: dict = field(default_factory=lambda: dict(POINTS))

    @property
    def outcomes(self):
        return [Outcome(t) for t in self.points]

    def score(self, test):
        return self.points[test] * self.fraction


@pytest.fixture(scope="session")
def _alembic_version():
    from nbgrader.api import get_alembic_version

    return get_alembic_version()


@pytest.fixture(autouse=True)
def _fast_new_gradebooks(monkeypatch, _alembic_version):
    # nbgrader runs `alembic heads` in a subprocess (about 6 s) for every new gradebook, and each test here
    # makes new ones: ask once per session.
    import nbgrader.api

    monkeypatch.setattr(nbgrader.api, "get_alembic_version", lambda: _alembic_version)


def _unavailable(reason: str):
    reason += " (start one with: export GENLAB_TEST_PG_URL=\"$(.ci/postgres.sh)\")"
    if os.environ.get("GENLAB_REQUIRE_PG"):
        pytest.fail(reason)
    pytest.skip(reason)


def _url_text(url) -> str:
    return url.render_as_string(hide_password=False)


@pytest.fixture(scope="session")
def pg_server():
    url = os.environ.get("GENLAB_TEST_PG_URL")
    if not url:
        _unavailable("GENLAB_TEST_PG_URL is not set: no PostgreSQL server to test against")
    engine = create_engine(url, poolclass=NullPool, isolation_level="AUTOCOMMIT",
                           connect_args={"connect_timeout": 5})
    try:
        engine.connect().close()
    except Exception as e:  # noqa: BLE001 - any failure to reach the server
        _unavailable(f"PostgreSQL at {make_url(url)} is not reachable: {type(e).__name__}: {e}")
    yield engine
    engine.dispose()


@pytest.fixture
def pg_url(pg_server):
    name = f"genlab_test_{uuid.uuid4().hex[:12]}"
    with pg_server.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    yield _url_text(pg_server.url.set(database=name))
    with pg_server.connect() as conn:
        conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))


@pytest.fixture(params=["sqlite", "postgresql"])
def db_url(request, tmp_path):
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'gradebook.db'}"
    return request.getfixturevalue("pg_url")


def _count(url: str, sql: str) -> int:
    engine = create_engine(url, poolclass=NullPool)
    try:
        with engine.connect() as conn:
            return conn.execute(text(sql)).scalar()
    finally:
        engine.dispose()


def test_record_and_read_back(db_url, tmp_path):
    results = [Result("ada"), Result("bob", 0.5), Result("cy", 0.0)]
    gradebook.record(db_url, ROOT, [LAB], results, tmp_path / "staging")
    assert gradebook.totals(db_url) == {("ada", LAB): FULL, ("bob", LAB): FULL / 2, ("cy", LAB): 0.0}
    assert _count(db_url, "SELECT count(*) FROM grade_cells") == len(POINTS)
    # a cell the grader scored waits for no TA in formgrader (nbgrader's column defaults to True)
    assert _count(db_url, "SELECT count(*) FROM grade WHERE auto_score IS NOT NULL") == 3 * len(POINTS)
    assert _count(db_url, "SELECT count(*) FROM grade WHERE auto_score IS NOT NULL AND needs_manual_grade") == 0
    if db_url.startswith("postgresql"):
        assert _count(db_url, "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory'") == 0


def test_rerecord_replaces_one_student_and_keeps_the_others(db_url, tmp_path):
    gradebook.record(db_url, ROOT, [LAB], [Result("ada"), Result("bob", 0.5), Result("cy")], tmp_path / "a")
    gradebook.record(db_url, ROOT, [LAB], [Result("bob", 0.25)], tmp_path / "b")  # bob re-graded alone
    gradebook.record(db_url, ROOT, [LAB], [Result("bob", 0.25)], tmp_path / "b")  # ... twice: same rows
    assert gradebook.totals(db_url) == {("ada", LAB): FULL, ("bob", LAB): FULL / 4, ("cy", LAB): FULL}
    assert _count(db_url, "SELECT count(*) FROM submitted_assignment") == 3
    assert _count(db_url, "SELECT count(*) FROM grade") == 3 * len(POINTS)
    assert _count(db_url, "SELECT count(*) FROM student") == 3


def _shard(url, students, staging, barrier):
    barrier.wait()  # both shards hit the empty database at the same moment
    gradebook.record(url, ROOT, [LAB], [Result(s, 0.5) for s in students], staging)


def test_concurrent_shards_into_an_empty_database(db_url, tmp_path):
    ctx = multiprocessing.get_context("fork")  # the children inherit nbgrader already imported: fast
    barrier = ctx.Barrier(2)
    shards = [["s00", "s01", "s02"], ["s10", "s11", "s12", "shared-name-free"]]
    procs = [ctx.Process(target=_shard, args=(db_url, s, tmp_path / f"shard-{i}", barrier))
             for i, s in enumerate(shards)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
    assert [p.exitcode for p in procs] == [0, 0]
    assert gradebook.totals(db_url) == {(s, LAB): FULL / 2 for shard in shards for s in shard}
    assert _count(db_url, "SELECT count(*) FROM assignment") == 1
    assert _count(db_url, "SELECT count(*) FROM grade_cells") == len(POINTS)


def test_postgres_url_with_the_psycopg2_driver(pg_url, tmp_path):
    pytest.importorskip("psycopg2")
    url = _url_text(make_url(pg_url).set(drivername="postgresql+psycopg2"))
    gradebook.record(url, ROOT, [LAB], [Result("ada", 0.5)], tmp_path / "staging")
    assert gradebook.totals(url) == {("ada", LAB): FULL / 2}


# -- the suite leaves no server behind (.ci/with-postgres.sh, which make test runs pytest under) ---------------
WITH_PG = ROOT / ".ci" / "with-postgres.sh"


def test_a_server_the_caller_passed_in_is_used_and_left_alone(tmp_path):
    import subprocess

    env = {**os.environ, "GENLAB_TEST_PG_URL": "postgresql://someone:else@127.0.0.1:1/theirs",
           "GENLAB_PG_DIR": str(tmp_path / "never")}
    done = subprocess.run(["bash", str(WITH_PG), "sh", "-c", 'echo "$GENLAB_TEST_PG_URL"'], env=env,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stdout.strip() == env["GENLAB_TEST_PG_URL"]
    assert not (tmp_path / "never").exists(), "no server of ours was started"


def test_the_throwaway_server_is_stopped_and_removed_whatever_the_outcome():
    import shutil
    import socket
    import subprocess
    import tempfile

    if not (shutil.which("initdb") or list(Path("/usr/lib/postgresql").glob("*/bin/initdb"))):
        _unavailable("PostgreSQL is not installed (.ci/postgres.sh installs it when run as root)")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    # Under /tmp itself: run as root, the server runs as `postgres`, which cannot enter pytest's mode-700 folders.
    folder = Path(tempfile.mkdtemp(prefix="genlab-pg-test-", dir="/tmp")) / "pg"
    folder.parent.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if k != "GENLAB_TEST_PG_URL"}
    env.update(GENLAB_PG_DIR=str(folder), GENLAB_PG_PORT=str(port))
    # The command sees a live server, then fails: the wrapper passes the failure on and still cleans up.
    probe = f'test -n "$GENLAB_TEST_PG_URL" && test -S {folder}/.s.PGSQL.{port} && exit 3'
    done = subprocess.run(["bash", str(WITH_PG), "sh", "-c", probe], env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 3, done.stderr[-2000:]
    assert not folder.exists(), "the throwaway server's folder is still there"
    folder.parent.rmdir()
    ps = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
    assert str(folder) not in ps, "the throwaway server is still running"
