"""Value checks: close-enough comparisons that never mark down correct code for rounding.

Two modes, chosen from the dtypes:

* **Ground truth.** `expected` is float64 and `actual` is a lower-precision float
  (float32, float16, bfloat16). `expected` is then treated as the exact answer:
  both are compared in float64, at a tolerance that fits *actual's* dtype. Correct
  code in half precision lands within a few dozen roundings of the truth, however
  it was written (manual softmax vs ``torch.softmax``, sum order, fused kernels).
* **Same dtype.** Otherwise the dtypes must match and the comparison runs in that
  dtype, using the same per-dtype tolerances (the reference is rounded too).

Default tolerances, |actual - expected| <= atol * scale + rtol * |expected| where
`scale` is the RMS of `expected` (1.0 if it is all zeros), so the test does not
depend on the units of the output:

=========  ======  ======  ===============================================
dtype      rtol    atol    why
=========  ======  ======  ===============================================
float16    3e-2    3e-2    correct attention/softmax/layernorm reach ~2e-2
bfloat16   1e-1    1e-1    8-bit mantissa: softmax of large logits ~0.15
float32    1e-4    1e-4    ~10x the worst correct-code error we measured
float64    1e-7    1e-7    torch.testing's defaults
=========  ======  ======  ===============================================

(Measured against float64 ground truth on CPU: matmul K=4096, manual and fused
softmax / layer norm / attention, GELU, conv2d, cross-entropy.) Typical bugs
(missing 1/sqrt(d), a sign, an off-by-one shift) are errors of 30% or more, far
outside these bands; bugs smaller than the band cannot be told apart from
rounding in that dtype, so check those in float32/float64. Ill-conditioned
computations (e.g. ``sin`` of arguments near 1000 in float16) need an explicit
`rtol`/`atol`. Integer and bool outputs must match exactly.
"""

from __future__ import annotations

from typing import Optional

import torch

from .errors import CheckFailed, require_tensor
from .shapes import check_shape

# (rtol, atol-relative-to-RMS) per floating dtype; see the module docstring.
DEFAULT_TOLERANCES: dict[torch.dtype, tuple[float, float]] = {
    torch.float16: (3e-2, 3e-2),
    torch.bfloat16: (1e-1, 1e-1),
    torch.float32: (1e-4, 1e-4),
    torch.float64: (1e-7, 1e-7),
}


def check_close(
    actual: torch.Tensor,
    expected: torch.Tensor,
    *,
    name: str = "output",
    rtol: Optional[float] = None,
    atol: Optional[float] = None,
    equal_nan: bool = False,
) -> None:
    """Fail unless `actual` matches `expected`: shape, then dtype, then values.

    Wraps :func:`torch.testing.assert_close`. An explicit `atol` is used as given
    (not scaled); omitted tolerances come from :data:`DEFAULT_TOLERANCES`.
    The message gives the number of mismatched elements, the largest absolute
    difference and where it is, and a hint guessed from the pattern of errors.
    """
    actual = require_tensor(actual, name=name, expected="a torch.Tensor")
    expected = torch.as_tensor(expected)

    # Shape first: a value diff between misaligned tensors is noise.
    if actual.shape != expected.shape:
        try:  # literal sizes: check_shape then words the hint (transpose, missing dim...)
            check_shape(actual, " ".join(str(size) for size in expected.shape))
        except CheckFailed as failure:
            raise CheckFailed(f"{name}: {failure}") from None

    ground_truth = (expected.dtype == torch.float64 and actual.is_floating_point()
                    and actual.dtype != torch.float64)
    if not ground_truth and actual.dtype != expected.dtype:
        raise CheckFailed(f"{name}: expected dtype {expected.dtype}, got {actual.dtype}: "
                          f"{_dtype_hint(expected.dtype, actual.dtype)}")

    # Compare on actual's device (values are what matter here; check_dtype_device
    # checks placement), in float64 when expected is the ground truth.
    expected = expected.to(actual.device)
    if ground_truth:
        actual_cmp, expected_cmp = actual.double(), expected
    else:
        actual_cmp, expected_cmp = actual, expected
    rtol, atol, how = tolerances(actual.dtype, expected_cmp, rtol, atol)

    def message(_torch_message: str) -> str:
        return _mismatch_message(name, actual_cmp, expected_cmp, rtol, atol, equal_nan, how,
                                 ground_truth_for=actual.dtype if ground_truth else None)

    try:
        torch.testing.assert_close(actual_cmp, expected_cmp, rtol=rtol, atol=atol, equal_nan=equal_nan,
                                   check_dtype=False, check_device=False, msg=message)
    except AssertionError as failure:
        raise CheckFailed(str(failure)) from None


def check_dtype_device(actual: torch.Tensor, like: torch.Tensor, *, name: str = "output") -> None:
    """Fail unless `actual` has the dtype and device of `like` (usually the input)."""
    actual = require_tensor(actual, name=name,
                            expected=f"a torch.Tensor of dtype {like.dtype} on {like.device}")
    if actual.dtype != like.dtype:
        raise CheckFailed(f"{name}: expected dtype {like.dtype} (same as the input), got {actual.dtype}: "
                          "create new tensors with dtype=x.dtype / use torch.randn_like, torch.zeros_like")
    if actual.device != like.device:
        raise CheckFailed(f"{name}: expected device {like.device} (same as the input), got {actual.device}: "
                          "create new tensors with device=x.device / use torch.randn_like, torch.zeros_like, "
                          "and avoid .cpu() / .cuda() inside the function")


# --- tolerances ----------------------------------------------------------------------


def tolerances(dtype: torch.dtype, expected: torch.Tensor, rtol: Optional[float],
                atol: Optional[float]) -> tuple[float, float, str]:
    """Resolve (rtol, atol) and describe them for the message."""
    if not (dtype.is_floating_point or dtype.is_complex):
        # Integers and bools carry no rounding error to forgive.
        rtol, atol = rtol or 0.0, atol or 0.0
        exact = rtol == atol == 0
        return rtol, atol, "(must match exactly)" if exact else f"beyond rtol={rtol:g}, atol={atol:g}"
    # Complex numbers round like their real parts (complex64 like float32).
    default_rtol, default_atol = DEFAULT_TOLERANCES.get(dtype.to_real(), DEFAULT_TOLERANCES[torch.float64])
    rtol = default_rtol if rtol is None else rtol
    if atol is not None:
        return rtol, atol, f"beyond rtol={rtol:g}, atol={atol:g}"
    # Scale atol by the typical magnitude of the answer: errors near zero come from
    # cancelling terms of roughly that size, so an absolute floor in fixed units
    # would be too strict for large outputs and meaningless for tiny ones.
    finite = expected[torch.isfinite(expected)].abs().double()
    rms = finite.pow(2).mean().sqrt().item() if finite.numel() else 0.0
    if rms == 0:  # an all-zero answer has no scale of its own
        return rtol, default_atol, f"beyond rtol={rtol:g}, atol={default_atol:g}"
    atol = default_atol * rms
    return rtol, atol, (f"beyond rtol={rtol:g}, atol={default_atol:g} x RMS of expected "
                        f"{rms:.3g} = {atol:.3g}")


# --- messages ------------------------------------------------------------------------


def _dtype_hint(expected: torch.dtype, got: torch.dtype) -> str:
    if got == torch.float64:
        return ("something promoted to float64: torch.tensor/np arrays of Python floats are float64; "
                "pass dtype=x.dtype or use torch.*_like")
    if expected.is_floating_point and not got.is_floating_point:
        return "integer or bool result: use true division (/), .float() or a float dtype"
    if got.is_floating_point and not expected.is_floating_point:
        return (f"the result should be {expected}: round or compare explicitly (.long(), argmax) "
                "instead of float math")
    return "create new tensors with dtype=x.dtype and avoid explicit .float()/.half() casts"


def _widest(t: torch.Tensor) -> torch.Tensor:
    """`t` in float64 (complex128 if complex), so differences never overflow or wrap."""
    return t.to(torch.complex128) if t.is_complex() else t.double()


def _mismatch_message(name, actual, expected, rtol, atol, equal_nan, how, ground_truth_for) -> str:
    close = torch.isclose(actual, expected, rtol=rtol, atol=atol, equal_nan=equal_nan)
    n_bad, n_all = int((~close).sum()), actual.numel()
    diff = (_widest(actual) - _widest(expected)).abs()
    diff = torch.where(torch.isnan(diff) & ~close, torch.full_like(diff, float("inf")), diff)
    diff = torch.where(close, torch.zeros_like(diff), diff)  # report the worst *mismatch*
    worst = int(diff.flatten().argmax())
    index = tuple(int(i) for i in torch.unravel_index(torch.tensor(worst), actual.shape))
    mode = "" if ground_truth_for is None else \
        f" (compared in float64 against the float64 ground truth, tolerances for {ground_truth_for})"
    return (f"{name}: {n_bad} of {n_all} elements differ ({100 * n_bad / max(n_all, 1):.3g}%) "
            f"{how}{mode}. Largest difference {diff.flatten()[worst].item():.4g} at index {index}: "
            f"got {actual.flatten()[worst].item():.6g}, expected {expected.flatten()[worst].item():.6g}. "
            f"Hint: {_value_hint(actual, expected, rtol, atol, n_bad / max(n_all, 1))}")


def _value_hint(actual: torch.Tensor, expected: torch.Tensor, rtol: float, atol: float,
                bad_fraction: float) -> str:
    """Guess the bug from the pattern of the error (each test is cheap, in float64)."""
    if actual.is_complex():
        return "compare your output with the expected one step by step on a tiny input"
    a, e = actual.double().flatten(), expected.double().flatten()

    def looks_like(guess: torch.Tensor) -> bool:
        return bool(torch.isclose(a, guess, rtol=rtol, atol=atol).all())

    if (~torch.isfinite(a) & torch.isfinite(e)).any():
        return ("your output has NaN/inf where the expected is finite: look for log(0), division by zero, "
                "sqrt of a negative, or exp overflow (subtract the max before exp; float16 overflows at 65504)")
    if (~torch.isfinite(e) & torch.isfinite(a)).any():
        return "the expected has inf/NaN where yours is finite (e.g. masked positions that should be -inf)"
    if a.numel() == 1:  # one number fits every pattern below; say nothing misleading
        return "check the formula on a tiny input you can work out by hand"
    if e.abs().max() > 0 and looks_like(-e):
        return "your output is the negative of the expected: check a sign (loss = -log p, ascent vs descent)"
    energy = float(e @ e)
    if energy > 0:
        factor = float(a @ e) / energy
        if looks_like(factor * e):
            return (f"your output is about {factor:.4g} x the expected: a scale factor is off "
                    "(1/sqrt(d), mean vs sum, a factor of 2 or 0.5)")
    shift = float((a - e).mean())
    if looks_like(e + shift):
        return (f"your output is shifted by about {shift:.4g} everywhere: a constant term is off "
                "(a bias, +1, a log-normalizer)")
    if _same_values_reordered(a, e, rtol, atol):
        return ("right values in the wrong places: check the order of dimensions (.transpose/.permute "
                "vs .view/.reshape) or the indices you gather")
    if bad_fraction < 0.05:
        return ("only a few elements differ: check edge cases such as masked or padded positions, "
                "the first or last time step, or image borders")
    return "compare your output with the expected one step by step on a tiny input"


def _same_values_reordered(a: torch.Tensor, e: torch.Tensor, rtol: float, atol: float) -> bool:
    """True when `a` holds the same values as `e`, just in a different order."""
    return bool(torch.isclose(a.sort().values, e.sort().values, rtol=rtol, atol=atol).all())
