"""Grading throughput, measured side by side in one run (``python -m autograder.bench --n 20``).

Copies N Lab 1 sample submissions (the reference and catalogued bugs, round robin), then times, on the
same submissions: a bare nbclient run of one notebook, plain ``nbgrader autograde`` (hidden tests in the
student's kernel), ``genlab grade`` with 1 and 2 workers, and ``genlab grade --unsafe`` (no sandbox).
"""
from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LAB = "lab1_vae"


def _run(cmd, **kw) -> float:
    start = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, **kw)
    return time.perf_counter() - start


def make_submissions(folder: Path, n: int) -> None:
    samples = sorted(p.name for p in (ROOT / "autograder" / "samples").iterdir()
                     if (p.name == "reference" or p.name.startswith("bug_")) and (p / LAB / f"{LAB}.ipynb").exists())
    for i in range(n):
        src = ROOT / "autograder" / "samples" / samples[i % len(samples)] / LAB
        shutil.copytree(src, folder / f"student{i:03d}" / LAB)


def bare_nbclient(notebook: Path) -> float:
    import nbformat
    from nbclient import NotebookClient

    nb = nbformat.read(str(notebook), as_version=4)
    start = time.perf_counter()
    NotebookClient(nb, timeout=600, allow_errors=True,
                   resources={"metadata": {"path": str(notebook.parent)}}).execute()
    return time.perf_counter() - start


def plain_nbgrader(subs: Path, work: Path) -> float:
    course = work / "course"
    (course / "source" / LAB).mkdir(parents=True)
    shutil.copy(ROOT / "solutions" / LAB / f"{LAB}.ipynb", course / "source" / LAB)
    shutil.copytree(subs, course / "submitted")
    (course / "nbgrader_config.py").write_text(
        "c = get_config()\nc.CourseDirectory.course_id = 'genlab'\nc.ExecutePreprocessor.timeout = 600\n")
    nbgrader = [sys.executable, "-m", "nbgrader"]
    env = {**os.environ, "GENLAB_ROOT": str(ROOT)}
    _run(nbgrader + ["generate_assignment", LAB, "--force"], cwd=course, env=env)
    return _run(nbgrader + ["autograde", LAB, "--force"], cwd=course, env=env)


def genlab_grade(subs: Path, out: Path, *extra) -> float:
    return _run([sys.executable, "-m", "autograder.cli", "--root", str(ROOT), "grade", str(subs), "--out", str(out),
                 "--lab", LAB, "--quiet", *extra])


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--n", type=int, default=20)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        subs = tmp / "submitted"
        make_submissions(subs, args.n)
        rows = [("bare nbclient, one notebook", bare_nbclient(subs / "student000" / LAB / f"{LAB}.ipynb"), 1)]
        rows.append(("plain nbgrader autograde", plain_nbgrader(subs, tmp), args.n))
        rows.append(("genlab grade, 1 worker", genlab_grade(subs, tmp / "g1", "--workers", "1"), args.n))
        rows.append(("genlab grade, 2 workers", genlab_grade(subs, tmp / "g2", "--workers", "2"), args.n))
        rows.append(("genlab grade, 1 worker, --unsafe (no sandbox)",
                     genlab_grade(subs, tmp / "g3", "--workers", "1", "--unsafe"), args.n))
    print(f"{'what':48s} {'total s':>8s} {'s per notebook':>15s}")
    for name, seconds, count in rows:
        print(f"{name:48s} {seconds:8.1f} {seconds / count:15.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
