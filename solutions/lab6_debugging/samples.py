"""Sample submissions for Lab 6: the reference, a correct variant of each instrument, and one per catalogued bug.

Each sample names the solution cells it replaces (by grade_id) and what the grader must conclude
(``expect``). Format: :mod:`autograder.release.sample_submissions`.
"""
from autograder.release.sample_submissions import bug_cell

LAB = "lab6_debugging"

TRAIN_HEAD = "def train_autoencoder(seed, steps=400, inspect=None):\n"


def _train_body(params: str, detach: str = "") -> str:
    """A student's train_autoencoder: run A with the optimizer built on ``params`` and the code ``z`` written out."""
    return (TRAIN_HEAD +
            "    model = make_autoencoder(seed)\n"
            f"    optimizer = torch.optim.Adam({params}, lr=1e-2)\n"
            "    batches = torch.Generator().manual_seed(seed)\n"
            "    for step in range(steps):\n"
            "        x = images[torch.randint(len(images), (128,), generator=batches)]\n"
            f"        z = model['encoder'](x){detach}\n"
            "        loss = F.mse_loss(torch.sigmoid(model['decoder'](z)), x)\n"
            "        optimizer.zero_grad(set_to_none=False)\n"
            "        loss.backward()\n"
            "        if inspect is not None:\n"
            "            inspect(step, model)\n"
            "        optimizer.step()\n"
            "    with torch.no_grad():\n"
            "        return float(reconstruction_loss(model, images))\n")


SAMPLES: dict[str, dict] = {
    "reference": {"cells": {}, "expect": {"full": True}},
    # -- correct alternatives: full marks ---------------------------------------------------------------
    # torch.linalg.vector_norm over the concatenated gradients; hooks registered with module.apply and names bound
    # in closures, isnan | isinf, gradients left on; numpy's median (the mean of the two middle values); a set of
    # data pointers with the storages kept in a dict; run A fixed with zero_grad(set_to_none=False); a tuple
    "lab6_variant_instruments": {"expect": {"full": True}, "cells": {
        "grad_norms_by_module":
        "def grad_norms_by_module(model):\n"
        "    result = {}\n"
        "    for name, module in reversed(list(model.named_modules())):\n"
        "        params = [p for p in module.parameters(recurse=False)]\n"
        "        if len(params) == 0:\n"
        "            continue\n"
        "        flat = [p.grad.reshape(-1).double() for p in params if p.grad is not None]\n"
        "        result[name] = float(torch.linalg.vector_norm(torch.cat(flat))) if flat else None\n"
        "    return result\n",
        "first_nonfinite":
        "def first_nonfinite(model, inputs):\n"
        "    order = []\n"
        "    handles = []\n"
        "    def watch(name):\n"
        "        def hook(module, args, output):\n"
        "            items = list(output) if isinstance(output, (list, tuple)) else [output]\n"
        "            bad = any(torch.is_tensor(o) and torch.is_floating_point(o) and bool((torch.isnan(o) | torch.isinf(o)).any())\n"
        "                      for o in items)\n"
        "            if bad:\n"
        "                order.append(name)\n"
        "        return hook\n"
        "    for name, module in model.named_modules():\n"
        "        handles.append(module.register_forward_hook(watch(name)))\n"
        "    try:\n"
        "        model(inputs)\n"
        "    finally:\n"
        "        for h in handles:\n"
        "            h.remove()\n"
        "    return order[0] if order else None\n",
        "detect_spikes":
        "def detect_spikes(losses, window=21, threshold=6.0):\n"
        "    import numpy as np\n"
        "    x = np.asarray(torch.as_tensor(losses, dtype=torch.float64))\n"
        "    out = []\n"
        "    for i in range(window, len(x)):\n"
        "        if not np.isfinite(x[i]):\n"
        "            out.append(i)\n"
        "            continue\n"
        "        w = x[i - window:i]\n"
        "        w = w[np.isfinite(w)]\n"
        "        if w.size and x[i] - np.median(w) > threshold * 1.4826 * np.median(np.abs(w - np.median(w))):\n"
        "            out.append(int(i))\n"
        "    return out\n",
        "saved_activation_bytes":
        "def saved_activation_bytes(fn, *args):\n"
        "    seen = {}\n"
        "    def pack(t):\n"
        "        s = t.untyped_storage()\n"
        "        if s.data_ptr() not in seen:\n"
        "            seen[s.data_ptr()] = s.nbytes()\n"
        "        return t.detach()\n"
        "    def unpack(t):\n"
        "        return t\n"
        "    with torch.set_grad_enabled(True):\n"
        "        with torch.autograd.graph.saved_tensors_hooks(pack, unpack):\n"
        "            fn(*args)\n"
        "    total = 0\n"
        "    for nbytes in seen.values():\n"
        "        total += nbytes\n"
        "    return total\n",
        "train_autoencoder": _train_body("list(model['encoder'].parameters()) + list(model['decoder'].parameters())"),
        "causes_of_run_a":
        "def causes_of_run_a():\n"
        "    return ('params_missing_from_optimizer', 'detached_tensor')\n",
    }},
    # -- bugs the tests catch that the catalogue does not name --------------------------------------------
    # the detach removed, the optimizer still built on the decoder alone: one of run A's two causes left
    "lab6_bug_train_one_fix_only": {"expect": {"failed_tests": ["train_autoencoder_outcome"]}, "cells": {
        "train_autoencoder": _train_body("model['decoder'].parameters()"),
    }},
    # the first cause found and no other
    "lab6_bug_causes_one_only": {"expect": {"failed_tests": ["causes_of_run_a_value"]}, "cells": {
        "causes_of_run_a": "def causes_of_run_a():\n    return ['detached_tensor']\n",
    }},
    # every save counted at numel * element_size: a storage saved twice counted twice
    "lab6_bug_saved_bytes_each_save": {"expect": {"failed_tests": ["saved_activation_bytes_value"]}, "cells": {
        "saved_activation_bytes":
        "def saved_activation_bytes(fn, *args):\n"
        "    sizes = []\n"
        "    def pack(t):\n"
        "        sizes.append(t.numel() * t.element_size())\n"
        "        return t.detach()\n"
        "    with torch.enable_grad(), torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):\n"
        "        fn(*args)\n"
        "    return sum(sizes)\n",
    }},
}

BUG_SAMPLES = {"none_as_zero": "grad_norms_by_module", "children_only": "first_nonfinite", "two_sided": "detect_spikes"}
for _bug_id, _function in BUG_SAMPLES.items():
    SAMPLES[f"lab6_bug_{_bug_id}"] = {"cells": {_function: bug_cell(LAB, _bug_id)},
                                      "expect": {"full": False, "bug": _bug_id, "function": _function}}
