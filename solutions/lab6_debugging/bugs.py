"""Lab 6's catalogued bugs in full, as a student would write them: the instructor's side of the catalogue.

Students see these bugs only as edits of their own functions (``genlab.catalog.lab6_debugging``): each body here is
the answer with a small edit, so it must not ship (issue 21). The bug samples are made of these bodies
(``bug_cell``), the grader replays calls through them, and ``tests/test_catalogue.py`` checks that each body and its
edit are the same bug.
"""
from __future__ import annotations

import math

import torch


# --- grad_norms_by_module ----------------------------------------------------------------------------
def none_as_zero(model):
    norms = {}
    for name, module in model.named_modules():
        own = list(module.parameters(recurse=False))
        if not own:
            continue
        # a parameter that received no gradient counted as if its gradient were zero
        grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in own]
        norms[name] = math.sqrt(sum(float(g.detach().double().pow(2).sum()) for g in grads))
    return norms


# --- first_nonfinite ---------------------------------------------------------------------------------
def children_only(model, inputs):
    found = []

    def hook(module, args, output):
        outputs = output if isinstance(output, (tuple, list)) else (output,)
        if not found and any(isinstance(o, torch.Tensor) and o.is_floating_point() and not bool(torch.isfinite(o).all())
                             for o in outputs):
            found.append(names[id(module)])

    names = {id(child): name for name, child in model.named_children()}
    handles = [child.register_forward_hook(hook) for _, child in model.named_children()]  # the top level only
    try:
        with torch.no_grad():
            model(inputs)
    finally:
        for handle in handles:
            handle.remove()
    return found[0] if found else None


# --- detect_spikes -----------------------------------------------------------------------------------
def two_sided(losses, window=21, threshold=6.0):
    values = [float(v) for v in losses]
    spikes = []
    for i in range(window, len(values)):
        if not math.isfinite(values[i]):
            spikes.append(i)
            continue
        past = torch.tensor([v for v in values[i - window:i] if math.isfinite(v)], dtype=torch.float64)
        if len(past) == 0:
            continue
        median = past.quantile(0.5)
        mad = (past - median).abs().quantile(0.5)
        if abs(values[i] - float(median)) > threshold * 1.4826 * float(mad):   # drops counted as spikes too
            spikes.append(i)
    return spikes


BODIES = {fn.__name__: fn for fn in (none_as_zero, children_only, two_sided)}
