"""Sample submissions for Lab 4: the reference, correct variants and one per catalogued bug.

Each sample names the solution cells it replaces (by grade_id) and what the grader must conclude
(``expect``). Format: :mod:`autograder.release.sample_submissions`.
"""
from autograder.release.sample_submissions import bug_cell

LAB = "lab4_lora"

INIT_HEAD = "def lora_init(in_features, out_features, r, *, generator=None, dtype=None, device=None):\n"
FORWARD_HEAD = "def lora_forward(x, weight, bias, A, B, scaling, dropout_p=0.0, training=False):\n"
MERGE_HEAD = "def merge_lora(weight, A, B, scaling):\n"
UNMERGE_HEAD = "def unmerge_lora(weight, A, B, scaling):\n"
ADD_HEAD = "def add_lora(model, target_modules, r, alpha, dropout=0.0):\n"
COUNT_HEAD = "def count_parameters(model):\n"

def _student_form(cell: str) -> str:
    cell = cell[cell.index("def add_lora"):]
    return cell.replace("    LoRALinear = _notebook_lora_linear()\n", "")


SAMPLES: dict[str, dict] = {
    # -- correct alternatives: full marks ---------------------------------------------------------------
    # nn.init.kaiming_uniform_(a=sqrt(5)) on an empty tensor (peft's own call), addmm chains, float64 merges
    "lab4_variant_kaiming_addmm": {"expect": {"full": True}, "cells": {
        "lora_init": INIT_HEAD +
        "    A = torch.empty(r, in_features, dtype=dtype, device=device)\n"
        "    nn.init.kaiming_uniform_(A, a=math.sqrt(5), generator=generator)\n"
        "    return A, torch.zeros(out_features, r, dtype=dtype, device=device)\n",
        "lora_forward": FORWARD_HEAD +
        "    flat = x.reshape(-1, x.shape[-1])\n"
        "    h = F.dropout(flat, p=dropout_p, training=training)\n"
        "    low = h @ A.T\n"
        "    if bias is None:\n"
        "        out = torch.addmm(flat @ weight.T, low, B.T, alpha=scaling)\n"
        "    else:\n"
        "        out = torch.addmm(torch.addmm(bias, flat, weight.T), low, B.T, alpha=scaling)\n"
        "    return out.reshape(*x.shape[:-1], weight.shape[0])\n",
        "merge_lora": MERGE_HEAD +
        "    return torch.addmm(weight.double(), B.double(), A.double(), alpha=scaling).to(weight.dtype)\n",
        "unmerge_lora": UNMERGE_HEAD +
        "    return torch.addmm(weight.double(), B.double(), A.double(), alpha=-scaling).to(weight.dtype)\n",
    }},
    # A and B kept as nn.Linear layers, like peft; dropout as an nn.Dropout module; a merged flag that
    # silently ignores a second merge; count_parameters over named_parameters (deduplicated by id)
    "lab4_variant_linear_modules": {"expect": {"full": True}, "cells": {
        "LoRALinear":
        "class LoRALinear(nn.Module):\n"
        "    def __init__(self, base, r, alpha, dropout=0.0, rslora=False):\n"
        "        super().__init__()\n"
        "        if not isinstance(base, nn.Linear):\n"
        "            raise TypeError(f'LoRALinear needs an nn.Linear, not {type(base).__name__}')\n"
        "        self.base = base\n"
        "        self.base.requires_grad_(False)\n"
        "        kw = dict(dtype=base.weight.dtype, device=base.weight.device)\n"
        "        self.lora_A = nn.Linear(base.in_features, r, bias=False, **kw)\n"
        "        self.lora_B = nn.Linear(r, base.out_features, bias=False, **kw)\n"
        "        A, B = lora_init(base.in_features, base.out_features, r, **kw)\n"
        "        with torch.no_grad():\n"
        "            self.lora_A.weight.copy_(A)\n"
        "            self.lora_B.weight.copy_(B)\n"
        "        self.drop = nn.Dropout(dropout)\n"
        "        self.s = lora_scaling(alpha, r, rslora)\n"
        "        self.is_merged = False\n"
        "\n"
        "    def forward(self, x):\n"
        "        if self.is_merged:\n"
        "            return self.base(x)\n"
        "        return self.base(x) + self.lora_B(self.lora_A(self.drop(x))) * self.s\n"
        "\n"
        "    def merge(self):\n"
        "        if not self.is_merged:\n"
        "            with torch.no_grad():\n"
        "                self.base.weight.copy_(merge_lora(self.base.weight, self.lora_A.weight, self.lora_B.weight, self.s))\n"
        "            self.is_merged = True\n"
        "\n"
        "    def unmerge(self):\n"
        "        if self.is_merged:\n"
        "            with torch.no_grad():\n"
        "                self.base.weight.copy_(unmerge_lora(self.base.weight, self.lora_A.weight, self.lora_B.weight, self.s))\n"
        "            self.is_merged = False\n",
        "add_lora": ADD_HEAD +
        "    if isinstance(target_modules, str):\n"
        "        target_modules = [target_modules]\n"
        "    def wanted(name):\n"
        "        return any(name == key or name.endswith('.' + key) for key in target_modules)\n"
        "    found = [(name, m) for name, m in model.named_modules() if wanted(name) and isinstance(m, nn.Linear)]\n"
        "    if not found:\n"
        "        raise ValueError(f'no nn.Linear matches target_modules={target_modules}')\n"
        "    model.requires_grad_(False)\n"
        "    for name, module in found:\n"
        "        *path, last = name.split('.')\n"
        "        parent = model\n"
        "        for part in path:\n"
        "            parent = getattr(parent, part)\n"
        "        setattr(parent, last, LoRALinear(module, r, alpha, dropout))\n"
        "    return model\n",
        "count_parameters": COUNT_HEAD +
        "    unique = {id(p): p for _, p in model.named_parameters()}\n"
        "    trainable = sum(p.numel() for p in unique.values() if p.requires_grad)\n"
        "    return trainable, sum(p.numel() for p in unique.values())\n",
    }},
    # torch.rand for A, baddbmm for the forward, a merge through the low-rank product in float32
    "lab4_variant_rand_baddbmm": {"expect": {"full": True}, "cells": {
        "lora_init": INIT_HEAD +
        "    bound = in_features ** -0.5\n"
        "    A = (torch.rand(r, in_features, generator=generator, dtype=dtype, device=device) * 2 - 1) * bound\n"
        "    B = torch.zeros(out_features, r, dtype=dtype, device=device)\n"
        "    return A, B\n",
        "lora_forward": FORWARD_HEAD +
        "    x3 = x.reshape(1, -1, x.shape[-1])\n"
        "    start = torch.zeros((), dtype=x.dtype, device=x.device) if bias is None else bias\n"
        "    out = torch.baddbmm(start.expand(1, x3.shape[1], weight.shape[0]), x3, weight.T.unsqueeze(0))\n"
        "    if training and dropout_p > 0:\n"
        "        x3 = F.dropout(x3, dropout_p, True)\n"
        "    out = torch.baddbmm(out, torch.bmm(x3, A.T.unsqueeze(0)), B.T.unsqueeze(0), alpha=scaling)\n"
        "    return out.reshape(*x.shape[:-1], weight.shape[0])\n",
        "merge_lora": MERGE_HEAD +
        "    delta = torch.matmul(B.float(), A.float()).mul(scaling)\n"
        "    return (weight.float() + delta).to(weight.dtype) if weight.dtype != torch.float64 else weight + delta.double()\n",
    }},
    # peft's layout: the factors live in nn.Linear layers (self.down, self.up) and lora_A / lora_B name the very same
    # Parameters, so the module's state_dict lists each factor twice; dropout as an nn.Dropout module
    "lab4_variant_peft_layout": {"expect": {"full": True}, "cells": {
        "LoRALinear":
        "class LoRALinear(nn.Module):\n"
        "    def __init__(self, base, r, alpha, dropout=0.0, rslora=False):\n"
        "        super().__init__()\n"
        "        if not isinstance(base, nn.Linear):\n"
        "            raise TypeError('base must be an nn.Linear')\n"
        "        self.base = base\n"
        "        for p in base.parameters():\n"
        "            p.requires_grad = False\n"
        "        kw = dict(dtype=base.weight.dtype, device=base.weight.device)\n"
        "        self.down = nn.Linear(base.in_features, r, bias=False, **kw)\n"
        "        self.up = nn.Linear(r, base.out_features, bias=False, **kw)\n"
        "        A, B = lora_init(base.in_features, base.out_features, r, **kw)\n"
        "        with torch.no_grad():\n"
        "            self.down.weight.copy_(A)\n"
        "            self.up.weight.copy_(B)\n"
        "        self.lora_A = self.down.weight   # the same Parameter, registered under a second name\n"
        "        self.lora_B = self.up.weight\n"
        "        self.lora_dropout = nn.Dropout(dropout)\n"
        "        self.scaling = lora_scaling(alpha, r, rslora)\n"
        "        self.merged = False\n"
        "\n"
        "    def forward(self, x):\n"
        "        out = self.base(x)\n"
        "        if not self.merged:\n"
        "            out = out + self.up(self.down(self.lora_dropout(x))) * self.scaling\n"
        "        return out\n"
        "\n"
        "    @torch.no_grad()\n"
        "    def merge(self):\n"
        "        if self.merged:\n"
        "            raise RuntimeError('already merged')\n"
        "        self.base.weight.copy_(merge_lora(self.base.weight, self.lora_A, self.lora_B, self.scaling))\n"
        "        self.merged = True\n"
        "\n"
        "    @torch.no_grad()\n"
        "    def unmerge(self):\n"
        "        if not self.merged:\n"
        "            raise RuntimeError('not merged')\n"
        "        self.base.weight.copy_(unmerge_lora(self.base.weight, self.lora_A, self.lora_B, self.scaling))\n"
        "        self.merged = False\n",
    }},
    # merging is for inference: merge_lora / unmerge_lora computed under torch.no_grad() (a detached result), all in
    # float32 whatever the weight's dtype ("at least float32": a float64 weight is merged in float32 too)
    "lab4_variant_merge_no_grad": {"expect": {"full": True}, "cells": {
        "merge_lora": MERGE_HEAD +
        "    with torch.no_grad():\n"
        "        merged = weight.float() + scaling * (B.float() @ A.float())\n"
        "    return merged.to(weight.dtype)\n",
        "unmerge_lora": UNMERGE_HEAD +
        "    with torch.no_grad():\n"
        "        unmerged = weight.float() - scaling * (B.float() @ A.float())\n"
        "    return unmerged.to(weight.dtype)\n",
    }},
    # add_lora walking named_children recursively with a fully matched, escaped regular expression per key (the list
    # rule, no string case), freezing everything before replacing, and replacing with register_module
    "lab4_variant_add_lora_recursive": {"expect": {"full": True}, "cells": {
        "add_lora":
        "import re\n"
        "\n"
        + ADD_HEAD +
        "    patterns = [re.compile(r'(.*\\.)?' + re.escape(key)) for key in target_modules]\n"
        "    model.requires_grad_(False)\n"
        "    replaced = []\n"
        "\n"
        "    def visit(module, prefix):\n"
        "        for name, child in list(module.named_children()):\n"
        "            qualified = prefix + name\n"
        "            if isinstance(child, nn.Linear) and any(p.fullmatch(qualified) for p in patterns):\n"
        "                module.register_module(name, LoRALinear(child, r, alpha, dropout))\n"
        "                replaced.append(qualified)\n"
        "            else:\n"
        "                visit(child, qualified + '.')\n"
        "\n"
        "    visit(model, '')\n"
        "    if not replaced:\n"
        "        raise ValueError(f'target_modules={list(target_modules)} matches no nn.Linear of the model')\n"
        "    return model\n",
    }},
    # -- bugs the tests catch that the catalogue does not name (no documented source to cite) ----------------
    # dropout on the r-wide hidden values x A^T, or on the adapter's output, instead of on the adapter's input
    "lab4_bug_dropout_on_hidden": {"expect": {"failed_tests": ["lora_forward_dropout", "LoRALinear_dropout"]}, "cells": {
        "lora_forward": FORWARD_HEAD +
        "    hidden = F.dropout(F.linear(x, A), dropout_p, training)\n"
        "    return F.linear(x, weight, bias) + scaling * F.linear(hidden, B)\n",
    }},
    "lab4_bug_dropout_on_output": {"expect": {"failed_tests": ["lora_forward_dropout", "LoRALinear_dropout"]}, "cells": {
        "lora_forward": FORWARD_HEAD +
        "    update = F.linear(F.linear(x, A), B)\n"
        "    return F.linear(x, weight, bias) + scaling * F.dropout(update, dropout_p, training)\n",
    }},
    # p read as the probability to keep
    "lab4_bug_dropout_keep_probability": {"expect": {"failed_tests": ["lora_forward_dropout", "LoRALinear_dropout"]},
                                          "cells": {
        "lora_forward": FORWARD_HEAD +
        "    adapter_input = F.dropout(x, 1 - dropout_p, training) if dropout_p > 0 else x\n"
        "    return F.linear(x, weight, bias) + scaling * F.linear(F.linear(adapter_input, A), B)\n",
    }},
    # the merge written into the input: for a float32 weight .to(float32) is the weight itself
    "lab4_bug_merge_in_place": {"expect": {"failed_tests": ["merge_lora_value"]}, "cells": {
        "merge_lora": MERGE_HEAD +
        "    merged = weight.to(torch.promote_types(weight.dtype, torch.float32))\n"
        "    merged += scaling * (B.to(merged.dtype) @ A.to(merged.dtype))\n"
        "    return merged.to(weight.dtype)\n",
    }},
    # merge() replaces base.weight by a new nn.Parameter (trainable again) instead of writing into it
    "lab4_bug_merge_unfreezes_base": {"expect": {"failed_tests": ["LoRALinear_merge"]}, "cells": {
        "LoRALinear":
        "class LoRALinear(nn.Module):\n"
        "    def __init__(self, base, r, alpha, dropout=0.0, rslora=False):\n"
        "        super().__init__()\n"
        "        if not isinstance(base, nn.Linear):\n"
        "            raise TypeError(f'LoRALinear wraps an nn.Linear, got {type(base).__name__}')\n"
        "        self.base = base\n"
        "        base.requires_grad_(False)\n"
        "        A, B = lora_init(base.in_features, base.out_features, r, dtype=base.weight.dtype, device=base.weight.device)\n"
        "        self.lora_A, self.lora_B = nn.Parameter(A), nn.Parameter(B)\n"
        "        self.scaling = lora_scaling(alpha, r, rslora)\n"
        "        self.dropout = dropout\n"
        "        self.merged = False\n"
        "\n"
        "    def forward(self, x):\n"
        "        if self.merged:\n"
        "            return self.base(x)\n"
        "        return lora_forward(x, self.base.weight, self.base.bias, self.lora_A, self.lora_B, self.scaling,\n"
        "                            self.dropout, self.training)\n"
        "\n"
        "    def merge(self):\n"
        "        if self.merged:\n"
        "            return\n"
        "        with torch.no_grad():\n"
        "            self.base.weight = nn.Parameter(merge_lora(self.base.weight, self.lora_A, self.lora_B, self.scaling))\n"
        "        self.merged = True\n"
        "\n"
        "    def unmerge(self):\n"
        "        if not self.merged:\n"
        "            return\n"
        "        with torch.no_grad():\n"
        "            self.base.weight = nn.Parameter(unmerge_lora(self.base.weight, self.lora_A, self.lora_B, self.scaling))\n"
        "        self.merged = False\n",
    }},
    # buffers (BatchNorm's running statistics) counted as parameters
    "lab4_bug_count_buffers": {"expect": {"failed_tests": ["count_parameters_value"]}, "cells": {
        "count_parameters": COUNT_HEAD +
        "    params = list(model.parameters())\n"
        "    trainable = sum(p.numel() for p in params if p.requires_grad)\n"
        "    return trainable, sum(p.numel() for p in params) + sum(b.numel() for b in model.buffers())\n",
    }},
    # -- one per catalogued bug ---------------------------------------------------------------------------
    "lab4_bug_random_b_init": {"cells": {"lora_init": bug_cell(LAB, "random_b_init")},
                               "expect": {"bug": "random_b_init", "function": "lora_init"}},
    "lab4_bug_zero_init_both": {"cells": {"lora_init": bug_cell(LAB, "zero_init_both")},
                                "expect": {"bug": "zero_init_both", "function": "lora_init"}},
    "lab4_bug_alpha_not_divided": {"cells": {"lora_scaling": bug_cell(LAB, "alpha_not_divided")},
                                   "expect": {"bug": "alpha_not_divided", "function": "lora_scaling"}},
    "lab4_bug_dropout_ignores_training": {"cells": {"lora_forward": bug_cell(LAB, "dropout_ignores_training")},
                                          "expect": {"bug": "dropout_ignores_training", "function": "lora_forward"}},
    "lab4_bug_merge_in_low_precision": {"cells": {"merge_lora": bug_cell(LAB, "merge_in_low_precision")},
                                        "expect": {"bug": "merge_in_low_precision", "function": "merge_lora"}},
    # As a student writes it: the catalogue's body finds the notebook's LoRALinear through sys.modules (outside the
    # policy for graded code); in the notebook it is a global of the student's own.
    "lab4_bug_substring_match": {"cells": {"add_lora": _student_form(bug_cell(LAB, "substring_match"))},
                                 "expect": {"bug": "substring_match", "function": "add_lora"}},
}

# The reference student hands in every lab (its folder is shared with the other labs).
SAMPLES["reference"] = {"cells": {}, "expect": {"full": True}}

# Tests of a function that calls another student function may fail with that function's bug.
_CORE = ["lora_init", "lora_scaling", "lora_forward", "merge_lora", "unmerge_lora"]
DEPENDS = {
    "LoRALinear": _CORE,
    "add_lora": ["LoRALinear", *_CORE],
    "count_parameters": ["add_lora", "LoRALinear", *_CORE],
}

# -- the arguments that decide the draw and the dtype (the kernel now gets the test's generator and default dtype)
SAMPLES["lab4_bug_generator_ignored"] = {"expect": {"failed_tests": ["lora_init_values"]}, "cells": {
    "lora_init": INIT_HEAD +
    "    bound = 1.0 / math.sqrt(in_features)\n"
    "    A = torch.empty(r, in_features, dtype=dtype, device=device).uniform_(-bound, bound)  # generator dropped\n"
    "    return A, torch.zeros(out_features, r, dtype=dtype, device=device)\n"}}
SAMPLES["lab4_bug_dtype_none_as_float32"] = {"expect": {"failed_tests": ["lora_init_shape"]}, "cells": {
    "lora_init": INIT_HEAD +
    "    dtype = dtype or torch.float32  # torch's default dtype need not be float32\n"
    "    bound = 1.0 / math.sqrt(in_features)\n"
    "    A = torch.empty(r, in_features, dtype=dtype, device=device).uniform_(-bound, bound, generator=generator)\n"
    "    return A, torch.zeros(out_features, r, dtype=dtype, device=device)\n"}}

# -- memory, verified by the operating system (issue 22) ------------------------------------------------------
# The forward pass through the merged weight, W + s B A, formed on every call: right values, and a [out, in]
# temporary the size of the frozen weight (16 MiB in the test), which lora_forward_memory exists to catch.
_MERGED = "    return F.linear(x, weight + scaling * (B @ A), bias)\n"
SAMPLES["lab4_merged_weight_every_call"] = {
    "cells": {"lora_forward": FORWARD_HEAD + "    if dropout_p > 0 and training:\n"
              "        return F.linear(x, weight, bias) + scaling * F.linear(F.linear(F.dropout(x, dropout_p), A), B)\n"
              + _MERGED},
    "expect": {"failed_tests": ["lora_forward_memory"],
               "message": {"lora_forward_memory": "allocates"}}}
# The same, with the kernel's dispatch modes turned off around it: genlab's count in the kernel (a
# TorchDispatchMode) sees nothing. The pages are charged to the kernel's cgroup all the same, and the grader
# takes the OS's figure when it exceeds the kernel's count by more than the slack.
SAMPLES["lab4_attack_memory_blind"] = {
    "cells": {"lora_forward": "from torch.utils import _python_dispatch as _pd\n\n" + FORWARD_HEAD +
              "    if dropout_p > 0 and training:\n"
              "        return F.linear(x, weight, bias) + scaling * F.linear(F.linear(F.dropout(x, dropout_p), A), B)\n"
              "    with _pd._disable_current_modes():\n"
              "        out = F.linear(x, weight + scaling * (B @ A), bias)\n"
              "    return out.clone()   # one allocation the count sees, the size of the output\n"},
    "expect": {"failed_tests": ["lora_forward_memory"],
               "message": {"lora_forward_memory": "allocates"}}}
# Efficient only while genlab counts: the count is a dispatch mode on torch's stack, which the function can see,
# so it takes the bottleneck then and forms W + s B A otherwise. The grader also runs one plain call, with no
# mode on the stack, whose memory the operating system counts, and takes the larger figure.
SAMPLES["lab4_attack_memory_mode_aware"] = {
    "cells": {"lora_forward": FORWARD_HEAD +
              "    if dropout_p > 0 and training:\n"
              "        return F.linear(x, weight, bias) + scaling * F.linear(F.linear(F.dropout(x, dropout_p), A), B)\n"
              "    if torch._C._len_torch_dispatch_stack() > 0:   # being counted\n"
              "        return F.linear(x, weight, bias) + scaling * F.linear(F.linear(x, A), B)\n"
              + _MERGED},
    "expect": {"failed_tests": ["lora_forward_memory"],
               "message": {"lora_forward_memory": "allocates"}}}

# -- DoRA and NF4 (issue 25) ----------------------------------------------------------------------------------
NORM_HEAD = "def dora_weight_norm(weight, A, B, scaling):\n"
DORA_HEAD = "def dora_forward(x, weight, bias, A, B, magnitude, scaling):\n"
MERGE_DORA_HEAD = "def merge_dora(weight, A, B, magnitude, scaling):\n"
BOOK_HEAD = "def nf4_code_book(offset=0.9677083):\n"
QUANT_HEAD = "def nf4_quantize(weight, block_size=64):\n"
DEQUANT_HEAD = "def nf4_dequantize(codes, absmax, shape, block_size=64):\n"
DOUBLE_HEAD = "def double_quantize(absmax, block_size=256):\n"
BITS_HEAD = "def bits_per_parameter(block_size=64, double_quant_block_size=None):\n"
PACK_HEAD = "def pack_4bit(codes):\n"
UNPACK_HEAD = "def unpack_4bit(packed, n):\n"
_DORA_LINEAR = (
    "class DoRALinear(nn.Module):\n"
    "    def __init__(self, base, r, alpha, rslora=False):\n"
    "        super().__init__()\n"
    "        if not isinstance(base, nn.Linear):\n"
    "            raise TypeError('DoRALinear needs an nn.Linear')\n"
    "        self.base = base\n"
    "        for p in base.parameters():\n"
    "            p.requires_grad = False\n"
    "        kw = dict(dtype=base.weight.dtype, device=base.weight.device)\n"
    "        self.lora_A = nn.Linear(base.in_features, r, bias=False, **kw)\n"
    "        self.lora_B = nn.Linear(r, base.out_features, bias=False, **kw)\n"
    "        A, B = lora_init(base.in_features, base.out_features, r, **kw)\n"
    "        with torch.no_grad():\n"
    "            self.lora_A.weight.copy_(A)\n"
    "            self.lora_B.weight.copy_(B)\n"
    "        self.s = lora_scaling(alpha, r, rslora)\n"
    "        self.magnitude = nn.Parameter(MAGNITUDE)\n"
    "\n"
    "    def forward(self, x):\n"
    "        return dora_forward(x, self.base.weight, self.base.bias, self.lora_A.weight, self.lora_B.weight,\n"
    "                            self.magnitude, self.s)\n")

# Correct variants: the merged weight's rows scaled by the detached m / ||V|| (no bottleneck), the norm as the square
# root of a sum of squares under no_grad, a merge in float32 whatever the weight's dtype (the precision freedom), and
# the factors held as nn.Linear layers with the magnitude cloned from base.weight's row norms
SAMPLES["lab4_variant_dora_merged_weight"] = {"expect": {"full": True}, "cells": {
    "dora_weight_norm": NORM_HEAD +
    "    dtype = torch.float64 if weight.dtype == torch.float64 else torch.float32\n"
    "    with torch.no_grad():\n"
    "        V = torch.addmm(weight.to(dtype), B.to(dtype), A.to(dtype), alpha=scaling)\n"
    "        return (V * V).sum(dim=1).sqrt()\n",
    "dora_forward": DORA_HEAD +
    "    dtype = torch.promote_types(weight.dtype, torch.float32)\n"
    "    V = weight.to(dtype) + scaling * B.to(dtype) @ A.to(dtype)\n"
    "    scale = magnitude.to(dtype) / V.detach().norm(dim=1)\n"
    "    return F.linear(x.to(dtype), scale[:, None] * V, None if bias is None else bias.to(dtype)).to(x.dtype)\n",
    "merge_dora": MERGE_DORA_HEAD +
    "    with torch.no_grad():\n"
    "        V = weight.float() + scaling * (B.float() @ A.float())\n"
    "        return (V / V.norm(dim=1, keepdim=True) * magnitude.float()[:, None]).to(weight.dtype)\n",
    "DoRALinear": _DORA_LINEAR.replace("MAGNITUDE", "base.weight.detach().norm(dim=1).clone()"),
}}
# NF4 by other roads: the quantiles from scipy, the nearest code by bucketize on the midpoints block by block
# (ties go to the lower code), dequantization block by block, double quantization with a Python float offset and a
# loop, the bits as one formula
SAMPLES["lab4_variant_nf4_bucketize"] = {"expect": {"full": True}, "cells": {
    "nf4_code_book": "from scipy.stats import norm\n\n" + BOOK_HEAD +
    "    import numpy as np\n"
    "    pos = norm.ppf(np.linspace(offset, 0.5, 9)[:-1])\n"
    "    neg = -norm.ppf(np.linspace(offset, 0.5, 8)[:-1])\n"
    "    v = np.sort(np.concatenate([neg, [0.0], pos]))\n"
    "    return torch.tensor(v / v.max(), dtype=torch.float32)\n",
    "nf4_quantize": QUANT_HEAD +
    "    book = nf4_code_book().double()\n"
    "    mids = (book[1:] + book[:-1]) / 2\n"
    "    flat = weight.reshape(-1).double()\n"
    "    codes, absmax = [], []\n"
    "    for start in range(0, flat.numel(), block_size):\n"
    "        block = flat[start:start + block_size]\n"
    "        a = block.abs().max()\n"
    "        absmax.append(a.float())\n"
    "        codes.append(torch.bucketize(block / a if a > 0 else block, mids))\n"
    "    return torch.cat(codes).to(torch.uint8), torch.stack(absmax)\n",
    "nf4_dequantize": DEQUANT_HEAD +
    "    book = nf4_code_book()\n"
    "    parts = [book[c.long()] * a for c, a in zip(codes.split(block_size), absmax.float())]\n"
    "    return torch.cat(parts).reshape(shape)\n",
    "double_quantize": DOUBLE_HEAD +
    "    offset = float(absmax.double().mean())\n"
    "    qs, scales = [], []\n"
    "    for block in (absmax.double() - offset).split(block_size):\n"
    "        scale = block.abs().max() / 127\n"
    "        qs.append(torch.round(block / scale) if scale > 0 else torch.zeros_like(block))\n"
    "        scales.append(scale.float())\n"
    "    return torch.cat(qs).to(torch.int8), torch.stack(scales), offset\n",
    "bits_per_parameter": BITS_HEAD +
    "    constant_bits = 32 if double_quant_block_size is None else 8 + 32 / double_quant_block_size\n"
    "    return 4 + constant_bits / block_size\n",
    "pack_4bit": PACK_HEAD +
    "    flat = codes.reshape(-1).long().tolist()\n"
    "    if len(flat) % 2:\n"
    "        flat.append(0)\n"
    "    return torch.tensor([flat[i] * 16 + flat[i + 1] for i in range(0, len(flat), 2)], dtype=torch.uint8)\n",
    "unpack_4bit": UNPACK_HEAD +
    "    out = []\n"
    "    for byte in packed.tolist():\n"
    "        out += [byte // 16, byte % 16]\n"
    "    return torch.tensor(out[:n], dtype=torch.uint8)\n",
}}

# Bugs the tests catch (each below is a mistake the lab's text warns of; the catalogued ones follow)
# The magnitude taken from a fresh, randomly initialised layer instead of the pretrained one (mlx-examples PR #914:
# DoRALinear.from_linear kept the m of its placeholder nn.Linear)
SAMPLES["lab4_bug_dora_magnitude_from_placeholder"] = {"expect": {"failed_tests": ["DoRALinear_parameters"]}, "cells": {
    "DoRALinear": _DORA_LINEAR.replace(
        "MAGNITUDE", "nn.Linear(base.in_features, base.out_features, **kw).weight.detach().norm(dim=1)")}}
SAMPLES["lab4_bug_dora_bias_scaled"] = {"expect": {"failed_tests": ["dora_forward_value"]}, "cells": {
    "dora_forward": DORA_HEAD +
    "    norm = dora_weight_norm(weight, A, B, scaling)\n"
    "    out = F.linear(x, weight, bias) + scaling * F.linear(F.linear(x, A), B)   # the bias scaled with the rest\n"
    "    return out * (magnitude.to(norm.dtype) / norm).to(x.dtype)\n"}}
SAMPLES["lab4_bug_double_quantize_no_offset"] = {"expect": {"failed_tests": ["double_quantize_value"]}, "cells": {
    "double_quantize": DOUBLE_HEAD +
    "    centred = absmax.float()\n"
    "    n_blocks = -(-centred.numel() // block_size)\n"
    "    blocks = F.pad(centred, (0, n_blocks * block_size - centred.numel())).view(n_blocks, block_size)\n"
    "    scales = blocks.abs().amax(dim=1) / 127\n"
    "    q = torch.round(blocks / torch.where(scales > 0, scales, 1.0)[:, None])\n"
    "    return q.flatten()[:centred.numel()].to(torch.int8), scales, torch.zeros(())\n"}}
# the first code of each pair in the low nibble: a consistent round trip, but not bitsandbytes' layout
SAMPLES["lab4_bug_nibbles_swapped"] = {"expect": {"failed_tests": ["pack_4bit_value", "unpack_4bit_value"]}, "cells": {
    "pack_4bit": PACK_HEAD +
    "    codes = codes.flatten().to(torch.uint8)\n"
    "    if codes.numel() % 2:\n"
    "        codes = torch.cat([codes, codes.new_zeros(1)])\n"
    "    return codes[0::2] | (codes[1::2] << 4)\n",
    "unpack_4bit": UNPACK_HEAD +
    "    return torch.stack([packed & 0x0F, packed >> 4], dim=1).flatten()[:n]\n"}}
SAMPLES["lab4_bug_bits_without_constants"] = {"expect": {"failed_tests": ["bits_per_parameter_value"]}, "cells": {
    "bits_per_parameter": BITS_HEAD + "    return 4.0\n"}}

DEPENDS |= {
    "dora_forward": ["dora_weight_norm"],
    "DoRALinear": ["dora_forward", "dora_weight_norm", "lora_init", "lora_scaling"],
    "nf4_quantize": ["nf4_code_book"],
    "nf4_dequantize": ["nf4_code_book", "nf4_quantize"],
}

for _bug, _function in (("norm_over_inputs", "dora_weight_norm"), ("norm_of_base_weight", "dora_weight_norm"),
                        ("symmetric_code_book", "nf4_code_book"), ("partial_block_dropped", "nf4_quantize"),
                        ("whole_blocks_assumed", "double_quantize")):
    SAMPLES[f"lab4_bug_{_bug}"] = {"cells": {_function: bug_cell(LAB, _bug)},
                                   "expect": {"bug": _bug, "function": _function}}

# Bugs with a source but no entry of the catalogue (a class, or a symptom the replay of values cannot name): the
# tests still catch them. The magnitude frozen: torchtune issue #2250 (after PR #1909, DoRA's magnitudes stopped
# training and DoRA runs equalled LoRA's). The norm left in the graph: against Liu et al. Sec. 4.3.
SAMPLES["lab4_bug_dora_magnitude_frozen"] = {"expect": {"failed_tests": ["DoRALinear_parameters"]}, "cells": {
    "DoRALinear": _DORA_LINEAR.replace("nn.Parameter(MAGNITUDE)",
                                       "nn.Parameter(base.weight.detach().norm(dim=1), requires_grad=False)")}}
SAMPLES["lab4_bug_dora_norm_not_detached"] = {
    "expect": {"failed_tests": ["dora_weight_norm_value", "dora_forward_gradient"]}, "cells": {
        "dora_weight_norm": NORM_HEAD +
        "    compute = torch.promote_types(weight.dtype, torch.float32)\n"
        "    V = weight.to(compute) + scaling * (B.to(compute) @ A.to(compute))\n"
        "    return torch.linalg.vector_norm(V, dim=1)   # left in the graph\n"}}
# NF4 scaled by one absmax for the whole tensor, and the code index taken by rounding onto 16 even steps
SAMPLES["lab4_bug_nf4_global_absmax"] = {"expect": {"failed_tests": ["nf4_quantize_value"]}, "cells": {
    "nf4_quantize": QUANT_HEAD +
    "    flat = weight.detach().flatten().float()\n"
    "    n_blocks = -(-flat.numel() // block_size)\n"
    "    scale = flat.abs().max()\n"
    "    codes = ((flat / scale)[:, None] - nf4_code_book()).abs().argmin(dim=-1)\n"
    "    return codes.to(torch.uint8), scale.repeat(n_blocks)\n"}}
SAMPLES["lab4_bug_nf4_rounded_index"] = {"expect": {"failed_tests": ["nf4_quantize_value"]}, "cells": {
    "nf4_quantize": QUANT_HEAD +
    "    flat = weight.detach().flatten().float()\n"
    "    n_blocks = -(-flat.numel() // block_size)\n"
    "    blocks = F.pad(flat, (0, n_blocks * block_size - flat.numel())).view(n_blocks, block_size)\n"
    "    absmax = blocks.abs().amax(dim=1)\n"
    "    scaled = blocks / torch.where(absmax > 0, absmax, 1.0)[:, None]\n"
    "    codes = torch.round((scaled + 1) * 7.5)   # 16 evenly spaced steps, not the nearest NF4 value\n"
    "    return codes.flatten()[:flat.numel()].to(torch.uint8), absmax\n"}}

# -- issue 41: the dtypes the text pins, and lora_A's law in DoRALinear ------------------------------------------
# the packed bytes keep the codes' dtype: uint8 codes give uint8 bytes, int64 codes int64 "bytes" (torch.equal against
# the uint8 answer does not see it; the text pins uint8)
SAMPLES["lab4_bug_pack_keeps_input_dtype"] = {"expect": {"failed_tests": ["pack_4bit_value"]}, "cells": {
    "pack_4bit": PACK_HEAD +
    "    flat = codes.flatten()\n"
    "    if flat.numel() % 2:\n"
    "        flat = torch.cat([flat, flat.new_zeros(1)])\n"
    "    return (flat[0::2] << 4) | flat[1::2]\n"}}
_DORA_OWN_A = (
    "class DoRALinear(nn.Module):\n"
    "    def __init__(self, base, r, alpha, rslora=False):\n"
    "        super().__init__()\n"
    "        if not isinstance(base, nn.Linear):\n"
    "            raise TypeError('DoRALinear needs an nn.Linear')\n"
    "        self.base = base\n"
    "        base.requires_grad_(False)\n"
    "        kw = dict(dtype=base.weight.dtype, device=base.weight.device)\n"
    "        self.lora_A = nn.Parameter(LORA_A)\n"
    "        self.lora_B = nn.Parameter(torch.zeros(base.out_features, r, **kw))\n"
    "        self.scaling = lora_scaling(alpha, r, rslora)\n"
    "        self.magnitude = nn.Parameter(base.weight.detach().norm(dim=1).clone())\n"
    "\n"
    "    def forward(self, x):\n"
    "        return dora_forward(x, self.base.weight, self.base.bias, self.lora_A, self.lora_B, self.magnitude,\n"
    "                            self.scaling)\n")
# lora_A drawn from a normal law with std 1/sqrt(r) instead of lora_init's uniform one: the LoRALayer of Raschka's
# "Improving LoRA: Implementing Weight-Decomposed Low-Rank Adaptation (DoRA) from Scratch" (2024), which its DoRA
# layer reuses, draws A as torch.randn(in_dim, rank) / sqrt(rank)
SAMPLES["lab4_bug_dora_lora_a_normal"] = {"expect": {"failed_tests": ["DoRALinear_parameters"]}, "cells": {
    "DoRALinear": _DORA_OWN_A.replace("LORA_A", "torch.randn(r, base.in_features, **kw) / math.sqrt(r)")}}
# lora_A zero as well as lora_B: the layer starts at the base (every other test of a new layer passes), but no
# gradient ever reaches A or B (section 1)
SAMPLES["lab4_bug_dora_lora_a_zero"] = {"expect": {"failed_tests": ["DoRALinear_parameters"]}, "cells": {
    "DoRALinear": _DORA_OWN_A.replace("LORA_A", "torch.zeros(r, base.in_features, **kw)")}}
# lora_A from torch.rand not centred: U(0, 1/sqrt(in)) instead of U(-1/sqrt(in), 1/sqrt(in)). Inside the bounds and
# filling them, so only the test of the law (Kolmogorov-Smirnov) sees that no entry is negative
SAMPLES["lab4_bug_dora_lora_a_rand_not_centred"] = {"expect": {"failed_tests": ["DoRALinear_parameters"]}, "cells": {
    "DoRALinear": _DORA_OWN_A.replace("LORA_A", "torch.rand(r, base.in_features, **kw) / math.sqrt(base.in_features)")}}

# -- the walls behind the policy for graded code (issue 39) ---------------------------------------------------
# These use torch's private dispatch machinery, outside the policy (course.toml [policy]: no underscore attribute):
# graded with the policy, their lora_forward is not run and its tests are `refused`. tests/test_grading.py grades
# them without it (`--without-policy`), to show that the memory the OS counts still catches them.
for _name in ("lab4_attack_memory_blind", "lab4_attack_memory_mode_aware"):
    SAMPLES[_name]["policy"] = "off"
