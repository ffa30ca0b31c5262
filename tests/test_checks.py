"""Unit tests for genlab.checks: every check passes a right answer and fails a wrong one.

Failure tests assert on the message too, because the message is the product:
it is what a student reads.
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.flop_counter import FlopCounterMode

from genlab.checks import (
    CheckFailed,
    TimingResult,
    check_close,
    check_dtype_device,
    check_grad_reaches,
    check_not_slower,
    check_shape,
    count_flops,
    grad_of,
    peak_memory,
    time_ratio,
)


def attention(q, k, v):
    """Plain attention, written by hand: the "another way" of SDPA."""
    scores = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
    return scores.softmax(dim=-1) @ v


def attention_missing_scale(q, k, v):
    """A classic bug: forgetting the 1/sqrt(d) temperature."""
    return (q @ k.transpose(-1, -2)).softmax(dim=-1) @ v


@pytest.fixture
def qkv64():
    generator = torch.Generator().manual_seed(0)
    return [torch.randn(2, 4, 64, 32, generator=generator, dtype=torch.float64) for _ in range(3)]


# --- shapes -----------------------------------------------------------------------------


def test_check_shape_passes_right_shape():
    check_shape(torch.zeros(32, 16), "B D", B=32, D=16)
    check_shape(torch.zeros(2, 5, 5), "B T T", B=2)  # T is free but must agree with itself
    check_shape(torch.zeros(2, 3, 8, 8), "B 3 H W", B=2)  # literal sizes


def test_check_shape_transposed():
    with pytest.raises(CheckFailed) as failure:
        check_shape(torch.zeros(16, 32), "B D", B=32, D=16)
    assert str(failure.value).startswith("expected shape (B, D) = (32, 16), got (16, 32): did you transpose?")


def test_check_shape_reduced_away():
    with pytest.raises(CheckFailed, match=r"got \(32,\) .*did you sum over D\?"):
        check_shape(torch.zeros(32), "B D", B=32, D=16)


def test_check_shape_accidental_broadcast():
    per_row = torch.zeros(32)
    with pytest.raises(CheckFailed, match=r"got \(32, 32\).*broadcast"):
        check_shape(per_row[:, None] - per_row, "B", B=32)  # (B, 1) - (B,) -> (B, B)


def test_check_shape_keepdim_and_flatten_hints():
    with pytest.raises(CheckFailed, match=r"D should be 16, got 1\): did you reduce over D with keepdim=True"):
        check_shape(torch.zeros(32, 1), "B D", B=32, D=16)
    with pytest.raises(CheckFailed, match=r"same number of elements: did you flatten\? Reshape with .view\(32, 16\)"):
        check_shape(torch.zeros(512), "B D", B=32, D=16)
    with pytest.raises(CheckFailed, match=r"extra dimension \(size 1 at position 1\).*squeeze"):
        check_shape(torch.zeros(32, 1, 16), "B D", B=32, D=16)


def test_check_shape_free_dimension_must_agree():
    with pytest.raises(CheckFailed, match="T must have the same size everywhere, got 5 and 7"):
        check_shape(torch.zeros(2, 5, 7), "B T T", B=2)


@pytest.mark.parametrize("not_a_tensor, type_text, hint", [
    ([[0.0] * 16] * 32, "got list", "not a Python sequence"),
    (None, "got NoneType", "forget a `return`"),
    (3.0, "got float", "not .item()"),
])
def test_check_shape_not_a_tensor(not_a_tensor, type_text, hint):
    with pytest.raises(CheckFailed) as failure:
        check_shape(not_a_tensor, "B D", B=32, D=16)
    assert "expected a torch.Tensor of shape (B, D)" in str(failure.value)
    assert type_text in str(failure.value) and hint in str(failure.value)


def test_check_shape_rejects_sizes_for_unknown_dims():
    # A bug in the check, not in the student's code: a plain ValueError.
    with pytest.raises(ValueError, match="sizes given for"):
        check_shape(torch.zeros(3), "B", B=3, D=4)


# --- values -------------------------------------------------------------------------------


def test_check_close_passes_equal_and_rounded_values():
    x = torch.linspace(-1, 1, 101)
    check_close(x, x.clone())
    check_close(x * (1 + 1e-6), x)  # float32 rounding-level differences
    check_close(torch.tensor([1, 2, 3]), torch.tensor([1, 2, 3]))


def test_check_close_value_off_message():
    expected = torch.zeros(10, 10)
    actual = expected.clone()
    actual[2, 3] = 0.5
    with pytest.raises(CheckFailed) as failure:
        check_close(actual, expected, name="logits")
    message = str(failure.value)
    assert message.startswith("logits: 1 of 100 elements differ (1%) beyond rtol=0.0001, atol=0.0001.")
    assert "Largest difference 0.5 at index (2, 3): got 0.5, expected 0" in message
    assert "Hint: only a few elements differ" in message


def test_check_close_not_a_tensor():
    with pytest.raises(CheckFailed, match=r"^loss: expected a torch.Tensor, got float: return the tensor itself"):
        check_close(0.5, torch.tensor(0.5), name="loss")


def test_check_close_shape_first():
    with pytest.raises(CheckFailed, match=r"^output: expected shape \(8, 3\), got \(3, 8\): did you transpose\?"):
        check_close(torch.zeros(3, 8), torch.zeros(8, 3))


def test_check_close_dtype_change():
    with pytest.raises(CheckFailed, match=r"expected dtype torch.float32, got torch.float64: something promoted"):
        check_close(torch.zeros(3, dtype=torch.float64), torch.zeros(3))
    with pytest.raises(CheckFailed, match=r"expected dtype torch.float32, got torch.int64: integer or bool result"):
        check_close(torch.tensor([1, 2]), torch.tensor([1.0, 2.0]))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
def test_low_precision_correct_code_passes_against_float64_ground_truth(qkv64, dtype):
    truth = attention(*qkv64)
    low = [t.to(dtype) for t in qkv64]
    # Two correct implementations with different rounding both pass...
    check_close(attention(*low), truth)
    check_close(F.scaled_dot_product_attention(*low), truth)
    # ...and a genuine bug in the same dtype still fails.
    with pytest.raises(CheckFailed, match=f"tolerances for {dtype}"):
        check_close(attention_missing_scale(*low), truth, name="attention")


def test_float16_defaults_are_needed(qkv64):
    """torch.testing's own float16 tolerance (rtol 1e-3) would mark correct fp16 attention down."""
    truth = attention(*qkv64)
    half = attention(*[t.half() for t in qkv64])
    with pytest.raises(CheckFailed):
        check_close(half, truth, rtol=1e-3, atol=1e-5)
    check_close(half, truth)


@pytest.mark.parametrize("wrong, hint", [
    (lambda e: -e, "negative of the expected"),
    (lambda e: 2 * e, "about 2 x the expected"),
    (lambda e: e + 1, "shifted by about 1"),
    (lambda e: e.T.reshape(e.shape), "right values in the wrong places"),
    (lambda e: torch.where(e > 0, e / 0, e), "NaN/inf where the expected is finite"),
])
def test_check_close_hints(wrong, hint):
    expected = torch.randn(6, 4, generator=torch.Generator().manual_seed(1))
    with pytest.raises(CheckFailed, match=hint):
        check_close(wrong(expected), expected)


def test_check_dtype_device():
    x = torch.zeros(3, dtype=torch.float16)
    check_dtype_device(torch.zeros_like(x), x)
    with pytest.raises(CheckFailed) as failure:
        check_dtype_device(torch.zeros(3), x, name="noise")
    assert str(failure.value) == (
        "noise: expected dtype torch.float16 (same as the input), got torch.float32: "
        "create new tensors with dtype=x.dtype / use torch.randn_like, torch.zeros_like")


# --- gradients ----------------------------------------------------------------------------


def test_grad_of_values_and_caller_tensors_untouched():
    x = torch.arange(4.0)
    weights = torch.tensor([1.0, -1.0, 2.0, 0.5])
    (grad,) = grad_of(lambda t: t * t, x, grad_output=weights)
    torch.testing.assert_close(grad, 2 * x * weights)  # d/dx sum(x^2 * w) = 2 x w
    assert not x.requires_grad and x.grad is None


def test_grad_of_default_grad_output_is_deterministic_and_not_ones():
    x = torch.randn(3, 5, generator=torch.Generator().manual_seed(2))
    first, second = grad_of(torch.softmax, x, dim=-1), grad_of(torch.softmax, x, dim=-1)
    torch.testing.assert_close(first, second, rtol=0, atol=0)
    # Why not ones: the rows of a softmax sum to 1, so sum(softmax(x)) has zero gradient.
    (with_ones,) = grad_of(torch.softmax, x, dim=-1, grad_output=torch.ones(3, 5))
    torch.testing.assert_close(with_ones, torch.zeros(3, 5), rtol=0, atol=1e-6)
    check_grad_reaches(torch.softmax, x, dim=-1)  # passes with the default weights


def test_grad_of_tuple_outputs_and_no_grad_context():
    def encoder(x, w):
        h = x @ w
        return h[:, :2], h[:, 2:]  # (mu, logvar)

    x, w = torch.randn(5, 3), torch.randn(3, 4)
    with torch.no_grad():  # a grader may run under no_grad; grad_of must still work
        grad_x, grad_w = check_grad_reaches(encoder, x, w, wrt=(0, 1), names=("x", "w"))
    assert grad_x.shape == x.shape and grad_w.shape == w.shape


def test_grad_of_detached_output():
    with pytest.raises(CheckFailed, match=r"^the output is not connected to the inputs' graph: did you call "
                                          r"\.detach\(\), \.item\(\), torch\.normal, or numpy\?"):
        grad_of(lambda mu: torch.normal(mu.detach(), 1.0), torch.zeros(3))


def test_check_grad_reaches_names_the_cut_input():
    def sample(mu, logvar):  # the std path is detached: a common reparameterization slip
        return mu + torch.exp(0.5 * logvar).detach() * torch.randn_like(mu)

    mu, logvar = torch.zeros(4), torch.zeros(4)
    with pytest.raises(CheckFailed, match=r"^no gradient reaches `logvar`"):
        check_grad_reaches(sample, mu, logvar, wrt=(0, 1), names=("mu", "logvar"))


def test_check_grad_reaches_zero_gradient():
    with pytest.raises(CheckFailed, match=r"the gradient reaching `x` is all zeros"):
        check_grad_reaches(lambda x: x.round(), torch.randn(5), names=("x",))


# --- memory ---------------------------------------------------------------------------------


def test_peak_memory_views_are_free_copies_are_not():
    x = torch.randn(64, 128)  # 32 KiB of float32
    full_bytes = 8 * 64 * 128 * 4
    assert peak_memory(lambda t: t.expand(8, 64, 128), x) == 0
    assert peak_memory(lambda t: t.T.view(-1, 64)[1:], x) == 0
    assert peak_memory(lambda t: t.expand(8, 64, 128).contiguous(), x) == full_bytes
    assert peak_memory(lambda t: t.repeat(8, 1, 1), x) == full_bytes
    assert peak_memory(lambda t: t.mul_(1), x) == 0  # in place: no new storage


def test_peak_memory_counts_overlapping_lifetimes():
    x = torch.randn(1024)  # 4096 bytes
    # x * 2 is alive while its 4-byte sum is created; then both are freed.
    assert peak_memory(lambda t: (t * 2).sum(), x) == 4096 + 4
    # exp and +1 overlap (8 KiB), and the first is freed before the second sum.
    assert peak_memory(lambda t: (t.exp() + 1).sum(), x) == 2 * 4096


def test_peak_memory_is_deterministic():
    weight = torch.randn(128, 128, requires_grad=True)

    def train_step(x):
        hidden = (x @ weight).relu()
        (hidden * hidden).mean().backward()

    x = torch.randn(64, 128)
    results = {peak_memory(train_step, x) for _ in range(3)}
    assert len(results) == 1 and results.pop() > 0


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_peak_memory_cuda():
    x = torch.randn(1024, 1024, device="cuda")
    assert peak_memory(lambda t: t.expand(4, 1024, 1024), x) == 0
    assert peak_memory(lambda t: t.repeat(4, 1, 1), x) >= 4 * x.numel() * 4


# --- flops ----------------------------------------------------------------------------------


def test_count_flops_matmul_is_2mnk():
    m, k, n = 7, 11, 13
    assert count_flops(torch.matmul, torch.randn(m, k), torch.randn(k, n)) == 2 * m * n * k
    linear = torch.nn.Linear(k, n)  # the bias add is elementwise: not counted
    assert count_flops(linear, torch.randn(m, k)) == 2 * m * n * k


def test_count_flops_elementwise_is_zero():
    x = torch.randn(100, 100)
    assert count_flops(lambda t: (t.exp() * 2 + 1).softmax(-1).sum(), x) == 0


def test_count_flops_sdpa_on_cpu():
    b, h, t, d = 2, 4, 16, 8
    q = torch.randn(b, h, t, d)
    attention_flops = 4 * b * h * t * t * d  # QK^T and attn @ V, 2*T*T*D each

    # Finding (torch 2.13, CPU): SDPA runs aten._scaled_dot_product_flash_attention_for_cpu,
    # which has no FLOP formula, so plain FlopCounterMode reports 0 for it.
    with FlopCounterMode(display=False) as raw:
        F.scaled_dot_product_attention(q, q, q)
    assert raw.get_total_flops() in (0, attention_flops)  # 0 today; the formula if torch adds it

    # count_flops registers the CUDA kernels' formula for the CPU kernel, which
    # agrees with the math backend's two bmm's.
    assert count_flops(F.scaled_dot_product_attention, q, q, q) == attention_flops
    with sdpa_kernel(SDPBackend.MATH):
        assert count_flops(F.scaled_dot_product_attention, q, q, q) == attention_flops


# --- timing ---------------------------------------------------------------------------------


def test_python_loop_over_batch_is_too_slow():
    x, w = torch.randn(512, 32), torch.randn(32, 32)

    def per_row(x, w):
        return torch.stack([row @ w for row in x])

    with pytest.raises(CheckFailed) as failure:
        check_not_slower(per_row, torch.matmul, x, w, min_run_time=0.02, rounds=3)
    message = str(failure.value)
    assert message.startswith("too slow: expected at most 5x the reference time, got ")
    assert "Python loops over the batch" in message


def test_reference_against_itself_never_fails():
    x = torch.randn(256, 256)
    for _ in range(5):
        result = check_not_slower(torch.matmul, torch.matmul, x, x, min_run_time=0.05)
        assert isinstance(result, TimingResult) and 2 <= result.rounds <= 5 and result.ratio <= 5.0


def test_timing_result_str():
    result = TimingResult(ratio=2.0, student_median_s=2e-3, reference_median_s=1e-3, rounds=5)
    assert str(result) == "2.00x the reference time (2 ms vs 1 ms, best of 5 interleaved rounds)"


# --- remote dispatch --------------------------------------------------------------------------


class Proxy:
    """Stands in for a function living in another process: it records requests."""

    def __init__(self):
        self.requests = []

    def __call__(self, *args, **kwargs):
        raise AssertionError("a proxy must be measured remotely, never called")

    def __genlab_measure__(self, kind, args, kwargs):
        self.requests.append((kind, args, kwargs))
        return {"grad_of": (None,), "peak_memory": 123, "count_flops": 456}[kind]

    def __genlab_time_ratio__(self, other, args, kwargs):
        self.requests.append(("time_ratio", args, kwargs))
        return TimingResult(ratio=4.0, student_median_s=4.0, reference_median_s=1.0, rounds=kwargs["rounds"])


def test_measurements_delegate_to_remote_proxy():
    proxy, x = Proxy(), torch.zeros(2)
    assert grad_of(proxy, x, wrt=(0,), dim=1) == (None,)
    assert peak_memory(proxy, x, scale=2) == 123
    assert count_flops(proxy, x) == 456
    assert proxy.requests == [
        ("grad_of", (x,), {"wrt": (0,), "grad_output": None, "dim": 1}),
        ("peak_memory", (x,), {"scale": 2}),
        ("count_flops", (x,), {}),
    ]
    with pytest.raises(CheckFailed, match="no gradient reaches `mu`"):
        check_grad_reaches(proxy, x, names=("mu",))


def test_timing_delegates_to_remote_proxy():
    proxy, x = Proxy(), torch.zeros(2)
    assert time_ratio(proxy, torch.neg, x, rounds=3).ratio == 4.0
    assert proxy.requests[-1] == ("time_ratio", (x,), {"min_run_time": 0.2, "rounds": 3, "clear_below": None})
    # Only the reference is remote: it times itself against fn, and the answer is turned around.
    assert time_ratio(torch.neg, proxy, x).ratio == 0.25
    with pytest.raises(CheckFailed, match="expected at most 3x"):
        check_not_slower(proxy, torch.neg, x, max_ratio=3.0)
    assert proxy.requests[-1][2]["clear_below"] == 1.5  # rounds may stop early only below half the limit


def test_timing_stops_early_only_when_clearly_fast():
    """Two rounds are enough when the slowest student round is far under the fastest reference round; a
    function near the limit gets every round (so stopping early can never fail anyone)."""
    from genlab.checks.timing import clearly_below

    assert clearly_below([1.0, 1.1], [1.0, 1.05], 2.5)
    assert not clearly_below([1.0], [1.0], 2.5)                       # one round is never enough
    assert not clearly_below([1.0, 3.0], [1.0, 1.0], 2.5)             # one slow round: keep measuring
    assert not clearly_below([1.0, 1.0], [1.0, 1.0], None)
    fast = time_ratio(torch.neg, torch.neg, torch.zeros(100), min_run_time=0.01, rounds=5, clear_below=100.0)
    assert fast.rounds == 2
    every = time_ratio(torch.neg, torch.neg, torch.zeros(100), min_run_time=0.01, rounds=4)
    assert every.rounds == 4


def test_counting_flops_and_memory_imports_no_dynamo():
    """torch wraps a dispatch mode's method in torch._disable_dynamo, which imports torch._dynamo (about 800
    modules, seconds of CPU) at the first op: in every grading kernel that measures. genlab opts out of it."""
    import subprocess
    import sys

    code = ("import sys, torch\nfrom genlab.checks import count_flops, peak_memory\nq = torch.randn(2, 4, 16, 8)\n"
            "assert count_flops(lambda a: a @ a.transpose(-1, -2), q) == 2 * 2 * 4 * 16 * 16 * 8\n"
            "assert peak_memory(lambda a: a * 2, q) >= q.numel() * 4\n"
            "assert 'torch._dynamo' not in sys.modules, 'torch._dynamo was imported'\n")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr[-2000:]


def test_the_self_check_in_a_graders_kernel_says_the_grader_runs_the_tests(monkeypatch, capsys, tmp_path):
    # a --full-run runs every lab's self-check cell in a kernel with no copy of the lab notebook: it raised
    # FileNotFoundError in every lab's feedback (issue 44); the grader's kernels have GENLAB_GRADER=1
    import genlab
    from autograder.wall import sandbox

    assert sandbox.kernel_environment(tmp_path)["GENLAB_GRADER"] == "1"
    monkeypatch.setenv("GENLAB_GRADER", "1")
    monkeypatch.chdir(tmp_path)   # no lab notebook here
    assert genlab.check("reparameterize", "lab1_vae") == []
    assert "the grader runs every test of reparameterize itself" in capsys.readouterr().out
