"""The static scan: everyday notebook code passes, every way of patching the grader's world is caught.

A false alarm costs an honest student every point of a lab (status ``tampered``), so the honest cases
matter as much as the attacks. Verdicts never depend on the scan alone (they are taken outside the
student's kernel); the scan is what turns an attempt into evidence for the instructor.
"""
from __future__ import annotations

import pytest

from autograder.wall.scan import scan_cells, scan_source

HONEST = {
    "plots and display": "import matplotlib.pyplot as plt\nfrom IPython.display import display, clear_output\n"
                         "plt.rcParams['figure.figsize'] = (8, 4)\nplt.rcParams.update({'font.size': 9})\n"
                         "%matplotlib inline\nclear_output(wait=True)\n",
    "settings": "import os, torch\nos.environ['KMP_DUPLICATE_LIB_OK'] = 'TRUE'\ntorch.backends.cudnn.benchmark = True\n"
                "torch.manual_seed(0)\nimport numpy as np\nnp.random.seed(0)\nrng = np.random.default_rng(0)\n",
    "training loop": "from torch.utils.data import DataLoader, TensorDataset\n"
                     "loader = DataLoader(TensorDataset(torch.zeros(4, 2)), batch_size=2)\n"
                     "opt = torch.optim.Adam(model.parameters())\nopt.param_groups[0]['lr'] = 0.1\n"
                     "for p in model.parameters():\n    p.grad = None\nx = torch.randn(3)\nx.requires_grad = True\n"
                     "w = model.weight\nw.data = w.data * 2\n",
    "magics and shell": "%timeit x + 1\n!ls\nget_ipython().run_line_magic('matplotlib', 'inline')\n",
    "words that are also folder names": "print('hidden units:', 64)\nplt.title('hidden state')\n"
                                        "print('compare your solutions with a friend')\nrow.get('source')\nprint('solutions')\n",
    "environment probes": "import sys\nIN_COLAB = 'google.colab' in sys.modules\n"
                          "is_notebook = get_ipython().__class__.__name__ == 'ZMQInteractiveShell'\n",
    "module class": "import torch.nn as nn\nclass M(nn.Module):\n    def __init__(self):\n        super().__init__()\n"
                    "        self.fc = nn.Linear(2, 2)\n",
}

ATTACKS = {
    "showtraceback": "get_ipython().showtraceback = lambda *a, **k: None\n",
    "showtraceback via alias": "ip = get_ipython()\nip.showtraceback = print\n",
    "custom exception handler": "get_ipython().set_custom_exc((Exception,), lambda *a, **k: None)\n",
    "custom handler via renamed getter": "from IPython import get_ipython as g\nshell = g()\n"
                                         "shell.set_custom_exc((Exception,), print)\n",
    "input transformer": "get_ipython().input_transformers_post.append(lambda lines: [])\n",
    "shell class": "from IPython.core.interactiveshell import InteractiveShell\nInteractiveShell.showtraceback = print\n",
    "torch.allclose": "torch.allclose = lambda *a, **k: True\n",
    "numpy": "import numpy\nnumpy.allclose = lambda *a, **k: True\n",
    "numpy.testing alias": "import numpy.testing as npt\nnpt.assert_allclose = lambda *a, **k: None\n",
    "from-import alias": "from torch import testing as tt\ntt.assert_close = print\n",
    "CUDA event alias": "E = torch.cuda.Event\nE.elapsed_time = lambda self, end: 0.001\n",
    "module dict": "torch.__dict__['allclose'] = lambda *a, **k: True\n",
    "vars": "vars(torch)['allclose'] = lambda *a, **k: True\n",
    "setattr": "setattr(torch.testing, 'assert_close', print)\n",
    "loop over modules": "import numpy as np\nfor m in (torch, np):\n    m.allclose = lambda *a, **k: True\n",
    "genlab checks": "import genlab\ngenlab.check_close = print\n",
    "grader internals": "from genlab import testing\ntesting.server._baseline.clear()\n",
    "sys.modules entry": "import sys\nsys.modules['torch'].allclose = lambda *a, **k: True\n",
    "sys.modules alias": "import sys\n_t = sys.modules['torch']\n_t.allclose = lambda *a, **k: True\n",
    "sys.modules swap": "import sys\nsys.modules['genlab'] = None\n",
    "solutions path": "src = open('../../solutions/lab1_vae/lab1_vae.ipynb').read()\n",
    "solutions folder": "import os\nos.listdir('../../solutions')\n",
    "gradebook path": "import glob\nglob.glob('/**/gradebook.db', recursive=True)\n",
    "timer": "import time\ntime.perf_counter = lambda: 0.0\n",
    "frames": "import sys\nf = sys._getframe(1)\n",
    "kill": "import os\nos.kill(1, 9)\n",
}


@pytest.mark.parametrize("name", HONEST)
def test_everyday_code_is_not_flagged(name):
    assert scan_source(HONEST[name], "cell") == []


@pytest.mark.parametrize("name", ATTACKS)
def test_patching_is_flagged_with_the_line(name):
    evidence = scan_source(ATTACKS[name], "cell `x`")
    assert evidence and all(e.startswith("cell `x`, line ") for e in evidence)


def test_aliases_carry_across_cells():
    cells = [("cell `a`", "import torch.testing as tt\n"), ("cell `b`", "y = 1\ntt.assert_close = print\n")]
    assert scan_cells(cells) == ["cell `b`, line 2: replaces tt.assert_close"]


def test_a_cell_that_does_not_parse_is_skipped_not_fatal():
    assert scan_cells([("a", "def broken(:\n"), ("b", "torch.allclose = 1\n")]) == ["b, line 1: replaces torch.allclose"]


RUNTIME_PATCHES = {
    "numpy.allclose": "import numpy\nnumpy.allclose = lambda *a, **k: True",
    "torch.cuda.Event.elapsed_time": "import torch\ngetattr(torch.cuda, 'Event').elapsed_time = lambda s, e: 0.0",
    "time.perf_counter_ns": "import time\ntime.perf_counter_ns = lambda: 0",
    "genlab.checks.check_close": "import genlab.checks\ngenlab.checks.check_close = print",
    "torch.testing.assert_close": "import torch\nsetattr(torch.testing, 'assert_' + 'close', print)",
}


@pytest.mark.parametrize("name", RUNTIME_PATCHES)
def test_the_run_time_check_sees_patches_the_scan_cannot(name):
    """The kernel-side snapshot (taken before the first student cell) names what was replaced since."""
    import subprocess
    import sys

    code = ("import genlab.testing.server as s\ns.install()\nassert s.integrity() == []\n"
            + RUNTIME_PATCHES[name] + "\nprint(s.integrity())\n")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr[-2000:]
    assert name in run.stdout


@pytest.mark.parametrize("source", [
    "import os\nfor d, _, fs in os.walk('/'):\n    pass\n",
    "import os\nprint(os.listdir('/root'))\n",
    "import os\nprint(dict(os.environ))\n",
    "import os\nfor k, v in os.environ.items():\n    print(k, v)\n",
    "import glob\nglob.glob('/tmp/**/*.json', recursive=True)\n",
])
def test_looking_outside_the_folder_is_a_probe_not_tampering(source):
    from autograder.wall.scan import scan_notebook

    found = scan_notebook([("cell `x`", source)])
    assert found.probes and not found.tampering, found


@pytest.mark.parametrize("source", ["import os\nhome = os.environ.get('HOME')\n", "open('data.txt')\n",
                                    "import os\nos.listdir('.')\n"])
def test_everyday_file_and_environment_use_is_no_probe(source):
    from autograder.wall.scan import scan_notebook

    assert scan_notebook([("cell `x`", source)]).probes == []
