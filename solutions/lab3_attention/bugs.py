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


# --- tiled_attention --------------------------------------------------------------------------------------------
def _tiled(q, k, v, block_size, causal, rescaled, guarded):
    t_q, t_k, dtype = q.shape[-2], k.shape[-2], q.dtype
    work = torch.promote_types(dtype, torch.float32)
    q, k, v = q.to(work) * q.shape[-1] ** -0.5, k.to(work), v.to(work)
    blocks = []
    for qs in range(0, t_q, block_size):
        qb = q[..., qs:qs + block_size, :]
        last = torch.arange(qs, qs + qb.shape[-2], device=q.device) + (t_k - t_q)
        m = torch.full(qb.shape[:-1], -math.inf, dtype=work, device=q.device)
        l = torch.zeros_like(m)
        acc = torch.zeros_like(qb)
        stop = min(t_k, int(last[-1]) + 1) if causal else t_k
        for ks in range(0, stop, block_size):
            s = qb @ k[..., ks:ks + block_size, :].transpose(-2, -1)
            if causal:
                s = s.masked_fill(torch.arange(ks, ks + s.shape[-1], device=q.device) > last[:, None], -math.inf)
            m_new = torch.maximum(m, s.amax(-1))
            shift = torch.where(m_new == -math.inf, 0.0, m_new) if guarded else m_new
            p, rescale = (s - shift[..., None]).exp(), (m - shift).exp()
            if not rescaled:
                rescale = torch.ones_like(rescale)   # the correction factor e^(m - m') left out
            l = l * rescale + p.sum(-1)
            acc = acc * rescale[..., None] + p @ v[..., ks:ks + block_size, :]
            m = m_new
        blocks.append(acc / (torch.where(l > 0, l, 1.0) if guarded else l)[..., None])   # unguarded: 0 / 0
    return torch.cat(blocks, dim=-2).to(dtype)


def accumulator_not_rescaled(q, k, v, block_size, causal=True):
    return _tiled(q, k, v, block_size, causal, rescaled=False, guarded=True)


def fully_masked_row_nan(q, k, v, block_size, causal=True):
    return _tiled(q, k, v, block_size, causal, rescaled=True, guarded=False)   # -inf - (-inf), 0 / 0: NaN


# --- apply_rope, grouped_query_attention, rotary_self_attention ------------------------------------------------
def rope_pairs_interleaved(x, cos, sin, positions):
    c, s = cos[positions], sin[positions]
    even, odd = x[..., 0::2], x[..., 1::2]                 # Meta's pairs (2i, 2i + 1), rotate-half tables
    out = torch.stack([even * c[..., 0::2] - odd * s[..., 0::2], odd * c[..., 1::2] + even * s[..., 1::2]], dim=-1)
    return out.flatten(-2).to(x.dtype)


def kv_heads_tiled(q, k, v):
    if q.shape[1] % k.shape[1]:
        raise ValueError(f"{q.shape[1]} query heads cannot share {k.shape[1]} key/value heads evenly")
    groups = q.shape[1] // k.shape[1]
    k, v = k.repeat(1, groups, 1, 1), v.repeat(1, groups, 1, 1)   # [0, 1, ..., 0, 1, ...]: heads tiled
    allowed = torch.ones(q.shape[-2], k.shape[-2], dtype=torch.bool, device=q.device).tril(k.shape[-2] - q.shape[-2])
    return F.scaled_dot_product_attention(q, k, v, attn_mask=allowed)


def _rope(x, cos, sin, positions):
    x1, x2 = x.chunk(2, dim=-1)
    return (x * cos[positions] + torch.cat([-x2, x1], dim=-1) * sin[positions]).to(x.dtype)


def rope_offset_forgotten(x, w_q, w_kv, w_o, n_heads, cos, sin, past_kv=None):
    b, t, c = x.shape
    d = c // n_heads
    q = (x @ w_q.T).view(b, t, n_heads, d).transpose(1, 2)
    k, v = (x @ w_kv.T).view(b, t, 2, -1, d).permute(2, 0, 3, 1, 4)
    positions = torch.arange(t, device=x.device)          # 0 .. T - 1 whatever the cache holds
    q, k = _rope(q, cos, sin, positions), _rope(k, cos, sin, positions)
    if past_kv is not None:
        k, v = torch.cat([past_kv[0], k], dim=2), torch.cat([past_kv[1], v], dim=2)
    y = _grouped(q, k, v)
    return y.transpose(1, 2).reshape(b, t, c) @ w_o.T, (k, v)


def _grouped(q, k, v):
    groups = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(groups, dim=1), v.repeat_interleave(groups, dim=1)
    allowed = torch.ones(q.shape[-2], k.shape[-2], dtype=torch.bool, device=q.device).tril(k.shape[-2] - q.shape[-2])
    return F.scaled_dot_product_attention(q, k, v, attn_mask=allowed)


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
    accumulator_not_rescaled,
    fully_masked_row_nan,
    rope_pairs_interleaved,
    kv_heads_tiled,
    rope_offset_forgotten,
)}
