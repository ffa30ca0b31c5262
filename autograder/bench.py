"""Grading throughput, measured side by side in one run: ``python -m autograder.bench --n 6 [--lab LAB]``.

For each lab (all discovered labs by default), copies N of its sample submissions (the reference and its
catalogued bugs, round robin), then times, on the same submissions and the same machine:

- a bare nbclient run of one notebook (kernel start, imports, every cell: what "running the lab" costs);
- plain ``nbgrader autograde`` (hidden tests in the student's kernel);
- ``genlab grade --full-run`` (every cell) and ``genlab grade`` (only what the tests need), 1 and 2 workers;
- ``genlab grade --unsafe`` (no sandbox), 1 worker;

and prints seconds per notebook, the ratio to the bare run, and the mean time per pipeline step of one
submission (``results.json``'s ``phases``: read, assemble, scan, kernel start, cells, tests, diagnosis...).
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from autograder.core.labs import discover
from autograder.release.sample_submissions import HERE as SAMPLES, ROOT


def _run(cmd, **kw) -> float:
    start = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, **kw)
    return time.perf_counter() - start


def make_submissions(lab, folder: Path, n: int) -> None:
    names = ["reference"] + sorted(name for name, spec in lab.samples.items() if spec["expect"].get("bug"))
    names = [s for s in names if (SAMPLES / s / lab.id / f"{lab.id}.ipynb").exists()]
    for i in range(n):
        shutil.copytree(SAMPLES / names[i % len(names)] / lab.id, folder / f"student{i:03d}" / lab.id)


def bare_nbclient(notebook: Path) -> float:
    import nbformat
    from nbclient import NotebookClient

    nb = nbformat.read(str(notebook), as_version=4)
    start = time.perf_counter()
    NotebookClient(nb, timeout=900, allow_errors=True,
                   resources={"metadata": {"path": str(notebook.parent)}}).execute()
    return time.perf_counter() - start


def plain_nbgrader(lab: str, subs: Path, work: Path) -> float:
    course = work / "course"
    (course / "source" / lab).mkdir(parents=True)
    shutil.copy(ROOT / "solutions" / lab / f"{lab}.ipynb", course / "source" / lab)
    shutil.copytree(subs, course / "submitted")
    (course / "nbgrader_config.py").write_text(
        "c = get_config()\nc.CourseDirectory.course_id = 'genlab'\nc.ExecutePreprocessor.timeout = 900\n")
    nbgrader = [sys.executable, "-m", "nbgrader"]
    env = {**os.environ, "GENLAB_ROOT": str(ROOT)}
    _run(nbgrader + ["generate_assignment", lab, "--force"], cwd=course, env=env)
    return _run(nbgrader + ["autograde", lab, "--force"], cwd=course, env=env)


def genlab_grade(lab: str, subs: Path, out: Path, *extra) -> float:
    return _run([sys.executable, "-m", "autograder.cli", "--root", str(ROOT), "grade", str(subs), "--out", str(out),
                 "--lab", lab, "--quiet", *extra])


def phases(out: Path) -> dict[str, float]:
    """Mean seconds per pipeline step over the notebooks of one run."""
    results = json.loads((out / "results.json").read_text())
    steps = dict.fromkeys(k for r in results for k in r.get("phases", {}))
    return {k: statistics.mean(r["phases"].get(k, 0.0) for r in results) for k in steps}


def bench_lab(lab, n: int, tmp: Path, nbgrader: bool) -> tuple[list, dict]:
    subs = tmp / lab.id / "submitted"
    make_submissions(lab, subs, n)
    bare = bare_nbclient(subs / "student000" / lab.id / f"{lab.id}.ipynb")
    rows = [("bare nbclient run of one notebook", bare, 1)]
    if nbgrader:
        rows.append(("plain nbgrader autograde", plain_nbgrader(lab.id, subs, tmp / lab.id), n))
    for name, out, extra in [("genlab grade --full-run, 1 worker", "full1", ("--full-run", "--workers", "1")),
                             ("genlab grade --full-run, 2 workers", "full2", ("--full-run", "--workers", "2")),
                             ("genlab grade, 1 worker", "g1", ("--workers", "1")),
                             ("genlab grade, 2 workers", "g2", ("--workers", "2")),
                             ("genlab grade, 1 worker, --unsafe (no sandbox)", "u1", ("--workers", "1", "--unsafe"))]:
        rows.append((name, genlab_grade(lab.id, subs, tmp / lab.id / out, *extra), n))
    return [(name, s / count, s / count / bare) for name, s, count in rows], \
        {"--full-run": phases(tmp / lab.id / "full1"), "default": phases(tmp / lab.id / "g1")}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--n", type=int, default=6, help="notebooks per lab")
    parser.add_argument("--lab", action="append", help="only this lab (repeatable)")
    parser.add_argument("--no-nbgrader", action="store_true", help="skip plain nbgrader autograde (slow)")
    args = parser.parse_args(argv)
    labs = [lab for lab in discover(ROOT) if not args.lab or lab.id in args.lab]
    with tempfile.TemporaryDirectory() as tmp:
        for lab in labs:
            rows, steps = bench_lab(lab, args.n, Path(tmp), not args.no_nbgrader)
            print(f"\n== {lab.id} ({args.n} notebooks) ==")
            print(f"{'what':48s} {'s per notebook':>15s} {'x bare run':>11s}")
            for name, per, ratio in rows:
                print(f"{name:48s} {per:15.2f} {ratio:11.2f}")
            print("mean seconds per step of one submission (1 worker):")
            for mode, times in steps.items():
                print(f"  {mode:11s} " + ", ".join(f"{k} {v:.2f}" for k, v in times.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
