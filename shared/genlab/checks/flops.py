"""FLOP counting with torch.utils.flop_counter.FlopCounterMode.

What is counted: only ops with a registered formula, i.e. the matmul family
(mm, addmm, bmm, baddbmm, matmul, linear), convolutions and their backward, and
the scaled-dot-product-attention kernels. A multiply-add counts as 2 FLOPs, so an
(M, K) @ (K, N) matmul is exactly ``2 * M * N * K``. Elementwise ops, softmax,
normalization and reductions count 0: they are memory-bound and cheap next to
the matmuls, which is the convention of scaling-law FLOP budgets.

SDPA on CPU: ``F.scaled_dot_product_attention`` on CPU runs the aten kernel
``_scaled_dot_product_flash_attention_for_cpu``, for which torch (2.13) has no
formula, so plain FlopCounterMode reports **0 FLOPs** for CPU attention (any
dtype, with or without a mask or grad), while CUDA kernels report
``4 * B * H * Tq * Tk * D``. We register torch's own attention formulas for the
CPU kernel and its backward so a lab counts the same on a laptop as on a GPU
(the count ignores causal masking, as torch's CUDA formula does). The backward
formula counts 2.5x the forward (five matmuls, recomputing the scores as flash
kernels do), so forward+backward reads 3.5x the forward, where the unfused math
backend's bmm's read 3x.
"""

from __future__ import annotations

from typing import Any, Callable

import torch
import torch.utils.flop_counter as flop_counter
from torch.utils.flop_counter import FlopCounterMode

from .remote import remote_hook

aten = torch.ops.aten


def _cpu_sdpa_flops(query_shape, key_shape, value_shape, *args, out_shape=None, **kwargs) -> int:
    """QK^T plus attention @ V: the formula torch uses for the CUDA SDPA kernels."""
    return flop_counter.sdpa_flop_count(query_shape, key_shape, value_shape)


def _cpu_sdpa_backward_flops(grad_out_shape, query_shape, key_shape, value_shape, *args,
                             out_shape=None, **kwargs) -> int:
    return flop_counter.sdpa_backward_flop_count(grad_out_shape, query_shape, key_shape, value_shape)


# Formulas torch lacks. FlopCounterMode passes tensor *shapes* to these.
EXTRA_FLOP_FORMULAS = {
    aten._scaled_dot_product_flash_attention_for_cpu: _cpu_sdpa_flops,
    aten._scaled_dot_product_flash_attention_for_cpu_backward: _cpu_sdpa_backward_flops,
}


def _without_dynamo_import() -> None:
    # torch wraps FlopCounterMode's dispatch method in torch._disable_dynamo, which imports torch._dynamo
    # (about 800 modules: 1.7 to 2.8 s of CPU measured) at the first op counted, once in every kernel that
    # counts FLOPs. The wrapper only keeps torch.compile from tracing *into* that method, and it caches the
    # function it calls as ``__dynamo_disable`` on the method: set to the method itself, the count is the
    # same and nothing is imported. (genlab.checks.memory's tracker opts out of the wrapper the same way.)
    mode = getattr(flop_counter, "_FlopCounterMode", None)
    raw = getattr(getattr(mode, "__dict__", {}).get("__torch_dispatch__"), "__wrapped__", None)
    if raw is not None and getattr(raw, "__dynamo_disable", None) is None:
        setattr(raw, "__dynamo_disable", raw)


_without_dynamo_import()


def count_flops(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> int:
    """Total FLOPs of ``fn(*args, **kwargs)`` as counted by FlopCounterMode (see module doc).

    Only what runs inside the call is counted: include ``.backward()`` in `fn`
    to count the backward pass as well.
    """
    measure = remote_hook(fn)
    if measure is not None:  # fn is a proxy: the function runs, and is measured, elsewhere
        return measure("count_flops", args, kwargs)
    with FlopCounterMode(display=False, custom_mapping=EXTRA_FLOP_FORMULAS) as counter:
        fn(*args, **kwargs)
    return counter.get_total_flops()
