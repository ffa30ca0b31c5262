"""Lab 4 (LoRA): its hand-graded cells and the statements of its text about peft's merge, checked here.

The notebook measures its numbers in its own run; these tests keep the cells a release must carry (the manually
graded answers) and the catalogue's account of peft's merge from drifting.
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from genlab.catalog import bugs_for
from genlab.testing.notebook import LabNotebook, grade_id, nbgrader_meta

ROOT = Path(__file__).resolve().parents[1]
SOURCE = ROOT / "solutions" / "lab4_lora" / "lab4_lora.ipynb"
RELEASE = ROOT / "labs" / "lab4_lora" / "lab4_lora.ipynb"
MANUAL = {"init_answer": 2.0, "forgetting_answer": 3.0, "nf4_shares_answer": 3.0}


def cells_by_id(path):
    return {grade_id(c): c for c in nbformat.read(str(path), as_version=4).cells if grade_id(c)}


def test_manual_cells_are_nbgrader_manually_graded_answers():
    source, release = cells_by_id(SOURCE), cells_by_id(RELEASE)
    for gid, points in MANUAL.items():
        want = {"solution": True, "grade": True, "task": False, "locked": False, "points": points}
        got = {key: nbgrader_meta(source[gid]).get(key) for key in want}
        assert source[gid].cell_type == "markdown" and got == want, f"{gid}: {got}"
    assert all(release[gid].source.strip() == "YOUR ANSWER HERE" for gid in MANUAL), "model answers must not ship"
    questions = [source[f"{gid}_question"] for gid in MANUAL]
    assert all(nbgrader_meta(q)["locked"] and "graded by hand" in q.source.lower() for q in questions)
    lab = LabNotebook.read(SOURCE)
    assert not set(MANUAL) & (set(lab.tests) | set(lab.solutions)), "the autograder scores test cells only"


def test_the_forgetting_experiment_measures_the_adapted_model():
    """The upright column is measured with the adapters on; removing them is only the bit-for-bit check."""
    adapt = cells_by_id(SOURCE)["experiment_adapt"].source
    assert '"source": accuracy(model, x_src_test, y_test)' in adapt
    assert "without_adapters(lora8)(x_src_test), pretrained(x_src_test)" in adapt
    assert "SEEDS" in adapt and "RATES" in adapt and "x_val" in adapt


def test_catalogue_says_what_peft_merge_does():
    """peft's CPU-only float32 upcast (PR #1978) is about speed: the catalogue must not present it as the fix."""
    entry = {b.id: b for b in bugs_for("lab4_lora")}["merge_in_low_precision"]
    assert "on the CPU only" in entry.reference and "#1977" in entry.reference
    assert "merge half precision weights in float32" not in entry.reference
    merge_text = cells_by_id(SOURCE)["derivation_merge"].source
    assert "peft computes the product in float32 and rounds once" not in merge_text
    assert 'device.type == "cpu"' in merge_text


def test_section_8_quotes_peft_dora_as_it_is():
    """What section 8 says of peft's DoRA (issue 25): the norm over dim=1 of [out, in], detached, citing Sec. 4.3."""
    import inspect

    import peft.tuners.lora.dora as dora

    source = inspect.getsource(dora)
    text = cells_by_id(SOURCE)["derivation_dora"].source
    assert "torch.linalg.norm(weight, dim=1)" in text and "torch.linalg.norm(weight, dim=1" in source
    assert "weight_norm = weight_norm.detach()" in text and "weight_norm = weight_norm.detach()" in source
    assert "section 4.3" in source.lower()


def test_section_9_code_book_is_bitsandbytes_table():
    """The table the NF4 tests hold is bitsandbytes' published one, and the catalogue's bugs cite real sources."""
    published = [-1.0, -0.6961928009986877, -0.5250730514526367, -0.39491748809814453, -0.28444138169288635,
                 -0.18477343022823334, -0.09105003625154495, 0.0, 0.07958029955625534, 0.16093020141124725,
                 0.24611230194568634, 0.33791524171829224, 0.44070982933044434, 0.5626170039176941,
                 0.7229568362236023, 1.0]
    test = cells_by_id(SOURCE)["nf4_code_book_value"].source
    assert all(repr(v) in test for v in published)
    entries = {b.id: b for b in bugs_for("lab4_lora")}
    for bug_id, cited in (("norm_over_inputs", "NVlabs/DoRA issue #11"), ("norm_of_base_weight", "ComfyUI PR #15458"),
                          ("symmetric_code_book", "artidoro/qlora issue #299"),
                          ("partial_block_dropped", "bitsandbytes PR #1884"),
                          ("whole_blocks_assumed", "NVIDIA/Model-Optimizer issue #183")):
        assert cited in entries[bug_id].reference, bug_id


# bitsandbytes lives outside the venv (requirements/tests-only.txt): inside it, peft imports it in every process
# that imports peft. This script runs in a process of its own with it on the path: it reads the weights the test
# saved and saves bitsandbytes' packed codes, absmax and dequantization of each.
BITSANDBYTES = Path(sys.prefix) / "tests-only"
_BNB_SCRIPT = """
import sys, torch
import bitsandbytes.functional as bnb
out = []
for w in torch.load(sys.argv[1]):
    packed, state = bnb.quantize_4bit(w, blocksize=64, quant_type="nf4")
    out.append((packed, state.absmax, bnb.dequantize_4bit(packed, state, quant_type="nf4")))
torch.save(out, sys.argv[2])
"""


def test_nf4_reference_against_bitsandbytes_on_the_cpu(tmp_path):
    """bitsandbytes 0.50.2 quantizes to NF4 on the CPU (issue 25 asked to find out): its codes (two per byte, the
    first in the high nibble) and absmax equal the reference's, and its dequantization equals nf4_dequantize on
    shapes with a partial last block and with whole blocks. (On this CPU, its dequantize_4bit did not reproduce its
    own codes times absmax for [64, 48], [32, 96] or [16, 48]: an even last dimension that is not a multiple of the
    block size; those shapes are left out here and named in the closing note of issue 25.)"""
    import torch

    from genlab.testing.reference import execute_reference

    if not (BITSANDBYTES / "bitsandbytes").is_dir():
        missing = f"bitsandbytes is not in {BITSANDBYTES}: `make venv` installs it there (requirements/tests-only.txt)"
        if os.environ.get("CI"):   # CI runs make test, which installs it: a skip there would hide a broken setup
            pytest.fail(missing)
        pytest.skip(missing)
    torch.manual_seed(0)
    weights = [torch.randn(*shape) for shape in ((100, 33), (256, 256), (10, 256), (7, 5), (4096,))]
    torch.save(weights, tmp_path / "weights.pt")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(BITSANDBYTES), os.environ.get("PYTHONPATH")]))}
    run = subprocess.run([sys.executable, "-c", _BNB_SCRIPT, str(tmp_path / "weights.pt"), str(tmp_path / "bnb.pt")],
                         env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    namespace = execute_reference(LabNotebook.read(SOURCE))
    quantize, dequantize = namespace["nf4_quantize"], namespace["nf4_dequantize"]
    for w, (packed, bnb_absmax, bnb_back) in zip(weights, torch.load(tmp_path / "bnb.pt"), strict=True):
        shape = tuple(w.shape)
        codes, absmax = quantize(w, 64)
        byte = packed.flatten()
        theirs = torch.stack([byte >> 4, byte & 15], dim=1).flatten()[: w.numel()]
        assert torch.equal(theirs, codes), shape
        assert torch.equal(bnb_absmax.float(), absmax), shape
        # reshaped: for a 1-D shape its CPU kernel returns [1, n] (bitsandbytes issue #2047)
        torch.testing.assert_close(bnb_back.reshape(shape), dequantize(codes, absmax, shape))
