"""Shape checks with named dimensions and hints for the classic shape bugs.

``check_shape(z, "B D", B=32, D=16)`` reads like the shape comments in a lab
("z: (B, D)"). A dimension named in `dims` but not given a size is free: it may
take any size, but the same size everywhere it appears, so ``"B T T"`` checks a
square attention matrix without fixing T. Integer literals (``"B 3 H W"``) are
fixed sizes.
"""

from __future__ import annotations

import itertools
from typing import Optional, Sequence

import torch

from .errors import CheckFailed, require_tensor

# A parsed dimension is (label, size): the label as written in `dims`, and the
# expected size, or None while a free dimension is not yet bound.
Dim = tuple[str, Optional[int]]


def check_shape(tensor: torch.Tensor, dims: str, **sizes: int) -> None:
    """Fail unless `tensor` has the shape named by `dims` (e.g. ``"B H T D"``).

    `sizes` give the expected size of named dimensions, e.g. ``B=32, D=16``.
    The message names the dimensions and hints at the likely slip: a transpose,
    a reduction that dropped a dimension, an accidental broadcast, a flatten.
    """
    expected = _parse(dims, sizes)
    labels = tuple(label for label, _ in expected)
    tensor = require_tensor(tensor, name="output", expected=f"a torch.Tensor of shape {_fmt(labels)}")
    got = tuple(tensor.shape)

    if len(got) != len(expected):
        raise CheckFailed(_rank_message(expected, got))

    bound = _bind(expected, got)
    if bound is None:  # a free dimension took two different sizes
        raise CheckFailed(_inconsistent_message(expected, got))
    want = tuple(size for _, size in bound)
    if want == got:
        return

    head = f"expected shape {_expected(labels, want)}, got {_fmt(got)}"
    if sorted(want) == sorted(got):
        raise CheckFailed(f"{head}: did you transpose? Use .permute/.transpose to reorder "
                          "dimensions; .view/.reshape only regroups them")
    wrong = [i for i, ((_, size), g) in enumerate(zip(bound, got)) if size != g]
    details = "; ".join(f"{_dim_name(bound, i)} should be {bound[i][1]}, got {got[i]}" for i in wrong)
    raise CheckFailed(f"{head} ({details}): {_size_hint(bound, got, wrong)}")


def _size_hint(expected: Sequence[Dim], got: Sequence[int], wrong: Sequence[int]) -> str:
    """Same rank, wrong sizes: a size-1 axis is usually a reduction or broadcast slip."""
    names = " and ".join(_dim_name(expected, i) for i in wrong)
    if all(got[i] == 1 for i in wrong):
        return f"did you reduce over {names} with keepdim=True, or forget to broadcast / expand it?"
    if all(expected[i][1] == 1 for i in wrong):
        return f"did you forget to reduce over {names} (.sum/.mean with keepdim=True)?"
    return "check where those sizes come from (a hidden size, a slice end, a kernel size or stride)"


# --- parsing and matching -------------------------------------------------------------


def _parse(dims: str, sizes: dict[str, int]) -> list[Dim]:
    """Turn ``"B 3 D"`` plus ``sizes`` into ``[("B", 32), ("3", 3), ("D", None)]``."""
    labels = dims.replace(",", " ").split()
    unknown = set(sizes) - set(labels)
    if unknown:  # a mistake in the check itself, not in the student's code
        raise ValueError(f"check_shape: sizes given for {sorted(unknown)} but dims is {dims!r}")
    return [(label, int(label) if label.isdigit() else sizes.get(label)) for label in labels]


def _bind(expected: Sequence[Dim], got: Sequence[int]) -> Optional[list[Dim]]:
    """Give free dimensions the sizes found in `got`; None if one takes two sizes."""
    sizes: dict[str, int] = {label: size for label, size in expected if size is not None}
    for (label, size), g in zip(expected, got):
        if size is None:
            sizes.setdefault(label, g)
            if sizes[label] != g:
                return None
    return [(label, sizes[label]) for label, _ in expected]


def _dropped_positions(longer: Sequence, shorter: Sequence, same) -> Optional[tuple[int, ...]]:
    """Positions to delete from `longer` so it matches `shorter` (elementwise via `same`).

    Shapes have a handful of dimensions, so trying every combination is cheap
    and simpler than anything clever.
    """
    for dropped in itertools.combinations(range(len(longer)), len(longer) - len(shorter)):
        kept = [item for i, item in enumerate(longer) if i not in dropped]
        if same(kept, shorter):
            return dropped
    return None


def _matches(expected: Sequence[Dim], got: Sequence[int]) -> bool:
    return len(expected) == len(got) and _bind(expected, got) is not None and \
        all(size is None or size == g for (_, size), g in zip(expected, got))


# --- messages -------------------------------------------------------------------------


def _fmt(items: Sequence) -> str:
    """Format like a Python tuple, without the trailing comma noise: (B, D), (32,)."""
    items = ["?" if item is None else str(item) for item in items]
    if not items:
        return "()"
    return f"({items[0]},)" if len(items) == 1 else f"({', '.join(items)})"


def _expected(labels: Sequence[str], want: Sequence[Optional[int]]) -> str:
    """``(B, D) = (32, 16)``, or just ``(32, 16)`` when every dimension is a literal size."""
    if all(label.isdigit() for label in labels):
        return _fmt(want)
    return f"{_fmt(labels)} = {_fmt(want)}"


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def _dim_name(expected: Sequence[Dim], i: int) -> str:
    """How to name dimension `i` in a message: its label, or its position if unnamed."""
    label = expected[i][0]
    return f"dimension {i}" if label.isdigit() else label


def _rank_message(expected: list[Dim], got: tuple[int, ...]) -> str:
    labels = tuple(label for label, _ in expected)
    want = tuple(size for _, size in expected)
    head = (f"expected shape {_expected(labels, want)} ({_plural(len(expected), 'dimension')}), "
            f"got {_fmt(got)} ({_plural(len(got), 'dimension')})")
    known = [s for s in want if s is not None]
    same_numel = len(known) == len(want) and torch.Size(want).numel() == torch.Size(got).numel()

    if len(got) < len(expected):
        # Fewer dimensions: usually a reduction (or integer index) that dropped some.
        dropped = _dropped_positions(expected, got, lambda kept, g: _matches(kept, g))
        if dropped is not None:
            names = " and ".join(_dim_name(expected, i) for i in dropped)
            if all(expected[i][1] == 1 for i in dropped):
                return (f"{head}: did you squeeze away {names} (size 1)? "
                        "Keep it with keepdim=True or put it back with .unsqueeze")
            return (f"{head}: did you sum over {names}? Reductions (.sum/.mean/.max) and integer "
                    f"indexing drop a dimension; keep {names} if it should survive, or use keepdim=True")
        if same_numel:
            return f"{head}: same number of elements: did you flatten? Reshape with .view{_fmt(want)}"
        return f"{head}: a dimension is missing: did you forget to .unsqueeze or reshape?"

    # More dimensions: an extra size-1 axis, a missing reduction, or a broadcast gone wrong.
    dropped = _dropped_positions(got, expected, lambda kept, e: _matches(e, kept))
    if dropped is not None:
        extra = ", ".join(f"size {got[i]} at position {i}" for i in dropped)
        if all(got[i] == 1 for i in dropped):
            return (f"{head}: extra dimension ({extra}): did you use keepdim=True or .unsqueeze? "
                    "Remove it with .squeeze(dim)")
        return (f"{head}: extra dimension ({extra}): did you forget to broadcast / reduce over it? "
                "A (N,) tensor combined with a (N, 1) one broadcasts to (N, N); "
                "a missing .sum/.mean also leaves a dimension behind")
    if same_numel:
        return f"{head}: same number of elements: reshape with .view{_fmt(want)}"
    return f"{head}: check each reshape/unsqueeze against the expected dimensions"


def _inconsistent_message(expected: list[Dim], got: tuple[int, ...]) -> str:
    labels = tuple(label for label, _ in expected)
    seen: dict[str, int] = {}
    for (label, size), g in zip(expected, got):
        if size is None and seen.setdefault(label, g) != g:
            return (f"expected shape {_fmt(labels)}, got {_fmt(got)}: {label} must have "
                    f"the same size everywhere, got {seen[label]} and {g}: did you slice or pad "
                    f"one side only?")
    raise AssertionError("unreachable: _bind found no inconsistency")  # pragma: no cover
