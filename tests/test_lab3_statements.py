"""Lab 3's statements that carry a number, checked against torch and RDKit, and its new reference functions.

Each test pins one sentence of the lab (or of its bug catalogue) to the measurement that makes it true, so that a
torch upgrade that changes the behaviour fails here instead of leaving a false sentence in the notebook.
"""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from autograder.core.labs import instructor_bug as bug  # full bodies, where students see edits
from genlab.testing import load_reference

ROOT = Path(__file__).resolve().parents[1]
SOURCE = ROOT / "solutions" / "lab3_attention" / "lab3_attention.ipynb"


@pytest.fixture(scope="module")
def ref():
    return load_reference("lab3_attention")


def _cells() -> dict[str, str]:
    nb = json.loads(SOURCE.read_text())
    return {c["metadata"].get("nbgrader", {}).get("grade_id"): "".join(c["source"]) for c in nb["cells"]}


# -- section 1: finfo.min plus a negative logit ---------------------------------------------------------------
def test_finfo_min_plus_a_negative_logit_overflows_only_in_float16():
    for dtype, overflows in ((torch.float16, True), (torch.bfloat16, False), (torch.float32, False)):
        fmin = torch.finfo(dtype).min
        total = torch.tensor(fmin, dtype=dtype) + torch.tensor(-30.0, dtype=dtype)
        assert torch.isinf(total).item() is overflows, f"{dtype}: finfo.min + (-30) = {total.item()}"
        if not overflows:
            assert total.item() == fmin  # it rounds back to finfo.min
    assert f"{torch.finfo(torch.bfloat16).min:.3g}" == "-3.39e+38"
    assert f"{torch.finfo(torch.float32).min:.3g}" == "-3.4e+38"


def test_a_fully_masked_row_is_nan_in_float16_and_uniform_in_bfloat16_and_float32():
    scores = torch.tensor([-30.0, -20.0, -40.0])
    for dtype in (torch.float16, torch.bfloat16, torch.float32):
        fmin = torch.finfo(dtype).min
        logits = scores.to(dtype) + torch.tensor(fmin, dtype=dtype)     # every key masked
        weights = logits.float().softmax(-1) if dtype == torch.bfloat16 else logits.softmax(-1)
        if dtype == torch.float16:
            assert torch.isnan(weights).all()
        else:
            torch.testing.assert_close(weights.float(), torch.full((3,), 1 / 3))


def test_section_1_states_the_dtype_dependence():
    text = _cells()["derivation_attention"]
    assert "bfloat16 and float32" in text and "uniform weights over the masked keys" in text


def _sum_overflows(dtype, s):
    return torch.isinf(torch.tensor(torch.finfo(dtype).min, dtype=dtype) + torch.tensor(s, dtype=dtype)).item()


@pytest.mark.parametrize("dtype, threshold", [(torch.float16, -16.0), (torch.bfloat16, -6.6e35),
                                              (torch.float32, -1.0e31)])
def test_finfo_min_plus_a_logit_overflows_from_half_the_spacing_of_the_largest_values(dtype, threshold):
    # section 1: float16 values near 65504 are 32 apart, so finfo.min + s is -inf for s <= -16 and rounds back to
    # finfo.min above; bfloat16 and float32 only from about -6.6e35 and -1.0e31
    info, zero = torch.finfo(dtype), torch.zeros((), dtype=dtype)
    spacing = info.max - torch.nextafter(torch.tensor(info.max, dtype=dtype), zero).item()
    first_inf = torch.tensor(-spacing / 2, dtype=dtype)
    last_finite = torch.nextafter(first_inf, zero)
    assert _sum_overflows(dtype, first_inf.item()) and not _sum_overflows(dtype, last_finite.item())
    assert (torch.tensor(info.min, dtype=dtype) + last_finite).item() == info.min
    assert first_inf.item() == pytest.approx(threshold, rel=0.02)
    if dtype == torch.float16:
        assert spacing == 32 and first_inf.item() == -16.0


def test_finfo_min_plus_finfo_min_is_minus_inf_and_a_doubly_hidden_row_is_nan():
    pad = torch.tensor([True, True, True, False, False])      # transformers PR #27114's example: 3 left-padding tokens
    T = len(pad)
    future = ~torch.ones(T, T, dtype=torch.bool).tril()
    pad_keys, pad_queries = pad[None, :].expand(T, T), pad[:, None].expand(T, T)
    for dtype in (torch.float16, torch.bfloat16, torch.float32):
        fmin = torch.finfo(dtype).min
        assert torch.isinf(torch.tensor(fmin, dtype=dtype) + torch.tensor(fmin, dtype=dtype))

        def bias(hide):
            return torch.where(hide, fmin, 0.0).to(dtype)

        added = bias(future) + bias(pad_keys)                    # to_4d before the fix: 3 entries -inf, no row NaN
        assert int(torch.isinf(added).sum()) == 3 and not torch.isnan(added.float().softmax(-1)).any()
        doubly = added + bias(pad_queries)                       # every entry of the padded rows hidden twice
        assert torch.isnan(doubly.float().softmax(-1)).any(-1).tolist() == pad.tolist()
        once = bias(future | pad_keys | pad_queries)             # combined first, filled once
        assert not torch.isinf(once).any() and not torch.isnan(once.float().softmax(-1)).any()
    # the NaN reaches the gradients although the loss reads only the real tokens
    torch.manual_seed(0)
    q, k, v = (torch.randn(1, 1, T, 8, requires_grad=True) for _ in range(3))
    mask = sum(torch.where(h, torch.finfo(torch.float32).min, 0.0) for h in (future, pad_keys, pad_queries))
    (((q @ k.transpose(-2, -1)) / 8 ** 0.5 + mask).softmax(-1) @ v)[:, :, 3:].sum().backward()
    assert torch.isnan(k.grad).all() and torch.isnan(v.grad).all()


def test_section_1_and_8_4_state_the_threshold_and_the_double_mask():
    cells = _cells()
    text = " ".join(cells["derivation_attention"].split())
    assert "$S \\le -16$" in text and "in **every** dtype" in text and "PR #27114" in text and "PR #2658" in text
    assert "the sum overflows to $-\\infty$ (a fully masked row" not in text   # the old, overgeneralised sentence
    code = cells["failure_fp16"]
    assert "nextafter" in code and "finfo.min + finfo.min" in code and "pad_queries" in code


# -- section 2 and 6: FLOPs of each pass ------------------------------------------------------------------------
def test_fused_backward_counts_one_more_score_matmul(ref):
    from genlab import count_flops
    B, H, T, D = 1, 2, 128, 16
    q, k, v = (torch.randn(B, H, T, D, requires_grad=True) for _ in range(3))
    counted = {}
    for name, fn in (("naive", lambda q, k, v: ref.causal_attention_weights(q, k) @ v),
                     ("sdpa", lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True))):
        out = fn(q, k, v)
        counted[name] = count_flops(fn, q, k, v), count_flops(out.backward, torch.ones_like(out))
    one = 2 * B * H * T * T * D
    assert counted["naive"][0] == counted["sdpa"][0] == 2 * one            # the same forward FLOPs
    assert counted["naive"][1] == 4 * one and counted["sdpa"][1] == 5 * one  # the scores recomputed: one matmul more
    text = " ".join(_cells()["derivation_attention"].split())
    assert "in the **forward** pass the same FLOPs" in text and "recomputes the scores" in text
    assert "forward and the backward pass separately" in " ".join(_cells()["cost_intro"].split())


# -- section 7: weight decay and the graded KV-cache path ------------------------------------------------------------
def test_weight_decay_rule_is_attributed_to_mingpt():
    code = _cells()["gpt_train"]
    assert "(as nanoGPT)" not in code and "minGPT's rule" in code and "p.dim() >= 2" in code


def test_no_sentence_says_the_kv_cache_path_is_ungraded():
    cells = _cells()
    assert "generate_kv_cache" in cells and "`generate_kv_cache`" in cells["derivation_generate"]
    assert "autograded on both paths" in cells["title"]
    for grade_id, text in cells.items():
        flat = " ".join(text.split()).lower()
        for stale in ("kv-cache path is not graded", "cache path of `generate` is not graded",
                      "the grader does not check the cache", "cached path is not graded"):
            assert stale not in flat, (grade_id, stale)


# -- catalogue: triu_diagonal_zero on SDPA ----------------------------------------------------------------------
def test_triu_diagonal_zero_gives_zeros_from_sdpa_on_cpu_and_nan_by_hand():
    torch.manual_seed(0)
    q, k, v = (torch.randn(1, 2, 6, 8) for _ in range(3))
    mask = bug("lab3_attention", "triu_diagonal_zero").impl(6, 6)
    assert not mask[0].any(), "the first query must attend no key"
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    assert not torch.isnan(out).any() and (out[:, :, 0] == 0).all()
    scores = (q @ k.transpose(-2, -1)).masked_fill(~mask, float("-inf"))
    hand = torch.exp(scores - scores.amax(-1, keepdim=True))
    assert torch.isnan(hand[:, :, 0]).all()
    symptom = bug("lab3_attention", "triu_diagonal_zero").symptom
    assert "zeros" in symptom and "the output is NaN" not in symptom


# -- section 5: ring bond 0 ----------------------------------------------------------------------------------
def test_ring_bond_zero_is_legal_smiles(ref):
    Chem = pytest.importorskip("rdkit.Chem")
    mol = Chem.MolFromSmiles("C0CC0")
    assert mol is not None and mol.GetNumAtoms() == 3 and mol.GetRingInfo().NumRings() == 1
    assert ref.tokenize_smiles("C0CC0") == ["C", "0", "C", "C", "0"]
    assert "`0`..`9`" in _cells()["derivation_tokens"]


def test_the_position_test_fails_a_message_that_only_quotes_the_input():
    source = _cells()["tokenize_smiles_errors"]

    def quotes_the_input(smiles):
        raise ValueError(f"cannot tokenize {smiles!r}")

    with pytest.raises(AssertionError, match="should name position"):
        exec(source, {"re": re, "tokenize_smiles": quotes_the_input})


# -- cross-references ----------------------------------------------------------------------------------------
def test_cross_references_name_the_sections_that_exist():
    cells = _cells()
    text = "\n".join(cells.values())
    assert "section 7 measures" not in text and "(section 7)" not in text
    for number in ("8.1", "8.3", "8.5", "8.8", "8.9"):
        assert re.search(rf"^### {re.escape(number)} ", text, flags=re.M), f"no heading {number}"
    assert "section 8.3 measures" in cells["derivation_attention"]
    assert "(section 8.1)" in cells["derivation_attention"]
    assert "section 8.5 measures" in cells["derivation_heads"]


# -- claim C5 --------------------------------------------------------------------------------------------------
def test_mha_is_causal_without_mask_is_silently_non_causal_in_eval_no_grad():
    torch.manual_seed(0)
    mha = nn.MultiheadAttention(32, 4, batch_first=True).eval()
    x = torch.randn(2, 6, 32)
    future = ~torch.ones(6, 6, dtype=torch.bool).tril()
    with torch.no_grad():
        hinted = mha(x, x, x, is_causal=True, need_weights=False)[0]
        unmasked = mha(x, x, x, need_weights=False)[0]
        causal = mha(x, x, x, attn_mask=future, need_weights=False)[0]
    assert torch.equal(hinted, unmasked) and not torch.allclose(hinted, causal)
    mha.train()
    with pytest.raises(RuntimeError, match="Need attn_mask"):
        mha(x, x, x, is_causal=True)


# -- the new reference function and its catalogued bugs -------------------------------------------------------
def test_reference_weights_are_sdpa_with_identity_values(ref):
    torch.manual_seed(1)
    for t_q, t_k in ((1, 1), (3, 8), (6, 6)):
        q, k = torch.randn(2, 3, t_q, 16, dtype=torch.float64), torch.randn(2, 3, t_k, 16, dtype=torch.float64)
        eye = torch.eye(t_k, dtype=torch.float64).expand(2, 3, t_k, t_k)
        mask = torch.ones(t_q, t_k, dtype=torch.bool).tril(diagonal=t_k - t_q)
        torch.testing.assert_close(ref.causal_attention_weights(q, k),
                                   F.scaled_dot_product_attention(q, k, eye, attn_mask=mask))


def test_reference_attention_does_not_call_sdpa(ref):
    source = _cells()["causal_attention"] + _cells()["causal_attention_weights"]
    body = source.split("### BEGIN SOLUTION")[1]
    assert "scaled_dot_product_attention" not in body.split("### END SOLUTION")[0]


@pytest.mark.parametrize("bug_id", ["missing_scale", "softmax_over_queries"])
def test_weights_bugs_differ_from_the_reference(ref, bug_id):
    torch.manual_seed(2)
    q, k = torch.randn(2, 2, 5, 64), torch.randn(2, 2, 7, 64)
    got, want = bug("lab3_attention", bug_id).impl(q, k), ref.causal_attention_weights(q, k)
    assert got.shape == want.shape and (got - want).abs().max() > 0.1


def test_missing_scale_saturates_the_softmax():
    torch.manual_seed(3)
    q, k = torch.randn(64, 4, 16, 256), torch.randn(64, 4, 16, 256)
    w = bug("lab3_attention", "missing_scale").impl(q, k)[:, :, -1]
    assert w.amax(-1).mean() > 0.8  # nearly one-hot at d = 256


def test_c5_decides_the_slow_path_from_the_spread_of_repeated_timings():
    code = _cells()["claim_c5"]
    assert "blocked_autorange" in code and "no measurable difference" in code and "quartiles" in code
    assert "2 * per_key" not in code and "threshold 2x" not in code



# -- section 10: the reference RoPE against Hugging Face's Llama code (the graded tests compare with the reference) --
def test_reference_rope_matches_hugging_face_llama(ref):
    from transformers import LlamaConfig
    from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding, apply_rotary_pos_emb

    torch.manual_seed(0)
    for head_dim, n_heads, base in ((16, 4, 10000.0), (64, 2, 500000.0), (128, 1, 10000.0)):
        config = LlamaConfig(hidden_size=head_dim * n_heads, num_attention_heads=n_heads, max_position_embeddings=256,
                             rope_theta=base)
        hf_cos, hf_sin = LlamaRotaryEmbedding(config)(torch.zeros(1), torch.arange(256)[None])
        cos, sin = ref.rope_cache(head_dim, 256, base)
        # transformers computes the angles in float32: up to 255 rad, a rounding of about 255 * 6e-8
        torch.testing.assert_close(cos.float(), hf_cos[0], atol=2e-4, rtol=1e-4)
        torch.testing.assert_close(sin.float(), hf_sin[0], atol=2e-4, rtol=1e-4)
        q, k = torch.randn(2, n_heads, 9, head_dim), torch.randn(2, n_heads, 9, head_dim)
        for positions in (torch.arange(9), torch.tensor([5, 3, 9, 0, 255, 64, 2, 2, 11])):
            hf_q, hf_k = apply_rotary_pos_emb(q, k, hf_cos[0][positions][None], hf_sin[0][positions][None])
            # the rotation itself, on Hugging Face's own tables: the same formula and layout
            torch.testing.assert_close(ref.apply_rope(q, hf_cos[0], hf_sin[0], positions), hf_q)
            torch.testing.assert_close(ref.apply_rope(k, hf_cos[0], hf_sin[0], positions), hf_k)
            # and on the lab's float64 tables, within the float32 angles' rounding
            torch.testing.assert_close(ref.apply_rope(k, cos, sin, positions), hf_k, atol=1e-3, rtol=1e-4)


def test_reference_gqa_matches_sdpa_enable_gqa(ref):
    torch.manual_seed(1)
    q, k, v = torch.randn(2, 12, 7, 16), torch.randn(2, 4, 7, 16), torch.randn(2, 4, 7, 16)
    torch.testing.assert_close(ref.grouped_query_attention(q, k, v),
                               F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True))
