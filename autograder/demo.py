"""``make demo``: grade a representative set of the sample submissions and print the gradebook.

The set, chosen from each lab's own samples so that a new lab joins it with no edit: per lab, the
reference and two catalogued bugs; and from Lab 1, two attacks and two faults. ``--all`` grades every
sample (``make demo-all``).
"""
from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

from autograder.core.labs import discover
from autograder.release.sample_submissions import HERE as SAMPLES, ROOT

# attack_allclose (tampered), lab1_attack_watch_list_frozen (refused by the policy for graded code), fault_exit (a
# kernel killed; graded, as the test suite grades it, without the policy, which would not run its os._exit cell)
SHOWCASE = ["attack_allclose", "lab1_attack_watch_list_frozen", "fault_exit", "fault_missing_notebook"]


def representative(root: Path = ROOT) -> list[tuple[str, str]]:
    """(sample, lab) pairs: the reference and two bugs per lab, plus the showcase attacks and faults."""
    chosen = []
    for lab in discover(root):
        bugs = [name for name, spec in lab.samples.items() if spec.get("expect", {}).get("bug")]
        chosen += [("reference", lab.id)] + [(name, lab.id) for name in bugs[:2]]
        chosen += [(name, lab.id) for name in SHOWCASE if name in lab.samples]
    return chosen


def without_policy(root: Path = ROOT) -> list[str]:
    """``--without-policy NAME`` for each sample that tests a wall behind the policy (its spec: "policy": "off")."""
    names = sorted({name for lab in discover(root) for name, spec in lab.samples.items() if spec.get("policy") == "off"})
    return [arg for name in names for arg in ("--without-policy", name)]


def copy_samples(pairs: list[tuple[str, str]], into: Path) -> Path:
    shutil.rmtree(into, ignore_errors=True)
    for sample, lab in pairs:
        shutil.copytree(SAMPLES / sample / lab, into / sample / lab, symlinks=True)
    return into


def main(argv=None) -> int:
    from autograder.cli import main as genlab

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", default="out/demo")
    parser.add_argument("--all", action="store_true", help="grade every sample submission")
    parser.add_argument("--workers", default="2")
    args = parser.parse_args(argv)
    out = Path(args.out).resolve()
    submissions = SAMPLES if args.all else copy_samples(representative(), out.parent / f"{out.name}-submissions")
    return genlab(["--root", str(ROOT), "grade", str(submissions), "--out", str(out), "--workers", args.workers,
                   *without_policy()])


if __name__ == "__main__":
    sys.exit(main())
