"""``genlab grade SUBMISSIONS --out DIR``: grade a folder laid out as nbgrader's ``submitted/`` tree.

Writes, under DIR:
- ``grades.csv``: one row per student and test: student,lab,test,score,max_score,status,diagnosis
- ``results.json``: the same with messages, repairs made to the notebook and tampering evidence
- ``gradebook.db``: nbgrader's gradebook (scores as auto_score), so nbgrader's tools keep working
- ``autograded/<student>/<lab>/<lab>.ipynb`` and ``feedback/<student>/<lab>/<lab>.html`` (nbgrader's feedback)
"""
from __future__ import annotations

import atexit
import copy
import csv
import hashlib
import logging
import os
import shutil
import sys
import tempfile
import traceback
import warnings
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path

import nbformat

from tqdm.auto import tqdm

from autograder import cache, gradebook, pipeline
from autograder.submissions import Found, locate, students
from genlab.testing.notebook import grade_id
from autograder.kernel import Limits
from autograder.release import lab_ids
from autograder.sandbox import SandboxConfig, launcher, prepare_workdir, require as require_sandbox

CSV_COLUMNS = ["student", "lab", "test", "score", "max_score", "status", "diagnosis"]

# Per worker process: each lab's definition, reference namespace and reference kernel, loaded once.
_labs: dict[str, tuple] = {}


def _launcher(sandbox_config: SandboxConfig | None, workdir: Path):
    if sandbox_config is None:
        return None
    prepare_workdir(workdir)
    return launcher(sandbox_config, workdir)


def _lab_state(root: Path, lab: str, scratch: Path, limits: Limits, sandbox_config):
    if lab not in _labs:
        definition = pipeline.Lab.load(root, lab)
        ref_dir = pipeline.scratch_dir(scratch, f"reference-{lab}")
        # The reference kernel runs in the same sandbox, so both sides of a timing ratio pay the same costs.
        ref_kernel = pipeline.ReferenceKernel(definition, ref_dir, limits, _launcher(sandbox_config, ref_dir))
        atexit.register(ref_kernel.shutdown)
        _labs[lab] = (definition, pipeline.load_lab_reference(definition), ref_kernel)
    return _labs[lab]


def grade_one(root: Path, student: str, lab: str, found: Found, scratch: Path, limits: Limits,
              sandbox_config: SandboxConfig | None, out: Path):
    os.environ["GENLAB_ROOT"] = str(root)
    source = root / "solutions" / lab / f"{lab}.ipynb"
    if found.refused:  # never opened: a link out of the folder, a pipe, a file of gigabytes
        definition = pipeline.Lab.load(root, lab)
        outcomes = pipeline.all_outcomes(definition, found.status, found.refused)
        return pipeline.Result(student, lab, outcomes, {t: s["points"] for t, s in definition.tests.items()},
                               [], [found.refused] if found.status == pipeline.TAMPERED else []), False
    result_key = cache.key(found.path, source)
    cached = cache.load(out, student, lab, result_key)
    if cached is not None:
        return cached, True
    definition, reference, ref_kernel = _lab_state(root, lab, scratch, limits, sandbox_config)
    workdir = pipeline.scratch_dir(scratch, student)
    try:
        result = pipeline.grade_notebook(
            student, definition, found.path or (root / "missing" / f"{lab}.ipynb"), workdir=workdir,
            limits=limits, reference=reference, reference_kernel=ref_kernel,
            launcher=_launcher(sandbox_config, workdir),
            cgroup_limits=(sandbox_config.memory_bytes, sandbox_config.max_processes) if sandbox_config else None)
    except Exception:  # noqa: BLE001 - a grader fault on one notebook must not lose anyone's rows
        trace = traceback.format_exc()
        with (out / "grader-errors.log").open("a") as log:
            log.write(f"== {student}/{lab}\n{trace}\n")
        outcomes = pipeline.all_outcomes(definition, pipeline.ERROR,
                                         "the grader could not grade this notebook (an instructor will look: "
                                         "see grader-errors.log); nothing was marked wrong in your code")
        return pipeline.Result(student, lab, outcomes, {t: s["points"] for t, s in definition.tests.items()},
                               [f"internal grader error: {trace.strip().splitlines()[-1]}"]), False
    finally:
        pipeline.remove(workdir)
    if found.note:
        result.notes.insert(0, found.note)
    cache.store(out, result, result_key)
    return result, False


def find_work(root: Path, submissions: Path, labs: list[str], every_student: bool,
              max_bytes: int = Limits.max_notebook_bytes) -> list[tuple[str, str, Found]]:
    """(student, lab, notebook) to grade. With ``--lab``, every student is graded on it (no notebook: status
    missing); without it, each student on every lab they handed a notebook in for, wherever it lies."""
    ids = {lab: {grade_id(c) for c in pipeline.Lab.load(root, lab).release.cells} - {None} for lab in labs}
    work = []
    for student in students(submissions):
        for lab in labs:
            found = locate(submissions / student, lab, ids[lab], max_bytes)
            if found.path is not None or every_student or (submissions / student / lab).is_dir():
                work.append((student, lab, found))
    return work


def grade_all(root: Path, submissions: Path, out: Path, *, workers: int = 1, labs: list[str] | None = None,
              limits: Limits | None = None, progress=True, unsafe: bool = False,
              sandbox_config: SandboxConfig | None = None, db_url: str | None = None,
              shard: tuple[int, int] = (0, 1)) -> list[pipeline.Result]:
    root, submissions, out = Path(root).resolve(), Path(submissions).resolve(), Path(out).resolve()
    limits = limits or Limits()
    unknown = sorted(set(labs or []) - set(lab_ids(root)))
    if unknown:
        raise SystemExit(f"unknown lab(s) {unknown}: the labs are {lab_ids(root)}")
    if require_sandbox(unsafe):
        sandbox_config = sandbox_config or SandboxConfig()
        sandbox_config.hide = [root / "solutions", root / "autograder", root / ".git", out, submissions,
                               *sandbox_config.hide]
    else:
        sandbox_config = None
        print("WARNING: grading WITHOUT a sandbox (--unsafe): student code can read the hidden tests and write "
              "the gradebook.", file=sys.stderr)
    every_student = bool(labs)
    labs = labs or lab_ids(root)
    out.mkdir(parents=True, exist_ok=True)
    # Kernels talk over Unix sockets in their scratch folders, and a socket path is limited to 107 bytes:
    # keep scratch short, in the temp folder, not under a possibly deep --out.
    scratch = Path(tempfile.mkdtemp(prefix="genlab-"))
    work = [w for w in find_work(root, submissions, labs, every_student, limits.max_notebook_bytes)
            if in_shard(w[0], shard)]
    labs = sorted({lab for _, lab, _ in work}) or labs
    results: list[pipeline.Result] = []
    reused = 0
    bar = tqdm(total=len(work), unit="notebook", disable=not progress, file=sys.stderr)

    def report(result: pipeline.Result, was_cached: bool):
        nonlocal reused
        reused += was_cached
        earned = sum(result.score(o.test) for o in result.outcomes)
        bar.set_postfix_str(f"{result.student}/{result.lab} {earned:g}/{sum(result.points.values()):g}"
                            + (" (unchanged)" if was_cached else ""))
        bar.update()

    jobs = [(root, s, lab, found, scratch, limits, sandbox_config, out) for s, lab, found in work]
    if workers <= 1:
        for job in jobs:
            result, was_cached = grade_one(*job)
            results.append(result)
            report(result, was_cached)
    else:
        # One student's notebook is graded by one worker; workers never share a student.
        with ProcessPoolExecutor(max_workers=workers) as pool:
            for future in as_completed([pool.submit(grade_one, *job) for job in jobs]):
                result, was_cached = future.result()
                results.append(result)
                report(result, was_cached)
    bar.close()
    if reused and progress:
        print(f"{reused} of {len(work)} notebooks unchanged since the last run: their results were reused",
              file=sys.stderr)
    for _definition, _reference, ref_kernel in _labs.values():
        ref_kernel.shutdown()  # this process's own reference kernels (workers close theirs when they exit)
    _labs.clear()
    shutil.rmtree(scratch, ignore_errors=True)
    results.sort(key=lambda r: (r.student, r.lab))
    write_outputs(root, out, results, labs, db_url)
    return results


def in_shard(student: str, shard: tuple[int, int]) -> bool:
    """Shard i of N grades the students whose stable hash is i mod N: every student in exactly one shard."""
    index, count = shard
    digest = hashlib.sha256(student.encode()).digest()
    return int.from_bytes(digest[:8], "big") % count == index


def parse_shard(text: str) -> tuple[int, int]:
    try:
        index, count = (int(x) for x in text.split("/"))
    except ValueError:
        raise SystemExit(f"--shard takes I/N (e.g. 0/4), got {text!r}") from None
    if not (count >= 1 and 0 <= index < count):
        raise SystemExit(f"--shard {text}: need 0 <= I < N")
    return index, count


# -- outputs -----------------------------------------------------------------------------------------
def write_csv(out: Path, results) -> Path:
    path = out / "grades.csv"
    with path.open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(CSV_COLUMNS)
        for r in results:
            for o in r.outcomes:
                writer.writerow([r.student, r.lab, o.test, f"{r.score(o.test):g}", f"{r.points[o.test]:g}",
                                 o.status, ";".join(b.id for b in o.diagnosis)])
    return path


def _summary_cell(result: pipeline.Result):
    total = sum(result.score(o.test) for o in result.outcomes)
    lines = [f"# Feedback: {result.lab}", f"**Score: {total:g} / {sum(result.points.values()):g}**", "",
             "| test | status | points | diagnosis |", "|---|---|---|---|"]
    for o in result.outcomes:
        lines.append(f"| `{o.test}` | {o.status} | {result.score(o.test):g}/{result.points[o.test]:g} | "
                     f"{'; '.join(b.title for b in o.diagnosis)} |")
    if result.notes:
        lines += ["", "**Repairs made before grading:**"] + [f"- {n}" for n in result.notes]
    if result.evidence:
        lines += ["", "**Interference with the grader (reported to the instructor):**"] + \
                 [f"- `{e}`" for e in result.evidence]
    if result.notebook is None:  # nothing ran: the reason is the whole feedback
        reasons = [m for m in dict.fromkeys(o.message for o in result.outcomes if o.message)
                   if m not in result.evidence]
        if reasons:
            lines += ["", "**Why nothing was graded:**"] + [f"- {m}" for m in reasons]
    return nbformat.v4.new_markdown_cell("\n".join(lines))


def _write_reason_pages(out: Path, results) -> None:
    """A feedback page for notebooks that never ran (missing, unreadable, refused), saying why and what to do.

    nbgrader's GenerateFeedback only knows notebooks it autograded, so without this those students would get
    no page at all.
    """
    from nbconvert import HTMLExporter

    exporter = HTMLExporter()
    for r in results:
        if r.notebook is not None:
            continue
        page = nbformat.v4.new_notebook(cells=[_summary_cell(r)])
        path = out / "feedback" / r.student / r.lab / f"{r.lab}.html"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(exporter.from_notebook_node(page)[0])


def write_feedback(out: Path, db_url: str, results, labs) -> None:
    """Autograded notebooks (with a summary on top) and nbgrader's feedback HTML, per student and lab."""
    from nbgrader.apps import NbGrader  # noqa: F401 - registers nbgrader's config classes
    from nbgrader.converters import GenerateFeedback
    from nbgrader.coursedir import CourseDirectory
    from traitlets.config import Config

    for r in results:
        if r.notebook is None:
            continue
        path = out / "autograded" / r.student / r.lab / f"{r.lab}.ipynb"
        path.parent.mkdir(parents=True, exist_ok=True)
        nb = copy.deepcopy(r.notebook)
        nb.cells.insert(0, _summary_cell(r))
        nbformat.write(nb, str(path))
    c = Config()
    c.CourseDirectory.root = str(out)
    c.CourseDirectory.db_url = db_url
    c.CourseDirectory.course_id = "genlab"
    c.GenerateFeedback.force = True
    for lab in labs:
        if not any(r.lab == lab and r.notebook is not None for r in results):
            continue
        c.CourseDirectory.assignment_id = lab
        # Only this run's students: in a shared (sharded) gradebook other machines own the rest.
        c.CourseDirectory.student_id = "*"
        converter = GenerateFeedback(coursedir=CourseDirectory(config=c), config=c)
        converter.log.setLevel(logging.ERROR)
        converter.start()
    _write_reason_pages(out, results)


def write_outputs(root: Path, out: Path, results, labs, db_url: str | None = None) -> None:
    warnings.filterwarnings("ignore", module="nbgrader.*")  # SQLAlchemy notices from nbgrader's own code
    write_csv(out, results)
    (out / "results.json").write_text(pipeline.dumps(results))
    db_url = db_url or f"sqlite:///{out / 'gradebook.db'}"
    gradebook.record(db_url, root, labs, results, out / ".release")
    write_feedback(out, db_url, results, labs)


def gradebook_table(results) -> str:
    """Students by tests: scores, statuses other than passed, and diagnoses, as a plain-text table."""
    if not results:
        return "no submissions"
    lines = []
    for lab in sorted({r.lab for r in results}):
        rows = [r for r in results if r.lab == lab]
        tests = [o.test for o in rows[0].outcomes]
        width = max(len(r.student) for r in rows) + 2
        lines.append(f"== {lab} ==")
        lines.append(" " * width + "  ".join(f"{i + 1:>4}" for i in range(len(tests))) + "   total")
        for r in rows:
            cells = []
            for o in r.outcomes:
                mark = f"{r.score(o.test):g}" if o.passed else {"failed": "x", "error": "E", "timeout": "T",
                                                                  "killed": "K", "tampered": "!",
                                                                  "missing": "-"}.get(o.status, "?")
                cells.append(f"{mark:>4}")
            total = sum(r.score(o.test) for o in r.outcomes)
            lines.append(f"{r.student:<{width}}" + "  ".join(cells) + f"   {total:g}/{sum(r.points.values()):g}")
        lines.append("tests: " + ", ".join(f"{i + 1}={t}" for i, t in enumerate(tests)))
        lines.append("marks: number = points earned, x failed, E error, T timeout, K killed, ! tampered, - missing")
        diag = [(r.student, o.test, o.diagnosis, o.status) for r in rows for o in r.outcomes if o.diagnosis]
        if diag:
            lines.append("diagnoses:")
            seen = set()
            for student, test, bugs, _ in diag:
                for b in bugs:
                    if (student, b.id) not in seen:
                        seen.add((student, b.id))
                        lines.append(f"  {student}: {b.id} ({b.title})")
        tampered = [r for r in rows if r.evidence]
        for r in tampered:
            lines.append(f"  {r.student}: TAMPERED: {r.evidence[0]}")
    return "\n".join(lines)

