"""A gradient the student's kernel reports, checked against the function's own values (issue 39).

The kernel answers a ``grad_of`` request with tensors, and everything in the kernel's process is the student's:
a hook on the socket's send once rewrote those tensors into the reference's gradients, and a wrong function
earned the marks of its gradient tests. Its values cannot be forged the same way without being the values the
tests check. So the grader asks the kernel for plain values of the same function at points along a few random
directions around the test's inputs and compares their finite differences with the reported gradient:

    (J(x + t v) - J(x - t v)) / 2t  =  <grad J(x), v>  (up to O(t^2)),   J = sum(f(x) * grad_output),

in float64 where the function computes in float64 (the test's float tensors upcast, which is exact), else in the
test's own dtype with a longer step. A gradient that agrees is the function's derivative, whoever computed it; one
that disagrees contradicts the function's own answers and fails its test (:func:`contradiction`).

What it cannot see: a function whose values are not smooth at the test's point along every direction drawn (a kink
exactly there, in every direction: relu at an input of exactly 0) gives no usable difference, and its gradient is
taken as reported. A notebook could build such a kink on purpose at the points the grader asks about; it would
still have to return the right values there, and the tests check those.
"""
from __future__ import annotations

import random

import torch
from torch.utils._pytree import tree_map

from genlab.checks.gradients import grad_of
from genlab.testing import wire

DIRECTIONS = 3        # random directions per gradient; each costs 4 plain calls (2 step sizes), plus 2 at x
# Step along v (v has the RMS size of the input, so t is relative): in float64, truncation O(t^2) ~ 1e-10 and
# rounding eps/t ~ 2e-11 of |J|; in float32, 1e-2 balances them at about 1e-4 of |J|. Half precision is too
# coarse for any step (eps 1e-3 and 8e-3): its gradients are not checked (none of the labs' gradient tests uses it).
STEP = {torch.float64: 1e-5, torch.float32: 1e-2}
# Relative tolerance on <grad, v> against the difference, of sum |grad * v| (the size of the terms summed).
# A float32 gradient of an honest function differs from the float64 derivative by float32 rounding, amplified by
# the function's conditioning (logsumexp, softmax with large logits, cancellations in log C near 0): up to about
# 1e-4 of that sum in the labs' tests. A rewritten gradient belongs to another function and is off by O(1).
# 1e-2 sits between, two orders from each; the float32 differences get 5e-2 for their own O(1e-4) noise.
RTOL = {torch.float64: 1e-2, torch.float32: 5e-2}
_SEEDS = random.Random()   # its own generator: a test's `random.seed` does not fix the directions


def new_seed() -> int:
    """The seed of torch's generators in the kernel for one gradient request and its checks (server._seeded)."""
    return _SEEDS.getrandbits(62)


class _Unusable(Exception):
    """The function's values cannot be used in this mode (an error, no tensor, another dtype, not finite)."""


def contradiction(ask, name: str, target: dict, args, kwargs: dict, grads, seed: int,
                   reference=None) -> str | None:
    """Why the gradients ``grads`` the kernel reported for ``grad_of(name, *args, **kwargs)`` contradict the
    function's own values, or None (they agree, or nothing could be checked). ``ask(target, args, kwargs)``
    makes a plain call in the kernel under ``seed``, the gradient request's (its answer and tensors); ``target``
    addresses the function there. ``reference``: the lab's own function,
    in this process: where its autograd gradient contradicts its own values too, the lab specifies a gradient
    that is not the derivative (Lab 4's ``dora_forward`` holds the weight's norm constant, as DoRA does), and the
    student's is not held to the derivative either."""
    kwargs = dict(kwargs)
    wrt = kwargs.pop("wrt", (0,))
    grad_output = kwargs.pop("grad_output", None)
    positions = (wrt,) if isinstance(wrt, int) else tuple(wrt)
    # Every call of the check differentiates the same inputs, so the outputs that reach them require grad.
    declared = list(target.get("activations", ()))
    target = {**target, "activations": sorted(set(declared) | set(positions))}

    def remote(point, point_kwargs, weights, evaluation):
        return _objective(ask, target, point, point_kwargs, weights, evaluation)

    found = _verify(remote, name, args, kwargs, grad_output, positions, grads, seed)
    if found is None or reference is None:
        return found
    try:
        with _seeded(seed):
            theirs = grad_of(reference, *args, wrt=positions, grad_output=grad_output, **kwargs)

        def local(point, point_kwargs, weights, evaluation):
            return _local_objective(reference, point, point_kwargs, weights, seed, evaluation, positions)

        if _verify(local, name, args, kwargs, grad_output, positions, theirs, seed) is not None:
            return None
    except Exception:  # noqa: BLE001 - the reference fails on these inputs: it says nothing either way
        pass
    return found


def _verify(evaluate, name, args, kwargs, grad_output, positions, grads, seed) -> str | None:
    checked = [(i, g) for i, g in zip(positions, grads if isinstance(grads, (tuple, list)) else ())
               if isinstance(g, torch.Tensor) and isinstance(args[i], torch.Tensor) and g.shape == args[i].shape
               and g.is_floating_point() and args[i].is_floating_point()]
    if not checked:
        return None
    for dtype in (torch.float64, None):
        try:   # the same directions in each mode, and for the reference
            generator = torch.Generator().manual_seed(seed % 2**63)
            return _check(evaluate, name, args, kwargs, grad_output, checked, generator, dtype)
        except _Unusable:
            continue
    return None


def _check(evaluate, name, args, kwargs, grad_output, checked, generator, dtype) -> str | None:
    def cast(t):
        if isinstance(t, torch.Tensor) and t.is_floating_point() and dtype is not None:
            return t.detach().to(dtype)
        return t

    args, kwargs = tree_map(cast, tuple(args)), tree_map(cast, dict(kwargs))
    weights = tree_map(cast, grad_output)
    evaluation = dtype or next(iter({args[i].dtype for i, _ in checked}))
    if evaluation not in STEP:
        raise _Unusable
    step, rtol = STEP[evaluation], RTOL[evaluation]
    eps = torch.finfo(evaluation).eps

    def value(point) -> tuple[float, float]:
        return evaluate(point, kwargs, weights, evaluation)
    centre, size = value(args)
    again, _ = value(args)
    # Equal up to rounding (a reduction whose order varies, as some GPU kernels' do); a draw not taken from
    # torch's seeded generators moves J by far more.
    if abs(centre - again) > 8 * eps * size:
        return (f"{name} gave different values for the same inputs, twice, with torch's generator seeded the same "
                f"({centre!r}, then {again!r}), so the gradient your kernel reported cannot be checked against "
                "them. Expected a function of its inputs (and of torch's random numbers): draw with torch "
                "(torch.randn_like, torch.rand), not with Python's random, NumPy or the clock")
    scales = []   # each input's RMS size: the steps are relative to it (an input of size 1e-38 moves by 1e-43)
    for i, _ in checked:
        scale = float(args[i].detach().to(torch.float64).pow(2).mean().sqrt()) if args[i].numel() else 1.0
        scales.append(scale if 0 < scale < float("inf") else 1.0)
    for _ in range(DIRECTIONS):
        v = [torch.randn(args[i].shape, generator=generator, dtype=torch.float64) * scale
             for (i, _), scale in zip(checked, scales)]
        predicted = sum(float((g.detach().to(torch.float64) * vi).sum()) for (_, g), vi in zip(checked, v))
        terms = sum(float((g.detach().to(torch.float64) * vi).abs().sum()) for (_, g), vi in zip(checked, v))
        if predicted != predicted or terms == float("inf"):
            return None   # a gradient with NaN or inf: the test's own check_grad_reaches speaks of it

        def moved(t):
            point = list(args)
            for (i, _), vi in zip(checked, v):
                point[i] = (args[i].detach().to(torch.float64) + t * vi).to(evaluation)
            return tuple(point)

        ahead, behind = value(moved(step))[0], value(moved(-step))[0]
        half_ahead, half_behind = value(moved(step / 2))[0], value(moved(-step / 2))[0]
        long_, short = (ahead - behind) / (2 * step), (half_ahead - half_behind) / step
        # Rounding in J's differences: a few units in the last place of the terms J sums, over the step.
        tolerance = rtol * (terms + abs(short)) + 8 * eps * size / step
        # A smooth J has one slope here: the two central differences agree, and so do the one-sided ones on each
        # side of x (they differ by O(t) of the curvature). A kink within the step (relu, clamp, a where at its
        # threshold, exactly at the test's point too, where central differences agree with each other but with
        # no one-sided slope) or noise breaks one of them: that direction says nothing about the gradient.
        one_sided = ((half_ahead - centre) - (centre - half_behind)) / (step / 2)
        if abs(long_ - short) > tolerance or abs(one_sided) > tolerance:
            continue
        if abs(predicted - short) > tolerance:
            return (f"the gradient of {name} your kernel reported does not match the function's own values: along "
                    f"a random direction v, the finite difference (J(x + t v) - J(x - t v)) / 2t of J = "
                    f"sum(output * grad_output) gives {short:.6g}, but <gradient, v> gives {predicted:.6g} "
                    f"(tolerance {tolerance:.2g}). Expected the derivative of the values your function returns: "
                    "a custom backward (torch.autograd.Function) or a .detach() mixed into the output makes "
                    "autograd report something else")
    return None


def _objective(ask, target, args, kwargs, weights, evaluation: torch.dtype) -> tuple[float, float]:
    """J = sum(output * grad_output) over the outputs connected to the differentiated inputs, and the sum of
    |output * grad_output| (the size of what J sums, for its rounding), from a plain call in the kernel."""
    reply, tensors = ask(target, args, kwargs)
    if not reply["ok"]:
        raise _Unusable
    try:
        result = wire.decode(reply["result"], tensors, handle_factory=lambda *a: None)
    except Exception:  # noqa: BLE001 - checked before by the channel; anything else is no value to use
        raise _Unusable from None
    return _weighted(result, weights, evaluation)


def _local_objective(fn, args, kwargs, weights, seed, evaluation, positions) -> tuple[float, float]:
    """The same J for a function in this process (the lab's reference), on the same kind of inputs."""
    from genlab.checks.gradients import activation_inputs

    args, _ = activation_inputs(args, positions)
    try:
        with _seeded(seed), torch.enable_grad():
            result = fn(*args, **kwargs)
    except Exception:  # noqa: BLE001 - no value at this point
        raise _Unusable from None
    return _weighted(result, weights, evaluation)


def _weighted(result, weights, evaluation) -> tuple[float, float]:
    from genlab.checks.gradients import _grad_outputs

    outputs = [result] if isinstance(result, torch.Tensor) else result
    if not (isinstance(outputs, (tuple, list)) and outputs and all(isinstance(o, torch.Tensor) for o in outputs)):
        raise _Unusable
    try:
        given = _grad_outputs(list(outputs), weights)
    except (ValueError, RuntimeError, TypeError):
        raise _Unusable from None
    connected = [(o, w) for o, w in zip(outputs, given) if o.requires_grad]
    if not connected or (evaluation == torch.float64 and any(o.dtype != torch.float64 for o, _ in connected)):
        raise _Unusable   # float64 inputs, and a result computed in another dtype: check in the test's own
    total = sum(float((o.detach().to(torch.float64) * w.to(torch.float64)).sum()) for o, w in connected)
    size = sum(float((o.detach().to(torch.float64) * w.to(torch.float64)).abs().sum()) for o, w in connected)
    if total != total or abs(total) == float("inf"):
        raise _Unusable
    return total, size


class _seeded:
    """torch's CPU generator forked and seeded, as the kernel's server does for the request (server._seeded)."""

    def __init__(self, seed: int):
        self.seed, self.fork = seed, torch.random.fork_rng(devices=[])

    def __enter__(self):
        self.fork.__enter__()
        torch.manual_seed(self.seed)

    def __exit__(self, *exc):
        return self.fork.__exit__(*exc)
