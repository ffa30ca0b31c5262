"""Lab 4's reference solution against Hugging Face peft (pinned in requirements/ci.txt), and its bug catalogue.

peft imports transformers (several seconds): it is imported by this module, Lab 4's cross-check cell and two
of Lab 4's hidden tests only, never by genlab or another lab.
"""
from __future__ import annotations

import copy
import math
import os
import subprocess
import sys
from collections import OrderedDict
from pathlib import Path

import pytest
import torch
import torch.nn as nn

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # peft must never reach for the network here
peft = pytest.importorskip("peft", reason="peft is a test dependency: pip install peft==0.21.2")

from autograder.core.labs import instructor_bug as bug  # noqa: E402 - full bodies, where students see edits
from genlab.testing import load_reference  # noqa: E402
from genlab.testing.calls import Call  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
LAB = "lab4_lora"


@pytest.fixture(scope="module")
def ref():
    return load_reference(LAB)


def block():
    attn = nn.Sequential(OrderedDict((n, nn.Linear(8, 8)) for n in ("q_proj", "k_proj", "v_proj", "out_proj")))
    mlp = nn.Sequential(OrderedDict([("up", nn.Linear(8, 16)), ("act", nn.ReLU()), ("down", nn.Linear(16, 8))]))
    return nn.Sequential(OrderedDict([("attn", attn), ("mlp", mlp), ("norm", nn.LayerNorm(8)),
                                      ("head", nn.Linear(8, 3))]))


def both(ref, model, targets, r, alpha, **config):
    """The same model adapted by peft and by the reference add_lora, with peft's adapters copied across."""
    theirs = peft.get_peft_model(copy.deepcopy(model), peft.LoraConfig(r=r, lora_alpha=alpha,
                                                                       target_modules=targets, **config))
    ours = ref.add_lora(copy.deepcopy(model), targets, r, alpha)
    for name, module in ours.named_modules():
        if isinstance(module, ref.LoRALinear):
            if config.get("use_rslora"):
                module.scaling = ref.lora_scaling(alpha, r, rslora=True)
            peft_layer = theirs.base_model.model.get_submodule(name)
            with torch.no_grad():
                peft_layer.lora_B["default"].weight.normal_(0, 0.2)  # B = 0 would make both sides the base model
                module.lora_A.copy_(peft_layer.lora_A["default"].weight)
                module.lora_B.copy_(peft_layer.lora_B["default"].weight)
    return ours.eval(), theirs.eval()


@pytest.mark.parametrize("targets,r,alpha,config", [
    (["q_proj", "v_proj", "down"], 4, 8, {}),
    (["attn.out_proj", "head"], 2, 16, {}),
    (["up", "down"], 8, 8, {"use_rslora": True}),
])
def test_outputs_agree_with_peft_unmerged_and_merged(ref, targets, r, alpha, config):
    torch.manual_seed(0)
    model = block()
    ours, theirs = both(ref, model, targets, r, alpha, **config)
    x = torch.randn(16, 8)
    with torch.no_grad():
        assert (theirs(x) - model(x)).abs().max() > 1e-2, "the adapters must change the output, or nothing is tested"
        torch.testing.assert_close(ours(x), theirs(x), rtol=1e-5, atol=1e-6)
        for module in ours.modules():
            if isinstance(module, ref.LoRALinear):
                module.merge()
        merged = theirs.merge_and_unload()
        torch.testing.assert_close(ours(x), merged(x), rtol=1e-5, atol=1e-6)
        for name, module in ours.named_modules():
            if isinstance(module, ref.LoRALinear):
                torch.testing.assert_close(module.base.weight, merged.get_submodule(name).weight, rtol=1e-6, atol=1e-7)


def test_merge_lora_equals_peft_merge_in_bf16(ref):
    """With peft's default autocast_adapter_dtype=True, a bf16 base gets float32 adapters: the delta is float32 and
    the in-place add into the bf16 weight computes in float32 and rounds once, as merge_lora does."""
    torch.manual_seed(1)
    model = nn.Sequential(nn.Linear(48, 64)).to(torch.bfloat16)
    theirs = peft.get_peft_model(copy.deepcopy(model), peft.LoraConfig(r=16, lora_alpha=8, target_modules=["0"]))
    layer = theirs.base_model.model[0]
    assert layer.lora_A["default"].weight.dtype == torch.float32, "peft's autocast_adapter_dtype=True upcasts adapters"
    with torch.no_grad():
        layer.lora_B["default"].weight.normal_(0, 0.25)
    A, B = layer.lora_A["default"].weight.detach().clone(), layer.lora_B["default"].weight.detach().clone()
    ours = ref.merge_lora(model[0].weight.detach(), A, B, 8 / 16)
    merged = theirs.merge_and_unload()[0].weight
    assert merged.dtype == ours.dtype == torch.bfloat16
    assert (ours == merged).double().mean() >= 0.99
    low = bug(LAB, "merge_in_low_precision").impl(model[0].weight.detach(), A, B, 8 / 16)
    assert (low == merged).double().mean() < 0.97, "the catalogued low-precision merge should differ from peft's"


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_peft_merge_of_half_precision_adapters_on_cpu_rounds_twice(ref, dtype):
    """Section 4's statement, from peft 0.21.2's tuners/lora/layer.py: with adapters in bf16/fp16 on the CPU,
    get_delta_weight computes B A and its scaling in float32 and casts the delta back (round 1), and merge adds it
    to the weight in that dtype (round 2). So peft's merge is the twice-rounded one, not merge_lora's."""
    torch.manual_seed(2)
    model = nn.Sequential(nn.Linear(48, 64)).to(dtype)
    theirs = peft.get_peft_model(copy.deepcopy(model), peft.LoraConfig(r=16, lora_alpha=8, target_modules=["0"]),
                                 autocast_adapter_dtype=False)
    layer = theirs.base_model.model[0]
    assert layer.lora_A["default"].weight.dtype == dtype
    with torch.no_grad():
        layer.lora_B["default"].weight.normal_(0, 0.25)
    W = model[0].weight.detach()
    A, B = layer.lora_A["default"].weight.detach().clone(), layer.lora_B["default"].weight.detach().clone()
    merged = theirs.merge_and_unload()[0].weight.detach()
    twice = W + (8 / 16 * (B.float() @ A.float())).to(dtype)      # delta rounded, then the sum rounded
    assert torch.equal(merged, twice)
    once = ref.merge_lora(W, A, B, 8 / 16)
    exact = W.double() + 8 / 16 * (B.double() @ A.double())
    assert (merged != once).double().mean() > 0.05, "rounding twice should change a share of the entries"
    assert (merged.double() - exact).abs().mean() > (once.double() - exact).abs().mean()


def test_count_parameters_agrees_with_peft(ref):
    torch.manual_seed(2)
    mlp = nn.Sequential(nn.Linear(64, 32), nn.ReLU(), nn.Linear(32, 32), nn.ReLU(), nn.Linear(32, 10))
    for targets, r in ((["0", "2", "4"], 4), (["2"], 1), (["0", "4"], 16)):
        theirs = peft.get_peft_model(copy.deepcopy(mlp), peft.LoraConfig(r=r, lora_alpha=r, target_modules=targets))
        ours = ref.add_lora(copy.deepcopy(mlp), targets, r, r)
        assert tuple(ref.count_parameters(ours)) == tuple(theirs.get_nb_trainable_parameters())
        per_layer = sum(r * (mlp[int(t)].in_features + mlp[int(t)].out_features) for t in targets)
        assert ref.count_parameters(ours)[0] == per_layer  # claim C6: r (d_in + d_out) per adapted layer


def test_scaling_and_init_law_match_peft(ref):
    torch.manual_seed(3)
    for r, alpha, rs in ((8, 16, False), (4, 8, True), (1, 1, False)):
        theirs = peft.get_peft_model(nn.Sequential(nn.Linear(256, 32)),
                                     peft.LoraConfig(r=r, lora_alpha=alpha, target_modules=["0"], use_rslora=rs))
        layer = theirs.base_model.model[0]
        assert math.isclose(layer.scaling["default"], ref.lora_scaling(alpha, r, rslora=rs))
        A = layer.lora_A["default"].weight
        assert A.abs().max() <= 1 / math.sqrt(256)  # kaiming_uniform_(a=sqrt(5)): U(+-1/sqrt(in))
        assert torch.count_nonzero(layer.lora_B["default"].weight) == 0
    A, B = ref.lora_init(256, 32, 256)
    peft_A = torch.cat([peft.get_peft_model(nn.Sequential(nn.Linear(256, 32)), peft.LoraConfig(
        r=256, lora_alpha=1, target_modules=["0"])).base_model.model[0].lora_A["default"].weight.detach()])
    # the same law: equal variance (b^2 / 3) within sampling error
    assert abs(A.var().item() / peft_A.var().item() - 1) < 0.05
    assert torch.count_nonzero(B) == 0


def test_no_match_raises_like_peft_and_the_substring_bug_does_not(ref, monkeypatch):
    # the catalogued bug wraps layers in the notebook's own LoRALinear (the student's, in a lab)
    monkeypatch.setattr(sys.modules["__main__"], "LoRALinear", ref.LoRALinear, raising=False)
    with pytest.raises(ValueError):
        peft.get_peft_model(block(), peft.LoraConfig(r=2, lora_alpha=2, target_modules=["proj"]))
    with pytest.raises(ValueError, match="proj"):
        ref.add_lora(block(), ["proj"], 2, 2)
    loose = bug(LAB, "substring_match").impl(block(), ["proj"], 2, 2)
    adapted = [n for n, m in loose.named_modules() if isinstance(m, ref.LoRALinear)]
    assert adapted == ["attn.q_proj", "attn.k_proj", "attn.v_proj", "attn.out_proj"]


def test_peft_stays_out_of_genlab_and_the_other_labs():
    code = ("import sys, genlab, genlab.catalog.lab4_lora, genlab.testing.server, genlab.data; "
            "print('peft' in sys.modules, 'transformers' in sys.modules)")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert run.stdout.split() == ["False", "False"], run.stderr[-2000:]
    for notebook in (ROOT / "solutions").glob("*/*.ipynb"):
        if notebook.parent.name != LAB:
            assert "peft" not in notebook.read_text(), f"{notebook} imports peft: keep it in Lab 4"


# -- the catalogue's detectors, on recorded calls ----------------------------------------------------------
def test_detectors_name_only_their_bug(ref):
    catalogue = {b.id: b for b in __import__("autograder.core.labs", fromlist=["LabFolder"]).LabFolder(ROOT, LAB).bugs}
    # random B: named; the reference's zeros: not
    call = Call("call", "lora_init", (16, 8, 4), {}, catalogue["random_b_init"].impl(16, 8, 4))
    assert catalogue["random_b_init"].detect([call])
    assert not catalogue["random_b_init"].detect([Call("call", "lora_init", (16, 8, 4), {}, ref.lora_init(16, 8, 4))])
    # dropout in eval: named; the reference's deterministic eval output: not
    torch.manual_seed(4)
    args = (torch.randn(5, 12), torch.randn(7, 12), torch.randn(7), torch.randn(3, 12), torch.randn(7, 3), 2.0)
    det = catalogue["dropout_ignores_training"]
    calls = [Call("call", "lora_forward", args, {"dropout_p": 0.5, "training": False},
                  det.impl(*args, dropout_p=0.5, training=False)),
             Call("call", "lora_forward", args, {}, ref.lora_forward(*args))]
    assert det.detect(calls)
    calls[0].result = ref.lora_forward(*args)
    assert not det.detect(calls)
    # low-precision merge: named on a bf16 call; the reference's float32 merge: not
    W = torch.randn(64, 48).to(torch.bfloat16)
    A, B = (torch.randn(16, 48) / 4).to(torch.bfloat16), (torch.randn(64, 16) / 4).to(torch.bfloat16)
    low = catalogue["merge_in_low_precision"]
    assert low.detect([Call("call", "merge_lora", (W, A, B, 0.5), {}, low.impl(W, A, B, 0.5))])
    assert not low.detect([Call("call", "merge_lora", (W, A, B, 0.5), {}, ref.merge_lora(W, A, B, 0.5))])
    # substring match: a model returned for ["proj"] is the bug; raising ValueError there is right
    sub = catalogue["substring_match"]
    assert sub.detect([Call("call", "add_lora", (block(), ["proj"], 2, 2), {}, object())])
    assert not sub.detect([Call("call", "add_lora", (block(), ["proj"], 2, 2), {}, None, "ValueError")])
