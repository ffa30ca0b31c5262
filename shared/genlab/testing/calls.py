"""Recording the calls a test makes to a student's function, for diagnosis.

A test cell is ordinary Python: ``z = reparameterize(mu, logvar, eps)`` then checks on ``z``. In a student's
self-check (``genlab.check``), each student function is wrapped in a :class:`LocalFunction`, which records
every call (arguments and what came back), so that :mod:`genlab.testing.diagnosis` can replay the same calls
through the catalogue of known bugs and name the one the student made. The grader records calls the same
way from its own process, through proxies into the student's kernel (``autograder.wall.remote``).
"""
from __future__ import annotations

import contextlib
import copy
from dataclasses import dataclass, field
from typing import Any, Callable

import torch


@dataclass
class Call:
    """One request to a student's function and what came back."""

    kind: str                       # "call", "grad_of", "peak_memory", "count_flops"
    name: str
    args: tuple
    kwargs: dict
    result: Any = None
    error: str | None = None        # the exception type name, when the student's code raised
    # ``training`` flags of each module argument after the call, by submodule name (``wire.modes``): what
    # ``model.eval()`` inside the function left behind
    modes_after: list[dict[str, bool]] | None = None


@dataclass
class Recorder:
    calls: list[Call] = field(default_factory=list)
    evidence: list[str] = field(default_factory=list)   # suspicious things seen (tensor subclasses, ...)

    def for_function(self, name: str) -> list[Call]:
        return [c for c in self.calls if c.name == name]


def detached(value, keep_grad: bool = False):
    """A copy of a test's arguments that later in-place edits in the test cannot change (``keep_grad``: tensors
    that required grad still do, as fresh leaves)."""
    if isinstance(value, torch.Tensor):
        copy_ = value.detach().clone()
        return copy_.requires_grad_(True) if keep_grad and value.requires_grad else copy_
    if isinstance(value, torch.nn.Module):  # its weights, buffers, gradients and mode as they were at the call
        twin = copy.deepcopy(value)  # Parameter.__deepcopy__ leaves .grad behind: Lab 6 reads gradients
        for original, copied in zip(value.parameters(), twin.parameters()):
            if original.grad is not None:
                copied.grad = original.grad.detach().clone()
        return twin
    if isinstance(value, torch.Generator):  # its state at the call: each replay draws what the call drew
        twin = torch.Generator(device=value.device)
        twin.set_state(value.get_state())
        return twin
    if isinstance(value, (list, tuple)):
        return type(value)(detached(v, keep_grad) for v in value)
    if isinstance(value, dict):
        return {k: detached(v, keep_grad) for k, v in value.items()}
    return value


class LocalFunction:
    """The same recording wrapper around a function in this process (for students' self-checks, and the
    in-process audit). ``activations``: the positions the grader makes activations in every call of the
    function (:attr:`genlab.testing.notebook.LabNotebook.differentiated`), made so here too."""

    def __init__(self, fn: Callable, name: str, recorder: Recorder, activations: tuple[int, ...] = ()):
        self._fn, self.__name__, self._recorder = fn, name, recorder
        self._activations = tuple(activations)
        self.__wrapped__ = fn

    def __call__(self, *args, **kwargs):
        from genlab.checks.gradients import activation_inputs

        call = Call("call", self.__name__, detached(args), detached(kwargs))
        self._recorder.calls.append(call)
        try:
            with torch.enable_grad() if self._activations else contextlib.nullcontext():
                given = activation_inputs(args, self._activations)[0]
                call.result = self._fn(*given, **kwargs)
            _fail_if_modified(self.__name__, given, self._activations)
        except Exception as exc:
            call.error = type(exc).__name__
            raise
        from genlab.testing.wire import modes, modules_in

        call.modes_after = [modes(m) for m in modules_in((args, kwargs))]
        return call.result

    def __genlab_time_ratio__(self, reference, args, kwargs):
        from genlab.checks.timing import time_ratio

        result = time_ratio(self._fn, getattr(reference, "__wrapped__", reference), *args, **kwargs)
        self._recorder.calls.append(Call("time_ratio", self.__name__, (), {}, result))
        return result

    def __genlab_measure__(self, kind: str, args, kwargs):
        import genlab.checks as checks

        call = Call(kind, self.__name__, detached(args), detached(kwargs))
        self._recorder.calls.append(call)
        if self._activations:
            call.result = measured_with_activations(kind, self._fn, args, kwargs, self._activations, self.__name__)
        else:
            call.result = getattr(checks, kind)(self._fn, *args, **kwargs)
        return call.result


def _fail_if_modified(name: str, args, positions) -> None:
    """As the grader does on the kernel's report: an activation changed in place fails the test."""
    from genlab.checks import CheckFailed
    from genlab.checks.gradients import modified_message, modified_positions

    modified = modified_positions(args, positions)
    if modified:
        raise CheckFailed(modified_message(name, modified))


def measured_with_activations(kind: str, fn: Callable, args, kwargs, positions: tuple[int, ...], name: str = ""):
    """A measurement (``grad_of``, ``peak_memory``, ``count_flops``) of ``fn`` as the grader's kernel makes it for
    a function whose gradient is tested: the inputs at ``positions`` are activations
    (:func:`genlab.checks.gradients.activation_inputs`), made before the measurement starts, and the call runs
    with gradients on. A gradient is taken for the ``wrt`` leaves among them."""
    import genlab.checks as checks
    from genlab.checks.gradients import activation_inputs, grad_inputs, grads_from

    if kind == "grad_of":
        kwargs = dict(kwargs)
        wrt, grad_output = kwargs.pop("wrt", (0,)), kwargs.pop("grad_output", None)
        args, leaves = grad_inputs(args, wrt, also=positions)
        with torch.enable_grad():
            result = fn(*args, **kwargs)
        _fail_if_modified(name or getattr(fn, "__name__", "the function"), args, positions)
        return grads_from(result, leaves, grad_output)
    args, _ = activation_inputs(args, positions)
    with torch.enable_grad():
        measured = getattr(checks, kind)(fn, *args, **kwargs)
    _fail_if_modified(name or getattr(fn, "__name__", "the function"), args, positions)
    return measured


class WithActivations:
    """A reference function measured the way the student's is (:func:`measured_with_activations`), so that a
    memory ratio compares like with like: the student's calls get activations in the kernel, and a graph
    keeps what backward needs alive. Called plainly, it is the function itself."""

    def __init__(self, fn: Callable, name: str, positions: tuple[int, ...]):
        self.__wrapped__, self.__name__, self._positions = fn, name, tuple(positions)

    def __call__(self, *args, **kwargs):
        return self.__wrapped__(*args, **kwargs)

    def __repr__(self) -> str:
        return f"<reference {self.__name__}>"

    def __genlab_measure__(self, kind: str, args, kwargs):
        return measured_with_activations(kind, self.__wrapped__, args, kwargs, self._positions)
