"""How a student's recorded outputs relate to the reference's on the same inputs: a compact summary per function.

The grader records every call a test made to a student's function (:class:`genlab.testing.calls.Call`). For a
function that lost marks, each recorded call is replayed through the reference, and the student's output is
compared with the reference's by a short list of relations a misconception typically leaves behind:

- ``equal``; ``negated`` (s = -r); ``scaled by c`` (s = c r, one constant); ``shifted by c`` (s = r + c);
- ``dtype differs`` (the values agree once cast); ``non-finite where the reference is finite``;
- shape relations: ``not reduced over dim d`` (s summed or averaged over d is r), ``also reduced over dim d``,
  ``dims permuted`` (a transpose), ``same values, other order``, ``off by one index along dim d``;
- ``raises E`` (the reference does not), ``other`` (none of the above).

Only the labels and their counts are kept (``results.json``'s ``behaviour``), never a tensor: a few hundred
bytes per failing function. ``autograder.insight.clusters`` groups students by them. Dims are counted from the end
(-1 is the last) so that one mistake gives one label whatever the batch shape of each call.
"""
from __future__ import annotations

import itertools
import re
import time
from collections import Counter

import torch

from genlab.testing.diagnosis import replay, same, student_outcome

MAX_CALLS = 40          # calls compared per function: enough to see a pattern, bounded cost
MAX_SECONDS = 5.0       # time budget per function for the replays (a training loop replays slowly)
MAX_LABELS = 12         # distinct labels kept per function
KINDS = ("call", "grad_of")
IDENTIFIER = re.compile(r"[A-Za-z_]\w{0,39}")


def _float(t: torch.Tensor) -> torch.Tensor:
    return t.detach().cpu().double()


def _close(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.shape == b.shape and torch.allclose(a, b, rtol=1e-3, atol=1e-5 * (1 + b.abs().max().item()),
                                                 equal_nan=True)


def _round(c: float) -> str:
    return f"{c:.2g}"


def _tensor_relation(s: torch.Tensor, r: torch.Tensor) -> str:
    """One label for a student tensor ``s`` against the reference's ``r``."""
    if s.shape != r.shape:
        return _shape_relation(_float(s), _float(r))
    if s.dtype != r.dtype:
        return "dtype differs" if _close(_float(s), _float(r)) else "dtype differs, values too"
    if not (s.dtype.is_floating_point or s.dtype.is_complex):
        return "equal" if torch.equal(s.cpu(), r.cpu()) else "other"
    s, r = _float(s), _float(r)
    if _close(s, r):
        return "equal"
    if (~torch.isfinite(s) & torch.isfinite(r)).any():
        return "non-finite where the reference is finite"
    if not torch.isfinite(r).all():
        return "other"
    if _close(s, -r):
        return "negated"
    norm = (r * r).sum().item()
    if norm > 0:
        c = (s * r).sum().item() / norm  # least-squares factor: s = c r
        if _close(s, c * r):
            return f"scaled by {_round(c)}"
    c = (s - r).mean().item()  # s = r + c
    if c != 0 and _close(s, r + c):
        return f"shifted by {_round(c)}"
    for d in range(s.dim()):
        if s.shape[d] > 1 and (_close(s.narrow(d, 1, s.shape[d] - 1), r.narrow(d, 0, r.shape[d] - 1))
                               or _close(s.narrow(d, 0, s.shape[d] - 1), r.narrow(d, 1, r.shape[d] - 1))):
            return f"off by one index along dim {d - s.dim()}"
    if s.numel() > 1 and _close(s.flatten().sort().values, r.flatten().sort().values):
        return "same values, other order"
    return "other"


def _shape_relation(s: torch.Tensor, r: torch.Tensor) -> str:
    if s.dim() == r.dim() + 1:
        for d in range(s.dim()):
            for how, reduce in (("summed", torch.sum), ("averaged", torch.mean)):
                if _close(reduce(s, dim=d), r):
                    return f"not {how} over dim {d - s.dim()}"
    if s.dim() + 1 == r.dim():
        for d in range(r.dim()):
            for how, reduce in (("summed", torch.sum), ("averaged", torch.mean)):
                if _close(reduce(r, dim=d), s):
                    return f"also {how} over dim {d - r.dim()}"
    if s.dim() == r.dim() and sorted(s.shape) == sorted(r.shape) and s.dim() <= 5:
        for p in itertools.permutations(range(s.dim())):
            if list(p) != list(range(s.dim())) and _close(s.permute(p), r):
                return "dims permuted"
    if s.numel() == r.numel():
        return "same values, other shape" if _close(s.flatten(), r.flatten()) else "other shape, same size"
    return "other shape"


def relation(s, r) -> list[str]:
    """Labels relating a student's outcome ``s`` to the reference's ``r`` (one per output for tuples)."""
    if isinstance(r, BaseException):  # both raise: the same refusal (a student's value here is skipped above)
        return ["equal"]
    if isinstance(s, BaseException):
        name = type(s).__name__  # the student's kernel named it: kept only if it is a short identifier
        return [f"raises {name}" if IDENTIFIER.fullmatch(name) else "raises an exception"]
    if isinstance(r, (list, tuple)):
        if not isinstance(s, (list, tuple)) or len(s) != len(r):
            return ["other structure"]
        labels = [relation(a, b) for a, b in zip(s, r)]
        if len(r) == 1:
            return labels[0]
        return [f"[{i}] {lab}" for i, part in enumerate(labels) for lab in part if lab != "equal"] or ["equal"]
    if isinstance(r, (int, float)) and not isinstance(r, bool) and isinstance(s, (int, float, torch.Tensor)):
        r = torch.tensor(float(r), dtype=torch.float64)  # a Python number: compared as a 0-d tensor
    if isinstance(r, torch.Tensor):
        if isinstance(s, (int, float)) and not isinstance(s, bool):
            s = torch.tensor(float(s), dtype=r.dtype)
        if not isinstance(s, torch.Tensor):
            return ["None where the reference has a value" if s is None else "other type"]
        return [_tensor_relation(s, r)]
    if r is None or s is None:
        return ["equal" if s is r else ("None where the reference has a value" if s is None else "other")]
    return ["equal" if same(s, r) else "other"]


def summarize(calls, reference_fn) -> dict:
    """{"calls": compared, "relations": {label: count}}: the student's calls against ``reference_fn``'s.

    A call whose reference output is random (two replays differ) says nothing and is skipped."""
    counts: Counter = Counter()
    compared, start = 0, time.perf_counter()
    for call in calls:
        if compared >= MAX_CALLS or time.perf_counter() - start > MAX_SECONDS:
            break
        if call.kind not in KINDS:
            continue
        expected = replay(reference_fn, call)
        if not same(expected, replay(reference_fn, call)):
            continue  # random without a seed (no eps given): no fixed answer to compare with
        if isinstance(expected, BaseException) and student_outcome(call) is not None \
                and not isinstance(student_outcome(call), BaseException):
            continue  # the reference cannot run outside the notebook (it needs the lab's state): no evidence
        compared += 1
        try:
            found = relation(student_outcome(call), expected)
            counts.update(f"gradient {lab}" if call.kind == "grad_of" else lab for lab in found)
        except Exception:  # noqa: BLE001 - an odd value must not stop grading
            counts["other"] += 1
    kept = dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:MAX_LABELS])
    return {"calls": compared, "relations": kept}


def for_failures(functions, calls, reference_namespace) -> dict[str, dict]:
    """The summary of each function in ``functions`` (those that lost marks), from all of its recorded calls."""
    found = {}
    for function in functions:
        reference_fn = getattr(reference_namespace, function, None)
        own = [c for c in calls if c.name == function]
        if reference_fn is not None and own:
            found[function] = summarize(own, reference_fn)
    return found


def labels(summary: dict) -> frozenset[str]:
    """The relations that set this behaviour apart (``equal`` holds for a correct function too)."""
    return frozenset(k for k in summary.get("relations", {}) if k != "equal")

