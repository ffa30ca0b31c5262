"""Grading one submission inside a platform's grading container, the same way for every platform.

Where courses actually grade: Gradescope's autograder (:mod:`autograder.platforms.gradescope`) and PrairieLearn's
external grader (:mod:`autograder.platforms.prairielearn`) start a fresh container per submission, run an entry
point, and read a results file afterwards. This module is what both entry points do between the two:

1. read the course's ``[platform]`` and ``[limits]`` (``autograder/course.toml``);
2. choose the wall (:func:`autograder.wall.container.choose`: bubblewrap where it works, else container mode
   if the course allows it; ``GENLAB_WALL`` forces either) and say which on standard output;
3. make the grader's files its own (the course, the submission and results folders, whatever else the
   platform put beside them) and, in container mode, check as the kernel user that it can reach none of them;
4. grade the notebook with genlab's own pipeline (:func:`autograder.course.grade.grade_one`), one kernel and
   one reference kernel, as ``genlab grade`` does;
5. stop every kernel and kill whatever the kernel user left running (:func:`autograder.wall.container.sweep`);
   only then may the caller write the results file (:func:`write_results`, atomically).

The summary a student reads is the feedback page's (:func:`autograder.course.feedback.summary`), drawn here as
HTML (:func:`summary_html`) or plain text (:func:`summary_text`) for what each platform can show.

Platform pages followed (cited again in each platform's module):
- Gradescope, "Autograder Specifications": https://gradescope-autograders.readthedocs.io/en/latest/specs/
- Gradescope, "Code Autograder Best Practices" (run student code as a non-root user, ``chmod o=`` the source and
  results folders): https://gradescope-autograders.readthedocs.io/en/latest/best_practices/
- PrairieLearn, "External Grading": https://prairielearn.readthedocs.io/en/latest/externalGrading/
"""
from __future__ import annotations

import dataclasses
import html
import json
import os
import re
import shutil
import tempfile
import time
import tomllib
import traceback
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path

from autograder.core.limits import Limits
from autograder.core.results import Result, Status
from autograder.core.sanitize import clean_html
from autograder.course.feedback import score_line, summary
from autograder.course.grade import Run, close_worker, grade_one
from autograder.grading.pipeline import Lab
from autograder.grading.submissions import Found, locate, refusal
from autograder.wall import container
from autograder.wall.container import Wall
from autograder.wall.sandbox import SandboxConfig, kernel_account
from genlab.testing.notebook import grade_id

COURSE = Path(__file__).resolve().parents[2]   # the course the grader runs from: autograder/ lies in it
ROOT_ENV = "GENLAB_PLATFORM_ROOT"   # prefixes the platform's paths (/autograder, /grade); tests set it
WALL_ENV = container.WALL_ENV       # "bubblewrap" or "container": force a wall (tests force container mode)
STUDENT = "student"                 # a platform grades one submission: its Result's student
VISIBILITIES = ("hidden", "after_due_date", "after_published", "visible")   # Gradescope's, for hidden tests


@dataclass(frozen=True)
class PlatformSettings:
    """``[platform]`` in ``autograder/course.toml``."""

    allow_container_mode: bool = True
    hidden_tests_visibility: str = "after_due_date"

    @classmethod
    def load(cls, course_toml: Path) -> "PlatformSettings":
        given = tomllib.loads(Path(course_toml).read_text()).get("platform", {}) if Path(course_toml).exists() else {}
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(given) - names)
        if unknown:
            raise ValueError(f"unknown [platform] settings {unknown} in {course_toml}: they are {sorted(names)}")
        settings = cls(**given)
        if not isinstance(settings.allow_container_mode, bool):
            raise ValueError(f"[platform] allow_container_mode is true or false, not {settings.allow_container_mode!r}")
        if settings.hidden_tests_visibility not in VISIBILITIES:
            raise ValueError(f"[platform] hidden_tests_visibility is one of {VISIBILITIES}, "
                             f"not {settings.hidden_tests_visibility!r}")
        return settings


def not_a_platform_tree(entry: str) -> str:
    """'' when the grader runs from a tree ``genlab release --gradescope/--prairielearn`` wrote (its entry point
    ``entry`` beside ``autograder/``), else why not: grading there makes the course folder the grader's alone
    (mode 700), which a platform's fresh container wants and a course checkout does not."""
    if (COURSE / entry).is_file() and (COURSE / "setup.sh").is_file():
        return ""
    return (f"{COURSE} is not a platform's grader (no {entry} and setup.sh beside autograder/): write one with "
            "genlab release --gradescope or --prairielearn, and run its entry point")


def platform_root() -> Path:
    """Where the platform's folders lie: ``/``, or ``$GENLAB_PLATFORM_ROOT`` (a fresh folder, in the tests)."""
    return Path(os.environ.get(ROOT_ENV) or "/")


@dataclass
class Graded:
    """What grading one submission in a platform's container concluded."""

    lab: str
    wall: Wall
    settings: PlatformSettings
    tests: dict[str, dict] = field(default_factory=dict)   # test -> {"function", "hidden"}, in notebook order
    result: Result | None = None   # None: nothing was graded (see ``wall.refused`` or ``failure``)
    seconds: float = 0.0
    failure: str = ""              # the grader itself failed (its trace is on standard output)

    @property
    def reason(self) -> str:
        """Why nothing was graded, in words for the student ('' when graded)."""
        if self.wall.refused:
            return self.wall.describe()
        return "Not graded: the autograder failed." if self.failure else ""

    def shown_now(self) -> set[str]:
        """The tests a student may see at once: every test but the hidden ones, unless the course shows those
        too (``hidden_tests_visibility = "visible"``)."""
        shown = self.settings.hidden_tests_visibility == "visible"
        return {t for t, spec in self.tests.items() if shown or not spec["hidden"]}

    def view(self, tests: set[str]) -> Result:
        """The result with only ``tests``: what a summary of those shows, score line included."""
        r = self.result
        return dataclasses.replace(r, outcomes=[o for o in r.outcomes if o.test in tests],
                                   points={t: p for t, p in r.points.items() if t in tests})


def hidden_tests(lab: Lab) -> set[str]:
    """Tests whose cell students never see: in the released notebook the cell holds no code (its whole body is
    a hidden block). A test with a visible part is a visible test, as students can run that part."""
    def has_code(source: str) -> bool:
        return any(line.strip() and not line.strip().startswith("#") for line in source.splitlines())

    released = {grade_id(c): c.source for c in lab.release.cells if grade_id(c)}
    return {t for t in lab.tests if not has_code(released.get(t, ""))}


def find_notebook(folder: Path, lab: Lab, limits: Limits) -> Found:
    """The handed-in notebook: ``<lab>.ipynb`` at the top of the platform's submission folder, or else any
    notebook there that carries the lab's cells (with a note); links and oversized files are refused unread."""
    direct = folder / f"{lab.id}.ipynb"
    if direct.exists() or direct.is_symlink():
        status, why = refusal(direct, folder, limits.max_notebook_bytes)
        return Found(direct, refused=why, status=status)
    ids = {grade_id(c) for c in lab.release.cells} - {None}
    found = locate(folder, lab.id, ids, limits.max_notebook_bytes)
    found.note = found.note.replace(f"{lab.id}/{lab.id}.ipynb", f"{lab.id}.ipynb")
    return found


def grade_submission(lab_id: str, submission: Path, results: Path, lock_also=(), course: Path = COURSE) -> Graded:
    """Grades the notebook in ``submission`` (steps 1-5 of the module's docstring). ``results`` (created if
    missing) and ``lock_also`` are made the grader's too. Never raises for a student's notebook; a fault of the
    grader's own is returned as ``failure`` with its trace printed."""
    start = time.monotonic()
    course = Path(course).resolve()
    course_toml = course / "autograder" / "course.toml"
    results = Path(results)
    results.mkdir(parents=True, exist_ok=True)
    try:
        if not (course / "setup.sh").is_file():   # never make a course checkout the grader's alone (mode 700)
            raise RuntimeError(f"{course} is no platform's grader tree (no setup.sh): write one with genlab release "
                               "--gradescope or --prairielearn")
        settings = PlatformSettings.load(course_toml)
        limits = Limits.load(course_toml)
        lab = Lab.load(course, lab_id)
    except Exception as exc:  # noqa: BLE001 - a course.toml or a lab the grader cannot read: said in the results
        traceback.print_exc()
        return Graded(lab_id, Wall(container.BUBBLEWRAP), PlatformSettings(), failure=f"{type(exc).__name__}: {exc}",
                      seconds=time.monotonic() - start)
    hidden = hidden_tests(lab)
    graded = Graded(lab_id, Wall(container.BUBBLEWRAP), settings,
                    {t: {"function": spec["function"] or t, "hidden": t in hidden} for t, spec in lab.tests.items()})
    # The grader's files are its own before any kernel starts, whichever wall grades (bubblewrap shows none
    # of them anyway; container mode rests on this).
    locked = container.lock([course, Path(submission), results, *lock_also])
    scratch = container.scratch_folder()          # kernels' scratch folders: crossed, never listed
    private = Path(tempfile.mkdtemp(prefix="genlab-grader-"))   # the grader's own temporary files (mode 700)
    saved = os.environ.get("TMPDIR"), tempfile.tempdir
    os.environ["TMPDIR"] = tempfile.tempdir = str(private)      # for every library this process uses from now
    try:
        graded.wall = wall = container.choose(settings.allow_container_mode, os.environ.get(WALL_ENV, ""))
        in_container = not wall.refused and wall.mode == container.CONTAINER
        sandbox = SandboxConfig(memory_bytes=limits.memory_bytes, max_processes=limits.max_processes,
                                max_file_bytes=limits.max_file_bytes, hide=[*locked, private], mode=wall.mode,
                                uid=container.draw_uid() if in_container else None)
        if in_container:
            folders = [p for p in locked if p.is_dir()] + [private]
            solutions = (p for p in (course / "solutions" / lab_id).glob("*") if p.is_file())
            graded.wall = wall = container.hold(wall, sandbox, scratch, [*locked, private, scratch, *solutions],
                                                [*folders, scratch])
        print(f"genlab: {wall.describe()}", flush=True)
        if wall.refused:
            return graded
        run = Run(course, private / "out", scratch, limits, sandbox, prestart=False)
        run.out.mkdir()
        found = find_notebook(Path(submission), lab, limits)
        try:
            graded.result, _ = grade_one(run, STUDENT, lab_id, found, more=False)
        finally:
            close_worker()  # every kernel stopped, and all their uid left running under this process killed
            uid = sandbox.uid if in_container else (kernel_account() or (None,))[0]
            left = container.sweep(uid) if uid is not None else []
        if left:
            graded.result, graded.failure = None, (f"processes of the kernel's uid outlived it ({left}): no "
                                                   "verdict is written while student code may still run")
        errors = run.out / "grader-errors.log"
        if errors.exists():
            print(errors.read_text(), flush=True)
    except Exception as exc:  # noqa: BLE001 - the platform still gets a results file saying so
        traceback.print_exc()
        graded.result, graded.failure = None, f"{type(exc).__name__}: {exc}"
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
        shutil.rmtree(private, ignore_errors=True)
        tempfile.tempdir = saved[1]
        if saved[0] is None:
            os.environ.pop("TMPDIR", None)
        else:
            os.environ["TMPDIR"] = saved[0]
        graded.seconds = time.monotonic() - start
    return graded


def write_results(path: Path, data: dict) -> None:
    """The results file, written whole (a temporary file in the same folder, then renamed): the platform never
    reads half of one. Called only after :func:`grade_submission` has returned, every kernel gone."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data, indent=2))
    tmp.chmod(0o600)
    os.replace(tmp, path)


# -- what a student reads ------------------------------------------------------------------------------------
_ANCHOR = re.compile(r'<a class="anchor-link"[^>]*>[^<]*</a>')


def withheld_line(graded: Graded, tests: set[str]) -> str:
    """Says what a summary of ``tests`` leaves out ('' when it covers every test)."""
    hidden = set(graded.tests) - tests
    if not hidden or graded.result is None:
        return ""
    points = sum(graded.result.points[t] for t in hidden)
    when = {"after_due_date": "are shown after the due date", "hidden": "are not shown",
            "after_published": "are shown once your instructor publishes the grades"}
    return (f"This summary covers the {len(tests)} tests you can see; "
            f"{len(hidden)} hidden test{'s' * (len(hidden) != 1)} ({points:g} point{'s' * (points != 1)}) and "
            f"your total {when[graded.settings.hidden_tests_visibility]}.")


def summary_html(graded: Graded, tests: set[str] | None = None, head: bool = True) -> str:
    """The feedback page's summary of ``tests`` (default: every test) as an HTML fragment, rendered by
    nbconvert's markdown renderer, as on the page, and cleaned (:func:`autograder.core.sanitize.clean_html`).
    ``head``: first a paragraph on the wall that graded, and on any tests left out."""
    from nbconvert.filters.markdown_mistune import markdown2html_mistune

    tests = set(graded.tests) if tests is None else tests
    if graded.result is None:
        return (f"<p>{html.escape(graded.reason)}</p><p>Nothing was marked wrong in your code: your instructor can "
                "see why in the autograder's output.</p>")
    lines = (graded.wall.describe(), withheld_line(graded, tests)) if head else ()
    top = "".join(f"<p>{html.escape(line)}</p>" for line in lines if line)
    body = _ANCHOR.sub("", markdown2html_mistune(summary(graded.view(tests))))
    return clean_html(top + body)


class _Text(HTMLParser):
    BREAKS = {"p", "div", "li", "tr", "h1", "h2", "h3", "h4", "br", "ol", "ul", "table"}

    def __init__(self):
        super().__init__()
        self.parts: list[str] = []

    def handle_starttag(self, tag, attrs):
        if tag in self.BREAKS:
            self.parts.append("\n")
        if tag == "li":
            self.parts.append("- ")
        if tag in ("td", "th"):
            self.parts.append(" | ")

    def handle_endtag(self, tag):
        if tag in self.BREAKS:
            self.parts.append("\n")

    def handle_data(self, data):
        self.parts.append(data)


def summary_text(graded: Graded, tests: set[str] | None = None, head: bool = True) -> str:
    """:func:`summary_html` as plain text, for a platform that shows no HTML."""
    parser = _Text()
    parser.feed(summary_html(graded, tests, head))
    parser.close()
    lines = [" ".join(line.split()).removeprefix("| ") for line in "".join(parser.parts).splitlines()]
    return "\n".join(line for line in lines if line)


def score_text(result: Result) -> str:
    """The feedback page's score line, as text."""
    return score_line(result).strip("*")


def test_output(result: Result, test: str) -> str:
    """One test's feedback as text: its status and points, the grader's message, and each named bug with what
    to try (the lab's catalogue), as the feedback page gives them."""
    outcome = next(o for o in result.outcomes if o.test == test)
    lines = [f"{outcome.status}: {result.score(test):g} / {result.points[test]:g} points"]
    if outcome.message:
        lines.append(str(outcome.message))
    for bug in outcome.diagnosis:
        lines += ["", f"Diagnosis: {bug.title} ({bug.id})", bug.symptom, f"What to try: {bug.fix}",
                  f"Documented in: {bug.reference}"]
    return "\n".join(lines)


def passed(result: Result, test: str) -> bool:
    return next(o for o in result.outcomes if o.test == test).status == Status.PASSED
