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

from autograder.labs import instructor_bug as bug  # full bodies, where students see edits
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
