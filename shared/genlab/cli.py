"""The ``genlab`` command line: doctor, release, grade, check."""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path


def _root(args) -> Path:
    from genlab.testing.reference import find_course_root

    return Path(args.root).resolve() if args.root else find_course_root()


def cmd_doctor(args) -> int:
    from genlab.doctor import main

    return main()


def cmd_release(args) -> int:
    from autograder.release import lab_ids, release

    if args.outputs:
        from autograder.outputs import store_checked_outputs

        for lab in args.lab or lab_ids(_root(args)):
            marked = store_checked_outputs(_root(args) / "solutions" / lab / f"{lab}.ipynb")
            print(f"solutions/{lab}: ran it and stored the output of {marked} NBVAL_CHECK_OUTPUT cells")
    for path in release(_root(args), args.lab or None):
        print(f"wrote {path}")
    return 0


def cmd_grade(args) -> int:
    from autograder.grade import grade_all, gradebook_table, parse_shard
    from autograder.kernel import Limits

    from autograder.sandbox import SandboxConfig, SandboxUnavailable

    course = course_limits(_root(args))

    def pick(flag, key, default):
        return flag if flag is not None else course.get(key, default)

    limits = Limits(cell_timeout_s=pick(args.cell_timeout, "cell_timeout_s", 120.0),
                    notebook_timeout_s=pick(args.notebook_timeout, "notebook_timeout_s", 900.0),
                    request_timeout_s=pick(args.test_timeout, "test_timeout_s", 60.0),
                    output_bytes_per_cell=int(pick(args.output_limit, "output_bytes_per_cell", 100_000)),
                    max_notebook_bytes=int(course.get("max_notebook_mib", Limits.max_notebook_bytes / 2**20) * 2**20))
    sandbox = SandboxConfig(memory_bytes=int(pick(args.memory_limit, "memory_gib", 4.0) * 2**30),
                            max_processes=int(course.get("max_processes", 64)),
                            max_file_bytes=int(course.get("max_file_mib", 256) * 2**20))
    try:
        results = grade_all(_root(args), Path(args.submissions), Path(args.out), workers=args.workers,
                            labs=args.lab or None, limits=limits, progress=not args.quiet, unsafe=args.unsafe,
                            sandbox_config=sandbox, db_url=args.db or os.environ.get("GENLAB_DB") or None,
                            shard=parse_shard(args.shard))
    except SandboxUnavailable as exc:
        print(f"genlab grade: {exc}", file=sys.stderr)
        return 2
    print(gradebook_table(results))
    out = Path(args.out).resolve()
    gradebook = args.db or os.environ.get("GENLAB_DB") or out / "gradebook.db"
    print(f"\ngrades: {out / 'grades.csv'}\nfeedback: {out / 'feedback'}/<student>/<lab>/<lab>.html\n"
          f"gradebook: {gradebook}")
    return 0


def course_limits(root: Path) -> dict:
    """The [limits] table of autograder/course.toml, or {} when the course has none."""
    import tomllib

    path = root / "autograder" / "course.toml"
    return tomllib.loads(path.read_text()).get("limits", {}) if path.exists() else {}


def cmd_check(args) -> int:
    """Self-check a notebook from the shell: runs it, then the visible tests of each function."""
    import nbformat
    from nbclient import NotebookClient

    path = Path(args.notebook).resolve()
    nb = nbformat.read(str(path), as_version=4)
    client = NotebookClient(nb, timeout=600, allow_errors=True, resources={"metadata": {"path": str(path.parent)}})
    lab = path.stem
    from genlab.testing.notebook import LabNotebook
    functions = list(LabNotebook(path, nb).solutions)
    nb.cells.append(nbformat.v4.new_code_cell(
        "import genlab\n" + "\n".join(f"genlab.check({f!r}, {lab!r})" for f in functions)))
    client.execute()
    for output in nb.cells[-1].outputs:
        print(output.get("text", ""), end="")
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="genlab", description=__doc__)
    parser.add_argument("--root", help="course folder (default: the nearest folder with solutions/ or labs/)")
    sub = parser.add_subparsers(dest="command", required=True)

    sub.add_parser("doctor", help="check Python, torch, CUDA and optional packages").set_defaults(func=cmd_doctor)

    p = sub.add_parser("release", help="regenerate labs/ from solutions/ (nbgrader generate_assignment)")
    p.add_argument("--lab", action="append", help="only this lab (repeatable)")
    p.add_argument("--outputs", action="store_true",
                   help="first run the solution notebooks and store the outputs nbval compares")
    p.set_defaults(func=cmd_release)

    p = sub.add_parser("grade", help="autograde SUBMISSIONS/<student>/<lab>/<lab>.ipynb")
    p.add_argument("submissions")
    p.add_argument("--out", required=True, help="folder for grades.csv, feedback and the gradebook")
    p.add_argument("--workers", type=int, default=1)
    p.add_argument("--lab", action="append", help="only this lab (repeatable)")
    p.add_argument("--cell-timeout", type=float, default=None, help="seconds per cell (course.toml: cell_timeout_s)")
    p.add_argument("--notebook-timeout", type=float, default=None, help="seconds per notebook")
    p.add_argument("--test-timeout", type=float, default=None,
                   help="seconds for one call of a student function made by a test")
    p.add_argument("--memory-limit", type=float, default=None, help="GiB of address space per kernel")
    p.add_argument("--output-limit", type=int, default=None, help="bytes of output kept per cell")
    p.add_argument("--unsafe", action="store_true", help="grade without a sandbox (trusted notebooks only)")
    p.add_argument("--db", help="gradebook URL, e.g. postgresql://user:pw@host/db (default: DIR/gradebook.db; "
                                "also read from $GENLAB_DB)")
    p.add_argument("--shard", default="0/1", help="I/N: grade only shard I of N of the students")
    p.add_argument("--quiet", action="store_true")
    p.set_defaults(func=cmd_grade)

    p = sub.add_parser("check", help="run a lab notebook and self-check its functions on the visible tests")
    p.add_argument("notebook")
    p.set_defaults(func=cmd_check)

    args = parser.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
