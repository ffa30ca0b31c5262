"""Where courses actually grade (issue 45): Gradescope's autograder and PrairieLearn's external grader, tested here
end to end without the platforms.

Each grading test lays out the platform's directory contract in a fresh root (``GENLAB_PLATFORM_ROOT``, a folder
of /tmp that any user may cross, as ``/`` is): Gradescope's ``autograder/{source,submission,results}`` with
``autograder.zip`` extracted into ``source`` and ``run_autograder`` copied beside it, or PrairieLearn's
``grade/{student,data}`` with the image's tree at ``opt/genlab-grader``. ``setup.sh`` is not run (it installs
Python and the pinned packages from the network): its already-installed equivalent is this test run's Python
(``GENLAB_PYTHON``). Then the platform's entry point grades a correct, a buggy and an attacking Lab 1 notebook,
and ``results.json`` is validated against a JSON Schema written from the platform's specification
(tests/platform_schemas/).

Container mode is forced (``GENLAB_WALL=container``) where bubblewrap works, as here. Where this test run's
Python lies in a folder no other user may enter (pyenv under /root, on a developer's machine), the entry point
runs in a mount namespace of its own where that folder alone is reachable, as the Python of a platform's image
is (setup.sh installs it in /usr and /opt/genlab-venv); nothing else changes.
"""
from __future__ import annotations

import csv
import json
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

import jsonschema
import nbformat
import pytest

import grading_run
from autograder.core.results import Result, Status
from autograder.grading.pipeline import Lab
from autograder.platforms import common, gradescope, prairielearn
from autograder.wall import container, sandbox
from genlab.catalog import bug as catalogued_bug
from genlab.testing.runner import Outcome

ROOT = Path(__file__).resolve().parents[1]
LAB = "lab1_vae"
SAMPLES = ROOT / "autograder" / "samples"
SCHEMAS = Path(__file__).resolve().parent / "platform_schemas"
as_root = pytest.mark.skipif(os.geteuid() != 0, reason="container mode needs a grader running as root")


def validate(data: dict, platform: str) -> None:
    schema = json.loads((SCHEMAS / f"{platform}-results.schema.json").read_text())
    jsonschema.Draft202012Validator(schema).validate(data)


# -- results.json from genlab's own results, without grading ---------------------------------------------------
def graded(settings=common.PlatformSettings(), wall=container.Wall(container.BUBBLEWRAP)) -> common.Graded:
    """A Lab 1 result as grading concludes one: every test passed but the KL's, which failed with the bug
    named, and the hidden performance test, which timed out; the reference sample as the graded notebook."""
    lab = Lab.load(ROOT, LAB)
    hidden = common.hidden_tests(lab)
    kl = catalogued_bug(LAB, "kl_sign_flipped")
    outcomes = []
    for test in lab.tests:
        if test == "gaussian_kl_value":
            outcomes.append(Outcome(test, Status.FAILED, "got -1.5, expected 1.5", 0.1, [kl]))
        elif test == "reparameterize_performance":
            outcomes.append(Outcome(test, Status.TIMEOUT, "over the time limit", 60.0))
        else:
            outcomes.append(Outcome(test, Status.PASSED, "", 0.1))
    nb = nbformat.read(str(SAMPLES / "reference" / LAB / f"{LAB}.ipynb"), as_version=4)
    result = Result("student", LAB, outcomes, lab.points, notebook=nb, seconds=9.0)
    return common.Graded(LAB, wall, settings, {t: {"function": spec["function"] or t, "hidden": t in hidden}
                                               for t, spec in lab.tests.items()}, result, 12.4)


def test_a_hidden_test_is_one_whose_cell_students_see_empty():
    assert common.hidden_tests(Lab.load(ROOT, LAB)) == {"reparameterize_performance"}


def test_gradescope_results_follow_the_specification_field_by_field():
    g = graded()
    data = gradescope.results_json(g)
    validate(data, "gradescope")
    result = g.result
    assert data["score"] == result.total == result.max_total - 3   # gaussian_kl_value (2) and the hidden test (1)
    assert data["execution_time"] == 12 and data["output_format"] == "html"
    assert data["stdout_visibility"] == "hidden" and "leaderboard" not in data and "visibility" not in data
    assert [t["name"] for t in data["tests"]] == [o.test for o in result.outcomes]
    tests = {t["name"]: t for t in data["tests"]}
    kl, perf, shape = tests["gaussian_kl_value"], tests["reparameterize_performance"], tests["reparameterize_shape"]
    assert (kl["score"], kl["max_score"], kl["status"], kl["visibility"]) == (0, 2, "failed", "visible")
    assert "kl_sign_flipped" in kl["output"] and "What to try:" in kl["output"] and "got -1.5" in kl["output"]
    assert kl["tags"] == ["gaussian_kl"] and kl["extra_data"] == {"status": "failed", "diagnosis": ["kl_sign_flipped"]}
    assert (perf["visibility"], perf["status"], perf["extra_data"]["status"]) == ("after_due_date", "failed", "timeout")
    assert (shape["score"], shape["status"], shape["visibility"]) == (1, "passed", "visible")
    # the summary: the feedback page's, of the tests a student sees now, after the wall that graded
    output = data["output"]
    assert output.index("bubblewrap sandbox") < output.index("Feedback: lab1_vae")
    assert f"Score: {result.total:g} / {result.max_total - 1:g} autograded" in output
    assert "What to fix first" in output and "the KL has the wrong sign" in output
    assert "reparameterize_performance" not in output and "1 hidden test (1 point) and your total" in output
    assert "<script" not in output


def test_gradescope_shows_hidden_tests_as_course_toml_says():
    data = gradescope.results_json(graded(common.PlatformSettings(hidden_tests_visibility="visible")))
    validate(data, "gradescope")
    assert {t["visibility"] for t in data["tests"]} == {"visible"}
    assert "reparameterize_performance" in data["output"] and "hidden test" not in data["output"]
    data = gradescope.results_json(graded(common.PlatformSettings(hidden_tests_visibility="after_published")))
    assert {t["name"] for t in data["tests"] if t["visibility"] == "after_published"} == {"reparameterize_performance"}


def test_prairielearn_results_follow_the_specification():
    g = graded(wall=container.Wall(container.CONTAINER, "chosen by GENLAB_WALL=container"))
    data = prairielearn.results_json(g)
    validate(data, "prairielearn")
    assert set(data) == {"gradable", "score", "message", "output", "tests"}
    assert data["gradable"] is True and data["score"] == pytest.approx(g.result.total / g.result.max_total)
    assert data["message"].startswith("Graded in container mode") and "Score: 37 / 40 autograded" in data["message"]
    assert all(set(t) == {"name", "description", "points", "max_points", "message", "output"} for t in data["tests"])
    tests = {t["name"]: t for t in data["tests"]}
    assert tests["gaussian_kl_value"]["message"] == "failed: the KL has the wrong sign (kl_sign_flipped)"
    assert tests["reparameterize_performance"]["description"] == "reparameterize (a hidden test)"
    # the format carries no visibility: every test, and the summary of every test, is shown
    assert "reparameterize_performance" in data["output"] and "What to fix first" in data["output"]
    assert "<" not in data["output"].replace("<=", "")   # plain text
    assert len(json.dumps(data).encode()) <= prairielearn.MAX_RESULTS_BYTES


def test_nothing_graded_is_said_in_both_formats():
    refused = container.Wall(container.CONTAINER, "bubblewrap cannot work here: no userns",
                             refused="course.toml forbids container mode")
    g = common.Graded(LAB, refused, common.PlatformSettings())
    data = gradescope.results_json(g)
    validate(data, "gradescope")
    assert data["score"] == 0 and "tests" not in data and "Not graded: course.toml forbids" in data["output"]
    data = prairielearn.results_json(g)
    validate(data, "prairielearn")
    assert data["gradable"] is False and "course.toml forbids" in data["message"]


def test_platform_settings_and_the_wall_chosen():
    settings = common.PlatformSettings.load(ROOT / "autograder" / "course.toml")
    assert settings == common.PlatformSettings(allow_container_mode=True, hidden_tests_visibility="after_due_date")
    with pytest.raises(ValueError, match="hidden_tests_visibility"):
        common.PlatformSettings.load(_toml('[platform]\nhidden_tests_visibility = "later"\n'))
    with pytest.raises(ValueError, match="unknown"):
        common.PlatformSettings.load(_toml("[platform]\nallow_container = true\n"))
    forbidden = container.choose(allow_container=False, forced="container")
    assert forbidden.refused.startswith("course.toml forbids container mode")
    assert container.choose(True, "sideways").refused
    if not sandbox.probe():
        assert container.choose(True) == container.Wall(container.BUBBLEWRAP)
        assert container.choose(False) == container.Wall(container.BUBBLEWRAP)
    if os.geteuid() == 0:
        wall = container.choose(True, "container")
        assert (wall.mode, wall.refused) == (container.CONTAINER, "")
        assert "Graded in container mode (chosen by GENLAB_WALL=container)" in wall.describe()


def test_the_grader_never_closes_a_folder_that_is_no_platforms_tree(tmp_path):
    course, submission = tmp_path / "course", tmp_path / "submission"
    for folder in (course / "autograder", submission):
        folder.mkdir(parents=True)
    course.chmod(0o755)
    g = common.grade_submission(LAB, submission, tmp_path / "results", course=course)
    assert g.result is None and "no platform's grader tree" in g.failure
    assert g.reason == "Not graded: the autograder failed."
    assert course.stat().st_mode & 0o777 == 0o755 and submission.stat().st_mode & 0o777 == 0o755
    assert gradescope.results_json(g)["score"] == 0 and prairielearn.results_json(g)["gradable"] is False


def _toml(text: str) -> Path:
    path = Path(tempfile.mkdtemp()) / "course.toml"
    path.write_text(text)
    return path


# -- the platforms' directory contracts, end to end --------------------------------------------------------------
@pytest.fixture(scope="module")
def built(tmp_path_factory) -> dict[str, Path]:
    """``genlab release --gradescope`` and ``--prairielearn`` for Lab 1, through the command line."""
    out = tmp_path_factory.mktemp("platforms")
    done = grading_run.run([sys.executable, "-m", "autograder.cli", "--root", str(ROOT), "release",
                            "--gradescope", LAB, str(out / "gs"), "--prairielearn", LAB, str(out / "pl")],
                           timeout=900, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-3000:]
    return {"gradescope": out / "gs" / "autograder.zip", "prairielearn": out / "pl"}


@pytest.mark.slow
def test_the_zip_and_the_image_tree_hold_what_the_platforms_expect(built):
    with zipfile.ZipFile(built["gradescope"]) as archive:
        names = archive.namelist()
        modes = {i.filename: i.external_attr >> 16 for i in archive.infolist()}
        entry = archive.read("run_autograder").decode()
        for script in ("setup.sh", "run_autograder"):
            assert subprocess.run(["bash", "-n"], input=archive.read(script)).returncode == 0, script
    assert {"setup.sh", "run_autograder"} <= set(names)           # at the root of the archive
    assert modes["setup.sh"] & 0o111 and modes["run_autograder"] & 0o111
    assert f"solutions/{LAB}/{LAB}.ipynb" in names and f"labs/{LAB}/{LAB}.ipynb" in names
    assert "requirements.txt" in names and any(n.startswith("wheels/genlab-") for n in names)
    assert not any(n.startswith(("autograder/samples/", "solutions/lab2")) or "__pycache__" in n for n in names)
    assert f"-m autograder.platforms.gradescope --lab {LAB}" in entry
    image = built["prairielearn"] / "image"
    assert (image / "run_prairielearn").stat().st_mode & 0o111 and (image / "Dockerfile").is_file()
    info = json.loads((built["prairielearn"] / "question" / "info.json").read_text())
    assert info["externalGradingOptions"]["entrypoint"] == f"{prairielearn.IMAGE_DIR}/run_prairielearn"
    assert info["externalGradingOptions"]["timeout"] <= 600 and info["gradingMethod"] == "External"
    assert f'file-names="{LAB}.ipynb"' in (built["prairielearn"] / "question" / "question.html").read_text()
    for script in ("setup.sh", "run_prairielearn"):
        assert subprocess.run(["bash", "-n", str(image / script)]).returncode == 0


ATTACK = r'''import json, os, subprocess
_attack_done = False
subprocess.Popen(['sleep', '{nonce}'], start_new_session=True)   # outlives the kernel, unless killed


def reparameterize(mu, logvar, eps=None):
    if not _attack_done:
        raise RuntimeError('the attack did not run to its end')
    return mu   # wrong, unless the reference below could be read


for _course in {courses!r}:
    try:
        os.listdir(_course)
        for _c in json.load(open(os.path.join(_course, 'sol' + 'utions', 'lab1_vae', 'lab1_vae.ipynb')))['cells']:
            if 'def reparameterize' in ''.join(_c['source']):
                exec(''.join(_c['source']), globals())
    except OSError:
        pass
for _results in {results!r}:
    for _name in ('results.json', 'grades.csv', 'forged-{nonce}'):
        try:
            with open(os.path.join(_results, _name), 'w') as _f:
                _f.write(json.dumps({{'score': 999, 'gradable': True, 'tests': []}}))
        except OSError:
            pass
_attack_done = True
'''


def attacking_notebook(root: Path, nonce: str, courses=None, results=None) -> nbformat.NotebookNode:
    """The reference, but ``reparameterize`` returns ``mu`` unless the reference could be read from the
    course folder (by default the platforms' under ``root``); the cell also tries to write the results file
    into each folder of ``results`` and leaves a process running."""
    courses = courses or [str(root / "autograder" / "source"), str(root / "opt" / "genlab-grader")]
    results = results or [str(root / "autograder" / "results"), str(root / "grade" / "results")]
    nb = nbformat.read(str(SAMPLES / "reference" / LAB / f"{LAB}.ipynb"), as_version=4)
    for cell in nb.cells:
        if cell.get("metadata", {}).get("nbgrader", {}).get("grade_id") == "reparameterize":
            cell.source = ATTACK.format(courses=[str(c) for c in courses], results=[str(r) for r in results],
                                        nonce=nonce)
    return nb


def _submission(kind: str, root: Path, nonce: str) -> nbformat.NotebookNode:
    if kind == "attack":
        return attacking_notebook(root, nonce)
    return nbformat.read(str(SAMPLES / kind / LAB / f"{LAB}.ipynb"), as_version=4)


def _entry(command: list[str]) -> list[str]:
    """``command``, in a mount namespace of its own where this Python's folders are reachable by any user (as in
    a platform's image) if they are not already: the base Python (pyenv under /root on a developer's machine)
    and the venv (a fresh clone in a ``mktemp -d`` folder, mode 700, in CI). Each folder no other user may enter
    gets a tmpfs holding only the child on the way to that Python."""
    staged: dict[Path, str] = {}
    for python in (Path(sys.base_prefix).resolve(), Path(sys.prefix).resolve()):
        for folder in (*reversed(python.parents), python):
            if not folder.stat().st_mode & 0o001:
                staged.setdefault(folder, python.relative_to(folder).parts[0])
                break
    if not staged:
        return command
    pairs = list(staged.items())
    script = "set -e; mount -t tmpfs -o mode=755,size=1m genlab-stage /mnt; "
    script += "".join(f'mkdir /mnt/{i}; mount --bind "{blocked / child}" /mnt/{i}; '
                      for i, (blocked, child) in enumerate(pairs))
    script += "".join(f'mount -t tmpfs -o mode=755,size=1m genlab-test "{blocked}"; mkdir "{blocked / child}"; '
                      f'mount --move /mnt/{i} "{blocked / child}"; ' for i, (blocked, child) in enumerate(pairs))
    return ["unshare", "--mount", "--propagation", "private", "/bin/sh", "-c", script + 'exec "$@"', "genlab-test",
            *command]


def run_platform(platform: str, built: dict[str, Path], kind: str, wall: str = "", course_toml: str = "") -> dict:
    """Lays out ``platform``'s folders in a fresh root, hands in ``kind`` (a sample's name, or "attack"), runs
    the entry point, and returns what the test needs to look at."""
    root = Path(tempfile.mkdtemp(prefix=f"genlab-{platform}-", dir="/tmp"))
    root.chmod(0o755)
    nonce = str(10**8 + secrets.randbelow(10**8))
    try:
        if platform == "gradescope":
            base = root / "autograder"
            course, submission, results = base / "source", base / "submission", base / "results"
            for folder in (course, submission, results):
                folder.mkdir(parents=True)
            with zipfile.ZipFile(built["gradescope"]) as archive:
                archive.extractall(course)
                for info in archive.infolist():   # extractall keeps no modes: the executable bits, as unzip does
                    if (info.external_attr >> 16) & 0o111:
                        (course / info.filename).chmod(0o755)
            shutil.copy(course / "run_autograder", base / "run_autograder")   # as Gradescope's image build does
            entry, cwd, notebook = base / "run_autograder", base, submission / f"{LAB}.ipynb"
        else:
            course = root / prairielearn.IMAGE_DIR.lstrip("/")
            shutil.copytree(built["prairielearn"] / "image", course)
            grade = root / "grade"
            for folder in ("student", "data"):
                (grade / folder).mkdir(parents=True)
            (grade / "data" / "data.json").write_text(json.dumps({"params": {}, "correct_answers": {}}))
            results = grade / "results"   # PrairieLearn does not create it: the entry point must
            entry, cwd, notebook = course / "run_prairielearn", grade, grade / "student" / f"{LAB}.ipynb"
        nbformat.write(_submission(kind, root, nonce), str(notebook))
        if course_toml:
            (course / "autograder" / "course.toml").write_text(course_toml)
        solution = course / "solutions" / LAB / f"{LAB}.ipynb"
        # The walls must come from the grader, not from these folders: before the run, any user reads the
        # reference here (as in a platform's container, where the zip is extracted world-readable)
        assert solution.stat().st_mode & 0o004 and all(p.stat().st_mode & 0o001 for p in solution.parents
                                                       if p.is_relative_to(root))
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LANG": "C.UTF-8", "OMP_NUM_THREADS": "1",
               common.ROOT_ENV: str(root), "GENLAB_PYTHON": sys.executable}
        if wall:
            env[common.WALL_ENV] = wall
        done = grading_run.run(_entry([str(entry)]), timeout=600, cwd=cwd, env=env)
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
        data = json.loads((results / "results.json").read_text())
        validate(data, platform)
        left = [int(pid) for pid in subprocess.run(["pgrep", "-f", f"sleep {nonce}"], capture_output=True,
                                                   text=True).stdout.split()]
        for pid in left:   # this test's own process, by its id: none, unless the grader failed to kill it
            os.kill(pid, 9)
        return {"data": data, "stdout": done.stdout, "results": sorted(p.name for p in results.iterdir()),
                "left": left, "modes": {"course": course.stat().st_mode & 0o777,
                                        "results": results.stat().st_mode & 0o777}}
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _tests(data: dict, platform: str) -> dict[str, tuple[float, float]]:
    if platform == "gradescope":
        return {t["name"]: (t["score"], t["max_score"]) for t in data["tests"]}
    return {t["name"]: (t["points"], t["max_points"]) for t in data["tests"]}


CASES = [("gradescope", "reference", ""), ("gradescope", "bug_kl_sign_flipped", "container"),
         ("gradescope", "attack", "container"), ("prairielearn", "reference", "container"),
         ("prairielearn", "bug_kl_sign_flipped", ""), ("prairielearn", "attack", "container")]


@pytest.mark.slow
@pytest.mark.parametrize("platform,kind,wall", CASES, ids=[f"{p}-{k}-{w or 'chosen'}" for p, k, w in CASES])
def test_the_entry_point_grades_in_the_platforms_layout(built, platform, kind, wall):
    if wall == "container" and os.geteuid() != 0:
        pytest.skip("container mode needs a grader running as root")
    if not wall and shutil.which("bwrap") is None:
        pytest.skip("no bubblewrap here: apt-get install bubblewrap")
    # The attack tests the platform's walls: it is graded without the policy for graded code ([policy] enforce =
    # false in the course's course.toml), which would not run its cell (it imports os and subprocess, calls exec).
    course = (ROOT / "autograder" / "course.toml").read_text()
    course_toml = course.replace("\nenforce = true", "\nenforce = false", 1) if kind == "attack" else ""
    run = run_platform(platform, built, kind, wall, course_toml=course_toml)
    data, tests = run["data"], _tests(run["data"], platform)
    mode = "container mode" if wall == "container" else "the bubblewrap sandbox"
    assert f"genlab: Graded in {mode}" in run["stdout"]
    assert f"Graded in {mode}" in (data["output"] if platform == "gradescope" else data["message"])
    assert len(tests) == len(Lab.load(ROOT, LAB).tests)
    got = sum(s for s, _ in tests.values())
    if kind == "reference":
        assert all(s == m for s, m in tests.values()), tests
    elif kind == "bug_kl_sign_flipped":
        assert tests["gaussian_kl_value"][0] == 0 and tests["reparameterize_value"][0] == 2
        assert "kl_sign_flipped" in json.dumps(data)
    else:  # the attack ran to its end, read nothing of the course, wrote nothing of the results
        assert tests["reparameterize_value"][0] == 0 and tests["gaussian_kl_value"][0] == 2
        statuses = {t["name"]: t["extra_data"]["status"] for t in data["tests"]} if platform == "gradescope" \
            else {t["name"]: t["message"].split(":")[0] for t in data["tests"]}
        assert statuses["reparameterize_value"] == "failed", "raises unless the attack's cell ran to its end"
        assert run["results"] == ["results.json"] and data.get("score") != 999
        assert run["left"] == [], "a process the kernel started outlived the grading"
        assert run["modes"] == {"course": 0o700, "results": 0o700}
    if platform == "gradescope":
        assert data["score"] == got
    else:
        assert data["gradable"] and data["score"] == pytest.approx(got / sum(m for _, m in tests.values()))


@pytest.mark.slow
@as_root
def test_a_course_that_forbids_container_mode_is_not_graded_in_it(built):
    toml = (ROOT / "autograder" / "course.toml").read_text().replace(
        "allow_container_mode = true", "allow_container_mode = false")
    assert "allow_container_mode = false" in toml
    run = run_platform("gradescope", built, "reference", "container", toml)
    data = run["data"]
    assert "Not graded: course.toml forbids container mode" in run["stdout"]
    assert data["score"] == 0 and "tests" not in data and "course.toml forbids container mode" in data["output"]
    assert "Nothing was marked wrong in your code" in data["output"]


# -- genlab grade in container mode ------------------------------------------------------------------------------
@pytest.mark.slow
@as_root
def test_genlab_grade_in_container_mode_says_so_and_holds():
    """``genlab grade`` where bubblewrap may not grade (forced here, as in a container without namespaces): the
    output says container mode graded; the reference and a bug get their grades; an attack that reads the
    course's reference solutions and writes the grades earns nothing and writes nothing; and the course and
    submissions' modes are as they were afterwards."""
    base = Path(tempfile.mkdtemp(prefix="genlab-grade-", dir="/tmp"))   # a folder any user may cross, as / is
    base.chmod(0o755)
    try:
        _grade_in_container_mode(base)
    finally:
        shutil.rmtree(base, ignore_errors=True)


def _grade_in_container_mode(base: Path) -> None:
    subs, out, nonce = base / "submissions", base / "out", str(10**8 + secrets.randbelow(10**8))
    for kind in ("reference", "bug_kl_sign_flipped"):
        shutil.copytree(SAMPLES / kind / LAB, subs / kind / LAB)
    (subs / "attack" / LAB).mkdir(parents=True)
    nbformat.write(attacking_notebook(base, nonce, courses=[str(ROOT)], results=[str(out), str(subs)]),
                   str(subs / "attack" / LAB / f"{LAB}.ipynb"))
    modes = {p: p.stat().st_mode for p in (ROOT / "solutions", ROOT / "autograder", ROOT / "tests", subs)}
    env = {**os.environ, common.WALL_ENV: "container", "OMP_NUM_THREADS": "1"}
    done = grading_run.run(_entry([sys.executable, "-m", "autograder.cli", "--root", str(ROOT), "grade", str(subs),
                                   "--out", str(out), "--lab", LAB, "--quiet", "--workers", "2",
                                   # the attack tests the container's walls; the policy would not run its cell
                                   "--without-policy", "attack"]),
                           timeout=900, cwd=ROOT, env=env)
    left = [int(pid) for pid in subprocess.run(["pgrep", "-f", f"sleep {nonce}"], capture_output=True,
                                               text=True).stdout.split()]
    for pid in left:   # this test's own process, by its id: none, unless the grader failed to kill it
        os.kill(pid, 9)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    assert "genlab grade: Graded in container mode (chosen by GENLAB_WALL=container)" in done.stderr
    with open(out / "grades.csv") as f:
        rows = list(csv.DictReader(f))
    score = {(r["student"], r["test"]): float(r["score"]) for r in rows}
    status = {(r["student"], r["test"]): r["status"] for r in rows}
    tests = Lab.load(ROOT, LAB).tests
    results = {r["student"]: r for r in json.loads((out / "results.json").read_text())}
    assert all(status[("reference", t)] == "passed" for t in tests), [
        (o["test"], o["status"], o["message"]) for o in results["reference"]["tests"] if o["status"] != "passed"]
    assert score[("bug_kl_sign_flipped", "gaussian_kl_value")] == 0
    assert score[("attack", "reparameterize_value")] == 0 and status[("attack", "reparameterize_value")] == "failed"
    assert score[("attack", "gaussian_kl_value")] == 2
    assert not list(out.glob("forged-*")) and not list(subs.glob("forged-*")) and left == []
    assert {p: p.stat().st_mode for p in modes} == modes
