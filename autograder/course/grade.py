"""``genlab grade SUBMISSIONS --out DIR``: grade a folder laid out as nbgrader's ``submitted/`` tree.

Writes, under DIR (see :mod:`autograder.course.feedback`):
- ``grades.csv``: one row per student and test: student,lab,test,score,max_score,status,diagnosis
- ``results.json``: the same with messages, repairs made to the notebook, tampering evidence, times per step
- ``gradebook.db``: nbgrader's gradebook (scores as auto_score), so nbgrader's tools keep working
- ``autograded/<student>/<lab>/<lab>.ipynb`` and ``feedback/<student>/<lab>/<lab>.html`` (nbgrader's feedback)
"""
from __future__ import annotations

import hashlib
import os
import shutil
import sys
import tempfile
import time
import traceback
from collections import deque
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, ThreadPoolExecutor, wait
from contextlib import ExitStack
from dataclasses import dataclass, field, replace
from multiprocessing import util as mp_util
from pathlib import Path

from tqdm.auto import tqdm

from autograder.grading import cache
from autograder.course import gradebook
from autograder.grading import pipeline
from autograder.course.feedback import write_outputs
from autograder.course.gradebook import default_db_url
from autograder.wall.kernel import KernelSession
from autograder.wall.measure import Zygote
from autograder.core.labs import LabFolder, lab_ids
from autograder.core.limits import Limits
from autograder.wall.policy import lab_policy
from autograder.core.results import Result, Status
from autograder.wall import container
from autograder.wall.container import WALL_ENV, closed_around
from autograder.wall.sandbox import SandboxConfig, SandboxUnavailable, launcher, prepare_workdir, visible_paths
from autograder.grading.submissions import Found, locate, students
from genlab.testing.notebook import grade_id

# A spare kernel imports the modules the next notebook's setup cell will (torchmetrics, peft, rdkit: seconds
# each) while the current notebook is graded; it defines no name the notebook could see.
WARM = """for _genlab_module in {modules!r}:
    try:
        __import__(_genlab_module)
    except Exception:
        pass
del _genlab_module"""


@dataclass
class Run:
    """What every worker needs to know about this grading run (sent to worker processes once per job)."""

    root: Path
    out: Path
    scratch: Path                      # kernels' scratch folders (short paths: Unix socket names are limited)
    limits: Limits
    sandbox: SandboxConfig | None      # None: --unsafe
    prestart: bool = True              # keep the next kernel starting while a notebook is graded


class Kernels:
    """Sandboxed kernels for one worker, each in a scratch folder of its own, booted (genlab's request
    server installed before any student code). The next one is started while the current one is in use,
    so kernel start and imports overlap with grading; one spare per worker keeps memory bounded."""

    def __init__(self, run: Run):
        self.run = run
        self._starter = ThreadPoolExecutor(max_workers=1, thread_name_prefix="genlab-kernel-start")
        self._spare: Future | None = None
        self.warm: tuple[str, ...] = ()  # modules the next notebook's setup cell imports (the lab just loaded)
        self.more = True                 # another notebook follows this one: worth a spare kernel
        # Container mode without a uid given for the run (genlab grade): each student kernel runs as a uid of
        # its own, claimed in the run's scratch folder, and what it left running is killed once its notebook is
        # graded (sweep), before the next kernel of that worker runs student code.
        sandbox = run.sandbox
        self.own_uids = sandbox is not None and sandbox.mode == container.CONTAINER and sandbox.uid is None
        self._uid_of: dict[int, int] = {}   # id(session) -> its uid, until handed out by take()
        self.taken: list[int] = []          # the uids of the kernels handed out since the last sweep
        if self.own_uids:
            container.become_subreaper()     # not inherited by a worker process: each adopts its kernels' orphans
        mp_util.Finalize(self, self.close, exitpriority=10)  # also runs when a pool worker process exits

    def _start(self, warm: tuple[str, ...] = (), reference: bool = False) -> KernelSession:
        workdir = Path(tempfile.mkdtemp(prefix="k-", dir=self.run.scratch))
        sandbox = self.run.sandbox
        argv = None
        if sandbox is not None:
            prepare_workdir(workdir)
            uid = None
            if sandbox.mode == container.CONTAINER:  # no namespaces: the reference kernel runs as the grader
                if self.own_uids and not reference:
                    uid = container.claim_uid(self.run.scratch)
                    sandbox = replace(sandbox, uid=uid)
                argv = container.launcher(sandbox, workdir, as_grader=reference)
            else:
                argv = launcher(sandbox, workdir)
        session = KernelSession(workdir, self.run.limits, launcher=argv, remove_workdir=True,
                                cgroup_limits=(sandbox.memory_bytes, sandbox.max_processes) if sandbox else None)
        if sandbox is not None and uid is not None:
            self._uid_of[id(session)] = uid
        session.start()
        ready = session.run_cell(session.boot_source, silent=True)   # the request server, before any other cell
        if ready.status != "ok":
            session.shutdown()
            raise RuntimeError(f"could not prepare the kernel: {ready.error}")
        session.take_baseline()   # kept here, in the grader: the kernel cannot take it again
        if warm:  # importing is all it does: the setup cell still runs first among the notebook's cells
            session.run_cell(WARM.format(modules=warm), silent=True)
        return session

    def take(self) -> KernelSession:
        spare, self._spare = self._spare, None
        session = spare.result() if spare is not None else self._start()
        session.started_at = time.monotonic()  # the notebook's time limit counts from now, not from the boot
        if id(session) in self._uid_of:
            self.taken.append(self._uid_of.pop(id(session)))
        if self.run.prestart and self.more:
            self._spare = self._starter.submit(self._start, self.warm)
        return session

    def reference(self) -> KernelSession:
        return self._start(reference=True)

    def measurer(self, lab: "pipeline.Lab") -> Zygote:
        """The lab's measuring processes (autograder.wall.measure): a zygote in the same sandbox as a kernel,
        which has run the lab's setup cell and forks one fresh process per time or memory measurement."""
        workdir = Path(tempfile.mkdtemp(prefix="m-", dir=self.run.scratch))
        sandbox = self.run.sandbox
        argv = None
        if sandbox is not None:
            prepare_workdir(workdir)
            argv = (container.launcher(sandbox, workdir) if sandbox.mode == container.CONTAINER
                    else launcher(sandbox, workdir))
        limits = (sandbox.memory_bytes, sandbox.max_processes) if sandbox else (self.run.limits.memory_bytes, 64)
        source = lab.source
        return Zygote(workdir, self.run.limits, argv, limits, setup_source=source.setup_source,
                      modules=lab.setup_modules, reference=lab.reference,
                      reference_cells=[source.setup_source, *source.solutions.values()]).start()

    @property
    def background(self) -> ThreadPoolExecutor | None:
        """Where kernels start while a notebook is graded (None: everything starts when needed)."""
        return self._starter if self.run.prestart else None

    def sweep(self) -> None:
        """Container mode: kills every process left by the kernels handed out since the last sweep (their
        notebooks graded, the kernels shut down) and gives their uids back; raises if any outlives SIGKILL."""
        taken, self.taken = self.taken, []
        left = {}
        for uid in taken:
            alive = container.sweep(uid)
            if alive:
                left[uid] = alive
            else:
                container.release_uid(self.run.scratch, uid)
        if left:
            raise RuntimeError(f"processes of a student kernel's uid outlived it and SIGKILL: {left}")

    def close(self) -> None:
        if self._spare is not None:
            try:
                self._spare.result().shutdown()
            except Exception:  # noqa: BLE001 - a spare that failed to start has nothing to stop
                pass
            self._spare = None
        self._starter.shutdown(wait=False)
        if self.own_uids:   # the spare's uid too, and whatever a failed start left
            self.taken += list(self._uid_of.values())
            self._uid_of.clear()
            try:
                self.sweep()
            except RuntimeError as exc:
                print(f"genlab: {exc}", file=sys.stderr)


@dataclass
class Worker:
    """Per worker process: kernels, and each lab's definition and reference kernel, loaded once."""

    run: Run
    kernels: Kernels
    labs: dict[str, tuple[pipeline.Lab, pipeline.ReferenceKernel]] = field(default_factory=dict)

    def lab(self, lab_id: str) -> tuple[pipeline.Lab, pipeline.ReferenceKernel]:
        if lab_id not in self.labs:
            lab = pipeline.Lab.load(self.run.root, lab_id)
            lab.import_test_modules()  # here, not inside a test's time limit
            # The reference kernel runs in the same sandbox, so both sides of a timing ratio pay the same costs.
            # Time and memory are measured on fresh processes (autograder.wall.measure); GENLAB_MEASURE_IN_KERNEL=1
            # measures them in the kernels as before issue 39, only to compare the two (autograder/bench.py).
            # Container mode has no zygote: its measured processes, running students' code one after another as
            # one uid without namespaces, could leave a process behind that reads the next student's. It measures
            # in the kernels, as it always did (its launcher needs a uid per kernel, so a zygote never started
            # there and the old fallback hid it): docs/trust-model.md, "Container mode".
            sandbox = self.run.sandbox
            fresh = (os.environ.get("GENLAB_MEASURE_IN_KERNEL") != "1"
                     and not (sandbox is not None and sandbox.mode == container.CONTAINER))
            self.labs[lab_id] = lab, pipeline.ReferenceKernel(lab, self.kernels.reference, self.kernels.background,
                                                              start_measurer=self.kernels.measurer if fresh else None)
        self.kernels.warm = self.labs[lab_id][0].setup_modules
        return self.labs[lab_id]

    def close(self) -> None:
        for _lab, reference_kernel in self.labs.values():
            reference_kernel.shutdown()
        self.labs.clear()
        self.kernels.close()


_worker: Worker | None = None


def close_worker() -> None:
    """Stops this process's kernels: the reference kernels of the labs it loaded, and any spare (worker
    processes close theirs when they exit)."""
    if _worker is not None:
        _worker.close()


def _worker_for(run: Run) -> Worker:
    global _worker
    if _worker is None or _worker.run != run:
        if _worker is not None:
            _worker.close()
        _worker = Worker(run, Kernels(run))
        mp_util.Finalize(_worker, _worker.close, exitpriority=10)
    return _worker


def grade_one(run: Run, student: str, lab_id: str, found: Found, more: bool = True) -> tuple[Result, bool]:
    """One student's notebook for one lab: (result, whether it was reused from an earlier run). ``more``: this
    worker may grade another notebook after it (if not, no spare kernel is started for one)."""
    worker = _worker_for(run)
    worker.kernels.more = more
    if not found.refused:  # unchanged since the last run: reused before anything of the lab is loaded
        folder = LabFolder(run.root, lab_id)
        # The lab's policy for graded code is part of the key: a changed allowlist grades every notebook again.
        result_key = cache.key(found.path, [folder.source, folder.release, folder.bodies_file],
                               (run.limits, lab_policy(run.root, lab_id)))
        cached = cache.load(run.out, student, lab_id, result_key)
        if cached is not None:
            return cached, True
    lab, reference_kernel = worker.lab(lab_id)
    if found.refused:  # never opened: a link out of the folder, a pipe, a file of gigabytes
        return Result.every_test(student, lab_id, lab.points, Status(found.status), found.refused,
                                 evidence=[found.refused] if found.status == Status.TAMPERED else []), False
    try:
        try:
            result = pipeline.grade_notebook(student, lab, found.path, limits=run.limits,
                                             start_kernel=worker.kernels.take, reference_kernel=reference_kernel)
        finally:
            worker.kernels.sweep()   # container mode: nothing the student's kernel started outlives its grading
    except Exception:  # noqa: BLE001 - a grader fault on one notebook must not lose anyone's rows
        trace = traceback.format_exc()
        with (run.out / "grader-errors.log").open("a") as log:
            log.write(f"== {student}/{lab_id}\n{trace}\n")
        return Result.every_test(student, lab_id, lab.points, Status.ERROR,
                                 "the grader could not grade this notebook (an instructor will look: see "
                                 "grader-errors.log); nothing was marked wrong in your code",
                                 notes=[f"internal grader error: {trace.strip().splitlines()[-1]}"]), False
    if found.note:
        result.notes.insert(0, found.note)
    if not any(note.startswith(pipeline.NOT_GRADED) for note in result.notes):   # else graded again next run
        cache.store(run.out, result, result_key)
    return result, False


def find_work(root: Path, submissions: Path, labs: list[str], every_student: bool,
              max_bytes: int) -> list[tuple[str, str, Found]]:
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


class LabAffinity:
    """Which notebook a free worker grades next. Each worker loads a lab once (its release, and a reference
    kernel that imports the lab's libraries: seconds of CPU), so a worker keeps to the labs it has loaded;
    when those are done it takes the lab with the most notebooks left, preferring one no other worker holds.
    Every notebook is still handed out exactly once."""

    def __init__(self, work: list[tuple[str, str, Found]]):
        self.left: dict[str, deque] = {}
        for task in work:
            self.left.setdefault(task[1], deque()).append(task)

    def next_for(self, mine: set[str], others: set[str]) -> tuple[str, str, Found] | None:
        open_labs = [lab for lab, tasks in self.left.items() if tasks]
        if not open_labs:
            return None
        held = [lab for lab in open_labs if lab in mine]
        free = [lab for lab in open_labs if lab not in others]
        lab = max(held or free or open_labs, key=lambda lab: len(self.left[lab]))
        return self.left[lab].popleft()

    def left_count(self) -> int:
        return sum(len(tasks) for tasks in self.left.values())


def grade_in_parallel(run: Run, work: list[tuple[str, str, Found]], workers: int, report) -> None:
    """``workers`` processes, one notebook each at a time, handed out by :class:`LabAffinity`."""
    plan = LabAffinity(work)
    with ExitStack() as stack:
        pools = [stack.enter_context(ProcessPoolExecutor(max_workers=1)) for _ in range(workers)]
        loaded: list[set[str]] = [set() for _ in pools]
        running: dict[Future, int] = {}

        def hand_out(k: int) -> None:
            task = plan.next_for(loaded[k], set().union(*(loaded[j] for j in range(workers) if j != k)))
            if task is not None:
                loaded[k].add(task[1])
                running[pools[k].submit(grade_one, run, *task, more=plan.left_count() > 0)] = k

        for k in range(workers):
            hand_out(k)
        while running:
            done, _ = wait(running, return_when=FIRST_COMPLETED)
            for future in done:
                k = running.pop(future)
                report(*future.result())
                hand_out(k)


def grade_all(root: Path, submissions: Path, out: Path, *, workers: int = 1, labs: list[str] | None = None,
              limits: Limits | None = None, progress=True, unsafe: bool = False, db_url: str | None = None,
              shard: tuple[int, int] = (0, 1), prestart: bool = True,
              course_toml: Path | None = None, allow_container: bool = True) -> list[Result]:
    """Grades every notebook of ``submissions`` into ``out`` (see the module's docstring). The wall: bubblewrap
    where it works; where it cannot (a container without the namespaces it needs) container mode, unless
    ``allow_container`` is false (course.toml's ``[platform] allow_container_mode``: the command line passes
    it); ``GENLAB_WALL`` forces either. Which one graded is printed on standard error before any kernel starts."""
    root, submissions, out = Path(root).resolve(), Path(submissions).resolve(), Path(out).resolve()
    limits = limits or Limits()
    unknown = sorted(set(labs or []) - set(lab_ids(root)))
    if unknown:
        raise SystemExit(f"unknown lab(s) {unknown}: the labs are {lab_ids(root)}")
    every_student = bool(labs)
    labs = labs or lab_ids(root)
    out.mkdir(parents=True, exist_ok=True)
    out.chmod(0o700)  # grades, cache and feedback: the grader's user only, never a kernel of this or a later run
    sandbox, scratch, saved = choose_wall(root, submissions, out, limits, unsafe, allow_container)
    # Kernels talk over Unix sockets in their scratch folders, and a socket path is limited to 107 bytes:
    # keep scratch short, in the temp folder, not under a possibly deep --out.
    run = Run(root, out, scratch, limits, sandbox, prestart)
    work = [w for w in find_work(root, submissions, labs, every_student, limits.max_notebook_bytes)
            if in_shard(w[0], shard)]
    labs = sorted({lab for _, lab, _ in work}) or labs
    db_url = db_url or default_db_url(out)
    # The gradebook's setup (seconds of nbgrader) runs in a process of its own while the notebooks are graded,
    # at the lowest priority, so it takes only idle CPU and never slows a timing test's kernels; started
    # before any thread of this process, so the fork copies no held lock.
    setup = ProcessPoolExecutor(max_workers=1, initializer=os.nice, initargs=(19,))
    prepared = setup.submit(gradebook.prepare, db_url, root, labs, out / ".release")
    results: list[Result] = []
    reused = 0
    bar = tqdm(total=len(work), unit="notebook", disable=not progress, file=sys.stderr)

    def report(result: Result, was_cached: bool):
        nonlocal reused
        reused += was_cached
        results.append(result)
        bar.set_postfix_str(f"{result.student}/{result.lab} {result.total:g}/{result.max_total:g}"
                            + (" (unchanged)" if was_cached else ""))
        bar.update()

    try:
        if workers <= 1:
            for i, (student, lab, found) in enumerate(work):
                report(*grade_one(run, student, lab, found, more=i < len(work) - 1))
        else:
            grade_in_parallel(run, work, workers, report)
    finally:
        bar.close()
        close_worker()  # this process's own kernels (worker processes close theirs when they exit)
        shutil.rmtree(run.scratch, ignore_errors=True)
        container.restore(saved)   # container mode: the course and submissions' owners and modes as they were
    if reused and progress:
        print(f"{reused} of {len(work)} notebooks unchanged since the last run: their results were reused",
              file=sys.stderr)
    results.sort(key=lambda r: (r.student, r.lab))
    prepared.exception()  # a setup that failed is redone by write_outputs, which then reports the error
    setup.shutdown()
    write_outputs(root, out, results, labs, db_url, workers, submissions=submissions,  # late penalties
                  course_toml=course_toml)
    return results


def choose_wall(root: Path, submissions: Path, out: Path, limits: Limits, unsafe: bool,
                allow_container: bool) -> tuple[SandboxConfig | None, Path, list[container.Saved]]:
    """The run's wall (see :func:`grade_all`), its scratch folder, and in container mode the owners and modes
    of what it closed (for :func:`autograder.wall.container.restore`). Raises
    :class:`~autograder.wall.sandbox.SandboxUnavailable` when no wall may grade here and ``unsafe`` is false.

    Container mode closes the course checkout but the Python environment and the student package kernels
    import (:func:`autograder.wall.container.closed_around`), the submissions and ``out`` to the kernels'
    uids, and checks as such a uid that it reaches none of them (nor the reference solutions) before any
    kernel starts; it restores owners and modes when the run ends."""
    config = SandboxConfig(memory_bytes=limits.memory_bytes, max_processes=limits.max_processes,
                           max_file_bytes=limits.max_file_bytes, scratch_bytes=limits.max_scratch_bytes,
                           scratch_files=limits.max_scratch_files,
                           hide=[root / "solutions", root / "autograder", root / ".git", out, submissions])
    wall = container.choose(allow_container, os.environ.get(WALL_ENV, ""))
    saved: list[container.Saved] = []
    if not wall.refused and wall.mode == container.CONTAINER:
        scratch = container.scratch_folder()
        config = replace(config, mode=container.CONTAINER)
        keep = [p for p in visible_paths() if p.is_relative_to(root)]
        closing = [*closed_around(root, keep), submissions, out]
        saved, unchanged = container.lock_restorably(closing)
        solutions = [p for p in (root / "solutions").glob("*/*") if p.is_file()]
        probe_uid = container.claim_uid(scratch)
        wall = container.hold(wall, replace(config, uid=probe_uid), scratch, [*closing, *solutions, scratch],
                              [p for p in closing if p.is_dir()] + [scratch])
        container.release_uid(scratch, probe_uid)
        if wall.refused and unchanged:
            wall = replace(wall, refused=f"{wall.refused} (could not close {', '.join(unchanged)}: a read-only "
                                         "mount must be closed to other users, mode 700, where it is mounted from)")
        if wall.refused:
            container.restore(saved)
            shutil.rmtree(scratch, ignore_errors=True)
            saved = []
    if not wall.refused:
        print(f"genlab grade: {wall.describe()}", file=sys.stderr, flush=True)
        if wall.mode == container.CONTAINER:
            return config, scratch, saved
        return config, Path(tempfile.mkdtemp(prefix="genlab-")), []
    if not unsafe:
        why = wall.refused if not wall.why or wall.why in wall.refused else f"{wall.why}; and {wall.refused}"
        raise SandboxUnavailable(f"refusing to grade without a sandbox: {why}. Student code could then read the "
                                 "hidden tests and write the gradebook. Install bubblewrap, or pass --unsafe to "
                                 "grade trusted notebooks anyway.")
    print("WARNING: grading WITHOUT a sandbox (--unsafe): student code can read the hidden tests and write "
          f"the gradebook. ({wall.refused})", file=sys.stderr)
    return None, Path(tempfile.mkdtemp(prefix="genlab-")), []


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
