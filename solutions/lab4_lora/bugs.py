"""Lab 4's catalogued bugs in full, as a student would write them: the instructor's side of the catalogue.

Students see these bugs only as edits of their own functions (``genlab.catalog.lab4_lora``): each body here is
the answer with a small edit, so it must not ship (issue 21). The bug samples are made of these bodies
(``bug_cell``), the grader replays calls through them, and ``tests/test_catalogue.py`` checks that each body and
its edit are the same bug.
"""
from __future__ import annotations

import math

import torch
import torch.nn as nn
import torch.nn.functional as F


# --- lora_init -----------------------------------------------------------------------------------------------
def random_b_init(in_features, out_features, r, *, generator=None, dtype=None, device=None):
    bound = 1.0 / math.sqrt(in_features)
    A = torch.empty(r, in_features, dtype=dtype, device=device).uniform_(-bound, bound, generator=generator)
    # B drawn like A (peft's init_lora_weights=False, "for debugging"): B A != 0 before the first step
    bound_b = 1.0 / math.sqrt(r)
    B = torch.empty(out_features, r, dtype=dtype, device=device).uniform_(-bound_b, bound_b, generator=generator)
    return A, B


def zero_init_both(in_features, out_features, r, *, generator=None, dtype=None, device=None):
    # "start at the pretrained model" taken one step too far: with A = B = 0 no gradient ever reaches either
    A = torch.zeros(r, in_features, dtype=dtype, device=device)
    B = torch.zeros(out_features, r, dtype=dtype, device=device)
    return A, B


# --- lora_forward ------------------------------------------------------------------------------------------
def dropout_ignores_training(x, weight, bias, A, B, scaling, dropout_p=0.0, training=False):
    # F.dropout's own `training` defaults to True: without passing it, dropout also runs in eval
    return F.linear(x, weight, bias) + scaling * F.linear(F.linear(F.dropout(x, dropout_p), A), B)


# --- add_lora ----------------------------------------------------------------------------------------------
def _notebook_lora_linear():
    """The LoRALinear of the running notebook: in a lab, the student's own."""
    import sys

    return getattr(sys.modules["__main__"], "LoRALinear")


def substring_match(model, target_modules, r, alpha, dropout=0.0):
    LoRALinear = _notebook_lora_linear()
    keys = [target_modules] if isinstance(target_modules, str) else list(target_modules)
    # `key in name` instead of name == key or name.endswith("." + key): "proj" also adapts "q_proj", "out_proj"
    targets = [n for n, m in model.named_modules() if isinstance(m, nn.Linear) and any(k in n for k in keys)]
    if not targets:
        raise ValueError(f"target_modules {keys} match no nn.Linear")
    for p in model.parameters():
        p.requires_grad_(False)
    for name in targets:
        parent_name, _, child = name.rpartition(".")
        parent = model.get_submodule(parent_name)
        setattr(parent, child, LoRALinear(getattr(parent, child), r, alpha, dropout))
    return model



# --- dora_weight_norm --------------------------------------------------------------------------------------
def norm_over_inputs(weight, A, B, scaling):
    compute = torch.promote_types(weight.dtype, torch.float32)
    V = weight.to(compute) + scaling * (B.to(compute) @ A.to(compute))
    return torch.linalg.vector_norm(V, dim=0).detach()   # dim=0: one norm per input column


def norm_of_base_weight(weight, A, B, scaling):
    compute = torch.promote_types(weight.dtype, torch.float32)
    return torch.linalg.vector_norm(weight.to(compute), dim=1).detach()   # ||W||, the adapter left out


# --- nf4_code_book -----------------------------------------------------------------------------------------
def symmetric_code_book(offset=0.9677083):
    normal = torch.distributions.Normal(0.0, 1.0)
    negative = -normal.icdf(torch.linspace(offset, 0.5, 8, dtype=torch.float64)[:-1])
    # the 7 negative quantiles mirrored: 15 values, symmetric about 0
    values = torch.cat([negative, torch.zeros(1, dtype=torch.float64), -negative]).sort().values
    return (values / values.max()).float()


# --- nf4_quantize ------------------------------------------------------------------------------------------
def _nf4_values():
    normal = torch.distributions.Normal(0.0, 1.0)
    positive = normal.icdf(torch.linspace(0.9677083, 0.5, 9, dtype=torch.float64)[:-1])
    negative = -normal.icdf(torch.linspace(0.9677083, 0.5, 8, dtype=torch.float64)[:-1])
    values = torch.cat([negative, torch.zeros(1, dtype=torch.float64), positive]).sort().values
    return (values / values.max()).float()


def partial_block_dropped(weight, block_size=64):
    flat = weight.detach().flatten().float()
    n_blocks = flat.numel() // block_size                 # whole blocks only: the tail is left out
    blocks = flat[: n_blocks * block_size].view(n_blocks, block_size)
    absmax = blocks.abs().amax(dim=1)
    scaled = blocks / torch.where(absmax > 0, absmax, 1.0)[:, None]
    codes = (scaled[..., None] - _nf4_values()).abs().argmin(dim=-1)
    return codes.flatten().to(torch.uint8), absmax


# --- double_quantize ---------------------------------------------------------------------------------------
def whole_blocks_assumed(absmax, block_size=256):
    offset = absmax.float().mean()
    blocks = (absmax.float() - offset).view(-1, block_size)   # raises unless a multiple of block_size
    scales = blocks.abs().amax(dim=1) / 127
    q = torch.round(blocks / torch.where(scales > 0, scales, 1.0)[:, None])
    return q.flatten().to(torch.int8), scales, offset


BODIES = {fn.__name__: fn for fn in (
    random_b_init,
    zero_init_both,
    dropout_ignores_training,
    substring_match,
    norm_over_inputs,
    norm_of_base_weight,
    symmetric_code_book,
    partial_block_dropped,
    whole_blocks_assumed,
)}
