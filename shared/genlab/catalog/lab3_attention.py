"""Known bugs of Lab 3 (causal self-attention), each as the code that makes it.

Every entry is a mistake found in real attention code; the lab's failure-modes cells reproduce each one and
measure its symptom, and the grader names it when a student's outputs match it.
"""
from __future__ import annotations

import math
import re

import torch
import torch.nn.functional as F

from genlab.catalog import Bug, dropout_in_eval


# --- causal_mask (True = may attend, bottom-right aligned) ------------------------------------------------
def triu_diagonal_zero(t_q, t_k, device=None):
    ones = torch.ones(t_q, t_k, dtype=torch.bool, device=device)
    future = torch.triu(ones, diagonal=t_k - t_q)  # should be diagonal=t_k - t_q + 1: this also hides "itself"
    return ~future


def transposed_mask(t_q, t_k, device=None):
    # built as [keys, queries] and transposed back: query i now sees the keys j >= i, i.e. the future
    return torch.ones(t_k, t_q, dtype=torch.bool, device=device).tril(diagonal=t_q - t_k).T


# --- causal_attention_weights ------------------------------------------------------------------------------
def missing_scale(q, k):
    t_q, t_k = q.shape[-2], k.shape[-2]
    allowed = torch.ones(t_q, t_k, dtype=torch.bool, device=q.device).tril(diagonal=t_k - t_q)
    scores = q @ k.transpose(-2, -1)  # no 1 / sqrt(D): the logits have variance D and the softmax saturates
    return scores.masked_fill(~allowed, float("-inf")).softmax(dim=-1)


def softmax_over_queries(q, k):
    t_q, t_k = q.shape[-2], k.shape[-2]
    allowed = torch.ones(t_q, t_k, dtype=torch.bool, device=q.device).tril(diagonal=t_k - t_q)
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    # dim=-2 normalises each KEY over the queries: columns sum to 1, rows (what a query averages with) do not
    return scores.masked_fill(~allowed, float("-inf")).softmax(dim=-2)


# --- causal_attention --------------------------------------------------------------------------------------
def is_causal_top_left(q, k, v, dropout_p=0.0, training=True):
    # is_causal=True builds a TOP-LEFT aligned mask: with T_q < T_k the last query sees only the first keys
    return F.scaled_dot_product_attention(q, k, v, is_causal=True, dropout_p=dropout_p if training else 0.0)


def masked_fill_minus_1e9(q, k, v, dropout_p=0.0, training=True):
    t_q, t_k = q.shape[-2], k.shape[-2]
    allowed = torch.ones(t_q, t_k, dtype=torch.bool, device=q.device).tril(diagonal=t_k - t_q)
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    scores = scores.masked_fill(~allowed, -1e9)  # -1e9 is not a float16 number (max 65504): RuntimeError
    weights = F.dropout(scores.softmax(dim=-1), dropout_p, training)
    return weights @ v


def dropout_ignores_training(q, k, v, dropout_p=0.0, training=True):
    t_q, t_k = q.shape[-2], k.shape[-2]
    allowed = torch.ones(t_q, t_k, dtype=torch.bool, device=q.device).tril(diagonal=t_k - t_q)
    # SDPA has no train/eval mode of its own: dropout_p must be 0 outside training
    return F.scaled_dot_product_attention(q, k, v, attn_mask=allowed, dropout_p=dropout_p)


def _attention_without_dropout(call):
    if len(call.args) < 3:
        return None
    q, k, v = call.args[:3]
    t_q, t_k = q.shape[-2], k.shape[-2]
    allowed = torch.ones(t_q, t_k, dtype=torch.bool).tril(diagonal=t_k - t_q)
    return F.scaled_dot_product_attention(q.double(), k.double(), v.double(), attn_mask=allowed)


def _dropout_in_eval(calls) -> bool:
    """Called with training=False and dropout_p > 0, the output is not the deterministic attention."""
    return dropout_in_eval(calls, _attention_without_dropout, p_at=3, training_at=4, training_default=True)


# --- split_heads -------------------------------------------------------------------------------------------
def view_heads_first(x, n_heads):
    b, t, c = x.shape
    return x.view(b, n_heads, t, c // n_heads)  # the right shape, but each "head" is a run of whole tokens


# --- tokenize_smiles ---------------------------------------------------------------------------------------
def character_level(smiles):
    return list(smiles)  # "Cl" becomes C + l, "Br" B + r, "%10" % + 1 + 0


_PATTERN_WITHOUT_BACKSLASH = re.compile(
    r"(\[[^\]]+]|Br?|Cl?|N|O|S|P|F|I|b|c|n|o|s|p|\(|\)|\.|=|#|-|\+|/|:|~|@|\?|>|\*|\$|%[0-9]{2}|[0-9])")


def findall_drops_unmatched(smiles):
    # re.findall skips every character the pattern does not match: here the backslash bond, and "%1"
    return _PATTERN_WITHOUT_BACKSLASH.findall(smiles)


# --- generate -----------------------------------------------------------------------------------------------
def cache_fed_whole_sequence(model, prompt_ids, max_new_tokens, use_kv_cache, temperature=1.0, generator=None):
    ids, past_kv = prompt_ids, None
    with torch.no_grad():
        for _ in range(max_new_tokens):
            if use_kv_cache:
                logits, past_kv = model.decode(ids, past_kv)  # the whole sequence again, on top of the cache
            else:
                logits = model(ids)
            logits = logits[:, -1]
            if temperature == 0:
                next_id = logits.argmax(dim=-1, keepdim=True)
            else:
                next_id = torch.multinomial((logits / temperature).softmax(dim=-1), 1, generator=generator)
            ids = torch.cat([ids, next_id], dim=1)
    return ids


BUGS = [
    Bug("triu_diagonal_zero", "causal_mask", "triu with the wrong diagonal (the token cannot see itself)",
        "the future-mask torch.triu(ones, diagonal=0) also hides the diagonal: the first query of a square mask "
        "may attend no key at all. A hand-written softmax of that row is NaN (-inf - (-inf)); "
        "F.scaled_dot_product_attention on CPU instead returns a row of zeros, silently, which is the attention "
        "of no key. Every other query loses its own token.",
        "mask out only j > i + (t_k - t_q): torch.ones(t_q, t_k).tril(diagonal=t_k - t_q) is what may attend "
        "(or triu(diagonal=t_k - t_q + 1) is what is hidden).",
        "PyTorch docs: torch.triu / torch.tril (the diagonal argument); Vaswani et al. 2017, Sec. 3.2.3",
        triu_diagonal_zero),
    Bug("transposed_mask", "causal_mask", "the mask is transposed (queries and keys swapped)",
        "query i attends keys j >= i instead of j <= i: every position sees the future, so training is "
        "trivial and generation is garbage; changing token t+1 changes the outputs at positions <= t.",
        "rows are queries, columns keys: allowed[i, j] = j <= i + (t_k - t_q).",
        "Vaswani et al. 2017, Sec. 3.2.3 (masking out illegal connections); PyTorch docs: "
        "F.scaled_dot_product_attention (attn_mask shape (L, S), L = target length)",
        transposed_mask),
    Bug("missing_scale", "causal_attention_weights", "scores not divided by sqrt(D)",
        "without the 1/sqrt(D) scale the logits q.k have variance D instead of 1: for D = 64 the softmax is "
        "nearly one-hot (its entropy collapses) and its gradient vanishes; the weights still sum to 1, so "
        "nothing raises.",
        "divide the scores by math.sqrt(q.shape[-1]) before masking and the softmax.",
        "Vaswani et al. 2017, Sec. 3.2.1 (scaled dot-product attention, footnote 4: the variance of q.k is d_k)",
        missing_scale),
    Bug("softmax_over_queries", "causal_attention_weights", "softmax over the queries (dim=-2)",
        "softmax(dim=-2) normalises over the queries: each key's column sums to 1, each query's row does not, "
        "so the output is not a weighted average of the values; it still runs and has the right shape.",
        "the weights of one query are a distribution over the keys: softmax(dim=-1) on [B, H, T_q, T_k].",
        "labmlai/annotated_deep_learning_paper_implementations issue #146 (DDPM UNet attention, softmax on "
        "the wrong axis); PyTorch docs: torch.softmax (dim)",
        softmax_over_queries),
    Bug("is_causal_top_left", "causal_attention", "SDPA is_causal=True with T_q < T_k (top-left mask)",
        "PyTorch's is_causal=True aligns the mask top-left: with a KV cache (T_q < T_k) the new queries see "
        "only the first T_q keys, e.g. one decoded token attends key 0 only. Right when T_q == T_k.",
        "pass attn_mask=causal_mask(t_q, t_k) (bottom-right), or torch.nn.attention.bias.causal_lower_right.",
        "PyTorch docs: torch.nn.attention.bias (causal_upper_left vs causal_lower_right); flash-attn 2.1 "
        "release notes (causal=True changed to bottom-right alignment)",
        is_causal_top_left),
    Bug("masked_fill_minus_1e9", "causal_attention", "masked_fill with -1e9 (fails in float16)",
        "-1e9 does not fit in float16 (largest finite value 65504): masked_fill raises a RuntimeError "
        "(value cannot be converted to type Half without overflow) as soon as inputs are half precision.",
        "use torch.finfo(scores.dtype).min, -inf with care, or let SDPA apply a boolean mask.",
        "PyTorch docs: torch.finfo (float16 max = 65504); Hugging Face transformers replaced -1e9/-10000 "
        "constants by torch.finfo(dtype).min for fp16 support",
        masked_fill_minus_1e9),
    Bug("dropout_ignores_training", "causal_attention", "attention dropout not tied to training",
        "SDPA's dropout_p is applied on every call, it has no eval mode: with training=False the outputs are "
        "still random and two evaluations of the same input differ.",
        "dropout_p = dropout_p if training else 0.0 (in a module: self.dropout if self.training else 0.0).",
        "PyTorch docs: F.scaled_dot_product_attention (dropout_p; 'set to 0.0 during evaluation'); "
        "nanoGPT model.py (dropout_p=self.dropout if self.training else 0)",
        dropout_ignores_training, detect=_dropout_in_eval),
    Bug("view_heads_first", "split_heads", "heads split with view(B, H, T, D)",
        "x.view(B, H, T, C // H) has the right shape but the wrong layout: each 'head' holds T/H whole tokens "
        "instead of one slice of the channels of every token. It runs, and attention is silently wrong.",
        "x.view(B, T, H, C // H).transpose(1, 2).",
        "PyTorch docs: Tensor.view (reinterprets the memory, no reordering); nanoGPT model.py "
        "(view(B, T, n_head, C // n_head).transpose(1, 2))",
        view_heads_first),
    Bug("character_level", "tokenize_smiles", "one token per character",
        "two-letter atoms and ring numbers are split: Cl becomes C + l, Br becomes B + r and %10 becomes "
        "% + 1 + 0, so the model must learn that 'l' only follows 'C' and a ring bond 10 reads as bonds 1 and 0; "
        "nothing is ever rejected.",
        "match bracket atoms, Cl, Br and %NN before single characters (a regular expression with alternatives "
        "in that order) and raise ValueError on anything else.",
        "Schwaller et al. 2019, Molecular Transformer (ACS Cent. Sci.), SMILES tokenization regex; "
        "OpenSMILES specification",
        character_level),
    Bug("findall_drops_unmatched", "tokenize_smiles", "re.findall silently drops what it cannot match",
        "re.findall skips characters the pattern does not cover: here the backslash bond (/ and \\ set "
        "double-bond geometry) and an incomplete '%1' vanish, so the tokens no longer spell the input and no "
        "error is raised.",
        "check that ''.join(tokens) == smiles (or scan with re.match at each position) and raise ValueError "
        "with the position of the first character no rule matches.",
        "Python docs: re.findall (non-overlapping matches, unmatched text skipped); OpenSMILES specification "
        "(bond symbols - = # $ : / \\)",
        findall_drops_unmatched),
    Bug("cache_fed_whole_sequence", "generate", "the whole sequence fed to the model on top of its KV cache",
        "with a cache the model has already read every earlier token; feeding the whole sequence again counts "
        "the prefix twice (and shifts the positions), so the cached path generates other tokens than full "
        "recomputation.",
        "after the first step pass only the newest token: model.decode(ids[:, -1:], past_kv).",
        "transformers' GPT2LMHeadModel.prepare_inputs_for_generation ('only last token for input_ids if past "
        "is defined'); THUDM/chatglm-6b commit cd8041e 'Fix past_key_values'; huggingface/optimum issue #1839",
        cache_fed_whole_sequence),
]
