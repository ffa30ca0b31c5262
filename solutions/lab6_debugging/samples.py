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
    # data pointers with the storages kept in a dict; run A fixed with zero_grad(set_to_none=False); a tuple;
    # overfit_one_batch with a while loop and .item(); profile_step with torch.profiler.profile
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
        # a while loop, the losses turned into floats with .item() (a step_fn may return a float: as_tensor first)
        "overfit_one_batch":
        "def overfit_one_batch(model, batch, step_fn, max_steps=300, rtol=0.01):\n"
        "    losses = []\n"
        "    reached = False\n"
        "    while len(losses) < max_steps:\n"
        "        loss = torch.as_tensor(step_fn(model, batch)).item()\n"
        "        losses.append(loss)\n"
        "        if math.isnan(loss) or math.isinf(loss):\n"
        "            break\n"
        "        if loss <= losses[0] * rtol:\n"
        "            reached = True\n"
        "            break\n"
        "    return dict(losses=losses, steps=len(losses), reached=reached)\n",
        # torch.profiler.profile (its first start imports torch._inductor), sorted with sorted() and a tuple key
        "profile_step":
        "def profile_step(fn, *args, top=5):\n"
        "    from torch.profiler import ProfilerActivity, profile\n"
        "    fn(*args)\n"
        "    with profile(activities=[ProfilerActivity.CPU]) as prof:\n"
        "        fn(*args)\n"
        "    rows = sorted(((e.key, float(e.self_cpu_time_total)) for e in prof.key_averages()),\n"
        "                  key=lambda r: (-r[1], r[0]))\n"
        "    return rows[:top]\n",
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
    # `while loss > target`: a NaN (or an infinite first loss) compares False, and the loop leaves as if it had arrived
    "lab6_bug_overfit_nan_reached": {"expect": {"failed_tests": ["overfit_one_batch_value"]}, "cells": {
        "overfit_one_batch":
        "def overfit_one_batch(model, batch, step_fn, max_steps=300, rtol=0.01):\n"
        "    if max_steps == 0:\n"
        "        return {'reached': False, 'steps': 0, 'losses': []}\n"
        "    losses = [float(step_fn(model, batch))]\n"
        "    target = rtol * losses[0]\n"
        "    while losses[-1] > target and len(losses) < max_steps:\n"
        "        losses.append(float(step_fn(model, batch)))\n"
        "    return {'reached': not losses[-1] > target, 'steps': len(losses), 'losses': losses}\n",
    }},
    # "near zero" read as an absolute tolerance: loss <= rtol, whatever the loss's scale
    "lab6_bug_overfit_absolute": {"expect": {"failed_tests": ["overfit_one_batch_value", "overfit_one_batch_train"]},
                                  "cells": {
        "overfit_one_batch":
        "def overfit_one_batch(model, batch, step_fn, max_steps=300, rtol=0.01):\n"
        "    losses = []\n"
        "    for _ in range(max_steps):\n"
        "        losses.append(float(step_fn(model, batch)))\n"
        "        if not math.isfinite(losses[-1]) or losses[-1] <= rtol:\n"
        "            break\n"
        "    reached = bool(losses) and math.isfinite(losses[-1]) and losses[-1] <= rtol\n"
        "    return {'reached': reached, 'steps': len(losses), 'losses': losses}\n",
    }},
    # sorted by total CPU time (the profiler table's default column, CPU total): wrappers like aten::linear on top
    "lab6_bug_profile_total_time": {"expect": {"failed_tests": ["profile_step_value"]}, "cells": {
        "profile_step":
        "def profile_step(fn, *args, top=5):\n"
        "    with torch.autograd.profiler.profile() as prof:\n"
        "        fn(*args)\n"
        "    rows = [(e.key, float(e.cpu_time_total)) for e in prof.key_averages()]\n"
        "    rows.sort(key=lambda row: (-row[1], row[0]))\n"
        "    return rows[:top]\n",
    }},
    # milliseconds, as the profiler's table prints them, where the text asks for microseconds
    "lab6_bug_profile_milliseconds": {"expect": {"failed_tests": ["profile_step_value"]}, "cells": {
        "profile_step":
        "def profile_step(fn, *args, top=5):\n"
        "    with torch.autograd.profiler.profile() as prof:\n"
        "        fn(*args)\n"
        "    rows = [(e.key, e.self_cpu_time_total / 1000) for e in prof.key_averages()]\n"
        "    rows.sort(key=lambda row: (-row[1], row[0]))\n"
        "    return rows[:top]\n",
    }},
}

BUG_SAMPLES = {"none_as_zero": "grad_norms_by_module", "children_only": "first_nonfinite", "two_sided": "detect_spikes"}
for _bug_id, _function in BUG_SAMPLES.items():
    SAMPLES[f"lab6_bug_{_bug_id}"] = {"cells": {_function: bug_cell(LAB, _bug_id)},
                                      "expect": {"full": False, "bug": _bug_id, "function": _function}}
