"""The leak measure (autograder.leaks) and the student package as it is in the repository (issue 21).

The measure must see through renaming and small edits, and must not see answers in unrelated code; then
``shared/genlab`` and ``labs/`` (what students receive) must hold no solution function, nor a near copy.
"""
from __future__ import annotations

import textwrap
from pathlib import Path

from autograder import leaks

ROOT = Path(__file__).resolve().parents[1]

SOLUTION = '''
def gaussian_kl(mu, logvar):
    """KL(q || p) per example."""
    return -0.5 * torch.sum(1 + logvar - mu.pow(2) - logvar.exp(), dim=-1)
'''


def _one(source: str) -> leaks.Function:
    (fn,) = leaks.functions_in_source(textwrap.dedent(source), "test")
    return fn


def _ratio(a: str, b: str) -> float:
    return leaks.ratio(_one(a), _one(b))


def test_renamed_code_is_the_same_code_and_a_one_edit_bug_is_over_the_threshold():
    renamed = "def f(m, lv):\n    return -0.5 * torch.sum(1 + lv - m.pow(2) - lv.exp(), dim=-1)\n"
    flipped = "def kl(m, lv):\n    return 0.5 * torch.sum(1 + lv - m.pow(2) - lv.exp(), dim=-1)\n"
    averaged = "def kl(m, lv):\n    return -0.5 * torch.mean(1 + lv - m.pow(2) - lv.exp(), dim=-1)\n"
    assert _ratio(SOLUTION, renamed) == 1.0, "names and docstrings are not what makes an answer"
    assert _ratio(SOLUTION, flipped) >= leaks.THRESHOLD and _ratio(SOLUTION, averaged) >= leaks.THRESHOLD


def test_an_edit_of_the_students_own_function_and_unrelated_code_are_under_it():
    as_edit = "def kl_sign_flipped(gaussian_kl, mu, logvar):\n    return -gaussian_kl(mu, logvar)\n"
    unrelated = ("def pixels(images, size=8):\n    grid = images.reshape(-1, size, size).clamp(0, 1)\n"
                 "    return torch.cat([row for row in grid], dim=1).numpy()\n")
    assert _ratio(SOLUTION, as_edit) < leaks.THRESHOLD and _ratio(SOLUTION, unrelated) < leaks.THRESHOLD


def test_every_solution_function_is_found():
    found = {f.name for f in leaks.solution_functions(ROOT)}
    assert {"reparameterize", "gaussian_kl", "causal_mask", "add_lora", "kid"} <= found


def test_what_students_receive_in_the_repository_holds_no_answer():
    """shared/genlab and labs/ as they are: the closest match of every solution function is under the
    threshold (the table is printed on failure)."""
    matches = leaks.closest_matches(leaks.solution_functions(ROOT),
                                    leaks.functions_in([ROOT / "shared" / "genlab", ROOT / "labs"]))
    assert not leaks.leaks(matches), "\n" + leaks.report(matches)
