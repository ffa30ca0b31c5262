"""Naming bugs by replay: the same bug written another way is still named; correct code never is."""
from __future__ import annotations

import torch

from autograder.core.labs import instructor_bug as bug  # full bodies, where students see edits
from genlab.testing.diagnosis import diagnose, matches
from genlab.testing.calls import Call

LAB = "lab2_diffusion"


def reference_q_sample(x0, t, noise, alpha_bar):
    if int(t.min()) < 0 or int(t.max()) >= alpha_bar.shape[0]:
        raise IndexError("t out of range")
    a = alpha_bar[t].view(-1, *([1] * (x0.dim() - 1)))
    return a.sqrt().to(x0.dtype) * x0 + (1 - a).sqrt().to(x0.dtype) * noise


def off_by_one_with_range_check(x0, t, noise, alpha_bar):
    """The catalogued off-by-one, written by a student who also validates t, and rounds in x0's dtype."""
    if (t < 0).any() or (t >= len(alpha_bar)).any():
        raise IndexError("t out of range")
    a = alpha_bar[t - 1].to(x0.dtype).reshape(-1, *([1] * (x0.ndim - 1)))
    return a.sqrt() * x0 + (1 - a).sqrt() * noise


def _calls(fn, dtype):
    torch.manual_seed(0)
    alpha_bar = torch.cumprod(1 - torch.linspace(1e-4, 0.02, 100, dtype=torch.float64), 0)
    inputs = [(torch.randn(4, 3, 2, 2, dtype=dtype), torch.tensor([0, 1, 50, 99]), torch.randn(4, 3, 2, 2, dtype=dtype)),
              (torch.randn(2, 5, dtype=dtype), torch.tensor([0, 100]), torch.randn(2, 5, dtype=dtype))]
    calls = []
    for x0, t, noise in inputs:
        call = Call("call", "q_sample", (x0, t, noise, alpha_bar), {})
        try:
            call.result = fn(x0, t, noise, alpha_bar)
        except Exception as exc:  # noqa: BLE001
            call.error = type(exc).__name__
        calls.append(call)
    return calls


def test_the_same_bug_with_input_validation_and_half_precision_rounding_is_named():
    for dtype in (torch.float32, torch.float16):
        calls = _calls(off_by_one_with_range_check, dtype)
        assert calls[1].error == "IndexError"  # the reference raises here too; the catalogued bug does not
        assert matches(bug(LAB, "off_by_one_t"), calls, reference_q_sample), dtype


def test_correct_code_is_never_diagnosed():
    for dtype in (torch.float32, torch.float16, torch.bfloat16):
        assert diagnose([bug(LAB, b) for b in ("off_by_one_t", "silent_broadcast")],
                        _calls(reference_q_sample, dtype), type("Ref", (), {"q_sample": staticmethod(
                            reference_q_sample)})) == []


def test_a_different_error_is_evidence_against_the_bug():
    def raises_on_everything(x0, t, noise, alpha_bar):
        raise ValueError("not implemented")

    assert not matches(bug(LAB, "off_by_one_t"), _calls(raises_on_everything, torch.float32), reference_q_sample)
