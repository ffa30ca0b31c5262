"""Grading one submission: a short list of named steps over one :class:`Grading` state.

Like nbgrader's converters list their preprocessors, :data:`STEPS` lists what happens to a handed-in
notebook, in order; each step is a small function of the state, testable alone, and a step that concludes
early (nothing handed in, an unreadable file) sets ``state.result`` and the remaining steps are skipped:

    read -> assemble -> scan -> policy -> start kernel -> run cells -> integrity -> stop kernel -> diagnose -> verdict

Test cells run *in this process*, where they stand in the notebook, with the student's functions bound to
proxies into the kernel (:mod:`autograder.wall.remote`) and the reference loaded from ``solutions/``; student
cells run in the student's kernel. So a test that ran keeps its result whatever happens later in the
notebook, and no verdict is ever taken inside the student's process.

By default only what the tests need runs (setup, the student's own cells, cells tagged ``grade-needs``),
in notebook order; ``Limits.full_run`` runs every cell. When a student's code then misses a name that a
skipped cell defines, the notebook is graded again in full, with a note (:func:`grade_notebook`).
"""
from __future__ import annotations

import ast
import contextlib
import importlib
import io
import re
import time
import warnings
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Callable

import nbformat

from autograder.grading import behaviour
from autograder.grading.assemble import Assembled, assemble
from autograder.wall.channel import ChannelTampered
from autograder.wall.kernel import KernelLost, KernelSession, RemoteTimeout
from autograder.wall.measure import MeasureError
from autograder.core.labs import LabFolder
from autograder.core.limits import Limits
from autograder.wall.remote import KeptCalls, KeptRecorder, RemoteFunction
from autograder.core.results import Result, Status
from autograder.core.sanitize import student_text
from autograder.wall.policy import Refusals, lab_policy, refusals
from autograder.wall.scan import scan_notebook
from genlab.catalog import Bug, bugs_for
from genlab.policy import student_cells
from genlab.testing.diagnosis import diagnose
from genlab.testing.notebook import LabNotebook, grade_id, is_setup, is_solution, is_test
from genlab.testing.properties import use_table
from genlab.testing.reference import Reference
from genlab.testing.runner import Outcome, run_test
from genlab.testing.wire import Encoder

GRADE_NEEDS = "grade-needs"   # cell tag: a lab cell the tests depend on (trained state, data)
MAX_MESSAGE_CHARS = 12000   # one test's message, a note, an evidence line (the kernel's parts are capped lower)
MEMORY_ERRORS = ("can't allocate memory", "MemoryError", "CUDA out of memory", "OutOfMemoryError")
SCRATCH_FULL = "No space left on device"   # ENOSPC: the scratch tmpfs is full, in bytes or in files


# -- what is loaded once per lab and worker ---------------------------------------------------------------
@dataclass
class Lab:
    """One lab as the grader sees it: the source (solutions, hidden tests), the release, the reference."""

    folder: LabFolder
    source: LabNotebook
    release: nbformat.NotebookNode

    @classmethod
    def load(cls, root: Path, lab: str) -> "Lab":
        folder = LabFolder(Path(root), lab)
        return cls(folder, LabNotebook.read(folder.source), nbformat.read(str(folder.release), as_version=4))

    @property
    def id(self) -> str:
        return self.folder.id

    @property
    def tests(self) -> dict[str, dict]:
        return self.source.tests

    @property
    def points(self) -> dict[str, float]:
        return {t: spec["points"] for t, spec in self.tests.items()}

    @property
    def functions(self) -> list[str]:
        return list(self.source.solutions)

    @cached_property
    def differentiated(self) -> dict[str, tuple[int, ...]]:
        """The inputs whose gradient the tests take, by function: every call makes them activations."""
        return self.source.differentiated

    @cached_property
    def setup_modules(self) -> tuple[str, ...]:
        """The absolute module names the setup cell imports, in order (a spare kernel imports them early)."""
        return imported_modules(self.source.setup_source)

    @cached_property
    def test_modules(self) -> tuple[str, ...]:
        """The absolute module names the test cells import (peft in Lab 4's): the grader's process, where the
        tests run, imports them when it loads the lab, so that no test pays the import inside its time limit
        (peft with transformers took 36 s on a loaded 2-core machine, over the 20 s a test may take)."""
        return tuple(dict.fromkeys(m for spec in self.tests.values() for m in imported_modules(spec["source"])))

    def import_test_modules(self) -> None:
        for name in self.test_modules:
            try:
                importlib.import_module(name)
            except Exception:  # noqa: BLE001 - the test that imports it fails with the error, in its own time
                pass

    @cached_property
    def policy(self):
        """The policy for graded code of this lab (course.toml ``[policy]``; :mod:`autograder.wall.policy`)."""
        return lab_policy(self.folder.root, self.id)

    @cached_property
    def bugs(self) -> list[Bug]:
        """The lab's catalogue, each bug as its full body where the instructor's ``bugs.py`` has one (an edit
        of the student's function is bound to the reference at diagnosis instead)."""
        return self.folder.bugs

    @cached_property
    def reference(self) -> Reference:
        """The reference solution, executed once in this process: hidden tests and diagnosis share it."""
        return Reference.load(self.source)

    def test_globals(self) -> dict:
        """The names a test cell may use: the setup cell's (run afresh for each notebook: it seeds the random
        generators the tests draw from), and ``reference`` bound to the solution loaded once."""
        names: dict = {"__name__": f"genlab_tests_{self.id}"}
        with contextlib.redirect_stdout(io.StringIO()):  # the setup cell's banner is for students
            exec(compile(self.source.setup_source, "<setup>", "exec"), names)
        names["reference"] = self.reference
        # the domains of the generated inputs, from the table of the notebook loaded here (not from the working
        # directory, which a platform's grader runs outside the course)
        use_table(self.id, self.generated_domains)
        return names

    @cached_property
    def generated_domains(self) -> dict[str, str]:
        """The "left free" cell of each row of the table, where the generated inputs' domains are declared."""
        return {f: row.free for f, row in self.source.spec_table.items()}


def imported_modules(source: str, optional: bool = True) -> tuple[str, ...]:
    """The absolute module names a cell imports, in order (magics and shell lines left out). ``optional=False``
    leaves out those it imports only under ``try: ... except ImportError`` (flash-attn, on a GPU)."""
    code = "\n".join(line for line in source.splitlines() if not line.lstrip().startswith(("%", "!")))
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return ()
    guarded = set() if optional else {
        id(n) for t in ast.walk(tree) if isinstance(t, ast.Try)
        and any("ImportError" in ast.unparse(h.type or ast.Name("BaseException")) for h in t.handlers)
        for stmt in t.body for n in ast.walk(stmt)}
    names: list[str] = []
    for node in (n for n in ast.walk(tree) if id(n) not in guarded):
        if isinstance(node, ast.Import):
            names += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.append(node.module)
    return tuple(dict.fromkeys(names))


# The start of a note and of a test's message where the grader failed, not the student's code: such a result is
# not kept for resuming (autograder.course.grade), so that the next run with the same --out grades it again.
NOT_GRADED = "not graded, the grader's fault"


class MeasurerUnavailable(MeasureError):
    """The grader's measuring processes could not start: a measured test is not graded (the grader's fault)."""

    def __init__(self, reason: str, failures: int):
        super().__init__(f"the grader's measuring process could not start ({failures} tr"
                         f"{'ies' if failures > 1 else 'y'}; the last: {reason})")


class ReferenceKernel:
    """The reference's side of the time and memory verdicts. With ``start_measurer`` (the lab's measuring
    processes, autograder.wall.measure.Zygote), ``background`` (an executor) starts those while the first
    student's cells run, and every time and memory figure is taken on fresh processes forked from them. Where
    they cannot start, a measured test is not graded (:class:`MeasurerUnavailable`, the grader's fault, with its
    reason): it never falls back to measuring in the student's kernel, which a notebook that has read the
    grader defeats (issue 39; a run where the start failed once graded lab1_attack_balloon and
    lab1_attack_heap_warming full marks that way). Without ``start_measurer`` (``--unsafe``, unit tests), a
    kernel holding only the reference solution is started in the background instead, for timing side by side."""

    MAX_STARTS = 3   # failed starts of the measuring processes per lab and worker, before none is tried again

    def __init__(self, lab: Lab, start_kernel: Callable[[], KernelSession], background=None,
                 start_measurer: Callable[[Lab], object] | None = None):
        self.lab, self.start_kernel = lab, start_kernel
        self.session: KernelSession | None = None
        self.start_measurer = start_measurer
        self._zygote = None
        self._measurer_failed = ""
        self._failed_starts = 0
        if start_measurer is not None and background is not None and lab is not None:
            # What the start reads of the lab is parsed here, before the thread: CPython 3.11's ast module is not
            # safe in two threads at once, and a start that parsed the setup cell while this thread scanned a
            # notebook failed with "SystemError: AST constructor recursion depth mismatch (before=36, after=75)".
            lab.setup_modules, lab.reference  # noqa: B018 - cached properties, computed now
        self._zygote_starting = (background.submit(start_measurer, lab)
                                 if start_measurer is not None and background is not None else None)
        self._starting = (background.submit(self._start)
                          if background is not None and start_measurer is None else None)

    def zygote(self):
        """The lab's measuring processes, started (again) if needed; None without a ``start_measurer``. Raises
        :class:`MeasurerUnavailable` where they cannot start: tried again at the next measurement, up to
        :data:`MAX_STARTS` failures."""
        if self.start_measurer is None:
            return None
        if self._failed_starts >= self.MAX_STARTS:
            raise MeasurerUnavailable(self._measurer_failed, self._failed_starts)
        starting, self._zygote_starting = self._zygote_starting, None
        try:
            if starting is not None:
                self._zygote = starting.result()
            if self._zygote is None or not self._zygote.alive():
                if self._zygote is not None:
                    self._zygote.shutdown()
                self._zygote = None
                self._zygote = self.start_measurer(self.lab)
        except Exception as exc:  # noqa: BLE001 - the measured test is not graded, and says why
            self._failed_starts += 1
            self._measurer_failed = f"{type(exc).__name__}: {exc}"
            self._zygote = None
            raise MeasurerUnavailable(self._measurer_failed, self._failed_starts) from None
        return self._zygote

    def _start(self) -> KernelSession:
        session = self.start_kernel()
        session.run_cell(self.lab.source.setup_source)
        for source in self.lab.source.solutions.values():
            session.run_cell(source)
        return session

    def _started(self) -> KernelSession | None:
        starting, self._starting = self._starting, None
        if starting is not None:
            try:
                self.session = starting.result()
            except Exception:  # noqa: BLE001 - started again, in the open, by request()
                self.session = None
        return self.session

    def request(self, header, encoder):
        if self._started() is None or not self.session.alive():
            self.session = self._start()
        # It serves every notebook this worker grades: only the limit per call applies, not a notebook's.
        self.session.started_at = time.monotonic()
        return self.session.request(header, encoder)

    # The OS's count of the reference kernel's CPU time (see KernelSession.cpu_seconds), for the timed loops.
    def cpu_seconds(self) -> float | None:
        return self.session.cpu_seconds() if self._started() is not None else None

    def cpu_resolution_s(self) -> float:
        return self.session.cpu_resolution_s() if self._started() is not None else 1.0

    def shutdown(self):
        if self._started() is not None:
            self.session.shutdown()
        starting, self._zygote_starting = self._zygote_starting, None
        if starting is not None:
            try:
                self._zygote = starting.result()
            except Exception:  # noqa: BLE001 - never started: nothing to stop
                pass
        if self._zygote is not None:
            self._zygote.shutdown()
            self._zygote = None


# -- the state the steps share ----------------------------------------------------------------------------
@dataclass
class Grading:
    student: str
    lab: Lab
    path: Path | None                                  # None: nothing was handed in
    limits: Limits
    start_kernel: Callable[[], KernelSession]          # a sandboxed kernel, booted (server installed)
    reference_kernel: ReferenceKernel
    full_run: bool = False
    submitted: nbformat.NotebookNode | None = None
    assembled: Assembled | None = None
    evidence: list[str] = field(default_factory=list)
    session: KernelSession | None = None
    outcomes: dict[str, Outcome] = field(default_factory=dict)
    calls: list = field(default_factory=list)
    test_cells: dict = field(default_factory=dict)
    skipped: list[str] = field(default_factory=list)   # cells not run (not needed by the tests)
    missing_names: set[str] = field(default_factory=set)  # NameErrors seen in the student's code
    phases: dict[str, float] = field(default_factory=dict)
    test_globals: dict = field(default_factory=dict)
    result: Result | None = None
    replay: list[str] = field(default_factory=list)    # the student-side cells run so far, for a fresh kernel
    replay_ids: list = field(default_factory=list)     # their grade ids (None: a cell the student added)
    replay_measured: list = field(default_factory=list)   # whether a measured process runs each (needed cells)
    also_needed: set = field(default_factory=set)      # skipped cells the student's code needs (a full rerun)
    stopped_by: str | None = None                      # the test, or lab cell, that stopped the kernel
    revivals: int = 0
    behaviour: dict = field(default_factory=dict)      # failing function -> its outputs vs the reference's
    kept: KeptCalls | None = None                      # the calls kept for diagnosis, within a budget
    grader_faults: list = field(default_factory=list)  # tests the grader's own failure left ungraded
    refused: Refusals = field(default_factory=Refusals)  # the student's cells outside the policy: not run

    def __post_init__(self):
        self.kept = KeptCalls(self.limits.max_kept_calls_bytes)

    @property
    def notes(self) -> list[str]:
        return self.assembled.notes if self.assembled else []

    def conclude(self, status: Status, message: str) -> None:
        self.result = Result.every_test(self.student, self.lab.id, self.lab.points, status, message)


# -- the steps ---------------------------------------------------------------------------------------------
def read(g: Grading) -> None:
    if g.path is None:
        g.conclude(Status.MISSING, f"no notebook for {g.lab.id} was handed in: expected {g.lab.id}/{g.lab.id}.ipynb, "
                                   "and no other notebook in the submission carries this lab's cells")
        return
    try:
        g.submitted = nbformat.read(str(g.path), as_version=4)
        _check_cells(g.submitted)
    except Exception as exc:  # noqa: BLE001 - not JSON, not a notebook, unreadable
        g.conclude(Status.ERROR, f"the notebook could not be read ({exc})"[:500] +
                   ": open it in JupyterLab, save it, and hand it in again")


def assemble_cells(g: Grading) -> None:
    g.assembled = assemble(g.submitted, g.lab.release)


def scan(g: Grading) -> None:
    """Every cell the student wrote is read for tampering, whether or not it is run. Looks outside the
    kernel's folder find nothing of the grader's (bubblewrap shows nothing there; container mode closes the
    grader's folders to the kernel): they cost no marks and are noted for the instructor."""
    found = scan_notebook(g.assembled.student_cells)
    g.evidence += found.tampering
    g.notes.extend(f"looked outside its own folder (nothing of the grader's is in its reach; no marks taken): {p}"
                   for p in found.probes)


def check_policy(g: Grading) -> None:
    """The solution cells and the cells the student added, against the lab's policy for graded code: a cell
    outside it is not run, and the tests of the names it defines are ``refused`` (:func:`run_one_test`)."""
    if g.evidence or not g.lab.policy.enforce or g.student in g.limits.policy_exempt:
        return
    g.refused = refusals(student_cells(g.assembled.nb.cells), g.lab.policy, g.lab.source.setup_source)
    g.notes.extend(g.refused.cells.values())


def start_kernel(g: Grading) -> None:
    if g.evidence:  # the scan already proved tampering: every test is tampered, whatever the code would do
        return
    g.session = g.start_kernel()


def run_cells(g: Grading) -> None:
    """Each code cell in order: student and needed cells in the kernel, test cells here, the rest skipped."""
    if g.session is None:
        # Running code that is known to patch the grader gains nothing (no verdict can change) and costs a
        # kernel and every test: about 9 s of CPU per notebook.
        g.notes.append("not run: the scan of your cells found code that interferes with the grader (below)")
        return
    g.test_globals = g.lab.test_globals()
    for index, cell in enumerate(g.assembled.nb.cells):
        if cell.cell_type != "code":
            continue
        if is_test(cell):
            if grade_id(cell) in g.lab.tests:
                run_one_test(g, grade_id(cell), cell)
        elif g.full_run or needed(cell):
            run_student_cell(g, index, cell)
        else:
            g.skipped.append(grade_id(cell) or f"cell {index}")


def needed(cell) -> bool:
    """A cell the tests may depend on: setup, a solution, one the student added, or tagged grade-needs."""
    return is_setup(cell) or is_solution(cell) or grade_id(cell) is None or \
        GRADE_NEEDS in cell.get("metadata", {}).get("tags", [])


MAX_REVIVALS = 5  # fresh kernels per notebook; the notebook's time limit bounds them too


def alive(g: Grading) -> bool:
    """Whether the kernel can take the next cell or test. When a test's call, or one of the lab's own cells
    (a demo calling the student's function), stopped it (a timeout that ignored the interrupt, a crash, the
    memory limit), a fresh kernel runs the cells that had run, so only that test or demo is lost: the tests
    after it are graded on their own merits, whether or not the demo ran (``--full-run`` gives the default's
    grades). The notebook's time limit keeps counting from the first kernel's start. A kernel stopped by the
    student's own cell (a solution, or a cell they added) stays stopped: replaying it would stop the next."""
    if g.session.alive():
        return True
    if g.stopped_by is None or g.revivals >= MAX_REVIVALS:
        return False
    reason, started = g.session.dead_reason, g.session.started_at
    g.session.shutdown()
    g.session = g.start_kernel()
    g.session.started_at = started
    for source in g.replay:
        g.session.run_cell(source)
        if not g.session.alive():
            return False
    g.notes.append(f"{g.stopped_by} stopped the kernel ({reason}); a fresh kernel ran the cells before it "
                   "again, and the tests after it were graded as usual")
    g.revivals, g.stopped_by = g.revivals + 1, None
    return True


def run_student_cell(g: Grading, index: int, cell) -> None:
    if index in g.refused.cells:
        cell.outputs = [_grader_note(g.refused.cells[index])]
        return
    if not alive(g):
        cell.outputs = [_grader_note(f"not run: {g.session.dead_reason}")]
        return
    session = g.session
    run = session.run_cell(cell.source)
    if run.status not in ("timeout", "dead"):
        g.replay.append(cell.source)
        g.replay_ids.append(grade_id(cell))
        g.replay_measured.append(needed(cell) or grade_id(cell) in g.also_needed)
    cell.outputs = run.outputs
    where = f"cell {index} ({grade_id(cell) or 'a cell you added'})"
    if run.status == "error":
        g.missing_names |= set(re.findall(r"NameError: name '(\w+)' is not defined", run.error))
        if any(m in run.error for m in MEMORY_ERRORS):
            g.notes.append(f"{where} ran out of memory: the limit is {g.limits.memory_gib:g} GiB per kernel; "
                           "later tests may fail because of it")
        if SCRATCH_FULL in run.error:
            g.notes.append(_scratch_note(g, where))
    if run.status in ("timeout", "dead") and session.dead_reason:
        # The kernel is gone (killed, crashed, or stopped for ignoring the interrupt): say where.
        message = session.dead_reason = f"{session.dead_reason} in {where}"
        if grade_id(cell) and not (is_setup(cell) or is_solution(cell)):
            g.stopped_by = f"the lab's cell {grade_id(cell)}"
    elif run.status == "timeout":
        # Interrupted and still alive: only this cell's work is lost; later tests still run.
        message = f"{where} was stopped: {run.error}"
        g.notes.append(message)
    if run.status in ("timeout", "dead"):
        cell.outputs.append(_grader_note(message))


def measured_cells(g: Grading) -> tuple[list[str], list[str]]:
    """The cells a measured process runs before its ready mark: of those the kernel ran, the ones the default mode
    runs (and the skipped ones a full rerun found the student's code needs); and the reference's counterpart,
    the reference's solutions in place of the student's, without the cells the student added."""
    replayed = [(source, gid) for source, gid, keep in zip(g.replay, g.replay_ids, g.replay_measured) if keep]
    solutions = g.lab.source.solutions
    return ([source for source, _ in replayed],
            [solutions.get(gid, source) for source, gid in replayed if gid is not None])


def run_one_test(g: Grading, test: str, cell) -> None:
    g.test_cells[test] = cell
    function = g.lab.tests[test]["function"]
    if function in g.refused.names:
        g.outcomes[test] = Outcome(test, Status.REFUSED, g.refused.names[function])
        return
    if not alive(g):
        g.outcomes[test] = Outcome(test, _dead_status(g.session), f"not run: {g.session.dead_reason}")
        return
    session = g.session
    # Checked before each test too, so a patch undone before the notebook ends is still seen.
    _add_evidence(g, _integrity(session))
    seen = len(session.channel_evidence)
    recorder = KeptRecorder(kept=g.kept)
    # Time and memory are measured on fresh processes that run the cells this kernel has run (g.replay) that the
    # default mode runs (the cells the tests need), in --full-run mode too: a lab's demonstrations (Lab 3's
    # training runs) run before the measured process's ready mark would only spend its time limit. The
    # reference's process runs the same cells with the reference's solutions in the student's, and none they added.
    session.measurer = g.reference_kernel.zygote if hasattr(g.reference_kernel, "zygote") else None
    session.measured_cells, session.reference_cells = measured_cells(g)
    namespace = dict(g.test_globals)
    reference = g.test_globals.get("reference")
    namespace.update({f: RemoteFunction(session, f, recorder, g.reference_kernel, g.lab.differentiated,
                                        reference=getattr(reference, f, None))
                      for f in g.lab.functions})
    start = time.perf_counter()
    try:
        # A library's notice raised by the instructor's test code (torchmetrics' KID warns that it keeps its
        # features) is about the test, not the student: kept out of the grader's output and the feedback.
        with warnings.catch_warnings(record=True):
            outcome = run_test(test, g.lab.tests[test]["source"], namespace,
                               passthrough=(KernelLost, RemoteTimeout, ChannelTampered, MeasureError))
    except MeasureError as exc:   # the grader's measuring process failed: no verdict on the student's code
        g.grader_faults.append(test)
        outcome = Outcome(test, Status.ERROR, f"{NOT_GRADED}: {exc}. A regrade measures it again (genlab grade "
                          "with the same --out regrades only notebooks with such a test)",
                          time.perf_counter() - start)
    except ChannelTampered as exc:
        outcome = Outcome(test, Status.TAMPERED, _channel_evidence(str(exc)), time.perf_counter() - start)
    except RemoteTimeout as exc:
        outcome = Outcome(test, Status.TIMEOUT, str(exc), time.perf_counter() - start)
    except KernelLost as exc:
        outcome = Outcome(test, Status.KILLED, str(exc), time.perf_counter() - start)
    outcome.status = Status(outcome.status)
    if outcome.status == Status.PASSED and recorder.contradicted:   # a gradient the function's values deny
        outcome = Outcome(test, Status.FAILED, "; ".join(recorder.contradicted), outcome.seconds)
    if outcome.status == Status.FAILED and recorder.measured:   # what the OS's memory figure was made of
        outcome.message += "\n(" + "; ".join(recorder.measured) + ")"
    # A forged answer is tampering even where the test's own code caught the exception it raised.
    forged = [_channel_evidence(e) for e in session.channel_evidence[seen:]]
    if forged:
        outcome = Outcome(test, Status.TAMPERED, "; ".join(forged), outcome.seconds)
        _add_evidence(g, forged)
    if outcome.status in (Status.TIMEOUT, Status.KILLED) and not session.alive():
        g.stopped_by = f"test {test}"
    if outcome.status == Status.ERROR and SCRATCH_FULL in outcome.message:
        g.notes.append(_scratch_note(g, f"test {test}"))
    if outcome.status == Status.ERROR:
        missing = set(re.findall(r"NameError(?::|, saying:\n  \|) name '(\w+)' is not defined", outcome.message))
        g.missing_names |= missing
        refused = sorted(missing & set(g.refused.names))
        if refused:   # it uses a name that a cell outside the policy would have defined
            outcome = Outcome(test, Status.REFUSED, f"{test} uses {refused[0]}, which was not defined: "
                              + g.refused.names[refused[0]], outcome.seconds)
    g.calls.extend(recorder.calls)
    _add_evidence(g, recorder.evidence)
    g.outcomes[test] = outcome
    g.phases["tests"] = g.phases.get("tests", 0.0) + time.perf_counter() - start


def integrity(g: Grading) -> None:
    if g.session is not None and g.session.alive():
        _add_evidence(g, _integrity(g.session))


def stop_kernel(g: Grading) -> None:
    if g.session is not None:
        g.session.shutdown()


def diagnose_failures(g: Grading) -> None:
    """Every call made to a function, from all of its tests, must agree with a bug before it is named
    (one test's calls alone can fit two bugs by coincidence), so this runs after all tests."""
    for function, (calls, size) in g.kept.dropped.items():
        g.notes.append(f"{calls} call{'s' * (calls != 1)} to {function} ({size / 2**20:.0f} MiB of inputs and "
                       f"answers) {'was' if calls == 1 else 'were'} not kept for diagnosis: the grader keeps at most "
                       f"{g.limits.max_kept_calls_mib:g} MiB of a notebook's calls, so no bug is named for {function}")
    for test, outcome in g.outcomes.items():
        function = g.lab.tests[test]["function"]
        if outcome.status != Status.PASSED and function not in g.kept.dropped:   # a bug is named from all calls
            outcome.diagnosis = diagnose(g.lab.bugs, [c for c in g.calls if c.name == function], g.lab.reference)
    # For the class report's misconception clusters: how each failing function's outputs relate to the
    # reference's (labels and counts, no tensor; autograder.grading.behaviour).
    failing = dict.fromkeys(g.lab.tests[t]["function"] for t, o in g.outcomes.items() if o.status != Status.PASSED)
    g.behaviour = behaviour.for_failures(failing, g.calls, g.lab.reference)


def verdict(g: Grading) -> None:
    points = g.lab.points
    for test, cell in g.test_cells.items():
        cell.outputs = [_verdict_output(g.outcomes[test], points[test])]
    if g.skipped:
        g.notes.append(f"to grade faster, {len(g.skipped)} cells of the lab's own (demonstrations, plots, "
                       f"widgets) did not run: {', '.join(g.skipped)}; setup, your solution cells, the cells you "
                       "added and the cells the tests need did")
    if g.grader_faults:
        g.notes.append(f"{NOT_GRADED}: {', '.join(g.grader_faults)} (the grader's measuring process failed; "
                       "the reason is in each test's message)")
    final = []
    for test in g.lab.tests:
        outcome = g.outcomes.get(test) or Outcome(
            test, _dead_status(g.session) if g.session and g.session.dead_reason else Status.ERROR,
            f"not run: {(g.session and g.session.dead_reason) or 'the test cell was not reached'}")
        if g.evidence:
            outcome = Outcome(test, Status.TAMPERED, "the notebook interferes with the grader: " +
                              "; ".join(g.evidence[:5]), outcome.seconds, outcome.diagnosis)
        # Messages quote the student's code and kernel: no control character or terminal escape reaches
        # results.json or a feedback page, and none is longer than a page.
        outcome.message = student_text(outcome.message, MAX_MESSAGE_CHARS)
        final.append(outcome)
    g.notes[:] = [student_text(n, MAX_MESSAGE_CHARS) for n in g.notes]
    g.evidence[:] = [student_text(e, MAX_MESSAGE_CHARS) for e in g.evidence]
    g.result = Result(g.student, g.lab.id, final, points, g.notes, g.evidence, g.assembled.nb, behaviour=g.behaviour)


STEPS: list[Callable[[Grading], None]] = [read, assemble_cells, scan, check_policy, start_kernel, run_cells,
                                           integrity, stop_kernel, diagnose_failures, verdict]


def run_steps(g: Grading) -> Result:
    try:
        for step in STEPS:
            start = time.perf_counter()
            step(g)
            g.phases[step.__name__] = time.perf_counter() - start
            if g.result is not None:
                break
    finally:
        stop_kernel(g)
    if "run_cells" in g.phases:  # the student's cells and the tests between them, told apart
        g.phases["cells"] = g.phases.pop("run_cells") - g.phases.get("tests", 0.0)
    g.result.phases = g.phases
    return g.result


def grade_notebook(student: str, lab: Lab, path: Path | None, *, limits: Limits,
                   start_kernel: Callable[[], KernelSession], reference_kernel: ReferenceKernel) -> Result:
    start = time.monotonic()
    g = Grading(student, lab, path, limits, start_kernel, reference_kernel, full_run=limits.full_run)
    result = run_steps(g)
    rerun = g.missing_names & defined_by(g.assembled.nb, g.skipped) if g.skipped and g.assembled else set()
    if rerun:
        # The student's code reads a global that one of the lab's skipped cells defines: never fail a student
        # for the shortcut; grade again with every cell run.
        skipped, nb = g.skipped, g.assembled.nb
        g = Grading(student, lab, path, limits, start_kernel, reference_kernel, full_run=True)
        g.also_needed = {cell for cell in skipped if defined_by(nb, [cell]) & rerun}   # measured processes too
        result = run_steps(g)
        result.notes.append(f"your code uses {', '.join(sorted(rerun))}, defined by a cell of the lab that the "
                            "grader skips by default, so the whole notebook was run")
    result.seconds = time.monotonic() - start
    return result


def defined_by(nb, cell_ids: list[str]) -> set[str]:
    """The global names that the given cells (by grade_id or "cell N") assign, define or import."""
    names: set[str] = set()
    for index, cell in enumerate(nb.cells):
        if (grade_id(cell) or f"cell {index}") not in cell_ids:
            continue
        try:
            tree = ast.parse(cell.source)
        except SyntaxError:
            continue
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names.add(node.name)
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                names.add(node.id)
            elif isinstance(node, (ast.Import, ast.ImportFrom)):
                names |= {(a.asname or a.name).split(".")[0] for a in node.names}
    return names


# -- helpers ------------------------------------------------------------------------------------------------
def _check_cells(nb) -> None:
    """The little structure the grader relies on; nbformat itself accepts much stranger files."""
    if not isinstance(nb.get("cells"), list):
        raise ValueError("it has no list of cells")
    for i, cell in enumerate(nb.cells):
        if not isinstance(cell, dict) or cell.get("cell_type") not in ("code", "markdown", "raw") \
                or not isinstance(cell.get("source", ""), str):
            raise ValueError(f"cell {i} is not a notebook cell")
        if not isinstance(cell.get("metadata", {}), dict):
            raise ValueError(f"cell {i} has malformed metadata")


def _dead_status(session: KernelSession) -> Status:
    return Status.TIMEOUT if session.dead_of_timeout else Status.KILLED


def _add_evidence(g: Grading, lines: list[str]) -> None:
    g.evidence += [e for e in lines if e not in g.evidence]


def _integrity(session: KernelSession) -> list[str]:
    """Evidence lines for the watched objects (torch.allclose, IPython's hooks, ...) replaced so far: those the
    kernel's snapshot names, and those whose identity differs from what the kernel reported at boot, compared
    here (a notebook that has the kernel take its snapshot again hides nothing from the second)."""
    try:
        changed, _ = session.request({"kind": "integrity", "args": [], "kwargs": {"__dict__": {}}}, Encoder())
        names = set(changed["result"]) if changed["ok"] else set()   # checked: a list of watched names
        names |= set(session.replaced_since_boot())
    except (KernelLost, RemoteTimeout):
        return []
    except ChannelTampered as exc:
        return [_channel_evidence(str(exc))]
    return [f"replaced at run time: {name}" for name in sorted(names)]


def _channel_evidence(what: str) -> str:
    if what.startswith("replaced while a measurement ran"):   # a sentence of its own (KernelSession.check_measured)
        return what
    return f"the kernel's answer to the grader broke the channel's rules: {what}"


def _scratch_note(g: Grading, where: str) -> str:
    return (f"{where} ran out of scratch space: the kernel's folder (HOME, TMPDIR, the working directory) holds "
            f"at most {g.limits.max_scratch_mib:g} MiB and {g.limits.max_scratch_files} files; later cells that "
            "write files may fail because of it")


def _grader_note(text: str):
    return nbformat.v4.new_output("stream", name="stderr", text=f"[genlab grader] {text}\n")


def _verdict_output(outcome: Outcome, points: float) -> nbformat.NotebookNode:
    earned = points if outcome.passed else 0.0
    lines = [f"[genlab grader] {outcome.test}: {str(outcome.status).upper()} ({earned:g}/{points:g} points)"]
    if outcome.message:
        lines.append(outcome.message)
    for bug in outcome.diagnosis:
        lines.append(f"Diagnosis: {bug.id}: {bug.describe()}")
    return nbformat.v4.new_output("stream", name="stdout" if outcome.passed else "stderr",
                                  text="\n".join(lines) + "\n")
