"""``genlab.check("reparameterize")``: a student's instant self-check, with the grader's diagnoses.

It runs the *visible* tests of one function, read from the lab notebook on disk (test cells are locked,
so the disk copy is the released one), against the function defined in the student's kernel, then replays
the recorded calls through the lab's bug catalogue. Hidden tests are not on the student's machine; the
grader runs them, out of the kernel.
"""
from __future__ import annotations

from pathlib import Path

from genlab.catalog import bugs_for
from genlab.testing.diagnosis import diagnose
from genlab.testing.notebook import LabNotebook, function_of
from genlab.testing.calls import LocalFunction, Recorder
from genlab.testing.reference import find_course_root
from genlab.testing.runner import run_test


def _lab_notebook(lab: str) -> Path:
    here = Path.cwd()
    candidates = [here / f"{lab}.ipynb"]
    try:
        root = find_course_root(here)
        candidates += [root / "labs" / lab / f"{lab}.ipynb"]
    except FileNotFoundError:
        pass
    for path in candidates:
        if path.exists():
            return path
    raise FileNotFoundError(f"cannot find {lab}.ipynb next to this kernel ({here}); run the check from the lab's folder")


def _user_namespace() -> dict:
    try:
        return get_ipython().user_ns  # noqa: F821
    except NameError:
        import __main__
        return __main__.__dict__


def self_check(function: str, lab: str | None, namespace: dict | None = None, notebook: Path | None = None):
    if lab is None:
        raise RuntimeError("call genlab.setup('<lab id>') first, so the check knows the lab")
    namespace = namespace if namespace is not None else _user_namespace()
    nb = LabNotebook.read(notebook or _lab_notebook(lab))
    if function not in namespace:
        raise NameError(f"`{function}` is not defined yet: run its cell first")
    for line in cell_policy_report(function, lab, namespace, nb.setup_source,
                                   Path(notebook).parent if notebook else Path.cwd()):
        print(f"POLICY   {line}")
    outcomes = []
    for test_id, outcome, recorder in visible_runs(nb, namespace, function):
        if not outcome.passed:
            try:
                from genlab.testing import load_reference
                ref = load_reference(lab)
            except FileNotFoundError:
                ref = None  # students have no reference: replay against the bugs' own disagreement only
            outcome.diagnosis = diagnose(bugs_for(lab), recorder.calls, ref) if ref else _diagnose_alone(
                lab, recorder, test_id)
        outcomes.append(outcome)
        mark = "PASS" if outcome.passed else outcome.status.upper()
        print(f"{mark:8s} {test_id}" + (f"\n         {outcome.message}" if outcome.message else ""))
        for bug in outcome.diagnosis:
            print(f"         Diagnosis: {bug.describe()}")
    if not outcomes:
        print(f"no visible tests for `{function}` in {lab}")
    return outcomes


def _defining_cell(function: str, namespace: dict) -> str | None:
    """The last cell this kernel ran that defines ``function`` at its top level (IPython's ``In``), else the
    function's own source."""
    import ast
    import inspect

    for source in reversed(namespace.get("In", []) or []):
        try:
            tree = ast.parse("\n".join(l for l in source.splitlines() if not l.lstrip().startswith(("%", "!"))))
        except SyntaxError:
            continue
        if any(isinstance(n, (ast.FunctionDef, ast.ClassDef)) and n.name == function for n in tree.body):
            return source
    try:
        return inspect.getsource(namespace[function])
    except (OSError, TypeError):
        return None


def cell_policy_report(function: str, lab: str, namespace: dict, setup_source: str = "",
                       start: Path | None = None) -> list[str]:
    """The policy for graded code (:mod:`genlab.policy`) on the cell that defined ``function`` in this kernel:
    what the grader would refuse in it, a line per construct, empty when it is inside the policy."""
    from genlab.policy import check_cells, describe, student_policy

    source = _defining_cell(function, namespace)
    if source is None:
        return []
    where = f"the cell that defines `{function}`"
    found = check_cells([(where, source)], student_policy(lab, start), setup_source)
    return [describe(where, found[where], graded=False)] if where in found else []


def visible_runs(nb: LabNotebook, namespace: dict, function: str):
    """Runs the visible tests of ``function`` as the self-check does: the setup cell once, then each test in
    notebook order on the functions of ``namespace``; yields (test id, outcome, its recorded calls). The
    student bundle's fingerprints are recorded the same way, on the reference, so the inputs match."""
    setup_ns: dict = {}
    exec(compile(nb.setup_source, "<setup>", "exec"), setup_ns)
    functions = [f for f in nb.solutions if f in namespace]
    for test_id, spec in nb.tests.items():
        if function_of(test_id, list(nb.solutions)) != function:
            continue
        recorder = Recorder()
        test_ns = dict(setup_ns)
        test_ns.update({f: LocalFunction(namespace[f], f, recorder) for f in functions})
        yield test_id, run_test(test_id, spec["source"], test_ns), recorder


def fingerprints(lab: str) -> list[dict]:
    """What each bug written as an edit returns on the visible tests' own calls, recorded by the instructor
    on the reference (``genlab/assets/fingerprints/<lab>.pt`` in the student bundle's wheel; none in the
    repository, where the self-check has the reference itself). Only calls where the bug and the reference
    disagree are kept, so no expected value of a passing call is shipped."""
    from importlib import resources

    import torch

    path = resources.files("genlab") / "assets" / "fingerprints" / f"{lab}.pt"
    if not path.is_file():
        return []
    with resources.as_file(path) as file:
        return torch.load(file, weights_only=True)


def as_data(value):
    """A call's argument as plain data torch can store and load (``weights_only``), and ``same`` compare: a
    generator as its state, a module as its class name and weights, a dict as sorted pairs."""
    import torch

    if isinstance(value, torch.Generator):
        return ("torch.Generator", value.get_state())
    if isinstance(value, torch.nn.Module):
        return ("module", type(value).__name__, tuple((k, v.detach()) for k, v in value.state_dict().items()))
    if isinstance(value, dict):
        return tuple(sorted((str(k), as_data(v)) for k, v in value.items()))
    if isinstance(value, (list, tuple)):
        return tuple(as_data(v) for v in value)
    return value


def _matches_fingerprint(bug, entries: list[dict], calls) -> bool:
    """The student's outcomes equal the bug's on every fingerprinted call they made (at least one)."""
    from genlab.testing.diagnosis import same, student_outcome

    matched = 0
    for entry in entries:
        for c in calls:
            if c.kind != entry["kind"] or not same(as_data(c.args), entry["args"]) or \
                    not same(as_data(c.kwargs), entry["kwargs"]):
                continue
            outcome, expected = student_outcome(c), entry["outcome"]
            if isinstance(expected, dict) and "error" in expected:
                agree = isinstance(outcome, BaseException) and type(outcome).__name__ == expected["error"]
            else:
                agree = not isinstance(outcome, BaseException) and same(as_data(outcome), expected)
            if not agree:
                return False
            matched += 1
    return matched > 0


def _diagnose_alone(lab: str, recorder: Recorder, test_id: str | None = None):
    """Without the reference: a bug is named when every deterministic call matches it exactly.

    A bug written as an edit of the student's function cannot be replayed here: run on the student's own
    function it would match any output (the detached sample of a wrong sample is that wrong sample). It is
    named from its fingerprint instead, when the bundle ships one (:func:`fingerprints`)."""
    from genlab.catalog import Edit
    from genlab.testing.diagnosis import replay, same, student_outcome

    found = []
    prints = [e for e in fingerprints(lab) if e["test"] == test_id]
    for bug in bugs_for(lab):
        calls = [c for c in recorder.calls if c.name == bug.function and c.kind in bug.kinds]
        if bug.detect is not None:  # a symptom the calls show by themselves (a time ratio, noise shared)
            own = [c for c in recorder.calls if c.name == bug.function]
            if own and bug.detect(own):
                found.append(bug)
            continue
        if isinstance(bug.impl, Edit):
            entries = [e for e in prints if e["bug"] == bug.id]
            if entries and _matches_fingerprint(bug, entries, calls):
                found.append(bug)
            continue
        if not calls:
            continue
        deterministic = [c for c in calls if same(replay(bug.impl, c), replay(bug.impl, c))]
        if deterministic and all(same(student_outcome(c), replay(bug.impl, c)) for c in deterministic):
            found.append(bug)
    return found


def policy_report(path: Path) -> list[str]:
    """The notebook's cells that the grader would not run, each with its violations (line, construct, why): its
    solution cells and the cells the student added, against the policy for graded code
    (:mod:`genlab.policy`, the course's allowlist for this lab). Empty: every cell is inside the policy."""
    import nbformat

    from genlab.policy import check_cells, describe, student_cells, student_policy
    from genlab.testing.notebook import is_setup

    path = Path(path).resolve()
    nb = nbformat.read(str(path), as_version=4)
    cells = [(where, source) for _index, where, source in student_cells(nb.cells)]
    setup = "\n".join(c.source for c in nb.cells if is_setup(c))
    found = check_cells(cells, student_policy(path.stem, path.parent), setup)
    return [describe(where, violations, graded=False) for where, violations in found.items()]


def check_notebook(path: Path) -> int:
    """``genlab check NOTEBOOK``: the policy for graded code on the student's cells, then the notebook run, then
    the visible tests of each of its functions. Returns 1 when a cell is outside the policy."""
    import tempfile

    import nbformat
    from jupyter_client.manager import KernelManager
    from nbclient import NotebookClient

    path = Path(path).resolve()
    refused = policy_report(path)
    if refused:
        print("POLICY   these cells would not run when graded, and the tests of what they define would be refused:")
        for line in refused:
            print(f"         {line}")
        print("         Graded cells may import only the packages the lab needs, and may not reach private (_name) "
              "attributes, patch a library, or build names at run time: see the student guide, \"What graded "
              "cells may do\".")
    else:
        print("POLICY   every cell you wrote is inside the policy for graded code")
    nb = nbformat.read(str(path), as_version=4)
    functions = list(LabNotebook(path, nb).solutions)
    nb.cells.append(nbformat.v4.new_code_cell(
        "import genlab\n" + "\n".join(f"genlab.check({f!r}, {path.stem!r})" for f in functions)))
    # Over Unix sockets, not TCP: nothing listens on the network, and ipykernel has no encryption warning to give.
    sockets = Path(tempfile.mkdtemp(prefix="genlab-check-"))  # short: a socket path is limited to 107 bytes
    kernel = KernelManager(kernel_name="python3", transport="ipc", ip=str(sockets / "kernel"))
    NotebookClient(nb, km=kernel, timeout=600, allow_errors=True,
                   resources={"metadata": {"path": str(path.parent)}}).execute()
    for output in nb.cells[-1].outputs:
        print(output.get("text", ""), end="")
    return 1 if refused else 0
