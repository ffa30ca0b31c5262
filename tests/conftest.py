"""Shared fixtures. ``jupyter_lab``: a real JupyterLab server for the browser tests (tests/test_browser.py)."""
from __future__ import annotations

import contextlib

import json
import os
import secrets
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import pytest

import grading_run
import phases

ROOT = Path(__file__).resolve().parents[1]
# A sentence of a lab's text that this run's numbers contradict fails the suite (genlab.readings); nbval's kernels
# inherit this environment. The grader never passes it on to a student's kernel (sandbox.PASSED_ON).
os.environ.setdefault("GENLAB_STRICT_READINGS", "1")
GRADED = ["reference", "bug_kl_sign_flipped"]   # the Lab 1 samples ``graded`` grades (and one more, below)

# JupyterLab user settings for the test server: every cell in the page (no virtual scrolling, so the test
# can read all outputs), cell timings recorded, the notebook's own kernel started without asking (a loaded
# machine otherwise raised "Select Kernel" over the page, and the self-check test failed on it in a CI run),
# and no news or update pop-ups covering the notebook.
LAB_SETTINGS = {
    "@jupyterlab/notebook-extension/tracker.jupyterlab-settings": {"windowingMode": "none", "recordTiming": True,
                                                                  "autoStartDefaultKernel": True},
    "@jupyterlab/apputils-extension/notification.jupyterlab-settings": {"fetchNews": "false",
                                                                       "checkForUpdates": False},
}


@dataclass
class JupyterLab:
    url: str            # http://127.0.0.1:PORT
    token: str
    root: Path          # the server's root folder: notebooks are put there through the contents API

    def page_url(self, path: str, workspace: str = "default") -> str:
        """The notebook at ``path`` in a workspace of its own: no tabs restored from another test."""
        return f"{self.url}/lab/workspaces/{workspace}/tree/{path}?token={self.token}"

    def api(self, method: str, path: str, body: dict | None = None) -> dict:
        request = urllib.request.Request(
            f"{self.url}/api/{path}", method=method, data=json.dumps(body).encode() if body is not None else None,
            headers={"Authorization": f"token {self.token}", "Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=60) as reply:
            text = reply.read()
        return json.loads(text) if text else {}

    def put_notebook(self, path: str, nb) -> None:
        """Saves ``nb`` at ``path`` (folders created) through the server's contents API, as a browser would."""
        parts = path.split("/")
        for i in range(1, len(parts)):
            self.api("PUT", "contents/" + "/".join(parts[:i]), {"type": "directory"})
        self.api("PUT", f"contents/{path}", {"type": "notebook", "format": "json", "content": nb})


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session")
def jupyter_lab(tmp_path_factory) -> JupyterLab:
    """JupyterLab on a free loopback port, with a random token, its own settings and an empty root folder;
    stopped (kernels included) at the end of the session. Kernels see ``GENLAB_ROOT`` (the checkout), so
    ``genlab.check`` finds the lab and its catalogue."""
    base = tmp_path_factory.mktemp("jupyterlab")
    root, settings = base / "root", base / "settings"
    root.mkdir()
    for name, value in LAB_SETTINGS.items():
        (settings / name).parent.mkdir(parents=True, exist_ok=True)
        (settings / name).write_text(json.dumps(value))
    port, token = _free_port(), secrets.token_hex(16)
    env = {**os.environ, "GENLAB_ROOT": str(ROOT), "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1"),
           "MPLBACKEND": "module://matplotlib_inline.backend_inline",
           "JUPYTERLAB_SETTINGS_DIR": str(settings), "JUPYTERLAB_WORKSPACES_DIR": str(base / "workspaces"),
           "JUPYTER_RUNTIME_DIR": str(base / "runtime")}
    lab = JupyterLab(f"http://127.0.0.1:{port}", token, root)
    with jupyter_server(["lab", f"--ServerApp.port={port}", f"--IdentityProvider.token={token}",
                         f"--ServerApp.root_dir={root}"], lambda: lab.api("GET", "status"), base / "server.log",
                        env=env):
        yield lab


@contextlib.contextmanager
def jupyter_server(args: list[str], ready, log_path: Path, **popen):
    """``jupyter <args>`` on loopback in a session of its own, logging to ``log_path``: yields once ``ready()``
    stops raising OSError (90 s at most), then stops it (SIGTERM, so it shuts its kernels down; SIGKILL to the
    whole session after 30 s). Shared by JupyterLab here and formgrader in tests/test_term.py."""
    log = log_path.open("w")
    server = subprocess.Popen([sys.executable, "-m", "jupyter", *args, "--no-browser", "--ServerApp.ip=127.0.0.1",
                               "--ServerApp.port_retries=0", "--ServerApp.allow_root=True"],
                              stdout=log, stderr=subprocess.STDOUT, start_new_session=True, **popen)
    deadline = time.monotonic() + 90
    try:
        while True:
            try:
                ready()
                break
            except OSError:
                if server.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"jupyter {args[0]} did not start: {log_path.read_text()[-3000:]}")
                time.sleep(0.5)
        yield server
    finally:
        server.terminate()
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, 9)  # its own session: the server and the kernels it started
            server.wait()
        log.close()


def shared_folder(tmp_path_factory, name: str) -> Path:
    """A folder that every pytest-xdist worker of this run sees under the same name (the workers' base
    temporary folders share a parent); without xdist, one in this run's base folder."""
    base = tmp_path_factory.getbasetemp()
    return (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / name


@pytest.fixture(scope="session")
def browser():
    """Debian's Chromium driven by Playwright, one per pytest worker for every test that needs a browser
    (tests/test_browser.py, tests/test_bundle.py): Playwright's sync API refuses a second instance while one is
    running in the same process, which two module-level fixtures on one worker did."""
    import test_browser as web

    reason = web._missing_browser()
    if reason:
        if web.REQUIRED:
            pytest.fail(f"browser tests must run in CI: {reason}")
        pytest.skip(reason)
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        chromium = p.chromium.launch(executable_path=web.CHROMIUM)
        yield chromium
        chromium.close()


@pytest.fixture(scope="session")
def graded_class(tmp_path_factory) -> Path:
    """A few Lab 1 samples and the students of tests/class_students.py graded through the command line
    (``genlab grade``), and the class report written from the output: what tests/test_class_report.py and
    tests/test_clusters.py check and tests/test_browser.py opens in the browser.
    Graded once per run, whichever worker asks first (a file lock): the two files often run on different
    pytest workers, which each graded the class again."""
    from filelock import FileLock

    base = shared_folder(tmp_path_factory, "graded-class")
    submissions, out = base / "submitted", base / "out"
    with FileLock(str(base) + ".lock"):
        if (base / "done").exists():
            return out
        shutil.rmtree(base, ignore_errors=True)
        for student in GRADED:
            shutil.copytree(ROOT / "autograder" / "samples" / student / "lab1_vae", submissions / student / "lab1_vae")
        # a student name a page must escape, not run
        shutil.copytree(ROOT / "autograder" / "samples" / "reference" / "lab1_vae",
                        submissions / "<img src=x onerror=alert(1)>" / "lab1_vae")
        # the class the report's clusters and similarity are tested on (tests/class_students.py): graded in
        # this same run, not one of their own
        import class_students

        class_students.write_all(ROOT, submissions)
        cmd = [sys.executable, "-m", "autograder.cli", "--root", str(ROOT), "grade", str(submissions), "--out",
               str(out), "--workers", "2", "--lab", "lab1_vae", "--cell-timeout", "60"]
        if shutil.which("bwrap") is None:
            cmd.append("--unsafe")  # these are the course's own samples; the sandbox has tests of its own
        done = grading_run.run(cmd, timeout=1200, cwd=ROOT)
        assert done.returncode == 0, done.stderr[-3000:]
        assert (out / "class-report.html").exists(), "genlab grade writes the class report"
        (base / "done").write_text("graded\n")
    return out


# -- where the time went (tests/phases.py) -------------------------------------------------------------------
_SESSION_START = time.time()


def pytest_terminal_summary(terminalreporter):
    reports = [r for kind in terminalreporter.stats.values() for r in kind
               if getattr(r, "when", None) in ("setup", "call", "teardown")]
    terminalreporter.section("time per phase")
    for line in phases.summary(reports, _SESSION_START):
        terminalreporter.write_line(line)


# -- the order the two workers take the files in ---------------------------------------------------------------
# `make test` runs pytest-xdist with --dist loadfile: a worker takes a whole file, and takes the next one when the
# file it runs has two tests left. By default xdist hands out the files with the most tests first, so the browser
# file (a few tests, about 400 s) came late and ran alone at the end (the CI run of bd78772: busy per worker
# 1181 s and 1281 s, wall 1295 s). With --no-loadscope-reorder (the Makefile) they go in this order: the files
# that take longest first, by their time in that run, so that the short ones fill both workers' ends.
LONGEST_FIRST = ["tests/test_grading.py", "tests/test_browser.py", "solutions/lab3_attention", "tests/test_term.py",
                 "solutions/lab2_diffusion", "solutions/lab4_lora", "tests/test_slurm.py", "tests/test_sharding.py",
                 "solutions/lab1_vae", "tests/test_platforms.py", "tests/test_audit.py", "tests/test_feedback_inert.py"]


def pytest_collection_modifyitems(config, items):
    def rank(item) -> int:
        return next((i for i, prefix in enumerate(LONGEST_FIRST) if item.nodeid.startswith(prefix)),
                    len(LONGEST_FIRST))

    items.sort(key=rank)   # stable: the tests of a file keep their order, and the other files theirs
