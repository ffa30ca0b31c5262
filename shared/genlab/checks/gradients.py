"""Gradient checks: does backprop reach the inputs, and what does it deliver?

`grad_of` computes the gradient of ``sum(fn(*args) * grad_output)`` with respect
to chosen positional arguments, on fresh copies of them (the caller's tensors are
never marked ``requires_grad`` or given a ``.grad``). `check_grad_reaches` turns
"no gradient" and "all-zero gradient" into readable failures.
"""

from __future__ import annotations

from typing import Any, Callable, Iterable, Optional, Sequence, Union

import torch

from .errors import CheckFailed, type_name
from .remote import remote_hook

GradOutput = Union[None, torch.Tensor, Sequence[Optional[torch.Tensor]]]

# Seed of the default grad_output. Fixed, so the student's and the reference's
# gradients are taken against the same weights and can be compared.
GRAD_OUTPUT_SEED = 0


def default_grad_output(output: torch.Tensor) -> torch.Tensor:
    """A fixed pseudo-random tensor shaped like `output`, the same on every call.

    Not ``ones``: the gradient of ``sum(softmax(x))`` or ``sum(layer_norm(x))``
    is exactly zero (the outputs always sum to a constant), so a ones-weighted
    check would call correct code broken and could not see many bugs either.
    A private generator leaves the global RNG (and so the student's seeds) alone.
    """
    generator = torch.Generator().manual_seed(GRAD_OUTPUT_SEED)
    weights = torch.randn(output.shape, generator=generator, dtype=torch.float64)
    return weights.to(dtype=output.dtype, device=output.device)


def grad_of(fn: Callable[..., Any], *args: Any, wrt: Union[int, Iterable[int]] = (0,),
            grad_output: GradOutput = None, **kwargs: Any) -> tuple[Optional[torch.Tensor], ...]:
    """Gradients of ``sum(fn(*args, **kwargs) * grad_output)`` w.r.t. ``args[i]`` for i in `wrt`.

    Returns one entry per position in `wrt`: a tensor, or None where no gradient
    reached that input. `fn` may return a tensor or a tuple/list of tensors (then
    `grad_output` is a matching sequence, or None for the default everywhere).
    Fails when no output is connected to the autograd graph at all.
    """
    measure = remote_hook(fn)
    if measure is not None:  # fn is a proxy: the function runs, and is measured, elsewhere
        return measure("grad_of", args, {"wrt": wrt, "grad_output": grad_output, **kwargs})

    args, leaves = grad_inputs(args, wrt)
    # enable_grad: the grader may call us under torch.no_grad() / inference_mode.
    with torch.enable_grad():
        result = fn(*args, **kwargs)
    return grads_from(result, leaves, grad_output)


def grad_inputs(args: Sequence[Any], wrt: Union[int, Iterable[int]] = (0,),
                also: Iterable[int] = ()) -> tuple[tuple, list[torch.Tensor]]:
    """The arguments of a gradient call, and the leaves its gradients are taken for (one per `wrt` position).

    Each differentiated argument is a fresh leaf (the caller's tensor is never marked ``requires_grad`` or
    given a ``.grad``), passed on as a copy of it: an activation inside a graph, as in training, not a leaf.
    The floating-point tensors at the positions in `also` are made activations the same way, without
    gradients taken for them: the grader passes every call of a function whose gradient a test takes its
    activations so (:func:`activation_inputs`), and a gradient call's other inputs must look the same.
    """
    positions = (wrt,) if isinstance(wrt, int) else tuple(wrt)
    for i in positions:
        if not (isinstance(args[i], torch.Tensor) and (args[i].is_floating_point() or args[i].is_complex())):
            raise TypeError(f"grad_of: argument {i} must be a floating-point tensor to differentiate, "
                            f"got {type_name(args[i])}")
    args, leaves = activation_inputs(args, tuple(dict.fromkeys(positions + tuple(also))))
    return args, [leaves[i] for i in positions]


def activation_inputs(args: Sequence[Any], positions: Iterable[int]) -> tuple[tuple, dict[int, torch.Tensor]]:
    """`args` with the floating-point tensor at each of `positions` replaced by an activation: a copy of a
    fresh leaf that requires grad (``leaf.clone()``, whose ``grad_fn`` is ``CloneBackward0``), as a layer's
    input is in training. Returns the new arguments and the leaves, by position. Positions past the end, or
    holding anything but a floating-point tensor, are left as they are.

    Why (issue 22): if only gradient calls got inputs that require grad, a function could tell them from the
    calls whose value, time and memory are measured (``x.requires_grad``, ``x.grad_fn``), and be correct only
    where its gradient is looked at. Every call of a function whose gradient is tested gets this instead.
    """
    args = list(args)
    leaves: dict[int, torch.Tensor] = {}
    for i in positions:
        if i < len(args) and isinstance(args[i], torch.Tensor) and (args[i].is_floating_point()
                                                                    or args[i].is_complex()):
            leaf = args[i].detach().clone().requires_grad_(True)
            with torch.enable_grad():
                args[i] = leaf.clone()
            leaves[i] = leaf
    return tuple(args), leaves


def modified_positions(args: Sequence[Any], positions: Iterable[int]) -> list[int]:
    """The positions among `positions` whose tensor was changed in place since it was made.

    An activation from :func:`activation_inputs` is ``leaf.clone()``: it is as made while its bytes equal its
    leaf's and its ``grad_fn`` is still that clone's (an in-place op under grad mode replaces the ``grad_fn``;
    one under ``no_grad`` leaves it, and changes the bytes). Neither is the version counter, which torch lets
    code set back (issue 39: a function that reset it after changing its input hid the change). Another tensor
    at a position (an integer one: no activation is made of it) counts as changed when its counter moved."""
    changed = []
    for i in positions:
        t = args[i] if i < len(args) else None
        if not isinstance(t, torch.Tensor):
            continue
        fn = t.grad_fn
        if fn is None and not t.requires_grad:   # not an activation: left as it came
            if t._version:
                changed.append(i)
            continue
        leaf = getattr(fn.next_functions[0][0], "variable", None) \
            if type(fn).__name__ == "CloneBackward0" and fn.next_functions else None
        if t._version or leaf is None or not same_bytes(t, leaf):
            changed.append(i)
    return changed


def same_bytes(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Whether two tensors hold the same values bit for bit, in the same shape and dtype (NaN equals NaN, and
    -0.0 differs from 0.0: what was there, not what compares equal)."""
    if a.shape != b.shape or a.dtype != b.dtype or a.device != b.device:
        return False
    with torch.no_grad():
        try:
            return torch.equal(a.detach().reshape(-1).view(torch.uint8), b.detach().reshape(-1).view(torch.uint8))
        except (RuntimeError, TypeError):   # a layout with no byte view (sparse, quantized): values, NaN-aware
            return bool(torch.equal(a, b) or (a.is_floating_point() and torch.isnan(a).any()
                                              and torch.equal(torch.nan_to_num(a), torch.nan_to_num(b))))


def modified_message(name: str, positions: Sequence[int]) -> str:
    """What a student reads when `name` changed one of its differentiated arguments in place."""
    which = ", ".join(f"argument {i}" for i in positions)
    return (f"{name} changed its {which} in place (an in-place op such as x.pow_(2), x.exp_(), x += ... or "
            "x[...] = ... on an input): in training that input is another layer's output, which is then changed "
            "for every other use (and for its backward). Expected the arguments left as they were: compute "
            "with out-of-place ops (x.pow(2), x.exp(), y = x + ...), or on a copy (x.clone())")


def grads_from(result: Any, leaves: Sequence[torch.Tensor],
               grad_output: GradOutput = None) -> tuple[Optional[torch.Tensor], ...]:
    """The gradients of ``sum(result * grad_output)`` w.r.t. `leaves` (see :func:`grad_of`)."""
    outputs = [result] if isinstance(result, torch.Tensor) else result
    if not (isinstance(outputs, (tuple, list)) and outputs and all(isinstance(o, torch.Tensor) for o in outputs)):
        raise CheckFailed(f"expected the function to return a tensor (or a tuple of tensors), "
                          f"got {type_name(result)}: did you forget `return`?")
    weights = _grad_outputs(outputs, grad_output)

    connected = [(o, w) for o, w in zip(outputs, weights) if o.requires_grad]
    if not connected:
        raise CheckFailed("the output is not connected to the inputs' graph: did you call .detach(), "
                          ".item(), torch.normal, or numpy? Keep every step in differentiable torch ops "
                          "(for sampling, use the reparameterization mu + std * torch.randn_like(std))")
    if any(o.is_complex() for o, _ in connected):
        grads = torch.autograd.grad([o for o, _ in connected], list(leaves),
                                    grad_outputs=[w for _, w in connected], allow_unused=True)
    else:
        # The same vector-Jacobian product, as the gradient of one real scalar: d/dx sum(o * w) sends exactly
        # w back into o (1 * w). Explicit grad_outputs would make torch import sympy (0.5 s of CPU) in every
        # kernel that is asked for a gradient (issue 19).
        with torch.enable_grad():  # the caller may be under no_grad; the outputs' graph exists already
            total = sum((o * w).sum() for o, w in connected)
        grads = torch.autograd.grad(total, list(leaves), allow_unused=True)
    return tuple(grads)


def check_grad_reaches(fn: Callable[..., Any], *args: Any, wrt: Union[int, Iterable[int]] = (0,),
                       names: Optional[Sequence[str]] = None, **kwargs: Any) -> tuple[Optional[torch.Tensor], ...]:
    """Fail unless a nonzero, finite gradient reaches every input listed in `wrt`.

    `names` (one per `wrt` position) are used in messages, e.g. ``names=("mu", "logvar")``.
    Returns the gradients, so a test can go on to compare them with a reference.
    """
    positions = (wrt,) if isinstance(wrt, int) else tuple(wrt)
    names = tuple(names) if names is not None else tuple(f"argument {i}" for i in positions)
    if len(names) != len(positions):
        raise ValueError(f"check_grad_reaches: {len(positions)} positions in wrt but {len(names)} names")

    grads = grad_of(fn, *args, wrt=positions, **kwargs)
    problems = []
    for name, grad in zip(names, grads):
        if grad is None:
            problems.append(f"no gradient reaches `{name}`: something between it and the output breaks "
                            "the graph (.detach(), .item(), .data, torch.no_grad(), a NumPy round-trip), "
                            "or the output does not use it at all")
        elif not torch.isfinite(grad).all():
            problems.append(f"the gradient reaching `{name}` contains NaN/inf: look for log(0), sqrt(0), "
                            "division by a value that can be 0, or overflow (add a small eps, clamp)")
        elif not grad.any():
            problems.append(f"the gradient reaching `{name}` is all zeros: it only flows through "
                            "zero-gradient ops (argmax, round, comparisons, a mask that is all False, "
                            "a ReLU that is never active) or is multiplied by 0")
    if problems:
        raise CheckFailed("; ".join(problems))
    return grads


def _grad_outputs(outputs: Sequence[torch.Tensor], grad_output: GradOutput) -> list[torch.Tensor]:
    """One weight tensor per output: the given ones, or the fixed default."""
    if grad_output is None:
        given: Sequence[Optional[torch.Tensor]] = [None] * len(outputs)
    elif isinstance(grad_output, torch.Tensor):
        given = [grad_output]
    else:
        given = list(grad_output)
    if len(given) != len(outputs):
        raise ValueError(f"grad_of: {len(outputs)} outputs but {len(given)} grad_output tensors")
    return [default_grad_output(o) if g is None else g.to(dtype=o.dtype, device=o.device)
            for o, g in zip(outputs, given)]
