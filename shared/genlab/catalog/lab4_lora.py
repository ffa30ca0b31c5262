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


# --- dora_weight_norm --------------------------------------------------------------------------------------
@edit("dora_weight_norm")
def norm_over_inputs(dora_weight_norm, weight, A, B, scaling):
    # one norm per input column instead of one per output row (the paper's ||.||_c read on an [out, in] weight):
    # the columns of W + s B A are the rows of W^T + s A^T B^T, which your function gives for the transposes
    return dora_weight_norm(weight.mT, B.mT, A.mT, scaling)


@edit("dora_weight_norm")
def norm_of_base_weight(dora_weight_norm, weight, A, B, scaling):
    # the norm of the pretrained weight W where the adapted one, W + s B A, is meant
    return dora_weight_norm(weight, A, torch.zeros_like(B), scaling)


# --- nf4_code_book -----------------------------------------------------------------------------------------
@edit("nf4_code_book")
def symmetric_code_book(nf4_code_book, offset=0.9677083):
    # 7 negative values, 0, and the same 7 mirrored: 15 values symmetric about 0, NF4's eighth positive value
    # (what makes the type asymmetric and uses all 16 codes) left out
    negative = nf4_code_book(offset)[:7]
    return torch.cat([negative, torch.zeros(1, dtype=negative.dtype), -negative.flip(0)])


# --- nf4_quantize ------------------------------------------------------------------------------------------
@edit("nf4_quantize")
def partial_block_dropped(nf4_quantize, weight, block_size=64):
    # whole blocks only: the entries after the last multiple of block_size get no code and no absmax
    flat = weight.flatten()
    return nf4_quantize(flat[: flat.numel() // block_size * block_size], block_size)


# --- double_quantize ---------------------------------------------------------------------------------------
@edit("double_quantize")
def whole_blocks_assumed(double_quantize, absmax, block_size=256):
    # the constants cut with .view(-1, block_size), which raises unless their number is a multiple of block_size
    absmax.reshape(-1, block_size)
    return double_quantize(absmax, block_size)


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
        "#1959 (a target_modules key that matches nothing raises no error when another key matches: a typo passes silently)",
        substring_match, detect=_adapts_substring_matches),
    Bug("norm_over_inputs", "dora_weight_norm", "DoRA's norm taken per input column instead of per output row",
        "the magnitude and the norm get one entry per input feature: on a layer whose in and out differ the "
        "scale m / ||V|| does not even broadcast over the outputs, and on a square one each output is scaled by "
        "the norm of an unrelated column.",
        "look at the axis of the norm: an nn.Linear stores its weight as [out, in], and DoRA keeps one magnitude "
        "per output unit (section 8, Which axis).",
        "Liu et al. 2024 (arXiv 2402.09353: W in R^{d x k}, m in R^{1 x k}, ||.||_c per column) and its first "
        "author's answer in nbasyl/DoRA issue #1 (the norm is always over the output features; the paper's W is "
        "(in_features, out_features), the transpose of nn.Linear.weight) against peft tuners/lora/dora.py, "
        "DoraLinearLayer.get_weight_norm (torch.linalg.norm(weight, dim=1)); "
        "peft PR #1588 (2024-04-05: for transformers' Conv1D, stored [in, out], the norm was taken per input until "
        "the weight was transposed first); NVlabs/DoRA issue #11 (the paper's 1 x k magnitude against the code's "
        "per-row norm); catid/dora issue #4 (norm(dim=0) of an [out, in] weight, in the magnitude and the "
        "denominator); wanshuiyin/ARIS-in-AI-Offer PR #17 (a DoRALinear with weight.norm(dim=0), fixed to dim=1)",
        norm_over_inputs),
    Bug("norm_of_base_weight", "dora_weight_norm", "DoRA divides by ||W||, not by ||W + s B A||",
        "the direction V / ||W|| is no longer a unit vector once B moves: the merged rows' norms are m * ||V|| / "
        "||W|| instead of m, so the magnitude no longer sets the length it was meant to.",
        "the norm is that of the adapted weight, the one being normalised, recomputed from the current A and B "
        "(section 8).",
        "Liu et al. 2024 (arXiv 2402.09353: W' = m (W0 + BA) / ||W0 + BA||_c); Comfy-Org/ComfyUI PR #15458 "
        "(DoRA's output-axis branch normalised W + dW by ||W||, 'instead of the DoRA decomposition')",
        norm_of_base_weight),
    Bug("symmetric_code_book", "nf4_code_book", "a symmetric 15-value code book instead of NF4's 16",
        "with 7 values on each side of 0 one of the 16 codes is never used and the positive side loses a level: "
        "the largest gap near +1 grows and so does the rounding error of large positive weights.",
        "NF4 is asymmetric on purpose: count the quantiles on each side of 0 in section 9 (8 positive, 7 "
        "negative and an exact 0).",
        "Dettmers et al. 2023 (arXiv 2305.14314), Sec. 3 (NF4 asymmetric: 2^(k-1) quantiles for the negative part "
        "and 2^(k-1) + 1 for the positive part, each set holding a 0, one of the two zeros removed) and "
        "bitsandbytes create_normal_map(use_extra_value=True); artidoro/qlora "
        "issue #299 (a 'NF4 codebook (values used in QLoRA)' of 15 symmetric values offered as an answer, "
        "2025-09-26)",
        symmetric_code_book),
    Bug("partial_block_dropped", "nf4_quantize", "the last, partial block left out",
        "when the number of weights is not a multiple of block_size, the tail after the last whole block gets "
        "no code and no absmax: the quantized tensor is smaller than the weight and cannot be dequantized to "
        "its shape.",
        "count the blocks with a ceiling division: the last block may be shorter, and keeps an absmax of its "
        "own (section 9, Blockwise absmax).",
        "bitsandbytes PR #1884 ('Fix 4-bit quantization for weight matrices not divisible by blocksize', "
        "2026-03-03: the Triton kernels assumed whole blocks, and the last block's absmax was computed over "
        "uninitialized memory; fixed by zero-padding)",
        partial_block_dropped),
    Bug("whole_blocks_assumed", "double_quantize", "double quantization that needs a whole number of blocks",
        "the constants are cut with view(-1, block_size): a weight whose number of blocks is not a multiple of "
        "the double-quantization block size (40 constants for a [10, 256] layer) raises instead of being "
        "quantized.",
        "let the last block of constants be shorter, as nf4_quantize does for weights (section 9, Double "
        "quantization).",
        "NVIDIA/Model-Optimizer issue #183 ('Issue processing NF4 double quantization', 2025-04-22: an error "
        "because the scales were not divisible by the block size; fix: pad the scales)",
        whole_blocks_assumed),
]
