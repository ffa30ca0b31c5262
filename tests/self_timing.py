"""The reference timed against itself, N times, with the grader's measurement (issue 39): how many fail, and the spread.

    nice -n 10 .venv/bin/python tests/self_timing.py [--runs 100] [--lab lab1_vae]

Each run is what a timing test does in grading: ``check_not_slower(student, reference, ...)`` on the lab's timing
inputs, where "student" is the reference solution's cells, measured in fresh processes forked from a sandboxed
zygote (autograder.wall.measure) against the reference's own. A failure is a run whose verdict is "too slow".
"""
from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from autograder.grading import pipeline  # noqa: E402
from autograder.wall import measure, sandbox  # noqa: E402
from genlab import check_not_slower  # noqa: E402
from genlab.checks import CheckFailed  # noqa: E402

# The timing test's call of each lab (its function and inputs, as the lab's hidden test draws them).
CALLS = {
    "lab1_vae": ("reparameterize", lambda: (torch.manual_seed(0),
                                            (torch.randn(512, 64), torch.randn(512, 64), torch.randn(512, 64)))[1]),
}


class Measured:
    """What a RemoteFunction does for a timing test, with the reference's cells as the student's."""

    def __init__(self, zygote, name, activations, results):
        self.zygote, self.__name__, self.activations, self.results = zygote, name, activations, results

    def __genlab_time_ratio__(self, reference, args, kwargs):
        kwargs = dict(kwargs)
        clear_below = kwargs.pop("clear_below", None)
        kwargs.pop("min_run_time", None)
        kwargs.pop("rounds", None)
        result = measure.time_ratio(self.zygote, self.__name__, reference, self.__name__, args, kwargs,
                                    cells=self.zygote.reference_cells, reference_cells=self.zygote.reference_cells,
                                    activations=self.activations, clear_below=clear_below)
        self.results.append(result)
        return result


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=100)
    parser.add_argument("--lab", default="lab1_vae", choices=sorted(CALLS))
    options = parser.parse_args()
    torch.set_num_threads(1)
    lab = pipeline.Lab.load(ROOT, options.lab)
    name, inputs = CALLS[options.lab]
    scratch = Path(tempfile.mkdtemp(prefix="genlab-self-timing-"))
    work = scratch / "m"
    work.mkdir()
    config = sandbox.SandboxConfig()
    argv = None
    if not sandbox.probe():
        sandbox.prepare_workdir(work)
        argv = sandbox.launcher(config, work)
    source = lab.source
    zygote = measure.Zygote(work, launcher=argv, cgroup_limits=(config.memory_bytes, config.max_processes),
                            setup_source=source.setup_source, modules=lab.setup_modules, reference=lab.reference,
                            reference_cells=[source.setup_source, *source.solutions.values()]).start()
    results: list = []
    verdicts: list = []
    failures = 0
    start, cpu = time.perf_counter(), time.process_time()
    try:
        fn = Measured(zygote, name, tuple(lab.differentiated.get(name, ())), results)
        for run in range(options.runs):
            try:
                verdicts.append(check_not_slower(fn, getattr(lab.reference, name), *inputs()).ratio)
            except CheckFailed as exc:
                failures += 1
                print(f"run {run}: FAILED: {exc}", flush=True)
    finally:
        zygote.shutdown()
        shutil.rmtree(scratch, ignore_errors=True)
    cpu_ratios = [r.cpu_ratio for r in results]
    wall_ratios = [r.wall_ratio for r in results]

    def spread(xs):
        q = statistics.quantiles(xs, n=20)
        return (f"min {min(xs):.3f}  5% {q[0]:.3f}  median {statistics.median(xs):.3f}  95% {q[-1]:.3f}  "
                f"max {max(xs):.3f}")

    print(f"{options.lab}.{name}: {options.runs} runs of the reference against itself, {failures} failed "
          f"(max_ratio 5); {len(results)} measurements")
    print(f"  verdict ratio: {spread(verdicts)}")
    print(f"  CPU ratio:     {spread(cpu_ratios)}")
    print(f"  clock ratio:   {spread(wall_ratios)}")
    print(f"  {time.perf_counter() - start:.0f} s by the clock, {time.process_time() - cpu:.0f} s of this process's CPU")


if __name__ == "__main__":
    main()
