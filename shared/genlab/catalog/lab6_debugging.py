"""Known bugs of Lab 6 (debugging instruments), each as the edit of your own function that makes it.

Each entry is a mistake in a debugging instrument that makes it misread a broken run; the lab's failure-mode cells
run each one on *your* functions, on the case that tells it apart from a correct instrument, and the grader names
it when a student's outputs match it. Written out in full, each would be the answer with one edit, so this
catalogue writes them as what they do to a correct instrument; the full bodies stay with the instructor
(``solutions/lab6_debugging/bugs.py``).
"""
from __future__ import annotations

import copy

import torch.nn as nn

from genlab.catalog import Bug, edit


# --- grad_norms_by_module ----------------------------------------------------------------------------
@edit("grad_norms_by_module")
def none_as_zero(grad_norms_by_module, model):
    # `p.grad if p.grad is not None else torch.zeros_like(p)`: a gradient that never arrived read as a zero one
    return {name: 0.0 if norm is None else norm for name, norm in grad_norms_by_module(model).items()}


# --- first_nonfinite ---------------------------------------------------------------------------------
class _Opaque(nn.Module):
    """Runs a module without showing its submodules: a hook can see only its output as a whole."""

    def __init__(self, inner):
        super().__init__()
        object.__setattr__(self, "inner", inner)  # not registered: named_modules() does not reach inside

    def forward(self, *args, **kwargs):
        return self.inner(*args, **kwargs)


@edit("first_nonfinite")
def children_only(first_nonfinite, model, inputs):
    # hooks on model.named_children() only (not named_modules()): the instrument sees the top-level blocks' outputs,
    # so it names the block, not the layer inside it, and misses a value that turns finite again inside a block
    shallow = copy.copy(model)
    shallow._modules = {name: _Opaque(child) for name, child in model.named_children()}
    name = first_nonfinite(shallow, inputs)
    return None if name in (None, "") else name


# --- detect_spikes -----------------------------------------------------------------------------------
@edit("detect_spikes")
def two_sided(detect_spikes, losses, window=21, threshold=6.0):
    # |loss - median| > threshold * 1.4826 * MAD: the outlier rule as usually written, which flags drops too
    values = [float(v) for v in losses]
    up = detect_spikes(values, window, threshold)
    down = detect_spikes([-v for v in values], window, threshold)
    return sorted(set(up) | set(down))


BUGS = [
    Bug("none_as_zero", "grad_norms_by_module", "a missing gradient (None) reported as a zero one",
        "a frozen layer, a detached path and an unused module (no gradient arrived: .grad is None) read 0.0, like a "
        "dead ReLU whose gradient arrived and is zero; the two need different fixes, and optimizers treat them "
        "differently (a None gradient skips the step, a zero one does not).",
        "keep the two cases apart: a module none of whose parameters has a .grad is reported as None, not 0.0.",
        "PyTorch docs, torch.optim.Optimizer.zero_grad (set_to_none): 'a None attribute or a Tensor full of 0s will "
        "behave differently', and optimizers step with a zero gradient but skip a None one",
        none_as_zero),
    Bug("children_only", "first_nonfinite", "hooks on the top-level children only",
        "model.children() yields the immediate children only, so the instrument names the block that holds the "
        "first non-finite value rather than the layer, and misses one that a later layer of the same block turns "
        "finite again (an overflow to inf squashed by tanh).",
        "hook every module, at every depth: which of nn.Module's iterators goes all the way down?",
        "PyTorch docs, nn.Module.children ('an iterator over immediate children modules') against "
        "nn.Module.named_modules ('all modules in the network')",
        children_only),
    Bug("two_sided", "detect_spikes", "|loss - median| in place of loss - median",
        "the outlier rule as usually written is two-sided; on a loss curve it flags sudden drops (a learning-rate "
        "decay, an easy batch) as spikes.",
        "a spike is a jump up: compare the signed difference from the median with the band.",
        "Leys, Ley, Klein, Bernard & Licata 2013, 'Detecting outliers: do not use standard deviation around the "
        "mean, use absolute deviation around the median' (J. Exp. Soc. Psychol. 49(4)): the rule M +- k MAD, "
        "both sides",
        two_sided),
]
