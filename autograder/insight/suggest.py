"""``genlab catalog suggest RUN_DIR FUNCTION CLUSTER``: a misconception cluster of the class report, written as
a catalogue entry for the instructor to complete.

It prints two pieces, each for its own file, because the catalogue has two sides (see genlab.catalog):

1. the full body, as the cluster's representative student wrote it, renamed after the bug, for
   ``solutions/<lab>/bugs.py``'s ``BODIES`` (instructor only: it is the answer after a small edit);
2. a ``Bug(...)`` entry for ``BUGS`` in ``shared/genlab/catalog/<lab>.py``, with what the clusters found (the
   tests failed, the relation to the reference) in the symptom's draft, and TODOs for the words only an
   instructor can write (the title, the fix, the source that documents the bug). Students read that module:
   where the body is the answer after a small edit, its ``impl`` there must be an ``@edit`` of their function
   (tests/test_leaks.py and tests/test_catalogue.py check this).

Once added, the next grading names the bug for every student whose calls it explains.
"""
from __future__ import annotations

import json
import re
from pathlib import Path

from autograder.insight import clusters as clustering
from autograder.insight.class_report import _sources, lab_info
from autograder.core.labs import lab_ids
from autograder.core.sanitize import student_text


def find(run_dir: Path, function: str, index: int):
    """(lab, cluster, its representative's solution cell) for cluster ``index`` of ``function`` in a run."""
    entries = json.loads((Path(run_dir) / "results.json").read_text())
    labs = [lab for lab in lab_ids(Path(__file__).resolve().parents[2]) if function in lab_info(lab).tests_of.values()]
    if not labs:
        raise KeyError(f"no lab has a graded function {function!r}")
    lab = labs[0]
    info = lab_info(lab)
    found = clustering.for_lab({e["student"]: e for e in entries if e["lab"] == lab}, info.tests_of, info.depends)
    groups = found.get(function, [])
    if not 1 <= index <= len(groups):
        raise KeyError(f"{function} has {len(groups)} clusters in {run_dir} (numbered 1 to {len(groups)}), "
                       f"not {index}")
    cluster = groups[index - 1]
    details = {(e["student"], e["lab"]): e for e in entries}
    code = _sources([], Path(run_dir), details).get((cluster.representative, lab), {}).get(function)
    if code is None:
        raise KeyError(f"no solution cells of {cluster.representative} for {lab} in {run_dir}: neither in "
                       "results.json nor in autograded/")
    return lab, cluster, code


def skeleton(lab: str, cluster, code: str) -> str:
    bug_id = f"{cluster.function}_cluster_{cluster.index}"
    # The student's text, quoted into the instructor's terminal: no control character or escape sequence.
    body = re.sub(rf"^def {re.escape(cluster.function)}\(", f"def {bug_id}(", student_text(code, 20000), count=1,
                  flags=re.M)
    who = ", ".join(cluster.students)
    seen = ", ".join(cluster.relations) or "none of the listed relations"
    tests = ", ".join(cluster.tests)
    return (
        f"# Cluster {cluster.index} of {cluster.function} ({lab}): {len(cluster.students)} students ({who}).\n"
        f"# They fail {tests}; their outputs against the reference's: {seen}.\n"
        f"# Representative: {cluster.representative}.\n\n"
        f"# --- 1. solutions/{lab}/bugs.py (instructor only): add this body to BODIES ---\n"
        f"{body.rstrip()}\n\n\n"
        f"# --- 2. shared/genlab/catalog/{lab}.py: add to BUGS (students read this module: if the body above is\n"
        f"# the answer after a small edit, write impl here as an @edit of their {cluster.function}) ---\n"
        f"Bug({bug_id!r}, {cluster.function!r}, \"TODO: one line for the feedback\",\n"
        f"    {json.dumps(f'TODO: what goes wrong, in words (seen: {seen}; fails {tests})')},\n"
        f"    \"TODO: what to try\",\n"
        f"    \"TODO: where the bug is documented (paper, issue, docs)\",\n"
        f"    {bug_id}),\n")
