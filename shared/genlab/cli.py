"""The student's ``genlab`` command: ``doctor`` (can this machine run the labs?) and ``check`` (self-check a lab).

This is the whole command in the student package. The instructor's checkout adds ``release``, ``grade`` and
``audit`` to the same parser (:mod:`autograder.cli`), so the two commands a student learns are the same in
both; trust flows one way: this module never imports the grader.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path


def cmd_doctor(args) -> int:
    from genlab.doctor import main

    return main()


def cmd_check(args) -> int:
    from genlab.selfcheck import check_notebook

    return check_notebook(Path(args.notebook))


def add_student_commands(sub) -> None:
    """``doctor`` and ``check``, on a parser's subcommands."""
    sub.add_parser("doctor", help="check Python, torch, CUDA and optional packages").set_defaults(func=cmd_doctor)
    p = sub.add_parser("check", help="run a lab notebook and self-check its functions on the visible tests")
    p.add_argument("notebook")
    p.set_defaults(func=cmd_check)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="genlab", description=__doc__.split("\n")[0])
    add_student_commands(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
