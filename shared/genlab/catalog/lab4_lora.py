"""Known bugs of Lab 4 (LoRA from scratch), each as the edit of your own function that makes it, or as code.

Every entry is a mistake found in real LoRA code; the lab's failure-modes cells reproduce each one on *your*
functions and measure its symptom, and the grader names it when a student's outputs match it. Written out in
full, most bugs would be the answer with one edit, so this catalogue writes them as what they do to a correct
function (draw B as well, zero A too, ignore `training`, widen the targets); the full bodies stay with the
instructor (``solutions/lab4_lora/bugs.py``). The two left as code (``alpha_not_divided``,
``merge_in_low_precision``) hold none of the answer. Nor do the detectors (``detect=``, for symptoms a replay
cannot see): each judges from the student's own outputs and the bug's code alone (two eval passes that differ,
a merge equal to the rounded-at-every-step one, a key adapting layers of different names), never from a correct
LoRA output, merge or target rule.
"""
from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

from genlab.catalog import Bug, dropout_in_eval, edit


# --- lora_init -----------------------------------------------------------------------------------------------
@edit("lora_init")
def random_b_init(lora_init, in_features, out_features, r, *, generator=None, dtype=None, device=None):
    A, _ = lora_init(in_features, out_features, r, generator=generator, dtype=dtype, device=device)
    # B drawn like A, next from the same generator (peft's init_lora_weights=False, "for debugging"): your draw of
    # A for a layer with r inputs and rank out_features is a random [out_features, r]. B A != 0 before the first step
    B, _ = lora_init(r, 1, out_features, generator=generator, dtype=dtype, device=device)
    return A, B


@edit("lora_init")
def zero_init_both(lora_init, in_features, out_features, r, *, generator=None, dtype=None, device=None):
    # "start at the pretrained model" taken one step too far: A zeroed as well, so no gradient ever reaches either.
    # Nothing is drawn (your function draws A from a generator of its own, thrown away with A's values).
    spare = torch.Generator(device=torch.empty(0, device=device).device)
    A, B = lora_init(in_features, out_features, r, generator=spare, dtype=dtype, device=device)
    return torch.zeros_like(A), B


def _b_not_zero(calls) -> bool:
    """lora_init returned a B with non-zero entries (the shapes right, so the student meant B)."""
    for c in calls:
        if c.kind != "call" or c.error or not isinstance(c.result, (tuple, list)) or len(c.result) != 2:
            continue
        A, B = c.result
        if isinstance(A, torch.Tensor) and isinstance(B, torch.Tensor) and B.dim() == 2 and B.numel() \
                and A.abs().sum() > 0 and B.abs().sum() > 0:
            return True
    return False


# --- lora_scaling ------------------------------------------------------------------------------------------
def alpha_not_divided(alpha, r, rslora=False):
    return alpha  # alpha where alpha / r is meant: the update grows r times with the rank


# --- lora_forward ------------------------------------------------------------------------------------------
@edit("lora_forward")
def dropout_ignores_training(lora_forward, x, weight, bias, A, B, scaling, dropout_p=0.0, training=False):
    # F.dropout's own `training` defaults to True: without passing it, dropout also runs in eval
    return lora_forward(x, weight, bias, A, B, scaling, dropout_p, True)


def _dropout_in_eval(calls) -> bool:
    """Two calls on the same six inputs, outside training or without dropout, gave different outputs."""
    return dropout_in_eval(calls, n_inputs=6, p_at=6, training_at=7, training_default=False)


# --- merge_lora --------------------------------------------------------------------------------------------
def merge_in_low_precision(weight, A, B, scaling):
    return weight + scaling * (B @ A)  # in bf16/fp16: B A, its scaling and the sum are each rounded


def _merged_in_low_precision(calls) -> bool:
    """On half-precision weights the student's merge equals the rounded-at-every-step merge, bit for bit, on
    every call, and on one of them that rounding shows: merging then unmerging the same way does not give W back
    (the failure-mode cell's symptom). Only the bug is computed here, never the merge the lab asks for."""
    shown = False
    for c in calls:
        if c.kind != "call" or c.error or len(c.args) < 4 or not isinstance(c.result, torch.Tensor):
            continue
        weight, A, B, scaling = c.args[:4]
        if weight.dtype not in (torch.float16, torch.bfloat16):
            continue
        buggy = merge_in_low_precision(weight, A, B, scaling)
        if not torch.equal(c.result, buggy):
            return False
        shown |= not torch.equal(merge_in_low_precision(buggy, A, B, -scaling), weight)
    return shown


# --- add_lora ----------------------------------------------------------------------------------------------
@edit("add_lora")
def substring_match(add_lora, model, target_modules, r, alpha, dropout=0.0):
    keys = [target_modules] if isinstance(target_modules, str) else list(target_modules)
    # `key in name`: "proj" also adapts "q_proj" and "out_proj". Your add_lora is then handed the full names of
    # the layers that matched so, which pick out exactly those layers.
    targets = _substring_targets(model, keys)
    if not targets:
        raise ValueError(f"target_modules {keys} match no nn.Linear")
    return add_lora(model, targets, r, alpha, dropout)


def _substring_targets(model, keys):
    return [n for n, m in model.named_modules() if isinstance(m, nn.Linear) and any(k in n for k in keys)]


def _adapts_substring_matches(calls) -> bool:
    """add_lora returned a model (no error) for a key found inside the names of layers whose own names differ
    ("proj" in attn.q_proj, attn.k_proj, attn.out_proj): one key names layers of one name only, so some of those
    were adapted without being asked for; and it raised exactly where the substring rule finds nothing too.
    The model stays in the student's kernel; what the calls show is where the student raised."""
    told_apart = False
    for c in calls:
        if c.kind != "call" or not c.args or not isinstance(c.args[0], nn.Module) or len(c.args) < 2:
            continue
        keys = [c.args[1]] if isinstance(c.args[1], str) else list(c.args[1])
        raised = c.error is not None
        if raised != (not _substring_targets(c.args[0], keys)):
            return False
        names = [{n.rpartition(".")[2] for n in _substring_targets(c.args[0], [k])} for k in keys]
        told_apart |= not raised and any(len(found) > 1 for found in names)
    return told_apart


BUGS = [
    Bug("random_b_init", "lora_init", "B initialised randomly as well as A",
        "with B != 0 the adapter changes the model before any training step: B A is a random matrix added to "
        "every pretrained weight, so fine-tuning starts from a damaged model instead of the pretrained one.",
        "look at how B starts: the adapter must change nothing before the first training step, and only one of "
        "the two factors is drawn at random (section 1, Initialisation).",
        "Hu et al. 2021 (arXiv 2106.09685), Sec. 4.1 ('zero for B, so dW = BA is zero at the beginning'); "
        "peft LoraConfig docs: init_lora_weights=False makes B random, 'not a no-op', for debugging only",
        random_b_init, detect=_b_not_zero),
    Bug("zero_init_both", "lora_init", "A and B both initialised to zero",
        "the gradient of B is (dL/dy)^T (x A^T), zero when A = 0, and the gradient of A is B^T (...), zero "
        "when B = 0: both gradients are exactly zero at every step and the adapter never trains.",
        "look at how A starts: one of the two factors must be drawn at random, or neither ever gets a gradient "
        "(section 1 derives both gradients and gives the law to draw from).",
        "Hu et al. 2021 (arXiv 2106.09685), Sec. 4.1 (random Gaussian A, zero B); peft tuners/lora/layer.py "
        "reset_lora_parameters (kaiming_uniform_ for A, zeros for B)",
        zero_init_both),
    Bug("alpha_not_divided", "lora_scaling", "alpha used where alpha / r is meant",
        "the update s B A grows with r: at r = 8 it is 8 times what the lab's scaling gives, so every change of "
        "rank changes the effective learning rate and the loss curves do not compare across ranks.",
        "the scaling must keep the update's size the same as r changes: see section 2 for what alpha is divided "
        "by, in plain LoRA and in rsLoRA.",
        "Hu et al. 2021, Sec. 4.1 ('we scale dW x by alpha / r'); rasbt/LLMs-from-scratch issue #821 (the "
        "from-scratch LoRA layer multiplied by alpha, not alpha / rank); Kalajdzievski 2023 (rsLoRA)",
        alpha_not_divided),
    Bug("dropout_ignores_training", "lora_forward", "LoRA dropout not tied to training",
        "F.dropout(x, p) has training=True by default: dropout runs in eval too, so two evaluations of the "
        "same input differ and accuracy is measured on a randomly damaged model.",
        "F.dropout cannot know whether the model is training unless it is told: check that your dropout follows "
        "the `training` argument (nn.Dropout follows module.train()/eval()).",
        "PyTorch docs: torch.nn.functional.dropout (training: 'apply dropout if True. Default: True'); "
        "peft tuners/lora/layer.py (lora_dropout is an nn.Dropout module, off in eval)",
        dropout_ignores_training, detect=_dropout_in_eval),
    Bug("merge_in_low_precision", "merge_lora", "merge computed in bf16/fp16",
        "B @ A, its scaling and the sum with W are each rounded to 8 (bf16) or 11 (fp16) significant bits: "
        "the merged model's outputs move away from the unmerged ones, and merge then unmerge does not give W "
        "back.",
        "look at the precision the product, its scaling and the sum are computed in: in bf16/fp16 each step "
        "rounds, and section 4 asks for one rounding only, when the result is cast back to the weight's dtype. "
        "(Do not copy peft here: with half-precision adapters its merge rounds twice on a CPU and at every step "
        "on a GPU; section 4.)",
        "peft issue #1388 (a bf16 Llama's loss 2.11778 before merge_and_unload() vs 2.12142 after, peft 0.7.1); "
        "peft 0.21.2 tuners/lora/layer.py, Linear.get_delta_weight and merge (half-precision factors upcast to "
        "float32 on the CPU only, the delta cast back and added in the weight's dtype; the CPU upcast of bf16 "
        "came with PR #1978, for the speed of bf16 merges on CPUs: issue #1977)",
        merge_in_low_precision, detect=_merged_in_low_precision),
    Bug("substring_match", "add_lora", "target_modules matched as substrings",
        "`key in name` adapts every layer whose name contains the key: 'proj' adapts q_proj, k_proj and "
        "out_proj, and a typo never raises.",
        "look at how a key is compared with a layer's qualified name: section 5 gives peft's rule for a list, and "
        "says what add_lora must do when no nn.Linear matches.",
        "peft tuners/tuners_utils.py check_target_module_exists (exact or '.' + key suffix); peft issue "
        "#1959 (target_modules silently matching unintended layers)",
        substring_match, detect=_adapts_substring_matches),
]
