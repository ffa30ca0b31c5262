"""``make image-check``: the grading image grades as genlab does outside it.

1. The demo's submissions (``make demo``'s set: autograder/demo.py), and three of Lab 1's attacks on the
   filesystem (reading the reference solutions, writing others' files, the gradebook), which container mode
   walls differently from bubblewrap, are graded twice: outside, by this checkout's ``genlab grade``, and inside
   the image, as an instructor runs it::

       podman run --rm -v SUBMISSIONS:/submissions -v OUT:/out IMAGE genlab grade /submissions --out /out

   Each ``grades.csv`` row (student, lab, test) must have the same score and status in both.
2. The image's own output says which wall graded (inside a container without namespaces: container mode).
3. Gradescope's and PrairieLearn's entry points (``genlab release --gradescope/--prairielearn`` for Lab 1),
   run inside the image in each platform's folder layout, grade a correct and an attacking submission:
   ``results.json`` follows the platform's JSON Schema (tests/platform_schemas/), the correct one earns every
   point, the attack earns nothing of ``reparameterize_value`` and leaves nothing but ``results.json``.

Usage: ``python deploy/image/check.py [--image IMAGE] [--out out/image-check]``; exits 1 on any difference.
Prints each step's time, and writes ``OUT/summary.json``.
"""
from __future__ import annotations

import argparse
import csv
import json
import os
import shutil
import subprocess
import sys
import time
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import jsonschema  # noqa: E402

from autograder.demo import copy_samples, representative  # noqa: E402

PODMAN = [str(ROOT / "deploy" / "image" / "podman.sh")]
LAB = "lab1_vae"
FILESYSTEM_ATTACKS = ["attack_read_solutions", "attack_write_others", "attack_gradebook"]
PLATFORM_KINDS = {"reference": "correct", "attack_read_solutions": "attack"}
IMAGE_PYTHON = "/opt/venv/bin/python"   # the Dockerfile's venv: setup.sh's already-installed equivalent
GENLAB = str(Path(sys.executable).parent / "genlab")   # outside: the genlab of the venv this runs in (make's)


def timed(argv: list[str], **kwargs) -> tuple[subprocess.CompletedProcess, float]:
    start = time.monotonic()
    done = subprocess.run(argv, capture_output=True, text=True, **kwargs)
    return done, time.monotonic() - start


def grades(path: Path) -> dict[tuple[str, str, str], tuple[float, str]]:
    with open(path) as f:
        return {(r["student"], r["lab"], r["test"]): (float(r["score"]), r["status"]) for r in csv.DictReader(f)}


def compare(outside: dict, inside: dict) -> list[str]:
    """Every row whose score or status differs, or that one side lacks."""
    found = []
    for key in sorted(set(outside) | set(inside)):
        a, b = outside.get(key), inside.get(key)
        if a != b:
            found.append(f"{'/'.join(key)}: outside {a}, in the image {b}")
    return found


def grade_demo(image: str, out: Path, workers: str) -> dict:
    pairs = representative() + [(name, LAB) for name in FILESYSTEM_ATTACKS]
    outside_subs, inside_subs = copy_samples(pairs, out / "submissions-outside"), copy_samples(pairs, out / "submissions")
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    outside, outside_s = timed([GENLAB, "--root", str(ROOT), "grade", str(outside_subs),
                                "--out", str(out / "outside"), "--workers", workers, "--quiet"], env=env)
    print(f"outside: {len(pairs)} notebooks graded in {outside_s:.0f} s (rc {outside.returncode})", flush=True)
    (out / "inside").mkdir()
    inside, inside_s = timed(PODMAN + ["run", "--rm", "-e", "OMP_NUM_THREADS=1", "-v", f"{inside_subs}:/submissions",
                                       "-v", f"{out / 'inside'}:/out", image, "genlab", "grade", "/submissions",
                                       "--out", "/out", "--workers", workers, "--quiet"])
    print(f"in the image: graded in {inside_s:.0f} s (rc {inside.returncode})", flush=True)
    wall = next((line for line in inside.stderr.splitlines() if line.startswith("genlab grade: ")), "")
    print(f"  {wall or 'no line says which wall graded'}")
    problems = []
    for name, done in (("outside", outside), ("in the image", inside)):
        if done.returncode != 0:
            problems.append(f"genlab grade {name} exited {done.returncode}: {done.stderr[-2000:]}")
    if not wall:
        problems.append("the image's genlab grade did not say which wall graded")
    rows = 0
    if not problems:
        a, b = grades(out / "outside" / "grades.csv"), grades(out / "inside" / "grades.csv")
        rows = len(a)
        problems += compare(a, b)
        print(f"grades.csv: {rows} rows outside, {len(b)} in the image, {len(compare(a, b))} differ")
    return {"notebooks": len(pairs), "rows": rows, "outside_s": round(outside_s), "inside_s": round(inside_s),
            "wall": wall, "problems": problems}


def release(out: Path) -> dict[str, Path]:
    done, seconds = timed([GENLAB, "--root", str(ROOT), "release", "--gradescope",
                           LAB, str(out / "gs"), "--prairielearn", LAB, str(out / "pl")])
    if done.returncode != 0:
        raise SystemExit(f"genlab release --gradescope/--prairielearn failed: {done.stderr[-3000:]}")
    print(f"genlab release --gradescope/--prairielearn {LAB}: {seconds:.0f} s", flush=True)
    return {"gradescope": out / "gs" / "autograder.zip", "prairielearn": out / "pl" / "image"}


def run_platform(image: str, platform: str, built: dict[str, Path], sample: str, root: Path) -> dict:
    """``sample`` handed in through ``platform``'s entry point, in the image; what its results say."""
    notebook = ROOT / "autograder" / "samples" / sample / LAB / f"{LAB}.ipynb"
    if platform == "gradescope":
        base = root / "autograder"
        for folder in ("source", "submission", "results"):
            (base / folder).mkdir(parents=True)
        with zipfile.ZipFile(built["gradescope"]) as archive:
            archive.extractall(base / "source")
            for info in archive.infolist():   # extractall keeps no modes: the executable bits, as unzip does
                if (info.external_attr >> 16) & 0o111:
                    (base / "source" / info.filename).chmod(0o755)
        shutil.copy(base / "source" / "run_autograder", base / "run_autograder")
        shutil.copy(notebook, base / "submission" / f"{LAB}.ipynb")
        mounts, entry, results = ["-v", f"{base}:/autograder"], "/autograder/run_autograder", base / "results"
    else:
        tree, grade = root / "genlab-grader", root / "grade"
        shutil.copytree(built["prairielearn"], tree)
        for folder in ("student", "data"):
            (grade / folder).mkdir(parents=True)
        (grade / "data" / "data.json").write_text(json.dumps({"params": {}, "correct_answers": {}}))
        shutil.copy(notebook, grade / "student" / f"{LAB}.ipynb")
        mounts = ["-v", f"{tree}:/opt/genlab-grader", "-v", f"{grade}:/grade"]
        entry, results = "/opt/genlab-grader/run_prairielearn", grade / "results"
    # The image holds a second copy of the course, /opt/genlab, readable by every user (Apptainer runs the image
    # as the submitting user); the entry point closes only its own tree, and in container mode a kernel reads
    # what any user may: closed first, but for the student package kernels import (shared/).
    close = "find /opt/genlab -mindepth 1 -maxdepth 1 ! -name shared -exec chmod go-rwx {} + && exec \"$0\""
    done, seconds = timed(PODMAN + ["run", "--rm", "-e", f"GENLAB_PYTHON={IMAGE_PYTHON}", "-e", "OMP_NUM_THREADS=1",
                                    *mounts, image, "sh", "-c", close, entry])
    problems, data = [], {}
    try:
        data = json.loads((results / "results.json").read_text())
        schema = json.loads((ROOT / "tests" / "platform_schemas" / f"{platform}-results.schema.json").read_text())
        jsonschema.Draft202012Validator(schema).validate(data)
    except (OSError, ValueError, jsonschema.ValidationError) as exc:
        problems.append(f"{platform}/{sample}: no valid results.json ({exc}); rc {done.returncode}: "
                        f"{done.stdout[-1500:]} {done.stderr[-1500:]}")
    if platform == "gradescope":
        tests = {t["name"]: (t["score"], t["max_score"]) for t in data.get("tests", [])}
    else:
        tests = {t["name"]: (t["points"], t["max_points"]) for t in data.get("tests", [])}
    wall = next((line for line in done.stdout.splitlines() if line.startswith("genlab: Graded in")), "")
    if not problems:
        if not wall:
            problems.append(f"{platform}/{sample}: the output does not say which wall graded")
        if not tests:
            problems.append(f"{platform}/{sample}: nothing graded: {data}")
        elif PLATFORM_KINDS[sample] == "correct" and any(s != m for s, m in tests.values()):
            problems.append(f"{platform}/{sample}: the correct notebook lost points: {tests}")
        elif PLATFORM_KINDS[sample] == "attack" and tests.get("reparameterize_value", (1,))[0] != 0:
            problems.append(f"{platform}/{sample}: the attack earned reparameterize_value: {tests}")
        left = sorted(p.name for p in results.iterdir())
        if left != ["results.json"]:
            problems.append(f"{platform}/{sample}: the results folder holds {left}")
    got, most = sum(s for s, _ in tests.values()), sum(m for _, m in tests.values())
    print(f"{platform}, {sample} ({PLATFORM_KINDS[sample]}): {got:g} / {most:g} in {seconds:.0f} s; {wall}", flush=True)
    return {"platform": platform, "sample": sample, "score": got, "max": most, "seconds": round(seconds),
            "wall": wall, "problems": problems}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--image", default=os.environ.get("IMAGE", "localhost/genlab-grader"))
    parser.add_argument("--out", default=str(ROOT / "out" / "image-check"))
    parser.add_argument("--workers", default="2")
    args = parser.parse_args(argv)
    out = Path(args.out).resolve()
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    if subprocess.run(PODMAN + ["image", "exists", args.image]).returncode != 0:
        raise SystemExit(f"no image {args.image}: run make image first")
    start = time.monotonic()
    summary = {"image": args.image, "demo": grade_demo(args.image, out, args.workers), "platforms": []}
    built = release(out)
    for platform in ("gradescope", "prairielearn"):
        for sample in PLATFORM_KINDS:
            summary["platforms"].append(run_platform(args.image, platform, built, sample, out / f"{platform}-{sample}"))
    summary["seconds"] = round(time.monotonic() - start)
    problems = summary["demo"]["problems"] + [p for r in summary["platforms"] for p in r["problems"]]
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    print(f"image-check: {summary['seconds']} s in all; {len(problems)} problem(s)")
    for problem in problems:
        print(f"  {problem}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
