"""Issue 28: a TA hand-grades in nbgrader's formgrader, in a real browser, on what `genlab grade` wrote.

One Lab 1 notebook (the reference sample) is graded; formgrader (nbgrader's Jupyter server extension) is
started on the run's output folder with the nbgrader_config.py `genlab grade` wrote there (the folder is already nbgrader's
layout: autograded/<student>/<lab>/, gradebook.db); Chromium, driven by Playwright, opens the submission,
gives a written answer a score and a comment as a TA would (type, then leave the box: formgrader saves on
change), and `genlab feedback` redraws the student's page with the hand-graded points and the comment.
"""
from __future__ import annotations

import os
import secrets
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from conftest import _free_port

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.slow

@pytest.fixture
def graded(tmp_path):
    import shutil

    from autograder import sandbox
    from autograder.grade import grade_all

    if sandbox.probe():
        pytest.skip(f"no sandbox here: {sandbox.probe()}")
    subs, out = tmp_path / "submitted", tmp_path / "out"
    shutil.copytree(ROOT / "autograder" / "samples" / "reference" / "lab1_vae", subs / "ta_student" / "lab1_vae")
    [result] = grade_all(ROOT, subs, out, labs=["lab1_vae"], progress=False)
    assert result.total == result.max_total, result.marks()
    return subs, out


@pytest.fixture
def formgrader(graded):
    _, out = graded
    # genlab grade wrote formgrader's configuration: the course's root is the run's folder, its gradebook the run's
    config = (out / "nbgrader_config.py").read_text()
    assert f"c.CourseDirectory.root = {str(out)!r}" in config and "course_id = 'genlab'" in config
    assert f"c.CourseDirectory.db_url = 'sqlite:///{out}/gradebook.db'" in config
    port, token = _free_port(), secrets.token_hex(16)
    log = (out.parent / "formgrader.log").open("w")
    server = subprocess.Popen(
        [sys.executable, "-m", "jupyter", "server", "--no-browser", "--ServerApp.ip=127.0.0.1",
         f"--ServerApp.port={port}", "--ServerApp.port_retries=0", f"--IdentityProvider.token={token}",
         f"--ServerApp.root_dir={out}", "--ServerApp.allow_root=True",
         "--ServerApp.jpserver_extensions={'nbgrader.server_extensions.formgrader': True}"],
        cwd=out, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
        env={**os.environ, "JUPYTER_RUNTIME_DIR": str(out.parent / "runtime")})
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 90
    while True:
        try:
            urllib.request.urlopen(f"{url}/api/status?token={token}", timeout=5).read()
            break
        except OSError:
            if server.poll() is not None or time.monotonic() > deadline:
                server.kill()
                raise RuntimeError(f"formgrader did not start: {(out.parent / 'formgrader.log').read_text()[-3000:]}")
            time.sleep(0.5)
    try:
        yield url, token
    finally:
        server.terminate()
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, 9)
            server.wait()
        log.close()


def test_a_ta_grades_a_written_answer_in_formgrader_and_the_feedback_shows_it(graded, formgrader, browser):
    from nbgrader.api import Gradebook

    from autograder.cli import main

    subs, out = graded
    url, token = formgrader
    db = f"sqlite:///{out / 'gradebook.db'}"
    with Gradebook(db, "genlab") as gb:
        submission = gb.find_submission_notebook("lab1_vae", "lab1_vae", "ta_student").id
    comment = "Right idea; the last step drops a factor 1/2."
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    page.set_default_timeout(60_000)
    try:
        page.goto(f"{url}/?token={token}")    # logs in: the token becomes the session's cookie
        page.goto(f"{url}/formgrader/submissions/{submission}/")
        score = page.locator("input.score#derivation_kl_general")
        score.fill("2.5")
        score.press("Tab")
        box = page.locator("textarea#derivation_kl_general-comment")
        box.click()
        box.fill(comment)
        page.locator("body").click(position={"x": 5, "y": 300})   # leaving the box saves it
        deadline = time.monotonic() + 30
        while True:
            with Gradebook(db, "genlab") as gb:
                given = gb.find_grade("derivation_kl_general", "lab1_vae", "lab1_vae", "ta_student").manual_score
                said = gb.find_comment("derivation_kl_general", "lab1_vae", "lab1_vae", "ta_student").manual_comment
            if (given, said) == (2.5, comment) or time.monotonic() > deadline:
                break
            time.sleep(0.5)
    finally:
        page.close()
    assert (given, said) == (2.5, comment), "formgrader did not save the score and the comment"
    assert main(["feedback", str(out), "--submissions", str(subs)]) == 0
    html = (out / "feedback" / "ta_student" / "lab1_vae" / "lab1_vae.html").read_text()
    assert comment in html   # the TA's comment, on the student's page
    import re
    line = re.search(r"Score: [^<]*", html)[0]
    # 3 of the 5 hand-graded points are graded now (the 2.5 given counts once the rest is graded too)
    assert "2 points of hand-graded answers still to be graded" in line, line
