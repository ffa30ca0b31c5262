"""Sample submissions for Lab 1: the reference, correct variants, one per catalogued bug, attacks, faults.

Each sample names the solution cells it replaces (by grade_id) and, optionally, cells it adds; its
``expect`` is what the grader must conclude (checked by tests/test_grading.py). The notebooks under
``autograder/samples/<student>/lab1_vae/`` are generated from this file (``make samples``), and a test fails
when they drift. Format: :mod:`autograder.release.sample_submissions`.
"""
from autograder.release.sample_submissions import bug_cell

LAB = "lab1_vae"

REPARAM_HEAD = "def reparameterize(mu, logvar, eps=None):\n"
KL_HEAD = "def gaussian_kl(mu, logvar):\n"
ELBO_HEAD = "def negative_elbo(x, x_logits, mu, logvar, beta=1.0):\n"
IWAE_HEAD = "def iwae_bound(x, x_logits, z, mu, logvar):\n"
SWEEP_HEAD = "def beta_sweep(betas, epochs=15, seed=0):\n"

CORRECT = {
    "reparameterize": REPARAM_HEAD + "    if eps is None:\n        eps = torch.randn_like(mu)\n"
                                     "    return mu + torch.exp(0.5 * logvar) * eps\n",
    "gaussian_kl": KL_HEAD + "    return -0.5 * torch.sum(1 + logvar - mu.pow(2) - logvar.exp(), dim=-1)\n",
    "negative_elbo": ELBO_HEAD + "    recon = F.binary_cross_entropy_with_logits(x_logits, x, reduction='none')"
                                 ".flatten(1).sum(1)\n    return (recon + beta * gaussian_kl(mu, logvar)).mean()\n",
}


SAMPLES: dict[str, dict] = {
    "reference": {"cells": {}},
    # -- correct alternatives: full marks ---------------------------------------------------------------
    "variant_exp_half": {"cells": {"reparameterize": REPARAM_HEAD +
        "    eps = torch.randn_like(mu) if eps is None else eps\n    return mu + torch.exp(logvar / 2) * eps\n"}},
    "variant_sqrt_exp": {"cells": {"reparameterize": REPARAM_HEAD +
        "    if eps is None:\n        eps = torch.randn_like(mu)\n    return mu + torch.sqrt(torch.exp(logvar)) * eps\n"}},
    "variant_rsample": {"cells": {
        "reparameterize": REPARAM_HEAD +
        "    std = torch.exp(0.5 * logvar)\n    if eps is None:\n"
        "        return torch.distributions.Normal(mu, std).rsample()\n    return torch.addcmul(mu, std, eps)\n",
        "gaussian_kl": KL_HEAD +
        "    from torch.distributions import Normal, kl_divergence\n"
        "    q = Normal(mu, torch.exp(0.5 * logvar))\n"
        "    p = Normal(torch.zeros_like(mu), torch.ones_like(mu))\n"
        "    return kl_divergence(q, p).sum(-1)\n",
        "negative_elbo": ELBO_HEAD +
        "    recon = (torch.clamp(x_logits, min=0) - x * x_logits + torch.log1p(torch.exp(-x_logits.abs())))\n"
        "    recon = recon.reshape(x.shape[0], -1).sum(-1)\n"
        "    return torch.mean(recon + beta * gaussian_kl(mu, logvar))\n"}},
    # The bound with torch.distributions' log-densities; a sweep written with a lambda, evaluated at a fresh sample.
    "lab1_variant_iwae_distributions": {"cells": {
        "iwae_bound": IWAE_HEAD +
        "    from torch.distributions import Normal\n"
        "    k, B = z.shape[0], x.shape[0]\n"
        "    log_px_z = -F.binary_cross_entropy_with_logits(x_logits, x.expand_as(x_logits), reduction='none')\n"
        "    log_px_z = log_px_z.reshape(k, B, -1).sum(-1)\n"
        "    log_pz = Normal(torch.zeros_like(z), torch.ones_like(z)).log_prob(z).sum(-1)\n"
        "    log_qz = Normal(mu, torch.exp(0.5 * logvar)).log_prob(z).sum(-1)\n"
        "    return torch.logsumexp(log_px_z + log_pz - log_qz, dim=0) - math.log(k)\n",
        "beta_sweep": SWEEP_HEAD +
        "    out = {'beta': [], 'recon': [], 'kl': [], 'active_units': []}\n"
        "    for b in betas:\n"
        "        model, _ = train_vae(lambda x, l, m, v, b=b: negative_elbo(x, l, m, v, beta=b), epochs=epochs, seed=seed)\n"
        "        model.eval()\n"
        "        with torch.no_grad():\n"
        "            m, v = model.encode(images)\n"
        "            logits = model.decoder(reparameterize(m, v))\n"
        "            r = F.binary_cross_entropy_with_logits(logits, images, reduction='sum') / len(images)\n"
        "            kl = gaussian_kl(m, v).mean()\n"
        "        out['beta'].append(b)\n        out['recon'].append(float(r))\n        out['kl'].append(float(kl))\n"
        "        out['active_units'].append(int(active_units(model)))\n"
        "    return out\n"}},
    # log-mean-exp written by hand, shifting by the largest log-weight (what logsumexp does inside).
    "lab1_variant_iwae_max_shift": {"cells": {"iwae_bound": IWAE_HEAD +
        "    var = torch.exp(logvar)\n"
        "    log_px_z = -(torch.clamp(x_logits, min=0) - x * x_logits + torch.log1p(torch.exp(-x_logits.abs())))\n"
        "    log_px_z = log_px_z.flatten(start_dim=2).sum(dim=2)\n"
        "    log_ratio = -0.5 * (z ** 2) + 0.5 * ((z - mu) ** 2 / var + logvar)   # the 2 pi terms cancel\n"
        "    log_w = log_px_z + log_ratio.sum(dim=-1)\n"
        "    top = log_w.max(dim=0, keepdim=True).values\n"
        "    return (top + torch.log(torch.exp(log_w - top).mean(dim=0, keepdim=True))).squeeze(0)\n"}},
    # The new functions written another way: log C with PyTorch's window and series in lambda, and log1p/expm1; the mean
    # with the window on lambda; the sample with torch.distributions' uniform and the symmetry on x; variance as std^2;
    # free bits through torch.distributions and F.relu.
    "lab1_variant_cb_torch_window": {"cells": {
        "continuous_bernoulli_log_norm": "def continuous_bernoulli_log_norm(logits):\n"
        "    lam = torch.sigmoid(logits)\n"
        "    inside = (lam > 0.499) & (lam <= 0.501)\n"
        "    a = torch.where(inside, torch.ones_like(logits), logits).abs()\n"
        "    closed = torch.log(a) - torch.log(-torch.expm1(-a)) + torch.log1p(torch.exp(-a))\n"
        "    y = (lam - 0.5) ** 2\n"
        "    return torch.where(inside, math.log(2.0) + (4.0 / 3.0 + 104.0 / 45.0 * y) * y, closed)\n",
        "continuous_bernoulli_mean": "def continuous_bernoulli_mean(logits):\n"
        "    lam = torch.sigmoid(logits)\n"
        "    inside = (lam - 0.5).abs() < 0.025\n"
        "    l = torch.where(inside, torch.full_like(logits, 2.0), logits)\n"
        "    x = lam - 0.5\n"
        "    taylor = 0.5 + (1.0 / 3.0 + 16.0 / 45.0 * x ** 2) * x\n"
        "    return torch.where(inside, taylor, 1.0 / (1.0 - torch.exp(-l)) - 1.0 / l)\n",
        "continuous_bernoulli_rsample": "def continuous_bernoulli_rsample(logits, u=None):\n"
        "    if u is None:\n"
        "        u = torch.distributions.Uniform(torch.zeros_like(logits), torch.ones_like(logits)).sample()\n"
        "    small = logits.abs() < 1e-4\n"
        "    l = torch.where(small, torch.ones_like(logits), logits)\n"
        "    pos = l > 0\n"
        "    m = torch.where(pos, -l, l)\n"
        "    w = torch.where(pos, 1 - u, u)\n"
        "    x = torch.log1p(w * torch.expm1(m)) / m\n"
        "    return torch.where(small, u + 0.5 * u * (1 - u) * logits, torch.where(pos, 1 - x, x))\n",
        "count_active_units": "def count_active_units(posterior_means, threshold=0.01):\n"
        "    return int((posterior_means.std(dim=0, unbiased=False) ** 2 > threshold).sum().item())\n",
        "free_bits_kl": "def free_bits_kl(mu, logvar, free_bits):\n"
        "    from torch.distributions import Normal, kl_divergence\n"
        "    kl = kl_divergence(Normal(mu, torch.exp(0.5 * logvar)), Normal(torch.zeros_like(mu), torch.ones_like(mu)))\n"
        "    return (free_bits + F.relu(kl.mean(0) - free_bits)).sum()\n"}},
    # -- attacks: no unearned credit, reported as tampered ------------------------------------------------
    "attack_allclose": {"cells": {"reparameterize": REPARAM_HEAD +
        "    torch.allclose = lambda *a, **k: True\n    torch.testing.assert_close = lambda *a, **k: None\n"
        "    return mu\n"}},
    "attack_checks": {"cells": {"gaussian_kl": "import genlab\n"
        "genlab.check_close = lambda *a, **k: None\ncheck_close = lambda *a, **k: None\n"
        "genlab.checks.check_close = lambda *a, **k: None\n" + KL_HEAD + "    return mu.sum(-1) * 0\n"}},
    "attack_transformer": {"cells": {"reparameterize": REPARAM_HEAD + "    return mu * 0\n\n"
        "def _swallow(lines):\n    return ['try:\\n'] + ['    ' + l for l in lines] + "
        "['\\nexcept BaseException:\\n    pass\\n']\n\n"
        "get_ipython().input_transformers_post.append(_swallow)\n"}},
    "attack_gradebook": {"cells": {"gaussian_kl": KL_HEAD + "    return torch.zeros(mu.shape[0])\n\n"
        "import glob, sqlite3\nfor path in glob.glob('../../**/gradebook.db', recursive=True):\n"
        "    db = sqlite3.connect(path)\n    db.execute('update grade set auto_score = 99')\n    db.commit()\n"}},
    "attack_rigged_eq": {"cells": {"reparameterize":
        "class Always:\n    def __eq__(self, other):\n        return True\n    __hash__ = None\n"
        "    shape = property(lambda self: (32, 16))\n\n" + REPARAM_HEAD + "    return Always()\n"}},
    "attack_fake_timer": {"cells": {"reparameterize": "import time\n_real = time.perf_counter\n"
        "time.perf_counter = lambda: 0.0\n" + REPARAM_HEAD +
        "    if eps is None:\n        eps = torch.randn_like(mu)\n"
        "    return torch.stack([mu[i] + torch.exp(0.5 * logvar[i]) * eps[i] for i in range(mu.shape[0])])\n"}},
    # -- faults: graded cleanly, each with its own status ------------------------------------------------
    "fault_exit": {"cells": dict(CORRECT), "after": {"gaussian_kl_gradient": "import os\nos._exit(3)\n"}},
    # Loops for ever when beta != 1 (the hidden tests try other betas); the lab's training uses beta = 1.
    "fault_infinite_loop": {"cells": {**CORRECT, "negative_elbo": CORRECT["negative_elbo"].replace(
        "    recon =", "    while beta != 1.0:\n        pass\n    recon =")}},
    # Kills its own kernel when beta = 0.5 (a hidden test's call): that test is lost, the tests after it are not.
    # In a full run one skipped demo calls it too (beta_sweep_run, beta 0.5 second): the kernel is replaced and
    # the demo's cells before it run again. (At every beta != 1, three demos and two tests killed it, and that
    # one sample took 134 s of the full-run comparison's 805, under load.)
    "fault_crash_in_call": {"cells": {**CORRECT, "negative_elbo": CORRECT["negative_elbo"].replace(
        "    recon =", "    if beta == 0.5:\n        import os\n        os._exit(3)\n    recon =")}},
    "fault_deleted_tests": {"cells": {}, "delete": ["reparameterize_value", "gaussian_kl_value"],
                            "edit": {"reparameterize_shape": "pass  # edited away\n"}},
    "fault_reordered_duplicated": {"cells": {}, "swap": ["gaussian_kl", "reparameterize"],
                                   "duplicate": ["gaussian_kl_value"]},
    "fault_sys_exit": {"cells": {}, "after": {"reparameterize_shape": "import sys\nsys.exit(1)\n"}},
    "fault_segfault": {"cells": {}, "after": {"gaussian_kl_gradient": "import ctypes\nctypes.string_at(0)\n"}},
    "fault_sigint_ignored": {"cells": {}, "after": {"gaussian_kl_gradient":
        # waits rather than spins: ignoring the interrupt is the fault, and a spin only burned a core for 65 s
        "import signal, time\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\nwhile True:\n    time.sleep(0.1)\n"}},
    "fault_out_of_memory": {"cells": {}, "after": {"reparameterize_shape": "big = torch.ones(2 ** 36)\n"}},
    # 6 GiB, touched: over the 4 GiB memory limit, under the address-space cap, so the kernel is OOM-killed
    "fault_oom_killed": {"cells": {}, "after": {"gaussian_kl_gradient": "big = torch.ones(3 * 2 ** 29)\n"}},
    "fault_background_process": {"cells": {}, "after": {"reparameterize_shape":
        "import subprocess\nsubprocess.Popen(['sleep', '987654'])\n"}},
    "fault_output_flood": {"cells": {}, "after": {"reparameterize_shape": "print('x' * 50_000_000)\n"
                                                  "for i in range(200_000):\n    print(i)\n"}},
    "fault_invalid_json": {"raw": '{"cells": [ this is not json'},
    "fault_missing_notebook": {"missing": True},
    "fault_wrong_name": {"cells": {}, "path": "lab1/Lab1 (1).ipynb"},
    # -- attacks the sandbox stops (no string that a scan could catch) ----------------------------------
    "attack_read_solutions": {"cells": {"reparameterize":
        # Every folder the kernel can see, but /proc, /sys and /dev (no notebook lives there, and globbing /proc
        # recursively never ended: the cell used to time out before the search was over).
        "import json, os\n_secret = {}\n"
        "_found = []\n"
        "for _dir, _subdirs, _files in os.walk('/'):\n"
        "    _subdirs[:] = [d for d in _subdirs if os.path.join(_dir, d) not in ('/proc', '/sys', '/dev')]\n"
        "    _found += [os.path.join(_dir, f) for f in _files if f.endswith('.ipynb')]\n"
        "for _p in _found:\n"
        "    if 'sol' + 'utions' in _p:\n"
        "        for _c in json.load(open(_p))['cells']:\n"
        "            if 'def reparameterize' in ''.join(_c['source']):\n"
        "                exec(''.join(_c['source']), _secret)\n"
        "if 'reparameterize' in _secret:\n    reparameterize = _secret['reparameterize']\nelse:\n"
        "    " + REPARAM_HEAD.replace("\n", "\n    ") + "    return mu\n"}},
    "attack_kill_grader": {"cells": {}, "after": {"reparameterize_shape":
        "import os, signal\nfor _pid in range(2, 400):\n    try:\n        os.kill(_pid, signal.SIGKILL)\n"
        "    except OSError:\n        pass\n"}},
    "attack_print_pass": {"cells": {"gaussian_kl": KL_HEAD + "    print('[genlab grader] gaussian_kl_value: PASSED "
                                    "(2/2 points)')\n    return torch.zeros(mu.shape[0])\n"}},
    # -- more ways in-kernel graders are fooled (each with wrong code that the trick would have to hide) ----
    "attack_showtraceback": {"cells": {"reparameterize": REPARAM_HEAD + "    return mu\n"},
                             "after": {"reparameterize": "get_ipython().showtraceback = lambda *a, **k: None\n"}},
    "attack_custom_exc": {"cells": {"gaussian_kl": KL_HEAD + "    return mu.sum(-1) * 0\n"},
                          "after": {"reparameterize": "from IPython import get_ipython as _shell\n"
                                    "_ip = _shell()\n_ip.set_custom_exc((BaseException,), lambda *a, **k: None)\n"}},
    "attack_numpy": {"cells": {"reparameterize": REPARAM_HEAD + "    return mu\n"},
                     "after": {"reparameterize": "import numpy.testing as _npt\nimport numpy\n"
                               "numpy.allclose = lambda *a, **k: True\n_npt.assert_allclose = lambda *a, **k: None\n"}},
    # A tensor that answers "equal" to every comparison made on it, and says it has the right statistics.
    "attack_tensor_subclass": {"cells": {"reparameterize":
        "class Agreeable(torch.Tensor):\n"
        "    @classmethod\n"
        "    def __torch_function__(cls, func, types, args=(), kwargs=None):\n"
        "        name = getattr(func, '__name__', '')\n"
        "        if name in ('allclose', 'equal', '__eq__', 'eq', 'isclose'):\n"
        "            return True\n"
        "        return super().__torch_function__(func, types, args, kwargs or {})\n\n"
        + REPARAM_HEAD + "    return torch.zeros_like(mu).as_subclass(Agreeable)\n"}},
    # Fakes the CUDA event API through an alias, so a grader timing with events would see a fast loop.
    "attack_cuda_event": {"cells": {"reparameterize": "_Event = torch.cuda.Event\n"
                                    "_Event.elapsed_time = lambda self, end: 1e-6\n"
                                    "_Event.record = lambda self, stream=None: None\n"
                                    + bug_cell(LAB, "python_loop_over_batch")}},
    # Correct code, then tries to change every notebook and gradebook it can reach (without a telltale string).
    "attack_write_others": {"cells": {}, "after": {"gaussian_kl_gradient":
        "import os\n_changed = 0\n"
        "for _top in ('/', os.path.expanduser('~'), os.path.dirname(os.getcwd())):\n"
        "    for _dir, _subdirs, _files in os.walk(_top):\n"
        "        _subdirs[:] = [d for d in _subdirs if d not in ('proc', 'sys', 'dev', 'usr', 'lib', '.venv', "
        "'site-packages', 'node_modules')]\n"
        "        for _f in _files:\n"
        "            if _f.endswith(('.ipynb', '.db', '.csv')):\n"
        "                try:\n"
        "                    with open(os.path.join(_dir, _f), 'a') as _h:\n"
        "                        _h.write('\\n')\n"
        "                    _changed += 1\n"
        "                except OSError:\n"
        "                    pass\n"
        "print('files changed:', _changed)\n"}},
    # nbgrader metadata edited in the student's copy: more points on a test, a solution cell made a graded
    # cell, and two added "grade" cells (one with an id the lab does not have). Only the release counts.
    "attack_forged_metadata": {"cells": {"reparameterize": REPARAM_HEAD + "    return mu\n"},
                               "metadata": {"reparameterize_shape": {"points": 100},
                                            "reparameterize": {"grade": True, "points": 50}},
                               "add": [("assert True\n", {"grade": True, "solution": False, "locked": True,
                                                         "grade_id": "bonus", "points": 1000}),
                                       ("assert True\n", {"grade": True, "solution": False, "points": 500})]},
    # The notebook handed in is a link to the solution notebook (a tar or zip upload can carry links).
    "attack_symlink_solution": {"link": "../../../../solutions/lab1_vae/lab1_vae.ipynb"},
}

BUG_SAMPLES = {
    "torch_normal_sampler": "reparameterize", "exp_logvar_as_std": "reparameterize",
    "eps_default_dtype": "reparameterize", "eps_shared_across_batch": "reparameterize",
    "detached_sample": "reparameterize", "python_loop_over_batch": "reparameterize",
    "kl_sign_flipped": "gaussian_kl", "kl_mean_over_latent": "gaussian_kl", "kl_summed_over_batch": "gaussian_kl",
    "recon_mean_per_pixel": "negative_elbo", "bce_on_sigmoid": "negative_elbo", "elbo_not_negated": "negative_elbo",
    "iwae_mean_of_log_weights": "iwae_bound", "iwae_naive_log_mean_exp": "iwae_bound", "iwae_missing_log_k": "iwae_bound",
    "log_norm_from_probs": "continuous_bernoulli_log_norm", "taylor_where_unguarded": "continuous_bernoulli_log_norm",
    "mean_is_sigmoid": "continuous_bernoulli_mean", "log_norm_left_out": "continuous_bernoulli_negative_elbo",
    "free_bits_on_total_kl": "free_bits_kl",
}
for _bug_id, _function in BUG_SAMPLES.items():
    SAMPLES[f"bug_{_bug_id}"] = {"cells": {_function: bug_cell(LAB, _bug_id)}}

# Functions that call another student function lose marks with it (negative_elbo uses gaussian_kl).
# beta_sweep trains with the student's reparameterize and negative_elbo and measures with their gaussian_kl.
# The continuous Bernoulli's loss uses their log C and KL; active_units(model), and so beta_sweep, their count_active_units.
DEPENDS = {"negative_elbo": ["gaussian_kl"],
           "beta_sweep": ["reparameterize", "gaussian_kl", "negative_elbo", "count_active_units"],
           "continuous_bernoulli_negative_elbo": ["continuous_bernoulli_log_norm", "gaussian_kl"]}

# What the grader must conclude (each sample's "expect"). "full" = every test passed; "bug" = the function's tests lose marks and
# this bug is named; "tampered" = no unearned credit and the interference is reported; statuses by test.
_EXPECT: dict[str, dict] = {
    "reference": {"full": True}, "variant_exp_half": {"full": True}, "variant_sqrt_exp": {"full": True},
    "variant_rsample": {"full": True}, "lab1_variant_iwae_distributions": {"full": True},
    "lab1_variant_iwae_max_shift": {"full": True}, "lab1_variant_cb_torch_window": {"full": True},
    **{f"bug_{b}": {"full": False, "bug": b, "function": f} for b, f in BUG_SAMPLES.items()},
    "attack_allclose": {"tampered": True}, "attack_checks": {"tampered": True},
    "attack_transformer": {"tampered": True}, "attack_gradebook": {"tampered": True},
    "attack_rigged_eq": {"full": False, "failed_tests": ["reparameterize_shape", "reparameterize_value",
                                                         "reparameterize_gradient", "reparameterize_noise"]},
    "attack_fake_timer": {"tampered": True},
    "fault_exit": {"status": {"negative_elbo_gradient": "killed", "negative_elbo_value": "killed",
                              "gaussian_kl_gradient": "passed", "reparameterize_shape": "passed"}},
    "fault_infinite_loop": {"status": {"negative_elbo_value": "timeout", "reparameterize_value": "passed",
                                       "negative_elbo_gradient": "passed"}},
    "fault_crash_in_call": {"status": {"negative_elbo_value": "killed", "iwae_bound_value": "passed",
                                       "iwae_bound_gradient": "passed", "reparameterize_value": "passed"},
                            "notes": ["stopped the kernel"]},
    "fault_deleted_tests": {"full": True, "notes": ["deleted", "edited"]},
    "fault_reordered_duplicated": {"full": True, "notes": ["moved", "more than once"]},
    "fault_sys_exit": {"full": True},
    "fault_segfault": {"status": {"gaussian_kl_gradient": "passed", "negative_elbo_value": "killed"},
                       "message": {"negative_elbo_value": "SIGSEGV"}},
    "fault_sigint_ignored": {"status": {"gaussian_kl_gradient": "passed", "negative_elbo_value": "timeout"}},
    "fault_out_of_memory": {"full": True, "notes": ["out of memory"]},
    "fault_oom_killed": {"status": {"gaussian_kl_gradient": "passed", "negative_elbo_value": "killed"},
                         "message": {"negative_elbo_value": "memory limit 4 GiB exceeded"}, "needs_cgroups": True},
    "fault_background_process": {"full": True, "no_process": "987654"},
    "fault_output_flood": {"full": True, "max_notebook_bytes": 2_000_000},
    "fault_invalid_json": {"status_all": "error"},
    "fault_missing_notebook": {"status_all": "missing"},
    "fault_wrong_name": {"full": True, "notes": ["another name"]},
    # "failed", not "error" or "timeout": the search ran to its end and found nothing to copy
    "attack_read_solutions": {"full": False, "failed_tests": ["reparameterize_value", "reparameterize_gradient",
                                                              "reparameterize_noise"],
                              "status": {"reparameterize_value": "failed"}},
    "attack_kill_grader": {"tampered": True},
    "attack_print_pass": {"full": False, "failed_tests": ["gaussian_kl_value", "gaussian_kl_gradient"]},
    "attack_showtraceback": {"tampered": True}, "attack_custom_exc": {"tampered": True},
    "attack_numpy": {"tampered": True}, "attack_tensor_subclass": {"tampered": True},
    "attack_cuda_event": {"tampered": True}, "attack_symlink_solution": {"tampered": True},
    "attack_write_others": {"full": True, "writes_nothing": True},
    "attack_forged_metadata": {"full": False, "points_from_release": True,
                               "failed_tests": ["reparameterize_value", "reparameterize_gradient"],
                               "notes": ["not part of this lab", "grading metadata"]},
}

for _name, _expect in _EXPECT.items():
    SAMPLES[_name]["expect"] = _expect

# -- least privilege (issue 10): what a kernel can read, and what its outputs can do in a feedback page ------
# Correct code, so full marks, plus a cell that looks for canary files wherever a grader keeps things (its
# home, a course folder beside this one, earlier runs' outputs and caches under /tmp) and prints them with the
# whole environment. tests/test_least_privilege.py plants the canaries and checks none reaches the output.
CANARY_HUNT = r'''
import os, pathlib
def _hunt(root, depth=5):
    found = []
    for folder, dirs, files in os.walk(root):
        if folder.count(os.sep) - root.rstrip(os.sep).count(os.sep) >= depth:
            dirs[:] = []
        for name in files:
            if 'canary' in name.lower():
                try:
                    found.append((os.path.join(folder, name), open(os.path.join(folder, name)).read(200)))
                except OSError as exc:
                    found.append((os.path.join(folder, name), repr(exc)))
    return found
_course = pathlib.Path(__import__('genlab').__file__).resolve().parents[2]
for _root in ['/root', '/home', '/srv', '/tmp', str(_course.parent)]:
    print(_root, _hunt(_root))
print(sorted(os.environ.items()))
'''
SAMPLES["lab1_attack_canaries"] = {"cells": {"reparameterize": CORRECT["reparameterize"] + CANARY_HUNT},
                                   "expect": {"full": True}}

# Every kind of active output, each trying to mark the page (data-pw + ned-<kind> on <body>: the marker is
# built at run time, so it is in the page only if the payload ran), next to a PNG and an SVG plot that must
# still show. tests/test_feedback_inert.py opens the feedback page in headless Chromium.
ACTIVE_OUTPUTS = r'''
import base64, io
import matplotlib.pyplot as plt
from IPython.display import HTML, SVG, Image, Javascript, Markdown, display
def _mark(kind):
    return "document.body.setAttribute('data-pw' + 'ned-%s', '1')" % kind
display(HTML('<script>%s</script>' % _mark('script')))
display(HTML('<img src="x" onerror="%s">' % _mark('onerror')))
display(HTML('<details open ontoggle="%s"><summary>details</summary>x</details>' % _mark('ontoggle')))
display(HTML('<iframe srcdoc="&lt;script&gt;parent.%s&lt;/script&gt;"></iframe>' % _mark('iframe').replace("'", '&quot;')))
display(HTML('<a href="javascript:%s">a link</a>' % _mark('href')))
display(Javascript(_mark('javascript')))
display(SVG('<svg xmlns="http://www.w3.org/2000/svg" width="20" height="20" onload="%s"><circle cx="10" cy="10" r="5"/></svg>' % _mark('svg-onload')))
display(Markdown('<img src="y" onerror="%s"> markdown output' % _mark('markdown')))
_fig, _ax = plt.subplots(figsize=(2, 2))
_ax.plot([0, 1, 2], [0, 1, 4], 'o-')
_png, _svg = io.BytesIO(), io.StringIO()
_fig.savefig(_png, format='png')
_fig.savefig(_svg, format='svg')
plt.close(_fig)
display(Image(_png.getvalue(), format='png'))
display(SVG(_svg.getvalue()))
'''
SAMPLES["lab1_attack_active_outputs"] = {"cells": {"reparameterize": CORRECT["reparameterize"] + ACTIVE_OUTPUTS},
                                         "expect": {"full": True}}

# -- the request channel (issue 22): answers forged from inside the kernel ----------------------------------
# The kernel's server answers each request with one frame (genlab.testing.wire: a fixed header with the
# request's id and the two lengths, the JSON, the tensors) written with socket.sendall on the channel it was
# handed at launch. Each sample hands in a wrong reparameterize, then rewrites or cuts the server's frames with
# code no scan flags (the names are built at run time), so the grader's reader (autograder.wall.channel) is what
# must refuse it: tampered, with the evidence in words.
_FORGE = '''
_s, _st = __import__('soc' + 'ket'), __import__('str' + 'uct')
_real = getattr(_s.socket, 'send' + 'all')
_F = _st.Struct('!4s16sIQ')
_done = []
def _put(self, data, *args):
    data = bytes(data)
    if data[:4] == b'GLR1' and len(data) >= _F.size:
        _magic, _rid, _tl, _bl = _F.unpack(data[:_F.size])
        _text = data[_F.size:_F.size + _tl].decode()
        if {when}:
            _done.append(_rid)
{forge}
    return _real(self, data, *args)
setattr(_s.socket, 'send' + 'all', _put)
'''


def _forging(forge: str, when: str = "True") -> str:
    return _FORGE.format(when=when, forge="\n".join("            " + line for line in forge.strip().splitlines()))


def _framed(text: str, announced: str = "len(_body)", sent: str = "_body") -> str:
    """A forged answer to the same request: JSON ``text`` (a Python expression), no tensors."""
    return f"_body = ({text}).encode()\ndata = _F.pack(_magic, _rid, {announced}, 0) + {sent}"


_WRONG_REPARAM = {"reparameterize": REPARAM_HEAD + "    return mu\n"}
_ONE_CALL = "not _done and '__tensor__' in _text"   # the first answer that carries a tensor: a call's
SAMPLES.update({
    # An answer to a request the grader never made (a frame prepared in advance, or replayed).
    "lab1_attack_answer_other_request": {"cells": _WRONG_REPARAM, "after": {"reparameterize": _forging(
        "data = _F.pack(_magic, b'0' * 16, _tl, _bl) + data[_F.size:]", when=_ONE_CALL)},
        "expect": {"tampered": True, "evidence": "a request the grader did not make"}},
    # The channel cut (shut down both ways) from a cell, found through the server's reading thread: every later
    # request is lost, and none passes.
    "lab1_attack_channel_cut": {"cells": _WRONG_REPARAM, "after": {"reparameterize":
        "_t = __import__('thre' + 'ading')\nfor _th in _t.enumerate():\n"
        "    if _th.name.endswith('-reader'):\n        getattr(_th, '_args')[0].shutdown(2)\n"},
        "expect": {"full": False, "failed_tests": ["reparameterize_shape", "reparameterize_value",
                                                    "reparameterize_gradient"],
                   "status": {"reparameterize_value": "killed"}}},
    # An answer that announces more than it sends, then stalls: reading it would wait for ever.
    "lab1_attack_answer_stall": {"cells": _WRONG_REPARAM, "after": {"reparameterize": _forging(
        _framed("'{\"ok\": true, \"result\": 1}'", announced="4096", sent="_body"), when=_ONE_CALL)},
        "expect": {"tampered": True, "evidence": "did not arrive within the time limit"}},
    # The integrity check's answer, in the right format but the wrong shape: 7 instead of a list of names.
    "lab1_attack_integrity_shape": {"cells": _WRONG_REPARAM, "after": {"reparameterize": _forging(
        _framed("'{\"ok\": true, \"result\": 7}'"), when="_text == '{\"ok\": true, \"result\": [], \"modes\": []}'")},
        "expect": {"tampered": True, "evidence": "malformed"}},
    # A well-formed error answer announcing 48 MiB (the kernel's own server caps its messages; a forged one
    # does not): refused from its header, unread.
    "lab1_attack_huge_error": {"cells": _WRONG_REPARAM, "after": {"reparameterize": _forging(
        _framed("'{\"ok\": false, \"error\": {\"type\": \"ValueError\", \"message\": \"' + 'x' * (48 << 20) + "
                "'\", \"traceback\": \"\"}}'"), when=_ONE_CALL)},
        "expect": {"tampered": True, "evidence": "at most", "max_feedback_bytes": 3_000_000}},
    # Requests once ran as IPython cells: a pre_run_cell hook swapped a correct reparameterize in for each of
    # them and the wrong one back after. Requests now reach the function through the server's own thread, so
    # the hook sees only the notebook's own cells, and the tests see the wrong function.
    "lab1_attack_request_hooks": {"cells": _WRONG_REPARAM, "after": {"reparameterize":
        "_wrong = reparameterize\n" + REPARAM_HEAD.replace("def reparameterize", "def _right") +
        "    if eps is None:\n        eps = torch.randn_like(mu)\n    return mu + torch.exp(0.5 * logvar) * eps\n"
        "_ns = globals()\n"
        "def _swap(info):\n"
        "    _ns['reparameterize'] = _right if 'genlab' in (info.raw_cell or '') else _wrong\n"
        "getattr(getattr(get_ipython(), 'eve' + 'nts'), 'reg' + 'ister')('pre_' + 'run_cell', _swap)\n"},
        "expect": {"full": False, "failed_tests": ["reparameterize_value", "reparameterize_gradient"]}},
})

# A reparameterize wrong in its memory alone (an unused 64x buffer: over twice the reference's peak, and cheap in
# time), with peak_memory replaced in the kernel and the kernel's snapshot then taken again (install() once
# more), names built at run time so that no scan reads them. The kernel's own comparison then sees nothing; the
# grader's, against the identities the kernel reported at boot, kept in the grader's process, does.
SAMPLES["lab1_attack_snapshot_again"] = {
    "cells": {"reparameterize": REPARAM_HEAD + "    if eps is None:\n        eps = torch.randn_like(mu)\n"
              "    _buffer = torch.empty(64, *mu.shape)\n    return mu + torch.exp(0.5 * logvar) * eps\n"},
    "after": {"reparameterize": "_c = __import__('genlab.che' + 'cks', fromlist=['x'])\n"
              "setattr(_c, 'peak_' + 'memory', lambda fn, *a, **k: 0)\n"
              "getattr(__import__('genlab.testing.ser' + 'ver', fromlist=['x']), 'inst' + 'all')()\n"},
    "expect": {"tampered": True, "evidence": "replaced at run time: genlab.checks.peak_memory"}}

# Whether the kernel's server is answering a request now: its thread is inside _run (a notebook can see every
# thread's frames). Two attacks below act on it.
_SERVING = ("def _serving():\n"
            "    frames = sys._current_frames()\n"
            "    for thread in threading.enumerate():\n"
            "        f = frames.get(thread.ident) if thread.name == 'genlab-server' else None\n"
            "        while f is not None:\n"
            "            if f.f_code.co_name == '_run':\n"
            "                return True\n"
            "            f = f.f_back\n"
            "    return False\n\n")
# The same reparameterize, with peak_memory replaced only while the kernel's server answers a request: a thread
# of the notebook watches the server's thread (sys._current_frames) and puts the fake in place while it is inside
# _run, the real one back when it is not. Every snapshot comparison before a test saw the real one. The kernel now
# reports the watched objects' identities right after each measured call, before its thread lets go of the GIL,
# and the grader compares them with the boot's.
_MEMORY_WRONG = {"reparameterize": REPARAM_HEAD + "    if eps is None:\n        eps = torch.randn_like(mu)\n"
                 "    _buffer = torch.empty(64, *mu.shape)\n    return mu + torch.exp(0.5 * logvar) * eps\n"}
SAMPLES["lab1_attack_racing_patch"] = {
    "cells": _MEMORY_WRONG,
    "after": {"reparameterize": (
        "import sys, threading, time\n"
        "_c = __import__('genlab.che' + 'cks', fromlist=['x'])\n"
        "_name = 'peak_' + 'memory'\n"
        "_real, _fake = getattr(_c, _name), (lambda fn, *a, **k: 0)\n\n"
        + _SERVING +
        "def _race():\n"
        "    while True:\n"
        "        setattr(_c, _name, _fake if _serving() else _real)\n"
        "        time.sleep(0.0001)\n"
        "threading.Thread(target=_race, daemon=True).start()\n")},
    "expect": {"tampered": True, "evidence": "replaced while a measurement ran: genlab.checks.peak_memory"}}
# The same reparameterize, with the code of genlab's memory counter swapped in place (``__code__``, named at run
# time: no scan reads it): the function keeps its id, so a snapshot of ids saw nothing, and the counter counted
# nothing. The snapshot now keeps the ids of each watched function's code and defaults too.
SAMPLES["lab1_attack_code_swap"] = {
    "cells": _MEMORY_WRONG,
    "after": {"reparameterize": (
        "_m = __import__('genlab.checks.me' + 'mory', fromlist=['x'])\n"
        "_count = getattr(_m, '_Storage' + 'Tracker')._count\n"
        "_code = '__co' + 'de__'\n"
        "setattr(_count, _code, getattr(lambda self, storage: None, _code))\n")},
    "expect": {"tampered": True, "evidence": "genlab.checks.memory._StorageTracker._count"}}

# No forging: an error message with a carriage return, terminal escapes, a bell, an 8-bit CSI, a right-to-left
# override and lines that imitate the grader's verdicts. The tests of reparameterize earn nothing, and their
# messages show the text cleaned and quoted, never as a grader line.
_FAKE_PASS = ("'\\r\\x1b[2K\\x1b[32m[genlab grader] reparameterize_value: PASSED (2/2 points)\\x1b[0m\\x07\\n"
              "[genlab grader] reparameterize_shape: PASSED (1/1 points)\\x9b2J\\u202e\\x00'")
SAMPLES["lab1_attack_error_text"] = {
    "cells": {"reparameterize": REPARAM_HEAD + f"    raise ValueError({_FAKE_PASS})\n"},
    "expect": {"full": False, "clean_messages": True,
               "failed_tests": ["reparameterize_shape", "reparameterize_value", "reparameterize_gradient"],
               "status": {"reparameterize_shape": "error", "reparameterize_value": "error"},
               "message": {"reparameterize_value": "your code raised ValueError, saying:\n  | "}}}

# -- measurements made in the student's kernel (issue 22): each a reparameterize wrong in exactly what the test
# measures, plus a trick that hid it while the kernel's server measured it with the same objects or frames.
# A Python loop over the batch (about 100x the reference's time), with a cache keyed on the ids of its inputs
# (kept alive, so an id is never reused): the timed loop once called it n times with the same tensors, so calls
# 2..n cost a dict lookup. Each timed call now gets its own copy, so every call runs the loop.
_LOOP = ("    if eps is None:\n        eps = torch.randn_like(mu)\n"
         "    z = torch.stack([mu[i] + torch.exp(0.5 * logvar[i]) * eps[i] for i in range(mu.shape[0])])\n")
SAMPLES["lab1_attack_timing_cache"] = {"cells": {"reparameterize": "_seen = {}\n\n" + REPARAM_HEAD +
    "    key = (id(mu), id(logvar), id(eps))\n    if key in _seen:\n        return _seen[key][0]\n" + _LOOP +
    "    _seen[key] = (z, mu, logvar, eps)\n    return z\n"},
    "expect": {"full": False, "failed_tests": ["reparameterize_performance"],
               "message": {"reparameterize_performance": "too slow"},
               "status": {"reparameterize_value": "passed", "reparameterize_gradient": "passed"}}}
# The same loop, cached on the inputs' values (a few sums, far cheaper than the loop): copies with equal values,
# or the same copies in every loop, would hit it, so each copy is scaled by its own factor within 1 - 2**-7.
# (It leaves inputs that need a gradient alone: a cached sample would not be connected to their graph.)
SAMPLES["lab1_attack_timing_value_cache"] = {"cells": {"reparameterize": "_seen = {}\n\n" + REPARAM_HEAD +
    "    if eps is None or mu.requires_grad:\n        key = None\n    else:\n"
    "        key = (tuple(mu.shape), float(mu.sum()), float(logvar.sum()), float(eps.sum()))\n"
    "    if key is not None and key in _seen:\n        return _seen[key]\n" + _LOOP +
    "    if key is not None:\n        _seen[key] = z\n    return z\n"},
    "expect": {"full": False, "failed_tests": ["reparameterize_performance"],
               "message": {"reparameterize_performance": "too slow"},
               "status": {"reparameterize_value": "passed", "reparameterize_gradient": "passed"}}}
# Cuts the graph (the encoder of the lab's VAE learns nothing), except when a caller's frame is genlab's grad_of:
# the kernel's server once called the function from inside grad_of for a gradient request. Plain and gradient
# calls now come through the same frames, so the gradient test sees the cut.
SAMPLES["lab1_attack_grad_frame"] = {"cells": {"reparameterize": "import inspect\n\n" + REPARAM_HEAD +
    "    if eps is None:\n        eps = torch.randn_like(mu)\n    z = mu + torch.exp(0.5 * logvar) * eps\n"
    "    f = inspect.currentframe()\n"
    "    while f is not None:\n"
    "        if f.f_code.co_name == 'grad_of' or f.f_code.co_filename.endswith('gradients.py'):\n"
    "            return z\n"
    "        f = f.f_back\n"
    "    return z.detach()\n"},
    "expect": {"full": False, "failed_tests": ["reparameterize_gradient"],
               "status": {"reparameterize_value": "passed", "reparameterize_shape": "passed"}}}
# Correct, and fast only when its inputs need no gradient: a Python loop over the batch (about 100x the time) when
# they do, as in training. The grader once timed and measured every call on the test's own tensors (no gradient)
# and took gradients on inputs that required one: the function could tell which it was in (x.requires_grad,
# x.grad_fn). Every call of a function whose gradient a test takes now gets activations at those positions
# (genlab.testing.notebook.LabNotebook.differentiated), so the timed and measured calls are training calls.
_UNTRAINED = "    if not (mu.requires_grad or logvar.requires_grad):\n        return mu + torch.exp(0.5 * logvar) * eps\n"
SAMPLES["lab1_attack_grad_only_slow"] = {"cells": {"reparameterize": REPARAM_HEAD +
    "    if eps is None:\n        eps = torch.randn_like(mu)\n" + _UNTRAINED + _LOOP + "    return z\n"},
    "expect": {"full": False, "failed_tests": ["reparameterize_performance"],
               "message": {"reparameterize_performance": "too slow"},
               "status": {"reparameterize_value": "passed", "reparameterize_gradient": "passed"}}}
# The same, with an unused 64x buffer (cheap in time) when the inputs need a gradient.
SAMPLES["lab1_attack_grad_only_memory"] = {"cells": {"reparameterize": REPARAM_HEAD +
    "    if eps is None:\n        eps = torch.randn_like(mu)\n" + _UNTRAINED +
    "    _buffer = torch.empty(64, *mu.shape)\n    return mu + torch.exp(0.5 * logvar) * eps\n"},
    "expect": {"full": False, "failed_tests": ["reparameterize_performance"],
               "message": {"reparameterize_performance": "allocates"},
               "status": {"reparameterize_value": "passed", "reparameterize_gradient": "passed"}}}
# The closed form, right in value, with mu squared in place: the caller's mu (in training, the encoder's output,
# which reparameterize then uses) is changed. The lab's table says the differentiated arguments are left as they
# were; the kernel gives every call activations and reports one whose version counter moved.
SAMPLES["lab1_kl_in_place"] = {"cells": {"gaussian_kl": KL_HEAD +
    "    return -0.5 * torch.sum(1 + logvar - mu.pow_(2) - logvar.exp(), dim=-1)\n"},
    "expect": {"full": False, "failed_tests": ["gaussian_kl_value", "gaussian_kl_gradient"],
               "message": {"gaussian_kl_value": "gaussian_kl changed its argument 0 in place"}}}
# A reparameterize about 8x the reference's time (its std computed 18 more times, in place, untracked: the values,
# the gradient and the memory are right),
# and three processes the notebook forks that burn the CPU whenever the kernel's server is not serving a request:
# that is, while the grader times the reference kernel. By the wall clock alone, on 2 cores, the reference then
# took about twice as long and the 8x function passed the 5x bound. The student's kernel is now frozen (cgroup
# freezer) while the reference is timed, and its CPU time counts the burners' work whenever they do run.
SAMPLES["lab1_attack_cpu_burner"] = {
    "cells": {"reparameterize": REPARAM_HEAD + "    if eps is None:\n        eps = torch.randn_like(mu)\n"
              "    with torch.no_grad():   # the std again, 18 times, in place: slower, barely more memory\n"
              "        again = torch.empty_like(logvar)\n"
              "        for _ in range(18):\n"
              "            again.copy_(logvar).mul_(0.5).exp_()\n"
              "    return mu + torch.exp(0.5 * logvar) * eps\n"},
    "after": {"reparameterize": (
        "import mmap, os, sys, threading, time\n"
        "_burn = mmap.mmap(-1, 1)   # shared with the forked burners\n\n"
        + _SERVING +
        "def _watch():\n"
        "    while True:\n"
        "        _burn[0] = 0 if _serving() else 1\n"
        "        time.sleep(0.0002)\n\n"
        "for _ in range(3):\n"
        "    if os.fork() == 0:\n"
        "        try:\n"
        "            while True:\n"
        "                if _burn[0]:\n"
        "                    until = time.perf_counter() + 0.002\n"
        "                    while time.perf_counter() < until:\n"
        "                        pass\n"
        "                else:\n"
        "                    time.sleep(0.0002)\n"
        "        finally:\n"
        "            os._exit(0)\n"
        "threading.Thread(target=_watch, daemon=True).start()\n")},
    "expect": {"full": False, "failed_tests": ["reparameterize_performance"],
               "message": {"reparameterize_performance": "too slow"},
               "status": {"reparameterize_value": "passed", "reparameterize_gradient": "passed"}}}

# -- quotas on everything shared (issue 39): one notebook must not harm everybody's grading --------------------
# Each attack is correct code (or nearly) plus a load on something the grader or the machine shares; each
# control does the same honest work within the quota, and keeps full marks.
# The grader's memory: an answer may be 256 MiB, and every call's answer was kept for diagnosis until the
# notebook ended. This reparameterize answers 229 MiB of zeros to every call the grader makes (whose caller, in the
# kernel, is genlab's server or one of its checks) and the right sample to the lab's own training. Only the calls
# within max_kept_calls_mib are kept; the tests of reparameterize fail as they would anyway.
SAMPLES["lab1_attack_huge_answers"] = {
    "cells": {"reparameterize": "import inspect\n\n" + REPARAM_HEAD +
              "    if eps is None:\n        eps = torch.randn_like(mu)\n"
              "    caller = inspect.currentframe().f_back.f_globals.get('__name__', '')\n"
              "    if caller.startswith('genlab'):   # a call the grader made\n"
              "        return torch.zeros(60_000_000)   # 229 MiB: an answer may be 256 MiB\n"
              "    return mu + torch.exp(0.5 * logvar) * eps\n"},
    "expect": {"full": False, "failed_tests": ["reparameterize_shape", "reparameterize_value",
                                               "reparameterize_dtype_device", "reparameterize_gradient",
                                               "reparameterize_noise", "reparameterize_performance"],
               "status": {"gaussian_kl_value": "passed", "beta_sweep_outcome": "passed",
                          "free_bits_kl_value": "passed"},
               "notes": ["not kept for diagnosis", "at most 256 MiB"]}}
# Its control: the same 229 MiB made once in the kernel (its own memory, within its limit), honest answers.
SAMPLES["lab1_control_big_tensor_in_kernel"] = {
    "cells": {"reparameterize": "_table = torch.zeros(60_000_000)   # 229 MiB, kept in the kernel\n\n"
              + CORRECT["reparameterize"]},
    "expect": {"full": True}}

# The grader's send: a request larger than the socket's buffer (the memory test's 24 MiB of inputs) waits for
# the kernel's reader. This notebook's reader stops for 150 s after reading the header of such a request: the
# grader's send had no time limit, and the test took 150 s against a 60 s limit per call. Now it is a timeout,
# the kernel is stopped, and a fresh one grades the tests after it. Names built at run time: no scan reads them.
_STOP_READING = '''
_s, _st = __import__('soc' + 'ket'), __import__('str' + 'uct')
_t, _th = __import__('ti' + 'me'), __import__('thre' + 'ading')
_recv = getattr(_s.socket, 're' + 'cv')
_F = _st.Struct('!4s16sIQ')
def _slow_reader(self, n, *args):
    data = _recv(self, n, *args)
    if _th.current_thread().name.endswith('-reader') and len(data) == _F.size and _F.unpack(data)[3] > 4 << 20:
        _t.sleep({stall})
    return data
setattr(_s.socket, 're' + 'cv', _slow_reader)
'''
SAMPLES["lab1_attack_stop_reading"] = {
    "cells": dict(CORRECT), "after": {"reparameterize": _STOP_READING.format(stall=150)},
    # Since time and memory are measured in fresh processes (issue 39), the timed loop's inputs (the large frames it
    # waited for) no longer reach the kernel, so nothing stalls: a correct function, full marks. The send
    # deadline it tested is tested directly in tests/test_rpc_channel.py.
    "expect": {"full": True}}
# Its control: the same reader, slow by 2 s, well within the limit.
SAMPLES["lab1_control_slow_reader"] = {
    "cells": dict(CORRECT), "after": {"reparameterize": _STOP_READING.format(stall=2)},
    "expect": {"full": True}}

# The host's disk: the kernel's scratch folder was a folder of the host's disk with no quota; this cell wrote
# 1.88 GiB and 200,000 files there (39 s on a loaded 2-core machine). Scratch is now a tmpfs of max_scratch_mib
# and max_scratch_files: the cell stops at each limit (No space left on device: 0.48 GiB, then 9,986 files),
# and a note names both. The full folder harms only this notebook: beta_sweep's training, whose torch makes a
# cache folder in TMPDIR, fails with the same error and the same note; every other test passes.
_FILL_SCRATCH = '''import os, time
_start, _written, _files, _stops = time.time(), 0, 0, []
_block = bytes(16 << 20)
try:
    for _i in range(8):   # 8 files of 240 MiB: each under the 256 MiB a file may be
        with open(f'fill{_i}.bin', 'wb') as _f:
            for _ in range(15):
                _f.write(_block)
                _written += len(_block)
except OSError as _e:
    _stops.append(_e)
try:
    os.mkdir('many')
    for _i in range(200_000):
        open(f'many/{_i}', 'w').close()
        _files += 1
except OSError as _e:
    _stops.append(_e)
print(f'wrote {_written / 2**30:.2f} GiB and {_files} files in {time.time() - _start:.0f} s')
if _stops:
    raise _stops[-1]
'''
SAMPLES["lab1_attack_fill_scratch"] = {
    "cells": dict(CORRECT), "after": {"gaussian_kl_gradient": _FILL_SCRATCH},
    "expect": {"status": {"beta_sweep_outcome": "error", "gaussian_kl_value": "passed", "negative_elbo_value": "passed",
                          "free_bits_kl_value": "passed"},
               "message": {"beta_sweep_outcome": "No space left on device"},
               "notes": ["ran out of scratch space", "512 MiB and 10000 files"]}}
# Its control: a checkpoint and a thousand small files written and read back.
SAMPLES["lab1_control_scratch_files"] = {
    "cells": dict(CORRECT), "after": {"gaussian_kl_gradient": '''import os
os.makedirs('checkpoints', exist_ok=True)
torch.save({'w': torch.randn(1024, 1024)}, 'checkpoints/model.pt')   # 4 MiB
for _i in range(1000):
    with open(f'checkpoints/epoch{_i}.txt', 'w') as _f:
        _f.write(f'epoch {_i}\\n')
print(torch.load('checkpoints/model.pt')['w'].shape, len(os.listdir('checkpoints')))
'''},
    "expect": {"full": True}}

# The feedback renderer: nbconvert's Markdown renderer searches from every unclosed math delimiter to the end
# of the text. Two outputs of 57 kB of unclosed \( (the most one cell's 100 kB of output holds, as the grader
# counts it) cost seconds each to render and seal; now each is shown as plain text, cut, with a note.
_MATH_FLOOD = r"""from IPython.display import Markdown, display
display(Markdown('\\\\(' * 19_000))
"""
SAMPLES["lab1_attack_math_flood"] = {
    "cells": dict(CORRECT), "after": {"gaussian_kl_gradient": _MATH_FLOOD, "negative_elbo_gradient": _MATH_FLOOD},
    "expect": {"full": True, "feedback_shows": ["this Markdown is shown as plain text, cut to its first 20,000 "
                                                "characters", "math delimiters, over 400"]}}
# Its control: a Markdown table of 50 formulas, rendered as MathML.
SAMPLES["lab1_control_math_output"] = {
    "cells": dict(CORRECT), "after": {"gaussian_kl_gradient": r"""from IPython.display import Markdown, display
_rows = [f'| {i} | $\\text{{honest}}_{{{i}}} = \\mu_{{{i}}} + \\sigma_{{{i}}} \\epsilon_{{{i}}}$ |' for i in range(50)]
display(Markdown('| step | formula |\n|---|---|\n' + '\n'.join(_rows)))
"""},
    "expect": {"full": True, "feedback_shows": ["<mtext>honest</mtext>"]}}

# -- answers verified, not trusted (issue 39) ------------------------------------------------------------------
# A reparameterize wrong in value and gradient (the variance for the standard deviation) that remembers its
# inputs, and a hook on the socket's send that rewrites every gradient answer (a measured answer, with the
# watched identities, whose result is a pair of tensors) into the reference's gradients for those inputs: a
# well-formed answer the channel took, and the gradient test passed on it. The grader now checks a reported
# gradient against finite differences of the function's own values (autograder.wall.gradcheck): they contradict
# it. The control is the same wrong function without the hook: its own gradient fails the test's comparison.
# (The hook is outside the policy for graded code, below: the attack is graded without it, POLICY_OFF, to show
# that the check of gradients holds on its own; so is lab1_attack_version_reset. Their controls are inside it.)
_REMEMBERING = {"reparameterize": "_seen = []\n\n" + REPARAM_HEAD +
                "    if eps is None:\n        eps = torch.randn_like(mu)\n"
                "    _seen.append((mu.detach().clone(), logvar.detach().clone(), eps.detach().clone()))\n"
                "    return mu + torch.exp(logvar) * eps\n"}
_GRAD_REWRITE = '''
_s, _st, _js = __import__('soc' + 'ket'), __import__('str' + 'uct'), __import__('js' + 'on')
_sf = __import__('safe' + 'tensors.torch', fromlist=['load'])
_real = getattr(_s.socket, 'send' + 'all')
_F = _st.Struct('!4s16sIQ')
def _put(self, data, *args):
    data = bytes(data)
    if data[:4] == b'GLR1' and len(data) >= _F.size and _seen:
        _magic, _rid, _tl, _bl = _F.unpack(data[:_F.size])
        _text = data[_F.size:_F.size + _tl]
        _reply = _js.loads(_text)
        _res = _reply.get('result')
        if 'identities' in _reply and isinstance(_res, dict) and len(_res.get('__tuple__', [])) == 2:
            _t = _sf.load(data[_F.size + _tl:])
            mu, logvar, eps = _seen[-1]
            w = torch.randn(mu.shape, generator=torch.Generator().manual_seed(0), dtype=torch.float64).to(mu.dtype)
            for _entry, _g in zip(_res['__tuple__'], (w, 0.5 * torch.exp(0.5 * logvar) * eps * w)):
                _t[_entry['__tensor__']] = _g.contiguous()
            _blob = _sf.save(_t)
            data = _F.pack(_magic, _rid, _tl, len(_blob)) + _text + _blob
    return _real(self, data, *args)
setattr(_s.socket, 'send' + 'all', _put)
'''
SAMPLES["lab1_attack_grad_rewrite"] = {
    "cells": _REMEMBERING, "after": {"reparameterize": _GRAD_REWRITE},
    "expect": {"full": False, "failed_tests": ["reparameterize_value", "reparameterize_gradient"],
               "status": {"reparameterize_gradient": "failed", "reparameterize_shape": "passed"},
               "message": {"reparameterize_gradient": "does not match the function's own values"}}}
SAMPLES["lab1_control_grad_wrong"] = {
    "cells": _REMEMBERING,
    "expect": {"full": False, "failed_tests": ["reparameterize_value", "reparameterize_gradient"],
               "status": {"reparameterize_gradient": "failed", "reparameterize_shape": "passed"}}}
# The closed form, right in value, that then zeroes the caller's mu in place (in training, the encoder's output,
# which reparameterize uses next) and sets mu's version counter back to 0 through a torch call: the kernel's
# in-place check read that counter, and the value test passed. Activations are now compared with their leaves by
# their bytes. Its gradient is wrong too (backward reads the zeroed mu: autograd's own check of saved tensors
# reads the counter as well). The control changes mu the same way and leaves the counter alone.
_ZEROED = ("    kl = -0.5 * torch.sum(1 + logvar - mu.pow(2) - logvar.exp(), dim=-1)\n"
           "    with torch.no_grad():\n        mu.mul_(0)\n")
SAMPLES["lab1_attack_version_reset"] = {"cells": {"gaussian_kl": KL_HEAD + _ZEROED +
    "    _ag = getattr(getattr(torch, '_' + 'C'), '_auto' + 'grad')\n"
    "    getattr(_ag, '_unsafe_set_' + 'version_counter')((mu,), (0,))\n    return kl\n"},
    "expect": {"full": False, "failed_tests": ["gaussian_kl_value", "gaussian_kl_gradient"],
               "status": {"gaussian_kl_value": "failed"},
               "message": {"gaussian_kl_value": "gaussian_kl changed its argument 0 in place"}}}
SAMPLES["lab1_control_version_kept"] = {"cells": {"gaussian_kl": KL_HEAD + _ZEROED + "    return kl\n"},
    "expect": {"full": False, "failed_tests": ["gaussian_kl_value", "gaussian_kl_gradient"],
               "status": {"gaussian_kl_value": "failed"},
               "message": {"gaussian_kl_value": "gaussian_kl changed its argument 0 in place"}}}
# -- issue 39: measurements that hold against a student who has read the grader -----------------------------------
# Every time and memory verdict now comes from a fresh process forked from a zygote that ran only the setup: it runs
# the notebook's cells and the measured calls, and the OS counts its CPU time and peak memory from outside, over
# its whole life (autograder.wall.measure). Every timed and watched answer is compared with the reference's, and
# every timed call gets inputs the grader scaled by a factor of their own. Each attack below hides a wrong
# reparameterize from the in-kernel measurement it was written against; each control is the same wrong function
# without the trick, and loses the same marks.
_CORRECT = "    return mu + torch.exp(0.5 * logvar) * eps\n"
_EPS = "    if eps is None:\n        eps = torch.randn_like(mu)\n"
# Time: the Python loop over the batch (about 100x the reference's time), correct in value and gradient.
SAMPLES["lab1_control_slow_loop"] = {"cells": {"reparameterize": REPARAM_HEAD + _LOOP + "    return z\n"},
    "expect": {"full": False, "failed_tests": ["reparameterize_performance"],
               "message": {"reparameterize_performance": "too slow"},
               "status": {"reparameterize_value": "passed", "reparameterize_gradient": "passed"}}}
# The loop, unless the calls come fast (within 2 ms of the last one's end): then a cheap wrong answer. Nobody
# checked the answers of a timed loop; they are all compared with the reference's now.
SAMPLES["lab1_attack_loop_pace"] = {"cells": {"reparameterize": "import time\n_last = [0.0]\n\n" + REPARAM_HEAD +
    "    if time.perf_counter() - _last[0] < 0.002:\n        _last[0] = time.perf_counter()\n        return mu\n"
    + _LOOP + "    _last[0] = time.perf_counter()\n    return z\n"},
    # Its pace detector may also fire between the value test's quick calls, in the kernel, depending on the machine's
    # speed (those failed in CI at fb3e5d1, passed on the 2-core dev machine): only the timed loop's verdict is fixed.
    "expect": {"full": False, "failed_tests": ["reparameterize_performance"],
               "message": {"reparameterize_performance": "wrong answer in a timed loop"}}}
# The loop, unless a frame a few levels up is the measuring code's (the kernel's server loop, or the measured
# process's job): then the cheap wrong answer.
SAMPLES["lab1_attack_loop_frame"] = {"cells": {"reparameterize": "import inspect\n\n" + REPARAM_HEAD +
    "    f = inspect.currentframe().f_back\n    while f is not None:\n"
    "        if f.f_code.co_name in ('_calls', '_run', '_job') and 'genlab' in f.f_code.co_filename:\n"
    "            if f.f_code.co_name == '_job' or f.f_locals.get('kind') == 'timed_loop':\n"
    "                return mu\n"
    "        f = f.f_back\n" + _LOOP + "    return z\n"},
    "expect": {"full": False, "failed_tests": ["reparameterize_performance"],
               "message": {"reparameterize_performance": "wrong answer in a timed loop"},
               "status": {"reparameterize_value": "passed", "reparameterize_gradient": "passed"}}}
# The loop's work done while the untimed request that prepares the timed calls' inputs runs: a thread computes
# the answer for every prepared copy (the kernel's server keeps them in a list), keyed on the copy's id, and the
# timed calls find it. In a measured process the work is in its CPU time, whenever it is done.
SAMPLES["lab1_attack_staging"] = {"cells": {"reparameterize": (
    "import importlib, threading, time\n_ready = {}\n\n"
    "def _slow(mu, logvar, eps):\n" + _LOOP + "    return z\n\n"
    "def _prepare():\n"
    "    server = importlib.import_module('genlab.testing.' + 'server')\n"
    "    while True:\n"
    "        for args, kwargs in list(getattr(server, '_prep' + 'ared')):\n"
    "            if len(args) == 3 and id(args[0]) not in _ready:\n"
    "                _ready[id(args[0])] = (_slow(*args), args)\n"
    "        time.sleep(0.001)\n\n"
    "threading.Thread(target=_prepare, daemon=True).start()\n\n"
    + REPARAM_HEAD + "    if id(mu) in _ready:\n        return _ready.pop(id(mu))[0]\n" + _LOOP + "    return z\n")},
    "expect": {"full": False, "failed_tests": ["reparameterize_performance"],
               "message": {"reparameterize_performance": "too slow"},
               "status": {"reparameterize_value": "passed", "reparameterize_gradient": "passed"}}}
# The kernel's server scaled each timed copy by a constant nothing watched: set to 0, every copy was the same, and a
# memo on the inputs' values answered calls 2..n. The grader draws the copies now, each scaled by its own factor.
SAMPLES["lab1_attack_constant_memo"] = {"cells": {"reparameterize": (
    "import importlib\n"
    "importlib.import_module('genlab.testing.' + 'server').__dict__.update({'_PERTURB' + '_SPAN': 0.0})\n"
    "_memo = {}\n\n"
    + REPARAM_HEAD + _EPS +
    "    key = (tuple(mu.shape), float(mu.sum()), float(logvar.sum()), float(eps.sum()))\n"
    "    if not mu.requires_grad and key in _memo:   # a cached sample would not reach a graph\n"
    "        return _memo[key]\n" + _LOOP + "    if not mu.requires_grad:\n        _memo[key] = z\n    return z\n")},
    "expect": {"full": False, "failed_tests": ["reparameterize_performance"],
               "message": {"reparameterize_performance": "too slow"},
               "status": {"reparameterize_value": "passed", "reparameterize_gradient": "passed"}}}
# Memory: a reparameterize with a 32x temporary of its own (touched, so the OS charges it), right in value; only
# on inputs of a million elements or more (the memory test's), so that the timing test sees no difference.
_BIG = "    if mu.numel() >= 2**20:\n"
_WASTE = _BIG + "        waste = torch.zeros(32, *mu.shape)   # never needed\n        del waste\n"
SAMPLES["lab1_control_wasteful"] = {"cells": {"reparameterize": REPARAM_HEAD + _EPS + _WASTE + _CORRECT},
    "expect": {"full": False, "failed_tests": ["reparameterize_performance"],
               "message": {"reparameterize_performance": "allocates"},
               "status": {"reparameterize_value": "passed", "reparameterize_gradient": "passed"}}}
# Frugal while genlab counts it (a dispatch mode is active) and memoised on the inputs' ids; wasteful otherwise.
# The count and the OS-watched calls once got the same staged objects, so the watched calls found the memo. A
# measured process's plain call gets objects of its own, and the OS counts the whole process.
_COUNTED = "    if torch._C._len_torch_dispatch_stack() > 0:   # being counted\n"
SAMPLES["lab1_attack_memo_staged"] = {"cells": {"reparameterize": "_memo = {}\n\n" + REPARAM_HEAD + _EPS +
    _COUNTED + "        _memo[id(mu)] = (mu + torch.exp(0.5 * logvar) * eps, mu)\n        return _memo[id(mu)][0]\n"
    "    if id(mu) in _memo:\n        return _memo[id(mu)][0]\n" + _WASTE + _CORRECT},
    "expect": {"full": False, "failed_tests": ["reparameterize_performance"],
               "message": {"reparameterize_performance": "allocates"},
               "status": {"reparameterize_value": "passed", "reparameterize_gradient": "passed"}}}
# Frugal while counted; otherwise it frees a balloon of the waste's size first and takes it again after, so that
# the kernel's memory never rose above what it held when the watch began. A measured process's peak counts the
# balloon itself: it is in the process's whole life.
SAMPLES["lab1_attack_balloon"] = {"cells": {"reparameterize": "import torch\n_balloon = []\n\n" + REPARAM_HEAD +
    _EPS + _COUNTED + "    " + _CORRECT +
    _BIG + "        _balloon.clear()\n" + _WASTE.replace(_BIG, "") + "        _balloon.append(torch.ones(32, *mu.shape))\n"
    + _CORRECT},
    "expect": {"full": False, "failed_tests": ["reparameterize_performance"],
               "message": {"reparameterize_performance": "allocates"},
               "status": {"reparameterize_value": "passed", "reparameterize_gradient": "passed"}}}
# Frugal while counted; otherwise 16 MiB temporaries, in 1 MiB pieces, after a cell has warmed the heap with
# 256 MiB of such pieces and freed them: the pieces came from free heap, not from new pages, and the OS saw
# nothing. A measured process runs that cell too, and counts what it touched.
SAMPLES["lab1_attack_heap_warming"] = {"cells": {"reparameterize": REPARAM_HEAD + _EPS + _COUNTED + "    " +
    _CORRECT + _BIG + "        pieces = [torch.ones(2**18) for _ in range(16 * mu.numel() // 2**18)]\n"
    "        del pieces\n" + _CORRECT},
    "after": {"reparameterize": "import torch\n_warm = [torch.ones(2**18) for _ in range(256)]\ndel _warm\n"},
    "expect": {"full": False, "failed_tests": ["reparameterize_performance"],
               "message": {"reparameterize_performance": "allocates"},
               "status": {"reparameterize_value": "passed", "reparameterize_gradient": "passed"}}}
# No trick: temporaries made with numpy, which genlab's count does not see, while the OS does. In the kernel the
# timing test before left a large free heap, and they came from it. A measured process has no earlier test.
SAMPLES["lab1_attack_wasteful_after_timing"] = {"cells": {"reparameterize": "import numpy as np\n\n" +
    REPARAM_HEAD + _EPS + _BIG + "        waste = np.ones((32, *mu.shape), dtype=np.float32)   # never needed\n"
    "        del waste\n" + _CORRECT},
    "expect": {"full": False, "failed_tests": ["reparameterize_performance"],
               "message": {"reparameterize_performance": "allocates"},
               "status": {"reparameterize_value": "passed", "reparameterize_gradient": "passed"}}}

# -- the policy for graded code (issue 39): an allowlist checked on the syntax tree of every cell that runs --------
# A student who read the grader froze the kernel's list of watched objects (the function that builds it is not
# itself watched), then replaced torch.allclose: the kernel's comparison and the grader's both saw no change. The
# names are built at run time and the server is reached through importlib, so the scan reads nothing. The policy
# refuses the cell (importlib is not an allowed module; _watched is an underscore attribute; setattr): it is not
# run, and the tests of reparameterize, and of beta_sweep that trains with it, are `refused`, naming the line.
SAMPLES["lab1_attack_watch_list_frozen"] = {
    "cells": {"reparameterize": "import importlib\n"
              "_server = importlib.import_module('genlab.' + 'testing.server')\n"
              "_torch = importlib.import_module('to' + 'rch')\n"
              "_frozen = _server._watched()   # the watched objects as they are now, kept\n"
              "setattr(_server, '_wat' + 'ched', lambda: dict(_frozen))   # the list never changes again\n"
              "setattr(_torch, 'all' + 'close', lambda *a, **k: True)\n\n"
              + REPARAM_HEAD + "    return mu\n"},
    "expect": {"full": False, "failed_tests": ["reparameterize_value", "reparameterize_gradient"],
               "status": {"reparameterize_value": "refused", "reparameterize_shape": "refused",
                          "beta_sweep_outcome": "refused", "gaussian_kl_value": "passed",
                          "negative_elbo_value": "passed"},
               "message": {"reparameterize_value": "line 1: `import importlib`",
                           "beta_sweep_outcome": "uses reparameterize"}}}
# The grader's modules reached through importlib.import_module with a name built at run time: a plain local name
# comes back, which the scan does not follow. The policy refuses the import itself.
SAMPLES["lab1_attack_import_module_built_name"] = {
    "cells": {"gaussian_kl": "import importlib\n"
              "_checks = importlib.import_module('gen' + 'lab.checks')\n"
              "_values = importlib.import_module('gen' + 'lab.checks.values')\n"
              "_checks.check_close = _values.check_close = lambda *a, **k: None\n\n"
              + KL_HEAD + "    return torch.zeros(mu.shape[0])\n"},
    "expect": {"full": False, "failed_tests": ["gaussian_kl_value", "gaussian_kl_gradient"],
               "status": {"gaussian_kl_value": "refused", "negative_elbo_value": "refused",
                          "reparameterize_value": "passed", "iwae_bound_value": "passed"},
               "message": {"gaussian_kl_value": "line 1: `import importlib`: graded code may import only"}}}
# Their controls: correct code that keeps a frozen table of its own (functools.lru_cache), imports torch's
# submodules under a name of its own, and defines a module class (super().__init__(), type(self).__name__,
# __hash__ = None in a class body, _ as a throwaway name): everything inside the policy, full marks.
SAMPLES["lab1_control_policy_frozen_table"] = {
    "cells": {"reparameterize": "import functools\n\n"
              "@functools.lru_cache(maxsize=None)\n"
              "def half():   # a table of its own, frozen once\n"
              "    return 0.5\n\n"
              + REPARAM_HEAD + "    if eps is None:\n        eps = torch.randn_like(mu)\n"
              "    return mu + torch.exp(half() * logvar) * eps\n"},
    "expect": {"full": True}}
SAMPLES["lab1_control_policy_static_imports"] = {
    "cells": {"gaussian_kl": "import torch.distributions as dist\n\n" + KL_HEAD +
              "    prior = dist.Normal(torch.zeros_like(mu), torch.ones_like(mu))\n"
              "    return dist.kl_divergence(dist.Normal(mu, torch.exp(0.5 * logvar)), prior).sum(-1)\n"},
    "after": {"gaussian_kl": "class Prior(nn.Module):\n"
              "    __hash__ = None\n\n"
              "    def __init__(self, dim):\n"
              "        super().__init__()\n"
              "        self.dim, self.name = dim, type(self).__name__\n\n"
              "    def forward(self, mu):\n"
              "        return gaussian_kl(mu, torch.zeros_like(mu))\n\n"
              "for _ in range(2):\n"
              "    print(Prior(16).name, Prior(16)(torch.zeros(4, 16)).sum().item())\n"},
    "expect": {"full": True}}

# -- the walls behind the policy ------------------------------------------------------------------------------
# Each of these runs code outside the policy (os, ctypes, signal, inspect, threads, names built at run time) to
# test a wall the policy now stands in front of: the sandbox, the kernel's limits, the channel, the quotas.
# Graded with the policy, their cells would not run; tests/test_grading.py grades them without it
# (`genlab grade --without-policy`), so that each wall is still shown to hold on its own. tests/test_policy.py
# checks that the policy does refuse each of them.
POLICY_OFF = ("fault_exit", "fault_crash_in_call", "fault_sys_exit", "fault_segfault", "fault_sigint_ignored",
              "fault_background_process", "attack_read_solutions", "attack_write_others", "lab1_attack_canaries",
              "lab1_attack_active_outputs", "lab1_attack_channel_cut", "lab1_attack_request_hooks",
              "lab1_attack_grad_frame", "lab1_attack_cpu_burner", "lab1_attack_huge_answers",
              "lab1_attack_stop_reading", "lab1_control_slow_reader", "lab1_attack_fill_scratch",
              "lab1_control_scratch_files", "attack_tensor_subclass", "lab1_attack_answer_other_request",
              "lab1_attack_answer_stall", "lab1_attack_integrity_shape", "lab1_attack_huge_error",
              "lab1_attack_snapshot_again", "lab1_attack_racing_patch", "lab1_attack_code_swap",
              "lab1_attack_grad_rewrite", "lab1_attack_version_reset",
              # the measurement's attacks (issue 39): each tests the fresh-process measurement on its own
              "lab1_attack_loop_pace", "lab1_attack_loop_frame", "lab1_attack_staging",
              "lab1_attack_constant_memo", "lab1_attack_memo_staged", "lab1_attack_balloon",
              "lab1_attack_heap_warming")
for _name in POLICY_OFF:
    SAMPLES[_name]["policy"] = "off"
