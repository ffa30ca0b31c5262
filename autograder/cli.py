"""The ``genlab`` command line: ``doctor`` and ``check`` (students) and ``release``, ``grade``, ``audit`` and
``catalog suggest`` (instructors).

This dispatcher lives on the grader's side so that trust flows one way: it hands ``doctor`` and ``check``
to the student package (:mod:`genlab`), which never imports the grader, and ``release`` and ``grade`` to
:mod:`autograder`.
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from genlab.cli import add_student_commands


def _root(args) -> Path:
    from genlab.testing.reference import find_course_root

    return Path(args.root).resolve() if args.root else find_course_root()


def cmd_release(args) -> int:
    from autograder.core.labs import lab_ids
    from autograder.release.release import release

    if args.outputs:
        from autograder.release.outputs import store_checked_outputs

        for lab in args.lab or lab_ids(_root(args)):
            marked = store_checked_outputs(_root(args) / "solutions" / lab / f"{lab}.ipynb")
            print(f"solutions/{lab}: ran it and stored the output of {marked} NBVAL_CHECK_OUTPUT cells")
    platforms = [(name, given) for name, given in (("gradescope", args.gradescope), ("prairielearn", args.prairielearn))
                 if given]
    for name, (lab, _dir) in platforms:
        if lab not in lab_ids(_root(args)):
            print(f"genlab release --{name}: no lab {lab}; the labs are {lab_ids(_root(args))}", file=sys.stderr)
            return 2
    only = [lab for _, (lab, _dir) in platforms] if platforms and not args.student_bundle else None
    for path in release(_root(args), args.lab or only):
        print(f"wrote {path}")
    for name, (lab, folder) in platforms:
        from autograder.platforms import gradescope, prairielearn

        written = {"gradescope": gradescope, "prairielearn": prairielearn}[name].build(_root(args), lab, Path(folder))
        print(f"wrote {written}: {name}'s grader for {lab} (docs/instructor-guide.md#grading-on-{name})")
    if args.student_bundle:
        from autograder.release.bundle import student_bundle

        bundle = student_bundle(_root(args), Path(args.student_bundle))
        print(bundle.summary())
        return 0 if bundle.clean else 1
    return 0


def cmd_leaks(args) -> int:
    from autograder.release import leaks

    root = _root(args)
    places = [Path(p) for p in args.places] or [root / "shared" / "genlab", root / "labs"]
    matches = leaks.closest_matches(leaks.solution_functions(root), leaks.functions_in(places))
    print(leaks.report(matches))
    return 1 if leaks.leaks(matches) else 0


def cmd_grade(args) -> int:
    from autograder.course.grade import grade_all, parse_shard
    from autograder.core.limits import Limits
    from autograder.core.results import table
    from autograder.platforms.common import PlatformSettings
    from autograder.wall.sandbox import SandboxUnavailable

    root = _root(args)
    limits = Limits.load(root / "autograder" / "course.toml", cell_timeout_s=args.cell_timeout,
                         notebook_timeout_s=args.notebook_timeout, test_timeout_s=args.test_timeout,
                         memory_gib=args.memory_limit, output_bytes_per_cell=args.output_limit,
                         full_run=True if args.full_run else None,
                         policy_exempt=tuple(args.without_policy) or None)
    db = args.db or os.environ.get("GENLAB_DB") or None
    try:
        results = grade_all(root, Path(args.submissions), Path(args.out), workers=args.workers,
                            labs=args.lab or None, limits=limits, progress=not args.quiet, unsafe=args.unsafe,
                            db_url=db, shard=parse_shard(args.shard),
                            course_toml=Path(args.course) if args.course else None,
                            allow_container=PlatformSettings.load(root / "autograder" / "course.toml")
                            .allow_container_mode)
    except SandboxUnavailable as exc:
        print(f"genlab grade: {exc}", file=sys.stderr)
        return 2
    print(table(results))
    out = Path(args.out).resolve()
    print(f"\ngrades: {out / 'grades.csv'}\nfeedback: {out / 'feedback'}/<student>/<lab>/<lab>.html\n"
          f"gradebook: {db or out / 'gradebook.db'}")
    return 0


def cmd_audit(args) -> int:
    from autograder.quality.audit import audit_lab, auditor_for, details, table, write_json
    from autograder.core.labs import lab_ids

    root = _root(args)
    labs = lab_ids(root) if args.lab == "all" else [args.lab]
    if args.lab != "all" and args.lab not in lab_ids(root):
        print(f"genlab audit: no lab {args.lab} under {root / 'solutions'}", file=sys.stderr)
        return 2
    if args.write_sentinels and (args.function or args.max_mutants is not None):
        print("genlab audit: --write-sentinels needs the whole audit of each lab (no --function, no --max-mutants)",
              file=sys.stderr)
        return 2

    def progress(m):
        if not args.quiet:
            print(f"  mutant {m.index:3d} {m.status:20s} {m.operator}: {m.description}"
                  + (f" [{m.killed_by}]" if m.killed_by else ""), file=sys.stderr, flush=True)

    reports, auditors = [], {}
    for lab in labs:
        auditors[lab] = auditor_for(root, lab, args.test_timeout)
        try:
            reports += audit_lab(root, lab, args.function or None, args.max_mutants, args.test_timeout, progress,
                                 auditors[lab])
        except KeyError as exc:
            print(f"genlab audit: {exc.args[0]}", file=sys.stderr)
            return 2
    print(table(reports))
    extra = details(reports)
    if extra:
        print(extra)
    if args.json:
        write_json(reports, Path(args.json))
        print(f"\nreport: {Path(args.json).resolve()}")
    if args.write_sentinels:
        from autograder.quality import sentinels

        for lab_id in labs:
            chosen = [s for r in reports if r.lab == lab_id for s in sentinels.choose(auditors[lab_id], r)]
            path = root / "solutions" / lab_id / sentinels.FILE
            sentinels.write(path, chosen)
            print(f"{lab_id}: {len(chosen)} sentinels (mutants that one assertion alone catches) -> {path}")
    return 0


def cmd_collect(args) -> int:
    from autograder.course.collect import Roster, collect, read_times, report
    from autograder.core.limits import Limits

    root = _root(args)
    roster = Roster.read(Path(args.roster) if args.roster else None)
    limits = Limits.load(root / "autograder" / "course.toml")
    times = read_times(Path(args.times) if args.times else None, roster)
    entries = collect(Path(args.source), args.lab, Path(args.into), roster, limits.max_notebook_bytes, times)
    print(report(entries, args.lab, Path(args.into).resolve()))
    return 0


def cmd_export(args) -> int:
    from autograder.course.collect import Roster
    from autograder.course.export import export

    names = {}
    for given in args.column or []:
        lab, sep, name = given.partition("=")
        if not sep:
            print(f"genlab export: --column takes LAB=NAME, got {given!r}", file=sys.stderr)
            return 2
        names[lab] = name
    text, unknown = export(args.format, args.source, Roster.read(Path(args.roster) if args.roster else None),
                           args.lab or None, names)
    if args.out:
        Path(args.out).write_text(text, encoding="utf-8")
        print(f"wrote {Path(args.out).resolve()}")
    else:
        sys.stdout.write(text)
    for student in unknown:
        print(f"genlab export: {student} is graded but not in the roster: not exported", file=sys.stderr)
    return 0


def cmd_catalog_suggest(args) -> int:
    from autograder.insight import suggest

    try:
        lab, cluster, code = suggest.find(Path(args.run_dir), args.function, args.cluster)
    except (KeyError, FileNotFoundError) as exc:
        print(f"genlab catalog suggest: {exc.args[-1] if isinstance(exc, KeyError) else exc}", file=sys.stderr)
        return 2
    print(suggest.skeleton(lab, cluster, code))
    return 0


def cmd_feedback(args) -> int:
    from autograder.course.feedback import refresh

    results = refresh(_root(args), Path(args.out), Path(args.submissions) if args.submissions else None,
                      args.db or os.environ.get("GENLAB_DB") or None, Path(args.course) if args.course else None)
    print(f"redrew {len(results)} feedback page(s) from the gradebook: {Path(args.out).resolve() / 'feedback'}")
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="genlab", description=__doc__.split("\n")[0])
    parser.add_argument("--root", help="course folder (default: the nearest folder with solutions/ or labs/)")
    sub = parser.add_subparsers(dest="command", required=True)

    add_student_commands(sub)  # doctor, check: the student package's own command (genlab.cli)

    p = sub.add_parser("release", help="regenerate labs/ from solutions/ (nbgrader generate_assignment)")
    p.add_argument("--lab", action="append", help="only this lab (repeatable)")
    p.add_argument("--outputs", action="store_true",
                   help="first run the solution notebooks and store the outputs nbval compares")
    p.add_argument("--student-bundle", metavar="DIR",
                   help="then write what students receive to DIR: the notebooks, a wheel of the student "
                        "package, a README (no solutions, no hidden tests; checked for leaks)")
    p.add_argument("--gradescope", nargs=2, metavar=("LAB", "DIR"),
                   help="then write DIR/autograder.zip: Gradescope's autograder for LAB (autograder/platforms)")
    p.add_argument("--prairielearn", nargs=2, metavar=("LAB", "DIR"),
                   help="then write DIR/image (PrairieLearn's external grader for LAB, an image's build context) "
                        "and DIR/question (a question using it)")
    p.set_defaults(func=cmd_release)

    p = sub.add_parser("leaks", help="the closest match of every solution function in PLACES (files, folders, "
                                     "wheels); exit 1 when one is the answer after a small edit")
    p.add_argument("places", nargs="*", help="default: the student package (shared/genlab) and labs/")
    p.set_defaults(func=cmd_leaks)

    p = sub.add_parser("grade", help="autograde SUBMISSIONS/<student>/<lab>/<lab>.ipynb")
    p.add_argument("submissions")
    p.add_argument("--out", required=True, help="folder for grades.csv, feedback and the gradebook")
    p.add_argument("--workers", type=int, default=1)
    p.add_argument("--lab", action="append", help="only this lab (repeatable)")
    p.add_argument("--cell-timeout", type=float, default=None, help="seconds per cell (course.toml: cell_timeout_s)")
    p.add_argument("--notebook-timeout", type=float, default=None, help="seconds per notebook")
    p.add_argument("--test-timeout", type=float, default=None,
                   help="seconds for one call of a student function made by a test")
    p.add_argument("--memory-limit", type=float, default=None, help="GiB of memory per kernel")
    p.add_argument("--output-limit", type=int, default=None, help="bytes of output kept per cell")
    p.add_argument("--full-run", action="store_true",
                   help="run every cell of each notebook, not only what the tests need (course.toml: full_run)")
    p.add_argument("--without-policy", action="append", default=[], metavar="STUDENT",
                   help="grade this student's notebooks without the policy for graded code (course.toml [policy]); "
                        "the sandbox and the tamper checks still apply (repeatable)")
    p.add_argument("--unsafe", action="store_true", help="grade without a sandbox (trusted notebooks only)")
    p.add_argument("--db", help="gradebook URL, e.g. postgresql://user:pw@host/db (default: DIR/gradebook.db; "
                                "also read from $GENLAB_DB)")
    p.add_argument("--shard", default="0/1", help="I/N: grade only shard I of N of the students")
    p.add_argument("--quiet", action="store_true")
    p.add_argument("--course", help="the course.toml whose [deadlines] apply to this run (default: autograder/course.toml; "
                   "its [limits] always come from autograder/course.toml)")
    p.set_defaults(func=cmd_grade)

    p = sub.add_parser("audit", help="mutation audit of a lab's own tests: which small bugs in the reference "
                                     "do they let through?")
    p.add_argument("lab", help="the lab id, or `all`")
    p.add_argument("--function", action="append", help="only this graded function (repeatable)")
    p.add_argument("--max-mutants", type=int, default=None, help="at most N mutants per function, evenly spread")
    p.add_argument("--test-timeout", type=float, default=20.0,
                   help="seconds per test and mutant at least (10x the reference's time when longer)")
    p.add_argument("--json", help="write the full report (every mutant, with its diff) here")
    p.add_argument("--quiet", action="store_true", help="no line per mutant on stderr")
    p.add_argument("--write-sentinels", action="store_true",
                   help="write solutions/<lab>/sentinels.json: the mutants that one assertion alone catches, "
                        "which `make test` checks are still caught")
    p.set_defaults(func=cmd_audit)

    p = sub.add_parser("collect", help="an LMS's download-all-submissions zip (Canvas, Moodle) or folder into "
                                       "nbgrader's SUBMISSIONS/<student>/<lab>/ tree (autograder/course/collect.py)")
    p.add_argument("source", help="the zip, or the folder it was unzipped into")
    p.add_argument("--lab", required=True, help="the lab these submissions are for")
    p.add_argument("--into", required=True, help="SUBMISSIONS folder (nbgrader's submitted/)")
    p.add_argument("--roster", help="roster.csv: lms_id,name,email,student_id (default: folders named by LMS id)")
    p.add_argument("--times", help="CSV id,submitted_at (ISO 8601 with offset): the submission times, which the "
                                   "zips do not carry; overrides the zip entries' times")
    p.set_defaults(func=cmd_collect)

    p = sub.add_parser("export", help="grades from a run's gradebook as an LMS import CSV (Canvas, Moodle) or "
                                      "per test (autograder/course/export.py)")
    p.add_argument("source", help="a genlab grade --out folder, or a gradebook URL (postgresql://..., sqlite:///...)")
    p.add_argument("--format", required=True, choices=["canvas", "moodle", "csv"])
    p.add_argument("--roster", help="roster.csv (lms_id,name,email,student_id,sis_user_id,sis_login_id,section); "
                                    "needed for canvas and moodle")
    p.add_argument("--lab", action="append", help="only this lab (repeatable; default: every lab in the gradebook)")
    p.add_argument("--column", action="append", help="LAB=NAME: the LMS's column for a lab, e.g. "
                                                     "'lab1_vae=Lab 1: VAE (48213)' (Canvas: name and assignment id)")
    p.add_argument("--out", help="write here (default: standard output)")
    p.set_defaults(func=cmd_export)

    p = sub.add_parser("catalog", help="the bug catalogue: turn what a graded class shows into entries")
    catalog = p.add_subparsers(dest="catalog_command", required=True)
    q = catalog.add_parser("suggest", help="print a Bug(...) entry, with the representative student's code, for "
                                           "a misconception cluster of the class report")
    q.add_argument("run_dir", help="the --out folder of a grading run (results.json, autograded/)")
    q.add_argument("function", help="the graded function, e.g. gaussian_kl")
    q.add_argument("cluster", type=int, help="the cluster's number in the class report (1 = the largest)")
    q.set_defaults(func=cmd_catalog_suggest)

    p = sub.add_parser("feedback", help="redraw a run's feedback pages from its gradebook (hand-graded points, "
                                        "late penalties) without grading again")
    p.add_argument("out", help="the genlab grade --out folder")
    p.add_argument("--submissions", help="the graded submitted/ tree: apply course.toml's deadlines from its "
                                         "timestamp.txt files")
    p.add_argument("--db", help="gradebook URL (default: OUT/gradebook.db; also read from $GENLAB_DB)")
    p.add_argument("--course", help="the course.toml whose [deadlines] apply (default: autograder/course.toml)")
    p.set_defaults(func=cmd_feedback)

    args = parser.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
