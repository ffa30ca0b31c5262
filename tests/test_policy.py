"""The policy for graded code (issue 39): no correct solution, variant or sample trips it; the attacks it stands in
front of do; each rule says what, where and why; the grader and the student's self-check apply the same one."""
from __future__ import annotations

from pathlib import Path

import nbformat
import pytest

from autograder.core.labs import discover
from autograder.release.sample_submissions import reference_sources
from autograder.wall.policy import defined_names, lab_policy, refusals
from autograder.wall.scan import scan_notebook
from genlab.policy import Policy, check_source, student_policy
from genlab.testing.notebook import LabNotebook

ROOT = Path(__file__).resolve().parents[1]
LABS = {lab.id: lab for lab in discover(ROOT)}


def _cells(lab, spec) -> list[tuple[str, str]]:
    """A sample's student code, as the grader checks it: every solution cell, then the cells it adds."""
    cells = {**reference_sources(lab), **spec.get("cells", {})}
    return list(cells.items()) + [(f"after {k}", v) for k, v in spec.get("after", {}).items()] + \
        [(f"added {i}", source) for i, (source, _meta) in enumerate(spec.get("add", []))]


def _violations(lab, spec) -> dict:
    policy = lab_policy(ROOT, lab.id)
    from genlab.policy import check_cells
    return check_cells(_cells(lab, spec), policy, LabNotebook.read(lab.source).setup_source)


@pytest.mark.parametrize("lab", sorted(LABS))
def test_no_solution_cell_of_any_lab_trips_the_policy(lab):
    found = _violations(LABS[lab], {})
    assert not found, {k: [str(v) for v in vs] for k, vs in found.items()}


SAMPLES = [(lab, name, spec) for lab in sorted(LABS) for name, spec in LABS[lab].samples.items()]


def _scanned_as_tampering(lab, spec) -> bool:
    return bool(scan_notebook(_cells(lab, spec)).tampering)


@pytest.mark.parametrize("lab,name", [(lab, name) for lab, name, spec in SAMPLES
                                      if spec.get("policy") != "off" and "refused" not in str(spec.get("expect"))])
def test_every_sample_graded_with_the_policy_passes_it(lab, name):
    """Correct samples and variants, catalogued bugs, faults and attacks graded with the policy: none trips it,
    except those the scan already reports as tampering (graded `tampered`, whatever the policy says)."""
    spec = LABS[lab].samples[name]
    found = _violations(LABS[lab], spec)
    if found and spec.get("expect", {}).get("tampered"):
        assert _scanned_as_tampering(LABS[lab], spec)
        return
    assert not found, {k: [str(v) for v in vs] for k, vs in found.items()}


@pytest.mark.parametrize("lab,name", [(lab, name) for lab, name, spec in SAMPLES if spec.get("policy") == "off"])
def test_samples_graded_without_the_policy_are_ones_it_refuses(lab, name):
    """A sample graded with --without-policy tests a wall behind the policy: the policy must refuse it."""
    assert _violations(LABS[lab], LABS[lab].samples[name])


@pytest.mark.parametrize("name", ["lab1_attack_watch_list_frozen", "lab1_attack_import_module_built_name"])
def test_the_attacks_the_scan_missed_are_refused(name):
    lab = LABS["lab1_vae"]
    spec = lab.samples[name]
    assert not _scanned_as_tampering(lab, spec)
    found = [str(v) for vs in _violations(lab, spec).values() for v in vs]
    assert any("`import importlib`" in f for f in found), found


GOOD = {
    "a module class": "class M(nn.Module):\n    __hash__ = None\n    def __init__(self):\n        super().__init__()\n"
                      "        self.name = type(self).__name__\n",
    "a throwaway name": "for _ in range(3):\n    pass\n_, b = (1, 2)\n",
    "private names of its own": "_cache = {}\ndef _helper(x):\n    return _cache.get(x)\n",
    "torch submodules": "import torch.distributions as dist\nfrom torch.nn import functional as G\n",
    "a setting": "torch.backends.cudnn.benchmark = True\n",
    "an item of its own tensor": "x = torch.zeros(3)\nx[0] = 1\ntorch.zeros(3)[0] = 1\n",
    "an attribute of its own object": "model = nn.Linear(2, 2)\nmodel.weight.requires_grad = False\n",
}
BAD = {
    "import importlib": ("import importlib\n", "import importlib"),
    "from importlib import": ("from importlib import import_module\n", "import importlib"),
    "a private module": ("import torch._dynamo\n", "import torch._dynamo"),
    "genlab.testing": ("import genlab.testing.server\n", "import genlab.testing.server"),
    "genlab.testing as an attribute": ("x = genlab.testing\n", "genlab.testing"),
    "sys._getframe": ("import sys\nf = sys._getframe(1)\n", "sys._getframe"),
    "an underscore attribute": ("v = torch.zeros(1)._version\n", "torch.zeros(1)._version"),
    "a dunder attribute": ("g = reparameterize.__globals__\n", "reparameterize.__globals__"),
    "frames without underscores": ("def gen():\n    yield 1\nf = gen().gi_frame.f_back\n", "gen().gi_frame"),
    "getattr": ("f = getattr(torch, 'all' + 'close')\n", "getattr"),
    "getattr as a value": ("g = getattr\n", "getattr"),
    "exec": ("exec('x = 1')\n", "exec"),
    "__import__": ("m = __import__('o' + 's')\n", "__import__"),
    "globals": ("globals()['x'] = 1\n", "globals"),
    "a patched module": ("torch.allclose = lambda *a, **k: True\n", "torch.allclose"),
    "a patched alias": ("E = torch.cuda.Event\nE.record = None\n", "E.record"),
    "a deleted attribute": ("del F.mse_loss\n", "F.mse_loss"),
    "a patch by loop": ("for m in (torch, F):\n    m.relu = None\n", "m.relu"),
    "threads": ("import threading\n", "import threading"),
    "sockets": ("import socket\n", "import socket"),
    "subprocess": ("import subprocess\n", "import subprocess"),
    "ctypes": ("import ctypes\n", "import ctypes"),
    "gc": ("import gc\n", "import gc"),
    "inspect": ("import inspect\n", "import inspect"),
    "a magic": ("%timeit reparameterize(mu, logvar)\n", "%timeit reparameterize(mu, logvar)"),
    "a shell line": ("!ls /\n", "!ls /"),
    "a dunder name": ("b = __builtins__\n", "__builtins__"),
    "a relative import": ("from . import x\n", "from . import ..."),
    "a star import": ("from torch import *\n", "from torch import *"),
}
SETUP = "import math\nimport torch\nimport torch.nn as nn\nimport torch.nn.functional as F\nimport genlab\n"


@pytest.mark.parametrize("what", sorted(GOOD))
def test_what_correct_code_does_is_inside_the_policy(what):
    assert check_source(GOOD[what], Policy(), SETUP) == []


@pytest.mark.parametrize("what", sorted(BAD))
def test_each_rule_names_the_construct_and_its_line(what):
    source, construct = BAD[what]
    found = check_source("x = 1\n" + source, Policy(), SETUP)
    assert found and any(v.construct.startswith(construct) for v in found), [str(v) for v in found]
    assert all(v.line >= 2 and v.why for v in found)
    assert str(found[0]).startswith(f"line {found[0].line}: `")


def test_a_lab_may_allow_more_and_the_course_may_turn_it_off():
    table = {"modules": ["torch"], "labs": {"lab4_lora": {"builtins": ["getattr"], "modules": ["numpy"]},
                                             "lab9": {"enforce": False}}}
    assert check_source("import numpy\ny = getattr(x, 'a')\n", Policy.from_table(table, "lab4_lora")) == []
    assert len(check_source("import numpy\ny = getattr(x, 'a')\n", Policy.from_table(table, "lab1_vae"))) == 2
    assert not Policy.from_table(table, "lab9").enforce
    with pytest.raises(ValueError, match="unknown"):
        Policy.from_table({"modulez": []})


def test_the_course_allowlist_is_the_one_the_grader_and_the_repository_self_check_read(tmp_path, monkeypatch):
    for lab in LABS:
        assert student_policy(lab, ROOT / "labs" / lab) == lab_policy(ROOT, lab)
    assert lab_policy(ROOT, "lab4_lora").builtins == ("getattr", "setattr")
    assert lab_policy(ROOT, "lab1_vae").builtins == ()


def test_refusals_name_what_a_refused_cell_would_have_defined():
    out = refusals([(3, "cell `a`", "import importlib\ndef a():\n    pass\n"), (4, "cell `b`", "def b():\n    pass\n")],
                   Policy())
    assert set(out.cells) == {3} and "cell `a` is outside the policy" in out.cells[3]
    assert "a" in out.names and "b" not in out.names
    assert defined_names("import torch.nn as nn\nx, _y = 1, 2\nclass K:\n    z = 1\n") == {"nn", "x", "_y", "K"}


def test_genlab_check_reports_violations_before_running(tmp_path, capsys):
    """The student's `genlab check NOTEBOOK` prints each violation, line and reason, as the grader's note says."""
    from genlab.selfcheck import policy_report

    release = nbformat.read(str(LABS["lab1_vae"].release), as_version=4)
    for cell in release.cells:
        if cell.get("metadata", {}).get("nbgrader", {}).get("grade_id") == "reparameterize":
            cell.source = LABS["lab1_vae"].samples["lab1_attack_watch_list_frozen"]["cells"]["reparameterize"]
    path = tmp_path / "lab1_vae.ipynb"
    nbformat.write(release, str(path))
    lines = policy_report(path)
    assert any("cell `reparameterize`" in l and "line 1: `import importlib`" in l for l in lines), lines
    assert policy_report(LABS["lab1_vae"].release) == []


def test_the_student_bundle_carries_the_course_policy_as_written():
    """build_wheel writes [policy] into genlab/assets/policy.toml; read back, it is the course's table."""
    import tomllib

    from autograder.release.bundle import _policy_toml

    table = tomllib.loads((ROOT / "autograder" / "course.toml").read_text())["policy"]
    assert tomllib.loads(_policy_toml(table))["policy"] == table
    for lab in LABS:
        assert Policy.from_table(tomllib.loads(_policy_toml(table))["policy"], lab) == lab_policy(ROOT, lab)


def test_genlab_check_in_the_kernel_reports_the_functions_cell(capsys):
    """genlab.check("reparameterize") in a kernel prints what the grader would refuse in the cell that defined it
    (the last such cell the kernel ran, from IPython's In), before the visible tests."""
    from genlab.selfcheck import cell_policy_report

    attack = LABS["lab1_vae"].samples["lab1_attack_watch_list_frozen"]["cells"]["reparameterize"]
    honest = reference_sources(LABS["lab1_vae"])["reparameterize"]
    namespace = {"In": ["", attack, "x = 1", honest], "reparameterize": None}
    assert cell_policy_report("reparameterize", "lab1_vae", namespace, start=ROOT) == []
    namespace["In"].append(attack)
    [line] = cell_policy_report("reparameterize", "lab1_vae", namespace, start=ROOT)
    assert line.startswith("the cell that defines `reparameterize` is outside the policy for graded code and would "
                           "not run when graded") and \
        "line 1: `import importlib`" in line


def test_a_class_may_keep_underscore_attributes_of_its_own_but_not_the_libraries():
    """`self._cache` in a method is the student's own attribute (Python's style for one): a correct layer may keep
    one. `self._C` stays refused (a method called as A.g(torch) reaches torch._C), and so do dunders and an
    underscore attribute of anything but the method's own instance."""
    from genlab.policy import check_source

    own = ("class Q(torch.nn.Module):\n    def __init__(self, w):\n        super().__init__()\n"
           "        self._shape = w.shape\n        self._cache = None\n"
           "    def forward(self, x):\n        return x.view(self._shape) if self._cache is None else self._cache\n")
    assert check_source(own) == []
    refused = ("class A:\n    def g(self):\n        return self._C, self.__dict__\n"
               "def f(x):\n    return x._version\n")
    assert [v.construct for v in check_source(refused)] == ["self._C", "self.__dict__", "x._version"]


def test_lab5_graded_cells_cannot_call_the_libraries_that_compute_its_answers():
    """Lab 5 has students write FID, KID, precision/recall/density/coverage and the bootstrap; Lab 2's demo cells
    measure with torchmetrics and prdc (and scikit-learn under joblib, which prdc calls), which no graded cell may
    import."""
    policy = lab_policy(ROOT, "lab5_fid")
    for module in ("torchmetrics", "torchmetrics.image.fid", "torchmetrics.image.kid", "prdc", "sklearn", "joblib"):
        assert not policy.allows_module(module), f"Lab 5's graded cells may import {module}"
