"""Lab 3's catalogued bugs in full, as a student would write them: the instructor's side of the catalogue.

Students see these bugs only as edits of their own functions (``genlab.catalog.lab3_attention``): each body here
is the answer with a small edit (or carries its formula: the causal mask, the scaled scores, the tokenizer's
regular expression), so it must not ship (issue 21). The bug samples are made of these bodies (``bug_cell``), the
grader replays calls through them, and ``tests/test_catalogue.py`` checks that each body and its edit are the same
bug.
"""
from __future__ import annotations

import math
import re

import torch
import torch.nn.functional as F


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


# --- split_heads -------------------------------------------------------------------------------------------
def view_heads_first(x, n_heads):
    b, t, c = x.shape
    return x.view(b, n_heads, t, c // n_heads)  # the right shape, but each "head" is a run of whole tokens


# --- tokenize_smiles ---------------------------------------------------------------------------------------
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


BODIES = {fn.__name__: fn for fn in (
    triu_diagonal_zero,
    transposed_mask,
    missing_scale,
    softmax_over_queries,
    is_causal_top_left,
    masked_fill_minus_1e9,
    dropout_ignores_training,
    view_heads_first,
    findall_drops_unmatched,
    cache_fed_whole_sequence,
)}
