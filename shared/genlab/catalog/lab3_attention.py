"""Known bugs of Lab 3 (causal self-attention), each as the edit of your own function that makes it (or, where
that gives nothing away, as the code that makes it).

Every entry is a mistake found in real attention code; the lab's failure-modes cells reproduce each one on *your*
functions and measure its symptom, and the grader names it when a student's outputs match it. Written out in
full, most of these bugs would be the answer with one edit, so this catalogue writes them as what they do to a
correct function (shift its mask, unscale its queries, ignore its training flag); the full bodies stay with the
instructor (``solutions/lab3_attention/bugs.py``).
"""
from __future__ import annotations

import math

import torch

from genlab.catalog import Bug, dropout_in_eval, edit


# --- causal_mask (True = may attend, bottom-right aligned) ------------------------------------------------
@edit("causal_mask")
def triu_diagonal_zero(causal_mask, t_q, t_k, device=None):
    # the diagonal one place too low: each query gets the keys of the token before it, so it no longer sees itself
    return causal_mask(t_q + 1, t_k, device=device)[:-1]


@edit("causal_mask")
def transposed_mask(causal_mask, t_q, t_k, device=None):
    # built as [keys, queries] and transposed back: each query now sees its own key and the later ones, the future
    return causal_mask(t_k, t_q, device=device).T


# --- causal_attention_weights ------------------------------------------------------------------------------
@edit("causal_attention_weights")
def missing_scale(causal_attention_weights, q, k):
    # the scores left unscaled: your weights for queries sqrt(D) times larger, which undoes the scale (in float32
    # at least, so that half-precision inputs are rounded once, as unscaled half-precision scores are)
    wide = torch.promote_types(q.dtype, torch.float32)
    return causal_attention_weights(q.to(wide) * math.sqrt(q.shape[-1]), k.to(wide)).to(q.dtype)


@edit("causal_attention_weights")
def softmax_over_queries(causal_attention_weights, q, k):
    # A key of zeros in front, which every query sees with score 0: the log of a weight minus the log of that key's
    # weight is the query's score for the key (-inf where masked). Normalised over the queries (dim=-2) instead of
    # the keys, each key's column sums to 1 and each query's row does not. In float64, so that no weight underflows;
    # the log is taken of the weights that are not masked only, so that gradients stay finite.
    wide = torch.float32 if q.device.type == "mps" else torch.float64  # MPS has no float64
    padded = torch.cat([torch.zeros_like(k[..., :1, :]), k], dim=-2)
    w = causal_attention_weights(q.to(wide), padded.to(wide))
    seen = w > 0
    log_w = torch.where(seen, w, torch.ones_like(w)).log()
    scores = (log_w[..., 1:] - log_w[..., :1]).masked_fill(~seen[..., 1:], float("-inf"))
    return scores.softmax(dim=-2).to(q.dtype)


# --- causal_attention --------------------------------------------------------------------------------------
@edit("causal_attention")
def is_causal_top_left(causal_attention, q, k, v, dropout_p=0.0, training=True):
    # F.scaled_dot_product_attention(q, k, v, is_causal=True) aligns the mask TOP-LEFT: query i sees keys 0..i only,
    # as if the keys after the first T_q did not exist. With T_q < T_k (a KV cache) the last query sees only the
    # first T_q keys, one decoded token only key 0; right when T_q == T_k.
    t_q = q.shape[-2]
    return causal_attention(q, k[..., :t_q, :], v[..., :t_q, :], dropout_p, training)


@edit("causal_attention")
def masked_fill_minus_1e9(causal_attention, q, k, v, dropout_p=0.0, training=True):
    # The masked scores filled with -1e9: exp(-1e9) is 0, as exp(-inf) is, wherever -1e9 can be stored at all. In
    # float16 (largest finite value 65504) it cannot, and masked_fill raises before any attention is computed.
    one = torch.ones(1, dtype=torch.bool, device=q.device)
    torch.zeros(1, dtype=q.dtype, device=q.device).masked_fill(one, -1e9)  # float16: RuntimeError (overflow)
    return causal_attention(q, k, v, dropout_p, training)


@edit("causal_attention")
def dropout_ignores_training(causal_attention, q, k, v, dropout_p=0.0, training=True):
    # SDPA's dropout_p is applied on every call (it has no train/eval mode of its own): training is ignored
    return causal_attention(q, k, v, dropout_p, True)


def _dropout_in_eval(calls) -> bool:
    """Two calls on the same q, k, v, outside training or without dropout, gave different outputs."""
    return dropout_in_eval(calls, n_inputs=3, p_at=3, training_at=4, training_default=True)


# --- split_heads -------------------------------------------------------------------------------------------
@edit("split_heads")
def view_heads_first(split_heads, x, n_heads):
    # your split's shape, read straight from x's memory: right shape, but each "head" is a run of whole tokens
    return x.view(split_heads(x, n_heads).shape)


# --- tokenize_smiles ---------------------------------------------------------------------------------------
def character_level(smiles):
    return list(smiles)  # "Cl" becomes C + l, "Br" B + r, "%10" % + 1 + 0


def _tokenizes(tokenize_smiles, text) -> bool:
    try:
        tokenize_smiles(text)
    except ValueError:
        return False
    return True


@edit("tokenize_smiles")
def findall_drops_unmatched(tokenize_smiles, smiles):
    # re.findall skips every character its pattern does not match instead of raising: your tokens of the longest
    # stretches that tokenize, every character that cannot be tokenized dropped, and a pattern without the
    # backslash bond, so that the backslash vanishes too
    tokens, rest = [], smiles
    while rest:
        end = next((e for e in range(len(rest), 0, -1) if _tokenizes(tokenize_smiles, rest[:e])), 0)
        tokens += tokenize_smiles(rest[:end]) if end else []
        rest = rest[end:] if end else rest[1:]  # a character no rule matches: skipped, not reported
    return [t for t in tokens if t != "\\"]


# --- generate -----------------------------------------------------------------------------------------------
class _WholeSequenceFed:
    """The model, except that decode, given a cache, is fed every token so far again, not only the new ones."""

    def __init__(self, model):
        self.model, self.ids = model, None

    def __call__(self, ids):
        return self.model(ids)

    def __getattr__(self, name):
        if name == "model":
            raise AttributeError(name)
        return getattr(self.model, name)

    def decode(self, ids, *past, **named):
        first = all(p is None for p in (*past, *named.values()))
        self.ids = ids if first else torch.cat([self.ids, ids], dim=1)
        return self.model.decode(self.ids, *past, **named)


@edit("generate")
def cache_fed_whole_sequence(generate, model, prompt_ids, max_new_tokens, use_kv_cache, temperature=1.0,
                             generator=None):
    # with the cache, the whole sequence so far is passed to model.decode at every step, on top of the cache
    return generate(_WholeSequenceFed(model), prompt_ids, max_new_tokens, use_kv_cache, temperature, generator)


# --- tiled_attention ----------------------------------------------------------------------------------------
@edit("causal_mask")
def accumulator_not_rescaled(causal_mask, q, k, v, block_size, causal=True):
    # the running sum and the accumulator never multiplied by e^(m - m') when the running max m grows: each key
    # keeps the weight e^(s - m) of the max reached *after its own tile*, not after the last one. Written densely:
    # per key, the max of the visible scores of the tiles up to and including its own (your mask for causal)
    t_q, t_k = q.shape[-2], k.shape[-2]
    work = torch.promote_types(q.dtype, torch.float32)
    s = (q.to(work) @ k.to(work).transpose(-2, -1)) * q.shape[-1] ** -0.5
    if causal:
        s = s.masked_fill(~causal_mask(t_q, t_k, device=q.device), -math.inf)
    tile = torch.arange(t_k, device=q.device) // block_size
    tile_max = torch.stack([s[..., tile == i].amax(-1) for i in range(int(tile[-1]) + 1)], dim=-1)
    running = tile_max.cummax(dim=-1).values[..., tile]             # the max after each key's own tile
    w = (s - torch.where(running == -math.inf, 0.0, running)).exp()
    total = w.sum(-1, keepdim=True)
    return ((w @ v.to(work)) / torch.where(total > 0, total, 1.0)).to(q.dtype)


@edit("tiled_attention")
def fully_masked_row_nan(tiled_attention, q, k, v, block_size, causal=True):
    # no guard for a query that sees no key: in a tile it is computed in, its running max stays -inf and e^(s - m) is
    # e^(-inf - (-inf)) = NaN; where all its tiles are skipped, the final division is 0 / 0. With T_q > T_k those are
    # the first T_q - T_k queries: your result with their rows NaN
    out = tiled_attention(q, k, v, block_size, causal)
    t_q, t_k = q.shape[-2], k.shape[-2]
    if causal and t_q > t_k:
        out = out.clone()
        out[..., : t_q - t_k, :] = math.nan
    return out


# --- apply_rope, grouped_query_attention, rotary_self_attention ----------------------------------------------
@edit("apply_rope")
def rope_pairs_interleaved(apply_rope, x, cos, sin, positions):
    # adjacent channels (2i, 2i + 1) rotated together, as Meta's Llama code pairs them, with tables laid out for the
    # rotate-half pairs (i, i + D/2): channel 2i turns by the angle of channel 2i and channel 2i + 1 by that of
    # 2i + 1, two different angles, so no pair is rotated. Your apply_rope on the channels reordered evens then
    # odds, with the tables reordered the same way, and put back
    d = x.shape[-1]
    order = torch.cat([torch.arange(0, d, 2), torch.arange(1, d, 2)])
    table = order.to(cos.device)
    out = apply_rope(x[..., order.to(x.device)], cos[:, table], sin[:, table], positions)
    return out[..., torch.argsort(order).to(x.device)]


@edit("grouped_query_attention")
def kv_heads_tiled(grouped_query_attention, q, k, v):
    # k.repeat(1, g, 1, 1) lays the key/value heads out [0, 1, ..., 0, 1, ...]: query head h reads head h % H_kv
    # instead of h // g. Your function, given the query heads in the slots whose group is head h % H_kv
    h, h_kv = q.shape[1], k.shape[1]
    if h % h_kv:
        return grouped_query_attention(q, k, v)
    heads = torch.arange(h, device=q.device)
    slot = (heads % h_kv) * (h // h_kv) + heads // h_kv
    moved = torch.empty_like(q)
    moved[:, slot] = q
    return grouped_query_attention(moved, k, v)[:, slot]


@edit("rotary_self_attention")
def rope_offset_forgotten(rotary_self_attention, x, w_q, w_kv, w_o, n_heads, cos, sin, past_kv=None):
    # the new tokens rotated at positions 0 .. T - 1 whatever the cache holds: your layer given tables shifted by
    # T_past rows, so that position T_past + i reads the angles of position i
    t_past = 0 if past_kv is None else past_kv[0].shape[2]
    return rotary_self_attention(x, w_q, w_kv, w_o, n_heads, torch.cat([cos[:t_past], cos]),
                                 torch.cat([sin[:t_past], sin]), past_kv)


BUGS = [
    Bug("triu_diagonal_zero", "causal_mask", "triu with the wrong diagonal (the token cannot see itself)",
        "the mask also hides the diagonal, each query's own key: the first query of a square mask may attend no "
        "key at all. A hand-written softmax of that row is NaN (-inf - (-inf)); "
        "F.scaled_dot_product_attention on CPU instead returns a row of zeros, silently, which is the attention "
        "of no key. Every other query loses its own token.",
        "every query may attend its own key: check the diagonal you keep or cut against the alignment derived in "
        "section 1, for T_q = T_k and for T_q < T_k.",
        "PyTorch docs: torch.triu / torch.tril (the diagonal argument); Vaswani et al. 2017, Sec. 3.2.3",
        triu_diagonal_zero),
    Bug("transposed_mask", "causal_mask", "the mask is transposed (queries and keys swapped)",
        "each query attends its own key and the later ones instead of the earlier ones: every position sees the "
        "future, so training is trivial and generation is garbage; changing token t+1 changes the outputs at "
        "positions <= t.",
        "rows are queries and columns keys: check which axis is which where you build the mask, and that the keys "
        "a query may see are the earlier ones.",
        "Vaswani et al. 2017, Sec. 3.2.3 (masking out illegal connections); PyTorch docs: "
        "F.scaled_dot_product_attention (attn_mask shape (L, S), L = target length)",
        transposed_mask),
    Bug("missing_scale", "causal_attention_weights", "scores not divided by sqrt(D)",
        "without the scale the spread of the logits q.k grows with D (section 1 asks you by how much): for D = 64 "
        "the softmax is nearly one-hot (its entropy collapses) and its gradient vanishes; the weights still sum "
        "to 1, so nothing raises.",
        "compare your scores with the attention formula of section 1: they must be scaled before the mask and "
        "the softmax.",
        "Vaswani et al. 2017, Sec. 3.2.1 (scaled dot-product attention, footnote 4)",
        missing_scale),
    Bug("softmax_over_queries", "causal_attention_weights", "softmax over the queries (dim=-2)",
        "softmax(dim=-2) normalises over the queries: each key's column sums to 1, each query's row does not, "
        "so the output is not a weighted average of the values; it still runs and has the right shape.",
        "the weights of one query are a distribution over the keys: check which axis of [B, H, T_q, T_k] your "
        "softmax normalises.",
        "labmlai/annotated_deep_learning_paper_implementations issue #146 (DDPM UNet attention, softmax on "
        "the wrong axis); PyTorch docs: torch.softmax (dim)",
        softmax_over_queries),
    Bug("is_causal_top_left", "causal_attention", "SDPA is_causal=True with T_q < T_k (top-left mask)",
        "PyTorch's is_causal=True aligns the mask top-left: with a KV cache (T_q < T_k) the new queries see "
        "only the first T_q keys, e.g. one decoded token attends key 0 only. Right when T_q == T_k.",
        "with a KV cache the queries are the last T_q of the T_k tokens, so the mask must be aligned bottom-right "
        "(section 1), which is_causal=True is not: look at where your mask comes from when T_q < T_k.",
        "PyTorch docs: torch.nn.attention.bias (causal_upper_left vs causal_lower_right); flash-attn 2.1 "
        "release notes (causal=True changed to bottom-right alignment)",
        is_causal_top_left),
    Bug("masked_fill_minus_1e9", "causal_attention", "masked_fill with -1e9 (fails in float16)",
        "-1e9 does not fit in float16 (largest finite value 65504): masked_fill raises a RuntimeError "
        "(value cannot be converted to type Half without overflow) as soon as inputs are half precision.",
        "the value you put in the masked scores must be representable in the scores' dtype: section 1 says what "
        "fits in float16 and bfloat16, and what then happens to a fully masked row.",
        "PyTorch docs: torch.finfo (float16 max = 65504); Hugging Face transformers replaced -1e9/-10000 "
        "constants by torch.finfo(dtype).min for fp16 support",
        masked_fill_minus_1e9),
    Bug("dropout_ignores_training", "causal_attention", "attention dropout not tied to training",
        "SDPA's dropout_p is applied on every call, it has no eval mode: with training=False the outputs are "
        "still random and two evaluations of the same input differ.",
        "SDPA applies whatever dropout_p it is given: look at how the dropout you apply depends on training (in a "
        "module, on the module's mode).",
        "PyTorch docs: F.scaled_dot_product_attention (dropout_p; 'set to 0.0 during evaluation'); "
        "nanoGPT model.py (CausalSelfAttention.forward)",
        dropout_ignores_training, detect=_dropout_in_eval),
    Bug("view_heads_first", "split_heads", "heads split with view(B, H, T, D)",
        "x.view(B, H, T, C // H) has the right shape but the wrong layout: each 'head' holds T/H whole tokens "
        "instead of one slice of the channels of every token. It runs, and attention is silently wrong.",
        "view only reinterprets memory: the channels of each token must be cut into heads where they lie, in the "
        "last axis, before the head axis moves in front of the time axis (section 3).",
        "PyTorch docs: Tensor.view (reinterprets the memory, no reordering); nanoGPT model.py "
        "(CausalSelfAttention.forward)",
        view_heads_first),
    Bug("character_level", "tokenize_smiles", "one token per character",
        "two-letter atoms and ring numbers are split: Cl becomes C + l, Br becomes B + r and %10 becomes "
        "% + 1 + 0, so the model must learn that 'l' only follows 'C' and a ring bond 10 reads as bonds 1 and 0; "
        "nothing is ever rejected.",
        "bracket atoms, Cl, Br and %NN are single tokens (section 5): your tokenizer must recognise them before "
        "single characters, and reject what no rule covers.",
        "Schwaller et al. 2019, Molecular Transformer (ACS Cent. Sci.), SMILES tokenization regex; "
        "OpenSMILES specification",
        character_level),
    Bug("findall_drops_unmatched", "tokenize_smiles", "re.findall silently drops what it cannot match",
        "re.findall skips characters the pattern does not cover: here the backslash bond (/ and \\ set "
        "double-bond geometry) and an incomplete '%1' vanish, so the tokens no longer spell the input and no "
        "error is raised.",
        "the tokens must spell the input: a character no rule matches must raise a ValueError naming its "
        "position, not vanish; and check that your rules cover every bond symbol of section 5.",
        "Python docs: re.findall (non-overlapping matches, unmatched text skipped); OpenSMILES specification "
        "(bond symbols - = # $ : / \\)",
        findall_drops_unmatched),
    Bug("cache_fed_whole_sequence", "generate", "the whole sequence fed to the model on top of its KV cache",
        "with a cache the model has already read every earlier token; feeding the whole sequence again counts "
        "the prefix twice (and shifts the positions), so the cached path generates other tokens than full "
        "recomputation.",
        "the cache already holds every earlier token: look at what you pass to model.decode after the first "
        "step.",
        "transformers' GPT2LMHeadModel.prepare_inputs_for_generation ('only last token for input_ids if past "
        "is defined'); THUDM/chatglm-6b commit cd8041e 'Fix past_key_values'; huggingface/optimum issue #1839",
        cache_fed_whole_sequence),
    Bug("accumulator_not_rescaled", "tiled_attention", "the accumulator is not rescaled when the running max grows",
        "terms accumulated against an old running maximum keep that scale: a key's weight is e^(s - m) with the max "
        "reached after its own tile, so keys of early tiles count e^(m_final - m_then) times too much. With one tile "
        "(block_size >= T) the result is right; with several it is not, and nothing raises.",
        "when the running max changes from m to m', multiply the running sum and the accumulator by e^(m - m') "
        "before adding the new tile, as the update of section 10.1 does.",
        "Milakov & Gimelshein 2018, Online normalizer calculation for softmax, Algorithm 3; Dao et al. 2022, "
        "FlashAttention, Algorithm 1 line 12; Dao 2023, FlashAttention-2, Algorithm 1; meta-pytorch/MSLK PR #242 "
        "(a conditional-rescaling optimisation of CK's fused attention left the accumulator and the running sum at the "
        "old maximum while the new tile's weights were taken against the new one: degraded Flux2 images on MI350x)",
        accumulator_not_rescaled),
    Bug("fully_masked_row_nan", "tiled_attention", "-inf - (-inf): a query that sees no key gives NaN",
        "a query that has seen no visible key keeps the running max -inf, and e^(s - m) = e^(-inf - (-inf)) is NaN; "
        "with more queries than keys (T_q > T_k, bottom-right) the first T_q - T_k rows of the output are NaN "
        "where SDPA returns 0.",
        "shift by 0 instead of m while m is -inf (or clamp it to a finite value), and divide by a running sum of 0 "
        "as by 1: a query with no visible key gets 0.",
        "flashinfer-ai/flashinfer PR #4401 (fully masked rows of a bottom-right causal prefill with qo_len > kv_len "
        "computed (-inf) - (-inf) = NaN); tracel-ai/burn PR #4697 (attention_fallback returned NaN for fully masked "
        "rows); Dao-AILab/flash-attention issue #2082 (the guard done wrong: a running max of -inf replaced by 0 stayed "
        "0 when every later score was negative, zeroing heads; fixed by PR #2174)",
        fully_masked_row_nan),
    Bug("rope_pairs_interleaved", "apply_rope", "RoPE's pairs interleaved (2i, 2i + 1) with rotate-half tables",
        "the tables pair channel i with i + D/2; rotating adjacent channels with them turns the two channels of a "
        "pair by different angles, which is no rotation: norms change, and scores no longer depend on n - m only.",
        "this lab's layout pairs channel i with channel i + D/2 (rotate_half(x) = cat(-x2, x1) of the two halves): "
        "check which channels your rotation mixes.",
        "huggingface/transformers issue #47328 and PR #47403 (the Qwen2.5-Omni Token2Wav DiT rotated adjacent pairs "
        "with half-split cos/sin tables, a regression from #39847); huggingface/transformers issue #25199 and "
        "Dao-AILab/flash-attention issue #288 (questions about Meta's interleaved layout against the rotate-half code, "
        "answered by the conversion script's permutation of the q and k weights)",
        rope_pairs_interleaved),
    Bug("kv_heads_tiled", "grouped_query_attention", "key/value heads tiled (repeat) instead of grouped (repeat_interleave)",
        "repeat lays the key/value heads out [0, 1, ..., 0, 1, ...], so query head h reads head h % H_kv instead of "
        "h // (H / H_kv): the wrong heads are paired whenever 1 < H_kv < H, and nothing raises.",
        "query head h reads key/value head h // (H // H_kv), contiguous groups as SDPA's enable_gqa: expand each key "
        "/value head to its group with repeat_interleave, not repeat.",
        "onnx/onnx PR #7274 (GQA expanded key/value heads with Tile: [head0, head1, head0, head1]); ekzhang/jax-js "
        "PR #180 (its GQA tiled the key/value heads where it should repeat them); Ainslie et al. 2023, GQA, Sec. 2.2",
        kv_heads_tiled),
    Bug("rope_offset_forgotten", "rotary_self_attention", "cached decoding rotates new tokens at positions 0..T-1",
        "with a KV cache the new tokens sit at positions T_past onwards; rotating them as if they began at 0 makes "
        "every score against a cached key use the wrong distance, so cached decoding disagrees with one call on the "
        "whole sequence.",
        "the new tokens' positions start at the length of the cache, past_kv[0].shape[2]: rotate the queries and "
        "keys there.",
        "Blaizzy/mlx-vlm issue #1983 (Qwen3-Omni decode assigned RoPE position 0 to every token; fixed by PR #1993); "
        "RobertCsordas/moeut PR #6 (open: proposes that the RoPE offset was computed before the cached keys were "
        "concatenated, with a test of incremental against full decoding)",
        rope_offset_forgotten),
]
